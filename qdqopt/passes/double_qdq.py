"""DoubleQDQPairsRemover: fold Q1 -> DQ1 -> Q2 -> DQ2... into Q1 -> DQ2... (spec §4.2, ``double_qdq_pairs_remover.cc``).

A tensor quantized twice in a row (two Q/DQ pairs back to back) only needs the outer Q and DQ; their parameters
are recomputed so that the remaining pair covers the intersection of both real ranges::

    before                                              after
    x -> Q1(s1,z1) -> DQ1(s1,z1) -> Q2(s2,z2) -+-> DQ2a(s2,z2)    x -> Q1(S,Z) -+-> DQ2a(S,Z)
                                               +-> DQ2b(s2,z2)                  +-> DQ2b(S,Z)

Rules (ORT 1.32):

* main graph only (the pass does not recurse into subgraphs); every node of one topological snapshot is tried as
  Q1, in order; nodes are matched by op type, and ``IsQDQPairSupported`` then also requires ``MatchQNode`` /
  ``MatchDQNode`` (ONNX Q/DQ 10, 13, 19, 21, 23-25 or com.microsoft 1) of both pairs;
* Q1 has exactly one output edge and produces no graph output; DQ1 (its consumer) has one input edge, one output
  edge and produces no graph output; ``IsQDQPairSupported(Q1, DQ1)`` (same constant scalar scale and zp);
* Q2 (DQ1's consumer) is a QuantizeLinear, produces no graph output, and its zp type equals Q1's (a missing zp
  means the ``output_dtype`` attribute, else uint8); every consumer of Q2 (in edge order) is a DequantizeLinear
  with ``IsQDQPairSupported(Q2, DQ2)``; there is at least one; the zp type is uint8, int8, uint16 or int16;
* new parameters (``FindNewZeroPointAndScale(DQ1, Q2)``): nothing changes if DQ1 and Q2 read the same scale *and*
  zp initializer names, or if their zps are equal and ``|s1 - s2| < 1e-20``; otherwise both scales must be float32
  (an fp16 or bf16 scale leaves this Q1 alone) and, in float32 arithmetic,
  ``real_min = max((qmin-z1)*s1, (qmin-z2)*s2)``, ``real_max = min((qmax-z1)*s1, (qmax-z2)*s2)``,
  ``S = (real_max - real_min) / (qmax - qmin)``, ``Z = T(std::round(qmin - real_min / S))`` (half away from zero);
* the new values are written as *new* initializers, copies of the replaced input (same dims, raw data) named
  ``GenerateNodeArgName("DoubleQDQRemoved_" + <input name>)``, for Q1's scale, Q1's zp, then each DQ2's scale and
  zp in turn (so two DQ2 on the same inputs get ``..._token_N`` names);
* each DQ2 then reads Q1's output; DQ1 and Q2 are removed (their output names stay taken).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import lone_consumer
from qdqopt.passes.qdq_util import (
    SCALE_ID,
    ZERO_POINT_ID,
    constant_array,
    constant_initializer,
    is_qdq_pair_supported,
    produces_graph_output,
    q_zero_point_type,
    tensor_from_array,
)

__all__ = ["DoubleQDQPairsRemover", "new_scale_and_zero_point"]

PREFIX = "DoubleQDQRemoved_"


@dataclass(frozen=True)
class _QuantType:
    dtype: type[np.integer]
    qmin: int
    qmax: int
    bits: int
    signed: bool


_QUANT_TYPES: dict[int, _QuantType] = {
    onnx.TensorProto.UINT8: _QuantType(np.uint8, 0, 255, 8, False),
    onnx.TensorProto.INT8: _QuantType(np.int8, -128, 127, 8, True),
    onnx.TensorProto.UINT16: _QuantType(np.uint16, 0, 65535, 16, False),
    onnx.TensorProto.INT16: _QuantType(np.int16, -32768, 32767, 16, True),
}


def _std_round(value: np.float32) -> float:
    """``std::round(float)``: half away from zero (NaN and infinities unchanged)."""
    v = float(value)
    if not math.isfinite(v):
        return v
    whole = math.floor(abs(v))
    if abs(v) - whole >= 0.5:
        whole += 1
    return math.copysign(whole, v)


def _narrow_cast(value: float, qt: _QuantType) -> int:
    """``static_cast<T>(float)`` as x86-64 GCC code does it: truncate to int32 (INT32_MIN when out of range), keep
    the low bits."""
    in_range = math.isfinite(value) and -(2**31) <= value < 2**31
    as_int = int(value) if in_range else -(2**31)
    low = as_int & ((1 << qt.bits) - 1)
    if qt.signed and low >= 1 << (qt.bits - 1):
        low -= 1 << qt.bits
    return low


def new_scale_and_zero_point(s1: float, z1: int, s2: float, z2: int, dtype: int) -> tuple[np.float32, int]:
    """``FindNewZeroPointAndScale``'s arithmetic for zero points of ``dtype`` (float32 throughout)."""
    qt = _QUANT_TYPES[dtype]
    f = np.float32
    scale1, scale2 = f(s1), f(s2)
    real_min1 = f(qt.qmin - z1) * scale1
    real_max1 = f(qt.qmax - z1) * scale1
    real_min2 = f(qt.qmin - z2) * scale2
    real_max2 = f(qt.qmax - z2) * scale2
    real_min = real_min2 if real_min1 < real_min2 else real_min1  # std::max
    real_max = real_max2 if real_max2 < real_max1 else real_max1  # std::min
    with np.errstate(all="ignore"):
        new_scale = f(f(real_max - real_min) / f(qt.qmax - qt.qmin))
        shifted = f(f(qt.qmin) - f(real_min / new_scale))
    return new_scale, _narrow_cast(_std_round(shifted), qt)


