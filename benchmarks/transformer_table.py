"""qdqopt against ORT on the transformer fixtures: ``python -m benchmarks.transformer_table [NAME ...]``.

The fixtures are ``fixtures.TRANSFORMERS`` (:mod:`fixtures.transformers`).

For every fixture, level (BASIC, EXTENDED, LAYOUT, ALL) and config (``default``, ``int8-allowed``:
``session.qdqisint8allowed=1``), ORT runs as a user runs it (nothing disabled on either side) and qdqopt runs what it
has (:func:`qdqopt.compare.compare_level`). Each run is classified:

* ``X`` / ``S``: qdqopt's output equals ORT's at tier X (names and order too) / only at tier S (same DAG);
* otherwise a difference class: ``ORT ran <passes>`` when ORT's log shows passes qdqopt lacks (or that declined the
  model) modifying it, else ``qdqopt wrote differently`` with the first structural difference; ``error`` when one
  side failed.

Prints a table per fixture (one column per level and config), the fraction exact per level, and the difference classes
(most frequent first, each with a fixture that shows it). ``--json FILE`` also writes every result (one JSON line
each, as they come; ``--load FILE`` prints the table of such a file); ``--jobs N`` runs N
child processes; ``NAME``s (or ``--match SUBSTRING``) restrict the fixtures.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

LEVELS = ("basic", "extended", "layout", "all")
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}


@dataclass
class Result:
    fixture: str
    level: str
    config: str
    tier: str  # "X", "S" or "-" (neither), "error"
    ort_only_modified: list[str]
    trace_matches: bool
    first_difference: str
    error: str = ""
    #: passes ORT's log shows modifying the model more often than qdqopt's trace does (and the reverse)
    more_in_ort: list[str] = field(default_factory=list)
    more_in_qdqopt: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return self.tier if self.tier in ("X", "S") else ("ERR" if self.tier == "error" else "diff")

    def difference_class(self) -> str:
        """The class of a run that is not exact at X: what ORT ran that qdqopt did not, or what qdqopt wrote."""
        if self.tier == "error":
            return f"error: {self.error.split(':')[0]}"
        if self.ort_only_modified:
            return "ORT ran " + ", ".join(self.ort_only_modified)
        if self.more_in_ort or self.more_in_qdqopt:
            fired = [f"{p} fired in ORT only" for p in self.more_in_ort]
            fired += [f"{p} fired in qdqopt only" for p in self.more_in_qdqopt]
            return "; ".join(fired) + ": " + _generic(self.first_difference)
        if self.tier == "S":
            return "same DAG, names/order differ: " + _generic(self.first_difference)
        if not self.trace_matches:
            return "trace differs, qdqopt wrote differently: " + _generic(self.first_difference)
        return "qdqopt wrote differently: " + _generic(self.first_difference)


def _generic(line: str) -> str:
    """A difference line with the model-specific parts (names, counts, numbers) blurred, to group alike ones; an
    op-count line keeps its op types, with the sign of each difference."""
    m = re.match(r"(\[S\] op counts: qdqopt minus ORT: )\{(.*)\}$", line)
    if m:
        items = re.findall(r"'([^']+)': (-?)\d+", m.group(2))
        return m.group(1) + ", ".join(f"{'-' if neg else '+'}{op}" for op, neg in items)
    line = re.sub(r"'[^']*'", "'…'", line)
    line = line[:4] + re.sub(r"\[[^\]]*\]", "[…]", line[4:])
    line = re.sub(r"\{[^}]*\}", "{…}", line)
    line = re.sub(r"\d+", "#", line)
    return line[:160]


def measure(fixture: str, level: str, config: str) -> Result:
    import fixtures
    from qdqopt.compare import compare_level
    from qdqopt.errors import QdqoptError

    model = fixtures.get(fixture).build()
    try:
        # tier N (running both graphs on random feeds) is left out: random int64 ids fall outside the vocabularies
        comp = compare_level(model, level, config=CONFIGS[config], tiers=("S", "X", "P"))
    except QdqoptError as exc:
        return Result(fixture, level, config, "error", [], False, "", f"{type(exc).__name__}: {exc}"[:300])
    report = comp.report
    tier = "X" if report.holds("X") else ("S" if report.holds("S") else "-")
    first = next((str(d) for d in report.differences if d.tier in ("S", "X")), "")
    if not first and report.differences:
        first = str(report.differences[0])
    ours, ort = _modified(comp.ours_lines), _modified(comp.ort_lines)
    return Result(
        fixture,
        level,
        config,
        tier,
        comp.ort_only_modified,
        comp.trace_matches,
        first,
        more_in_ort=sorted(ort - ours),
        more_in_qdqopt=sorted(ours - ort),
    )


def _modified(lines: list[str]) -> collections.Counter[str]:
    """How often each transformer reports ``modified: 1`` in trace lines."""
    out: collections.Counter[str] = collections.Counter()
    for line in lines:
        m = re.match(r"GraphTransformer (\S+) modified: 1", line)
        if m:
            out[m.group(1)] += 1
    return out


def _measure_args(args: tuple[str, str, str]) -> Result:
    return measure(*args)


def table(results: list[Result]) -> list[str]:
    columns = [(level, config) for level in LEVELS for config in CONFIGS]
    by_key = {(r.fixture, r.level, r.config): r for r in results}
    fixtures_seen = list(dict.fromkeys(r.fixture for r in results))
    width = max(len(f) for f in fixtures_seen)
    head = " " * width + " " + " ".join(f"{lv[:3]}/{'d' if c == 'default' else 'i'}".ljust(6) for lv, c in columns)
    lines = [head]
    for fixture in fixtures_seen:
        cells = [by_key[(fixture, lv, c)].verdict if (fixture, lv, c) in by_key else "" for lv, c in columns]
        lines.append(fixture.ljust(width) + " " + " ".join(cell.ljust(6) for cell in cells))
    lines.append("")
    lines.append("exact per level (both configs):")
    for level in LEVELS:
        runs = [r for r in results if r.level == level]
        if not runs:
            continue
        x = sum(r.tier == "X" for r in runs)
        s = sum(r.tier in ("X", "S") for r in runs)
        lines.append(
            f"  {level:9s} X {x}/{len(runs)} ({100 * x / len(runs):.0f}%)  S {s}/{len(runs)} "
            f"({100 * s / len(runs):.0f}%)"
        )
    lines.append("")
    lines.append("difference classes (runs not exact at X), most frequent first:")
    classes: collections.Counter[str] = collections.Counter()
    example: dict[str, Result] = {}
    for r in results:
        if r.tier != "X":
            cls = r.difference_class()
            classes[cls] += 1
            example.setdefault(cls, r)
    for cls, count in classes.most_common():
        ex = example[cls]
        lines.append(f"  {count:4d}  {cls}")
        lines.append(f"        e.g. {ex.fixture} {ex.level}/{ex.config}: {ex.first_difference or ex.error}"[:400])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transformer_table", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="transformer fixtures (default: all)")
    parser.add_argument("--match", help="only fixtures whose name contains this")
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--load", help="print the table of a --json file instead of measuring")
    parser.add_argument("--resume", help="a --json file of an interrupted run: measure only what it lacks")
    args = parser.parse_args(argv)
    if args.load:
        with open(args.load) as f:
            loaded = [Result(**json.loads(line)) for line in f if line.strip()]
        print("\n".join(table(loaded)))
        return 0
    import fixtures

    names = args.names or list(fixtures.TRANSFORMERS)
    if args.match:
        names = [n for n in names if args.match in n]
    # interleave the architectures (each one's first fixture, then each one's second...), so that a partial run
    # covers them all
    rank: dict[str, int] = {}
    seen: collections.Counter[str] = collections.Counter()
    for n in names:
        rank[n] = seen[n.split("_")[0]]
        seen[n.split("_")[0]] += 1
    names.sort(key=lambda n: rank[n])
    levels = args.levels.split(",")
    # the default config first, for every fixture, then the other: a partial run has every fixture at every level
    work = [(n, lv, c) for c in CONFIGS for n in names for lv in levels]
    done: list[Result] = []
    if args.resume:
        with open(args.resume) as f:
            done = [Result(**json.loads(line)) for line in f if line.strip()]
        measured = {(r.fixture, r.level, r.config) for r in done}
        work = [w for w in work if w not in measured]
    results: list[Result] = list(done)
    out = open(args.json, "a" if args.resume == args.json else "w") if args.json else None  # noqa: SIM115 (one line per result, as they come)
    try:
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            for result in pool.map(_measure_args, work):
                results.append(result)
                print(f"{result.fixture} {result.level}/{result.config}: {result.verdict}", file=sys.stderr, flush=True)
                if out is not None:
                    out.write(json.dumps(asdict(result)) + "\n")
                    out.flush()
    finally:
        if out is not None:
            out.close()
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
