"""Ops with an ``axis``: Concat and Split (``HandleSimpleNodeWithAxis``), Softmax/Hardmax/LogSoftmax
(``HandleSoftHardMax``), ArgMin/ArgMax (``HandleArgMinMax``) and Gather (``HandleGather``).

::

    x ─> Transpose(p) ─> Concat(axis=a) ─> y    becomes    x ─> Concat(axis=p[a]) ─> Transpose(p) ─> y
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.handlers.elementwise import handle_simple
from qdqopt.passes.transpose_optimization.perms import normalize_axis, squeeze_perm

__all__ = ["handle_arg_min_max", "handle_gather", "handle_simple_with_axis", "handle_soft_hard_max"]


def _with_axis(args: HandlerArgs, default: int | None) -> bool:
    ctx, node, perm = args.ctx, args.node, args.perm
    raw = ctx.opt_int(node, "axis")
    if raw is None:
        raw = default
    if raw is None:
        return False
    axis = normalize_axis(raw, len(perm))
    if axis is None:
        return False
    handle_simple(args)
    ctx.set_attr(node, "axis", perm[axis])
    return True


def handle_simple_with_axis(args: HandlerArgs) -> bool:
    """``HandleSimpleNodeWithAxis``: Concat (axis required) and Split (axis 0 by default); ``axis = perm[axis]``."""
    return _with_axis(args, 0 if args.node.op_type == "Split" else None)


def handle_soft_hard_max(args: HandlerArgs) -> bool:
    """``HandleSoftHardMax``: from opset 13 as with an axis (default -1); before, the op coerces to 2-D at ``axis``
    (default 1), so only perms that keep every axis on its side of it are pushed, and the axis is unchanged."""
    ctx, node, perm = args.ctx, args.node, args.perm
    if ctx.opset >= 13:
        return _with_axis(args, -1)
    rank = len(perm)
    axis = normalize_axis(ctx.int_attr(node, "axis", 1), rank)
    if axis is None:
        return False
    if any((i < axis) != (perm[i] < axis) for i in range(rank)):
        return False
    return handle_simple(args)


def handle_arg_min_max(args: HandlerArgs) -> bool:
    """``HandleArgMinMax``: ``axis`` (default 0) becomes ``perm[axis]``; with ``keepdims=0`` the output perm drops
    that axis."""
    ctx, node, perm = args.ctx, args.node, args.perm
    axis = normalize_axis(ctx.int_attr(node, "axis", 0), len(perm))
    if axis is None:
        return False
    ctx.set_attr(node, "axis", perm[axis])
    ctx.transpose_inputs(node, args.perm_inv, args.transposible_inputs)
    keep = ctx.int_attr(node, "keepdims", 1) != 0
    ctx.transpose_outputs(node, perm if keep else squeeze_perm([perm[axis]], perm))
    return True


def handle_gather(args: HandlerArgs) -> bool:
    """``HandleGather``: only a constant 0-D index (the Gather then acts as a Squeeze of ``perm[axis]``)."""
    ctx, node, perm = args.ctx, args.node, args.perm
    axis = normalize_axis(ctx.int_attr(node, "axis", 0), len(perm))
    if axis is None or len(node.inputs) < 2:
        return False
    index = ctx.constant(node.inputs[1])
    if index is None or len(index.dims) != 0:
        return False
    ctx.set_attr(node, "axis", perm[axis])
    ctx.transpose_input(node, 0, args.perm_inv, perm)
    ctx.transpose_outputs(node, squeeze_perm([perm[axis]], perm))
    return True
