"""``DQMatMulNBitsFusion`` (optimizer/dq_matmulnbits_fusion.cc): a blocked uint4 DequantizeLinear weight feeding a
float MatMul or Gemm becomes ``com.microsoft.MatMulNBits`` already at Level1. Registered only with
``session.enable_dq_matmulnbits_fusion=1`` (and QDQ not disabled), after WhereDummyDq, any EP. Two patterns::

    pattern 1 (DQ(axis=2) -> Reshape -> Transpose -> [Cast] -> MatMul/Gemm, weight [N, nb, bs] uint4):
    w ─> DQ(s, [z]) ─> Reshape([N, K]) ─> Transpose(perm [1, 0]) ─> [Cast] ─> MatMul(A, .) ─> y
      =>  MatMulNBits "DQFusedMatMulNBits"(A, w_mnb, s_mnb, [z_mnb | fused_DQ_zp_mnb]) ─> y

    pattern 2 (DQ(axis=0) -> MatMul/Gemm, weight [K, N] uint4):
    w ─> DQ(s [K/bs, N], [z [K/bs, N]]) ─> MatMul(A, .) ─> y
      =>  MatMulNBits "DirectDQFusedMatMulNBits"(A, w_mnb, s_mnb, [z_mnb | direct_DQ_zp_mnb]) ─> y

Rules (ORT 1.32):

* subgraphs first (all of them), then both patterns collected on one topological snapshot of this graph (pattern 2
  skips the MatMuls pattern 1 took), then pattern 1's rewrites, then pattern 2's. Neither the EP nor the op's
  version or domain is checked (op type ``MatMul``/``Gemm``/``DequantizeLinear``/``Reshape``/``Transpose``/``Cast``).
* the DQ: a ``block_size`` attribute, a power of 2 of at least 16; the weight a constant (outer scopes included)
  **uint4** initializer (int4 is refused); the scale a constant float or float16 one of A's element type; a zero
  point, if present, a constant uint4 one. The DQ, Reshape, Transpose and Cast each have exactly one output edge.
* pattern 1: axis 2, the weight ``[N, nb, bs]`` with ``bs == block_size``, K = nb * bs; the Reshape's shape a
  constant int64/int32 initializer of two values, each the expected one (N, K), 0 or -1; the Transpose's perm, if
  given, ``[1, 0]``; known dims must agree: B ``[K, N]``, A's last dim K, Y's last dim N; a Cast must keep the
  element type; a Gemm must have alpha = beta = 1, no transA/transB and a bias, if any, of known shape ``[N]``.
  The scale's and zp's element counts must be N * nb (their shapes are not checked).
* pattern 2: axis 0, the weight ``[K, N]`` with K a multiple of ``block_size``; scale (and zp) of shape
  ``[K/bs, N]``; the Gemm rule as above (no dims of A, B or Y are checked).
* rewrite: names ``GenerateNodeArgName(<w>_mnb)``, ``(<s>_mnb)``, then the zp's; the weight as uint8
  ``[N, nb, bs/2]`` (pattern 1: its bytes as they are; pattern 2: transposed per column), the scales ``[N * nb]`` in
  column order, the zp packed two per byte, ``[N * ceil(nb/2)]``. A zp of all 8s (MatMulNBits' default) is left
  out; a missing one (DQ's default 0) becomes zeros named ``fused_DQ_zp_mnb`` / ``direct_DQ_zp_mnb``. Attributes
  K, N, accuracy_level (``session.qdq_matmulnbits_accuracy_level``), bits = 4, block_size; a Gemm's bias goes to
  input 5 (3 and 4 empty). The node is added under ``GenerateNodeName``, with ORT's doc string and the MatMul's EP,
  taking the MatMul's output; then the MatMul, Cast, Transpose, Reshape and DQ are removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, View
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    constant_array,
    constant_initializer,
    output_edge_count,
)
from qdqopt.passes.qdq.actions import pack_nbits
from qdqopt.passes.qdq_util import raw_tensor

__all__ = ["DQMatMulNBitsFusion"]

MS = "com.microsoft"
TP = onnx.TensorProto
_FLOATS = (TP.FLOAT, TP.FLOAT16)


@dataclass
class _Match:
    matmul: Node
    dq: Node
    chain: tuple[Node, ...] = ()  # pattern 1: Cast (if any), Transpose, Reshape, in ORT's removal order


class DQMatMulNBitsFusion(GraphTransformer):
    """Blocked uint4 DQ weights of MatMul/Gemm to ``com.microsoft.MatMulNBits`` (Level1, opt-in)."""

    name = "DQMatMulNBitsFusion"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        order = graph.topological_order()
        for node in order:
            if node.subgraphs and self.recurse(node, ctx, graph_level):
                modified = True
        accuracy = int(ctx.config.get("session.qdq_matmulnbits_accuracy_level", "4") or "4")
        first = [m for m in (_match_reshape_transpose(graph, n) for n in order) if m is not None]
        taken = {m.matmul.index for m in first}
        second = [m for m in (_match_direct(graph, n) for n in order if n.index not in taken) if m is not None]
        for match in first:
            modified |= _rewrite(graph, match, accuracy, direct=False)
        for match in second:
            modified |= _rewrite(graph, match, accuracy, direct=True)
        return modified


# ------------------------------------------------------------------------------------------------- matching
def _producer(graph: Graph, name: str, op_type: str) -> Node | None:
    node = graph.producer(name) if name else None
    return node if node is not None and node.op_type == op_type else None


def _link(graph: Graph, node: Node) -> bool:
    """A middle node of the weight's path: one output edge and a first input to follow."""
    return output_edge_count(graph, node) == 1 and bool(node.inputs) and bool(node.inputs[0])


