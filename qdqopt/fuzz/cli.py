"""``qdqopt fuzz``: its options and its run (kept here so that ``qdqopt/cli.py`` only dispatches to it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qdqopt.errors import UsageError

__all__ = ["add_arguments", "parse_shard", "run_fuzz"]


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` -> ``(I, N)`` with ``0 <= I < N``."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r} is not I/N (e.g. 0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {text!r}: I must be in 0..N-1")
    return i, n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="the run's seed (the same seed and budget: the same graphs)")
    p.add_argument("--budget", type=int, default=100, help="graphs generated for the whole run (all shards)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="child processes running cases in parallel")
    p.add_argument("--shard", default="0/1", metavar="I/N", help="run only cases with index %% N == I")
    p.add_argument("--out", type=Path, default=None, help="folder for the minimal model of each class of finding")
    p.add_argument(
        "--level",
        "-l",
        action="append",
        choices=["basic", "extended", "layout", "all"],
        help="levels to compare (repeatable; default: all four)",
    )
    p.add_argument("--max-ops", type=int, default=6, help="most ops per generated graph")
    p.add_argument("--no-shrink", action="store_true", help="save the models as generated")
    p.add_argument("--shrink-seconds", type=float, default=1800.0, help="time for shrinking, all classes together")
    p.add_argument("--no-drift", action="store_true", help="do not hold ORT's outputs against its DISABLE_ALL ones")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def run_fuzz(args: argparse.Namespace) -> int:
    """Exit 0: nothing found; 1: findings (differences, or ORT findings)."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise UsageError("qdqopt fuzz needs hypothesis (pip install -e '.[dev]')") from None
    from qdqopt.fuzz.report import summary_lines
    from qdqopt.fuzz.runner import LEVELS
    from qdqopt.fuzz.session import fuzz

    if args.budget < 1 or args.jobs < 1:
        raise UsageError("--budget and --jobs must be at least 1")
    shard = parse_shard(args.shard)
    tty = sys.stderr.isatty()

    def progress(text: str) -> None:
        if args.quiet:
            return
        sys.stderr.write(("\r\033[K" if tty else "") + text + ("" if tty else "\n"))
        sys.stderr.flush()

    run = fuzz(
        seed=args.seed,
        budget=args.budget,
        jobs=args.jobs,
        shard=shard,
        levels=tuple(args.level or LEVELS),
        out=args.out,
        shrink=not args.no_shrink,
        shrink_seconds=args.shrink_seconds,
        max_ops=args.max_ops,
        drift=not args.no_drift,
        progress=progress,
    )
    if tty and not args.quiet:
        sys.stderr.write("\n")
    print("\n".join(summary_lines(run)))
    return 1 if run.findings else 0
