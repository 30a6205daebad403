"""qdqopt's passes, one module per ORT transformer, registered under ORT's exact names.

:data:`TRANSFORMERS` maps a transformer name to its class; :data:`RULES` maps a rule name (ORT's rule name, e.g.
``ReluQuantRewrite``) to its class. A name listed in :mod:`qdqopt.levels` but absent here is *not implemented*:
``qdqopt passes`` says so, the manager skips it visibly, and ``qdqopt diff`` disables it on the ORT side.
"""

from __future__ import annotations

from qdqopt.passes.base import GraphTransformer, PassContext, RewriteRule, RuleBasedTransformer, RuleEffect
from qdqopt.passes.ensure_unique_dq import EnsureUniqueDQForNodeUnit
from qdqopt.passes.memcpy import MemcpyTransformer

__all__ = [
    "RULES",
    "TRANSFORMERS",
    "GraphTransformer",
    "PassContext",
    "RewriteRule",
    "RuleBasedTransformer",
    "RuleEffect",
    "is_implemented",
]

TRANSFORMERS: dict[str, type[GraphTransformer]] = {
    EnsureUniqueDQForNodeUnit.name: EnsureUniqueDQForNodeUnit,
    MemcpyTransformer.name: MemcpyTransformer,
}

RULES: dict[str, type[RewriteRule]] = {}


def is_implemented(name: str, *, rule: bool = False) -> bool:
    """Whether qdqopt implements this transformer (or, with ``rule=True``, this rewrite rule)."""
    return name in (RULES if rule else TRANSFORMERS)
