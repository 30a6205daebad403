"""qdqopt's passes, one module per ORT transformer, named as in ORT.

This package holds the passes and the pass contract (:mod:`qdqopt.passes.base`: :class:`GraphTransformer`,
:class:`RewriteRule`, :class:`RuleBasedTransformer`, :class:`PassContext`), re-exported here for passes of one's
own. It registers nothing: where each pass runs, under which name and in which order is one line of
:data:`qdqopt.registry.PASSES`, which imports the pass classes (a pass module never imports the registry).

``TRANSFORMERS``, ``RULES`` and ``is_implemented`` used to live here; they are still importable from this package
(resolved from :mod:`qdqopt.registry` on first use), but new code imports them from :mod:`qdqopt.registry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.passes.base import GraphTransformer, PassContext, RewriteRule, RuleBasedTransformer, RuleEffect, Unsupported

if TYPE_CHECKING:  # the names that moved to qdqopt.registry, typed for old imports (see __getattr__)
    from qdqopt.registry import RULES, TRANSFORMERS, is_implemented

__all__ = [
    "RULES",
    "TRANSFORMERS",
    "GraphTransformer",
    "PassContext",
    "RewriteRule",
    "RuleBasedTransformer",
    "RuleEffect",
    "Unsupported",
    "is_implemented",
]

_MOVED = frozenset({"TRANSFORMERS", "RULES", "is_implemented"})


def __getattr__(name: str) -> object:
    """Resolve the names that moved to :mod:`qdqopt.registry` (a compatibility alias: the registry imports the
    passes, so this package cannot import it when it is loaded)."""
    if name in _MOVED:
        from qdqopt import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
