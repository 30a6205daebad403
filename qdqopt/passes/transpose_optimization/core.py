"""The optimizer's main loop (``OptimizeImpl``, ``ProcessTranspose`` and ``TryConstantFoldNode`` in
``onnx_transpose_optimization.cc``).

1. Over a topological snapshot, walked backwards, collect the values that lead to a Transpose.
2. For each snapshot node in order, the first input produced by a Transpose that its handler accepts and the cost
   check approves is pushed (:func:`process_transpose`).
3. On a graph with a DequantizeLinear: fold Transpose/Squeeze of constants, then repair QDQ node units
   (:mod:`.qdq_fixups`).
"""

from __future__ import annotations

from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.transpose_optimization.context import OptimizerCtx, PushEvent
from qdqopt.passes.transpose_optimization.cost import default_cost_check
from qdqopt.passes.transpose_optimization.handlers import HandlerArgs
from qdqopt.passes.transpose_optimization.ort import ort_ep_cost_check
from qdqopt.passes.transpose_optimization.perms import invert_perm, squeeze_shape
from qdqopt.passes.transpose_optimization.qdq_fixups import fix_qdq_node_units
from qdqopt.passes.transpose_optimization.registry import handler_for

__all__ = ["MAX_OPSET", "MIN_OPSET", "OptimizerCtx", "make_ctx", "optimize", "process_transpose"]

MIN_OPSET, MAX_OPSET = 7, 27


def make_ctx(graph: Graph, provider: str) -> OptimizerCtx | None:
    """``MakeOptimizerContext``: None when the graph's ONNX opset is outside what the optimizer supports."""
    opset = graph.opset("")
    if opset is None or not MIN_OPSET <= opset <= MAX_OPSET:
        return None
    return OptimizerCtx(graph, opset, provider, provider)


def process_transpose(ctx: OptimizerCtx, transpose: Node, node: Node, perm: list[int], j: int) -> bool:
    """``ProcessTranspose``: push ``transpose`` (input ``j`` of ``node``) through ``node`` if its handler accepts
    input ``j`` and the cost check (the EP's, then the default) says it pays."""
    info = handler_for(node)
    if info is None:
        return _note(ctx, node, "not pushed", "no handler for this op")
    indices = info.transposible_inputs(ctx, node)
    if j not in indices:
        return _note(ctx, node, "not pushed", f"input {j} is not one the handler transposes")
    decided = ort_ep_cost_check(ctx, node)
    if decided is None and not default_cost_check(ctx, node, perm, info, indices):
        return _note(ctx, node, "not pushed", "the cost check found no gain")
    index, name, op = node.index, node.name, node.qualified_op
    pushed = info.handler(HandlerArgs(ctx, transpose, node, perm, invert_perm(perm), indices))
    if pushed and ctx.events is not None:
        ctx.events.append(PushEvent(index, name, op, "pushed"))
    elif not pushed and ctx.events is not None and not any(e.node_index == index for e in ctx.events[-1:]):
        ctx.events.append(PushEvent(index, name, op, "refused", "the handler refused it"))
    return pushed


def _note(ctx: OptimizerCtx, node: Node, outcome: str, reason: str) -> bool:
    if ctx.events is not None:
        ctx.events.append(PushEvent(node.index, node.name, node.qualified_op, outcome, reason))
    return False


def optimize(ctx: OptimizerCtx) -> bool:
    """``OptimizeImpl``: returns whether the graph changed."""
    graph = ctx.graph
    nodes = graph.topological_order()
    for node in reversed(nodes):
        if node.op_type == "Transpose" and normalize_domain(node.domain) == "":
            ctx.outputs_leading.add(node.inputs[0])
            continue
        for out in node.outputs:
            if out in ctx.outputs_leading:
                info = handler_for(node)
                if info is not None and info.transposes_outputs:
                    for j in info.transposible_inputs(ctx, node):
                        ctx.outputs_leading.add(node.inputs[j])
    changed = False
    have_dq = False
    live = graph.live()
    for node in nodes:
        if node.op_type == "DequantizeLinear":
            have_dq = True
        if node.index not in live:
            # ORT never deletes a node before reaching it; a removed node keeps its inputs
            continue
        if not ctx.can_modify(node):
            continue
        for j, value in enumerate(list(node.inputs)):
            if not value:
                continue
            transpose = ctx.producer(value)
            if transpose is not None and transpose.op_type == "Transpose" and normalize_domain(transpose.domain) == "":
                perm = ctx.perm_of(transpose)
                if perm is not None and process_transpose(ctx, transpose, node, perm, j):
                    changed = True
                    break
    if not have_dq:
        return changed
    for node in graph.topological_order():
        if node.index not in live or not ctx.can_modify(node):
            continue
        if try_constant_fold(ctx, node):
            changed = True
    if fix_qdq_node_units(
        ctx,
    ):
        changed = True
    return changed


def try_constant_fold(ctx: OptimizerCtx, node: Node) -> bool:
    """``TryConstantFoldNode``: a Transpose or Squeeze of a local constant initializer becomes a new initializer."""
    if node.op_type not in ("Transpose", "Squeeze"):
        return False
    value = node.inputs[0]
    tensor = ctx.constant(value, local=True)
    if tensor is None:
        return False
    out = node.outputs[0]
    consumers, _ = ctx.consumers(out)
    if not consumers:
        return False
    array = ctx.graph.array(value)
    if node.op_type == "Transpose":
        perm = ctx.perm_of(node)
        if perm is None:
            return False
        name = ctx.add_initializer(tensor.data_type, [int(d) for d in tensor.dims[:]], array.tobytes())
        ctx.transpose_initializer(name, perm)
    else:
        axes = ctx.read_attr_or_input(node, "axes", 1, 13)
        if axes is None:
            return False
        name = ctx.add_initializer(tensor.data_type, [int(d) for d in tensor.dims[:]], array.tobytes())
        ctx.reshape_initializer(name, squeeze_shape([int(d) for d in tensor.dims[:]], axes))
    ctx.redirect(consumers, out, name)
    if not ctx.has_consumers(out):
        ctx.remove_node(node)
    if not ctx.has_consumers(value):
        ctx.graph.remove_initializer(value)
    return True


# -------------------------------------------------------------- QDQ fix-ups
