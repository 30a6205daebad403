"""Reductions: ``HandleReduceOps`` for ReduceSum/Mean/Max/... (the ``axes`` attribute before ReduceSum-13 and the
other Reduce*-18, a constant ``axes`` input from there).

::

    x ─> Transpose(p) ─> ReduceMean(axes=A, keepdims=1) ─> y
        becomes    x ─> ReduceMean(axes=sorted(p[A])) ─> Transpose(p) ─> y
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.perms import normalize_axes, sorted_axes_for_transposed_input, squeeze_perm

__all__ = ["REDUCE_OPS", "handle_reduce_ops"]

REDUCE_OPS = [
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
]


def handle_reduce_ops(args: HandlerArgs) -> bool:
    """``HandleReduceOps``."""
    ctx, node, perm, perm_inv = args.ctx, args.node, args.perm, args.perm_inv
    keepdims = ctx.int_attr(node, "keepdims", 1) != 0
    if (node.op_type == "ReduceSum" and ctx.opset < 13) or (node.op_type != "ReduceSum" and ctx.opset < 18):
        attr = node.attributes.get("axes")
        if attr is None or attr.type != onnx.AttributeProto.INTS:
            out_perm = perm if keepdims else []
        else:
            axes = normalize_axes([int(a) for a in attr.ints], len(perm))
            if axes is None:
                return False
            new_axes = sorted_axes_for_transposed_input(axes, perm)
            ctx.set_attr(node, "axes", new_axes)
            out_perm = perm if keepdims else squeeze_perm(new_axes, perm)
        ctx.transpose_input(node, 0, perm_inv, perm)
        ctx.transpose_outputs(node, out_perm)
        return True
    axes_input = node.inputs[1] if len(node.inputs) > 1 else ""
    array = ctx.constant_array(axes_input) if axes_input else None
    if not axes_input or (array is not None and array.size == 0):
        ctx.transpose_input(node, 0, perm_inv, perm)
        if ctx.int_attr(node, "noop_with_empty_axes", 0) != 0 or keepdims:
            ctx.transpose_outputs(node, perm)
        return True
    if array is None:
        return False
    axes = normalize_axes([int(a) for a in array.reshape(-1).astype(np.int64)], len(perm))
    if axes is None:
        return False
    new_axes = sorted_axes_for_transposed_input(axes, perm)
    ctx.set_input(node, 1, ctx.add_int64(new_axes))
    if not ctx.has_consumers(axes_input):
        ctx.graph.remove_initializer(axes_input)
    ctx.transpose_input(node, 0, perm_inv, perm)
    ctx.transpose_outputs(node, perm if keepdims else squeeze_perm(new_axes, perm))
    return True
