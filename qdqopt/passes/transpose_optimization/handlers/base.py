"""What a handler is (``HandlerInfo``, ``HandlerArgs`` in ``onnx_transpose_optimization.h``) and the functions that
pick a node's transposible inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qdqopt.graph import Node

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = [
    "HandlerArgs",
    "HandlerFn",
    "HandlerInfo",
    "InputsFn",
    "all_inputs",
    "first_input",
    "nonscalar_inputs",
    "qlinear_binary_inputs",
    "qlinear_concat_inputs",
]


@dataclass(init=False)
class HandlerArgs:
    """``HandlerArgs``: a push of ``transpose`` (with ``perm``) through ``node``. (Made in one place, per push, and
    only read: not frozen, so that its own ``__init__`` sets the fields directly.)"""

    ctx: OptimizerCtx
    transpose: Node
    node: Node
    perm: list[int]
    perm_inv: list[int]
    transposible_inputs: list[int]

    def __init__(
        self,
        ctx: OptimizerCtx,
        transpose: Node,
        node: Node,
        perm: list[int],
        perm_inv: list[int],
        transposible_inputs: list[int],
    ) -> None:
        self.ctx, self.transpose, self.node = ctx, transpose, node
        self.perm, self.perm_inv, self.transposible_inputs = perm, perm_inv, transposible_inputs


HandlerFn = Callable[[HandlerArgs], bool]
InputsFn = Callable[["OptimizerCtx", Node], list[int]]


@dataclass(frozen=True)
class HandlerInfo:
    """``HandlerInfo``: which inputs a push transposes, the handler, and whether it adds Transposes on the outputs
    (the cost model counts those, and ``outputs_leading_to_transpose`` looks through such nodes)."""

    transposible_inputs: InputsFn
    handler: HandlerFn
    transposes_outputs: bool = True


def first_input(ctx: OptimizerCtx, node: Node) -> list[int]:
    """``FirstInput``."""
    return [0]


def all_inputs(ctx: OptimizerCtx, node: Node) -> list[int]:
    """``AllInputs``."""
    return list(range(len(node.inputs)))


def nonscalar_inputs(ctx: OptimizerCtx, node: Node) -> list[int]:
    """``NonScalarInputs``: inputs whose rank is unknown or above 0."""
    out: list[int] = []
    for k, value in enumerate(node.inputs):
        shape = ctx.shape(value)
        if shape is None or len(shape) != 0:
            out.append(k)
    return out


def qlinear_binary_inputs(ctx: OptimizerCtx, node: Node) -> list[int]:
    """``QLinearBinaryOpInputs``: the two quantized tensors of QLinearAdd/QLinearMul."""
    return [0, 3]


def qlinear_concat_inputs(ctx: OptimizerCtx, node: Node) -> list[int]:
    """``QLinearConcatInputs``: inputs 2, 5, 8, ... (each tensor after its scale and zero point)."""
    return list(range(2, len(node.inputs), 3))
