"""Differential runs: qdqopt against real ORT for one model, level and session setup.

By default the passes qdqopt does not implement yet are disabled on *both* sides (ORT's ``disabled_optimizers``), so
that what is compared is exactly what qdqopt claims to reproduce; the report lists them. With ``strict=True`` ORT
runs as it is. Required passes cannot be disabled in ORT, so they must all be implemented.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import onnx

from qdqopt.api import run
from qdqopt.config import SessionConfig
from qdqopt.diff import TIERS, DiffReport, compare
from qdqopt.graph.model import read_model_proto
from qdqopt.levels import Level, parse_level, registered_passes
from qdqopt.passes import RULES, TRANSFORMERS
from qdqopt.reference import ReferenceRun, run_reference
from qdqopt.target import Target

__all__ = ["LevelComparison", "compare_level", "unimplemented_names"]


@dataclass
class LevelComparison:
    """One level's comparison: the report, the trace lines of both sides and what was disabled for it."""

    level: Level
    report: DiffReport
    ours_lines: list[str]
    ort_lines: list[str]
    auto_disabled: list[str] = field(default_factory=list)
    #: implemented passes that do not cover this model (name -> reason): run on neither side unless strict
    unsupported: dict[str, str] = field(default_factory=dict)
    ours: onnx.ModelProto | None = None
    ort: onnx.ModelProto | None = None

    @property
    def trace_matches(self) -> bool:
        return self.ours_lines == self.ort_lines


def unimplemented_names(level: Level, config: SessionConfig, target: Target, disabled: set[str]) -> list[str]:
    """Names ORT would register for this session that qdqopt does not implement (in ORT's order).

    Required passes are left out: ``disabled_optimizers`` does not reach them, so they cannot be disabled on the ORT
    side; an unimplemented required pass shows up as a difference instead.
    """
    out: list[str] = []
    for spec, rules in registered_passes(level, config, target, disabled):
        if spec.required:  # ORT cannot switch these off: they must be implemented
            continue
        if spec.rules:
            out.extend(r.name for r in rules if r.name not in RULES)
        elif spec.name not in TRANSFORMERS:
            out.append(spec.name)
    return out


def compare_level(
    model: str | os.PathLike[str] | onnx.ModelProto,
    level: Level | int | str,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Iterable[str] = (),
    strict: bool = False,
    tiers: Iterable[str] = TIERS,
    target: Target | None = None,
) -> LevelComparison:
    """Run qdqopt and ORT on the same model and setup, and compare their outputs."""
    lvl = parse_level(level)
    cfg = SessionConfig.from_mapping(config, warn=False)
    tgt = target or Target.detect()
    names = list(disabled)
    auto = [] if strict else unimplemented_names(lvl, cfg, tgt, set(names) | set(cfg.disabled_by_config()))
    off = names + [n for n in auto if n not in names]
    proto, base = read_model_proto(model)
    ours = run(proto if base is None else model, lvl, disabled=off, config=cfg.as_dict(), target=tgt)
    if not strict:  # a pass that does not cover this model ran on neither side
        gated = [n for n in ours.unsupported if n not in off]
        auto += gated
        off += gated
    ref: ReferenceRun = run_reference(model, lvl, config=cfg.as_dict(), disabled=off)
    report = compare(ours.model, ref.model, tiers=tiers, base_dir=base)
    return LevelComparison(
        level=lvl,
        report=report,
        ours_lines=ours.pipeline.ort_lines(),
        ort_lines=[str(t) for t in ref.trace],
        auto_disabled=auto,
        unsupported=dict(ours.unsupported),
        ours=ours.model,
        ort=ref.model,
    )
