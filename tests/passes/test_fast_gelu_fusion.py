"""FastGeluFusion (``qdqopt/passes/fast_gelu_fusion.py``) against ORT 1.32, live.

* Every ``gelu/fast_*`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace.
* Mutations (no graph-output check on the final Mul; the ``0.7978845834732056 * x`` node's op not checked) must
  make the comparison fail.
"""

from __future__ import annotations

import pytest

from qdqopt.passes import TRANSFORMERS, fast_gelu_fusion
from qdqopt.passes.graph_utils import is_supported_op
from tests.passes._helpers.gelu_family import (
    CONFIGS,
    LEVELS,
    assert_exact,
    compare,
    differs,
    fired,
    fixtures,
    holds,
)

NAMES = fixtures("fast_")


def test_registered() -> None:
    assert TRANSFORMERS["FastGeluFusion"] is fast_gelu_fusion.FastGeluFusion


def test_fires_where_expected() -> None:
    got = fired(NAMES, "FastGeluFusion")
    assert len(got) >= 6
    for refused in (
        "fast_result_is_output",
        "fast_f1_k_is_add",
        "fast_f2_exponent_2",
        "fast_f1_double",
        "fast_f2_cast",
    ):
        assert "gelu/" + refused not in got


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_graph_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT refuses a pattern whose result is a graph output (the final Mul is checked for graph outputs too)."""
    assert holds(compare("gelu/fast_result_is_output", "extended"))
    monkeypatch.setattr(fast_gelu_fusion, "node_produces_graph_output", lambda graph, node: False)
    assert differs("gelu/fast_result_is_output")


def test_mutation_k_op_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.32 checks that the node multiplying x by 0.7978845834732056 is a Mul."""
    assert holds(compare("gelu/fast_f1_k_is_add", "extended"))

    def add_is_mul(node: object, op_type: str, versions: object, domain: str = "") -> bool:
        if op_type == "Mul" and getattr(node, "op_type", "") == "Add":
            return True
        return is_supported_op(node, op_type, versions, domain)  # type: ignore[arg-type]

    monkeypatch.setattr(fast_gelu_fusion, "is_supported_op", add_is_mul)
    assert differs("gelu/fast_f1_k_is_add")
