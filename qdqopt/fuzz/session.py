"""One fuzz run: generate a seeded run of graphs, run this shard's through ORT and qdqopt, shrink and save findings.

:func:`fuzz` generates ``budget`` graphs from ``seed`` (:func:`qdqopt.fuzz.strategies.generate`), keeps this shard's
cases (``index % shards == shard``), hands them to ``jobs`` worker threads, each driving its own child process
(:class:`qdqopt.fuzz.runner.Worker`), groups the outcomes into classes, shrinks one model per class
(:mod:`qdqopt.fuzz.shrink`) and saves it with its seed (:mod:`qdqopt.fuzz.report`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from qdqopt.fuzz.report import save_finding
from qdqopt.fuzz.runner import CONFIGS, FINDING_KINDS, LEVELS, Finding, FuzzRun, Worker, run_case, shard_cases
from qdqopt.fuzz.shrink import shrink_model
from qdqopt.fuzz.strategies import GeneratedCase, generate

__all__ = ["fuzz"]


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
