"""FreeDimensionOverrideTransformer: replace symbolic dimensions of graph inputs by fixed values.

ORT registers it in Level1 (and at the Default level) with the overrides given through
``SessionOptions.add_free_dimension_override_by_name/denotation``. qdqopt's sessions take no overrides, and with none
the transformer has nothing to do::

    before                         after
    x: float[batch, 3, 32, 32]     x: float[batch, 3, 32, 32]      (unchanged: "modified: 0")
"""

from __future__ import annotations

from qdqopt.graph import Graph
from qdqopt.passes.base import GraphTransformer, PassContext

__all__ = ["FreeDimensionOverrideTransformer"]


class FreeDimensionOverrideTransformer(GraphTransformer):
    """No overrides, no change."""

    name = "FreeDimensionOverrideTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return False
