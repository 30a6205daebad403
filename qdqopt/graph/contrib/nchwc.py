"""``nchwc_schema_defs.cc``: the ``com.microsoft.nchwc`` ops NchwcTransformer produces (float, NCHWc blocked).

=========================  ==============================================================================
Conv                       X's type; ``convPoolShapeInference`` (channels from W's dim 0, already padded)
MaxPool / AveragePool      X's type; the pool shape (both with dilations)
GlobalMaxPool / ...Average X's type; N, C, then 1 per spatial dim
ReorderInput               X's type; N, the channels rounded up to the NCHWc block size (unknown if the
                           input's are), the spatial dims (read from NHWC with ``channels_last=1``)
ReorderOutput              X's type; N, ``channels``, the spatial dims (``channels`` last with
                           ``channels_last=1``)
Upsample                   X's type; each dim times its integer ``scales`` entry where it has a value,
                           unknown otherwise; an input with a shape and no ``scales`` gives a rank-0 shape
                           (the function creates the output shape before it looks for ``scales``)
=========================  ==============================================================================

ReorderInput's block size is ``MlasNchwcGetBlockSize()`` of the machine ORT runs on: :func:`set_nchwc_block_size`
sets the one the inference uses (default: :meth:`qdqopt.target.Target.detect`'s).
"""

from __future__ import annotations

from qdqopt.graph.contrib._base import (
    Dim,
    InferenceError,
    Node,
    OpSpec,
    conv_pool_shape,
    dim_value,
    global_pool_shape,
    unknown_dim,
)

__all__ = ["SPECS", "nchwc_block_size", "set_nchwc_block_size"]

NCHWC = "com.microsoft.nchwc"

_block_size: int | None = None


def set_nchwc_block_size(size: int | None) -> None:
    """Set the NCHWc block size ReorderInput's inference rounds channels up to (None: the detected target's)."""
    global _block_size  # noqa: PLW0603
    _block_size = size


def nchwc_block_size() -> int:
    if _block_size is not None:
        return _block_size
    from qdqopt.target import Target

    return Target.detect().nchwc_block_size


def _conv(node: Node) -> None:
    node.propagate_elem(0, 0)
    node.set_shape_if_known(
        0, conv_pool_shape(node, node.shape(0), node.shape(1), use_dilation=True, require_kernel_shape=False)
    )


def _pool(node: Node) -> None:
    node.propagate_elem(0, 0)
    node.set_shape_if_known(0, conv_pool_shape(node, node.shape(0), None, use_dilation=True, require_kernel_shape=True))


def _global_pool(node: Node) -> None:
    node.propagate_elem(0, 0)
    node.set_shape_if_known(0, global_pool_shape(node.shape(0)))


def _reorder_source(node: Node) -> list[Dim] | None:
    """The element type propagated; the input's shape (None if unknown), of rank 2 or more."""
    node.propagate_elem(0, 0)
    x = node.shape(0)
    if x is not None and len(x) < 2:
        raise InferenceError("tensor rank too small")
    return x


def _reorder_input(node: Node) -> None:
    x = _reorder_source(node)
    if x is None:
        return
    rank = len(x)
    channels_last = node.attr_int("channels_last", 0) != 0
    channels = x[rank - 1 if channels_last else 1]
    if channels.HasField("dim_value"):
        block = nchwc_block_size()
        aligned = dim_value((int(channels.dim_value) + block - 1) & ~(block - 1))
    else:
        aligned = unknown_dim()
    first = 1 if channels_last else 2
    node.set_shape(0, [x[0], aligned, *x[first : first + rank - 2]])


def _reorder_output(node: Node) -> None:
    x = _reorder_source(node)
    if x is None:
        return
    channels = node.attr_int("channels", 0)
    if channels <= 0:
        raise InferenceError("invalid channel count")
    spatial = x[2:]
    if node.attr_int("channels_last", 0) == 0:
        node.set_shape(0, [x[0], dim_value(channels), *spatial])
    else:
        node.set_shape(0, [x[0], *spatial, dim_value(channels)])


def _upsample(node: Node) -> None:
    node.propagate_elem(0, 0)
    x = node.shape(0)
    if x is None:
        return
    node.set_shape(0, [])
    rank = len(x)
    if rank < 2:
        raise InferenceError("tensor rank too small")
    scales = node.attr_ints("scales")
    if scales is None:
        return
    if len(scales) != rank:
        raise InferenceError("invalid scales dimension")
    out = []
    for d, scale in zip(x, scales, strict=True):
        if scale <= 0:
            raise InferenceError("invalid scales value")
        out.append(dim_value(int(d.dim_value) * scale) if d.HasField("dim_value") else unknown_dim())
    node.set_shape(0, out)


SPECS = [
    OpSpec(NCHWC, "Conv", _conv),
    OpSpec(NCHWC, "MaxPool", _pool),
    OpSpec(NCHWC, "AveragePool", _pool),
    OpSpec(NCHWC, "GlobalMaxPool", _global_pool),
    OpSpec(NCHWC, "GlobalAveragePool", _global_pool),
    OpSpec(NCHWC, "ReorderInput", _reorder_input),
    OpSpec(NCHWC, "ReorderOutput", _reorder_output),
    OpSpec(NCHWC, "Upsample", _upsample),
]
