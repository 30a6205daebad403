"""One channel for every why (issue #10): refusals and outcomes are events of the run, and explain reads only them.

* A selector's refusal, a conversion-table check's and a transpose handler's are ``no-match`` events of any run (no
  explain involved), with the candidate's name first and the reason in ORT's words where ORT has them; units fused
  or dropped, NHWC conversions and Transpose pushes are events too.
* These kinds are qdqopt's own: never among the lines compared with ORT's VERBOSE log, never printed by ``trace
  --verbose`` unless ``--why`` asks for them.
* ``explain`` and ``explain --level layout`` are exactly the events of the pass's first application in a plain
  run, read back; a reason the events do not carry never shows, and one they carry always does.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from fixtures.handbuilt import selector
from qdqopt import events
from qdqopt.api import run
from qdqopt.cli import example_model, main
from qdqopt.events import Kind, NoMatch, Unit
from qdqopt.explain import FUSION_PASS, NHWC_PASS, explain, explain_layout, layout_reports
from qdqopt.graph import load_model
from qdqopt.passes import qdq_selector_action
from qdqopt.passes.qdq import selectors
from qdqopt.passes.qdq_selector_action import unit_reports
from qdqopt.passes.transpose_optimization.context import OptimizerCtx, PushEvent
from tests.conftest import fixture_model, patched

#: ORT's own status message (``NodeGroup::CanCreateNodeGroup``)
BOTH_CONSUMERS = (
    "QDQ node group cannot have an output from the target node being consumed by a Q node and a non-Q node. "
    "target node: {}"
)


@functools.cache
def _q_and_float_consumer() -> tuple[onnx.ModelProto, str]:
    """DQ -> Sigmoid -> (Q, Relu): the Sigmoid's output feeds a Q and a float Relu (a graph output)."""
    b = selector._B()
    x = b.input([2, 4], np.uint8)
    (t,) = b.op("Sigmoid", [x])
    b.output(t, np.uint8)
    (r,) = b.op("Relu", [t])
    b.output(r)
    return b.build(), next(n.name for n in b.nodes if n.op_type == "Sigmoid")


def _first_application(log: events.EventLog, name: str) -> list[events.Event]:
    """The events of the first application of pass ``name`` in a run's log."""
    mine = [e for e in log.events if e.pass_name == name]
    assert mine, f"{name} did not run"
    first = (mine[0].level, mine[0].step)
    return [e for e in mine if (e.level, e.step) == first]


def _units(reports: list[qdq_selector_action.UnitReport]) -> list[tuple[object, ...]]:
    return [(u.target, u.op_type, u.rule, u.outcome, u.result_op, u.dq_nodes, u.q_nodes, u.reasons) for u in reports]


# ------------------------------------------------------------------------------------- refusals are run events
def test_a_selector_refusal_is_an_event_of_a_plain_run() -> None:
    model, sigmoid = _q_and_float_consumer()
    log = run(model, "extended").pipeline.events
    refusals = [e for e in log.of_kind(Kind.NO_MATCH, pass_name=FUSION_PASS) if e.nodes[0] == sigmoid]
    assert refusals, [str(e) for e in log.of_kind(Kind.NO_MATCH)]
    event = refusals[0]
    assert event.text == BOTH_CONSUMERS.format(sigmoid)
    assert (event.level, event.step) == (2, 1)
    assert isinstance(event.data, Unit) and event.data.rule == "1DQ" and event.data.target == sigmoid
    assert len(event.data.dq_nodes) == 1 and len(event.data.q_nodes) == 1
    assert event.text not in run(model, "extended").pipeline.verbose_lines()


def test_a_version_refusal_is_an_event() -> None:
    log = run(fixture_model("selector/maxpool11"), "extended").pipeline.events
    texts = [(e.nodes[0], e.text) for e in log.of_kind(Kind.NO_MATCH, pass_name=FUSION_PASS)]
    assert ("MaxPool_9", "MaxPool-11 is not in versions [12, 22]") in texts


def test_selectors_return_no_match_with_the_nodes_named() -> None:
    """On the unoptimized fixture (EnsureUniqueDQ has not run), the Sigmoid's DQ is a graph output."""
    graph = load_model(fixture_model("selector/graph_output_dq")).graph
    sigmoid = next(n for n in graph.nodes() if n.op_type == "Sigmoid")
    dq = graph.producer(sigmoid.inputs[0])
    assert dq is not None
    found = selectors.UnarySelector().select(selectors.Ctx(graph, False), sigmoid)
    assert found == NoMatch(
        "QDQ node group cannot have DQ node that produces a graph output. "
        f"DQ node: {dq.name}, target node: {sigmoid.name}",
        (dq.name,),
    )


def test_every_reason_checked_together_is_an_event() -> None:
    """The Conv's type checks are reported together: each one is an event, in ORT's check order."""
    log = run(example_model(), "extended").pipeline.events
    first = _first_application(log, FUSION_PASS)
    conv = [e.text for e in first if e.kind is Kind.NO_MATCH and e.nodes[0] == "node_conv2d_1"]
    assert conv == [
        "input and output types differ (int8 vs uint8)",
        "int8 activations not allowed (session.qdqisint8allowed=0)",
    ]


