"""Mutated-file fuzzing of the ``qdqopt`` command line (issue #12, item 4): see :mod:`qdqopt.mutants`.

    python benchmarks/mutants.py --count 5000 --seed 1 --jobs 2 [--shard I/N] [--keep DIR]

Every mutant of every corpus model and fixture must end in a result (exit 0/1) or a one-line error (exit 2): never a
traceback, exit 3, a signal, a hang, a partial output file, an output that ignores the umask, or a changed input.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qdqopt.mutants import main

if __name__ == "__main__":
    sys.exit(main())
