"""Element-wise ops: ``HandleSimpleNode`` and ``HandleSimpleNodeBroadcast``.

::

    x ─> Transpose(p) ─> Relu ─> y          becomes     x ─> Relu ─> Transpose(p) ─> y
    x ─> Transpose(p) ─> Add(·, c) ─> y     becomes     x ─> Add(·, Transpose(c, p⁻¹)) ─> Transpose(p) ─> y

Constant inputs are transposed in place (``c`` above is rewritten, not wrapped); a lower-rank broadcast input is
first unsqueezed to the perm's rank (``NormalizeInputRanks``).
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.base import HandlerArgs

__all__ = ["BROADCAST_OPS", "SIMPLE_OPS", "handle_simple", "handle_simple_broadcast"]

SIMPLE_OPS = [
    "Cast",
    "Exp",
    "Gelu",
    "Identity",
    "LeakyRelu",
    "Log",
    "Reciprocal",
    "Relu",
    "Sigmoid",
    "Sqrt",
    "Tanh",
    "Abs",
    "Not",
    "Ceil",
    "Floor",
    "Neg",
    "Erf",
    "HardSigmoid",
    "Round",
    "IsInf",
    "IsNaN",
    "Selu",
    "Shrink",
    "Sign",
    "Softplus",
    "Softsign",
    "ThresholdedRelu",
    "Celu",
    "Elu",  # in ORT 1.32's map (not in older ones; checked live)
    "HardSwish",
    "Sin",
    "Cos",
    "Tan",
    "Sinh",
    "Cosh",
    "Asin",
    "Acos",
    "Atan",
    "Asinh",
    "Acosh",
    "Atanh",
]
BROADCAST_OPS = [
    "Add",
    "Max",
    "Min",
    "Mul",
    "Sub",
    "Div",
    "And",
    "Or",
    "Xor",
    "Mod",
    "PRelu",
    "BitShift",
    "Equal",
    "Greater",
    "Less",
    "GreaterOrEqual",
    "LessOrEqual",
    "Mean",
    "Sum",
    "Pow",
    "Where",
]


def handle_simple(args: HandlerArgs) -> bool:
    """``HandleSimpleNode``: the selected inputs get ``perm_inv``, every output gets ``perm``."""
    args.ctx.transpose_inputs(args.node, args.perm_inv, args.transposible_inputs)
    args.ctx.transpose_outputs(args.node, args.perm)
    return True


def handle_simple_broadcast(args: HandlerArgs) -> bool:
    """``HandleSimpleNodeBroadcast``: ``NormalizeInputRanks`` first (every selected input of known rank at most the
    perm's; lower ranks unsqueezed at the front), then as :func:`handle_simple`."""
    if not args.ctx.normalize_input_ranks(args.node, len(args.perm), args.transposible_inputs):
        return False
    return handle_simple(args)