def _block_size(dq: Node, axis: int) -> int | None:
    if dq.attributes.get("axis") is None or dq.attr_int("axis", 1) != axis or dq.attributes.get("block_size") is None:
        return None
    bs = dq.attr_int("block_size", 0)
    return bs if bs >= 16 and bs & (bs - 1) == 0 else None


def _dims(tensor: onnx.TensorProto) -> list[int]:
    return [int(d) for d in tensor.dims]


def _gemm_ok(graph: Graph, gemm: Node, n: int) -> bool:
    """``ValidateGemmForFusion``: alpha = beta = 1, no transposes, a bias of known shape [N]."""
    for key in ("alpha", "beta"):
        if key in gemm.attributes and abs(gemm.attr_float(key, 1.0) - 1.0) > 1e-6:
            return False
    if any(key in gemm.attributes and gemm.attr_int(key, 0) != 0 for key in ("transA", "transB")):
        return False
    if len(gemm.inputs) > 2 and gemm.inputs[2]:
        shape = graph.shape(gemm.inputs[2], view=View.DATA)
        if shape is None or len(shape) != 1 or shape[0] != n:
            return False
    return True


def _common(graph: Graph, dq: Node) -> tuple[onnx.TensorProto, onnx.TensorProto] | None:
    """The weight (uint4) and the scale (float/float16, A's type) of ``dq``, or None."""
    if not dq.inputs or not dq.inputs[0] or len(dq.inputs) < 2 or not dq.inputs[1]:
        return None
    w = constant_initializer(graph, dq.inputs[0])
    if w is None or w[1].data_type != TP.UINT4:
        return None
    s = constant_initializer(graph, dq.inputs[1])
    if s is None or s[1].data_type not in _FLOATS:
        return None
    return w[1], s[1]


def _weight_dq(graph: Graph, value: str, axis: int) -> tuple[Node, int, list[int], onnx.TensorProto] | None:
    """The DequantizeLinear producing ``value``, read there alone and blockwise along ``axis``: the node, its block
    size, its uint4 weight's dims and its float scale (:func:`_common`); None when it does not qualify."""
    dq = _producer(graph, value, "DequantizeLinear")
    if dq is None or output_edge_count(graph, dq) != 1:
        return None
    bs = _block_size(dq, axis)
    found = _common(graph, dq) if bs is not None else None
    if found is None or bs is None:
        return None
    w, s = found
    return dq, bs, _dims(w), s


def _a_type_ok(graph: Graph, mm: Node, scale: onnx.TensorProto) -> bool:
    return graph.elem_type(mm.inputs[0], view=View.DATA) == scale.data_type if mm.inputs and mm.inputs[0] else False


