"""QuantizeLinear and DequantizeLinear: ``HandleQuantizeDequantizeLinear`` (ONNX domain; ORT's extended map adds
the com.microsoft ones with the same handler).

::

    x ─> Transpose(p) ─> DQ(axis=a) ─> y      becomes      x ─> DQ(axis=p[a]) ─> Transpose(p) ─> y

A per-tensor scale leaves ``axis`` alone; before opset 13 Q/DQ have no ``axis``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.graph import Node
from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.perms import normalize_axis

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = ["handle_quantize_dequantize_linear", "transpose_quantize_dequantize_axis"]


def transpose_quantize_dequantize_axis(ctx: OptimizerCtx, perm: list[int], node: Node) -> bool:
    """``TransposeQuantizeDequantizeAxis``: unless the scale is a scalar, ``axis`` (default 1) becomes
    ``perm[axis]``, set explicitly; False for an invalid axis."""
    scale_shape = ctx.shape(node.inputs[1])
    if scale_shape is not None and len(scale_shape) == 0:
        return True
    axis = normalize_axis(ctx.int_attr(node, "axis", 1), len(perm))
    if axis is None:
        return False
    ctx.set_attr(node, "axis", perm[axis])
    return True


def handle_quantize_dequantize_linear(args: HandlerArgs) -> bool:
    """``HandleQuantizeDequantizeLinear``: from opset 13 (no ``axis`` before), the axis follows the perm."""
    ctx, node, perm = args.ctx, args.node, args.perm
    if ctx.opset >= 13 and not transpose_quantize_dequantize_axis(ctx, perm, node):
        return False
    ctx.transpose_input(node, 0, args.perm_inv, perm)
    ctx.transpose_outputs(node, perm)
    return True
