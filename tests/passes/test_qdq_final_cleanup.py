"""QDQFinalCleanupTransformer (``qdqopt/passes/qdq_final_cleanup.py``) against ORT 1.32, live.

Every ``level2_small/cleanup_*`` fixture, at EXTENDED with the default config, with int8 allowed and with
``session.enable_quant_qdq_cleanup=1``, then the transformer by itself: the same trace and model bytes as ORT.
"""

from __future__ import annotations

import pytest

from qdqopt.graph import Graph, Node
from qdqopt.passes import qdq_final_cleanup
from qdqopt.passes.graph_utils import node_produces_graph_output
from qdqopt.reference import run_reference
from tests.conftest import fixture_model
from tests.passes._helpers import knownx
from tests.passes._helpers.level2_small import _fixtures_of, check_fixture_full_extended


@pytest.mark.parametrize("name", _fixtures_of("QDQFinalCleanupTransformer"))
def test_fixture_full_extended(name: str) -> None:
    check_fixture_full_extended(name)


# ------------------------------------------------------------------------------------ issue #12: kept Relus
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("relu_kept_"))
def test_knownx_kept_relu_as_ort(name: str, level: str, config: str) -> None:
    """QDQKeepRemovableActivations: the kept Relu's output a graph output, read twice, or once (the twin)."""
    knownx.assert_exact(name, level, config)


def _dq_q_pairs(name: str) -> int:
    """DQ -> Q edges left in ORT's EXTENDED output for the fixture."""
    out = run_reference(fixture_model(name), "extended").model.graph
    producers = {o: n.op_type for n in out.node for o in n.output}
    return sum(1 for n in out.node if n.op_type == "QuantizeLinear" and producers.get(n.input[0]) == "DequantizeLinear")


def test_knownx_kept_relu_boundary() -> None:
    """The Relu's removal leaves a DQ -> Q pair: ORT removes it when the Q has one consumer (the twin; the transpose
    optimizer already does) and keeps it when the Q has two, QDQFinalCleanupTransformer included."""
    assert _dq_q_pairs("knownx/relu_kept_single") == 0
    for name in ("knownx/relu_kept_graph_output", "knownx/relu_kept_fanout"):
        assert _dq_q_pairs(name) == 1, name
        modified = knownx.ort_modified(name, "extended", "default")
        assert modified is not None and "Level2_RuleBasedTransformer" in modified, name
        assert "QDQFinalCleanupTransformer" not in modified, name


def _any_edges(graph: Graph, second: Node) -> bool:
    """The rule before the fix: a second node with output edges (any number) and no graph output is removable."""
    return bool(graph.output_edges(second)) != node_produces_graph_output(graph, second)


@pytest.mark.parametrize("name", ["knownx/relu_kept_graph_output", "knownx/relu_kept_fanout"])
def test_knownx_kept_relu_single_edge_rule_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a Q of several consumers counted as removable, qdqopt removes the pair ORT keeps: the trace and the
    model differ."""
    monkeypatch.setattr(qdq_final_cleanup, "second_is_removable", _any_edges)
    comp = knownx.compare(name, "extended")
    assert not comp.trace_matches
    assert "GraphTransformer QDQFinalCleanupTransformer modified: 1" in comp.ours_lines
    assert not comp.report.holds("S")


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_final_cleanup_explicit"))
def test_knownx_final_cleanup_explicit_consumer_as_ort(name: str, level: str, config: str) -> None:
    knownx.assert_exact(name, level, config)


@pytest.mark.parametrize("level", ["disable_all", "basic"])
def test_knownx_final_cleanup_implicit_consumer_before_level2(level: str) -> None:
    """Below Level2 ORT creates the session: qdqopt equals it."""
    knownx.assert_exact("knownx/fz_final_cleanup_implicit_consumer", level, "default")


@pytest.mark.parametrize("level", ["extended", "layout", "all"])
def test_knownx_final_cleanup_implicit_consumer_is_refused(level: str) -> None:
    """ORT 1.32 aborts creating this session (``test_fixtures`` checks it in a child, from the fixture's
    ``ort_crashes``); qdqopt refuses the model with a one-line reason where ORT would die, never removes the pair."""
    from qdqopt.api import run
    from qdqopt.errors import ModelError

    with pytest.raises(ModelError, match=r"QDQFinalCleanupTransformer aborts the process .* node 'if' \(If\) reads"):
        run(fixture_model("knownx/fz_final_cleanup_implicit_consumer"), level)