def _zp_ok(graph: Graph, dq: Node) -> onnx.TensorProto | bool | None:
    """The zp tensor (uint4), None without one, False when it does not qualify."""
    if len(dq.inputs) <= 2 or not dq.inputs[2]:
        return None
    zp = constant_initializer(graph, dq.inputs[2])
    return zp[1] if zp is not None and zp[1].data_type == TP.UINT4 else False


def _is_matmul(node: Node) -> bool:
    return node.op_type in ("MatMul", "Gemm") and len(node.inputs) >= 2 and bool(node.inputs[1])


def _match_reshape_transpose(graph: Graph, mm: Node) -> _Match | None:
    """``CollectReshapeTransposeMatches`` for one node."""
    if not _is_matmul(mm):
        return None
    cast = _producer(graph, mm.inputs[1], "Cast")
    src = mm.inputs[1]
    if cast is not None:
        if not _link(graph, cast):
            return None
        src = cast.inputs[0]
    tp = _producer(graph, src, "Transpose")
    if tp is None or not _link(graph, tp):
        return None
    rs = _producer(graph, tp.inputs[0], "Reshape")
    if rs is None or not _link(graph, rs):
        return None
    weight = _weight_dq(graph, rs.inputs[0], 2)
    if weight is None:
        return None
    dq, bs, dims, s = weight
    if len(dims) != 3 or min(dims) <= 0 or dims[2] != bs:
        return None
    n, k = dims[0], dims[1] * dims[2]
    if not _a_type_ok(graph, mm, s):
        return None
    shape_name = rs.inputs[1] if len(rs.inputs) > 1 else ""
    shape_t = constant_initializer(graph, shape_name) if shape_name else None
    if shape_t is None or shape_t[1].data_type not in (TP.INT64, TP.INT32):
        return None
    target = np.asarray(constant_array(graph, shape_name)).reshape(-1)
    if target.size != 2 or any(int(v) not in (want, 0, -1) for v, want in zip(target, (n, k), strict=True)):
        return None
    if "perm" in tp.attributes and tp.attr_ints("perm") != [1, 0]:
        return None
    b = graph.shape(mm.inputs[1], view=View.DATA)
    if b is not None and len(b) == 2 and isinstance(b[0], int) and isinstance(b[1], int) and (b[0], b[1]) != (k, n):
        return None
    a = graph.shape(mm.inputs[0], view=View.DATA)
    if a and isinstance(a[-1], int) and a[-1] != k:
        return None
    y = graph.shape(mm.outputs[0], view=View.DATA) if mm.outputs else None
    if y and isinstance(y[-1], int) and y[-1] != n:
        return None
    if mm.op_type == "Gemm" and not _gemm_ok(graph, mm, n):
        return None
    if cast is not None:
        t_in = graph.elem_type(cast.inputs[0], view=View.DATA)
        t_out = graph.elem_type(cast.outputs[0], view=View.DATA)
        if t_in is None or t_out is None or t_in != t_out:
            return None
    if _zp_ok(graph, dq) is False:
        return None
    return _Match(mm, dq, (*((cast,) if cast is not None else ()), tp, rs))


