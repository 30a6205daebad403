"""Running generated models through ORT and qdqopt in child processes, and collecting what differs.

:class:`Worker` owns one ``python -m qdqopt.fuzz.worker`` child (ORT's C++ can abort: a dead child is a finding, the
parent carries on with a new one). :func:`fuzz` generates a seeded run (:func:`qdqopt.fuzz.strategies.generate`),
keeps this shard's cases (``index % shards == shard``), hands them to ``jobs`` workers, groups the outcomes into
classes, shrinks the first model of each class (:mod:`qdqopt.fuzz.shrink`) and saves it with its seed
(:mod:`qdqopt.fuzz.report`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import onnx

from qdqopt.fuzz.strategies import GeneratedCase, generate

__all__ = ["CONFIGS", "FINDING_KINDS", "LEVELS", "Finding", "FuzzRun", "Worker", "fuzz", "shard_cases"]

LEVELS = ("basic", "extended", "layout", "all")
#: the two session setups every differential test of the project runs (``tests/passes/_helpers``' CONFIGS)
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}

#: outcomes that are findings (the rest: ``same``, ``both-reject``, ``lacks``)
FINDING_KINDS = frozenset(
    {
        "diff-S",
        "diff-X",
        "trace",
        "qdqopt-accepts",
        "qdqopt-fails",
        "qdqopt-internal",
        "qdqopt-crash",
        "ort-crash",
        "ort-own-output",
        "ort-drift",
        "worker-error",
        "compare-crash",
        "ort-level-reject",
    }
)
#: findings about ORT itself, not about qdqopt
ORT_KINDS = frozenset({"ort-crash", "ort-own-output", "ort-drift", "ort-level-reject"})


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


class Worker:
    """One child process running tasks (see :mod:`qdqopt.fuzz.worker`); restarted after it dies."""

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        #: the (level, config) the child last announced
        self.pair: list[str] | None = None
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "qdqopt.fuzz.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=_env(),
            )
        return self.proc

    def run(self, task: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None, int | None]:
        """The task's result; or None, the last stage announced and the exit code when the child died (or hung:
        then it is killed and the code is None)."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(task) + "\n")
        proc.stdin.flush()
        stage: str | None = None
        self.pair = None
        timer = threading.Timer(self.timeout, proc.kill)
        timer.start()
        try:
            for line in _lines(proc.stdout):
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # something the C++ side printed
                if "stage" in msg:
                    stage = msg["stage"]
                    self.pair = msg.get("pair")
                elif "result" in msg:
                    return msg["result"], None, None
        finally:
            timer.cancel()
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            stream.close()
        self.proc = None
        return None, stage, code if code != -9 else None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
        self.proc = None


def _lines(stream: IO[str]) -> Iterable[str]:
    while True:
        line = stream.readline()
        if not line:
            return
        yield line


def run_case(
    worker: Worker,
    path: str,
    pairs: Sequence[tuple[str, str]],
    *,
    ours_disabled: Sequence[str] = (),
    drift: bool = True,
) -> list[dict[str, Any]]:
    """Every outcome for one model file: the worker's, and for a pair during which the child died, ``ort-crash`` or
    ``qdqopt-crash`` (by the stage it had announced); the pairs after it run in a new child."""
    todo = list(pairs)
    outcomes: list[dict[str, Any]] = []
    while todo:
        task = {"path": path, "pairs": todo, "configs": CONFIGS, "ours_disabled": list(ours_disabled), "drift": drift}
        result, stage, code = worker.run(task)
        if result is not None:
            outcomes.extend(result["outcomes"])
            return outcomes
        how = (
            f"signal {-code}" if code is not None and code < 0 else "hung (killed)" if code is None else f"exit {code}"
        )
        what = (stage or "start").split()
        detail = f"the child process died ({how}) during {stage or 'start-up'}"
        if what[0] in ("ort-run-input", "start"):  # running the model itself at DISABLE_ALL, before any pair
            outcomes.append({"kind": "ort-crash", "detail": detail, "level": "disable_all", "config": "-"})
            if not drift:
                return outcomes
            drift = False
            continue
        pair = tuple(worker.pair or ("-", "-"))
        at = next((i for i, p in enumerate(todo) if tuple(p) == pair), 0)
        kind = {"qdqopt": "qdqopt-crash", "ort-run-own": "ort-own-output", "compare": "compare-crash"}.get(
            what[0], "ort-crash"
        )
        outcomes.append({"kind": kind, "detail": detail, "level": todo[at][0], "config": todo[at][1]})
        # the pairs before the one that died ran, but their outcomes died with the child: run them again
        todo = todo[:at] + todo[at + 1 :]
    return outcomes


