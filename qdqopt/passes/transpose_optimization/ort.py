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
from qdqopt.passes.transpose_optimization.handlers import HANDLERS, HandlerInfo
from qdqopt.passes.transpose_optimization.handlers.axis import handle_simple_with_axis, handle_soft_hard_max
from qdqopt.passes.transpose_optimization.handlers.base import (
    HandlerArgs,
    first_input,
    qlinear_binary_inputs,
    qlinear_concat_inputs,
)
from qdqopt.passes.transpose_optimization.handlers.elementwise import handle_simple, handle_simple_broadcast
from qdqopt.passes.transpose_optimization.handlers.qdq import transpose_quantize_dequantize_axis
from qdqopt.passes.transpose_optimization.handlers.reduce import handle_reduce_ops
from qdqopt.passes.transpose_optimization.handlers.resize import handle_resize
from qdqopt.passes.transpose_optimization.layout import swap_node_op_type_domain_and_since_version
from qdqopt.passes.transpose_optimization.perms import channel_last_to_first_perm

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = [
    "EXTENDED_HANDLERS",
    "handle_contrib_quantize_dequantize_linear",
    "handle_ep_aware_resize",
    "handle_max_pool",
    "handle_qlinear_pool_op",
    "ort_ep_cost_check",
]


def handle_qlinear_pool_op(args: HandlerArgs) -> bool:
    """``HandleQLinearPoolOp`` (QLinearAveragePool, QLinearGlobalAveragePool): toggle ``channels_last`` when the
    perm is the channel-last -> first one (or its inverse on a channels-last node)."""
    ctx, node, perm = args.ctx, args.node, args.perm
    channels_last = ctx.int_attr(node, "channels_last", 0)
    rank = len(perm)
    if rank < 2:
        return False
    p = channel_last_to_first_perm(rank)
    if (not channels_last and perm == p) or (channels_last and args.perm_inv == p):
        ctx.set_attr(node, "channels_last", 1 - channels_last)
        ctx.transpose_input(node, 0, args.perm_inv, perm)
        ctx.transpose_outputs(node, perm)
        return True
    return ctx.refuse(node, "the perm does not switch it between channels-first and channels-last")


def handle_max_pool(args: HandlerArgs) -> bool:
    """``HandleMaxPool``: a CPU MaxPool of u8/s8 without an ``indices`` output, reached by the channel-last -> first
    perm, becomes ``com.microsoft.NhwcMaxPool`` (``storage_order`` dropped) between new Transposes."""
    ctx, node, perm = args.ctx, args.node, args.perm
    if node.ep != CPU:
        return ctx.refuse(node, "not on the CPU EP")
    if len(node.outputs) == 2 and node.outputs[1]:
        return ctx.refuse(node, "its indices output is used")
    if ctx.dtype(node.outputs[0]) not in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8):
        return ctx.refuse(node, "its output is not uint8/int8 (a float MaxPool stays NCHW)")
    if perm != channel_last_to_first_perm(len(perm)):
        return ctx.refuse(node, "the Transpose is not channels-last to channels-first")
    new = swap_node_op_type_domain_and_since_version(ctx, node, "NhwcMaxPool", MS)
    if "storage_order" in new.attributes:
        ctx.graph.remove_attribute(new, "storage_order")
    ctx.transpose_input(new, 0, args.perm_inv, perm)
    ctx.transpose_outputs(new, perm)
    return True


def handle_contrib_quantize_dequantize_linear(args: HandlerArgs) -> bool:
    """``HandleContribQuantizeDequantizeLinear``: as the ONNX handler, with no opset condition."""
    if not transpose_quantize_dequantize_axis(args.ctx, args.perm, args.node):
        return False
    args.ctx.transpose_input(args.node, 0, args.perm_inv, args.perm)
    args.ctx.transpose_outputs(args.node, args.perm)
    return True


def handle_ep_aware_resize(args: HandlerArgs) -> bool:
    """``EPAwareHandleResize``: only a CPU node, rank 4, NCHW <-> NHWC perms; then ``HandleResize``."""
    if args.node.ep != CPU:
        return args.ctx.refuse(args.node, "not on the CPU EP")
    if len(args.perm) != 4 or args.perm not in ([0, 2, 3, 1], [0, 3, 1, 2]):
        return args.ctx.refuse(args.node, "only rank-4 NCHW <-> NHWC Transposes are pushed through Resize")
    return handle_resize(args)


_FIRST_SIMPLE = HandlerInfo(first_input, handle_simple)

#: ``OrtExtendedHandlers``
EXTENDED_HANDLERS: dict[str, HandlerInfo] = {
    "MaxPool": HandlerInfo(first_input, handle_max_pool),
    "Resize": HandlerInfo(first_input, handle_ep_aware_resize),
    # EPAwareHandleReshape: the QNN special case aside, the default handler
    "Reshape": HANDLERS["Reshape"],
    f"{MS}.QuantizeLinear": HandlerInfo(first_input, handle_contrib_quantize_dequantize_linear),
    f"{MS}.DequantizeLinear": HandlerInfo(first_input, handle_contrib_quantize_dequantize_linear),
    f"{MS}.QLinearAdd": HandlerInfo(qlinear_binary_inputs, handle_simple_broadcast),
    f"{MS}.QLinearAveragePool": HandlerInfo(first_input, handle_qlinear_pool_op),
    f"{MS}.QLinearConcat": HandlerInfo(qlinear_concat_inputs, handle_simple_with_axis),
    f"{MS}.QLinearGlobalAveragePool": HandlerInfo(first_input, handle_qlinear_pool_op),
    f"{MS}.QLinearLeakyRelu": _FIRST_SIMPLE,
    f"{MS}.QLinearMul": HandlerInfo(qlinear_binary_inputs, handle_simple_broadcast),
    f"{MS}.QLinearReduceMean": HandlerInfo(first_input, handle_reduce_ops),
    f"{MS}.QLinearSigmoid": _FIRST_SIMPLE,
    f"{MS}.QLinearSoftmax": HandlerInfo(first_input, handle_soft_hard_max),
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
