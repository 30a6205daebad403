"""MatMulScaleFusion: scalar Mul/Div around a MatMul become a FusedMatMul's ``alpha`` (``matmul_scale_fusion.cc``).

ORT registers it at Level2 for the CPU, ACL, CUDA and DML EPs (no excluded initializers)::

    x ─> Mul(s1) ─┐                                   x ─┐
                  MatMul ─> Div(s3) ─> y     =>         com.microsoft.FusedMatMul(alpha = s1 * s2 / s3) ─> y
    w ─> Mul(s2) ─┘                                   w ─┘                    ("<matmul>/MatMulScaleFusion/")

Rules (ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot, so a scale reached only through a
  node fused in this call waits for the next call of the pass (chained scales fold one per call);
* the node is on a compatible EP (CPU/ACL/CUDA/DML: an unassigned node is skipped) and is a MatMul (ONNX 9, 13;
  not 1) or a com.microsoft FusedMatMul (1); on the CPU EP every input's type is float (1.32.0: double MatMuls
  are left alone; later ORT versions accept double too);
* **scale node** (``GetScaleFromNode``): a Div (7, 13, 14) whose input 1, or a Mul (7, 13, 14) whose input 0, else
  input 1, is a *scalar constant*: a constant initializer (outer scopes included) whose NodeArg holds exactly one
  element with a rank no larger than the rank of the node's other input (0 when that shape is unknown), so a
  ``[1]`` scale needs a ranked other input and ``[1,1]`` one of rank >= 2. The value (uint32, uint64, int32,
  int64, float16, float, double or bfloat16) is read as float32; a Div contributes ``1.0f / value``;
* **leading scales**: each input edge of the node (in edge order) from a scale node on the node's EP whose
  non-scale input has a known shape of rank >= 1; the fused node reads that non-scale input instead;
* the shapes read here (the non-scale input's, and the other input's rank for the scalar check) are the NodeArg's
  as ORT's Resolve infers it, which reads constant initializers' data: a Reshape by a constant has a shape even at
  opset 5-13, where ONNX's inference without the data gives none (``View.DATA``; DistilBERT's ``Reshape(0, -1, N,
  H) -> Transpose -> Div(sqrt H) -> MatMul``);
* **trailing scale**: only when the node has exactly one output edge, none into a subgraph and no graph output;
  the consumer is a scale node on the node's EP; the fused node writes the scale node's output;
* nothing to merge: nothing happens. Otherwise ``alpha`` = the FusedMatMul's float ``alpha`` (else 1) times each
  leading scale, then the trailing one, in float32;
* the new node: ``GenerateNodeName(<name> + "/MatMulScaleFusion/")``, com.microsoft FusedMatMul, "Fused MatMul and
  Scale", the node's EP, attributes = a copy of the FusedMatMul's (alpha keeps its place) or, for a MatMul, just
  ``alpha`` (Resolve adds the schema defaults); the node goes, a trailing scale node goes, a leading scale node goes
  only if it has no other output edge and produces no graph output; scale initializers nobody reads any more vanish
  at Resolve.

The fused node's output shape comes from ORT's ``FusedMatMulShapeInference``, which the graph core gives ONNX shape
inference (:mod:`qdqopt.graph.contrib`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Edge, Graph, Node, View
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges
from qdqopt.passes.qdq_util import is_supported_op, produces_graph_output

__all__ = ["MatMulScaleFusion"]

TP = onnx.TensorProto
_SCALE_VERSIONS = (7, 13, 14)
#: ``k_supported_data_types``: EPs without an entry accept any input type.
_SUPPORTED_TYPES: dict[str, tuple[int, ...]] = {
    "CUDAExecutionProvider": (TP.FLOAT16, TP.FLOAT, TP.DOUBLE, TP.BFLOAT16),
    "CPUExecutionProvider": (TP.FLOAT,),  # 1.32.0; double came later (ORT #28145)
}
#: ``MLTypeCallDispatcher<uint32_t, uint64_t, int32_t, int64_t, MLFloat16, float, double, BFloat16>``.
_SCALAR_TYPES = (TP.UINT32, TP.UINT64, TP.INT32, TP.INT64, TP.FLOAT16, TP.FLOAT, TP.DOUBLE, TP.BFLOAT16)


@dataclass(frozen=True)
class _Merge:
    """``ScaleMergeInfo``: the scale node, its scale, the def moved from it and the fused node's slot for it."""

    scale_node: Node
    scale: np.float32
    moved_value: str
    fused_slot: int


#: the op types MatMulScaleFusion starts from
_MATMULS = ("MatMul", "FusedMatMul")


