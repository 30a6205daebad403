"""MatMulAddFusion: MatMul followed by Add of a bias becomes Gemm (spec §4.5, ``matmul_add_fusion.cc``).

ORT registers it twice, both for any EP: at Level1 (Attention patterns kept for AttentionFusion) and at Level2
(Attention patterns fused too). The one class serves both: after partitioning (Level2) it no longer preserves
Attention patterns::

    2-D A:  A[M,K] -> MatMul(B[K,N]) -> Add(bias) -> y       A -> Gemm(B, bias) -> y        ("<matmul>/MatMulAddFusion")
    N-D A:  A[...,K] -> MatMul -> Add -> y                   A -> Reshape([m,K]) -> Gemm -> Reshape([...,N]) -> y

Rules (ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot;
* MatMul (ONNX 1, 9, 13) with exactly one output edge and no graph output; its consumer is an Add (ONNX 7, 13, 14)
  on the same EP; A and Add's input 0 have the same type, float, float16 or bfloat16; A's and B's shapes are known
  and B has rank 2 (A's NodeArg shape as ORT's Resolve infers it, reading constant initializers: a Reshape by a
  constant has its dims, ``View.DATA``);
* if A's rank is not 2: (Level1 only) skip an Attention pattern (A made by a LayerNormalization whose output edges
  are 1 Add, 3 MatMuls and Shapes, the Add's other input made by an Add; remembered for the pass); every dim of A
  must be known, and both dims of B; ``m`` = product of A's dims but the last;
* the bias is the Add input that is not the MatMul output; its shape must be known and be [N] (any A), or, for 2-D
  A only, [1, N], [M, 1] or [M, N] (dims compared as ORT does: equal values, or equal non-empty symbols);
* N-D: names, in generation order: initializer ``GenerateNodeName(gemm_input_shape)`` (int64 [m, K], raw data),
  arg ``gemm_input_reshape_arg``, node ``gemm_input_reshape`` ("Reshape for gemm_input"), then the same with
  ``gemm_output`` (shape = A's dims with the last replaced by N; the Reshape writes the Add's output);
* the Gemm is ``GenerateNodeName(<matmul name>/MatMulAddFusion)``, "fused Matmul and Add", inputs (A or the input
  Reshape's output, B, bias), output the Add's (or the output Reshape's input), no attributes (Resolve adds the
  defaults); the new nodes take the MatMul's EP; MatMul and Add are removed.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, View, dims_equal
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.qdq_util import is_supported_op, produces_graph_output, tensor_from_array

__all__ = ["MatMulAddFusion"]

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


class _AttentionPatternCache:
    """``AttentionPatternCache``: LayerNormalization and Add nodes already recognised as an Attention subgraph."""

    def __init__(self) -> None:
        self.ln_nodes: set[int] = set()
        self.add_nodes: set[int] = set()

    def is_attention_pattern(self, graph: Graph, matmul: Node, add: Node) -> bool:
        parent = graph.producer(matmul.inputs[0])
        if (parent is not None and parent.index in self.ln_nodes) or add.index in self.add_nodes:
            return True
        if parent is None or parent.op_type != "LayerNormalization":
            return False
        add_count = matmul_count = shape_count = 0
        ln_add: Node | None = None
        edges = graph.output_edges(parent)
        for edge in edges:
            consumer = graph.node(edge.dst)
            assert consumer is not None
            if consumer.op_type == "Add":
                ln_add = consumer
                add_count += 1
            elif consumer.op_type == "MatMul":
                matmul_count += 1
            elif consumer.op_type == "Shape":
                shape_count += 1
        if add_count == 1 and matmul_count == 3 and shape_count == len(edges) - 4:
            assert ln_add is not None
            other = 1 if ln_add.inputs[0] == parent.outputs[0] else 0
            attn_add = graph.producer(ln_add.inputs[other])
            if attn_add is not None and attn_add.op_type == "Add":
                self.ln_nodes.add(parent.index)
                self.add_nodes.add(attn_add.index)
                return True
        return False


class MatMulAddFusion(GraphTransformer):
    """Fuse MatMul + Add into Gemm (with Reshapes around it for N-D inputs)."""

    name = "MatMulAddFusion"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        level2 = ctx.partitioned
        cache = _AttentionPatternCache()
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: _try_fuse(graph, node, cache, preserve_attention=not level2),
            ops=("MatMul",),
        )


def _try_fuse(graph: Graph, matmul: Node, cache: _AttentionPatternCache, *, preserve_attention: bool) -> bool:
    if not is_supported_op(matmul, "MatMul", (1, 9, 13)):
        return False
    edges = graph.output_edges(matmul)
    if len(edges) != 1 or produces_graph_output(graph, matmul):
        return False
    add = graph.node(edges[0].dst)
    assert add is not None
    if not is_supported_op(add, "Add", (7, 13, 14)) or add.ep != matmul.ep:
        return False
    a_type = graph.elem_type(matmul.inputs[0])
    if a_type is None or a_type != graph.elem_type(add.inputs[0]) or a_type not in _FLOATS:
        return False
    a_shape = graph.shape(matmul.inputs[0], view=View.DATA)  # ORT's Resolve reads constants: a Reshape by one has dims
    b_shape = graph.shape(matmul.inputs[1])
    if a_shape is None or b_shape is None or len(b_shape) != 2:
        return False
    need_reshape = len(a_shape) != 2
    dim_n = b_shape[1]
    m = k = n = 0
    if need_reshape:
        if cache.is_attention_pattern(graph, matmul, add) and preserve_attention:
            return False
        a_dims = [d for d in a_shape if isinstance(d, int) and d >= 0]
        if len(a_dims) != len(a_shape):
            return False
        k_dim = b_shape[0]
        if not isinstance(k_dim, int) or not isinstance(dim_n, int):
            return False
        m = int(np.prod(a_dims[:-1], dtype=np.int64))
        k, n = k_dim, dim_n
    bias_slot = 1 if matmul.outputs[0] == add.inputs[0] else 0
    bias = add.inputs[bias_slot]
    bias_shape = graph.shape(bias)
    if bias_shape is None:
        return False
    valid = (
        (len(bias_shape) == 1 and dims_equal(bias_shape[0], dim_n))
        or (not need_reshape and len(bias_shape) == 2 and bias_shape[0] == 1 and dims_equal(bias_shape[1], dim_n))
        or (
            not need_reshape
            and len(bias_shape) == 2
            and dims_equal(bias_shape[0], a_shape[0])
            and (bias_shape[1] == 1 or dims_equal(bias_shape[1], dim_n))
        )
    )
    if not valid:
        return False

    gemm_inputs = [*matmul.inputs, bias]
    gemm_output = add.outputs[0]
    if need_reshape:
        gemm_inputs[0] = _add_reshape(graph, matmul, "gemm_input", matmul.inputs[0], None, [m, k], [m, k])
        gemm_output = _add_reshape(graph, matmul, "gemm_output", None, add.outputs[0], [*a_dims[:-1], n], [m, n])
    graph.add_node(
        graph.generate_node_name(matmul.name + "/MatMulAddFusion"),
        "Gemm",
        gemm_inputs,
        [gemm_output],
        doc_string="fused Matmul and Add",
        ep=matmul.ep,
    )
    graph.remove_node(matmul)
    graph.remove_node(add)
    return True


def _add_reshape(
    graph: Graph,
    matmul: Node,
    base: str,
    source: str | None,
    target: str | None,
    shape: list[int],
    arg_dims: list[int],
) -> str:
    """One Reshape around the Gemm; returns the new intermediate value (typed ``arg_dims``, as ORT types it)."""
    shape_name = graph.generate_node_name(base + "_shape")
    graph.add_initializer(tensor_from_array(np.array(shape, dtype=np.int64), shape_name, onnx.TensorProto.INT64))
    arg = graph.generate_value_name(base + "_reshape_arg")
    elem = graph.elem_type(matmul.inputs[0])
    assert elem is not None
    graph.set_value_type(arg, onnx.helper.make_tensor_type_proto(elem, arg_dims))
    graph.add_node(
        graph.generate_node_name(base + "_reshape"),
        "Reshape",
        [source if source is not None else arg, shape_name],
        [arg if target is None else target],
        doc_string="Reshape for " + base,
        ep=matmul.ep,
    )
    return arg
