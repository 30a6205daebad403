"""Ops whose other inputs hold values per axis: Pad (``HandlePad``: ``pads``, begins then ends) and Slice
(``HandleSlice``: ``axes``, next to ``starts``/``ends``/``steps``).

::

    x ─> Transpose(p) ─> Pad(pads=[b0..b3, e0..e3]) ─> y
        becomes    x ─> Pad(pads=[b[p⁻¹], e[p⁻¹]]) ─> Transpose(p) ─> y
    x ─> Transpose(p) ─> Slice(starts, ends, axes=A) ─> y
        becomes    x ─> Slice(starts, ends, axes=[p[a] for a in A]) ─> Transpose(p) ─> y

Pad's ``pads`` (an attribute before opset 11, input 1 from there) are reordered with ``p⁻¹`` for the begins and
``p⁻¹ + rank`` for the ends: a constant into a new initializer, a computed one through a new ``Gather``
(:meth:`~qdqopt.passes.transpose_optimization.context.OptimizerCtx.permute_input`). Slice keeps its
``starts``/``ends``/``steps`` and maps the axes they apply to (unsorted, they line up with those inputs); from
opset 10 the new axes are an initializer of the type of the old axes (or of ``starts`` when there were none).
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs
from qdqopt.passes.transpose_optimization.perms import axes_for_transposed_input, normalize_axes

__all__ = ["handle_pad", "handle_slice"]


def handle_pad(args: HandlerArgs) -> bool:
    """``HandlePad``: ``pads`` permuted with ``p⁻¹`` (begins) and ``p⁻¹ + rank`` (ends), then the data input and
    the output are transposed. Before opset 11 the ``pads`` attribute must hold ``2 * rank`` values."""
    ctx, node, perm_inv = args.ctx, args.node, args.perm_inv
    rank = len(perm_inv)
    pads_perm = [*perm_inv, *(p + rank for p in perm_inv)]
    if ctx.opset < 11:
        pads = ctx.ints_attr(node, "pads")
        if pads is None or len(pads) != 2 * rank:
            return ctx.refuse(node, "the pads attribute does not hold 2 values per axis")
        ctx.set_attr(node, "pads", [pads[i] for i in pads_perm])
    else:
        ctx.permute_input(node, 1, pads_perm)
    ctx.transpose_input(node, 0, perm_inv, args.perm)
    ctx.transpose_outputs(node, args.perm)
    return True


def handle_slice(args: HandlerArgs) -> bool:
    """``HandleSlice``: the axes sliced become ``perm[axis]``, in their order.

    Before opset 10 they are the ``axes`` attribute (absent: ``0 .. len(starts) - 1``). From opset 10 they are
    input 3: when absent, one per ``starts`` value (its shape must be known); when present, a constant (else no
    push). Invalid or repeated axes: no push.
    """
    ctx, node, perm = args.ctx, args.node, args.perm
    rank = len(perm)
    if ctx.opset < 10:
        axes = ctx.ints_attr(node, "axes")
        if axes is None:
            starts = ctx.ints_attr(node, "starts")
            if starts is None:
                return ctx.refuse(node, "no axes and no starts attribute")
            axes = list(range(len(starts)))
        norm = normalize_axes(axes, rank)
        if norm is None:
            return ctx.refuse(node, "invalid axes")
        ctx.set_attr(node, "axes", axes_for_transposed_input(norm, perm))
    elif len(node.inputs) < 4 or not node.inputs[3]:
        starts_input = node.inputs[1]
        shape = ctx.shape(starts_input)
        if shape is None or len(shape) != 1 or shape[0] < 0 or shape[0] > rank:
            return ctx.refuse(node, "no axes input and the length of starts is unknown")
        ctx.set_input(node, 3, ctx.add_int_matching(perm[: shape[0]], ctx.dtype(starts_input)))
    else:
        axes_input = node.inputs[3]
        found = ctx.int_values(axes_input)
        if found is None:
            return ctx.refuse(node, "the axes input is not a constant")
        values, dtype = found
        norm = normalize_axes(values, rank)
        if norm is None:
            return ctx.refuse(node, "invalid axes")
        ctx.set_input(node, 3, ctx.add_int_matching(axes_for_transposed_input(norm, perm), dtype))
        if not ctx.has_consumers(axes_input):
            ctx.graph.remove_initializer(axes_input)
    ctx.transpose_input(node, 0, args.perm_inv, perm)
    ctx.transpose_outputs(node, perm)
    return True
