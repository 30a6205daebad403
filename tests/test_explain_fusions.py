"""``qdqopt explain`` covers the transformer fusions (issue #11): for each candidate, fused into what, or which check
refused it, in ORT's words, read from the run's ``fused`` and ``no-match`` events only.

* Where a fusion fires, the candidate's report names the op it became and the new node, which is in the optimized
  model; where it is refused, the report holds the refusal the pass emitted.
* A report is exactly the events: with a pass's ``fused`` event suppressed the candidate shows as refused or not
  at all, with a refusal's text changed the report shows the new text.
* The CLI prints a section per fusion with candidates.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import onnx
import pytest

import qdqopt
from qdqopt import events
from qdqopt.cli import main
from qdqopt.explain import CandidateReport, FusionSection, explain_fusions, fusion_reports
from qdqopt.passes import attention_fusion, layer_norm_fusion
from tests.conftest import fixture_model

#: the LayerNormalization LayerNormFusionL2 makes of the attention fixtures' LayerNorm chain
LN = "mul/LayerNormFusion/"


def _section(sections: list[FusionSection], name: str) -> FusionSection:
    found = [s for s in sections if s.pass_name == name]
    assert len(found) == 1, [s.pass_name for s in sections]
    return found[0]


def _only(section: FusionSection) -> CandidateReport:
    assert len(section.candidates) == 1, section.candidates
    return section.candidates[0]


def _nodes(model: onnx.ModelProto) -> dict[str, str]:
    return {n.name: (f"{n.domain}.{n.op_type}" if n.domain else n.op_type) for n in model.graph.node}


@pytest.mark.parametrize(
    ("fixture", "level", "pass_name", "op"),
    [
        ("attention/bert_basic", "extended", "AttentionFusion", "com.microsoft.Attention"),
        ("attention/distil_basic", "extended", "AttentionFusion", "com.microsoft.Attention"),
        ("attention/gpt_past", "extended", "AttentionFusion", "com.microsoft.Attention"),
        ("attention/clip_basic", "extended", "AttentionFusion", "com.microsoft.MultiHeadAttention"),
        ("layernorm/basic_op17", "basic", "LayerNormFusionL1", "LayerNormalization"),
        ("layernorm/basic_op13", "extended", "LayerNormFusionL2", "LayerNormalization"),
        ("layernorm/rms_op13", "extended", "SimplifiedLayerNormFusion", "SimplifiedLayerNormalization"),
        ("gelu/erf_p1_opset13", "extended", "GeluFusionL2", "com.microsoft.Gelu"),
        ("gelu/fast_f1", "extended", "FastGeluFusion", "com.microsoft.FastGelu"),
        ("gelu/bias_erf", "extended", "BiasGeluFusion", "com.microsoft.BiasGelu"),
        ("gelu/quick_alpha", "extended", "QuickGeluFusion", "com.microsoft.QuickGelu"),
    ],
)
def test_fused_names_the_op_and_node(fixture: str, level: str, pass_name: str, op: str) -> None:
    model = fixture_model(fixture)
    fused = [c for c in _section(explain_fusions(model, level), pass_name).candidates if c.outcome == "fused"]
    assert len(fused) == 1, fused
    report = fused[0]
    assert report.op == op
    optimized = _nodes(qdqopt.optimize(model, level))
    assert report.node is not None and optimized.get(report.node) == op


def test_attention_second_layer_fuses_after_skip_layer_norm() -> None:
    sections = explain_fusions(fixture_model("attention/bert_two_layers"), "extended")
    attention = _section(sections, "AttentionFusion")
    assert [c.outcome for c in attention.candidates] == ["fused", "fused"]
    skip = _section(sections, "SkipLayerNormFusion")
    assert skip.candidates and all(c.op == "com.microsoft.SkipLayerNormalization" for c in skip.candidates)


def _candidate(section: FusionSection, name: str) -> CandidateReport:
    found = [c for c in section.candidates if c.candidate == name]
    assert len(found) == 1, section.candidates
    return found[0]


@pytest.mark.parametrize(
    ("fixture", "level", "pass_name", "candidate", "reason"),
    [
        ("attention/bert_k_perm", "extended", "AttentionFusion", LN, "k_transpose perm attribute not matched"),
        ("attention/bert_mask_one", "extended", "AttentionFusion", LN, "Failed in match input mask subgraph"),
        (
            "attention/bert_k_perm",
            "extended",
            "AttentionFusion",
            "qk_matmul",  # the MobileCLIP form tries every MatMul first, and ORT logs this one's refusal
            "qkv MatMul output count or weight initializer check failed",
        ),
        ("attention/clip_softmax_axis", "extended", "AttentionFusion", "qkv_matmul", "Softmax(axis=-1) not matched"),
        ("attention/gpt_k_perm", "extended", "AttentionFusion", "ln", "CheckNodesInPathK returns false"),
        (
            "layernorm/axes_not_last",
            "basic",
            "LayerNormFusionL1",
            "rm1",
            "ReduceMean axes are not the same trailing axes",
        ),
    ],
)
def test_refused_names_the_check(fixture: str, level: str, pass_name: str, candidate: str, reason: str) -> None:
    report = _candidate(_section(explain_fusions(fixture_model(fixture), level), pass_name), candidate)
    assert report.outcome == "refused" and report.op is None
    assert reason in report.reasons


def test_reports_are_the_events() -> None:
    """fusion_reports is a pure reading of events: the same events, the same reports."""
    log = qdqopt.run(fixture_model("attention/bert_k_perm"), "extended").pipeline.events
    mine = [e for e in log.events if e.pass_name == "AttentionFusion" and e.kind is events.Kind.NO_MATCH]
    assert mine
    expected: dict[str, list[str]] = {}
    for e in mine:
        reasons = expected.setdefault(e.nodes[0], [])
        if e.text not in reasons:
            reasons.append(e.text)
    reports = fusion_reports(log.events, "AttentionFusion")
    assert {r.candidate: list(r.reasons) for r in reports} == expected
    assert [r.candidate for r in reports] == list(expected)
    assert fusion_reports([], "AttentionFusion") == []


def test_without_the_fused_event_nothing_is_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation: the pass still fuses but emits nothing; explain has nothing to say (it keeps no text of its own)."""
    monkeypatch.setattr(attention_fusion, "emit_fused", lambda *args, **kwargs: None)
    section = _section(explain_fusions(fixture_model("attention/bert_basic"), "extended"), "AttentionFusion")
    assert not section.candidates


