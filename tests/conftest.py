"""Shared test helpers: where the shared corpus is, which of its models ORT accepts, and fixture models on disk."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import subprocess
import sys
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import onnx
import pytest

from fixtures import MODELS_DIR, REALARCH, TRANSFORMERS, all_fixtures, committed_model_path
from qdqopt.errors import ReferenceError
from qdqopt.reference import check_accepted

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


def load_file_module(path: Path, name: str) -> ModuleType:
    """The module in ``path`` (a script outside the package: benchmarks/, _build/), imported as ``name`` and
    registered in ``sys.modules`` (dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def corpus_models() -> list[Path]:
    """Every .onnx file of ../shared/corpus (empty when the corpus is not beside the checkout)."""
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.rglob("*.onnx"))


def corpus_id(path: Path) -> str:
    return str(path.relative_to(CORPUS))


@functools.cache
def ort_accepts(path: Path) -> bool:
    """Whether ORT 1.32's CPU EP creates a session for the model (computed live, once per model)."""
    try:
        check_accepted(path)
    except ReferenceError:
        return False
    return True


def corpus_params() -> list[object]:
    models = corpus_models()
    if not models:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"shared corpus not found at {CORPUS}"))]
    return [pytest.param(p, id=corpus_id(p)) for p in models]


@functools.cache
def fixture_model(name: str) -> onnx.ModelProto:
    for fixture in all_fixtures():
        if fixture.name == name:
            return fixture.build()
    raise KeyError(name)


def fixture_names() -> list[str]:
    return [f.name for f in all_fixtures()]


# The real-architecture fixtures (fixtures.REALARCH) and the transformer fixtures (fixtures.TRANSFORMERS) have
# hundreds of nodes: the per-fixture sweeps (every test parametrized by a fixture ``name``, or by the ``path`` of its
# file in fixtures/models) run them all only with QDQOPT_FULL=1, and otherwise a seeded sample of each group; the
# others are collected, marked slow and skipped with the reasons below (see pytest_collection_modifyitems).
FULL = os.environ.get("QDQOPT_FULL") == "1"


@functools.cache
def realarch_sample() -> frozenset[str]:
    """The real-architecture fixtures the sweeps run without QDQOPT_FULL=1: one PT2E fixture and one of each
    quantize_static setup (u8u8, u8s8, s8s8), drawn with a fixed seed from the sorted names."""
    if FULL:
        return frozenset(REALARCH)
    groups: dict[str, list[str]] = {}
    for name in sorted(REALARCH):
        groups.setdefault("pt2e" if name.endswith("_pt2e") else name.split("_")[2], []).append(name)
    rng = random.Random(9)
    return frozenset(rng.choice(names) for _, names in sorted(groups.items()))


@functools.cache
def transformers_sample() -> frozenset[str]:
    """The transformer fixtures the sweeps run without QDQOPT_FULL=1: one of each kind (float export,
    quantize_static QDQ, quantize_dynamic, MatMulNBits), drawn with a fixed seed from the sorted names."""
    if FULL:
        return frozenset(TRANSFORMERS)
    groups: dict[str, list[str]] = {}
    for name in sorted(TRANSFORMERS):
        groups.setdefault(TRANSFORMERS[name][0], []).append(name)
    rng = random.Random(11)
    return frozenset(rng.choice(names) for _, names in sorted(groups.items()))


#: one in this many of each hand-built group (``group/case``) runs in the level-wide sweeps in CI (the groups of the
#: passes added for issue #11 on are also run, as ORT runs, at BASIC, EXTENDED and ALL by their pass's own tests in
#: tests/passes/); QDQOPT_FULL=1 runs every one
HANDBUILT_SHARE = 8


