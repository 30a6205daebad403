"""``Avx2WeightS8ToU8Transformer`` (qdq_transformer/avx2_weight_s8_to_u8.cc): on an x86 CPU whose U8S8 kernels may
overflow (AVX2 without VNNI's exact sums), the constant int8 weights of the already-quantized CPU operators become
uint8, so the U8U8 kernels run instead::

    QLinearConv(x, xs, xz, w: int8 const, ws, wz: int8 const | absent, ys, yz)
      =>  QLinearConv(x, xs, xz, w_s8_2_u8: uint8 (w XOR 0x80), ws, wz_s8_2_u8 | weight_zp_s8_2_u8 (128), ys, yz)

Registered at Level2 for the CPU EP only with ``session.x64quantprecision=1`` on such a CPU (and QDQ not disabled),
after MatMulActivationFusion and before MatMulNBitsFusion. Every graph, subgraphs first; nodes in one topological
snapshot; a node not on the CPU EP is skipped. By op type, then its ``since_version`` and domain (a deprecated
schema never matches):

==========================  ======================  ===============  ================
operator                    since_version, domain   weight input     weight zp input
==========================  ======================  ===============  ================
QAttention                  1, com.microsoft        1                7
MatMulIntegerToFloat        1, com.microsoft        1                5
DynamicQuantizeMatMul       1, com.microsoft        1                3
QGemm                       1, com.microsoft        3                5
MatMulInteger               10, ai.onnx             1                3
QLinearMatMul               10, ai.onnx (not 21)    3                5
QLinearConv                 10, ai.onnx             3                5
==========================  ======================  ===============  ================

(ORT's table also lists ``DequantizeLinear`` at versions 10 and 13 of com.microsoft, whose DequantizeLinear is
version 1: it never matches; lone DQ weights are QDQS8ToU8Transformer's.) The conversion is
``QDQ::ConvertS8WeightToU8`` (:func:`qdqopt.passes.s8_to_u8.convert_s8_weight_to_u8`): only when some weight lies
outside [-64, 64]; the zero point (present and constant int8, or absent) then always follows.

``com.microsoft.DynamicQuantizeLSTM`` (version 1) has two quantized weights, W (input 1, zp input 9) and R (input 2,
zp input 11), converted together: both must be constant int8 initializers of this graph, and each zp input that
exists (an empty name counts as present, and so refuses) too; both convert, all four initializers, when some value
of W or R lies outside [-64, 64]. New initializers in the order ``W_s8_2_u8``, W's zp, ``R_s8_2_u8``, R's zp.
"""

from __future__ import annotations

from typing import NamedTuple

import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import is_supported_op
from qdqopt.passes.s8_to_u8 import (
    add_converted,
    convert_s8_weight_to_u8,
    flip_int8,
    int8_tensor_to_uint8,
    local_constant,
    raw_uint8_tensor,
)

__all__ = ["S8_OVERFLOW_OPS", "Avx2WeightS8ToU8Transformer", "WeightSlots"]

MS = "com.microsoft"
TP = onnx.TensorProto


class WeightSlots(NamedTuple):
    """ORT's ``OperatorWeightInfo``: the versions and domain an op must have, its weight and zero-point slots."""

    versions: tuple[int, ...]
    domain: str
    weight: int
    zero_point: int


#: ORT's ``s8_overflow_ops`` (its DequantizeLinear entry, which cannot match, left out).
S8_OVERFLOW_OPS: dict[str, WeightSlots] = {
    "QAttention": WeightSlots((1,), MS, 1, 7),
    "MatMulIntegerToFloat": WeightSlots((1,), MS, 1, 5),
    "DynamicQuantizeMatMul": WeightSlots((1,), MS, 1, 3),
    "QGemm": WeightSlots((1,), MS, 3, 5),
    "MatMulInteger": WeightSlots((10,), "", 1, 3),
    "QLinearMatMul": WeightSlots((10,), "", 3, 5),
    "QLinearConv": WeightSlots((10,), "", 3, 5),
}

_LSTM_W, _LSTM_R, _LSTM_W_ZP, _LSTM_R_ZP = 1, 2, 9, 11


class Avx2WeightS8ToU8Transformer(GraphTransformer):
    """Constant int8 weights of quantized CPU operators to uint8 (x86, ``session.x64quantprecision=1``)."""

    name = "Avx2WeightS8ToU8Transformer"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: self._convert(graph, node),
            ops=("DynamicQuantizeLSTM", *S8_OVERFLOW_OPS),
        )

    def _convert(self, graph: Graph, node: Node) -> bool:
        if not self.node_is_compatible(node):
            return False
        if is_supported_op(node, "DynamicQuantizeLSTM", (1,), MS):
            return _convert_lstm(graph, node)
        slots = S8_OVERFLOW_OPS.get(node.op_type)
        if slots is None or not is_supported_op(node, node.op_type, slots.versions, slots.domain):
            return False
        return convert_s8_weight_to_u8(graph, node, slots.weight, slots.zero_point)


def _int8_constant(graph: Graph, name: str) -> onnx.TensorProto | None:
    tensor = local_constant(graph, name)
    return tensor if tensor is not None and tensor.data_type == TP.INT8 else None


def _convert_lstm(graph: Graph, node: Node) -> bool:
    """``TryConvertDynamicQuantizeLSTM``: W and R (and their zero points) together, or nothing."""
    if len(node.inputs) < 3:
        return False
    weight = _int8_constant(graph, node.inputs[_LSTM_W])
    recurrence = _int8_constant(graph, node.inputs[_LSTM_R])
    if weight is None or recurrence is None:
        return False
    zps: list[onnx.TensorProto | None] = []
    for slot in (_LSTM_W_ZP, _LSTM_R_ZP):
        zp = None
        if slot < len(node.inputs):  # present, even as an empty name
            zp = _int8_constant(graph, node.inputs[slot])
            if zp is None:
                return False
        zps.append(zp)
    w_data, w_outside = flip_int8(graph, weight)
    r_data, r_outside = flip_int8(graph, recurrence)
    if not (w_outside or r_outside):
        return False
    for slot, tensor, data, zp_slot, zp in (
        (_LSTM_W, weight, w_data, _LSTM_W_ZP, zps[0]),
        (_LSTM_R, recurrence, r_data, _LSTM_R_ZP, zps[1]),
    ):
        converted = raw_uint8_tensor(tensor.name + "_s8_2_u8", list(tensor.dims), data)
        graph.set_input(node, slot, add_converted(graph, converted))
        zp_u8 = int8_tensor_to_uint8(graph, zp, force=True)
        assert zp_u8 is not None
        graph.set_input(node, zp_slot, add_converted(graph, zp_u8))
    return True
