"""Hash sweep: is every output of a change the same as before it? The check a speed change needs.

Usage: ``python benchmarks/hashsweep.py TREE OUT.json`` runs the qdqopt of the checkout ``TREE`` (its source, or
its compiled modules if built there) on every corpus model, the bundled examples, the committed fixtures and the
hand-built fixtures, at the five levels and in both configs, in child processes (two at a time). It records a hash of
the saved model's bytes and one of every event's kind, text, scope and nodes (what ``trace``, ``explain`` and the
report read), or the error. ``--cycles`` adds to a run's hashes how many objects it left in reference cycles, if
any (a run should leave none; compiled, a function nested in another can make one). ``python benchmarks/hashsweep.py
--compare BEFORE.json AFTER.json`` prints the runs that differ and exits 1 if any do.

Run it on two checkouts that nobody edits while it runs (``git worktree add --detach /tmp/before <commit>``): the
pure-Python pair and the compiled pair (``QDQOPT_COMPILE=1 python setup.py build_ext --inplace`` in each). Pure
against compiled on the same commit must agree too. About 18,500 runs, five to seven minutes on two cores.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import multiprocessing
import sys
import warnings
from pathlib import Path

from fidelity import CONFIGS, CORPUS, LEVELS  # (the fidelity table's levels, configs and corpus; no qdqopt import)

#: a hand-built fixture's key starts with this, then its name
HANDBUILT = "handbuilt:"


def _worker_init(tree: str, cycles: bool = False) -> None:
    sys.path.insert(0, tree)
    warnings.simplefilter("ignore")
    if cycles:  # each run's objects stay young until the collection after it (_one), which finds its cycles
        import qdqopt  # noqa: F401  (what the import leaves is collected here, not counted against a run)

        gc.collect()
        gc.disable()


def _one(job: tuple[str, str, str, str]) -> tuple[str, str]:
    tree, source, level, config = job
    key, digest = _digest(tree, source, level, config)
    if not gc.isenabled():  # --cycles: what the run left in reference cycles, once dropped
        left = gc.collect(0)
        if left:
            digest += f" cycles:{left}"
    return key, digest


def _digest(tree: str, source: str, level: str, config: str) -> tuple[str, str]:
    import qdqopt
    from qdqopt.graph.model import write_model

    key = f"{source.removeprefix(tree)}|{level}|{config}"
    try:
        model: object = source
        if source.startswith(HANDBUILT):
            import fixtures

            model = fixtures.get(source.removeprefix(HANDBUILT)).build()
        result = qdqopt.run(model, level, config=CONFIGS[config])  # type: ignore[arg-type]
        saved = io.BytesIO()
        write_model(result.loaded, saved)
        events = "\n".join(
            f"{e.kind.name}|{e.text}|{e.pass_name}|{e.level}|{e.step}|{e.nodes}" for e in result.pipeline.events.events
        )
        digest = hashlib.sha256(saved.getvalue()).hexdigest() + ":" + hashlib.sha256(events.encode()).hexdigest()
    except Exception as exc:  # a refusal is an output too
        digest = f"error {type(exc).__name__}: {str(exc)[:200]}"
    return key, digest


def _sources(tree: Path) -> list[str]:
    sources = sorted(str(p) for p in CORPUS.rglob("*.onnx")) if CORPUS.is_dir() else []
    sources += sorted(str(p) for p in (tree / "qdqopt" / "examples").glob("*.onnx"))
    sources += sorted(str(p) for p in (tree / "fixtures" / "models").glob("*.onnx"))
    sys.path.insert(0, str(tree))
    import fixtures

    sources += [HANDBUILT + f.name for f in fixtures.all_fixtures() if f.kind == "handbuilt"]
    return sources


def sweep(tree: Path, out: Path, processes: int = 2, *, cycles: bool = False) -> dict[str, str]:
    """Every run's hashes (see the module docstring), written to ``out`` as JSON; with ``cycles``, each followed by
    `` cycles:N`` where the run left N objects in reference cycles once dropped."""
    root = str(tree.resolve())
    jobs = [(root, s, level, config) for s in _sources(tree.resolve()) for level in LEVELS for config in CONFIGS]
    found: dict[str, str] = {}
    context = multiprocessing.get_context("spawn")  # (each child imports the tree's qdqopt, not the caller's)
    with context.Pool(processes, initializer=_worker_init, initargs=(root, cycles), maxtasksperchild=50) as pool:
        for key, digest in pool.imap_unordered(_one, jobs, chunksize=4):
            found[key] = digest
    out.write_text(json.dumps(found, indent=0, sort_keys=True))
    return found


def compare(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The runs whose hashes differ, or which only one side has."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs=2, type=Path, help="TREE OUT.json, or with --compare BEFORE.json AFTER.json")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--cycles",
        action="store_true",
        help="also count what each run leaves in reference cycles (the compiled build's nested functions can make "
        "them; a run should leave none): such a run's hash gains ' cycles:N'",
    )
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.paths)
        differing = compare(before, after)
        print(f"{len(before)} and {len(after)} runs; {len(differing)} differ")
        for key in differing[:20]:
            print(f"  {key}: {before.get(key)} / {after.get(key)}")
        sys.exit(1 if differing else 0)
    found = sweep(args.paths[0], args.paths[1], args.processes, cycles=args.cycles)
    errors = sum(v.startswith("error") for v in found.values())
    print(f"{len(found)} runs ({errors} refused or failed) -> {args.paths[1]}")


if __name__ == "__main__":
    main()
