"""QDQ helper predicates shared by the QDQ passes (ORT's ``qdq_transformer/qdq_util.cc``, spec §7.6)."""

from __future__ import annotations

from qdqopt.graph import Node

__all__ = ["QDQ_OPSETS", "is_dq", "is_q"]

#: ONNX-domain Q/DQ versions ``MatchQNode``/``MatchDQNode`` accept; ``com.microsoft`` accepts version 1.
QDQ_OPSETS: frozenset[int] = frozenset({10, 13, 19, 21, 23, 24, 25})


def _match(node: Node, op_type: str) -> bool:
    if node.op_type != op_type:
        return False
    if node.domain in ("", "ai.onnx"):
        return node.since_version in QDQ_OPSETS
    if node.domain == "com.microsoft":
        return node.since_version == 1
    return False


def is_q(node: Node) -> bool:
    """``QDQ::MatchQNode``."""
    return _match(node, "QuantizeLinear")


def is_dq(node: Node) -> bool:
    """``QDQ::MatchDQNode``."""
    return _match(node, "DequantizeLinear")
