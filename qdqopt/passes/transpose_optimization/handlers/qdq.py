"""QuantizeLinear and DequantizeLinear: ``HandleQuantizeDequantizeLinear`` (ONNX domain; ORT's extended map adds
the com.microsoft ones with the same handler).

::

    x ─> Transpose(p) ─> DQ(axis=a) ─> y      becomes      x ─> DQ(axis=p[a]) ─> Transpose(p) ─> y

A per-tensor scale leaves ``axis`` alone; before opset 13 Q/DQ have no ``axis``.
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.perms import normalize_axis

__all__ = ["handle_quantize_dequantize_linear"]


def handle_quantize_dequantize_linear(args: HandlerArgs) -> bool:
    """``HandleQuantizeDequantizeLinear``: a non-scalar scale's ``axis`` becomes ``perm[axis]`` (set explicitly)."""
    ctx, node, perm = args.ctx, args.node, args.perm
    if ctx.opset >= 13:
        scale_shape = ctx.shape(node.inputs[1])
        if not (scale_shape is not None and len(scale_shape) == 0):
            axis = normalize_axis(ctx.int_attr(node, "axis", 1), len(perm))
            if axis is None:
                return False
            ctx.set_attr(node, "axis", perm[axis])
    ctx.transpose_input(node, 0, args.perm_inv, perm)
    ctx.transpose_outputs(node, perm)
    return True
