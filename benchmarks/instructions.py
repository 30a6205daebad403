"""Instruction counts of qdqopt's load, passes and save, each on its own (callgrind): the measure a speed change is
judged by, since wall times on a shared machine move by a third and instruction counts do not.

Usage: ``python benchmarks/instructions.py [MODEL.onnx] [--level all] [--out DIR]`` (default: the corpus's
MobileNetV3 at ALL). It runs this script again under ``valgrind --tool=callgrind``; there, after two warm-up runs,
a third run zeroes callgrind's counters before the load and dumps them after the load, the passes and the save
(callgrind's client requests, through a small C shim built with the system's C compiler into ``--out``). It prints
each step's instructions in the main thread (callgrind's file of thread 1: ORT's or OpenBLAS's threads, spinning on
the other core, are left out), for the pure-Python build as for the compiled one. Needs valgrind, its headers
(``valgrind/callgrind.h``) and a C compiler. Run it with ``PYTHONPATH=<checkout>`` to measure a checkout's compiled
build; the files stay in ``--out`` for ``callgrind_annotate --inclusive=yes``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOBILENETV3 = ROOT.parent / "shared/corpus/ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"
#: the steps, in the order the measured run dumps them
STEPS = ("load", "passes", "save")
_SHIM = """#include <valgrind/callgrind.h>
void qdqopt_zero(void) { CALLGRIND_ZERO_STATS; }
void qdqopt_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
"""


def _shim(folder: Path) -> Path:
    source, library = folder / "shim.c", folder / "shim.so"
    source.write_text(_SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def _measured(model: Path, level: str, library: Path) -> None:
    """The runs callgrind watches (in the child): two warm-ups, then one with a dump after each step."""
    import gc

    from qdqopt.graph import load_model
    from qdqopt.graph.model import write_atomic
    from qdqopt.levels import parse_level
    from qdqopt.manager import run_pipeline

    shim = ctypes.CDLL(str(library))
    out = Path(tempfile.mkdtemp()) / "out.onnx"
    for measure in (False, False, True):
        gc.collect()
        if measure:
            shim.qdqopt_zero()
        loaded = load_model(model)
        if measure:
            shim.qdqopt_dump(b"load")
        run_pipeline(loaded, parse_level(level))
        if measure:
            shim.qdqopt_dump(b"passes")
        write_atomic(loaded, out)
        if measure:
            shim.qdqopt_dump(b"save")
        del loaded
    shutil.rmtree(out.parent)


def _main_thread(dump: Path) -> int | None:
    """The instructions a callgrind dump of the main thread counts (its ``summary:`` or ``totals:`` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", type=Path, default=MOBILENETV3)
    parser.add_argument("--level", default="all")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "qdqopt-instructions")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _measured(args.model, args.level, args.child)
        return
    if shutil.which("valgrind") is None or shutil.which("cc") is None:
        sys.exit("needs valgrind and a C compiler")
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("callgrind.out*"):
        old.unlink()
    library = _shim(args.out)
    command = [sys.executable, __file__, str(args.model), "--level", args.level, "--child", str(library)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={args.out / 'callgrind.out'}",
            *command,
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    total = 0
    for index, step in enumerate(STEPS, start=1):
        dump = args.out / f"callgrind.out.{index}-01"  # (-01: the main thread's file)
        count = _main_thread(dump) if dump.is_file() else None
        total += count or 0
        print(f"{step:8} {count / 1e6 if count else float('nan'):9.1f} M   ({dump})")
    print(f"{'total':8} {total / 1e6:9.1f} M")


if __name__ == "__main__":
    main()
