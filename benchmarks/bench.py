"""Benchmark: qdqopt's load, pipeline and save against ORT's session creation, per model and level.

Usage: ``python benchmarks/bench.py [MODEL.onnx ...] [--levels 0,1,2] [--repeat 5]``. Without models it uses the
bundled example and, when the shared corpus is beside the checkout, its largest models. Prints the median wall time
of each step and qdqopt's peak Python memory (tracemalloc) per run. Numbers, not assertions: run it before and after
a change to the graph core.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

from qdqopt.cli import example_model
from qdqopt.graph import Model, load_model, save_model
from qdqopt.levels import Level, parse_level
from qdqopt.manager import run_pipeline
from qdqopt.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


def _default_models() -> list[Path]:
    models = [example_model()]
    if CORPUS.is_dir():
        models += sorted(CORPUS.rglob("*.onnx"), key=lambda p: p.stat().st_size, reverse=True)[:3]
    return models


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--levels", default="0,1,2,99")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'model':<48} {'level':<12} {'load ms':>8} {'passes ms':>9} {'save ms':>8} {'ORT ms':>8} {'peak MiB':>8}")
    for path in args.models or _default_models():
        for text in args.levels.split(","):
            row = _bench_one(path, parse_level(text), args.repeat)
            if row:
                print(row)


def _bench_one(path: Path, level: Level, repeat: int) -> str | None:
    try:
        run_reference(path, level, capture_log=False)
    except Exception:
        return None  # a model ORT rejects is skipped
    load = _median(lambda: load_model(path), repeat)
    passes = _median(lambda: run_pipeline(load_model(path), level), repeat) - load
    model = _run(path, level)
    save = _median(lambda: save_model(model), repeat)
    ort = _median(lambda: run_reference(path, level, capture_log=False), repeat)
    tracemalloc.start()
    save_model(_run(path, level))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    name = path.name if len(path.name) <= 48 else "..." + path.name[-45:]
    return (
        f"{name:<48} {level.short:<12} {load * 1e3:8.1f} {max(passes, 0.0) * 1e3:9.1f} {save * 1e3:8.1f} "
        f"{ort * 1e3:8.1f} {peak:8.1f}"
    )


def _run(path: Path, level: Level) -> Model:
    model = load_model(path)
    run_pipeline(model, level)
    return model


if __name__ == "__main__":
    main()
