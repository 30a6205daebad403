"""qdqopt's build: the metadata is in pyproject.toml; this adds the mypyc-compiled modules.

A wheel (``pip install .``) compiles the graph core and the helpers every pass calls with mypyc, the same source as
C extensions beside the ``.py`` files; the passes themselves stay Python, to read and step through. An editable
install (``pip install -e .``) is never compiled, so an edited ``.py`` is what runs. ``QDQOPT_COMPILE=0`` builds a
pure-Python wheel; without a C compiler the build says so and stays pure Python (``_build/backend.py`` decides).
"""

from __future__ import annotations

import os

from setuptools import setup

#: what mypyc compiles (paths under the project root; a folder means all of its modules): where a run spends its
#: time outside the passes' own logic (docs/architecture.md, "Where the time goes")
COMPILED = [
    "qdqopt/graph",
    "qdqopt/passes/graph_utils.py",
    "qdqopt/passes/qdq_util.py",
    "qdqopt/passes/qdq",
    "qdqopt/passes/transpose_optimization",
    "qdqopt/manager.py",
    "qdqopt/kernels.py",
    "qdqopt/partition.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("QDQOPT_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3", group_name="qdqopt"))


setup(ext_modules=_ext_modules())
