"""ORT's topological order (``GraphViewer`` + ``Graph::ReverseDFSFrom``), which is also the saved node order.

The leaves are the nodes with no output edge (a node whose outputs only reach graph outputs is a leaf), pushed in
ascending index order, so the highest index is visited first. For each node entered, its input nodes (one per input
edge, so possibly repeated) are sorted by ascending index and pushed when not yet visited. A node is emitted when it
is left, after all its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

__all__ = ["NodeIndex", "ort_order_of_adjacency", "ort_topological_order"]

#: a node's index in its graph (``NodeIndex`` in ORT: never reused). An ``int``, annotated ``Any`` so that a build
#: compiled with mypyc keeps it as the Python object it is: an ``int`` annotation makes it a native integer, which
#: becomes a new Python object each time it is used as a dict or set key, as node indices are all the time (only
#: 0 to 256 are shared objects)
NodeIndex: TypeAlias = Any


def ort_topological_order(
    indices: Iterable[NodeIndex],
    input_nodes: Callable[[NodeIndex], list[NodeIndex]],
    has_output_edge: Callable[[NodeIndex], bool],
) -> list[NodeIndex]:
    """Return node indices in ORT's order.

    Args:
        indices: every live node index.
        input_nodes: for a node, the source node index of each of its input edges (explicit and implicit).
        has_output_edge: whether a node has at least one output edge.
    """
    ordered = sorted(indices)
    stack: list[tuple[NodeIndex, bool]] = [(i, False) for i in ordered if not has_output_edge(i)]
    visited: set[NodeIndex] = set()
    order: list[NodeIndex] = []
    while stack:
        index, leaving = stack.pop()
        if leaving:
            order.append(index)
            continue
        if index in visited:
            continue
        visited.add(index)
        stack.append((index, True))
        for src in sorted(input_nodes(index)):
            if src not in visited:
                stack.append((src, False))
    return order


def ort_order_of_adjacency(
    indices: Iterable[NodeIndex],
    pred: dict[NodeIndex, dict[NodeIndex, Any]],
    succ: dict[NodeIndex, dict[NodeIndex, Any]],
) -> list[NodeIndex]:
    """:func:`ort_topological_order` read straight from an adjacency (``pred[i]``: the source nodes of ``i``'s input
    edges, ``succ[i]``: the destinations of its output edges).

    A source met over several input edges is pushed once: its other copies would lie below the first in the stack
    and be popped after it was visited, so the order is the same. A node to leave is pushed again, with True pushed
    beside it on a second stack (no new object is made per node).
    """
    stack: list[NodeIndex] = [i for i in sorted(indices) if not succ[i]]  # (dicts: compiled, lookups are direct)
    leaving = [False] * len(stack)
    visited: set[NodeIndex] = set()
    order: list[NodeIndex] = []
    # (the containers' methods called directly: compiled, a method bound to a local is called through Python)
    while stack:
        index = stack.pop()
        if leaving.pop():
            order.append(index)
            continue
        if index in visited:
            continue
        visited.add(index)
        stack.append(index)
        leaving.append(True)
        sources = pred[index]
        if len(sources) == 1:
            for src in sources:
                if src not in visited:
                    stack.append(src)
                    leaving.append(False)
        elif sources:
            for src in sorted(sources):
                if src not in visited:
                    stack.append(src)
                    leaving.append(False)
    return order
