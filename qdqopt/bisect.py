"""``qdqopt bisect``: the first pass application after which qdqopt can no longer reach ORT's result, or (with
``--numerics TOL``) after which the model's outputs move more than TOL from the input model's.

**Against ORT (for debugging qdqopt).** ORT shows only its final graph, so an intermediate of qdqopt's cannot be
compared with one of ORT's directly. What ORT does let one choose is the set of passes it runs
(``disabled_optimizers``, which takes transformer and rule names, and which qdqopt honours identically). So the
search runs over *configurations* both sides can run, each compared at a tier (X by default: the same graph, names
and order; ``--tier S`` ignores names):

1. the levels, lowest first, up to the level asked: DISABLE_ALL, BASIC, ... The first level whose comparison fails
   is where the divergence entered (every level includes the one before it);
2. at that level, the passes and rules it registers that the level below does not (in ORT's order; rules count one
   by one, required passes are left out since ORT cannot disable them): with the first *k* of them enabled and the
   rest disabled on both sides, configuration *k* is a prefix of the level's pipeline. Configuration 0 is (nearly)
   the level below and agrees; the full level fails; a binary search finds a *k* whose configuration fails while
   *k* - 1 agrees. Enabling candidate *k* is then what breaks the agreement.
   This holds whether or not the failures are monotone in *k*: the search keeps an agreeing lower bound and a
   failing upper bound, so the answer is always such a boundary (if there are several, one of them);
3. candidate *k* is needed for the failure, but it may only expose another pass's mistake (a broken
   ConstantFolding shows only once WeightBiasQuantization, which comes after it in ORT's list, gives it biases to
   fold). So each earlier enabled candidate that modified the model (on either side) is disabled in turn: those
   without which configuration *k* agrees are needed too. The application is then, in configuration *k*'s trace,
   the first line where qdqopt's trace and ORT's log disagree (a pass that modified the graph on one side only), or
   the first application by which every needed pass has modified the graph, whichever comes first: before it, the
   graph is that of a configuration that agrees with ORT; the culprit is the pass of that application. It is given
   as ``--stop-after NAME:N`` with the ``--disable`` list that reproduces the configuration, so that ``qdqopt
   optimize --dump-dir`` shows the graphs before and after it.

If the failing level's configuration 0 already fails, the divergence is in what ORT cannot disable (a required pass,
or the partitioner and kernel check that the level's stage brings): the report says so and names them.

**Numerics (for users).** The model is optimized with a dump after every application that modified it
(:mod:`qdqopt.dumps`); the input model and each dump are run by ORT's CPU EP at DISABLE_ALL on the same seeded
random inputs, in a child process (ORT's C++ can crash on an intermediate model: the crash ends only the child and
names the dump); the first dump whose outputs differ from the input model's by more than TOL (max absolute
difference over all outputs) is the answer. Each dump's max difference and SQNR are reported, as the seeds compare
accuracy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qdqopt.compare import LevelComparison, compare_level, run_paired
from qdqopt.config import SessionConfig
from qdqopt.diff import TIERS
from qdqopt.dumps import run_with_dumps
from qdqopt.errors import ReferenceError, UsageError
from qdqopt.levels import Level, parse_level
from qdqopt.registry import registered_passes
from qdqopt.target import Target

__all__ = ["Bisection", "NumericsBisection", "bisect", "bisect_numerics"]


@dataclass(frozen=True)
class Candidate:
    """A pass or rule ORT lets one disable: ``owner`` is the transformer that applies it (itself, for a pass)."""

    name: str
    owner: str
    stage: str

    @property
    def label(self) -> str:
        return f"rule {self.name} (of {self.owner})" if self.name != self.owner else self.name


@dataclass
class Bisection:
    """What :func:`bisect` found: ``culprit`` is None when qdqopt agrees with ORT at the level asked (or when the
    divergence is in passes ORT cannot disable: ``required`` names them)."""

    level: Level
    tier: str
    #: each step of the search, as printed
    log: list[str] = field(default_factory=list)
    failing_level: Level | None = None
    culprit: Candidate | None = None
    #: the culprit's application: (stage, 1-based step, how many applications of its owner up to it)
    application: tuple[str, int, int] | None = None
    #: the names disabled on both sides in the configuration where the culprit's application is the first bad one
    disabled: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.failing_level is not None

    def lines(self) -> list[str]:
        out = list(self.log)
        if self.failing_level is None:
            out.append(f"qdqopt reaches ORT's result at {self.level.ort_name} (tier {self.tier}): nothing to bisect")
            return out
        if self.culprit is None:
            out.append(
                f"the divergence is in what {self.failing_level.ort_name} runs and ORT cannot disable: "
                f"{', '.join(self.required) or 'the partitioner and kernel check'}"
            )
        else:
            stage, step, count = self.application or ("?", 0, 1)
            out.append(
                f"first divergence: {self.culprit.label}, applied by {self.culprit.owner} at {stage} step {step}"
                f" (application {count} of {self.culprit.owner})"
            )
            disable = f" --disable {','.join(self.disabled)}" if self.disabled else ""
            out.append(
                f"  see it: qdqopt optimize MODEL -o OUT -l {self.failing_level.ort_name}{disable}"
                f" --stop-after {self.culprit.owner}:{count} --dump-dir DIR"
            )
        out += [f"  {d}" for d in self.differences]
        return out


def _agrees(comp: LevelComparison, tier: str) -> bool:
    return comp.report.holds(tier)


def _candidates(
    level: Level, below: Level | None, config: SessionConfig, target: Target, off: set[str]
) -> tuple[list[Candidate], list[str]]:
    """The passes and rules ``level`` registers that ``below`` does not, in ORT's order, that ORT lets one disable;
    and the required ones among them."""
    plan = registered_passes(level, config, target, off)
    lower: set[str] = set()
    if below is not None:
        for spec, rules in registered_passes(below, config, target, off):
            lower.add(spec.name)
            lower.update(r.name for r in rules)
    out: list[Candidate] = []
    required: list[str] = []
    for spec, rules in plan:
        if spec.is_plugin:
            continue
        if spec.required:
            if spec.name not in lower:
                required.append(spec.name)
            continue
        if spec.rules:
            out += [Candidate(r.name, spec.name, spec.stage) for r in rules if r.name not in lower]
        elif spec.name not in lower and spec.name not in {c.name for c in out}:
            out.append(Candidate(spec.name, spec.name, spec.stage))
    return out, required


def bisect(
    model: str | os.PathLike[str],
    level: Level | int | str = "all",
    *,
    config: Mapping[str, str] | None = None,
    disabled: Iterable[str] = (),
    tier: str = "X",
    progress: Callable[[str], None] | None = None,
) -> Bisection:
    """Find the first pass application after which qdqopt can no longer reach ORT's result (see the module's
    docstring for how)."""
    if tier not in TIERS:
        raise UsageError(f"--tier {tier!r}: one of {', '.join(TIERS)}")
    lvl = parse_level(level)
    cfg = dict(config or {})
    user = list(disabled)
    result = Bisection(lvl, tier)

    def note(line: str) -> None:
        result.log.append(line)
        if progress is not None:
            progress(line)

    def check(at: Level, off: Sequence[str]) -> LevelComparison:
        return compare_level(model, at, config=cfg, disabled=off, tiers=TIERS)

    levels = [lv for lv in Level if lv <= lvl]
    below: Level | None = None
    for at in levels:
        comp = check(at, user)
        ok = _agrees(comp, tier)
        note(f"{at.ort_name:<20} tier {comp.report.tier:<2} {'agrees' if ok else 'DIFFERS'}")
        if not ok:
            result.failing_level = at
            break
        below = at
    if result.failing_level is None:
        return result
    failing = result.failing_level
    session = SessionConfig.from_mapping(cfg, warn=False)
    candidates, required = _candidates(failing, below, session, Target.detect(), set(user))
    names = [c.name for c in candidates]

    def config_k(k: int) -> list[str]:
        return [*user, *names[k:]]

    note(
        f"searching the {len(candidates)} passes and rules {failing.ort_name} adds, in ORT's order (the first k"
        " enabled, the rest disabled on both sides)"
    )
    first = check(failing, config_k(0))
    if not _agrees(first, tier):
        note("  k=0 (none enabled): DIFFERS")
        result.required = required
        result.differences = [str(d) for d in first.report.differences[:5]]
        return result
    lo, hi = 0, len(candidates)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        comp = check(failing, config_k(mid))
        ok = _agrees(comp, tier)
        note(f"  k={mid} (up to {candidates[mid - 1].name}): {'agrees' if ok else 'DIFFERS'}")
        lo, hi = (mid, hi) if ok else (lo, mid)
    boundary = candidates[hi - 1]
    result.disabled = config_k(hi)
    pair = run_paired(model, failing, config=cfg, disabled=result.disabled)
    mine = [e for e in pair.ours.pipeline.trace if not e.plugin]
    ort_lines = [str(t) for t in pair.ref.trace]
    # the passes the failure needs: the boundary, and each earlier enabled one that modified the model (on either
    # side) without which configuration k agrees again
    acted = {e.name for e in mine if e.modified} | {t.name for t in pair.ref.trace if t.modified}
    needed = [boundary]
    for cand in candidates[: hi - 1]:
        if cand.owner in acted:
            ok = _agrees(check(failing, [*result.disabled, cand.name]), tier)
            note(f"  k={hi} without {cand.name}: {'agrees (needed)' if ok else 'DIFFERS (not needed)'}")
            if ok:
                needed.append(cand)
    owners = {c.owner for c in needed}
    # the application: the first line where qdqopt's trace and ORT's log disagree, or the first application by
    # which every needed pass has modified the graph, whichever comes first
    mismatch = next((i for i, e in enumerate(mine) if i >= len(ort_lines) or e.ort_line() != ort_lines[i]), None)
    fired: set[str] = set()
    complete = None
    for i, e in enumerate(mine):
        if e.modified and e.name in owners:
            fired.add(e.name)
            if fired == owners:
                complete = i
                break
    index = min((i for i in (mismatch, complete) if i is not None), default=None)
    culprit = boundary
    if index is not None:
        entry = mine[index]
        culprit = next((c for c in needed if c.owner == entry.name), boundary)
        count = sum(1 for e in mine[: index + 1] if e.name == entry.name)
        result.application = (entry.stage, entry.step + 1, count)
    result.culprit = culprit
    if len(needed) > 1:
        others = ", ".join(c.label for c in needed if c is not culprit)
        note(f"  the failure needs {others} too; {culprit.label} applies last of them")
    comp = check(failing, result.disabled)
    result.differences = [str(d) for d in comp.report.differences[:5]]
    return result


# ----------------------------------------------------------------------------------------------------- numerics
_CHILD = """
import json, sys
import numpy as np
import onnx
from qdqopt.diff import random_inputs, run_numbers
source, seed, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
model = onnx.load(source)
feeds = random_inputs(model, seed)
reference = run_numbers(model, feeds)
for path in files:
    outputs = run_numbers(onnx.load(path), feeds)
    diffs, sqnrs = [], []
    for a, b in zip(outputs, reference):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        diffs.append(float(np.max(np.abs(a64 - b64))) if a64.size else 0.0)
        noise = float(np.sum((a64 - b64) ** 2))
        sqnrs.append(float("inf") if noise == 0 else 10 * np.log10(float(np.sum(b64 ** 2)) / noise))
    print(json.dumps({"path": path, "max_abs": max(diffs), "sqnr_db": min(sqnrs)}), flush=True)
