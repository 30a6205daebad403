"""MatMulScaleFusion (``qdqopt/passes/matmul_scale_fusion.py``) against ORT 1.32, live.

* Every ``matmulscale/`` fixture, both configs (default, ``session.qdqisint8allowed=1``): EXTENDED as ORT runs and
  the pass alone where it fires, tier P and ORT's trace; the attributes of a fused FusedMatMul.
* Mutations (the trailing scale's reciprocal not taken, the scale's rank check dropped) must make the comparison
  fail.

The corpus models where it fires: ``tests/test_matmul_scale_nbits.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.handbuilt import matmulscale
from qdqopt.passes import matmul_scale_fusion
from tests.conftest import patched
from tests.passes._helpers.matmul_scale_nbits import (
    CONFIGS,
    FIXTURES,
    LAYOUT_WORK,
    _assert_p,
    _compare,
    check_fixture_extended_and_alone,
)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", [case.name for case in matmulscale.GROUP.cases])
def test_fixture_extended_and_alone(name: str, config: str) -> None:
    check_fixture_extended_and_alone(name, config)


def test_fused_matmul_attributes() -> None:
    """A trailing Div by 8 after an existing FusedMatMul(alpha 2): alpha 0.25 in its old place, name and domain."""
    model = FIXTURES["matmulscale/fusedmatmul_alpha"]()
    result = _compare(model, {}, LAYOUT_WORK)
    _assert_p(result, "fusedmatmul_alpha")
    assert result.ours is not None
    fused = [n for n in result.ours.graph.node if n.op_type == "FusedMatMul"]
    assert len(fused) == 1
    assert fused[0].name == "fmm/MatMulScaleFusion/" and fused[0].domain == "com.microsoft"
    alpha = next(a for a in fused[0].attribute if a.name == "alpha")
    assert alpha.f == pytest.approx(0.25)


# ------------------------------------------------------------------------------------------------- mutations
def test_mutation_div_not_reciprocal_fails() -> None:
    """A Div treated like a Mul (scale = divisor, not 1/divisor) must break tier P."""
    original = matmul_scale_fusion._scale_from_node

    def wrong(graph, node):  # type: ignore[no-untyped-def]
        found = original(graph, node)
        if found is not None and node.op_type == "Div":
            return np.float32(1.0) / found[0], found[1]
        return found

    with patched(matmul_scale_fusion, "_scale_from_node", wrong):
        result = _compare(FIXTURES["matmulscale/div_after"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P")


def test_mutation_scale_rank_check_dropped_fails() -> None:
    """Accepting a scale whose rank exceeds the other input's must make a not-fused case differ."""
    original = matmul_scale_fusion._scalar_constant

    def lax(graph, name, max_rank):  # type: ignore[no-untyped-def]
        return original(graph, name, 99)

    with patched(matmul_scale_fusion, "_scalar_constant", lax):
        result = _compare(FIXTURES["matmulscale/mul_after_rank_too_big"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P") or result.ours_lines != result.ort_lines


def test_mutation_shapes_without_constant_data_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT's Resolve reads a Reshape's constant shape: read the NodeArg shapes without that data (``View.PASS``)
    and the leading Div of DistilBERT's q (Reshape-5 -> Div -> MatMul) is missed."""
    from qdqopt.graph import Graph, View

    original = Graph.shape

    def without_data(self, value, *, view=View.PASS, as_written=False):  # type: ignore[no-untyped-def]
        producer = self.producer(value)
        if producer is not None and producer.op_type == "Reshape":  # as if the Reshape's constant were not read
            return None
        return original(self, value, view=view, as_written=as_written)

    result = _compare(FIXTURES["matmulscale/div_before_reshaped"](), {}, LAYOUT_WORK)
    _assert_p(result, "div_before_reshaped")
    monkeypatch.setattr(Graph, "shape", without_data)
    result = _compare(FIXTURES["matmulscale/div_before_reshaped"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P")
