"""The cost model (``DefaultCostCheck`` and its estimates in ``onnx_transpose_optimization.cc``).

A push is made when it removes more than it adds: for each transposible input, a constant costs 0 (it is
transposed in place), an input produced by a Transpose that would cancel costs minus its rank, anything else its
rank (dims other than 1; 5 when unknown). If that sum is negative and the handler adds Transposes on the outputs,
the largest output rank is added back unless an output already leads to a Transpose. Push iff the total is
negative. An EP cost check (:func:`~qdqopt.passes.transpose_optimization.ort.ort_ep_cost_check`) may decide first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.graph import Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.transpose_optimization.handlers import HandlerInfo
from qdqopt.passes.transpose_optimization.perms import invert_perm
from qdqopt.passes.transpose_optimization.registry import handler_for

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = ["default_cost_check", "estimate_value_rank", "pushed_transpose_cancels"]


def estimate_value_rank(ctx: OptimizerCtx, value: str) -> int:
    """``EstimateValueRank``: dims other than 1, or 5 for an unknown shape."""
    shape = ctx.shape(value)
    if shape is None:
        return 5
    return sum(1 for d in shape if d != 1)


def can_likely_remove_transpose(ctx: OptimizerCtx, transpose: Node) -> bool:
    """``CanLikelyRemoveTranspose``: every consumer known and handled."""
    consumers, comprehensive = ctx.consumers(transpose.outputs[0])
    return comprehensive and all(handler_for(c) is not None for c in consumers)


def is_constant(ctx: OptimizerCtx, value: str) -> bool:
    """``IsConstant``: a constant initializer, or a DQ of one that ``TransposeInput`` may look past."""
    producer = ctx.producer(value)
    if producer is None:
        return ctx.constant(value) is not None
    if producer.op_type == "DequantizeLinear":
        return ctx.dq_to_look_past(value) is not None
    return False


def estimate_transpose_value_cost(ctx: OptimizerCtx, value: str, perm_inv: list[int]) -> int:
    """``EstimateTransposeValueCost`` (looking through a DQ, and through ``DQ <- Squeeze <- Transpose``)."""
    if is_constant(ctx, value):
        return 0
    producer = ctx.producer(value)
    if producer is not None:
        if producer.op_type == "DequantizeLinear":
            dq_in = ctx.producer(producer.inputs[0])
            if dq_in is not None:
                if dq_in.op_type == "Squeeze":
                    sq_in = ctx.producer(dq_in.inputs[0])
                    if sq_in is not None and sq_in.op_type == "Transpose":
                        producer = sq_in
                else:
                    producer = dq_in
        if producer.op_type == "Transpose" and normalize_domain(producer.domain) == "":
            perm2 = ctx.perm_of(producer)
            if perm2 is not None:
                if perm2 == perm_inv and can_likely_remove_transpose(ctx, producer):
                    return -estimate_value_rank(ctx, value)
                return 0
    return estimate_value_rank(ctx, value)


def default_cost_check(ctx: OptimizerCtx, node: Node, perm: list[int], info: HandlerInfo, indices: list[int]) -> bool:
    """``DefaultCostCheck``: whether pushing a Transpose with ``perm`` through ``node`` is beneficial."""
    if node.op_type == "Transpose" and normalize_domain(node.domain) == "":
        return True
    # ORT passes the Transpose's own perm where EstimateTransposeValueCost expects "perm_inv": an input
    # produced by a Transpose with that perm cancels when the node's inputs get the inverse.
    cost = sum(estimate_transpose_value_cost(ctx, node.inputs[j], perm) for j in indices)
    if cost < 0 and info.transposes_outputs:
        out_cost = 0
        leading = False
        cancel_perm = invert_perm(perm)
        for out in node.outputs:
            out_cost = max(out_cost, estimate_value_rank(ctx, out))
            if out in ctx.outputs_leading and (
                ctx.single_consumer(out) is not None or pushed_transpose_cancels(ctx, out, cancel_perm)
            ):
                leading = True
        if not leading:
            cost += out_cost
    return cost < 0


def pushed_transpose_cancels(
    ctx: OptimizerCtx, value: str, cancel_perm: list[int], seen: set[str] | None = None
) -> bool:
    """Whether a Transpose put on ``value`` would meet one that cancels it (ORT 1.32, found by probing): the
    value's consumers are all known (no graph output) and one of them is a Transpose with ``cancel_perm``, or a node
    whose handler transposes its outputs and reads ``value`` at a transposible input, with an output for which this
    holds. Other branches (no Transpose, another perm) do not matter; a Transpose consumer is not looked through.
    ``seen``: values already answered in this walk (each is looked at once)."""
    seen = set() if seen is None else seen
    if value in seen:
        return False
    seen.add(value)
    consumers, comprehensive = ctx.consumers(value)
    if not comprehensive:
        return False
    for consumer in consumers:
        if consumer.op_type == "Transpose" and normalize_domain(consumer.domain) == "":
            if ctx.perm_of(consumer) == cancel_perm:
                return True
            continue
        info = handler_for(consumer)
        if info is None or not info.transposes_outputs:
            continue
        if not any(consumer.inputs[j] == value for j in info.transposible_inputs(ctx, consumer)):
            continue
        if any(out and pushed_transpose_cancels(ctx, out, cancel_perm, seen) for out in consumer.outputs):
            return True
    return False