"""


@dataclass
class NumericsStep:
    dump: str
    max_abs: float | None
    sqnr_db: float | None
    crashed: bool = False


@dataclass
class NumericsBisection:
    level: Level
    tolerance: float
    steps: list[NumericsStep] = field(default_factory=list)
    #: the first dump whose outputs move more than the tolerance (or on which ORT crashed), or None
    first: NumericsStep | None = None

    def lines(self) -> list[str]:
        out = [
            f"outputs of each dump vs the input model (ORT CPU at DISABLE_ALL, seeded inputs), tolerance "
            f"{self.tolerance:g}:"
        ]
        for step in self.steps:
            if step.crashed:
                out.append(f"  {step.dump:<60} ORT crashed or failed on it")
                continue
            mark = "  > tolerance" if step is self.first else ""
            out.append(f"  {step.dump:<60} max |diff| {step.max_abs:<12.6g} SQNR {step.sqnr_db:7.2f} dB{mark}")
        if self.first is None:
            out.append(f"no application moves the outputs more than {self.tolerance:g}")
        else:
            out.append(f"first application past the tolerance: {self.first.dump.removesuffix('.onnx')}")
        return out


def bisect_numerics(
    model: str | os.PathLike[str],
    level: Level | int | str = "all",
    tolerance: float = 0.0,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Iterable[str] = (),
    seed: int = 0,
) -> NumericsBisection:
    """The first pass application after which the outputs move more than ``tolerance`` from the input model's."""
    lvl = parse_level(level)
    result = NumericsBisection(lvl, tolerance)
    with tempfile.TemporaryDirectory(prefix="qdqopt-bisect-") as tmp:
        dumped = run_with_dumps(model, lvl, dump_dir=tmp, config=config, disabled=disabled)
        files = [str(p) for p in dumped.dumps]
        measured = _evaluate_in_child(os.fspath(model), seed, files)
        for path in files:
            found = measured.get(path)
            name = Path(path).name
            step = (
                NumericsStep(name, None, None, crashed=True)
                if found is None
                else NumericsStep(name, found["max_abs"], found["sqnr_db"])
            )
            result.steps.append(step)
            if result.first is None and (step.crashed or (step.max_abs or 0.0) > tolerance):
                result.first = step
            if step.crashed:
                break
    return result


def _evaluate_in_child(source: str, seed: int, files: Sequence[str]) -> dict[str, dict[str, float]]:
    package_root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, source, str(seed), *files],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    out: dict[str, dict[str, float]] = {}
    for line in proc.stdout.splitlines():
        record = json.loads(line)
        out[record["path"]] = record
    if proc.returncode != 0 and not out:
        last = proc.stderr.strip().splitlines()[-1:] or [f"signal {-proc.returncode}"]
        raise ReferenceError(f"ORT could not run the input model at DISABLE_ALL: {last[0]}")
    return out
