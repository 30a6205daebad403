"""Running generated models through ORT and qdqopt in child processes, and collecting what differs.

:class:`Worker` owns one ``python -m qdqopt.fuzz.worker`` child (ORT's C++ can abort: a dead child is a finding, the
parent carries on with a new one). :func:`run_case` runs one model through every (level, config) pair in a worker;
:class:`Finding` and :class:`FuzzRun` hold what a run (:func:`qdqopt.fuzz.session.fuzz`) found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import onnx

from qdqopt.fuzz.strategies import GeneratedCase

__all__ = ["CONFIGS", "FINDING_KINDS", "LEVELS", "Finding", "FuzzRun", "Worker", "run_case", "shard_cases"]

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
        "ort-nondeterministic",
    }
)
#: findings about ORT itself, not about qdqopt
ORT_KINDS = frozenset({"ort-crash", "ort-own-output", "ort-drift", "ort-level-reject", "ort-nondeterministic"})


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
        #: the child's temporary files (a child killed on a hang, or crashed, leaves them): removed by close()
        self.scratch = tempfile.TemporaryDirectory(prefix="qdqopt-fuzz-")

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "qdqopt.fuzz.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**_env(), "TMPDIR": self.scratch.name},
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
        self._stop()
        self.scratch.cleanup()

    def _stop(self) -> None:
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
        if kind == "ort-crash":  # what does qdqopt say about the model ORT crashed on? (in a child of its own)
            outcomes.extend(_qdqopt_after_crash(worker, path, todo[at], ours_disabled))
        # the pairs before the one that died ran, but their outcomes died with the child: run them again
        todo = todo[:at] + todo[at + 1 :]
    return outcomes


def _qdqopt_after_crash(
    worker: Worker, path: str, pair: Sequence[str], ours_disabled: Sequence[str]
) -> list[dict[str, Any]]:
    task = {"path": path, "pairs": [list(pair)], "configs": CONFIGS, "ours_disabled": list(ours_disabled)}
    result, stage, code = worker.run({**task, "qdqopt_only": True})
    if result is not None:
        return list(result["outcomes"])
    how = f"signal {-code}" if code is not None and code < 0 else "hung (killed)" if code is None else f"exit {code}"
    detail = f"the child process died ({how}) during {stage or 'start-up'} (after ORT's crash)"
    return [{"kind": "qdqopt-crash", "detail": detail, "level": pair[0], "config": pair[1]}]


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


def load_case_model(data: bytes) -> onnx.ModelProto:
    model: onnx.ModelProto = onnx.ModelProto.FromString(data)
    return model
