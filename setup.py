"""qdqopt's build: the metadata is in pyproject.toml; this adds the mypyc-compiled modules.

A wheel (``pip install .``) compiles the graph core, the helpers and the passes with mypyc, the same source as C
extensions beside the ``.py`` files. An editable install (``pip install -e .``) is never compiled, so an edited
``.py`` is what runs, to read and step through. ``QDQOPT_COMPILE=0`` builds a pure-Python wheel; without a C
compiler the build says so and stays pure Python (``_build/backend.py`` decides).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

#: the pass modules left as Python: ``LevelledTransformer``'s families, whose subclasses are named by
#: ``__init_subclass__`` (a compiled class keeps its own default name instead)
_INTERPRETED_PASSES = {"__init__.py", "gelu_fusion.py", "layer_norm_fusion.py"}

#: what mypyc compiles (paths under the project root; a folder means all of its modules): the graph core, the
#: helpers, every other pass module, the manager and the events (docs/architecture.md, "The compiled build"). A
#: plugin's pass stays Python and derives from the compiled base classes
#: (``mypyc_attr(allow_interpreted_subclasses=True)``).
COMPILED = [
    "qdqopt/graph",
    *sorted(
        f"qdqopt/passes/{path.name}"
        for path in Path(__file__).resolve().parent.joinpath("qdqopt/passes").glob("*.py")
        if path.name not in _INTERPRETED_PASSES
    ),
    "qdqopt/passes/qdq",
    "qdqopt/passes/transpose_optimization",
    "qdqopt/manager.py",
    "qdqopt/events.py",
    "qdqopt/kernels.py",
    "qdqopt/partition.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("QDQOPT_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3", group_name="qdqopt"))


setup(ext_modules=_ext_modules())
