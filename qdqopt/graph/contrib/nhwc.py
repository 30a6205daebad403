"""``nhwc_schema_defs.cc``: the com.microsoft ops with a channels-last form (what NhwcTransformer produces).

=========================  ==============================================================================
QLinearConv                y_zero_point's type; ``convPoolShapeInference`` (dilations, kernel from w, output
                           channels from w's dim 0), through the NHWC transposition with ``channels_last=1``
NhwcMaxPool                x's type; the pool shape (dilations, ceil_mode), always NHWC
QLinearAveragePool         X's type; the pool shape **without dilations** (``use_dilation`` false: ORT ignores
                           the attribute), NHWC with ``channels_last=1``
QLinearGlobalAveragePool   X's type; the input shape with every spatial dim 1 (dims 2.. or 1..rank-2 with
                           ``channels_last``), for a rank of 2 at least
NhwcConv / NhwcFusedConv   X's type; the Conv shape through the NHWC transposition (no CPU kernel on x86: the
                           layout is ORT's ``NhwcInferenceContext`` around ONNX's Conv inference)
=========================  ==============================================================================

The NHWC transposition (``NhwcInferenceContext``) needs a rank of 3 at least, on the input and on the result.
"""

from __future__ import annotations

from qdqopt.graph.contrib._base import MS, Dim, Node, OpSpec, conv_pool_shape, dim_value

__all__ = ["SPECS"]


def _qlinear_shape(node: Node, w: list[Dim] | None, *, use_dilation: bool, require_kernel_shape: bool) -> None:
    """Output 0's shape by the NCHW inference, or the NHWC one when ``channels_last`` is set."""
    channels_last = node.attr_int("channels_last", 0) != 0
    dims = conv_pool_shape(
        node,
        node.shape(0),
        w,
        use_dilation=use_dilation,
        require_kernel_shape=require_kernel_shape,
        channels_last=channels_last,
    )
    node.set_shape_if_known(0, dims)


def _qlinear_conv(node: Node) -> None:
    node.propagate_elem(7, 0)
    _qlinear_shape(node, node.shape(3), use_dilation=True, require_kernel_shape=False)


def _nhwc_max_pool(node: Node) -> None:
    node.propagate_elem(0, 0)
    dims = conv_pool_shape(node, node.shape(0), None, use_dilation=True, require_kernel_shape=True, channels_last=True)
    node.set_shape_if_known(0, dims)


def _qlinear_average_pool(node: Node) -> None:
    node.propagate_elem(0, 0)
    _qlinear_shape(node, None, use_dilation=False, require_kernel_shape=True)


def _qlinear_global_average_pool(node: Node) -> None:
    node.propagate_elem(0, 0)
    x = node.shape(0)
    if x is None or len(x) < 2:
        return
    first = 1 if node.attr_int("channels_last", 0) else 2
    out = list(x)
    for i in range(first, first + len(x) - 2):
        out[i] = dim_value(1)
    node.set_shape(0, out)


def _nhwc_conv(node: Node) -> None:
    node.propagate_elem(0, 0)
    x, w = node.shape(0), node.shape(1)
    dims = conv_pool_shape(node, x, w, use_dilation=True, require_kernel_shape=False, channels_last=True)
    node.set_shape_if_known(0, dims)


SPECS = [
    OpSpec(MS, "QLinearConv", _qlinear_conv),
    OpSpec(MS, "NhwcMaxPool", _nhwc_max_pool),
    OpSpec(MS, "QLinearAveragePool", _qlinear_average_pool),
    OpSpec(MS, "QLinearGlobalAveragePool", _qlinear_global_average_pool),
    OpSpec(MS, "NhwcConv", _nhwc_conv),
    OpSpec(MS, "NhwcFusedConv", _nhwc_conv),
]
