"""The handler map (``handler_map`` in ``onnx_transpose_optimization.cc``, and ORT's ``OrtExtendedHandlers``, which
take precedence): for each op, which inputs a push transposes and how.

Keys are the op type for the ONNX domain and ``<domain>.<op type>`` otherwise, as ORT's ``GetHandler`` builds them.
One module per op family: :mod:`.elementwise`, :mod:`.axis`, :mod:`.shape`, :mod:`.reduce`, :mod:`.qdq`,
:mod:`.pad_slice`, and :mod:`.resize` (``HandleResize``, which ORT's map leaves out: only its extended map calls it);
ORT's own handlers (MaxPool, Resize, the com.microsoft QLinear ops) are in
:mod:`qdqopt.passes.transpose_optimization.ort`, and :mod:`qdqopt.passes.transpose_optimization.registry` looks both
up. The map is ORT 1.32's (checked live, Elu included), none refused.
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.handlers.axis import (
    handle_arg_min_max,
    handle_gather,
    handle_simple_with_axis,
    handle_soft_hard_max,
)
from qdqopt.passes.transpose_optimization.handlers.base import (
    HandlerArgs,
    HandlerInfo,
    all_inputs,
    first_input,
    nonscalar_inputs,
)
from qdqopt.passes.transpose_optimization.handlers.elementwise import (
    BROADCAST_OPS,
    SIMPLE_OPS,
    handle_simple,
    handle_simple_broadcast,
)
from qdqopt.passes.transpose_optimization.handlers.pad_slice import handle_pad, handle_slice
from qdqopt.passes.transpose_optimization.handlers.qdq import handle_quantize_dequantize_linear
from qdqopt.passes.transpose_optimization.handlers.reduce import REDUCE_OPS, handle_reduce_ops
from qdqopt.passes.transpose_optimization.handlers.shape import (
    handle_reshape,
    handle_shape,
    handle_squeeze,
    handle_tile,
    handle_transpose,
    handle_unsqueeze,
)

__all__ = ["HANDLERS", "HandlerArgs", "HandlerInfo"]


_SIMPLE = HandlerInfo(all_inputs, handle_simple)
_FIRST_SIMPLE = HandlerInfo(first_input, handle_simple)

#: ``handler_map``: the ONNX-domain ops
HANDLERS: dict[str, HandlerInfo] = {
    **dict.fromkeys(SIMPLE_OPS, _SIMPLE),
    **dict.fromkeys(BROADCAST_OPS, HandlerInfo(nonscalar_inputs, handle_simple_broadcast)),
    "Clip": _FIRST_SIMPLE,
    "CastLike": _FIRST_SIMPLE,
    "Transpose": HandlerInfo(first_input, handle_transpose, transposes_outputs=False),
    "Concat": HandlerInfo(all_inputs, handle_simple_with_axis),
    "Split": HandlerInfo(first_input, handle_simple_with_axis),
    "Shape": HandlerInfo(first_input, handle_shape, transposes_outputs=False),
    "Pad": HandlerInfo(first_input, handle_pad),
    **dict.fromkeys(REDUCE_OPS, HandlerInfo(first_input, handle_reduce_ops)),
    "ArgMin": HandlerInfo(first_input, handle_arg_min_max),
    "ArgMax": HandlerInfo(first_input, handle_arg_min_max),
    "Squeeze": HandlerInfo(first_input, handle_squeeze),
    "Unsqueeze": HandlerInfo(first_input, handle_unsqueeze),
    "Slice": HandlerInfo(first_input, handle_slice),
    "Gather": HandlerInfo(first_input, handle_gather),
    "Tile": HandlerInfo(first_input, handle_tile),
    "Softmax": HandlerInfo(first_input, handle_soft_hard_max),
    "Hardmax": HandlerInfo(first_input, handle_soft_hard_max),
    "LogSoftmax": HandlerInfo(first_input, handle_soft_hard_max),
    "QuantizeLinear": HandlerInfo(first_input, handle_quantize_dequantize_linear),
    "DequantizeLinear": HandlerInfo(first_input, handle_quantize_dequantize_linear),
    "Reshape": HandlerInfo(first_input, handle_reshape, transposes_outputs=False),
}
