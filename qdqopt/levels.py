"""ORT 1.32's optimization levels and the stages each one runs (spec §1).

This module answers "what is a level?" and nothing else: it knows no pass. Which passes ORT registers at each stage,
in which order and implemented by which class is :mod:`qdqopt.registry`.

Stages, in the order ``InferenceSession::TransformGraph`` runs them:

* ``pre``: ``EnsureUniqueDQForNodeUnit``, once, at every level (unless ``session.disable_quant_qdq=1``);
* ``L0``: Default level (only with free-dimension overrides; qdqopt takes none);
* ``L1``: Level1, up to 10 steps, before partitioning;
* ``L2``/``L3``: inside the optimization loop, then ``loop`` (InsertCastTransformer, which runs
  RemoveDuplicateCastTransformer first), then ``L4``;
* ``post``: ``MemcpyTransformer``.

``pre``, ``loop`` and ``post`` passes are required: ``disabled_optimizers`` does not reach them.

The names ``PASSES``, ``PassSpec``, ``RuleSpec``, ``LEVEL1_RULES``, ``LEVEL2_RULES``, ``registered_passes`` and
``all_names`` used to live here; they are still importable from this module (resolved from :mod:`qdqopt.registry` on
first use), but new code imports them from :mod:`qdqopt.registry`.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from qdqopt.errors import UsageError

if TYPE_CHECKING:  # the names that moved to qdqopt.registry, typed for old imports (see __getattr__)
    from qdqopt.registry import (
        LEVEL1_RULES,
        LEVEL2_RULES,
        PASSES,
        Gate,
        PassSpec,
        RuleSpec,
        all_names,
        registered_passes,
    )

__all__ = [
    "LEVEL1_RULES",
    "LEVEL2_RULES",
    "LEVEL_STAGES",
    "PASSES",
    "REQUIRED_STAGES",
    "STAGES",
    "Gate",
    "Level",
    "PassSpec",
    "RuleSpec",
    "all_names",
    "level_stage",
    "parse_level",
    "registered_passes",
]


class Level(enum.IntEnum):
    """``GraphOptimizationLevel``; the value is ORT's API value."""

    DISABLE_ALL = 0
    BASIC = 1
    EXTENDED = 2
    LAYOUT = 3
    ALL = 99

    @property
    def ort_name(self) -> str:
        """ORT's enum name, e.g. ``ORT_ENABLE_BASIC``."""
        return {
            0: "ORT_DISABLE_ALL",
            1: "ORT_ENABLE_BASIC",
            2: "ORT_ENABLE_EXTENDED",
            3: "ORT_ENABLE_LAYOUT",
            99: "ORT_ENABLE_ALL",
        }[int(self)]

    @property
    def short(self) -> str:
        """``disable_all``, ``basic``, ``extended``, ``layout`` or ``all``."""
        return self.name.lower()

    @property
    def transformer_level(self) -> int:
        """The highest ``TransformerLevel`` registered: 0 (Default) .. 4."""
        return {0: 0, 1: 1, 2: 2, 3: 3, 99: 4}[int(self)]


_LEVEL_ALIASES = {
    "0": Level.DISABLE_ALL,
    "disable_all": Level.DISABLE_ALL,
    "disable": Level.DISABLE_ALL,
    "none": Level.DISABLE_ALL,
    "1": Level.BASIC,
    "basic": Level.BASIC,
    "enable_basic": Level.BASIC,
    "2": Level.EXTENDED,
    "extended": Level.EXTENDED,
    "enable_extended": Level.EXTENDED,
    "3": Level.LAYOUT,
    "layout": Level.LAYOUT,
    "enable_layout": Level.LAYOUT,
    "99": Level.ALL,
    "all": Level.ALL,
    "enable_all": Level.ALL,
}


def parse_level(level: Level | int | str) -> Level:
    """Accept 0/1/2/3/99, ``"basic"``..., or ORT's enum names (``ORT_ENABLE_BASIC``, ``GraphOptimizationLevel.X``)."""
    if isinstance(level, Level):
        return level
    if isinstance(level, int):
        try:
            return Level(level)
        except ValueError:
            raise UsageError(f"unknown optimization level {level!r} (use 0, 1, 2, 3 or 99)") from None
    if not isinstance(level, str) and hasattr(level, "name"):  # an onnxruntime.GraphOptimizationLevel member
        level = str(level.name)
    key = str(level).strip().lower().removeprefix("graphoptimizationlevel.").removeprefix("ort_")
    if key in _LEVEL_ALIASES:
        return _LEVEL_ALIASES[key]
    raise UsageError(
        f"unknown optimization level {level!r} (use disable_all, basic, extended, layout, all, or 0/1/2/3/99)"
    )


#: Every stage, in the order a session runs them (the loop's stages L2, L3, loop, L4 may repeat).
STAGES: tuple[str, ...] = ("pre", "L0", "L1", "L2", "L3", "loop", "L4", "post")

#: Stages whose passes are required: ``disabled_optimizers`` does not reach them.
REQUIRED_STAGES: frozenset[str] = frozenset({"pre", "loop", "post"})

#: Stages each level runs, in order.
LEVEL_STAGES: dict[Level, tuple[str, ...]] = {
    Level.DISABLE_ALL: ("pre", "L0", "loop", "post"),
    Level.BASIC: ("pre", "L1", "loop", "post"),
    Level.EXTENDED: ("pre", "L1", "L2", "loop", "post"),
    Level.LAYOUT: ("pre", "L1", "L2", "L3", "loop", "post"),
    Level.ALL: ("pre", "L1", "L2", "L3", "loop", "L4", "post"),
}


def level_stage(level: Level | int | str) -> str:
    """The optimization stage a level adds to the one below it: ``L1`` for BASIC .. ``L4`` for ALL.

    DISABLE_ALL has none a pass could join (its ``L0`` runs only with free-dimension overrides).
    """
    lvl = parse_level(level)
    if lvl is Level.DISABLE_ALL:
        raise UsageError("DISABLE_ALL runs no optimization stage a pass could join (use basic .. all)")
    return f"L{lvl.transformer_level}"


#: Names that moved to :mod:`qdqopt.registry`, still importable from here.
_MOVED = frozenset(
    {"PASSES", "PassSpec", "RuleSpec", "LEVEL1_RULES", "LEVEL2_RULES", "registered_passes", "all_names", "Gate"}
)


def __getattr__(name: str) -> object:
    """Resolve the names that moved to :mod:`qdqopt.registry` (a compatibility alias, not a dependency: this module
    imports nothing from the registry when it is loaded)."""
    if name in _MOVED:
        from qdqopt import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
