"""Actions of ``QDQSelectorActionTransformer`` (ORT's ``qdq_actions.cc`` / ``actions.cc``, notes §5).

``QDQReplaceWithNew`` actions replace the whole unit by one node that takes the target's name, doc_string, EP and
(copied) attribute map::

    DQ(xq,xs,xz) ─> Conv ─> Q(ys,yz) ─> yq        =>     QLinearConv(xq,xs,xz, wq,ws,wz, ys,yz, [b]) ─> yq
    DQ(wq,ws,wz) ─┘

Before that, a DQ/Q without an explicit zero point gets the GUID zero-point initializer (``SetOptionalZeroPoint``).
Drop actions (``MergeIntoTargetFixed``) keep the target and move the DQ's input and the Q's output onto it::

    xq ─> DQ ─> Reshape ─> Q ─> yq      =>     xq ─> Reshape ─> yq

Nodes of the unit are then removed when all their output edges stay inside the unit.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import tensor_type_proto
from qdqopt.passes.graph_utils import add_replacement_node
from qdqopt.passes.qdq.selectors import Ctx, Selection
from qdqopt.passes.qdq_util import raw_tensor

__all__ = [
    "GUID_INT8",
    "GUID_UINT8",
    "Action",
    "BinaryAction",
    "ConvAction",
    "DropAction",
    "GemmAction",
    "MatMulAction",
    "MatMulNBitsAction",
    "SplitAction",
    "UnaryAction",
    "VariadicAction",
    "WhereAction",
    "pack_nbits",
]

TP = onnx.TensorProto
MS = "com.microsoft"
GUID_INT8 = "init_optional_zero_point_int8_b33fd0fa-cd7b-4b10-ae5a-df64cabfe1f8"
GUID_UINT8 = "init_optional_zero_point_uint8_b33f88f7-c464-43e3-8692-97ac832bb14a"


def _all_nodes(sel: Selection) -> list[Node | None]:
    return [*sel.dq_nodes, sel.target, *sel.q_nodes]


def _removal_order(sel: Selection) -> list[Node | None]:
    clip: list[Node | None] = [sel.clip] if sel.clip is not None else []
    return [*sel.dq_nodes, sel.target, *clip, *sel.q_nodes]


def _live_graph_output(graph: Graph, node: Node) -> bool:
    return any(v and graph.is_graph_output(v) and graph.producer(v) is node for v in node.outputs)


def remove_nodes(graph: Graph, sel: Selection, *, preserve_target: bool) -> None:
    """``SafelyRemoveNodes``: a unit node goes when all its output edges lead into the unit."""
    order = _removal_order(sel)
    members = {n.index for n in order if n is not None}
    for node in order:
        if node is None or (preserve_target and node is sel.target) or graph.node(node.index) is None:
            continue
        if all(e.dst in members for e in graph.output_edges(node)) and not _live_graph_output(graph, node):
            graph.remove_node(node)


def set_optional_zero_points(graph: Graph, ctx: Ctx, sel: Selection) -> None:
    """``SetOptionalZeroPoint::UpdateNodes``: give every Q/DQ of the unit an explicit zero point."""
    for node in _all_nodes(sel):
        if node is None or node.op_type not in ("DequantizeLinear", "QuantizeLinear"):
            continue
        if len(node.inputs) == 3 and node.inputs[2]:
            continue
        int8 = node.op_type == "DequantizeLinear" and ctx.dq_in_type(node) == TP.INT8
        name, dtype = (GUID_INT8, TP.INT8) if int8 else (GUID_UINT8, TP.UINT8)
        if not graph.is_initializer(name):
            tensor = onnx.TensorProto()
            tensor.name = name
            tensor.data_type = dtype
            tensor.raw_data = b"\x00"
            graph.add_initializer(tensor)
            graph.set_value_type(name, tensor_type_proto(dtype, []))
        graph.set_input(node, 2, name)


class Action:
    """An action: :meth:`run` rewrites the graph for one selection."""

    def run(self, graph: Graph, ctx: Ctx, sel: Selection) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def result_op(self, sel: Selection) -> str:
        """The op the unit becomes (``domain.op`` for non-ONNX domains); the target's op for drop actions."""
        return sel.target.op_type


