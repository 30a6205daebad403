"""The code stays ruff- and mypy-clean (both come with the dev extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["qdqopt", "fixtures", "tests", "benchmarks", "setup.py", "_build"]


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and not (Path(sys.executable).parent / name).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return [sys.executable, "-m", name]


def test_ruff() -> None:
    proc = subprocess.run([*_tool("ruff"), "check", *TARGETS], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = subprocess.run([*_tool("mypy"), *TARGETS], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
