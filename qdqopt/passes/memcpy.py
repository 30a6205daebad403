"""MemcpyTransformer: copies between devices; with only the CPU EP there is nothing to copy.

ORT registers it after the optimization loop for every session, whatever the level, and it cannot be disabled.
A session whose nodes all run on ``CPUExecutionProvider`` never needs a MemcpyToHost/MemcpyFromHost node::

    before              after
    A ── B (all CPU)    A ── B        (unchanged: "GraphTransformer MemcpyTransformer modified: 0")
"""

from __future__ import annotations

from qdqopt.graph import Graph
from qdqopt.passes.base import GraphTransformer, PassContext

__all__ = ["MemcpyTransformer"]


class MemcpyTransformer(GraphTransformer):
    """No-op for a CPU-only session."""

    name = "MemcpyTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return False