class MatMulNBitsAction(Action):
    """``DQMatMulToMatMulNBitsAction``: weight-only DQ -> MatMul/Gemm becomes ``com.microsoft.MatMulNBits``::

    w(int4 [K, N]) ─> DQ ─> MatMul(A, .)      =>   MatMulNBits(A, w_T [N, nb, blob], ws_T [N*nb], [wz_T])
    """

    def __init__(self, accuracy_level: int = 4, block_size_option: int = 0) -> None:
        self.accuracy_level = accuracy_level
        self.block_size_option = block_size_option

    def result_op(self, sel: Selection) -> str:
        return "com.microsoft.MatMulNBits"

    def block_size(self, dq: Node, k: int) -> int:
        attr = dq.attr_int("block_size", 0)
        if attr > 0:
            return attr
        opt = self.block_size_option
        if opt == 0:
            return 32
        if opt > 0:
            return opt
        best, best_pad = 16, None
        bs = 16
        while bs <= min(k, 256) or bs == 16:
            pad = -(-k // bs) * bs - k
            if best_pad is None or pad <= best_pad:
                best, best_pad = bs, pad
            bs *= 2
            if bs > min(k, 256):
                break
        return best

    def run(self, graph: Graph, ctx: Ctx, sel: Selection) -> None:
        from qdqopt.graph.stdhash import StdUnorderedMap
        from qdqopt.passes.qdq.selectors import NBITS_TYPES
        from qdqopt.passes.qdq_util import constant_array, constant_initializer

        dq = sel.dq_nodes[0]
        assert dq is not None
        target = sel.target
        w_t = constant_initializer(graph, dq.inputs[0])
        s_t = constant_initializer(graph, dq.inputs[1])
        assert w_t is not None and s_t is not None
        dtype = int(w_t.data_type)
        bits = NBITS_TYPES[dtype]
        signed = dtype in (TP.INT2, TP.INT4, TP.INT8)
        k, n = (int(d) for d in w_t.dims)
        bs = self.block_size(dq, k)
        w = constant_array(graph, dq.inputs[0])
        scale = constant_array(graph, dq.inputs[1])
        assert w is not None and scale is not None
        zp_name = dq.inputs[2] if len(dq.inputs) > 2 else ""
        zp = constant_array(graph, zp_name) if zp_name else None
        nb = -(-k // bs)
        scale2 = _expand(scale, nb, n)
        zp2 = _expand(zp, nb, n) if zp is not None else None
        packed_w, packed_s, packed_z = pack_nbits(np.asarray(w).astype(np.int64), scale2, zp2, bits, bs, signed)
        if zp2 is None and not signed:
            packed_z = pack_nbits(np.zeros((k, n), np.int64), scale2, np.zeros((nb, n), np.int64), bits, bs, False)[2]
        # names first (GenerateNodeArgName), in weight, scale, zp order
        w_name = graph.generate_value_name(dq.inputs[0] + "_T")
        s_name = graph.generate_value_name(dq.inputs[1] + "_T")
        z_name = ""
        if zp_name:
            z_name = graph.generate_value_name(zp_name + "_T")
        elif not signed:
            z_name = graph.generate_value_name("fused_DQ_MatMul_zero_point_T")
        extras = StdUnorderedMap()
        values = {"K": k, "N": n, "accuracy_level": self.accuracy_level, "bits": bits, "block_size": bs}
        for key in values:
            extras.insert(key)
        attr_map = target.attr_map.copy()
        attributes = dict(target.attributes)
        for key in extras:
            attr_map.insert(key)
            attributes[key] = onnx.helper.make_attribute(key, values[key])
        inputs = [target.inputs[0], w_name, s_name] + ([z_name] if z_name else [])
        node = add_replacement_node(
            graph, target, "MatMulNBits", [], list(target.outputs), domain=MS, attributes=attributes, attr_map=attr_map
        )
        tensors = [
            raw_tensor(w_name, TP.UINT8, [n, nb, (bs * bits + 7) // 8], packed_w.tobytes()),
            raw_tensor(s_name, int(s_t.data_type), [n * nb], packed_s.astype(scale.dtype).tobytes()),
        ]
        if z_name and packed_z is not None:
            tensors.append(raw_tensor(z_name, TP.UINT8, [int(packed_z.size)], packed_z.tobytes()))
        for tensor in tensors:
            graph.add_initializer(tensor)
            graph.set_value_type(tensor.name, tensor_type_proto(tensor.data_type, list(tensor.dims)))
        for slot, value in enumerate(inputs):
            graph.set_input(node, slot, value)
        if target.op_type == "Gemm":
            for key in ("alpha", "beta", "transA", "transB"):
                graph.remove_attribute(node, key)
            bias = target.inputs[2] if len(target.inputs) > 2 else ""
            if bias:
                while len(node.inputs) < 5:
                    graph.set_input(node, len(node.inputs), "")
                graph.set_input(node, 5, bias)
        remove_nodes(graph, Selection([dq], target, []), preserve_target=False)
        # a 16-bit Q after the target keeps reading the (moved) target output: nothing else to do


def _expand(values: np.ndarray, nb: int, n: int) -> np.ndarray:
    """Per-tensor / per-channel / blockwise parameters as a [nb, N] array."""
    arr = np.asarray(values)
    if arr.ndim == 2:
        return arr
    return np.broadcast_to(arr.reshape(1, -1) if arr.ndim == 1 else arr.reshape(1, 1), (nb, n)).copy()


def pack_nbits(
    w: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, bits: int, bs: int, signed: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The MatMulNBits layouts (notes §5.7): weight [N, nb, blob], scales [N*nb], zero points [N*ceil(nb*bits/8)]."""
    k, n = w.shape
    nb = -(-k // bs)
    blob = (bs * bits + 7) // 8
    off = 1 << (bits - 1) if signed else 0
    mask = (1 << bits) - 1
    per = 8 // bits
    out = np.zeros((n, nb, blob), np.uint8)
    for col in range(n):
        for b in range(nb):
            vals = [(int(w[r, col]) + off) & mask for r in range(b * bs, min((b + 1) * bs, k))]
            if bits == 4 and len(vals) % per:
                vals += [off] * (per - len(vals) % per)
            elif bits in (2, 8):
                vals += [off] * (bs - len(vals))
            for i, v in enumerate(vals):
                out[col, b, i // per] |= v << ((i % per) * bits)
    scales = np.asarray(scale).reshape(nb, n).T.reshape(-1)
    zps = None
    if zp is not None:
        zb = (nb * bits + 7) // 8
        z = np.zeros((n, zb), np.uint8)
        zz = np.asarray(zp).astype(np.int64).reshape(nb, n)
        for col in range(n):
            vals = [(int(zz[b, col]) + off) & mask for b in range(nb)]
            if bits < 8 and len(vals) % per:
                vals += [off] * (per - len(vals) % per)
            for i, v in enumerate(vals):
                z[col, i // per] |= v << ((i % per) * bits)
        zps = z.reshape(-1)
    return out, scales, zps


class DropAction(Action):
    """``MergeIntoTargetFixed``: DQ input 0 -> target input 0, Q output 0 -> target output 0 (dropDQ: input only)."""

    def __init__(self, *, drop_q: bool = True) -> None:
        self.drop_q = drop_q

    def run(self, graph: Graph, ctx: Ctx, sel: Selection) -> None:
        dq = sel.dq_nodes[0]
        assert dq is not None
        target = sel.target
        graph.set_input(target, 0, dq.inputs[0])
        if self.drop_q:
            graph.set_output(target, 0, sel.q_nodes[0].outputs[0])
            remove_nodes(graph, sel, preserve_target=True)
        else:
            remove_nodes(graph, Selection(sel.dq_nodes, target, []), preserve_target=True)


class ReplaceWithNew(Action):
    """``QDQReplaceWithNew``: GUID zero points, pre-step, replacement node, removal."""

    op_type = ""
    domain = ""

    def op(self, sel: Selection) -> tuple[str, str]:
        return self.op_type, self.domain

    def result_op(self, sel: Selection) -> str:
        op, domain = self.op(sel)
        return f"{domain}.{op}" if domain else op

    def extra_attributes(self, sel: Selection) -> dict[str, onnx.AttributeProto]:
        return {}

    def pre_step(self, graph: Graph, sel: Selection) -> None:
        return None

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def run(self, graph: Graph, ctx: Ctx, sel: Selection) -> None:
        set_optional_zero_points(graph, ctx, sel)
        self.pre_step(graph, sel)
        target = sel.target
        attr_map = target.attr_map.copy()
        attributes = dict(target.attributes)
        for name, value in self.extra_attributes(sel).items():
            attr_map.insert(name)
            attributes[name] = value
        inputs, outputs = self.moves(sel)
        op, domain = self.op(sel)
        add_replacement_node(
            graph, target, op, inputs, outputs, domain=domain, attributes=attributes, attr_map=attr_map
        )
        remove_nodes(graph, sel, preserve_target=False)


def _q_params(sel: Selection) -> list[str]:
    q = sel.q_nodes[0]
    return [q.inputs[1], q.inputs[2]]


def _q_outs(sel: Selection) -> list[str]:
    return [v for q in sel.q_nodes for v in q.outputs]


def _dq(sel: Selection, i: int) -> Node:
    node = sel.dq_nodes[i]
    assert node is not None
    return node


class UnaryAction(ReplaceWithNew):
    domain = MS

    def op(self, sel: Selection) -> tuple[str, str]:
        return "QLinear" + sel.target.op_type, MS

    def extra_attributes(self, sel: Selection) -> dict[str, onnx.AttributeProto]:
        if sel.target.op_type == "Softmax":
            return {"opset": onnx.helper.make_attribute("opset", int(sel.target.since_version or 0))}
        return {}

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        return [*_dq(sel, 0).inputs, *_q_params(sel)], _q_outs(sel)


class BinaryAction(ReplaceWithNew):
    def op(self, sel: Selection) -> tuple[str, str]:
        return "QLinear" + sel.target.op_type, MS

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        return [*_dq(sel, 0).inputs, *_dq(sel, 1).inputs, *_q_params(sel)], _q_outs(sel)


class VariadicAction(ReplaceWithNew):
    def op(self, sel: Selection) -> tuple[str, str]:
        return "QLinear" + sel.target.op_type, MS

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        ins = [v for d in sel.dq_nodes if d is not None for v in d.inputs]
        return [*_q_params(sel), *ins], _q_outs(sel)


class ConvAction(ReplaceWithNew):
    op_type = "QLinearConv"

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        ins = [*_dq(sel, 0).inputs, *_dq(sel, 1).inputs, *_q_params(sel)]
        bias = sel.dq_nodes[2] if len(sel.dq_nodes) > 2 else None
        if bias is not None:
            ins.append(bias.inputs[0])
        return ins, _q_outs(sel)


class WhereAction(ReplaceWithNew):
    op_type = "QLinearWhere"
    domain = MS

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        return [sel.target.inputs[0], *_dq(sel, 0).inputs, *_dq(sel, 1).inputs, *_q_params(sel)], _q_outs(sel)


class MatMulAction(ReplaceWithNew):
    def op(self, sel: Selection) -> tuple[str, str]:
        return ("QLinearMatMul", "") if sel.q_nodes else ("MatMulIntegerToFloat", MS)

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        a, b = _dq(sel, 0), _dq(sel, 1)
        if sel.q_nodes:
            return [*a.inputs, *b.inputs, *_q_params(sel)], _q_outs(sel)
        ins = [a.inputs[0], b.inputs[0], a.inputs[1], b.inputs[1], a.inputs[2], b.inputs[2]]
        return ins, list(sel.target.outputs)


class GemmAction(ReplaceWithNew):
    op_type = "QGemm"
    domain = MS

    def pre_step(self, graph: Graph, sel: Selection) -> None:
        graph.remove_attribute(sel.target, "beta")

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        bias = sel.dq_nodes[2] if len(sel.dq_nodes) > 2 else None
        ins = [*_dq(sel, 0).inputs, *_dq(sel, 1).inputs, bias.inputs[0] if bias is not None else ""]
        if sel.q_nodes:
            return [*ins, *_q_params(sel)], _q_outs(sel)
        return ins, list(sel.target.outputs)


class SplitAction(ReplaceWithNew):
    op_type = "Split"

    def moves(self, sel: Selection) -> tuple[list[str], list[str]]:
        target = sel.target
        ins = [_dq(sel, 0).inputs[0]]
        if (target.since_version or 0) >= 13 and len(target.inputs) == 2 and target.inputs[1]:
            ins.append(target.inputs[1])
        return ins, [q.outputs[0] for q in sel.q_nodes]
