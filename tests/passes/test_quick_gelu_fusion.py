"""QuickGeluFusion (``qdqopt/passes/quick_gelu_fusion.py``) against ORT 1.32, live.

* Every ``gelu/quick_*`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace.
  SiLU (``x * Sigmoid(x)``) is fused too, with alpha 1.
* Mutations (alpha always 1; the node named ``QuickGelu`` as older sources do) must make the comparison fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from qdqopt.graph import Graph
from qdqopt.passes import TRANSFORMERS, quick_gelu_fusion
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

NAMES = fixtures("quick_")


def test_registered() -> None:
    assert TRANSFORMERS["QuickGeluFusion"] is quick_gelu_fusion.QuickGeluFusion


def test_fires_where_expected() -> None:
    got = fired(NAMES, "QuickGeluFusion")
    assert {"gelu/quick_alpha", "gelu/quick_silu", "gelu/quick_qdq_neg", "gelu/quick_silu_qdq_neg"} <= set(got)
    for refused in ("quick_sigmoid_two_consumers", "quick_other_value", "quick_alpha_vector"):
        assert "gelu/" + refused not in got


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_alpha(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("gelu/quick_alpha", "extended"))
    original = quick_gelu_fusion.QuickGeluFusion._alpha

    def alpha_one(self: quick_gelu_fusion.QuickGeluFusion, *args: object) -> object:
        found = original(self, *args)  # type: ignore[arg-type]
        return None if found is None else (found[0], np.float32(1.0))

    monkeypatch.setattr(quick_gelu_fusion.QuickGeluFusion, "_alpha", alpha_one)
    assert differs("gelu/quick_alpha")


def test_mutation_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("gelu/quick_silu", "extended"))
    original = Graph.generate_node_name

    def old_name(self: Graph, base: str) -> str:
        return original(self, "QuickGelu" if base.endswith("/QuickGeluFusion/") else base)

    monkeypatch.setattr(Graph, "generate_node_name", old_name)
    assert differs("gelu/quick_silu")
