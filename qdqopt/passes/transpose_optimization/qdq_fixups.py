"""The QDQ fix-ups that end a run on a graph with DequantizeLinear nodes (``FixQDQNodeUnits``).

Pushing Transposes through Q/DQ can leave a Transpose outside any QDQ node unit, or an empty ``DQ -> Q`` pair:

::

    DQ ─> Transpose ─> Relu          becomes    DQ ─> Transpose ─> Q ─> DQ ─> Relu     (TryFixTransposeMissingQ)
    Conv ─> Transpose ─> Q           becomes    Conv ─> Q ─> DQ ─> Transpose ─> Q      (TryFixTransposeMissingDQ)
    x ─> DQ(s, z) ─> Q(s, z) ─> y    becomes    x ─> y                                 (TryRemoveEmptyDQQ)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.graph import Node

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = ["fix_qdq_node_units"]


def fix_qdq_node_units(ctx: OptimizerCtx) -> bool:
    """``FixQDQNodeUnits``: over a fresh topological snapshot, a Q tries ``TryRemoveEmptyDQQ`` and a Transpose
    ``TryFixTransposeMissingQ`` then ``TryFixTransposeMissingDQ``."""
    changed = False
    for node in ctx.graph.topological_order():
        if ctx.graph.node(node.index) is None or not ctx.can_modify(node):
            continue
        if (node.op_type == "QuantizeLinear" and try_remove_empty_dq_q(ctx, node)) or (
            node.op_type == "Transpose"
            and (try_fix_transpose_missing_q(ctx, node) or try_fix_transpose_missing_dq(ctx, node))
        ):
            changed = True
    return changed


def _bytes(ctx: OptimizerCtx, name: str) -> bytes | None:
    array = ctx.constant_array(name)
    return None if array is None else array.tobytes()


def qdq_pair_match(ctx: OptimizerCtx, dq: Node, q: Node) -> bool:
    if dq.domain != q.domain:
        return False
    t1, t2 = ctx.dtype(dq.inputs[0]), ctx.dtype(q.outputs[0])
    if t1 is None or t2 is None or t1 != t2:
        return False
    if dq.inputs[1] != q.inputs[1]:
        a, b = _bytes(ctx, dq.inputs[1]), _bytes(ctx, q.inputs[1])
        if a is None or b is None or a != b:
            return False
    dq_zp = dq.inputs[2] if len(dq.inputs) > 2 else ""
    q_zp = q.inputs[2] if len(q.inputs) > 2 else ""
    if dq_zp != q_zp:
        a = _bytes(ctx, dq_zp) if dq_zp else None
        b = _bytes(ctx, q_zp) if q_zp else None
        if (dq_zp and a is None) or (q_zp and b is None):
            return False
        if a is not None and b is not None:
            return a == b
        only = a if a is not None else b
        return only is not None and not any(only)
    return True


def try_remove_empty_dq_q(ctx: OptimizerCtx, q: Node) -> bool:
    dq = ctx.producer(q.inputs[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return False
    if ctx.single_consumer(dq.outputs[0]) is None:
        return False
    if not qdq_pair_match(ctx, dq, q):
        return False
    q_out = q.outputs[0]
    q_consumers, comprehensive = ctx.consumers(q_out)
    if comprehensive and len(q_consumers) == 1:
        consumer = q_consumers[0]
        for k, inp in enumerate(list(consumer.inputs)):
            if inp == q_out:
                ctx.set_input(consumer, k, dq.inputs[0])
        ctx.set_input(dq, 0, "")
        ctx.set_input(q, 0, "")
        ctx.remove_node(dq)
        ctx.remove_node(q)
        return True
    if not q_consumers and ctx.graph.is_graph_output(q_out):
        dq_input = dq.inputs[0]
        parent = ctx.producer(dq_input)
        if parent is None:
            return False
        slot = parent.outputs.index(dq_input)
        if ctx.single_consumer(parent.outputs[slot]) is None:
            return False
        ctx.set_input(dq, 0, "")
        ctx.move_output(q, 0, parent, slot)
        ctx.set_input(q, 0, "")
        ctx.remove_node(dq)
        ctx.remove_node(q)
        return True
    return False


def try_fix_transpose_missing_q(ctx: OptimizerCtx, transpose: Node) -> bool:
    dq = ctx.producer(transpose.inputs[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return False
    consumers, _ = ctx.consumers(transpose.outputs[0])
    if consumers and (len(consumers) > 1 or consumers[0].op_type == "QuantizeLinear"):
        return False
    return ctx.make_qdq_node_unit(dq)


def try_fix_transpose_missing_dq(ctx: OptimizerCtx, transpose: Node) -> bool:
    t_in, t_out = transpose.inputs[0], transpose.outputs[0]
    q = ctx.single_consumer(t_out)
    if q is None or q.op_type != "QuantizeLinear":
        return False
    prev = ctx.producer(t_in)
    if prev is None or prev.op_type == "DequantizeLinear":
        return False
    if len(ctx.consumers(t_in)[0]) != 1:
        return False
    quant = ctx.quant_info(q)
    if quant is None:
        return False
    axis = quant.axis
    if quant.per_axis:
        perm = ctx.perm_of(transpose)
        assert perm is not None
        axis = perm[axis]  # not inverted
    in_shape = ctx.shape(t_in)
    inputs = ["", q.inputs[1]] + ([q.inputs[2]] if len(q.inputs) > 2 else [])
    new_q = ctx.make_q(
        q.domain,
        inputs,
        axis,
        ctx.opt_int(q, "block_size"),
        ctx.opt_int(q, "output_dtype"),
        ctx.opt_int(q, "saturate"),
    )
    ctx.copy_value_info(q.outputs[0], new_q.outputs[0])
    ctx.set_shape(new_q.outputs[0], in_shape)
    inputs[0] = new_q.outputs[0]
    new_dq = ctx.make_dq(q.domain, inputs, axis, ctx.opt_int(q, "block_size"))
    ctx.copy_value_info(t_in, new_dq.outputs[0])
    slot = prev.outputs.index(t_in)
    ctx.move_output(prev, slot, new_dq, 0)
    ctx.set_input(new_q, 0, prev.outputs[slot])
    ctx.copy_value_info(new_dq.outputs[0], prev.outputs[slot])
    return True


# ---------------------------------------------------------------------------------------------------- passes