class DoubleQDQPairsRemover(GraphTransformer):
    """Remove the inner DQ -> Q of two consecutive Q/DQ pairs, recomputing the outer pair's parameters."""

    name = "DoubleQDQPairsRemover"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        for node in graph.candidates_in_order(("QuantizeLinear",)):  # _try_reduce starts from a Q
            if graph.node(node.index) is not None and _try_reduce(graph, node):
                modified = True
        return modified


def _try_reduce(graph: Graph, q1: Node) -> bool:
    if q1.op_type != "QuantizeLinear":
        return False
    dq1 = lone_consumer(graph, q1)
    if dq1 is None or dq1.op_type != "DequantizeLinear" or graph.input_edge_count(dq1) != 1:
        return False
    q2 = lone_consumer(graph, dq1)
    if q2 is None or not is_qdq_pair_supported(graph, q1, dq1):
        return False
    q1_type = q_zero_point_type(graph, q1)
    if q1_type is None:
        return False
    if q2.op_type != "QuantizeLinear" or produces_graph_output(graph, q2) or q_zero_point_type(graph, q2) != q1_type:
        return False
    dq2s: list[Node] = []
    for edge in graph.output_edges(q2):
        dq2 = graph.node(edge.dst)
        if dq2 is None or dq2.op_type != "DequantizeLinear" or not is_qdq_pair_supported(graph, q2, dq2):
            return False
        dq2s.append(dq2)
    if q1_type not in _QUANT_TYPES or not dq2s:
        return False
    if not _recompute_outer(graph, q1, dq1, q2, dq2s, q1_type):
        return False
    for dq2 in dq2s:
        graph.set_input(dq2, 0, q1.outputs[0])
    graph.remove_node(q2)
    graph.remove_node(dq1)
    return True


def _recompute_outer(graph: Graph, q1: Node, dq1: Node, q2: Node, dq2s: list[Node], dtype: int) -> bool:
    """``RecomputeOuterQDQZeroPointAndScale``: False when the parameters cannot be combined."""
    s1_name, z1_name = dq1.inputs[SCALE_ID], dq1.inputs[ZERO_POINT_ID]
    s2_name, z2_name = q2.inputs[SCALE_ID], q2.inputs[ZERO_POINT_ID]
    if s1_name == s2_name and z1_name == z2_name:
        return True
    tensors = [constant_initializer(graph, n) for n in (s1_name, s2_name, z1_name, z2_name)]
    s1_t, s2_t, z1_t, z2_t = tensors
    assert s1_t is not None and s2_t is not None and z1_t is not None and z2_t is not None
    if (
        z1_t.data_type != z2_t.data_type
        or s1_t.data_type != onnx.TensorProto.FLOAT
        or s2_t.data_type != onnx.TensorProto.FLOAT
    ):
        return False
    s1, s2 = (np.float32(_first_value(graph, n)) for n in (s1_name, s2_name))
    z1, z2 = (int(_first_value(graph, n)) for n in (z1_name, z2_name))
    if z1 == z2 and float(abs(s1 - s2)) < 1e-20:
        return True
    new_scale, new_zp = new_scale_and_zero_point(float(s1), z1, float(s2), z2, dtype)
    for node in (q1, *dq2s):
        _apply_new_input(graph, node, SCALE_ID, new_scale)
        _apply_new_input(graph, node, ZERO_POINT_ID, new_zp)
    return True


def _first_value(graph: Graph, name: str) -> np.generic:
    """The first element of a constant initializer (``Initializer::data<T>()[0]``)."""
    array = constant_array(graph, name)
    assert array is not None
    return array.reshape(-1)[0]  # type: ignore[no-any-return]


def _apply_new_input(graph: Graph, node: Node, slot: int, value: np.float32 | int) -> None:
    """``ApplyNewInputValue``: a copy of the input initializer holding ``value``, under a generated name."""
    old = constant_initializer(graph, node.inputs[slot])
    assert old is not None
    dtype = onnx.helper.tensor_dtype_to_np_dtype(old.data_type)
    array = np.full(tuple(old.dims), value, dtype=dtype)
    name = graph.generate_value_name(PREFIX + node.inputs[slot])
    graph.add_initializer(tensor_from_array(array, name, old.data_type))
    graph.set_input(node, slot, name)