def _match_direct(graph: Graph, mm: Node) -> _Match | None:
    """``CollectDirectDQMatches`` for one node."""
    if not _is_matmul(mm):
        return None
    weight = _weight_dq(graph, mm.inputs[1], 0)
    if weight is None:
        return None
    dq, bs, dims, s = weight
    if len(dims) != 2 or min(dims) <= 0 or dims[0] % bs:
        return None
    k, n = dims
    if _dims(s) != [k // bs, n] or not _a_type_ok(graph, mm, s):
        return None
    zp = _zp_ok(graph, dq)
    if zp is False or (isinstance(zp, onnx.TensorProto) and _dims(zp) != [k // bs, n]):
        return None
    if mm.op_type == "Gemm" and not _gemm_ok(graph, mm, n):
        return None
    return _Match(mm, dq)


# -------------------------------------------------------------------------------------------------- rewrite
def _all_eights(zp: np.ndarray) -> bool:
    """``IsUniformPackedUint4Value(zp, 8)``: MatMulNBits' default zero point, left out."""
    return bool(zp.size) and bool(np.all(zp == 8))


def _rewrite(graph: Graph, match: _Match, accuracy: int, *, direct: bool) -> bool:
    """``ApplyReshapeTransposeFusions`` / ``ApplyDirectDQFusions`` for one match."""
    mm, dq = match.matmul, match.dq
    if graph.node(mm.index) is None or graph.node(dq.index) is None:
        return False
    w_name, s_name = dq.inputs[0], dq.inputs[1]
    zp_name = dq.inputs[2] if len(dq.inputs) > 2 else ""
    # GetInitializedTensor: this graph's own initializers only (an outer-scope weight is skipped here)
    if not graph.is_initializer(w_name) or not graph.is_initializer(s_name):
        return False
    if zp_name and not graph.is_initializer(zp_name):
        return False
    w_t, s_t = graph.initializer(w_name), graph.initializer(s_name)
    assert w_t is not None and s_t is not None
    bs = dq.attr_int("block_size", 0)
    w = np.asarray(graph.array(w_name)).astype(np.int64)
    scale = np.asarray(graph.array(s_name))
    zp = np.asarray(graph.array(zp_name)).astype(np.int64) if zp_name else None
    if direct:
        k, n = _dims(w_t)
        nb = k // bs
        w_kn, s_nbn = w, scale.reshape(nb, n)
        zp_nbn = zp.reshape(nb, n) if zp is not None else None
    else:
        n, nb, _ = _dims(w_t)
        k = nb * bs
        if scale.size != n * nb or (zp is not None and zp.size != n * nb):
            return False
        w_kn, s_nbn = w.reshape(n, k).T, scale.reshape(n, nb).T
        zp_nbn = zp.reshape(n, nb).T if zp is not None else None
    elide = zp_nbn is not None and _all_eights(zp_nbn)
    zeros = np.zeros((nb, n), np.int64)
    packed_w, packed_s, packed_z = pack_nbits(w_kn, s_nbn, zeros if zp_nbn is None else zp_nbn, 4, bs, False)
    assert packed_z is not None
    new_w = graph.generate_value_name(w_name + "_mnb")
    new_s = graph.generate_value_name(s_name + "_mnb")
    new_z = ""
    if not elide:
        base = zp_name + "_mnb" if zp_name else ("direct_DQ_zp_mnb" if direct else "fused_DQ_zp_mnb")
        new_z = graph.generate_value_name(base)
    tensors = [
        raw_tensor(new_w, TP.UINT8, [n, nb, bs // 2], packed_w.tobytes()),
        raw_tensor(new_s, int(s_t.data_type), [n * nb], packed_s.astype(scale.dtype).tobytes()),
    ]
    if new_z:
        tensors.append(raw_tensor(new_z, TP.UINT8, [int(packed_z.size)], packed_z.tobytes()))
    attr_map = StdUnorderedMap()
    values = {"K": k, "N": n, "accuracy_level": accuracy, "bits": 4, "block_size": bs}
    attributes: dict[str, onnx.AttributeProto] = {}
    for key, value in values.items():
        attr_map.insert(key)
        attributes[key] = onnx.helper.make_attribute(key, value)
    for tensor in tensors:
        graph.add_initializer(tensor)
        graph.set_value_type(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    inputs = [mm.inputs[0], *(t.name for t in tensors)]
    if mm.op_type == "Gemm" and len(mm.inputs) > 2 and mm.inputs[2]:
        inputs += [""] * (5 - len(inputs)) + [mm.inputs[2]]
    graph.add_node(
        graph.generate_node_name("DirectDQFusedMatMulNBits" if direct else "DQFusedMatMulNBits"),
        "MatMulNBits",
        inputs,
        [mm.outputs[0]],
        domain=MS,
        attributes=attributes,
        attr_map=attr_map,
        doc_string="Fused from direct DQ(axis=0)+MatMul" if direct else "Fused from DQ+Reshape+Transpose+MatMul",
        ep=mm.ep,
    )
    for node in (mm, *match.chain, dq):
        graph.remove_node(node)
    return True
