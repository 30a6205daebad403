"""The graph core: ORT's ``Graph`` mirrored in Python (nodes, values, order, names, Resolve, load and save)."""

from __future__ import annotations

from qdqopt.graph import contrib
from qdqopt.graph.core import (
    Changes,
    CollectionPaused,
    Edge,
    Graph,
    Node,
    ShapeDims,
    View,
    dim_values,
    dims_equal,
    element_count,
)
from qdqopt.graph.model import Model, load_model, save_model
from qdqopt.graph.order import NodeIndex

__all__ = [
    "Changes",
    "CollectionPaused",
    "Edge",
    "Graph",
    "Model",
    "Node",
    "NodeIndex",
    "ShapeDims",
    "View",
    "dim_values",
    "dims_equal",
    "element_count",
    "load_model",
    "save_model",
]

contrib.register()  # ORT's contrib-op shape inference, for Resolve and save (see qdqopt.graph.contrib)
