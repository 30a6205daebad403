"""ORT's own layer over the generic optimizer (``ort_transpose_optimization.cc``): the extended handlers
(``OrtExtendedHandlers``) and the CPU EP's cost check (``OrtEPCostCheck``).

::

    x ─> Transpose(NHWC->NCHW) ─> MaxPool(u8) ─> y    becomes    x ─> com.microsoft.NhwcMaxPool ─> Transpose ─> y
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

from qdqopt.graph import Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.transpose_optimization.context import CPU, MS
from qdqopt.passes.transpose_optimization.handlers import HANDLERS, HandlerInfo, not_implemented
from qdqopt.passes.transpose_optimization.handlers.base import (
    first_input,
    qlinear_binary_inputs,
    qlinear_concat_inputs,
)

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = ["EXTENDED_HANDLERS", "ort_ep_cost_check"]

#: ``OrtExtendedHandlers``
EXTENDED_HANDLERS: dict[str, HandlerInfo] = {
    "MaxPool": HandlerInfo(first_input, not_implemented),
    "Resize": HandlerInfo(first_input, not_implemented),
    "Reshape": HANDLERS["Reshape"],
    f"{MS}.QuantizeLinear": HandlerInfo(first_input, not_implemented),
    f"{MS}.DequantizeLinear": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearAdd": HandlerInfo(qlinear_binary_inputs, not_implemented),
    f"{MS}.QLinearAveragePool": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearConcat": HandlerInfo(qlinear_concat_inputs, not_implemented),
    f"{MS}.QLinearGlobalAveragePool": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearLeakyRelu": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearMul": HandlerInfo(qlinear_binary_inputs, not_implemented),
    f"{MS}.QLinearReduceMean": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearSigmoid": HandlerInfo(first_input, not_implemented),
    f"{MS}.QLinearSoftmax": HandlerInfo(first_input, not_implemented),
}


def ort_ep_cost_check(ctx: OptimizerCtx, node: Node) -> bool | None:
    """``OrtEPCostCheck``: True to push regardless of cost, None to fall through to the default cost check.

    Only in a run for the CPU EP on a CPU node: a MaxPool is always pushed (it may become NhwcMaxPool), and so is a
    Resize of a 4-D u8/s8 tensor in ``linear`` mode.
    """
    if ctx.provider != CPU or node.ep != CPU or normalize_domain(node.domain) != "":
        return None
    if node.op_type == "MaxPool":
        return True
    if node.op_type == "Resize":
        shape = ctx.shape(node.inputs[0])
        if (
            shape is not None
            and len(shape) == 4
            and ctx.dtype(node.inputs[0]) in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
            and node.attr("mode") == "linear"
        ):
            return True
    return None
