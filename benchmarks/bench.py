"""Benchmark: qdqopt's load, pipeline and save against ORT's session creation, per model and level.

Usage: ``python benchmarks/bench.py [MODEL.onnx ...] [--levels 0,1,2] [--repeat 5]``. Without models it uses the
bundled example and, when the shared corpus is beside the checkout, its largest models. Prints the median wall time
of each step and qdqopt's peak Python memory (tracemalloc) per run, and, for a model measured at EXTENDED and at
LAYOUT or ALL, how much the layout level costs over EXTENDED (qdqopt's load + passes + save, and ORT's). Numbers, not
assertions: run it before and after a change.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

from qdqopt.api import run
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
    ratios: list[str] = []
    for path in args.models or _default_models():
        totals: dict[Level, tuple[float, float]] = {}
        for text in args.levels.split(","):
            level = parse_level(text)
            row = _bench_one(path, level, args.repeat)
            if row:
                print(row[0])
                totals[level] = row[1]
        base = totals.get(Level.EXTENDED)
        for level in (Level.LAYOUT, Level.ALL):
            if base is not None and level in totals:
                ours, ort = totals[level]
                ratios.append(
                    f"{_short(path):<48} {level.short:<8} qdqopt {ours / base[0]:.2f}x EXTENDED "
                    f"({ours * 1e3:.1f} vs {base[0] * 1e3:.1f} ms), ORT {ort / base[1]:.2f}x"
                )
    if ratios:
        print("\nlayout level over EXTENDED (load + passes + save; ORT: session creation)")
        print("\n".join(ratios))


def _short(path: Path) -> str:
    return path.name if len(path.name) <= 48 else "..." + path.name[-45:]


def _bench_one(path: Path, level: Level, repeat: int) -> tuple[str, tuple[float, float]] | None:
    try:
        run_reference(path, level, capture_log=False)
    except Exception:
        return None  # a model ORT rejects is skipped
    disabled = sorted(run(path, level).pipeline.unsupported)  # what qdqopt declines on this model
    load = _median(lambda: load_model(path), repeat)
    passes = _median(lambda: run_pipeline(load_model(path), level, disabled=set(disabled)), repeat) - load
    model = _run(path, level, disabled)
    save = _median(lambda: save_model(model), repeat)
    ort = _median(lambda: run_reference(path, level, capture_log=False), repeat)
    tracemalloc.start()
    save_model(_run(path, level, disabled))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    total = load + max(passes, 0.0) + save
    row = (
        f"{_short(path):<48} {level.short:<12} {load * 1e3:8.1f} {max(passes, 0.0) * 1e3:9.1f} {save * 1e3:8.1f} "
        f"{ort * 1e3:8.1f} {peak:8.1f}" + (f"  (declined: {', '.join(disabled)})" if disabled else "")
    )
    return row, (total, ort)


def _run(path: Path, level: Level, disabled: list[str]) -> Model:
    model = load_model(path)
    run_pipeline(model, level, disabled=set(disabled))
    return model


if __name__ == "__main__":
    main()
