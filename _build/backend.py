"""qdqopt's build backend: setuptools' own, deciding first whether the build compiles (see ``setup.py``).

A wheel compiles unless ``QDQOPT_COMPILE=0`` or no C compiler or Python headers are found (then it is pure Python,
and says so); an editable install never compiles (a compiled module would shadow the ``.py`` being edited).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tomllib
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the hooks this module does not change)


def _compile_requires() -> list[str]:
    """What a compiling build needs: mypyc, which is part of mypy (the version the dev extra pins), and the
    project's dependencies, whose types mypyc's analysis reads (pyproject.toml, read from the project root)."""
    with open("pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    mypy = next(r for r in project["optional-dependencies"]["dev"] if r.split("==")[0].strip() == "mypy")
    return [str(mypy), *(str(r) for r in project["dependencies"])]


def missing_toolchain() -> str | None:
    """What this machine lacks to compile with mypyc (a C compiler, Python's headers), or None."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(headers):
        return f"no Python headers ({headers})"
    return None


def _compiling() -> bool:
    if os.environ.get("QDQOPT_COMPILE") == "0":
        return False
    missing = missing_toolchain()
    if missing is not None:
        print(f"qdqopt: {missing} found: building pure Python (slower)", file=sys.stderr)
        return False
    return True


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = _compile_requires() if _compiling() else []
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    os.environ["QDQOPT_COMPILE"] = "1" if _compiling() else "0"
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    os.environ["QDQOPT_COMPILE"] = "0"
    return str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))
