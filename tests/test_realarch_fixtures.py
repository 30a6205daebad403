"""The real-architecture fixtures (``fixtures.REALARCH``, built by ``fixtures/realarch.py``).

Every one is committed, small, passes ``onnx.checker`` (full check), loads in ONNX Runtime 1.32 CPU at
ORT_DISABLE_ALL (in a child process: a crash there must not take pytest down), and ``qdqopt.optimize(model,
"extended")`` either runs or stops with one of qdqopt's own errors, the one recorded for it in
:data:`KNOWN_ERRORS` (never an internal exception). The set covers every architecture with PT2E and with each
``quantize_static`` setup, and both exporters. Rebuilding needs torch and torchvision (skipped without them).
"""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import onnx
import pytest

import fixtures
import qdqopt
from fixtures.realarch import ARCHS, QUANT_CONFIGS
from qdqopt.errors import QdqoptError
from tests.conftest import assert_committed_sizes, ort_disable_all_failures

ROOT = Path(__file__).resolve().parents[1]
NAMES = list(fixtures.REALARCH)

#: fixture -> the start of the qdqopt error ``optimize(..., "extended")`` stops with today (a fixture that is not
#: listed must optimize). A listed fixture that optimizes passes too: then its entry is stale and can go.
KNOWN_ERRORS: dict[str, str] = {}

MAX_FILE_BYTES = 1_500_000
MAX_TOTAL_BYTES = 40_000_000


def test_registry() -> None:
    assert NAMES, "no real-architecture fixture registered"
    kinds = {name: kind for name, (kind, _) in fixtures.REALARCH.items()}
    assert set(kinds.values()) == {"pt2e", "ortquant"}
    assert not set(NAMES) & set(fixtures.COMMITTED)
    listed = [f.name for f in fixtures.all_fixtures()]
    assert all(name in listed for name in NAMES)
    for arch in ARCHS:
        mine = [n for n in NAMES if n.startswith(f"{arch}_")]
        assert f"{arch}_pt2e" in mine
        assert {n.split("_")[2] for n in mine if "_ortquant_" in n} == set(QUANT_CONFIGS), arch
    exporters = collections.Counter(n.rsplit("_", 1)[1] for n in NAMES if "_ortquant_" in n)
    assert set(exporters) == {"ts13", "ts17", "dynamo"}


def test_files_are_small() -> None:
    assert_committed_sizes(NAMES, MAX_FILE_BYTES, MAX_TOTAL_BYTES)


def test_ort_loads_every_fixture_at_disable_all() -> None:
    """One child process creates an ORT_DISABLE_ALL session for each fixture and reports what failed."""
    assert ort_disable_all_failures([str(fixtures.committed_model_path(name)) for name in NAMES]) == {}


@pytest.mark.parametrize("fixture", NAMES)
def test_checks_and_optimizes(fixture: str) -> None:
    model = fixtures.get(fixture).build()
    onnx.checker.check_model(model, full_check=True)
    try:
        qdqopt.optimize(model, "extended")
    except QdqoptError as exc:
        assert fixture in KNOWN_ERRORS, f"unexpected qdqopt error: {exc}"
        assert str(exc).startswith(KNOWN_ERRORS[fixture]), str(exc)


@pytest.mark.parametrize("fixture", NAMES)
def test_reproducible(fixture: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    if importlib.util.find_spec("torchvision") is None:  # importing it needs fixtures.realarch's workaround
        pytest.skip("torchvision is not installed")
    from fixtures import build

    assert build.serialize(build.builders()[fixture]()) == fixtures.committed_model_path(fixture).read_bytes(), (
        "the committed model differs from a fresh build: rerun `python -m fixtures.build --only realarch`"
    )
