"""The QDQ rewrite rules of ``Level2_RuleBasedTransformer``: ``ReluQuantRewrite`` (class ReluQuantFusion) and
``ClipQuantRewrite`` (class ClipQuantFusion), spec §6 with REVIEW items 17/18. GemmTransposeFusion, the third
Level2 rule, lives in :mod:`qdqopt.passes.rules_level1`.

A Relu or Clip whose only consumer is a QuantizeLinear is dropped when the Q's saturation already does its work::

    P ──> Relu ──> Q(s, zp = type min) ──> ...      =>   P ──> Q(s, zp) ──> ...
    P ──> Clip(lo, hi) ──> Q(s, zp) ──> ...         =>   P ──> Q(s, zp) ──> ...
          (when [s·(qmin-zp), s·(qmax-zp)] lies inside [lo, hi] up to FLT_EPSILON)

Rules (ORT 1.32, CPU EP; Level2 runs after partitioning, so both nodes must be on ``CPUExecutionProvider``):

* **ReluQuantRewrite**: Relu-6/13/14 on the CPU EP with exactly one output edge, no graph output and no edge into a
  subgraph (``CheckOutputEdges(1)``); the consumer is a Q (``MatchQNode``) on the CPU EP with 3 inputs whose zero
  point is a constant initializer of one element (shape ``[]`` or ``[1]``). An int8/uint8/int16/uint16 zero point
  must be the type's minimum; any other zero-point type (int4, uint4, float8...) removes the Relu whatever its value.
  The scale is not inspected. A Relu that also feeds a graph output is kept.
* **ClipQuantRewrite**: Clip-1/6/11/12/13 with ``CheckOutputEdges(1)`` and a Q consumer on the CPU EP. The bounds
  come from ``optimizer_utils::GetClipConstantMinMax`` (:func:`clip_constant_min_max`): the ``min``/``max``
  attributes below opset 11; from opset 11 constant fp32/fp16 initializers, or the output of a DequantizeLinear of
  constant scalars (``scale·(x-zp)``); an absent bound is ∓FLT_MAX; any other input makes the Clip non-constant.
  The Q needs 3 inputs, a constant fp32 **rank-0** scale and a constant **rank-0** zero point (shape ``[1]``
  fails); int8/uint8/int16/uint16 zero points give ``lower = s·(qmin-zp)``, ``upper = s·(qmax-zp)`` in float32,
  another type fails the session (ORT_THROW, :class:`~qdqopt.errors.ModelError` here). The Clip goes iff
  ``min - lower <= FLT_EPSILON`` and ``upper - max <= FLT_EPSILON`` (float32 arithmetic).
* Removal is ``graph_utils::RemoveNode`` (:func:`~qdqopt.passes.graph_utils.remove_node`): the Q then reads the
  Relu/Clip's input. A Clip with more than one input edge (a DQ-computed bound) cannot be removed.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node, element_count
from qdqopt.passes.base import PassContext, RewriteRule, RuleEffect
from qdqopt.passes.graph_utils import (
    can_remove_node,
    check_output_edges,
    constant_initializer,
    is_supported_op,
    output_nodes,
    remove_node,
)
from qdqopt.passes.qdq_util import is_dq, is_q

__all__ = ["ClipQuantFusion", "ReluQuantFusion", "clip_constant_min_max"]

TP = onnx.TensorProto
CPU = "CPUExecutionProvider"
FLT_MAX = float(np.finfo(np.float32).max)
FLT_EPSILON = np.float32(np.finfo(np.float32).eps)

#: (qmin, qmax) of the zero-point types both rules know.
_QRANGE: dict[int, tuple[int, int]] = {
    TP.INT8: (-128, 127),
    TP.UINT8: (0, 255),
    TP.INT16: (-32768, 32767),
    TP.UINT16: (0, 65535),
}


def _local_constant(graph: Graph, name: str) -> onnx.TensorProto | None:
    """``NodeArgIsConstant(graph, arg) && graph.GetInitializedTensor(name)``: a constant initializer that this graph
    itself holds."""
    found = constant_initializer(graph, name)
    if found is None or not graph.is_initializer(name):
        return None
    return graph.initializer(name)


def _array(graph: Graph, name: str) -> np.ndarray:
    found = constant_initializer(graph, name)
    assert found is not None, name
    owner, _ = found
    return np.asarray(owner.array(name))


def _single_q_consumer(graph: Graph, node: Node) -> Node | None:
    """The one consumer when ``CheckOutputEdges(node, 1)`` holds and it is a Q on the CPU EP."""
    if not check_output_edges(graph, node, 1):
        return None
    nxt = output_nodes(graph, node)[0]
    if nxt.ep != CPU or not is_q(nxt):
        return None
    return nxt


# ------------------------------------------------------------------------------------------------ ReluQuant
class ReluQuantFusion(RewriteRule):
    """``ReluQuantFusion`` (relu_quantizelinear.cc), rule name ``ReluQuantRewrite``."""

    name = "ReluQuantRewrite"
    op_types = ("Relu",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Relu", (6, 13, 14)) or node.ep != CPU:
            return "Relu version or EP"
        if _single_q_consumer(graph, node) is None:
            return "not a single Q consumer on the CPU EP"
        return None

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        q = output_nodes(graph, node)[0]
        if len(q.inputs) != 3:
            return RuleEffect.NONE
        zp = _local_constant(graph, q.inputs[2])
        if zp is None or element_count(zp.dims[:]) != 1:
            return RuleEffect.NONE
        qrange = _QRANGE.get(zp.data_type)
        if qrange is not None and int(_array(graph, q.inputs[2]).reshape(-1)[0]) != qrange[0]:
            return RuleEffect.NONE
        if remove_node(graph, node):
            return RuleEffect.REMOVED_CURRENT_NODE
        return RuleEffect.NONE


# ------------------------------------------------------------------------------------------------ ClipQuant
def _bound_value(graph: Graph, name: str) -> float | None:
    """One Clip bound input: a constant fp32/fp16 initializer, or a DQ of constant scalars; None if not constant."""
    found = constant_initializer(graph, name)
    if found is not None:
        _, tensor = found
        if tensor.data_type not in (TP.FLOAT, TP.FLOAT16):
            raise ModelError(f"Unexpected data type for Clip input of {tensor.data_type}")
        return float(np.float32(_array(graph, name).reshape(-1)[0]))
    producer = graph.producer(name)
    if producer is None or not is_dq(producer):
        return None
    names = [producer.input(0), producer.input(1), producer.input(2)]
    values: list[np.ndarray] = []
    for slot, arg in enumerate(names):
        if not arg:
            if slot == 2:
                continue
            return None
        owned = constant_initializer(graph, arg)
        if owned is None or element_count(owned[1].dims[:]) != 1:
            return None
        values.append(_array(graph, arg).reshape(-1))
    x = int(values[0][0])
    scale = np.float32(values[1][0])
    zp = int(values[2][0]) if len(values) > 2 else 0
    return float(np.float32(scale * np.float32(x - zp)))


def clip_constant_min_max(graph: Graph, node: Node) -> tuple[float, float] | None:
    """``optimizer_utils::GetClipConstantMinMax``: (min, max), or None when a bound is not constant."""
    lo, hi = -FLT_MAX, FLT_MAX
    if node.since_version is not None and node.since_version < 11:
        for key, default in (("min", lo), ("max", hi)):
            attr = node.attributes.get(key)
            value = float(attr.f) if attr is not None else default
            if key == "min":
                lo = value
            else:
                hi = value
        return lo, hi
    bounds = [lo, hi]
    for i, slot in enumerate((1, 2)):
        arg = node.input(slot)
        if not arg:
            continue
        found = _bound_value(graph, arg)
        if found is None:
            return None
        bounds[i] = found
    return bounds[0], bounds[1]


def _q_lower_upper(graph: Graph, q: Node) -> tuple[np.float32, np.float32] | None:
    """``GetQConstantLowerUpper``: the float range the Q can represent, or None."""
    if len(q.inputs) != 3:
        return None
    scale_found = constant_initializer(graph, q.inputs[1])
    if scale_found is None:
        return None
    scale_t = scale_found[1]
    if len(scale_t.dims) != 0 or scale_t.data_type != TP.FLOAT:
        return None
    zp_found = constant_initializer(graph, q.inputs[2])
    if zp_found is None:
        return None
    zp_t = zp_found[1]
    if len(zp_t.dims) != 0:
        return None
    qrange = _QRANGE.get(zp_t.data_type)
    if qrange is None:
        raise ModelError(f"Unexpected data type for QuantizeLinear input y_zero_point of {zp_t.data_type}")
    scale = np.float32(_array(graph, q.inputs[1]).reshape(-1)[0])
    zp = int(_array(graph, q.inputs[2]).reshape(-1)[0])
    lower = np.float32(scale * np.float32(qrange[0] - zp))
    upper = np.float32(scale * np.float32(qrange[1] - zp))
    return lower, upper


class ClipQuantFusion(RewriteRule):
    """``ClipQuantFusion`` (clip_quantizelinear.cc), rule name ``ClipQuantRewrite``."""

    name = "ClipQuantRewrite"
    op_types = ("Clip",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Clip", (1, 6, 11, 12, 13)) or node.ep != CPU:
            return "Clip version or EP"
        if _single_q_consumer(graph, node) is None:
            return "not a single Q consumer on the CPU EP"
        if not can_remove_node(graph, node):
            # before the Q's range is read (measured on 1.32, knownx/fz_clip_f8_*): a Clip of a graph input with a
            # float8 Q after it leaves ORT's session alone, one fed by a node makes GetQConstantLowerUpper throw
            return "the Clip cannot be removed (CanRemoveNode)"
        return None

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        bounds = clip_constant_min_max(graph, node)
        if bounds is None:
            return RuleEffect.NONE
        q = output_nodes(graph, node)[0]
        lower_upper = _q_lower_upper(graph, q)
        if lower_upper is None:
            return RuleEffect.NONE
        lower, upper = lower_upper
        with np.errstate(over="ignore", invalid="ignore"):
            below = np.float32(np.float32(bounds[0]) - lower)
            above = np.float32(upper - np.float32(bounds[1]))
        if below > FLT_EPSILON or above > FLT_EPSILON:
            return RuleEffect.NONE
        if can_remove_node(graph, node) and remove_node(graph, node):
            return RuleEffect.REMOVED_CURRENT_NODE
        return RuleEffect.NONE
