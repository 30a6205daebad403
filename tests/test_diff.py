"""The differ: each tier fails on the kind of difference it is about, and names it; and ``compare_level``'s two
modes: ORT as a user runs it (the default: what qdqopt lacks runs in ORT only, and the report names it) and
isolation (what qdqopt lacks or declines disabled on both sides, and every report says so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qdqopt.compare import AS_RUN, ISOLATION, compare_level
from qdqopt.diff import compare
from qdqopt.errors import UsageError
from qdqopt.passes import TRANSFORMERS
from tests.conftest import fixture_model


def _model(*, names: tuple[str, str] = ("a", "b"), weight: float = 2.0, order: bool = True) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Mul", ["x", "w"], [names[0]], name="mul"),
        helper.make_node("Sigmoid", [names[0]], [names[1]], name="sig"),
        helper.make_node("Add", [names[1], "x"], ["y"], name="add"),
    ]
    if not order:
        nodes = [nodes[0], nodes[1], nodes[2]][::-1]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((3,), weight, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_identical_models_hold_every_tier() -> None:
    report = compare(_model(), _model())
    assert report.tier == "P" and report.holds("P")
    assert "N" in report.implied  # S holds, so the models were not run


def test_renamed_tensor_breaks_x_not_s() -> None:
    report = compare(_model(names=("a", "renamed")), _model())
    assert report.holds("S") and not report.holds("X")
    assert any("'renamed'" in str(d) and d.tier == "X" for d in report.differences)


def test_node_order_breaks_x() -> None:
    report = compare(_model(order=False), _model())
    assert report.holds("S") and not report.holds("X")
    assert any(d.where.startswith("node #0") for d in report.differences)


def test_node_doc_string_breaks_x_not_s() -> None:
    """A node's doc_string is part of tier X (ORT keeps it on an untouched node): only X names it."""
    ours = _model()
    ours.graph.node[1].doc_string = "kept by ORT"
    report = compare(ours, _model())
    assert report.holds("S") and not report.holds("X")
    assert any(d.tier == "X" and "doc_string 'kept by ORT'" in d.what for d in report.differences)
    assert compare(ours, ours).holds("X")


def test_changed_initializer_breaks_s_and_n() -> None:
    report = compare(_model(weight=3.0), _model())
    assert report.verdict["S"] is False and report.verdict["N"] is False
    assert "N" not in report.implied
    assert any(d.tier == "N" and "values differ" in d.what for d in report.differences)
    assert report.tier == "-"


def test_attribute_order_breaks_only_p() -> None:
    ours, ref = _model(), _model()
    for model, attrs in ((ours, ("alpha", "beta")), (ref, ("beta", "alpha"))):
        gemm_attrs = [helper.make_attribute(a, 1.0) for a in attrs]
        node = helper.make_node("Gemm", ["x", "x2"], ["g"], name="gemm")
        node.attribute.extend(gemm_attrs)
        model.graph.node.append(node)
        model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 2]))
        model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 2]))
    report = compare(ours, ref)
    assert report.holds("X") and not report.holds("P")
    assert any("attribute order" in d.what for d in report.differences)


# ------------------------------------------------------------------------- compare_level: as ORT runs vs isolated
CNN = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tinyconvnet_ortquant_u8s8.onnx"
NHWC = "NhwcTransformer"
ISOLATION_TAIL = "disabled on both sides (isolation mode; not a fidelity result)"


@pytest.fixture
def without_nhwc(monkeypatch: pytest.MonkeyPatch) -> None:
    """qdqopt without NhwcTransformer, as it was before issue 9 (ORT's NhwcTransformer still runs)."""
    monkeypatch.delitem(TRANSFORMERS, NHWC, raising=False)


@pytest.mark.usefixtures("without_nhwc")
def test_as_run_by_default_shows_the_pass_qdqopt_lacks() -> None:
    """At LAYOUT ORT's NhwcTransformer turns the QLinearConvs of a QDQ CNN to NHWC; qdqopt lacks it here."""
    comp = compare_level(CNN, "layout")
    assert comp.mode == AS_RUN and not comp.isolated and not comp.report.isolated
    assert comp.ort_disabled == [] and comp.report.ort_disabled == [] and comp.auto_disabled == []
    assert NHWC in comp.lacking and NHWC in comp.ort_only and NHWC in comp.ort_only_modified
    assert "GraphTransformer NhwcTransformer modified: 1" in comp.ort_lines and not comp.trace_matches
    assert not comp.report.holds("S")  # ORT's output has com.microsoft.QLinearConv in NHWC, qdqopt's does not
    lines = comp.lines()
    assert lines[0] == "ORT run as a user runs it (nothing disabled)"
    assert (
        "qdqopt lacks NhwcTransformer, which ORT runs at this level and which modified this model: differences expected"
        in lines
    )
    assert not any("isolation" in line for line in lines)


