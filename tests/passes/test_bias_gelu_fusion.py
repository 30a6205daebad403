"""BiasGeluFusion (``qdqopt/passes/bias_gelu_fusion.py``) against ORT 1.32, live.

* Every ``gelu/bias_*`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace.
* Mutations (ONNX's Gelu not taken; the bias put first) must make the comparison fail.
"""

from __future__ import annotations

import pytest

from qdqopt.graph import Graph, Node, inference
from qdqopt.passes import TRANSFORMERS, bias_gelu_fusion
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

NAMES = fixtures("bias_")


def test_registered() -> None:
    assert TRANSFORMERS["BiasGeluFusion"] is bias_gelu_fusion.BiasGeluFusion


def test_fires_where_expected() -> None:
    got = fired(NAMES, "BiasGeluFusion")
    assert len(got) >= 6
    for refused in ("bias_2d", "bias_add_output", "bias_fast_has_bias"):
        assert "gelu/" + refused not in got


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_onnx_gelu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("gelu/bias_onnx_gelu", "extended"))

    def no_onnx_gelu(node: Node, op_type: str, versions: object, domain: str = "") -> bool:
        if op_type == "Gelu" and domain == "":
            return False
        return is_supported_op(node, op_type, versions, domain)  # type: ignore[arg-type]

    monkeypatch.setattr(bias_gelu_fusion, "is_supported_op", no_onnx_gelu)
    assert differs("gelu/bias_onnx_gelu")


def test_mutation_input_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused node reads (X, B) whichever side of the Add the bias was on."""
    assert holds(compare("gelu/bias_first_erf", "extended"))
    original = Graph.add_node

    def reversed_inputs(self: Graph, name: str, op_type: str, inputs: list[str], *args: object, **kw: object) -> Node:
        if op_type == "BiasGelu":
            inputs = list(reversed(inputs))
        return original(self, name, op_type, inputs, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", reversed_inputs)
    assert differs("gelu/bias_first_erf")


def test_mutation_resolve_without_initializer_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolve's inference reads a constant initializer's data (a Reshape's shape): without it the Add's input has no
    shape and BiasGelu is not fused."""
    assert holds(compare("gelu/bias_after_reshape", "extended"))
    monkeypatch.setattr(inference, "data_given", lambda graph, name, tensor: False)
    assert differs("gelu/bias_after_reshape")
