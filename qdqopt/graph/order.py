"""ORT's topological order (``GraphViewer`` + ``Graph::ReverseDFSFrom``), which is also the saved node order.

The leaves are the nodes with no output edge (a node whose outputs only reach graph outputs is a leaf), pushed in
ascending index order, so the highest index is visited first. For each node entered, its input nodes (one per input
edge, so possibly repeated) are sorted by ascending index and pushed when not yet visited. A node is emitted when it
is left, after all its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["ort_order_of_adjacency", "ort_topological_order"]


def ort_topological_order(
    indices: Iterable[int],
    input_nodes: Callable[[int], list[int]],
    has_output_edge: Callable[[int], bool],
) -> list[int]:
    """Return node indices in ORT's order.

    Args:
        indices: every live node index.
        input_nodes: for a node, the source node index of each of its input edges (explicit and implicit).
        has_output_edge: whether a node has at least one output edge.
    """
    ordered = sorted(indices)
    stack: list[tuple[int, bool]] = [(i, False) for i in ordered if not has_output_edge(i)]
    visited: set[int] = set()
    order: list[int] = []
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
    indices: Iterable[int], pred: dict[int, dict[int, Any]], succ: dict[int, dict[int, Any]]
) -> list[int]:
    """:func:`ort_topological_order` read straight from an adjacency (``pred[i]``: the source nodes of ``i``'s input
    edges, ``succ[i]``: the destinations of its output edges; node indices are not negative).

    A source met over several input edges is pushed once: its other copies would lie below the first in the stack
    and be popped after it was visited, so the order is the same. A node to leave is pushed as ``~index``.
    """
    stack = [i for i in sorted(indices) if not succ[i]]  # (dicts, not Mappings: compiled, their lookups are direct)
    visited: set[int] = set()
    order: list[int] = []
    # (the containers' methods called directly: compiled, a method bound to a local is called through Python)
    while stack:
        index = stack.pop()
        if index < 0:
            order.append(~index)
            continue
        if index in visited:
            continue
        visited.add(index)
        stack.append(~index)
        sources = pred[index]
        if len(sources) == 1:
            for src in sources:
                if src not in visited:
                    stack.append(src)
        elif sources:
            for src in sorted(sources):
                if src not in visited:
                    stack.append(src)
    return order