@pytest.mark.usefixtures("without_nhwc")
def test_isolation_disables_what_qdqopt_lacks_on_both_sides_and_says_so() -> None:
    comp = compare_level(CNN, "layout", isolate=True)
    assert comp.mode == ISOLATION and comp.isolated and comp.report.isolated and comp.report.mode == ISOLATION
    assert comp.report.holds("P") and comp.trace_matches, "\n".join(comp.lines())
    assert comp.ort_disabled == comp.auto_disabled == comp.report.ort_disabled
    assert comp.ort_only == [] and comp.ort_only_modified == []
    assert NHWC in comp.ort_disabled
    assert not any(NHWC in line for line in comp.ort_lines)  # ORT really ran without it
    header = comp.lines()[0]
    assert header == f"ORT run with {', '.join(comp.ort_disabled)} {ISOLATION_TAIL}"
    assert comp.report.header == header and comp.header() == header


def test_a_pass_qdqopt_lacks_runs_in_ort_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass made missing on purpose (so this holds whatever qdqopt implements): ORT runs it unless isolated."""
    from qdqopt.passes.conv_activation_fusion import ConvActivationFusion

    model = fixture_model("wbq/conv_relu_clip_chain")
    monkeypatch.delitem(TRANSFORMERS, ConvActivationFusion.name)
    comp = compare_level(model, "extended")
    assert comp.mode == AS_RUN and ConvActivationFusion.name in comp.ort_only_modified
    assert not comp.report.holds("S")
    assert any(
        line.startswith("qdqopt lacks ConvActivationFusion, which ORT runs") and "differences expected" in line
        for line in comp.lines()
    )
    comp = compare_level(model, "extended", isolate=True)
    assert comp.isolated and ConvActivationFusion.name in comp.ort_disabled
    assert comp.report.holds("P") and comp.trace_matches, "\n".join(comp.lines())
    assert comp.lines()[0].endswith(ISOLATION_TAIL)


def test_a_declining_pass_runs_in_ort_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.passes.conv_activation_fusion import ConvActivationFusion

    model = fixture_model("wbq/conv_relu_clip_chain")
    monkeypatch.setattr(ConvActivationFusion, "unsupported", lambda self, graph, ctx: "a case not covered")
    comp = compare_level(model, "extended")
    assert comp.unsupported == {ConvActivationFusion.name: "a case not covered"} and comp.auto_disabled == []
    assert ConvActivationFusion.name in comp.ort_only_modified and not comp.report.holds("S")
    assert any("does not cover this model yet (a case not covered)" in line for line in comp.lines())
    comp = compare_level(model, "extended", isolate=True)
    assert ConvActivationFusion.name in comp.auto_disabled and ConvActivationFusion.name in comp.ort_disabled
    assert any("a case not covered (disabled on both sides)" in line for line in comp.lines())
    assert comp.report.holds("P"), "\n".join(comp.lines())


def test_the_users_own_disabled_list_is_not_isolation() -> None:
    comp = compare_level(CNN, "layout", disabled=[NHWC])
    assert comp.mode == AS_RUN and comp.ort_disabled == [NHWC] == comp.user_disabled and comp.auto_disabled == []
    assert comp.report.holds("P"), "\n".join(comp.lines())
    assert comp.lines()[0] == "ORT run as a user runs it, with NhwcTransformer disabled on both sides as asked"


def test_strict_is_a_deprecated_spelling() -> None:
    with pytest.warns(DeprecationWarning):
        assert compare_level(CNN, "disable_all", strict=False).isolated
    with pytest.warns(DeprecationWarning):
        assert compare_level(CNN, "disable_all", strict=True).mode == AS_RUN
    with pytest.warns(DeprecationWarning), pytest.raises(UsageError):
        compare_level(CNN, "disable_all", strict=True, isolate=True)


def test_a_bare_compare_has_no_mode() -> None:
    report = compare(_model(), _model())
    assert report.mode is None and not report.isolated and report.header == "" and report.ort_disabled == []
    assert report.lines()[0].startswith("N:")
