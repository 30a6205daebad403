"""Machine-readable output: the documents ``qdqopt passes|trace|diff|explain --json`` print.

Each document is a JSON object with ``"schema": "qdqopt.<command>/1"`` (the number changes only when a field is
removed or changes meaning; new fields may appear), ``"qdqopt"`` (the version) and ``"ort"`` (the ORT version the
figures are for), then the command's own fields. ``docs/json.md`` gives each document's JSON Schema; the tests
validate every command's output against those schemas. Names are ORT's (transformers, rules, levels as
``ORT_ENABLE_*``), steps are 1-based as ORT logs them, and every line a text command prints in ORT's words is kept
verbatim in a field (``ort_line``, ``notes``, ``reasons``), so a JSON reader sees what a human reader sees.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any

from qdqopt import __version__
from qdqopt.api import OptimizeResult
from qdqopt.compare import ISOLATION, LevelComparison, PairedRun
from qdqopt.config import SessionConfig
from qdqopt.diff import TIERS
from qdqopt.events import Event
from qdqopt.explain import CandidateReport, LayoutReport
from qdqopt.levels import Level
from qdqopt.manager import TraceEntry
from qdqopt.passes import GraphTransformer
from qdqopt.passes.qdq_selector_action import UnitReport
from qdqopt.registry import RULES, TRANSFORMERS, Plugin, registered_passes, with_plugins
from qdqopt.target import Target

__all__ = ["ORT_VERSION", "diff_doc", "explain_doc", "pass_rows", "passes_doc", "trace_doc", "with_candidates"]

ORT_VERSION = "1.32.0"
#: the stages ``qdqopt passes --all`` lists (those of a session; not the helper stages)
SESSION_STAGES = ("L0", "L1", "L2", "L3", "L4", "pre", "loop", "post")

Doc = dict[str, Any]


def _head(command: str) -> Doc:
    return {"schema": f"qdqopt.{command}/1", "qdqopt": __version__, "ort": ORT_VERSION}


# ------------------------------------------------------------------------------------------------------- passes
def implementation(name: str) -> str:
    """``yes``, ``no``, or ``part``: implemented, but declining the models it does not cover yet."""
    cls: type[GraphTransformer] | None = TRANSFORMERS.get(name)
    if cls is None:
        return "no"
    return "part" if cls.unsupported is not GraphTransformer.unsupported else "yes"


def pass_rows(
    level: Level, config: SessionConfig, target: Target, plugins: Sequence[Plugin] = (), *, include_all: bool = False
) -> list[Doc]:
    """The rows of ``qdqopt passes``: every pass registered for this session in ORT's order (with ``include_all``
    also the session's passes that are not registered for it), each with its rules."""
    plan = registered_passes(level, config, target, set(), plugins)
    active = {(spec.name, spec.stage): rules for spec, rules in plan}
    rows: list[Doc] = []
    for spec in with_plugins(plugins):
        key = (spec.name, spec.stage)
        registered = key in active
        if not registered and (not include_all or spec.stage not in SESSION_STAGES):
            continue
        impl = "plugin" if spec.is_plugin else "rules" if spec.rules else implementation(spec.name)
        rules = [
            {
                "name": rule.name,
                "impl": "yes" if rule.name in RULES else "no",
                "gate": rule.gate_text,
                "registered": registered and rule in active[key],
            }
            for rule in spec.rules
        ]
        rows.append(
            {
                "index": len(rows) + 1,
                "name": spec.name,
                "stage": spec.stage,
                "level": spec.level_label,
                "apply_once": bool(spec.apply_once),
                "impl": impl,
                "gate": spec.gate_text,
                "registered": registered,
                "plugin": bool(spec.is_plugin),
                "rules": rules,
            }
        )
    return rows


def passes_doc(level: Level, config: SessionConfig, target: Target, rows: list[Doc]) -> Doc:
    return {
        **_head("passes"),
        "level": level.ort_name,
        "target": {
            "machine": target.machine,
            "int8_allowed": target.with_config(config).int8_allowed,
            "nchwc_block_size": target.nchwc_block_size,
        },
        "config": config.as_dict(),
        "passes": rows,
    }


# -------------------------------------------------------------------------------------------------------- trace
def _entry(entry: TraceEntry, check: str | None) -> Doc:
    return {
        "name": entry.name,
        "stage": entry.stage,
        "step": entry.step + 1,
        "modified": entry.modified,
        "implemented": entry.implemented,
        "plugin": entry.plugin,
        "ort_line": entry.ort_line(),
        "op_delta": dict(entry.op_delta),
        "missing_rules": list(entry.missing_rules),
        "seconds": entry.seconds,
        "replayed": entry.replayed,
        "ort_check": check,
    }


def event_doc(event: Event) -> Doc:
    return {
        "kind": str(event.kind),
        "severity": event.severity,
        "ort": event.kind.ort,
        "text": event.text,
        "pass": event.pass_name,
        "level": event.level,
        "step": event.step,
        "nodes": list(event.nodes),
        "plugin": event.plugin,
    }


