"""``GetHandler``: ORT's extended handlers first, then the ONNX-domain ``handler_map``."""

from __future__ import annotations

from qdqopt.graph import Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.transpose_optimization.handlers import HANDLERS, HandlerInfo
from qdqopt.passes.transpose_optimization.ort import EXTENDED_HANDLERS

__all__ = ["handler_for", "handler_key"]


def handler_key(node: Node) -> str:
    """The op type for the ONNX domain, ``<domain>.<op type>`` otherwise."""
    domain = normalize_domain(node.domain)
    return node.op_type if domain == "" else f"{domain}.{node.op_type}"


def handler_for(node: Node) -> HandlerInfo | None:
    """The handler for ``node``, or None when the optimizer cannot push a Transpose through it."""
    key = handler_key(node)
    info = EXTENDED_HANDLERS.get(key)
    if info is not None:
        return info
    return HANDLERS.get(key) if "." not in key else None
