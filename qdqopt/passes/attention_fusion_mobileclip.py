"""AttentionFusion's MobileCLIP form (``TryFuseMobileClipMHA`` in ``attention_fusion.cc``, microsoft/onnxruntime#27883,
in 1.32), tried on every node before the LayerNormalization forms::

    before                                                             after
    Reshape -> Transpose(0,2,1) -> qkv MatMul(W x 3W) -> Reshape(., ., 3, N, H)   ... -> qkv MatMul -> Split(axis 2,
      -> Split(axis 2, 3 outputs)                                                   [W, W, W]) -> MultiHeadAttention
      q: Transpose(2,0,3,1,4) -> Squeeze(0) -> Mul(scale)                           (num_heads N, scale)
      k: Squeeze(2) -> Transpose(0,2,3,1)                                           -> Reshape -> Gemm -> Reshape
      v: Transpose(2,0,3,1,4) -> Squeeze(0)                                         (the projection, normalized)
      q.k MatMul -> Softmax(-1) -> MatMul(., v) -> Transpose(0,2,1,3) -> Reshape
      -> projection: MatMul + Add, Gemm, or Reshape -> Gemm -> Reshape

Rules (ORT 1.32; the refusals ORT logs, "MobileClipMHA[<qkv MatMul>]: fusion skipped: <reason>", are the
``no-match`` events; the other checks return silently):

* the node: MatMul (1, 9, 13) unassigned or on a compatible EP, one output edge, input 1 an initializer; its input 0
  a Transpose perm (0, 2, 1) with one output edge, whose input is a Reshape with one output edge (the public
  source lists Reshape 5, 13, 14, Transpose 1, 13 and Squeeze 13; 1.32.0 fuses Reshape-19/21/23, Transpose-21/23
  and Squeeze-21/23 too, so the newer versions are accepted here);
* each next node is the only consumer of the output it reads (``GetOnlyChildByOutputIndex``) and of the op named:
  Reshape (5, 13, 14, one output edge) -> Split (13, 18; 3 outputs; ``axis`` 2) -> q Transpose (1, 13) perm
  (2, 0, 3, 1, 4), k Squeeze (13) axes input [2], v Transpose perm (2, 0, 3, 1, 4) -> q and v Squeeze (13) axes [0]
  -> q Mul (7, 13, 14) by a float scalar constant (``scale``; the other input the q Squeeze), k Transpose (0, 2, 3,
  1) -> q.k MatMul (1, 9, 13; input 1 the k Transpose; one output edge) -> Softmax (1, 11, 13; ``axis`` -1; one
  output edge) -> MatMul (input 1 the v Squeeze; one output edge) -> Transpose (0, 2, 1, 3; one output edge) ->
  Reshape (one output edge) -> projection: a MatMul (1, 9, 13; input 1 an initializer; one output edge) then an
  Add (7, 13, 14; one output edge), or a Gemm (7, 9, 11, 13; one output edge), or a Reshape -> Gemm -> Reshape;
* the qkv Reshape's shape a constant ``(., ., 3, N, H)`` with ``N, H > 0``: W = N * H; the projection's weight
  ``[W, W]`` and bias ``[W]`` (either Add input; a Gemm: alpha and beta 1, no transposes, B and C initializers);
  the qkv weight ``[W, 3W]``; every matched node unassigned or on the qkv MatMul's EP.

Rewrite: ``mobileclip_mha_output`` (the qkv MatMul output's type with the last dim W); the projection (unless it is
the Reshape -> Gemm -> Reshape form, whose first Reshape then reads the new output) becomes Reshape
(``MobileClipProjGemmInputReshape``) -> Gemm (``<name>/MobileClipProjectionGemm``) -> Reshape
(``MobileClipProjGemmOutputReshape``) with new ``[m, k]`` / ``[m, n]`` values and int64 shape initializers, which
needs the projection input's shape fully known (else the fusion stops there, refused); a Split
(``MobileClipSplitForMHA``, sizes ``[W, W, W]``, ``axis`` 2) of the qkv MatMul output into untyped
``mobileclip_mha_q/k/v``; the com.microsoft MultiHeadAttention (``MobileClipMultiHeadAttention``, ``num_heads``,
``scale``); both on the qkv MatMul's EP; the matched nodes from the qkv Reshape on are removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import onnx

from qdqopt.events import NoMatch
from qdqopt.graph import Graph, Node, View
from qdqopt.passes.attention_fusion_helper import (
    float_scalar,
    perm_is,
    reshape_constant,
    validate_matmul_initializer,
    validate_shape,
)
from qdqopt.passes.graph_utils import (
    append_tensor_from_initializer,
    check_output_edges,
    constant_initializer,
    input_node,
    is_initializer,
    is_supported_op,
    replace_downstream_node_input,
)

__all__ = ["try_fuse_mobileclip_mha"]

_TP = onnx.TensorProto
MS_DOMAIN = "com.microsoft"
#: 1.32 matches the newer versions too (observed: Reshape-19/21/23, Transpose-21/23, Squeeze-21/23 fuse)
_RESHAPE = (5, 13, 14, 19, 21, 23, 24, 25)
_TRANSPOSE = (1, 13, 21, 23, 24, 25)
_SQUEEZE = (13, 21, 23, 24, 25)
_MATMUL = (1, 9, 13)
_GEMM = (7, 9, 11, 13)


def _only_child(
    graph: Graph, node: Node, index: int, op_type: str, versions: tuple[int, ...] | None = None
) -> Node | None:
    """``GetOnlyChildByOutputIndex``: the one consumer of output ``index``, if it is an ``op_type`` (and, given
    ``versions``, an ai.onnx one at one of them: ``IsSupportedOptypeVersionAndDomain``)."""
    edges = [e for e in graph.output_edges(node) if e.src_slot == index]
    if len(edges) != 1:
        return None
    child = graph.node(edges[0].dst)
    if child is None or child.op_type != op_type:
        return None
    return child if versions is None or is_supported_op(child, op_type, versions) else None


def _one_use_op(node: Node | None, graph: Graph, op_type: str, versions: tuple[int, ...]) -> TypeGuard[Node]:
    """``node`` is an ai.onnx ``op_type`` at one of ``versions`` (``IsSupportedOptypeVersionAndDomain``) with one
    output edge and no graph output (``CheckOutputEdges(.., 1)``)."""
    return node is not None and is_supported_op(node, op_type, versions) and check_output_edges(graph, node, 1)


def _reads(graph: Graph, node: Node, slot: int, producer: Node) -> bool:
    """Input ``slot`` of ``node`` is an output of ``producer``."""
    found = input_node(graph, node, slot)
    return found is not None and found.index == producer.index


def _axes_input_is(graph: Graph, node: Node, axes: list[int]) -> bool:
    """``HasExpectedAxesInput``: input 1 a constant int tensor holding ``axes``."""
    if len(node.inputs) < 2:
        return False
    data: list[int] = []
    return append_tensor_from_initializer(graph, node.inputs[1], data) and data == axes


def _attr_is(node: Node, name: str, value: int) -> bool:
    """``IsAttributeWithExpectedValue`` (int): the attribute is there and has that value."""
    return name in node.attributes and node.attr_int(name) == value


def _ep_ok(node: Node, eps: tuple[str, ...], required: str | None = None) -> bool:
    """``IsSupportedOrUnassignedNode``: unassigned, or on a compatible EP (on ``required`` when given)."""
    if not node.ep:
        return True
    return node.ep == required if required is not None else node.ep in eps


def _bias_either_input(graph: Graph, add: Node, hidden: int) -> bool:
    """``ValidateAddBiasInitializerEitherInput``."""
    return len(add.inputs) >= 2 and any(
        is_initializer(graph, v) and validate_shape(graph, v, [hidden]) for v in add.inputs[:2]
    )


def _gemm_ok(graph: Graph, gemm: Node, hidden: int) -> bool:
    """``ValidateProjectionGemmInitializer``."""
    if len(gemm.inputs) < 3:
        return False
    for name in ("alpha", "beta"):
        if name in gemm.attributes and abs(gemm.attr_float(name, 1.0) - 1.0) > 1e-6:
            return False
    for name in ("transA", "transB"):
        if name in gemm.attributes and gemm.attr_int(name, 0) != 0:
            return False
    b, c = gemm.inputs[1], gemm.inputs[2]
    if not is_initializer(graph, b) or not is_initializer(graph, c):
        return False
    return validate_shape(graph, b, [hidden, hidden]) and validate_shape(graph, c, [hidden])


@dataclass
class _Projection:
    """The projection after the output Reshape: MatMul + Add, a Gemm, or Reshape -> Gemm -> Reshape."""

    matmul: Node | None = None
    add: Node | None = None
    gemm: Node | None = None
    input_reshape: Node | None = None
    output_reshape: Node | None = None

    def nodes(self) -> list[Node]:
        found = [self.matmul, self.add, self.input_reshape, self.gemm, self.output_reshape]
        return [n for n in found if n is not None]


def _projection(graph: Graph, reshape_2: Node) -> _Projection | NoMatch:
    matmul = _only_child(graph, reshape_2, 0, "MatMul")
    if matmul is not None:
        if (
            not _one_use_op(matmul, graph, "MatMul", _MATMUL)
            or len(matmul.inputs) < 2
            or not is_initializer(graph, matmul.inputs[1])
        ):
            return NoMatch("projection MatMul not matched", (matmul.name,))
        add = _only_child(graph, matmul, 0, "Add")
        if not _one_use_op(add, graph, "Add", (7, 13, 14)):
            return NoMatch("projection Add not matched", (matmul.name,))
        return _Projection(matmul=matmul, add=add)
    gemm = _only_child(graph, reshape_2, 0, "Gemm")
    if gemm is not None:
        if not _one_use_op(gemm, graph, "Gemm", _GEMM):
            return NoMatch("projection MatMul/Gemm not matched", (gemm.name,))
        return _Projection(gemm=gemm)
    first = _only_child(graph, reshape_2, 0, "Reshape")
    if not _one_use_op(first, graph, "Reshape", _RESHAPE):
        return NoMatch("projection MatMul/Gemm not matched", (reshape_2.name,))
    gemm = _only_child(graph, first, 0, "Gemm")
    if not _one_use_op(gemm, graph, "Gemm", _GEMM):
        return NoMatch("projection MatMul/Gemm not matched", (first.name,))
    last = _only_child(graph, gemm, 0, "Reshape")
    if not _one_use_op(last, graph, "Reshape", _RESHAPE):
        return NoMatch("normalized projection Gemm output Reshape not matched", (gemm.name,))
    return _Projection(gemm=gemm, input_reshape=first, output_reshape=last)


def _normalized_gemm(
    graph: Graph,
    projection_input: str,
    original_input: str,
    weight: str,
    bias: str,
    output: str,
    base: str,
    ep: str,
) -> list[tuple[str, str, list[str], list[str], str]] | None:
    """``TryCreateNormalizedProjectionGemm``: the three nodes to add (name, op, inputs, outputs, doc string), their
    values typed and shape initializers added; None when the projection input's shape is not fully known."""
    in_shape = graph.shape(original_input, view=View.DATA)  # ORT's Resolve reads constants (a Reshape's shape)
    w_shape = graph.shape(weight)
    if in_shape is None or w_shape is None or len(w_shape) != 2:
        return None
    if len(in_shape) < 2 or not all(isinstance(d, int) and d >= 0 for d in in_shape):
        return None
    k, n = w_shape
    if not isinstance(k, int) or not isinstance(n, int):
        return None
    dims = [int(d) for d in in_shape if isinstance(d, int)]
    m = int(np.prod(dims[:-1], dtype=np.int64))
    if m <= 0 or dims[-1] != k:
        return None
    b_shape = graph.shape(bias)
    if b_shape is None or len(b_shape) != 1 or b_shape[0] != n:
        return None
    elem = graph.elem_type(original_input)
    if elem is None:
        return None

    def tensor_value(base_name: str, shape: list[int]) -> str:
        name = graph.generate_value_name(base_name)
        graph.set_value_type(name, onnx.helper.make_tensor_type_proto(elem, shape))
        return name

    def shape_initializer(base_name: str, values: list[int]) -> str:
        name = graph.generate_value_name(base_name)
        graph.add_initializer(onnx.numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    gemm_in = tensor_value("mobileclip_proj_gemm_input", [m, k])
    gemm_out = tensor_value("mobileclip_proj_gemm_output", [m, n])
    in_shape_arg = shape_initializer("mobileclip_proj_gemm_input_shape", [m, k])
    out_shape_arg = shape_initializer("mobileclip_proj_gemm_output_shape", [*dims[:-1], n])
    return [
        (
            graph.generate_node_name("MobileClipProjGemmInputReshape"),
            "Reshape",
            [projection_input, in_shape_arg],
            [gemm_in],
            "Reshape MobileCLIP projection input for Gemm",
        ),
        (
            graph.generate_node_name(base + "/MobileClipProjectionGemm"),
            "Gemm",
            [gemm_in, weight, bias],
            [gemm_out],
            "Normalized MobileCLIP projection Gemm",
        ),
        (
            graph.generate_node_name("MobileClipProjGemmOutputReshape"),
            "Reshape",
            [gemm_out, out_shape_arg],
            [output],
            "Restore MobileCLIP projection output shape after Gemm",
        ),
    ]


def try_fuse_mobileclip_mha(graph: Graph, qkv_matmul: Node, eps: tuple[str, ...]) -> str | NoMatch | None:
    """``TryFuseMobileClipMHA``: the MultiHeadAttention node's name; a NoMatch where ORT logs "fusion skipped";
    None where it returns silently."""
    if not is_supported_op(qkv_matmul, "MatMul", _MATMUL) or not _ep_ok(qkv_matmul, eps):
        return None
    if (
        not check_output_edges(graph, qkv_matmul, 1)
        or len(qkv_matmul.inputs) < 2
        or not is_initializer(graph, qkv_matmul.inputs[1])
    ):
        return NoMatch("qkv MatMul output count or weight initializer check failed")
    seq_transpose = input_node(graph, qkv_matmul, 0)
    if not _one_use_op(seq_transpose, graph, "Transpose", _TRANSPOSE) or not perm_is(seq_transpose, (0, 2, 1)):
        return None
    in_reshape = input_node(graph, seq_transpose, 0)
    if not _one_use_op(in_reshape, graph, "Reshape", _RESHAPE):
        return NoMatch("missing input Reshape before sequence transpose")
    qkv_reshape = _only_child(graph, qkv_matmul, 0, "Reshape")
    if not _one_use_op(qkv_reshape, graph, "Reshape", _RESHAPE):
        return NoMatch("qkv Reshape after MatMul not matched")
    split = _only_child(graph, qkv_reshape, 0, "Split")
    if split is None or not is_supported_op(split, "Split", (13, 18)) or len(split.outputs) != 3:
        return NoMatch("qkv Split(axis=2, outputs=3) not matched")
    if not _attr_is(split, "axis", 2):
        return NoMatch("qkv Split(axis=2, outputs=3) not matched")
    q_transpose = _only_child(graph, split, 0, "Transpose", _TRANSPOSE)
    k_squeeze = _only_child(graph, split, 1, "Squeeze", _SQUEEZE)
    v_transpose = _only_child(graph, split, 2, "Transpose", _TRANSPOSE)
    if (
        q_transpose is None
        or k_squeeze is None
        or v_transpose is None
        or not perm_is(q_transpose, (2, 0, 3, 1, 4))
        or not perm_is(v_transpose, (2, 0, 3, 1, 4))
        or not _axes_input_is(graph, k_squeeze, [2])
    ):
        return NoMatch("q/k/v branch entry pattern after Split not matched")
    q_squeeze = _only_child(graph, q_transpose, 0, "Squeeze", _SQUEEZE)
    v_squeeze = _only_child(graph, v_transpose, 0, "Squeeze", _SQUEEZE)
    if q_squeeze is None or v_squeeze is None or not all(_axes_input_is(graph, n, [0]) for n in (q_squeeze, v_squeeze)):
        return NoMatch("q/v squeeze pattern not matched")
    q_mul = _only_child(graph, q_squeeze, 0, "Mul", (7, 13, 14))
    k_transpose = _only_child(graph, k_squeeze, 0, "Transpose", _TRANSPOSE)
    if q_mul is None or k_transpose is None or not perm_is(k_transpose, (0, 2, 3, 1)):
        return NoMatch("q scale Mul or k Transpose(0,2,3,1) not matched")
    if len(q_mul.inputs) < 2:
        return NoMatch("q scale constant not found")
    q_out = q_squeeze.outputs[0]
    first_is_q, second_is_q = q_mul.inputs[0] == q_out, q_mul.inputs[1] == q_out
    scale_input = q_mul.inputs[1] if first_is_q and not second_is_q else None
    if second_is_q and not first_is_q:
        scale_input = q_mul.inputs[0]
    scale = None
    if scale_input is not None and constant_initializer(graph, scale_input) is not None:
        scale = float_scalar(graph, scale_input)
    if scale is None:
        return NoMatch("q scale constant not found")
    qk_matmul = _only_child(graph, q_mul, 0, "MatMul")
    if not _one_use_op(qk_matmul, graph, "MatMul", _MATMUL) or not _reads(graph, qk_matmul, 1, k_transpose):
        return NoMatch("qk MatMul not matched")
    softmax = _only_child(graph, qk_matmul, 0, "Softmax")
    if not _one_use_op(softmax, graph, "Softmax", (1, 11, 13)) or not _attr_is(softmax, "axis", -1):
        return NoMatch("Softmax(axis=-1) not matched")
    qkv_matmul_1 = _only_child(graph, softmax, 0, "MatMul")
    if not _one_use_op(qkv_matmul_1, graph, "MatMul", _MATMUL) or not _reads(graph, qkv_matmul_1, 1, v_squeeze):
        return NoMatch("attention-value MatMul not matched")
    transpose_3 = _only_child(graph, qkv_matmul_1, 0, "Transpose")
    if not _one_use_op(transpose_3, graph, "Transpose", _TRANSPOSE) or not perm_is(transpose_3, (0, 2, 1, 3)):
        return NoMatch("output Transpose(0,2,1,3) not matched")
    reshape_2 = _only_child(graph, transpose_3, 0, "Reshape")
    if not _one_use_op(reshape_2, graph, "Reshape", _RESHAPE):
        return NoMatch("output Reshape not matched")
    proj = _projection(graph, reshape_2)
    if isinstance(proj, NoMatch):
        return proj
    dims = reshape_constant(graph, qkv_reshape) if len(qkv_reshape.inputs) >= 2 else None
    if dims is None or len(dims) != 5 or dims[2] != 3 or dims[3] <= 0 or dims[4] <= 0:
        return NoMatch("unable to derive num_heads/head_size from qkv reshape initializer")
    num_heads, head_size = dims[3], dims[4]
    hidden = num_heads * head_size
    if proj.matmul is not None and proj.add is not None:
        weight_ok = validate_matmul_initializer(graph, proj.matmul, hidden)
        if not weight_ok or not _bias_either_input(graph, proj.add, hidden):
            return NoMatch("projection weight/bias shape validation failed")
    elif proj.gemm is not None and not _gemm_ok(graph, proj.gemm, hidden):
        return NoMatch("projection Gemm weight/bias shape validation failed")
    if not validate_shape(graph, qkv_matmul.inputs[1], [hidden, 3 * hidden]):
        return NoMatch("qkv weight shape is not [hidden, 3*hidden]")
    matched = [seq_transpose, in_reshape, qkv_reshape, split, q_transpose, k_squeeze, v_transpose, q_squeeze]
    matched += [v_squeeze, q_mul, k_transpose, qk_matmul, softmax, qkv_matmul_1, transpose_3, reshape_2]
    matched += proj.nodes()
    if not _ep_ok(qkv_matmul, eps) or not all(_ep_ok(n, eps, qkv_matmul.ep) for n in matched):
        return NoMatch("matched nodes are assigned to incompatible execution providers")
    # the rewrite
    ep = qkv_matmul.ep
    qkv_type = graph.type_proto(qkv_matmul.outputs[0])
    mha_output = graph.generate_value_name("mobileclip_mha_output")
    if qkv_type is not None and qkv_type.HasField("tensor_type"):
        out_type = onnx.TypeProto()
        out_type.CopyFrom(qkv_type)
        shape = out_type.tensor_type.shape
        if len(shape.dim) > 0:
            last = shape.dim[len(shape.dim) - 1]
            last.Clear()
            last.dim_value = hidden
        graph.set_value_type(mha_output, out_type)
    new_nodes: list[tuple[str, str, list[str], list[str], str]] = []
    remove_proj: list[Node] = []
    if proj.matmul is not None and proj.add is not None:
        bias_idx = 1 if proj.matmul.outputs[0] == proj.add.inputs[0] else 0
        made = _normalized_gemm(
            graph,
            mha_output,
            proj.matmul.inputs[0],
            proj.matmul.inputs[1],
            proj.add.inputs[bias_idx],
            proj.add.outputs[0],
            proj.matmul.name,
            proj.matmul.ep,
        )
        if made is None:
            return NoMatch("projection MatMul/Add could not be rewritten to Gemm")
        new_nodes, remove_proj = made, [proj.matmul, proj.add]
    elif proj.input_reshape is None and proj.gemm is not None:
        made = _normalized_gemm(
            graph,
            mha_output,
            proj.gemm.inputs[0],
            proj.gemm.inputs[1],
            proj.gemm.inputs[2],
            proj.gemm.outputs[0],
            proj.gemm.name,
            proj.gemm.ep,
        )
        if made is None:
            return NoMatch("projection Gemm could not be normalized")
        new_nodes, remove_proj = made, [proj.gemm]
    proj_ep = (proj.matmul or proj.gemm or qkv_matmul).ep
    sizes = graph.generate_value_name("mobileclip_mha_split_sizes")
    graph.add_initializer(onnx.numpy_helper.from_array(np.asarray([hidden] * 3, dtype=np.int64), sizes))
    q, k, v = (graph.generate_value_name(f"mobileclip_mha_{t}") for t in "qkv")
    split_name = graph.generate_node_name("MobileClipSplitForMHA")
    mha_name = graph.generate_node_name("MobileClipMultiHeadAttention")
    remove = [qkv_reshape, split, q_transpose, q_squeeze, q_mul, k_squeeze, k_transpose, qk_matmul, softmax]
    remove += [v_transpose, v_squeeze, qkv_matmul_1, transpose_3]
    if proj.input_reshape is None:
        remove.append(reshape_2)
    for node in [*remove_proj, *remove]:
        graph.remove_node(node)
    for name, op, inputs, outputs, doc in new_nodes:
        graph.add_node(name, op, inputs, outputs, doc_string=doc, ep=proj_ep)
    graph.add_node(
        split_name,
        "Split",
        [qkv_matmul.outputs[0], sizes],
        [q, k, v],
        attributes={"axis": onnx.helper.make_attribute("axis", 2)},
        doc_string="Split packed MobileCLIP QKV for MultiHeadAttention",
        ep=ep,
    )
    mha = graph.add_node(
        mha_name,
        "MultiHeadAttention",
        [q, k, v],
        [mha_output],
        domain=MS_DOMAIN,
        attributes={
            "num_heads": onnx.helper.make_attribute("num_heads", num_heads),
            "scale": onnx.helper.make_attribute("scale", scale),
        },
        doc_string="Fused MobileCLIP attention subgraph",
        ep=ep,
    )
    if proj.input_reshape is not None:
        replace_downstream_node_input(graph, reshape_2, 0, mha, 0)
        graph.remove_node(reshape_2)
    return mha_name