def test_a_changed_reason_shows_as_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    original = events.emit_no_match

    def reworded(found: events.NoMatch, candidate: str, data: object = None) -> None:
        original(events.NoMatch("reworded: " + found.reason, found.nodes), candidate, data)

    monkeypatch.setattr(layer_norm_fusion, "emit_no_match", reworded)
    report = _only(_section(explain_fusions(fixture_model("layernorm/axes_not_last"), "basic"), "LayerNormFusionL1"))
    assert report.reasons == ("reworded: ReduceMean axes are not the same trailing axes",)


def test_a_fusion_refused_then_fused_keeps_both() -> None:
    """A candidate refused in one application and fused in a later one reads as fused, the refusal kept; a
    refusal repeated in later steps is listed once."""
    kind = events.Kind
    log = [
        events.Event(kind.NO_MATCH, "refused once", "GeluFusionL2", 2, 1, ("div",)),
        events.Event(kind.NO_MATCH, "refused once", "GeluFusionL2", 2, 2, ("div",)),
        events.Event(kind.NO_MATCH, "other pass", "FastGeluFusion", 2, 2, ("div",)),
        events.Event(kind.FUSED, "fused into X", "GeluFusionL2", 2, 3, ("div", "g"), data=events.Fusion("X", "g")),
        events.Event(kind.NO_MATCH, "never", "GeluFusionL2", 2, 3, ("div2",)),
    ]
    assert fusion_reports(log, "GeluFusionL2") == [
        CandidateReport("GeluFusionL2", "div", "fused", "X", "g", ("refused once",)),
        CandidateReport("GeluFusionL2", "div2", "refused", reasons=("never",)),
    ]


def _cli(args: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    return out.getvalue()


def test_cli_prints_fused_and_refused(tmp_path: Path) -> None:
    fused = tmp_path / "bert.onnx"
    onnx.save(fixture_model("attention/bert_basic"), fused)
    text = _cli(["explain", str(fused)])
    assert "AttentionFusion: 1 fused, " in text
    assert f"fused     {LN!r} -> com.microsoft.Attention 'Attention'" in text
    refused = tmp_path / "kperm.onnx"
    onnx.save(fixture_model("attention/bert_k_perm"), refused)
    text = _cli(["explain", str(refused)])
    assert "AttentionFusion: 0 fused, " in text
    assert f"REFUSED   {LN!r}" in text
    assert "- k_transpose perm attribute not matched" in text


def test_cli_basic_level_lists_level1_fusions(tmp_path: Path) -> None:
    path = tmp_path / "ln.onnx"
    onnx.save(fixture_model("layernorm/basic_op17"), path)
    text = _cli(["explain", str(path), "--level", "basic"])
    assert "QDQ node units" not in text  # QDQSelectorActionTransformer runs from EXTENDED on
    assert "LayerNormFusionL1: 1 fused, 0 refused" in text
    assert "-> LayerNormalization 'mul/LayerNormFusion/'" in text
