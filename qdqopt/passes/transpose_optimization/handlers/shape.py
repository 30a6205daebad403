"""Shape-changing ops: Transpose (``HandleTranspose``), Reshape (``HandleReshape``: as a Transpose, or splitting
axes), Shape (``HandleShape``), Squeeze/Unsqueeze (``HandleSqueeze``/``HandleUnsqueeze``) and Tile (``HandleTile``).

::

    x ─> Transpose(p) ─> Transpose(p⁻¹) ─> y        becomes     x ─> y
    x ─> Transpose(p) ─> Shape ─> s                 becomes     x ─> Shape ─> Gather(p) ─> s
    x ─> Transpose(p) ─> Squeeze(A) ─> y            becomes     x ─> Squeeze(sorted(p[A])) ─> Transpose(p') ─> y
    x[1,2,3,6] ─> Transpose(0,3,1,2) ─> Reshape([1,2,3,2,3]) ─> y
        becomes    x ─> Reshape([1,2,3,2,3]) ─> Transpose(0,3,4,1,2) ─> y      (the 6 split into 2, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.graph import Node
from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.perms import (
    compose_perm,
    finalize_reshape_shape,
    normalize_axes,
    sorted_axes_for_transposed_input,
    squeeze_perm,
)

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = [
    "handle_reshape",
    "handle_shape",
    "handle_squeeze",
    "handle_tile",
    "handle_transpose",
    "handle_transpose_impl",
    "handle_unsqueeze",
]


def handle_transpose(args: HandlerArgs) -> bool:
    """``HandleTranspose``: perms of the same rank cancel or compose."""
    node_perm = args.ctx.perm_of(args.node)
    if node_perm is None or len(node_perm) != len(args.perm):
        return False
    handle_transpose_impl(args.ctx, args.transpose, args.node, args.perm, args.perm_inv, node_perm)
    return True


def handle_reshape(args: HandlerArgs) -> bool:
    """``EPAwareHandleReshape`` (CPU: ``HandleReshape``)."""
    return _reshape(args.ctx, args.transpose, args.node, args.perm, args.perm_inv)


def handle_shape(args: HandlerArgs) -> bool:
    """``HandleShape``."""
    _shape(args.ctx, args.node, args.perm, args.perm_inv, args.transposible_inputs)
    return True


def handle_tile(args: HandlerArgs) -> bool:
    """``HandleTile``."""
    return _tile(args.ctx, args.node, args.perm, args.perm_inv)


def handle_squeeze(args: HandlerArgs) -> bool:
    """``HandleSqueeze``: the axes (attribute before opset 13, constant input from 13) become ``sorted(perm[a])``;
    the output perm drops them."""
    ctx, node, perm, perm_inv = args.ctx, args.node, args.perm, args.perm_inv
    axes = ctx.read_attr_or_input(node, "axes", 1, 13)
    norm = None if axes is None else normalize_axes(axes, len(perm))
    if norm is None:
        return False
    new_axes = sorted_axes_for_transposed_input(norm, perm)
    if ctx.opset < 13:
        ctx.set_attr(node, "axes", new_axes)
    else:
        old = node.inputs[1]
        ctx.set_input(node, 1, ctx.add_int64(new_axes))
        if not ctx.has_consumers(old):
            ctx.graph.remove_initializer(old)
    ctx.transpose_input(node, 0, perm_inv, perm)
    ctx.transpose_outputs(node, squeeze_perm(new_axes, perm))
    return True


def handle_unsqueeze(args: HandlerArgs) -> bool:
    """``HandleUnsqueeze``: the axes stay; the output perm keeps the new axes in place."""
    ctx, node, perm = args.ctx, args.node, args.perm
    axes = ctx.read_attr_or_input(node, "axes", 1, 13)
    norm = None if axes is None else normalize_axes(axes, len(perm) + len(axes))
    if axes is None or norm is None:
        return False
    ctx.help_handle_unsqueeze(node, perm, args.perm_inv, norm)
    return True


def _tile(ctx: OptimizerCtx, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
    """``HandleTile``: constant repeats are permuted into a new initializer, else a Gather(perm_inv) is added."""
    if len(node.inputs) < 2:
        return False
    repeats_input = node.inputs[1]
    repeats = ctx.constant_array(repeats_input)
    if repeats is not None:
        values = [int(v) for v in repeats.reshape(-1)]
        if len(values) != len(perm):
            return False
        ctx.set_input(node, 1, ctx.add_int64([values[p] for p in perm_inv]))
        if not ctx.has_consumers(repeats_input):
            ctx.graph.remove_initializer(repeats_input)
    else:
        perm_inv_const = ctx.add_int64(perm_inv)
        gather = ctx.add_node("Gather", [repeats_input, perm_inv_const])
        ctx.copy_value_info(repeats_input, gather.outputs[0])  # no axis attribute (unlike HandleShape's)
        ctx.set_input(node, 1, gather.outputs[0])
    ctx.transpose_input(node, 0, perm_inv, perm)
    ctx.transpose_outputs(node, perm)
    return True


def _shape(ctx: OptimizerCtx, node: Node, perm: list[int], perm_inv: list[int], indices: list[int]) -> None:
    """``HandleShape``: Shape(Transpose(x, perm)) becomes Gather(Shape(x), perm[start:end])."""
    ctx.transpose_inputs(node, perm_inv, indices)
    rank = len(perm)
    if ctx.opset >= 15:
        start = ctx.int_attr(node, "start", 0)
        end = ctx.int_attr(node, "end", rank)
        start = start + rank if start < 0 else start
        end = end + rank if end < 0 else end
        new_perm = perm[min(max(start, 0), rank) : min(max(end, 0), rank)]
        ctx.graph.remove_attribute(node, "start")
        ctx.graph.remove_attribute(node, "end")
    else:
        new_perm = list(perm)
    perm_const = ctx.add_int64(new_perm)
    gather = ctx.add_node("Gather", ["", perm_const])
    ctx.set_attr(gather, "axis", 0)
    ctx.move_output(node, 0, gather, 0)
    new_output = node.outputs[0]
    ctx.set_input(gather, 0, new_output)
    ctx.copy_value_info(gather.outputs[0], new_output)
    if len(new_perm) != rank:
        ctx.set_shape(new_output, [rank])


def _reshape(ctx: OptimizerCtx, transpose: Node, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
    """``EPAwareHandleReshape`` (CPU: ``HandleReshape`` = ``HandleReshapeAsTranspose``, then the split case)."""
    shape_input = node.inputs[1] if len(node.inputs) > 1 else ""
    requested = ctx.constant_array(shape_input)
    if requested is None or not requested.size:
        return False  # both ORT handlers need a constant, non-empty shape
    perms = _reshape_as_transpose_perm(ctx, transpose, node, [int(v) for v in requested.reshape(-1)])
    if perms is not None:
        handle_transpose_impl(ctx, transpose, node, perm, perm_inv, perms)
        return True
    return _handle_reshape_split(ctx, transpose, node, perm)


def _reshape_as_transpose_perm(
    ctx: OptimizerCtx, transpose: Node, node: Node, requested: list[int]
) -> list[int] | None:
    """``HandleReshapeAsTranspose`` up to its call of ``HandleTransposeImpl``: the equivalent perm, if any."""
    in_shape = ctx.shape(transpose.inputs[0])
    out_shape = ctx.shape(transpose.outputs[0])
    if in_shape is None or out_shape is None or len(in_shape) != len(requested):
        return None
    allow_zero = ctx.int_attr(node, "allowzero", 0) if ctx.opset >= 14 else 0
    final = finalize_reshape_shape(out_shape, requested, allow_zero != 0)
    if final is None:
        return None
    dims = list(out_shape)
    perms: list[int] = []
    for target in final:
        cur = 0
        while dims[cur] != target:
            if dims[cur] != -1 and dims[cur] != 1 and target != 1:
                return None
            cur += 1
            if cur == len(dims):
                return None
        perms.append(cur)
        dims[cur] = -1
    return perms


def _handle_reshape_split(ctx: OptimizerCtx, transpose: Node, node: Node, perm: list[int]) -> bool:
    """``HandleReshapeSplit`` (ORT 1.32): the Reshape splits each axis of the Transpose's output into a run of
    consecutive output axes (their product is that axis; a size-1 output axis joins the run that follows it). The
    Reshape then reads the Transpose's input, with the runs in that input's axis order as its new shape, and a
    Transpose moving the runs back takes its output.

    ::

        x[1,12,20,24] ─> Transpose(0,3,1,2) ─> Reshape([1,3,8,12,20]) ─> y
            becomes    x ─> Reshape([1,12,20,3,8]) ─> Transpose(0,3,4,1,2) ─> y
    """
    in_shape = ctx.shape(transpose.inputs[0])
    rank = len(perm)
    if in_shape is None or len(in_shape) != rank or any(d < 0 for d in in_shape):
        return False
    transposed = [in_shape[p] for p in perm]
    requested = ctx.shape(node.outputs[0])
    if requested is None or len(requested) <= rank or any(d <= 0 for d in requested):
        return False
    runs = _split_runs(transposed, requested)
    if runs is None:
        return False
    # the runs in the order of the axes they come from (axis perm[j] of the input is run j)
    order = sorted(range(rank), key=lambda j: perm[j])
    new_shape: list[int] = []
    start_in_new: dict[int, int] = {}
    for j in order:
        start_in_new[j] = len(new_shape)
        new_shape.extend(requested[runs[j][0] : runs[j][1]])
    new_perm = [start_in_new[j] + k - runs[j][0] for j in range(rank) for k in range(*runs[j])]
    shape_input = node.inputs[1]
    ctx.set_input(node, 0, transpose.inputs[0])
    ctx.set_input(node, 1, ctx.add_int64(new_shape))
    if not ctx.has_consumers(shape_input):
        ctx.graph.remove_initializer(shape_input)
    ctx.transpose_outputs(node, new_perm)
    if not ctx.has_consumers(transpose.outputs[0]):
        ctx.remove_node(transpose)
    return True


def _split_runs(transposed: list[int], requested: list[int]) -> list[tuple[int, int]] | None:
    """For each dim of ``transposed``, the run ``[start, end)`` of ``requested`` whose product it is (runs
    consecutive and covering ``requested``), or None."""
    runs: list[tuple[int, int]] = []
    cursor = 0
    for target in transposed:
        start = cursor
        prod = 1
        while True:
            if cursor >= len(requested):
                return None
            prod *= requested[cursor]
            cursor += 1
            if prod >= target:
                break
        if prod != target:
            return None
        runs.append((start, cursor))
    return runs if cursor == len(requested) else None


def handle_transpose_impl(
    ctx: OptimizerCtx, transpose: Node, node: Node, perm: list[int], perm_inv: list[int], node_perm: list[int]
) -> None:
    if perm_inv == node_perm:
        first_input = transpose.inputs[0]
        out = node.outputs[0]
        consumers, comprehensive = ctx.consumers(out)
        if comprehensive:
            ctx.redirect(consumers, out, first_input)
        else:
            in_consumers, in_comprehensive = ctx.consumers(first_input)
            parent = ctx.producer(first_input)
            if parent is not None and in_comprehensive:
                ctx.set_input(node, 0, "")
                ctx.redirect(in_consumers, first_input, out)
                slot = parent.outputs.index(first_input)
                ctx.move_output(node, 0, parent, slot)
            else:
                identity = ctx.add_node("Identity", [""])
                ctx.move_output(node, 0, identity, 0)
                ctx.set_input(identity, 0, first_input)
        ctx.remove_node(node)
        if not ctx.has_consumers(transpose.outputs[0]):
            ctx.remove_node(transpose)
        return
    new_perm = compose_perm(perm, node_perm)
    if node.op_type == "Reshape":
        # ORT replaces the Reshape with a Transpose reading the 1st Transpose's input
        target = ctx.add_node("Transpose", [transpose.inputs[0]])
        ctx.move_output(node, 0, target, 0)
        ctx.remove_node(node)
    else:
        target = node
        ctx.set_input(node, 0, transpose.inputs[0])
    ctx.set_attr(target, "perm", new_perm)
    if not ctx.has_consumers(transpose.outputs[0]):
        ctx.remove_node(transpose)
