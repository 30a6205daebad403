"""Shared by the tests of the Gelu-family fusions (``tests/passes/test_gelu_fusion.py``, ``test_fast_gelu_fusion.py``,
``test_bias_gelu_fusion.py``, ``test_quick_gelu_fusion.py``) on the ``gelu/`` fixtures.

Each fixture runs a full session at BASIC, EXTENDED and ALL, as ORT runs it (nothing disabled on either side), with
the default config and ``session.qdqisint8allowed=1``: ORT's saved model byte for byte (tier P, X at least) and
ORT's trace. A model ORT cannot create a session for must fail in qdqopt too. Nothing of ORT's output is stored:
every expectation is a live ORT run.
"""

from __future__ import annotations

import functools

import onnx

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.errors import QdqoptError
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names

LEVELS = ("basic", "extended", "all")
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}


def fixtures(prefix: str) -> list[str]:
    """The ``gelu/`` fixtures whose short name starts with ``prefix``."""
    return [n for n in fixture_names() if n.startswith("gelu/" + prefix)]


@functools.cache
def ort_modified(name: str, level: str, config: str) -> frozenset[str] | None:
    """The transformers ORT's log shows modifying the fixture; None when ORT cannot create the session."""
    try:
        trace = run_reference(fixture_model(name), level, config=CONFIGS[config]).trace
    except QdqoptError:
        return None
    return frozenset(t.name for t in trace if t.modified)


def compare(model: str | onnx.ModelProto, level: str, config: str = "default") -> LevelComparison:
    return compare_level(fixture_model(model) if isinstance(model, str) else model, level, config=CONFIGS[config])


def holds(comp: LevelComparison) -> bool:
    """Tier P (so X) and ORT's trace line for line."""
    return comp.report.holds("P") and comp.report.holds("X") and comp.trace_matches


def differs(model: str, level: str = "extended", config: str = "default") -> bool:
    """The comparison fails: qdqopt's output or trace differs from ORT's, or qdqopt fails where ORT does not (a
    failure of qdqopt where ORT fails too is no difference: a mutation must not pass on any error)."""
    try:
        return not holds(compare(model, level, config))
    except QdqoptError:
        return ort_modified(model, level, config) is not None


def assert_exact(name: str, level: str, config: str) -> None:
    """qdqopt equals ORT on the fixture, or fails where ORT fails."""
    if ort_modified(name, level, config) is None:
        try:
            compare(name, level, config)
        except QdqoptError:
            return
        raise AssertionError("ORT cannot create a session for this model, qdqopt can")
    comp = compare(name, level, config)
    assert comp.trace_matches, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert holds(comp), "\n".join(comp.lines())


def fired(names: list[str], transformer: str) -> list[str]:
    """The fixtures on which ORT runs ``transformer`` with effect at EXTENDED (default config)."""
    return [n for n in names if transformer in (ort_modified(n, "extended", "default") or frozenset())]
