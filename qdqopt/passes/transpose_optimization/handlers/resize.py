"""Resize: ``HandleResize``. ORT's ONNX ``handler_map`` leaves it out (EPs implement Resize for one layout); ORT
registers it only through its extended map, where ``EPAwareHandleResize`` calls it for a CPU-EP node of rank 4
with a Transpose between NCHW and NHWC (:mod:`qdqopt.passes.transpose_optimization.ort`).

::

    x ─> Transpose(p) ─> Resize(roi, scales, sizes) ─> y
        becomes    x ─> Resize(roi', scales[p⁻¹], sizes[p⁻¹]) ─> Transpose(p) ─> y

Each per-axis input is reordered by
:meth:`~qdqopt.passes.transpose_optimization.context.OptimizerCtx.permute_input` (a constant into a new
initializer, anything else through a ``Gather``): before opset 11 the ``scales`` input (input 1); from opset 11
``roi`` (input 1: starts then ends, so ``p⁻¹`` and ``p⁻¹ + rank``) and every other non-empty input after it
(``scales``, ``sizes``) with ``p⁻¹``. The ``axes`` attribute of Resize-18 is not looked at.
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs

__all__ = ["handle_resize"]


def handle_resize(args: HandlerArgs) -> bool:
    """``HandleResize``: never declines (the caller checks the EP, rank and perm)."""
    ctx, node, perm_inv = args.ctx, args.node, args.perm_inv
    rank = len(perm_inv)
    inputs = list(node.inputs)
    if ctx.opset < 11:
        ctx.permute_input(node, 1, perm_inv)
    else:
        if len(inputs) > 1 and inputs[1]:
            ctx.permute_input(node, 1, [*perm_inv, *(p + rank for p in perm_inv)])
        for i in range(2, len(inputs)):
            if inputs[i]:
                ctx.permute_input(node, i, perm_inv)
    ctx.transpose_input(node, 0, perm_inv, args.perm)
    ctx.transpose_outputs(node, args.perm)
    return True