def trace_doc(model: str, result: OptimizeResult, pair: PairedRun | None, *, with_events: bool) -> Doc:
    """``trace --json``: every application (checked against ORT's log line by line with ``--ort``), and with
    ``--verbose`` every event (ORT's kinds and qdqopt's own, ``ort`` telling them apart)."""
    ort_lines = [str(t) for t in pair.ref.trace] if pair is not None else None
    entries: list[Doc] = []
    i = 0
    for entry in result.pipeline.trace:
        check: str | None = None
        if ort_lines is not None and not entry.plugin:
            check = "ok" if i < len(ort_lines) and ort_lines[i] == entry.ort_line() else "differs"
        i += 0 if entry.plugin else 1
        entries.append(_entry(entry, check))
    ort: Doc | None = None
    if pair is not None and ort_lines is not None:
        ours = result.pipeline.ort_lines()
        first = next((k for k, (a, b) in enumerate(zip(ort_lines, ours, strict=False)) if a != b), None)
        if first is None and len(ort_lines) != len(ours):
            first = min(len(ort_lines), len(ours))
        ort = {
            "mode": pair.mode,
            "header": pair.header(None),
            "notes": pair.notes(None),
            "lines": len(ort_lines),
            "identical": ort_lines == ours,
            "first_difference": None
            if first is None
            else {
                "line": first + 1,
                "ort": ort_lines[first] if first < len(ort_lines) else None,
                "qdqopt": ours[first] if first < len(ours) else None,
            },
        }
    return {
        **_head("trace"),
        "model": model,
        "level": result.level.ort_name,
        "config": result.config.as_dict(),
        "disabled": list(result.disabled),
        "entries": entries,
        "unimplemented": list(result.unimplemented),
        "unsupported": dict(result.unsupported),
        "plugins": list(result.plugins),
        "ort_comparison": ort,
        "events": [event_doc(e) for e in result.pipeline.events.events] if with_events else None,
    }


# --------------------------------------------------------------------------------------------------------- diff
def _level_doc(comp: LevelComparison, max_differences: int) -> Doc:
    rep = comp.report
    return {
        "level": comp.level.ort_name,
        "tier": rep.tier,
        "verdict": {t: rep.verdict.get(t) for t in TIERS},
        "flags": {t: rep.flag(t) for t in TIERS},
        "trace_matches": comp.trace_matches,
        "mode": comp.mode,
        "isolated": comp.mode == ISOLATION,
        "ort_disabled": list(comp.ort_disabled),
        "header": comp.header(None),
        "notes": comp.notes(None),
        "ort_only_modified": list(comp.ort_only_modified),
        "differences": [
            {"tier": d.tier, "where": d.where, "what": d.what, "text": str(d)}
            for d in rep.differences[:max_differences]
        ],
    }


def diff_doc(
    model: str, config: dict[str, str], mode_line: str, comps: Iterable[LevelComparison], max_differences: int
) -> Doc:
    comps = list(comps)
    levels = [_level_doc(c, max_differences) for c in comps]
    return {
        **_head("diff"),
        "model": model,
        "config": config,
        "how_ort_ran": mode_line,
        "levels": levels,
        "equal": all(c.report.holds("X") and c.trace_matches for c in comps),
    }


# ------------------------------------------------------------------------------------------------------ explain
def unit_doc(report: UnitReport) -> Doc:
    return {
        "outcome": report.outcome,
        "target": report.target,
        "op_type": report.op_type,
        "rule": report.rule,
        "result_op": report.result_op,
        "dq_nodes": list(report.dq_nodes),
        "q_nodes": list(report.q_nodes),
        "reasons": list(report.reasons),
    }


def explain_doc(
    model: str,
    level: Level,
    int8_allowed: bool,
    reports: Sequence[UnitReport],
    layout: Sequence[LayoutReport] | None,
) -> Doc:
    return {
        **_head("explain"),
        "model": model,
        "level": level.ort_name,
        "int8_allowed": int8_allowed,
        "units": [unit_doc(r) for r in reports],
        "summary": dict(sorted(collections.Counter(r.outcome for r in reports).items())),
        "layout": None
        if layout is None
        else [
            {"name": i.name, "op": i.op, "outcome": i.outcome, "detail": i.detail, "reasons": list(i.reasons)}
            for i in layout
        ],
        "pass": None,
        "candidates": None,
    }


def with_candidates(doc: Doc, pass_name: str, candidates: Sequence[CandidateReport]) -> Doc:
    """``explain --pass NAME --json``: the pass's candidates (and their outcomes in ``summary``) instead of units."""
    return {
        **doc,
        "summary": dict(sorted(collections.Counter(c.outcome for c in candidates).items())),
        "pass": pass_name,
        "candidates": [
            {"name": c.name, "outcome": c.outcome, "detail": c.detail, "reasons": list(c.reasons)} for c in candidates
        ],
    }
