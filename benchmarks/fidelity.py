"""The fidelity table: qdqopt against ORT as it runs, per model, level and config. ``python -m benchmarks.fidelity
[--set corpus|realarch|transformers|handbuilt|all] [MODEL ...]``.

The models: ``--set`` names a set (``corpus``: every ``.onnx`` of ``../shared/corpus`` ORT accepts; ``realarch`` and
``transformers``: the committed fixtures :data:`fixtures.REALARCH` / :data:`fixtures.TRANSFORMERS`; ``handbuilt``:
every hand-built fixture; ``all``: the four), and ``MODEL`` arguments add fixture names or ``.onnx`` paths.

For every model, level (DISABLE_ALL, BASIC, EXTENDED, LAYOUT, ALL) and config (``default``, ``int8-allowed``:
``session.qdqisint8allowed=1``), ORT runs as a user runs it (nothing disabled on either side) and qdqopt runs what it
has (:func:`qdqopt.compare.compare_level`), at the tiers ``--tiers`` names (default N, S, X, P; N runs both outputs on
the same seeded random inputs). Each run is classified:

* ``P`` / ``X`` / ``S``: qdqopt's output equals ORT's byte for byte / at tier X (names and order too) / only at
  tier S (same DAG); with N checked, each also means bit-identical outputs;
* ``REF``: ORT cannot create the session (or its process dies creating it) and qdqopt refuses the model (counted
  as exact);
* otherwise a difference class: ``ORT ran <passes>`` when ORT's log shows passes qdqopt lacks (or that declined the
  model) modifying it, else ``qdqopt wrote differently`` with the first structural difference; ``error`` when one
  side failed.

Prints a table per model (one column per level and config), then per level and config the share of runs exact at
each tier, over every run and over the runs ORT changed (its log shows a pass modifying the model: the figure the
project quotes), and the difference classes (most frequent first, each with a model that shows it). ``--json FILE``
also writes every result (one JSON line each, as they come; ``--load FILE`` prints the table of such a file,
``--resume FILE`` completes an interrupted run); ``--jobs N`` runs N child processes; ``--match SUBSTRING`` restricts
the models. ``python -m benchmarks.transformer_table`` is this table on the transformer fixtures at S, X and P.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path

LEVELS = ("disable_all", "basic", "extended", "layout", "all")
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
SETS = ("corpus", "realarch", "transformers", "handbuilt")
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@dataclass
class Result:
    model: str  # a fixture name, or a path (a corpus model: relative to the corpus)
    level: str
    config: str
    tier: str  # the strongest tier that holds: "P", "X", "S", or "-" (not even S; "N" when only N holds), "error"
    ort_only_modified: list[str]
    trace_matches: bool
    first_difference: str
    error: str = ""
    #: passes ORT's log shows modifying the model more often than qdqopt's trace does (and the reverse)
    more_in_ort: list[str] = field(default_factory=list)
    more_in_qdqopt: list[str] = field(default_factory=list)
    #: whether ORT's log shows a pass modifying the model at this level
    ort_changed: bool = True
    #: tier N: True / False, None when it was not checked (or could not run)
    numerics: bool | None = None

    @property
    def verdict(self) -> str:
        if self.tier == "error":
            return "ERR"
        if self.tier == "refused":
            return "REF"
        return self.tier if self.tier in ("P", "X", "S") else "diff"

    def exact(self, tier: str) -> bool:
        """Whether the run holds at ``tier`` (P implies X implies S); a session both ORT and qdqopt refuse holds."""
        if self.tier == "refused":
            return True
        order = ("S", "X", "P")
        return self.tier in order and order.index(self.tier) >= order.index(tier)

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


def _load(model: str) -> object:
    """A fixture by name, or an ``.onnx`` path (relative to the corpus when it is not a file here)."""
    path = Path(model)
    if model.endswith(".onnx"):
        return path if path.is_file() else CORPUS / path
    import fixtures

    return fixtures.get(model).build()


def measure(model: str, level: str, config: str, tiers: tuple[str, ...] = ("N", "S", "X", "P")) -> Result:
    from qdqopt.compare import compare_level
    from qdqopt.errors import QdqoptError

    try:
        comp = compare_level(_load(model), level, config=CONFIGS[config], tiers=tiers)  # type: ignore[arg-type]
    except QdqoptError as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
        return Result(
            model, level, config, "refused" if _ort_fails(model, level, config) else "error", [], False, "", error
        )
    report = comp.report
    structural = [t for t in ("P", "X", "S") if t in tiers]
    tier = next((t for t in structural if report.verdict.get(t) is True and _holds_up_to(report, t)), "-")
    numerics = report.verdict.get("N")
    first = next((str(d) for d in report.differences if d.tier in ("S", "X")), "")
    if not first and report.differences:
        first = str(report.differences[0])
    ours, ort = _modified(comp.ours_lines), _modified(comp.ort_lines)
    return Result(
        model,
        level,
        config,
        tier,
        comp.ort_only_modified,
        comp.trace_matches,
        first,
        more_in_ort=sorted(ort - ours),
        more_in_qdqopt=sorted(ours - ort),
        ort_changed=bool(ort),
        numerics=numerics,
    )


def _ort_fails(model: str, level: str, config: str) -> bool:
    """Whether ORT itself cannot create the session qdqopt refused (then both agree: a ``refused`` run)."""
    from qdqopt.errors import ReferenceError
    from qdqopt.reference import run_reference

    try:
        run_reference(_load(model), level, config=CONFIGS[config])  # type: ignore[arg-type]
    except ReferenceError:
        return True
    return False


def _holds_up_to(report: object, tier: str) -> bool:
    """Every structural tier up to ``tier`` holds (N is reported on its own)."""
    verdict = report.verdict  # type: ignore[attr-defined]
    order = ("S", "X", "P")
    return all(verdict.get(t) is not False for t in order[: order.index(tier) + 1])


def _modified(lines: list[str]) -> collections.Counter[str]:
    """How often each transformer reports ``modified: 1`` in trace lines."""
    out: collections.Counter[str] = collections.Counter()
    for line in lines:
        m = re.match(r"GraphTransformer (\S+) modified: 1", line)
        if m:
            out[m.group(1)] += 1
    return out


def _measure_args(args: tuple[str, str, str, tuple[str, ...]]) -> Result:
    return measure(*args)


def _measure_all(work: list[tuple[str, str, str, tuple[str, ...]]], jobs: int) -> Iterator[Result]:
    """Every measurement of ``work``, as they end, in ``jobs`` child processes (at most ``jobs`` in flight). A child
    that dies (ORT's C++ can abort: some fixtures say ORT 1.32 crashes on them) ends its pool: what was in flight is
    measured again, each in a fresh child of its own, where the one that dies again is an error result; a new pool
    takes the rest. The children keep their temporary files in one folder of this process's, so what a child that
    died leaves goes with it."""
    with tempfile.TemporaryDirectory(prefix="qdqopt-fidelity-") as folder:
        yield from _measure_pools(work, jobs, folder)


def _temp_in(folder: str) -> None:
    """A pool child's initializer: its temporary files go in ``folder``."""
    tempfile.tempdir = folder


def _pool(jobs: int, folder: str) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(jobs, initializer=_temp_in, initargs=(folder,))


def _measure_pools(work: list[tuple[str, str, str, tuple[str, ...]]], jobs: int, folder: str) -> Iterator[Result]:
    todo = list(reversed(work))
    while todo:
        suspects: list[tuple[str, str, str, tuple[str, ...]]] = []
        with _pool(jobs, folder) as pool:
            running: dict[Future[Result], tuple[str, str, str, tuple[str, ...]]] = {}
            while (todo or running) and not suspects:
                while todo and len(running) < jobs:
                    w = todo.pop()
                    running[pool.submit(_measure_args, w)] = w
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    w = running.pop(future)
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        suspects.append(w)
            suspects += running.values()
        for w in suspects:
            with _pool(1, folder) as alone:
                try:
                    yield alone.submit(_measure_args, w).result()
                except BrokenProcessPool:
                    yield _died(*w[:3], folder)


def _died(model: str, level: str, config: str, folder: str) -> Result:
    """A measurement whose process died: ``refused`` when qdqopt, asked alone in a child, refuses the model (ORT's
    session crashing on it is the fixture's known ORT bug), else an error."""
    try:
        with _pool(1, folder) as alone:
            refusal = alone.submit(_qdqopt_refusal, model, level, config).result()
    except BrokenProcessPool:
        refusal = None
    if refusal:
        return Result(model, level, config, "refused", [], False, "", f"ORT's session crashes; qdqopt: {refusal}")
    return Result(
        model,
        level,
        config,
        "error",
        [],
        False,
        "",
        "the process died (a crash in ORT's C++) where qdqopt gives a model",
    )


def _qdqopt_refusal(model: str, level: str, config: str) -> str:
    from qdqopt.api import run
    from qdqopt.errors import QdqoptError

    try:
        run(_load(model), level, config=CONFIGS[config])  # type: ignore[arg-type]
    except QdqoptError as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


def _share(runs: list[Result], ok: int) -> str:
    return f"{ok}/{len(runs)} ({100 * ok / len(runs):.0f}%)" if runs else "-"


def table(results: list[Result]) -> list[str]:
    columns = [(level, config) for level in LEVELS for config in CONFIGS]
    by_key = {(r.model, r.level, r.config): r for r in results}
    seen = list(dict.fromkeys(r.model for r in results))
    width = max(len(m) for m in seen)
    present = [(lv, c) for lv, c in columns if any(r.level == lv and r.config == c for r in results)]
    head = " " * width + " " + " ".join(f"{lv[:3]}/{'d' if c == 'default' else 'i'}".ljust(6) for lv, c in present)
    lines = [head]
    for model in seen:
        cells = [by_key[(model, lv, c)].verdict if (model, lv, c) in by_key else "" for lv, c in present]
        lines.append(model.ljust(width) + " " + " ".join(cell.ljust(6) for cell in cells))
    lines.append("")
    lines.append("exact per level and config (ORT as it runs, nothing disabled; N: bit-identical outputs)")
    header = " ".join(f"{t:>14s}" for t in ("N", "S", "X", "P"))
    lines.append(f"  {'level':11s} {'config':12s} {'runs':>5s}  {header}   X, of runs ORT changed")
    for level, config in present:
        runs = [r for r in results if r.level == level and r.config == config]
        changed = [r for r in runs if r.ort_changed]
        n_runs = [r for r in runs if r.numerics is not None]
        cells = [_share(n_runs, sum(bool(r.numerics) for r in n_runs))]
        cells += [_share(runs, sum(r.exact(t) for r in runs)) for t in ("S", "X", "P")]
        lines.append(
            f"  {level:11s} {config:12s} {len(runs):5d}  "
            + " ".join(f"{c:>14s}" for c in cells)
            + f"   {_share(changed, sum(r.exact('X') for r in changed))}"
        )
    lines.append("")
    refused = sum(r.tier == "refused" for r in results)
    if refused:
        lines.append(
            f"(REF: {refused} run(s) where ORT cannot create the session, or crashes creating it, "
            "and qdqopt refuses it: counted exact)"
        )
    lines.append("difference classes (runs not exact at X), most frequent first:")
    classes: collections.Counter[str] = collections.Counter()
    example: dict[str, Result] = {}
    for r in results:
        if not r.exact("X"):
            cls = r.difference_class()
            classes[cls] += 1
            example.setdefault(cls, r)
    for cls, count in classes.most_common():
        ex = example[cls]
        lines.append(f"  {count:4d}  {cls}")
        lines.append(f"        e.g. {ex.model} {ex.level}/{ex.config}: {ex.first_difference or ex.error}"[:400])
    numeric = collections.Counter(r.model for r in results if r.numerics is False)
    if numeric:
        lines.append("")
        lines.append("outputs not bit-identical (N), runs per model:")
        lines += [f"  {count:4d}  {model}" for model, count in numeric.most_common()]
    return lines


def models_of(name: str) -> list[str]:
    """The models of one ``--set``."""
    import fixtures

    if name == "corpus":
        from qdqopt.errors import ReferenceError
        from qdqopt.reference import check_accepted

        out = []
        for path in sorted(CORPUS.rglob("*.onnx")) if CORPUS.is_dir() else []:
            try:
                check_accepted(path)
            except ReferenceError:
                continue  # a model ORT rejects has no table row
            out.append(str(path.relative_to(CORPUS)))
        return out
    if name == "realarch":
        return list(fixtures.REALARCH)
    if name == "transformers":
        return list(fixtures.TRANSFORMERS)
    if name == "handbuilt":
        committed = {*fixtures.COMMITTED, *fixtures.REALARCH, *fixtures.TRANSFORMERS}
        return [f.name for f in fixtures.all_fixtures() if f.name not in committed]
    raise SystemExit(f"unknown set {name!r}: one of {', '.join(SETS)}, all")


def main(argv: Sequence[str] | None = None, *, default_set: str = "", default_tiers: str = "N,S,X,P") -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="fixture names or .onnx paths (added to --set)")
    parser.add_argument("--set", action="append", default=[], help=f"{', '.join(SETS)} or all (repeatable)")
    parser.add_argument("--match", help="only models whose name contains this")
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--tiers", default=default_tiers, help="tiers to check (default %(default)s)")
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
    sets = args.set or ([default_set] if default_set and not args.models else [])
    names: list[str] = []
    for name in sets:
        names += [m for s in (SETS if name == "all" else (name,)) for m in models_of(s)]
    if args.models:
        import fixtures

        known = {f.name for f in fixtures.all_fixtures()}
        for model in args.models:
            if not model.endswith(".onnx") and model not in known:
                parser.error(f"unknown fixture {model!r}")
            if model.endswith(".onnx") and not (Path(model).is_file() or (CORPUS / model).is_file()):
                parser.error(f"no such model: {model}")
        names += args.models
    if args.match:
        names = [n for n in names if args.match in n]
    if not names:
        parser.error("no models: name some, or give --set")
    # interleave the families (each one's first model, then each one's second...), so that a partial run covers them
    rank: dict[str, int] = {}
    seen: collections.Counter[str] = collections.Counter()
    for n in names:
        family = n.split("/")[0] if "/" in n else n.split("_")[0]
        rank[n] = seen[family]
        seen[family] += 1
    names.sort(key=lambda n: rank[n])
    levels = args.levels.split(",")
    tiers = tuple(args.tiers.split(","))
    # the first config first, for every model, then the next: a partial run has every model at every level
    work = [(n, lv, c, tiers) for c in args.configs.split(",") for n in names for lv in levels]
    done: list[Result] = []
    if args.resume:
        with open(args.resume) as f:
            done = [Result(**json.loads(line)) for line in f if line.strip()]
        measured = {(r.model, r.level, r.config) for r in done}
        work = [w for w in work if w[:3] not in measured]
    results: list[Result] = list(done)
    out = open(args.json, "a" if args.resume == args.json else "w") if args.json else None  # noqa: SIM115 (one line per result, as they come)
    try:
        for result in _measure_all(work, max(1, args.jobs)):
            results.append(result)
            print(f"{result.model} {result.level}/{result.config}: {result.verdict}", file=sys.stderr, flush=True)
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