def test_units_fused_and_dropped_are_events() -> None:
    first = _first_application(run(example_model(), "extended").pipeline.events, FUSION_PASS)
    fused = {e.nodes[0]: e.data for e in first if e.kind is Kind.FUSED}
    dropped = {e.nodes[0]: e.data for e in first if e.kind is Kind.DROPPED}
    assert isinstance(fused["node_linear"], Unit) and fused["node_linear"].result_op == "com.microsoft.QGemm"
    assert set(dropped) == {"node_max_pool2d_1", "node_view"}
    # the Matched line ORT logs comes right before the unit's outcome
    matched = [i for i, e in enumerate(first) if e.kind is Kind.MATCHED]
    assert all(first[i + 1].kind in (Kind.FUSED, Kind.DROPPED) for i in matched)


def test_layout_refusals_are_events_of_a_plain_run() -> None:
    model = fixture_model("nhwc/maxpool_float")
    log = run(model, "layout", disabled=["NchwcTransformer"]).pipeline.events
    first = _first_application(log, NHWC_PASS)
    mine = [e for e in first if e.kind is Kind.NO_MATCH and e.nodes[0] == "p1_maxpool"]
    assert [e.text for e in mine][-1] == "its output is not uint8/int8 (a float MaxPool stays NCHW)"
    assert all(isinstance(e.data, PushEvent) and e.data.reason == e.text for e in mine)
    assert {e.nodes[0] for e in first if e.kind is Kind.CONVERTED} == {"c1_conv", "c2_conv"}


def test_no_events_outside_a_run() -> None:
    graph = load_model(fixture_model("nhwc/conv_u8")).graph
    ctx = OptimizerCtx(graph, 21, "CPUExecutionProvider", "CPUExecutionProvider")
    assert ctx.events is None and events.active() is None
    assert ctx.refuse(next(iter(graph.nodes())), "nothing records this") is False


# ----------------------------------------------------------------------------------- never compared with ORT
def test_own_kinds_are_left_out_of_the_ort_lines() -> None:
    pipeline = run(example_model(), "all").pipeline
    kinds = {e.kind for e in pipeline.events.events}
    assert kinds >= events.QDQOPT_ONLY, events.QDQOPT_ONLY - kinds
    assert all(not k.ort and k.severity == "Q" for k in events.QDQOPT_ONLY)
    assert pipeline.verbose_lines() == [e.text for e in pipeline.events.events if e.kind.ort and not e.plugin]
    assert pipeline.events.ort_events() == [e for e in pipeline.events.events if e.ort]
    assert not any(e.kind in events.QDQOPT_ONLY for e in pipeline.events.ort_events())


def test_trace_verbose_prints_own_events_only_with_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(example_model()), "--level", "extended", "--verbose"]) == 0
    plain = capsys.readouterr().out
    assert "  Q " not in plain and "mixed input types" not in plain
    assert main(["trace", str(example_model()), "--level", "extended", "--verbose", "--why"]) == 0
    why = capsys.readouterr().out
    assert "  Q [no-match] QDQSelectorActionTransformer 'node_add': mixed input types (uint8 and int8)" in why
    assert "  Q [fused] QDQSelectorActionTransformer 'node_linear': " in why
    assert [line for line in why.splitlines() if not line.startswith("  Q ")] == plain.splitlines()
    assert main(["trace", str(example_model()), "--why"]) == 2
    assert "--why only applies with --verbose" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ explain reads the events
@pytest.mark.parametrize("config", [{}, {"session.qdqisint8allowed": "1"}], ids=["default", "int8"])
def test_explain_is_the_events_of_the_first_application(config: dict[str, str]) -> None:
    log = run(example_model(), "extended", config=config).pipeline.events
    from_run = unit_reports(_first_application(log, FUSION_PASS))
    assert _units(explain(example_model(), config=config)) == _units(from_run)
    assert any(u.outcome in ("fused", "dropped") for u in from_run)


def test_explain_shows_what_the_events_say_and_nothing_else() -> None:
    def refuse(self: object, *args: object) -> NoMatch:
        return NoMatch("a reason only the events carry")

    with patched(selectors.BinarySelector, "check", refuse):
        (add,) = [u for u in explain(example_model()) if u.target == "node_add"]
    assert add.outcome == "rejected" and add.reasons == ["a reason only the events carry"]
    # without the no-match events, no refused unit is left to explain
    with patched(qdq_selector_action, "emit_no_match", lambda *args: None):
        reports = explain(example_model())
    assert reports and all(u.outcome in ("fused", "dropped") for u in reports)
    assert all(not u.reasons for u in reports)


def test_explain_layout_is_the_events_of_the_nhwc_pass() -> None:
    model = fixture_model("nhwc/maxpool_float")
    log = run(model, "layout", disabled=["NchwcTransformer"]).pipeline.events
    from_run = layout_reports(_first_application(log, NHWC_PASS))
    assert explain_layout(model, "layout", disabled=["NchwcTransformer"]) == from_run
    pool = next(r for r in from_run if r.name == "p1_maxpool")
    assert pool.outcome == "nchw" and pool.reasons[-1] == pool.detail
    assert pool.reasons[0].startswith("float MaxPool: the table only has fp16 pools")


def test_a_pool_no_transpose_reached(capsys: pytest.CaptureFixture[str]) -> None:
    """A u8 MaxPool goes NHWC only through a pushed Transpose: when none reaches it, the pass says so last."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "squeezenet_pt2e.onnx"
    assert main(["explain", str(path), "--level", "layout"]) == 0
    out = capsys.readouterr().out
    assert "(MaxPool) stays: no channels-last Transpose reached it" in out
    assert "          earlier: uint8 MaxPool: the table only has fp16 pools (arm64)" in out
