"""Everything a report shows, gathered for one model and one or more session setups (config side by side).

Per setup: each of the five levels compared with the live ORT (:func:`qdqopt.compare.compare_level`: ORT run as a
user runs it, the tiers, the first differences, ORT's own op counts) and run against the input model on seeded
inputs (:func:`qdqopt.diff.run_numbers`, ORT's CPU EP at DISABLE_ALL: max abs difference and SQNR); the timeline at
the asked level (:class:`qdqopt.report.collect.Collector` on :func:`qdqopt.api.run`'s ``on_pass`` hook); the
``explain`` tables (:mod:`qdqopt.explain`).

ORT's sessions run in a child process, one per setup, the levels in turn, each level's result written as it comes:
ORT's C++ can crash on a model (a session at one level, or running a model whose shapes do not hold), and a crash
then ends only the child; the level it was at says so, and a new child takes up the levels after it.
"""

from __future__ import annotations

import collections
import math
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx

from qdqopt.api import run
from qdqopt.compare import compare_level
from qdqopt.config import SessionConfig
from qdqopt.diff import random_inputs, run_numbers
from qdqopt.errors import QdqoptError
from qdqopt.explain import FUSION_PASS, NHWC_PASS, LayoutReport, explain, explain_layout
from qdqopt.graph import load_model
from qdqopt.graph.model import read_model_proto
from qdqopt.levels import Level, parse_level
from qdqopt.manager import TraceEntry
from qdqopt.passes.qdq_selector_action import UnitReport
from qdqopt.report.collect import Application, Collector

__all__ = ["LevelResult", "Numerics", "ReportData", "SetupResult", "collect_report", "op_counts"]

SEED = 0
_T = TypeVar("_T")


def op_counts(model: onnx.ModelProto) -> collections.Counter[str]:
    """Op counts of a model's main graph, keyed ``op`` or ``domain.op`` (as the trace's deltas)."""
    counts: collections.Counter[str] = collections.Counter()
    for node in model.graph.node:
        counts[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"] += 1
    return counts


@dataclass(frozen=True)
class Numerics:
    """A level's outputs against the input model's on the same seeded inputs (worst output)."""

    max_abs: float | None
    sqnr_db: float | None
    error: str = ""


@dataclass
class LevelResult:
    level: Level
    ours: collections.Counter[str] = field(default_factory=collections.Counter)
    ort: collections.Counter[str] | None = None
    tier: str = "-"
    flags: dict[str, str] = field(default_factory=dict)
    trace_matches: bool | None = None
    header: str = ""
    notes: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    numerics: Numerics | None = None
    error: str = ""


@dataclass
class SetupResult:
    """One session setup: its config entries, the five levels, the timeline and explain at the asked level."""

    config: dict[str, str]
    levels: list[LevelResult] = field(default_factory=list)
    trace: list[TraceEntry] = field(default_factory=list)
    applications: list[Application] = field(default_factory=list)
    units: list[UnitReport] | None = None
    units_note: str = ""
    layout: list[LayoutReport] | None = None
    layout_note: str = ""
    unimplemented: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items()) or "default config"


@dataclass
class ReportData:
    model: str
    level: Level
    disabled: list[str]
    inputs: collections.Counter[str]
    setups: list[SetupResult]
    nodes: int = 0