@functools.cache
def handbuilt_sample() -> frozenset[str]:
    """The hand-built fixtures the level-wide sweeps (:data:`_SWEEPS`) run without QDQOPT_FULL=1: a seeded eighth of
    each group (at least one), so that every group keeps its place in every sweep."""
    names = [f.name for f in all_fixtures() if f.kind == "handbuilt"]
    if FULL:
        return frozenset(names)
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        groups.setdefault(name.split("/")[0], []).append(name)
    rng = random.Random(13)
    chosen: set[str] = set()
    for _, members in sorted(groups.items()):
        chosen.update(rng.sample(members, max(1, len(members) // HANDBUILT_SHARE)))
    return frozenset(chosen)


#: one in this many corpus models runs in each corpus sweep in CI (QDQOPT_FULL=1: all of them)
CORPUS_SHARE = 2
#: the corpus's real MobileNetV3, always in the sample
_ALWAYS = "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"


@functools.cache
def corpus_sample(module: str = "") -> frozenset[str]:
    """The corpus models (by :func:`corpus_id`) a corpus sweep runs without QDQOPT_FULL=1: a seeded share of each
    corpus folder (at least one) and the real MobileNetV3. The level-wide sweeps share one sample (``module`` empty);
    every other test module sweeping the corpus draws its own, seeded by its name, so that CI covers more models."""
    ids = [corpus_id(p) for p in corpus_models()]
    if FULL:
        return frozenset(ids)
    folders: dict[str, list[str]] = {}
    for key in ids:
        folders.setdefault(key.split("/")[0], []).append(key)
    rng = random.Random(zlib.crc32(module.encode()) if module else 17)
    chosen = {key for key in ids if key == _ALWAYS}
    for _, members in sorted(folders.items()):
        chosen.update(rng.sample(members, max(1, len(members) // CORPUS_SHARE)))
    return frozenset(chosen)


# Sweep tests of the sampled transformer fixtures that fail today: (test function, fixture) -> why, where every
# parametrization of that function on that fixture fails (those passing on one config or level are listed by their
# full test name instead). The marks are strict: a test that starts passing fails as XPASS, and its line must go. The
# causes are in docs/ORT_FINDINGS.md ("Transformer fixtures"); `python -m benchmarks.transformer_table` measures all
# of them. With QDQOPT_FULL=1 the fixtures outside the sample run unmarked. None fails since issue #11's classes
# (the knownt/ fixtures) were fixed.
_SWEEPS = {"test_disable_all", "test_basic", "test_extended", "test_whole_levels"}
_TRANSFORMER_XFAIL: dict[tuple[str, str], str] = {}


def _transformer_xfail(item: pytest.Item, name: str) -> str | None:
    function = getattr(item, "originalname", item.name)
    return _TRANSFORMER_XFAIL.get((item.name, name)) or _TRANSFORMER_XFAIL.get((function, name))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    sample = realarch_sample()
    transformers = transformers_sample()
    handbuilt = handbuilt_sample()
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        name, path = params.get("name"), params.get("path")
        if isinstance(path, Path) and path.parent == MODELS_DIR:
            name = path.stem
        if isinstance(name, str) and name in REALARCH and name not in sample:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.skip(reason="real-architecture fixture outside the CI sample (QDQOPT_FULL=1)"))
        module = item.path.stem
        if (
            isinstance(path, Path)
            and CORPUS in path.parents
            and corpus_id(path) not in corpus_sample("" if module in _SWEEPS else module)
        ):
            item.add_marker(pytest.mark.slow)
            item.add_marker(
                pytest.mark.skip(reason="corpus model outside this sweep's seeded CI sample (QDQOPT_FULL=1 runs it)")
            )
        if isinstance(name, str) and "/" in name and item.path.stem in _SWEEPS and name not in handbuilt:
            item.add_marker(pytest.mark.slow)
            item.add_marker(
                pytest.mark.skip(
                    reason="hand-built fixture outside the level-wide sweeps' seeded CI sample (QDQOPT_FULL=1 runs it)"
                )
            )
        if isinstance(name, str) and name in TRANSFORMERS and name not in transformers:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.skip(reason="transformer fixture outside the CI sample (QDQOPT_FULL=1)"))
        elif (
            isinstance(name, str) and name in TRANSFORMERS and item.path.stem in {*_SWEEPS, "test_qdq_selector_action"}
        ):
            why = _transformer_xfail(item, name)
            if why is not None:
                item.add_marker(pytest.mark.xfail(reason=why, strict=True))


def final_reorder_outputs(model: onnx.ModelProto | None) -> int:
    """How many ReorderOutputs NchwcTransformer made at its end (a Transpose to NHWC gives ``channels_last=1``
    ones, made in a fixed order), subgraphs included."""
    if model is None:
        return 0
    count = 0
    pending = [model.graph]
    while pending:
        g = pending.pop()
        for n in g.node:
            if n.op_type == "ReorderOutput" and not any(a.name == "channels_last" and a.i for a in n.attribute):
                count += 1
            pending.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    return count


@contextmanager
def patched(module: object, name: str, replacement: object) -> Iterator[None]:
    """``module.name = replacement`` for the ``with`` block (mutation tests outside a pytest fixture)."""
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


@pytest.fixture(autouse=True)
def _quiet_warnings() -> None:
    warnings.simplefilter("default")


@functools.cache
def _crashing_fixtures() -> frozenset[str]:
    return frozenset(f.name for f in all_fixtures() if f.ort_crashes)


@pytest.fixture(autouse=True)
def _ort_in_a_child_for_crashing_fixtures(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test parametrized with a fixture that ORT 1.32 crashes on at some level (``ort_crashes``) creates its ORT
    sessions in a forked child (as the CLI always does): ORT's abort then ends the child and reads as a
    ``ReferenceError`` ("ONNX Runtime crashed"), which every sweep treats as ORT failing the session, instead of
    ending the test process."""
    callspec = getattr(request.node, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    if not any(isinstance(v, str) and v in _crashing_fixtures() for v in values):
        yield
        return
    from qdqopt import reference

    before = reference.in_child_now()
    reference.sessions_in_child()
    try:
        yield
    finally:
        reference.sessions_in_child(before)


_ORT_LOAD_SCRIPT = """\
import json, sys, onnxruntime as ort
failed = {}
for path in json.loads(sys.stdin.read()):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
    except Exception as exc:
        failed[path] = str(exc)[:300]
print(json.dumps(failed))
"""


def ort_disable_all_failures(paths: list[str]) -> dict[str, str]:
    """One child process creates an ORT_DISABLE_ALL session for each model (a crash there must not take pytest
    down); returns path -> ORT's message for those it refused."""
    r = subprocess.run(
        [sys.executable, "-c", _ORT_LOAD_SCRIPT], input=json.dumps(paths), capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, f"ORT crashed: {r.returncode} {r.stderr[-500:]}"
    failed: dict[str, str] = json.loads(r.stdout)
    return failed


def assert_committed_sizes(names: list[str], max_file: int, max_total: int) -> None:
    """Each committed fixture file is under ``max_file`` bytes and all of them under ``max_total``."""
    sizes = {name: committed_model_path(name).stat().st_size for name in names}
    assert not {name: size for name, size in sizes.items() if size >= max_file}
    assert sum(sizes.values()) < max_total
