"""GeluFusionL1 / GeluFusionL2 (``qdqopt/passes/gelu_fusion.py``) against ORT 1.32, live.

* Every ``gelu/erf_*`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace
  (a model ORT cannot create a session for must fail in qdqopt too). Below opset 20 the Level2 instance fuses into
  ``com.microsoft.Gelu``; from opset 20 the Level1 instance fuses into ONNX's Gelu (float16: then inlined).
* Mutations (the Level1 instance working below opset 20 too; com.microsoft Gelu at opset 20; pattern 2's refusal of
  an x made by a Mul lifted) must make the comparison fail.
"""

from __future__ import annotations

import pytest

from qdqopt.graph import Graph
from qdqopt.passes import TRANSFORMERS, gelu_fusion
from qdqopt.passes.graph_utils import first_parent_by_type
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

NAMES = fixtures("erf_")


def test_registered() -> None:
    assert TRANSFORMERS["GeluFusionL1"] is gelu_fusion.GeluFusionL1
    assert TRANSFORMERS["GeluFusionL2"] is gelu_fusion.GeluFusionL2


def test_fires_where_expected() -> None:
    assert len(fired(NAMES, "GeluFusionL2")) >= 10
    assert len(fired(NAMES, "GeluFusionL1")) >= 4
    for refused in ("erf_wrong_sqrt2", "erf_extra_consumer", "erf_graph_output_middle", "erf_root_from_mul"):
        assert "gelu/" + refused not in fired(NAMES, "GeluFusionL2")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_opset_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX's Gelu appears at opset 20: with the gate at 21 the opset-20 model is fused at Level2 instead."""
    assert holds(compare("gelu/erf_p1_opset20", "extended"))
    monkeypatch.setattr(gelu_fusion, "ONNX_GELU_OPSET", 21)
    assert differs("gelu/erf_p1_opset20")


def test_mutation_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below opset 20 the Gelu is com.microsoft's."""
    assert holds(compare("gelu/erf_p2_opset17", "extended"))
    monkeypatch.setattr(gelu_fusion, "MS_DOMAIN", "")
    assert differs("gelu/erf_p2_opset17")


def test_mutation_first_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT takes the last Mul's first Mul producer as pattern 1's 0.5 Mul, even when it is x's producer."""
    assert holds(compare("gelu/erf_root_from_mul", "extended"))

    def never_x_producer(graph: object, node: object, op_type: str) -> object:
        found = first_parent_by_type(graph, node, op_type)  # type: ignore[arg-type]
        return None if found is not None and found.name == "pre" else found

    monkeypatch.setattr(gelu_fusion, "first_parent_by_type", never_x_producer)
    assert differs("gelu/erf_root_from_mul")


def test_mutation_dead_value_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value_info entry whose producer GeluFusion removed is saved with the type the last Resolve gave it (which
    knew the Reshape's shape once EliminateIdentity made it an initializer), not the load-time one."""
    assert holds(compare("gelu/erf_value_info_after_identity", "extended"))
    monkeypatch.setattr(Graph, "_record_died", lambda self, node, only=None: None)
    assert differs("gelu/erf_value_info_after_identity")
