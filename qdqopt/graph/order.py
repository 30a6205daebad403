"""ORT's topological order (``GraphViewer`` + ``Graph::ReverseDFSFrom``), which is also the saved node order.

The leaves are the nodes with no output edge (a node whose outputs only reach graph outputs is a leaf), pushed in
ascending index order, so the highest index is visited first. For each node entered, its input nodes (one per input
edge, so possibly repeated) are sorted by ascending index and pushed when not yet visited. A node is emitted when it
is left, after all its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["ort_topological_order"]


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