def _numerics(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> Numerics:
    worst_abs = 0.0
    worst_sqnr = math.inf
    for ref, out in zip(reference, outputs, strict=True):
        if ref.shape != out.shape:
            return Numerics(None, None, f"output shape {list(out.shape)} vs input model's {list(ref.shape)}")
        a, b = ref.astype(np.float64), out.astype(np.float64)
        noise = float(np.sum((a - b) ** 2))
        signal = float(np.sum(a**2))
        worst_abs = max(worst_abs, float(np.max(np.abs(a - b))) if a.size else 0.0)
        sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
        worst_sqnr = min(worst_sqnr, sqnr)
    return Numerics(worst_abs, worst_sqnr)


def _level(
    source: str | os.PathLike[str],
    level: Level,
    config: Mapping[str, str],
    disabled: Sequence[str],
    reference: Sequence[np.ndarray] | None,
    feeds: Mapping[str, np.ndarray] | None,
    base: Path | None,
    no_numerics: str = "",
) -> LevelResult:
    result = LevelResult(level)
    try:
        comp = compare_level(source, level, config=config, disabled=disabled)
    except QdqoptError as exc:
        result.error = str(exc)
        return result
    assert comp.ours is not None
    result.ours = op_counts(comp.ours)
    result.ort = op_counts(comp.ort) if comp.ort is not None else None
    report = comp.report
    result.tier = report.tier
    result.flags = {t: report.flag(t) for t in report.verdict}
    result.trace_matches = comp.trace_matches
    result.header = comp.header()
    result.notes = comp.notes()
    result.differences = [str(d) for d in report.differences]
    if reference is not None and feeds is not None:
        try:
            result.numerics = _numerics(reference, run_numbers(comp.ours, feeds, base))
        except Exception as exc:  # ORT could not run qdqopt's model: say so on the page
            result.numerics = Numerics(None, None, str(exc).splitlines()[0][:200])
    elif no_numerics:
        result.numerics = Numerics(None, None, no_numerics)
    return result


_CHILD = """
import sys
from qdqopt.report.data import _child_levels
_child_levels(sys.argv[1])
"""


def _child_levels(job: str) -> None:
    """In the child: the reference numbers (once per setup), then each level, each result pickled as it comes."""
    with open(job, "rb") as handle:
        model, config, disabled, levels, folder = pickle.load(handle)
    work = Path(folder)
    started, done = work / "reference.started", work / "reference.pkl"
    feeds = reference = None
    note = ""
    proto, base = read_model_proto(model)
    if done.exists():
        with done.open("rb") as handle:
            feeds, reference, note = pickle.load(handle)
    elif started.exists():
        note = "ONNX Runtime crashed running the input model"
    else:
        started.touch()
        try:
            feeds = random_inputs(proto, SEED)
            reference = run_numbers(proto, feeds, base)
        except Exception as exc:  # a model ORT cannot run at all: the numerics columns say so
            feeds, reference, note = None, None, f"the input model does not run: {str(exc).splitlines()[0][:160]}"
        with done.open("wb") as handle:
            pickle.dump((feeds, reference, note), handle)
    for number in levels:
        result = _level(model, Level(number), config, disabled, reference, feeds, base, note)
        with (work / f"{number}.pkl").open("wb") as handle:
            pickle.dump(result, handle)


def _levels(model: str | os.PathLike[str], config: Mapping[str, str], disabled: Sequence[str]) -> list[LevelResult]:
    """The five levels of one setup, ORT in child processes (see the module doc)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    results: dict[Level, LevelResult] = {}
    todo = list(Level)
    with tempfile.TemporaryDirectory(prefix="qdqopt-report-") as folder:
        while todo:
            job = Path(folder) / "job.pkl"
            with job.open("wb") as handle:
                pickle.dump((os.fspath(model), dict(config), list(disabled), [int(x) for x in todo], folder), handle)
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, str(job)], capture_output=True, text=True, env=env, check=False
            )
            for level in todo:
                path = Path(folder) / f"{int(level)}.pkl"
                if level not in results and path.exists():
                    with path.open("rb") as handle:
                        results[level] = pickle.load(handle)
            todo = [level for level in todo if level not in results]
            if not todo:
                break
            if proc.returncode < 0:
                why = f"ONNX Runtime crashed (signal {-proc.returncode}) at this level"
            else:
                lines = proc.stderr.strip().splitlines()
                why = f"the comparison failed: {lines[-1] if lines else f'exit code {proc.returncode}'}"
            results[todo[0]] = LevelResult(todo[0], error=why)
            todo = todo[1:]
    return [results[level] for level in Level]


def _setup(
    source: str | os.PathLike[str], level: Level, config: Mapping[str, str], disabled: Sequence[str]
) -> SetupResult:
    setup = SetupResult(dict(config))
    setup.levels = _levels(source, config, disabled)
    try:
        collector = Collector(load_model(source).graph)
        result = run(source, level, disabled=disabled, config=config, on_pass=collector)
    except QdqoptError as exc:
        setup.error = str(exc)
        return setup
    setup.trace = list(result.pipeline.trace)
    setup.applications = collector.applications
    setup.unimplemented = list(dict.fromkeys(result.unimplemented))
    setup.unsupported = dict(result.unsupported)
    setup.units, setup.units_note = _explained(
        lambda: explain(source, level, config=config, disabled=disabled),
        level >= Level.EXTENDED,
        f"{FUSION_PASS} runs at EXTENDED and above",
    )
    setup.layout, setup.layout_note = _explained(
        lambda: explain_layout(source, level, config=config, disabled=disabled),
        level >= Level.LAYOUT,
        f"{NHWC_PASS} runs at LAYOUT and ALL",
    )
    return setup


def _explained(call: Callable[[], _T], runs: bool, not_run: str) -> tuple[_T | None, str]:
    """What ``call`` (an explain) gives and an empty note; or None and why not: the pass it explains does not
    run at this level (``not_run``), or the error it raised."""
    if not runs:
        return None, not_run
    try:
        return call(), ""
    except QdqoptError as exc:
        return None, str(exc)


def collect_report(
    model: str | os.PathLike[str],
    level: Level | int | str = "all",
    *,
    configs: Iterable[Mapping[str, str]] = ({},),
    disabled: Iterable[str] = (),
) -> ReportData:
    """Gather what the report shows: for each config (side by side), the five levels against ORT and against the
    input model's numbers, and the timeline and explain tables at ``level``."""
    lvl = parse_level(level)
    names = list(disabled)
    proto, _ = read_model_proto(model, initializers=False)
    setups = [_setup(model, lvl, SessionConfig.from_mapping(dict(cfg), warn=False).as_dict(), names) for cfg in configs]
    return ReportData(str(model), lvl, names, op_counts(proto), setups, len(proto.graph.node))