class MatMulScaleFusion(GraphTransformer):
    """Fold scalar Mul/Div before or after a MatMul into a FusedMatMul's ``alpha``."""

    name = "MatMulScaleFusion"
    compatible_eps = ("CPUExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._process(graph, node), ops=_MATMULS)

    def _process(self, graph: Graph, node: Node) -> bool:
        if not self.node_is_compatible(node):
            return False
        if not (
            is_supported_op(node, "MatMul", (9, 13)) or is_supported_op(node, "FusedMatMul", (1,), "com.microsoft")
        ):
            return False
        allowed = _SUPPORTED_TYPES.get(node.ep)
        if allowed is not None and not all(graph.elem_type(v) in allowed for v in node.inputs):
            return False
        inputs = _input_merges(graph, node)
        outputs = _output_merges(graph, node)
        if not inputs and not outputs:
            return False
        _fuse(graph, node, inputs, outputs)
        return True


def _scalar_constant(graph: Graph, name: str, max_rank: int) -> np.float32 | None:
    """``GetScalarConstantInitializer``: the value as float32 when ``name`` is a constant initializer of one element
    and rank <= ``max_rank``."""
    tensor = graph.constant_initializer(name)
    if tensor is None:
        return None
    shape = graph.shape(name)
    if shape is None:  # ORT_ENFORCE: an initializer's NodeArg always has a shape
        raise ModelError(f"constant initializer {name!r} has no shape")
    dims = [d for d in shape if isinstance(d, int)]
    if len(dims) != len(shape):
        return None  # a symbolic dim: TensorShape size -1
    if int(np.prod(dims, dtype=np.int64)) != 1 or len(dims) > max_rank:
        return None
    if tensor.data_type not in _SCALAR_TYPES:
        raise ModelError(f"MatMulScaleFusion: scale {name!r} has an unsupported data type {tensor.data_type}")
    value = graph.constant_array(name)
    assert value is not None
    return np.float32(value.reshape(-1)[0])


def _scale_from_node(graph: Graph, node: Node) -> tuple[np.float32, int] | None:
    """``GetScaleFromNode``: (scale, index of the scale input) for a Div or Mul by a scalar constant."""
    if is_supported_op(node, "Div", _SCALE_VERSIONS):
        divisor = _scalar_constant(graph, node.inputs[1], len(graph.shape(node.inputs[0], view=View.DATA) or ()))
        if divisor is None:
            return None
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            return np.float32(1.0) / divisor, 1
    if is_supported_op(node, "Mul", _SCALE_VERSIONS):
        for index in (0, 1):
            other = graph.shape(node.inputs[1 - index], view=View.DATA)
            multiplier = _scalar_constant(graph, node.inputs[index], len(other or ()))
            if multiplier is not None:
                return multiplier, index
    return None


def _scale_neighbours(
    graph: Graph, node: Node, edges: Iterable[Edge], *, upstream: bool
) -> Iterator[tuple[Edge, Node, np.float32, int]]:
    """Per edge, in order, the node at its other end (the producer when ``upstream``, else the consumer) if it runs
    on ``node``'s EP and scales by a constant: the edge, that scale node, the scale and the scale's input slot."""
    for edge in edges:
        scale_node = graph.node(edge.src if upstream else edge.dst)
        assert scale_node is not None
        if scale_node.ep != node.ep:
            continue
        found = _scale_from_node(graph, scale_node)
        if found is not None:
            scale, scale_index = found
            yield edge, scale_node, scale, scale_index


def _input_merges(graph: Graph, node: Node) -> list[_Merge]:
    merges: list[_Merge] = []
    found = _scale_neighbours(graph, node, graph.input_edges(node), upstream=True)
    for edge, scale_node, scale, scale_index in found:
        unscaled = scale_node.inputs[1 - scale_index]
        shape = graph.shape(unscaled, view=View.DATA)
        if shape is not None and len(shape) > 0:
            merges.append(_Merge(scale_node, scale, unscaled, edge.dst_slot))
    return merges


def _output_merges(graph: Graph, node: Node) -> list[_Merge]:
    if not check_output_edges(graph, node, 1):
        return []
    found = _scale_neighbours(graph, node, graph.output_edges(node), upstream=False)
    return [_Merge(scale_node, scale, scale_node.outputs[0], edge.src_slot) for edge, scale_node, scale, _ in found]


def _fuse(graph: Graph, node: Node, input_merges: list[_Merge], output_merges: list[_Merge]) -> None:
    is_fused = node.op_type == "FusedMatMul"
    attr_map = node.attr_map.copy() if is_fused else None
    attributes = dict(node.attributes) if is_fused else {}
    alpha = attributes.get("alpha")
    total = np.float32(alpha.f) if alpha is not None and alpha.type == onnx.AttributeProto.FLOAT else np.float32(1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        for merge in (*input_merges, *output_merges):
            total = np.float32(total * merge.scale)
    attributes["alpha"] = onnx.helper.make_attribute("alpha", float(total))
    if attr_map is not None:
        attr_map.insert("alpha")

    inputs = list(node.inputs)
    for merge in input_merges:
        inputs[merge.fused_slot] = merge.moved_value
    outputs = list(node.outputs)
    for merge in output_merges:
        outputs[merge.fused_slot] = merge.moved_value

    # which leading scale nodes go: those whose only output edges led to the node (ORT removes the merged edge,
    # then checks that no output edge and no graph output is left)
    to_remove: list[Node] = [node]
    for merge in input_merges:
        scale_node = merge.scale_node
        if any(n is scale_node for n in to_remove):
            continue
        others = [e for e in graph.output_edges(scale_node) if e.dst != node.index]
        if not others and not produces_graph_output(graph, scale_node):
            to_remove.append(scale_node)
    to_remove.extend(merge.scale_node for merge in output_merges)

    graph.add_node(
        graph.generate_node_name(node.name + "/MatMulScaleFusion/"),
        "FusedMatMul",
        inputs,
        outputs,
        domain="com.microsoft",
        attributes=attributes,
        attr_map=attr_map,
        doc_string="Fused MatMul and Scale",
        ep=node.ep,
    )
    for dead in to_remove:
        graph.remove_node(dead)


# ------------------------------------------------------------------------------------ FusedMatMul shape inference
