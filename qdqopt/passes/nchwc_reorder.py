"""MLAS's NCHWc weight layouts (``onnxruntime/core/mlas/lib/reorder.cpp``), as numpy.

``MlasNchwcGetBlockSize()`` (``B``, 8 with AVX2, 16 with AVX-512F) blocks the channel dimension. The NCHWc Conv
kernels read their filters pre-reordered, which ``NchwcTransformer`` does statically, writing new initializers:

* **OIHWBiBo** (``MlasReorderFilterOIHWBiBo``, every Conv with at least ``B`` input channels per group): output
  channels padded with zeros to a multiple of ``B`` (``Op``), input channels too (``Ip``), laid out as
  ``[Op/B][Ip/B][KH][KW][Bi][Bo]``, element ``W[ob*B + bo, ib*B + bi, kh, kw]``; dims ``[Op, Ip, KH, KW]``;
* **OIHWBo** (``MlasReorderFilterOIHWBo``, a group-1 Conv with fewer than ``B`` input channels, which reads its NCHW
  input directly, and a depthwise Conv): output channels padded to ``Op``, laid out as ``[Op/B][I][KH][KW][Bo]``,
  element ``W[ob*B + bo, i, kh, kw]``; dims ``[Op, I, KH, KW]``.

Both write zeros where the padded output (and input) channels have no source element.
"""

from __future__ import annotations

import numpy as np

__all__ = ["align_up", "reorder_filter_oihwbibo", "reorder_filter_oihwbo"]


def align_up(value: int, block: int) -> int:
    """``(value + block - 1) & ~(block - 1)`` for a power-of-two ``block``."""
    return (value + block - 1) & ~(block - 1)


def _padded(weights: np.ndarray, out_channels: int, in_channels: int) -> np.ndarray:
    o, i, kh, kw = weights.shape
    padded = np.zeros((out_channels, in_channels, kh, kw), dtype=np.float32)
    padded[:o, :i] = weights
    return padded


def reorder_filter_oihwbibo(weights: np.ndarray, block: int) -> np.ndarray:
    """``MlasReorderFilterOIHWBiBo``: ``[O, I, KH, KW]`` -> ``[Op, Ip, KH, KW]`` in the blocked order."""
    o, i, kh, kw = weights.shape
    op, ip = align_up(o, block), align_up(i, block)
    padded = _padded(weights.astype(np.float32, copy=False), op, ip)
    blocked = padded.reshape(op // block, block, ip // block, block, kh * kw)  # ob, bo, ib, bi, k
    reordered = blocked.transpose(0, 2, 4, 3, 1)  # ob, ib, k, bi, bo
    return np.ascontiguousarray(reordered).reshape(op, ip, kh, kw)


def reorder_filter_oihwbo(weights: np.ndarray, block: int) -> np.ndarray:
    """``MlasReorderFilterOIHWBo``: ``[O, I, KH, KW]`` -> ``[Op, I, KH, KW]`` in the blocked order."""
    o, i, kh, kw = weights.shape
    op = align_up(o, block)
    padded = _padded(weights.astype(np.float32, copy=False), op, i)
    blocked = padded.reshape(op // block, block, i, kh * kw)  # ob, bo, i, k
    reordered = blocked.transpose(0, 2, 3, 1)  # ob, i, k, bo
    return np.ascontiguousarray(reordered).reshape(op, i, kh, kw)
