"""Perm and axes arithmetic (the free helpers at the top of ORT's ``onnx_transpose_optimization.cc``).

A perm ``p`` maps output axis ``i`` to input axis ``p[i]`` (ONNX Transpose semantics); ``invert_perm`` undoes it
and ``compose_perm(p1, p2)`` is the perm of ``Transpose(p2)`` applied after ``Transpose(p1)``.
"""

from __future__ import annotations

__all__ = [
    "axes_for_transposed_input",
    "channel_first_to_last_perm",
    "channel_last_to_first_perm",
    "compose_perm",
    "finalize_reshape_shape",
    "invert_perm",
    "normalize_axes",
    "normalize_axis",
    "sorted_axes_for_transposed_input",
    "squeeze_perm",
    "squeeze_shape",
    "unsqueeze_axis",
    "unsqueeze_perm",
    "unsqueeze_shape",
    "valid_perm",
]


def invert_perm(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def compose_perm(perm1: list[int], perm2: list[int]) -> list[int]:
    return [perm1[p] for p in perm2]


def valid_perm(perm: list[int]) -> bool:
    return len(perm) > 0 and sorted(perm) == list(range(len(perm)))


def normalize_axes(axes: list[int], rank: int) -> list[int] | None:
    out: list[int] = []
    for axis in axes:
        a = axis + rank if axis < 0 else axis
        if a < 0 or a >= rank or a in out:
            return None
        out.append(a)
    return out


def normalize_axis(axis: int, rank: int) -> int | None:
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def unsqueeze_shape(shape: list[int], axes: list[int]) -> list[int]:
    new_rank = len(shape) + len(axes)
    out = [0] * new_rank
    for a in axes:
        out[a] = 1
    j = 0
    for i in range(new_rank):
        if out[i] != 1:
            out[i] = shape[j]
            j += 1
    return out


def squeeze_shape(shape: list[int], axes: list[int]) -> list[int]:
    pos = sorted({a + len(shape) if a < 0 else a for a in axes})
    out: list[int] = []
    for i, d in enumerate(shape):
        if not pos and d == 1:
            continue
        if i in pos:
            continue
        out.append(d)
    return out


def unsqueeze_perm(axes: list[int], perm: list[int]) -> list[int]:
    new_rank = len(perm) + len(axes)
    added = [i in axes for i in range(new_rank)]
    axes_map = [i for i in range(new_rank) if not added[i]]
    out: list[int] = []
    j = 0
    for i in range(new_rank):
        if added[i]:
            out.append(i)
        else:
            out.append(axes_map[perm[j]])
            j += 1
    return out


def squeeze_perm(axes: list[int], perm: list[int]) -> list[int]:
    removed = [i in axes for i in range(len(perm))]
    axes_map = [0] * len(perm)
    j = 0
    for i in range(len(perm)):
        if not removed[i]:
            axes_map[i] = j
            j += 1
    return [axes_map[p] for p in perm if not removed[p]]


def unsqueeze_axis(axes: list[int], axis: int) -> int:
    for a in sorted(axes):
        if a <= axis:
            axis += 1
    return axis


def axes_for_transposed_input(axes: list[int], perm: list[int]) -> list[int]:
    """``AxesForTransposedInput``: ``perm[a]`` for each axis, in the given order (Slice's axes line up with its
    starts/ends/steps)."""
    return [perm[a] for a in axes]


def sorted_axes_for_transposed_input(axes: list[int], perm: list[int]) -> list[int]:
    included = {perm[a] for a in axes}
    return [a for a in range(len(perm)) if a in included]


def finalize_reshape_shape(input_shape: list[int], requested: list[int], allow_zero: bool) -> list[int] | None:
    """``FinalizeReshapeShape``: the Reshape's output shape for a concrete input shape of the same rank."""
    total = 1
    for d in input_shape:
        if d < 0:
            return None
        total *= d
    if len(input_shape) != len(requested):
        return None
    unknown = -1
    size = 1
    final = list(requested)
    for i, d in enumerate(requested):
        if d == -1:
            if unknown != -1:
                return None
            unknown = i
        else:
            if not allow_zero and d == 0:
                final[i] = input_shape[i]
            size *= final[i]
    if unknown != -1:
        if size == 0 or total % size != 0:
            return None
        final[unknown] = total // size
    elif size != total:
        return None
    return final


def channel_first_to_last_perm(rank: int) -> list[int]:
    """``ChannelFirstToLastPerm``: ``[0, 2, 3, ..., rank-1, 1]`` (NCHW -> NHWC for rank 4)."""
    if rank < 2:
        return []
    return [0, *range(2, rank), 1]


def channel_last_to_first_perm(rank: int) -> list[int]:
    """``ChannelLastToFirstPerm``: ``[0, rank-1, 1, ..., rank-2]`` (NHWC -> NCHW for rank 4)."""
    if rank < 2:
        return []
    return [0, rank - 1, *range(1, rank - 1)]