@dataclass
class Finding:
    """One outcome that is a finding, with the case it came from."""

    seed: int
    index: int
    kind: str
    level: str
    config: str
    detail: str
    model: bytes = b""

    @property
    def signature(self) -> str:
        """The finding's class: its kind and its message with numbers and name counters blanked (the same fault
        seen at several levels is one class)."""
        from qdqopt.fuzz.worker import normalize

        return f"{self.kind} | {normalize(self.detail)}"


@dataclass
class FuzzRun:
    """What a run found: outcome counts per kind and level, the findings, and the classes saved."""

    seed: int
    budget: int
    shard: tuple[int, int]
    cases: int = 0
    seconds: float = 0.0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    saved: dict[str, Path] = field(default_factory=dict)
    indices: list[int] = field(default_factory=list)

    def classes(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.signature, []).append(f)
        return out


def shard_cases(cases: Sequence[GeneratedCase], shard: tuple[int, int]) -> list[GeneratedCase]:
    """This shard's cases: ``index % n == i`` (the shards of one seeded run never overlap and cover it)."""
    i, n = shard
    return [c for c in cases if c.index % n == i]


def fuzz(
    *,
    seed: int = 0,
    budget: int = 100,
    jobs: int = 1,
    shard: tuple[int, int] = (0, 1),
    levels: Sequence[str] = LEVELS,
    configs: Sequence[str] = tuple(CONFIGS),
    out: Path | None = None,
    shrink: bool = True,
    shrink_checks: int = 60,
    shrink_seconds: float = 1800.0,
    max_ops: int = 6,
    ours_disabled: Sequence[str] = (),
    drift: bool = True,
    progress: Callable[[str], None] | None = None,
    cases: Sequence[GeneratedCase] | None = None,
) -> FuzzRun:
    """Generate ``budget`` models from ``seed`` (or take ``cases``), run this shard's through every level and config
    in ORT and qdqopt, and shrink and save one model per class of finding under ``out``."""
    from qdqopt.fuzz.report import save_finding
    from qdqopt.fuzz.shrink import shrink_model

    started = time.monotonic()
    all_cases = list(cases) if cases is not None else generate(seed, budget, max_ops)
    mine = shard_cases(all_cases, shard)
    run = FuzzRun(seed, budget, shard, indices=[c.index for c in mine])
    pairs = [(lvl, cfg) for cfg in configs for lvl in levels]
    lock = threading.Lock()
    queue = list(reversed(mine))
    tmp = tempfile.TemporaryDirectory(prefix="qdqopt-fuzz-")

    def work() -> None:
        worker = Worker()
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    case = queue.pop()
                path = os.path.join(tmp.name, f"case{case.index}.onnx")
                Path(path).write_bytes(case.model)
                outcomes = run_case(worker, path, pairs, ours_disabled=ours_disabled, drift=drift)
                with lock:
                    run.cases += 1
                    for o in outcomes:
                        key = (o["kind"], o.get("level", "-"))
                        run.counts[key] = run.counts.get(key, 0) + 1
                        if o["kind"] in FINDING_KINDS:
                            run.findings.append(
                                Finding(
                                    case.seed,
                                    case.index,
                                    o["kind"],
                                    o.get("level", "-"),
                                    o.get("config", "-"),
                                    str(o.get("detail", "")),
                                    case.model,
                                )
                            )
                    if progress is not None:
                        rate = run.cases / max(time.monotonic() - started, 1e-9)
                        progress(
                            f"[{run.cases}/{len(mine)}] {rate:.2f} cases/s, {len(run.findings)} findings in "
                            f"{len(run.classes())} classes"
                        )
        finally:
            worker.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, jobs))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if shrink or out is not None:
            worker = Worker()
            try:
                order = {lvl: i for i, lvl in enumerate(("disable_all", "basic", "extended", "layout", "all"))}
                deadline = time.monotonic() + shrink_seconds
                for signature, group in run.classes().items():
                    # the lowest level that shows it, the smallest model first
                    first = min(group, key=lambda f: (order.get(f.level, 9), len(f.model)))
                    small = first.model
                    if shrink and time.monotonic() < deadline:
                        if progress is not None:
                            progress(f"shrinking {signature}")
                        small = shrink_model(
                            worker, first, tmp.name, ours_disabled=ours_disabled, max_checks=shrink_checks
                        )
                    if out is not None:
                        run.saved[signature] = save_finding(
                            out, first, small, len(group), signature, list(dict.fromkeys(f.level for f in group))
                        )
            finally:
                worker.close()
    finally:
        tmp.cleanup()
    run.seconds = time.monotonic() - started
    return run


def load_case_model(data: bytes) -> onnx.ModelProto:
    model: onnx.ModelProto = onnx.ModelProto.FromString(data)
    return model
