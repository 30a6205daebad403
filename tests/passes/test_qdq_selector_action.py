"""QDQSelectorActionTransformer against ORT, computed live.

* Every ``selector/`` fixture, every corpus model ORT accepts and every committed ``fixtures/models/*.onnx``, at
  ORT_ENABLE_EXTENDED (TransposeOptimizer off on both sides) with the default config and with
  ``session.qdqisint8allowed=1``: byte-identical to ORT's output (tier P) with ORT's log lines.
* :func:`explain_units` on the committed TinyConvNet (pt2e): at the default config on x86 the second Conv and the
  residual Add are rejected with their reasons; with int8 allowed every unit fuses.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest

from fixtures.handbuilt import selector
from qdqopt.api import run
from qdqopt.compare import compare_level
from qdqopt.config import SessionConfig
from qdqopt.errors import ModelError
from qdqopt.events import Kind, NoMatch
from qdqopt.graph import load_model
from qdqopt.levels import parse_level
from qdqopt.manager import run_pipeline
from qdqopt.passes import is_implemented
from qdqopt.passes.qdq import selectors
from qdqopt.passes.qdq.actions import pack_nbits
from qdqopt.passes.qdq_selector_action import UnitReport, explain_units
from qdqopt.reference import run_reference
from tests.conftest import corpus_id, corpus_models, fixture_model, ort_accepts
from tests.passes._helpers import knownx

CONFIGS = {"default": {}, "int8": {"session.qdqisint8allowed": "1"}}
OFF = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
TINY = MODELS / "tinyconvnet_pt2e.onnx"


def _assert_like_ort(model: str | Path | onnx.ModelProto, config: dict[str, str]) -> None:
    comp = compare_level(model, "extended", config=config, disabled=OFF, isolate=True)
    assert comp.ours_lines == comp.ort_lines, f"ours {comp.ours_lines}\nORT  {comp.ort_lines}"
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def test_registered() -> None:
    assert is_implemented("QDQSelectorActionTransformer")


@functools.cache
def _fixture(name: str) -> onnx.ModelProto:
    return next(case for case in selector.GROUP.cases if case.name == name).build()


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", [case.name for case in selector.GROUP.cases])
def test_fixture(name: str, config: str) -> None:
    if name.endswith(selector.CONV_NOZP_S8[0]) and config == "int8":
        _assert_both_fail(_fixture(name), CONFIGS[config])
        return
    _assert_like_ort(_fixture(name), CONFIGS[config])


def _assert_both_fail(model: onnx.ModelProto, config: dict[str, str]) -> None:
    """REVIEW #22: Q without zp (output_dtype int8) + GUID zps -> a QLinearConv mixing int8 and uint8: no kernel."""
    import onnxruntime as ort

    with pytest.raises(ModelError):
        run(model, "extended", disabled=OFF, config=config)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    with pytest.raises(Exception, match="int8"):
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("path", sorted(MODELS.glob("*.onnx")), ids=lambda p: p.name)
def test_committed_model(path: Path, config: str) -> None:
    _assert_like_ort(path, CONFIGS[config])


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("path", corpus_models(), ids=corpus_id)
def test_corpus(path: Path, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects the model")
    _assert_like_ort(path, CONFIGS[config])


def test_fixtures_fire_the_transformer() -> None:
    """Most fixtures must actually make ORT's transformer modify the graph (guards against vacuous fixtures)."""
    fired = 0
    cases = [case for case in selector.GROUP.cases if case.name not in selector.SIXTEEN_BIT]  # mostly rejections
    for case in cases:
        comp = compare_level(_fixture(case.name), "extended", config={}, disabled=OFF, isolate=True)
        fired += any(line == "GraphTransformer QDQSelectorActionTransformer modified: 1" for line in comp.ort_lines)
    assert fired >= len(cases) * 3 // 4


# ---------------------------------------------------------------------------------------------------- explain
def _explain(config: dict[str, str]) -> tuple[list[UnitReport], int]:
    model = load_model(TINY)
    result = run_pipeline(
        model,
        parse_level("extended"),
        config=SessionConfig.from_mapping(config, warn=False),
        disabled=set(OFF),
        stop_before="QDQSelectorActionTransformer",
    )
    assert result.stopped and result.context is not None
    before = [(n.index, n.op_type) for n in model.graph.nodes()]
    units = explain_units(model.graph, result.context)
    assert [(n.index, n.op_type) for n in model.graph.nodes()] == before, "explain modified the graph"
    return units, len(before)


def test_explain_default_rejects_int8_units() -> None:
    units, _ = _explain({})
    convs = [u for u in units if u.op_type == "Conv"]
    assert len(convs) == 4
    second = convs[1]
    assert second.outcome == "rejected" and second.rule == "Conv"
    assert any("int8" in r for r in second.reasons), second.reasons
    assert len(second.dq_nodes) == 3 and len(second.q_nodes) == 1
    (add,) = [u for u in units if u.op_type == "Add"]
    assert add.outcome == "rejected" and add.rule == "2DQ"
    assert any("mixed input types" in r and "int8" in r and "uint8" in r for r in add.reasons), add.reasons
    assert convs[0].outcome == "fused" and convs[0].result_op == "QLinearConv"
    assert all(u.reasons for u in units if u.outcome == "rejected")


def test_explain_int8_allowed_fuses_everything() -> None:
    units, _ = _explain(CONFIGS["int8"])
    ruled = [u for u in units if u.rule is not None]
    assert ruled and all(u.outcome in ("fused", "dropped") for u in ruled), [u for u in ruled if u.reasons]
    results = [u.result_op for u in ruled if u.outcome == "fused"]
    assert results.count("QLinearConv") == 4
    assert results.count("com.microsoft.QLinearAdd") == 1
    assert results.count("com.microsoft.QGemm") == 1


def test_pack_nbits_int4_short_block() -> None:
    """K=5, block 16, int4 signed: the odd nibble is padded with 8, whole trailing bytes stay 0."""
    import numpy as np

    w = np.array([[1], [-1], [0], [7], [-8]])
    packed, scales, zps = pack_nbits(w, np.array([[0.5]]), None, 4, 16, True)
    assert packed.shape == (1, 1, 8)
    assert list(packed[0, 0]) == [0x79, 0xF8, 0x80, 0, 0, 0, 0, 0]
    assert list(scales) == [0.5] and zps is None


REASONS = {
    # fixture: (target op, rule, a piece of the first reason)
    "graph_output_dq": ("Sigmoid", "1DQ", "QDQ node group cannot have DQ node that produces a graph output. DQ node: "),
    "conv_clip_kept_u8": ("Conv", "Conv", "is not made redundant by its Q"),
    "maxpool11": ("MaxPool", "drop_no_int16_support_and_positive_scale", "MaxPool-11 is not in versions [12, 22]"),
    "reshape_diff": ("Reshape", "drop", "Q and DQ parameters differ (scale "),
    "add_const": ("Add", "2DQ", "input 1 is not produced by a DequantizeLinear"),
    "add_mixed": ("Add", "2DQ", "mixed input types (uint8 and int8)"),
    "gemm_alpha": ("Gemm", "DQMatMulToMatMulNBits/Gemm", "alpha is not 1"),
    "d2s_u16": ("DepthToSpace", "drop_no_int16_support", "16-bit"),
    "resize_linear": ("Resize", "drop_no_int16_support", "Resize mode 'linear'"),
}


@pytest.mark.parametrize("name", list(REASONS))
def test_explain_reasons_on_unoptimized_fixture(name: str) -> None:
    """Explain straight on a fixture (no Level1: EnsureUniqueDQ has not duplicated the graph-output DQ)."""
    from qdqopt.partition import partition
    from qdqopt.passes.base import PassContext
    from qdqopt.target import Target

    op, rule, reason = REASONS[name]
    model = load_model(_fixture(f"{selector.GROUP.prefix}/{name}"))
    partition(model.graph)
    units = explain_units(model.graph, PassContext(config=SessionConfig(), target=Target.detect()))
    (unit,) = [u for u in units if u.op_type == op]
    assert unit.outcome == "rejected" and unit.rule == rule
    assert any(reason in r for r in unit.reasons), unit.reasons


# ------------------------------------------------------------------------------------ issue #12: knownx/ classes
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("f8_", "u8_"))
def test_knownx_float8_units_as_ort(name: str, level: str, config: str) -> None:
    """float8 Q/DQ around MatMul, Gemm, MaxPool and a DQ into ArgMax, and their uint8 twins, as ORT runs them."""
    knownx.assert_exact(name, level, config)


def test_knownx_float8_boundary() -> None:
    """ORT fuses every uint8 twin and no float8 unit: the fixtures sit on both sides of the check."""
    for name in knownx.fixtures("u8_"):
        assert "QDQSelectorActionTransformer" in (knownx.ort_modified(name, "extended", "default") or ()), name
    for name in knownx.fixtures("f8_"):
        modified = knownx.ort_modified(name, "extended", "default")
        assert modified is not None and "QDQSelectorActionTransformer" not in modified, name


@pytest.mark.parametrize("name", knownx.fixtures("f8_"))
def test_knownx_float8_check_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the float8 refusal qdqopt fuses the unit into an op no CPU kernel runs (the known failure)."""
    monkeypatch.setattr(selectors, "FLOAT_QUANT", ())
    with pytest.raises(ModelError, match="Failed to find kernel for"):
        knownx.compare(name, "extended")


def test_knownx_float8_refusal_reason() -> None:
    """The refusal is an event that names the float8 node and type."""
    log = run(fixture_model("knownx/f8_matmul_u8_act_e4m3fn_weight"), "extended").pipeline.events
    found = [(e.nodes, e.text) for e in log.of_kind(Kind.NO_MATCH, pass_name="QDQSelectorActionTransformer")]
    assert any("'dq_w' input is float8e4m3fn" in text and "dq_w" in nodes for nodes, text in found), found


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("a16w8_"))
def test_knownx_a16w8_matmul_add_as_ort(name: str, level: str, config: str) -> None:
    """A16W8 contrib (and ONNX) Q/DQ, MatMul + Add: Gemm (MatMulAddFusion), then MatMulNBits, as ORT."""
    knownx.assert_exact(name, level, config)


@pytest.mark.parametrize("name", knownx.fixtures("a16w8_"))
def test_knownx_a16w8_nbits_rule_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT ends with MatMulNBits after MatMulAddFusion; refusing the DQMatMulToMatMulNBits rule leaves qdqopt with
    the Gemm and its DQs, which the comparison catches."""
    ours = [n.op_type for n in run_reference(fixture_model(name), "extended").model.graph.node]
    assert "MatMulNBits" in ours and {"MatMulAddFusion", "QDQSelectorActionTransformer"} <= (
        knownx.ort_modified(name, "extended", "default") or frozenset()
    )
    monkeypatch.setattr(
        selectors.DQMatMulNBitsSelector, "check", lambda self, ctx, node, clip, dqs, qs: NoMatch("planted")
    )
    comp = knownx.compare(name, "extended")
    assert not comp.report.holds("S")
    assert any("MatMulNBits" in line for line in comp.lines()), comp.lines()


# ------------------------------------------------------------------------------- issue #12: found by qdqopt fuzz
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_qlinearmatmul_"))
def test_knownx_qlinearmatmul_params_as_ort(name: str, level: str, config: str) -> None:
    """QLinearMatMul takes A and Y per tensor, B per tensor or per column of a 2-D weight, as ORT."""
    knownx.assert_exact(name, level, config)


_QLMM_TWINS = ("knownx/fz_qlinearmatmul_weight_axis1", "knownx/fz_qlinearmatmul_one_element_axis0")


def test_knownx_qlinearmatmul_boundary() -> None:
    """ORT makes QLinearMatMul of the twins and of none of the others: the fixtures sit on both sides."""
    for name in knownx.fixtures("fz_qlinearmatmul_"):
        ops = {n.op_type for n in run_reference(fixture_model(name), "extended").model.graph.node}
        assert ("QLinearMatMul" in ops) == (name in _QLMM_TWINS), (name, ops)


@pytest.mark.parametrize("name", [n for n in knownx.fixtures("fz_qlinearmatmul_") if n not in _QLMM_TWINS])
def test_knownx_qlinearmatmul_check_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the parameter-shape check qdqopt makes a QLinearMatMul that ORT does not: the comparison fails at S."""
    monkeypatch.setattr(selectors, "_qlinear_matmul_params_reason", lambda ctx, dqa, dqb, q: None)
    comp = knownx.compare(name, "extended")
    assert not comp.report.holds("S")
    assert any("QLinearMatMul" in line for line in comp.lines()), comp.lines()


def test_knownx_qlinearmatmul_refusal_reason() -> None:
    log = run(fixture_model("knownx/fz_qlinearmatmul_blocked_weight"), "extended").pipeline.events
    found = [e.text for e in log.of_kind(Kind.NO_MATCH, pass_name="QDQSelectorActionTransformer")]
    assert any("the weight DQ is blocked" in text for text in found), found


_UNIT_PREFIXES = ("fz_softmax_", "fz_params_", "fz_lookup_", "fz_avgpool_")
#: the fixtures ORT fuses (the others keep the unit, or make ORT's session fail)
_UNIT_FUSED = {
    "knownx/fz_softmax_scale_1d": "QLinearSoftmax",
    "knownx/fz_softmax_output_per_axis": "QLinearSoftmax",
    "knownx/fz_softmax_scale_denormal": "QLinearSoftmax",
    "knownx/fz_softmax_scale_inf": "QLinearSoftmax",
    "knownx/fz_params_add_scale_input": "QLinearAdd",
    "knownx/fz_params_concat_one_element": "QLinearConcat",
    "knownx/fz_avgpool_scalar": "QLinearAveragePool",
}


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases(*_UNIT_PREFIXES))
def test_knownx_unit_params_as_ort(name: str, level: str, config: str) -> None:
    """Softmax's constant input scale, Add/Mul/Concat's parameter shapes, and the sessions ORT fails after fusing a
    per-axis Sigmoid/Where or a [1]-parameter AveragePool: qdqopt equals ORT, or fails where ORT fails."""
    knownx.assert_exact(name, level, config)


def test_knownx_unit_params_boundary() -> None:
    """Each fixture on its side: the fused twins, the units ORT keeps, the sessions ORT fails."""
    for name in knownx.fixtures(*_UNIT_PREFIXES):
        if name.startswith(("knownx/fz_lookup_", "knownx/fz_avgpool_one")):
            assert knownx.ort_modified(name, "extended", "default") is None, name  # ORT fails the session
            continue
        ops = {n.op_type for n in run_reference(fixture_model(name), "extended").model.graph.node}
        fused = _UNIT_FUSED.get(name)
        assert (fused in ops) if fused else ("DequantizeLinear" in ops and "QuantizeLinear" in ops), (name, ops)


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("knownx/fz_softmax_scale_input", "UnarySelector"),
        ("knownx/fz_softmax_scale_2d", "UnarySelector"),
        ("knownx/fz_softmax_scale_zero", "UnarySelector"),
        ("knownx/fz_softmax_scale_negative", "UnarySelector"),
        ("knownx/fz_softmax_scale_nan", "UnarySelector"),
        ("knownx/fz_softmax_scale_merged_zero", "UnarySelector"),
        ("knownx/fz_params_add_one_element", "_params_shape_reason"),
        ("knownx/fz_params_mul_per_axis_output", "_params_shape_reason"),
        ("knownx/fz_params_concat_per_axis", "_params_shape_reason"),
    ],
)
def test_knownx_unit_params_check_is_needed(name: str, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the check qdqopt fuses a unit that ORT keeps: the comparison fails (at S, or qdqopt's session fails
    where ORT's does not: a QLinearSoftmax with a [1, 1] scale has no kernel)."""
    if target == "UnarySelector":
        original = selectors.UnarySelector.check

        def check(self: selectors.UnarySelector, ctx: selectors.Ctx, node, clip, dqs, qs):  # type: ignore[no-untyped-def]
            node.op_type = "Sigmoid"  # the Softmax branch is skipped; restored below
            try:
                return original(self, ctx, node, clip, dqs, qs)
            finally:
                node.op_type = "Softmax"

        monkeypatch.setattr(selectors.UnarySelector, "check", check)
    else:
        monkeypatch.setattr(selectors, target, lambda ctx, nodes, *, allow_one_element, op: None)
    assert knownx.differs(name, "extended")


@pytest.mark.parametrize("name", ["knownx/fz_lookup_sigmoid_per_axis", "knownx/fz_lookup_where_per_axis_output"])
def test_knownx_lookup_table_check_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT fails the session after making the op; without the kernel's check qdqopt would optimize the model."""
    from qdqopt import partition

    with pytest.raises(ModelError, match="must be a scalar or 1D tensor of size 1"):
        run(fixture_model(name), "extended")
    monkeypatch.setattr(partition, "_lookup_table_error", lambda graph, node: None)
    assert run(fixture_model(name), "extended").model is not None


def test_knownx_avgpool_inference_check_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.graph.core import Graph

    with pytest.raises(ModelError, match=r"Op \(QLinearAveragePool\) \[TypeInferenceError\] Scale and Zero-point"):
        run(fixture_model("knownx/fz_avgpool_one_element"), "extended")
    monkeypatch.setattr(Graph, "_check_quantize_types", lambda self: None)
    assert run(fixture_model("knownx/fz_avgpool_one_element"), "extended").model is not None


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_qlinearconcat_fp16"))
def test_knownx_qlinearconcat_fp16_as_ort(name: str, level: str, config: str) -> None:
    """ORT fuses an fp16 QDQ Concat into QLinearConcat and then rejects its own graph; qdqopt fails the same way."""
    knownx.assert_exact(name, level, config)


def test_knownx_qlinearconcat_fp16_type_check_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.graph.core import Graph

    model = fixture_model("knownx/fz_qlinearconcat_fp16")
    assert knownx.ort_modified("knownx/fz_qlinearconcat_fp16", "extended", "default") is None
    with pytest.raises(
        ModelError, match=r"Type 'tensor\(float16\)' of input parameter \(ys\) of operator \(QLinearConc"
    ):
        run(model, "extended")
    monkeypatch.setattr(Graph, "_check_qlinear_input_types", lambda self: None)
    assert run(model, "extended").model is not None


def _where_zp_input(output_scale_input: bool = False) -> onnx.ModelProto:
    """A QDQ Where unit whose first DQ's zero point is a graph input (fuzz seed 1 case 94, shrunk); with
    ``output_scale_input`` its Q's scale is a graph input too, and it has no zero point (fuzz seed 2 case 71)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.ones((1, 1, 1, 4), bool), "c"),
        numpy_helper.from_array(np.array(0.2, np.float32), "s1"),
        numpy_helper.from_array(np.array(0.1, np.float32), "s2"),
        numpy_helper.from_array(np.array(0.05, np.float32), "sy"),
        numpy_helper.from_array(np.array(128, np.uint8), "zy"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "s1", "z1"], ["ad"], name="dq_a"),
        helper.make_node("DequantizeLinear", ["b", "s2"], ["bd"], name="dq_b"),
        helper.make_node("Where", ["c", "bd", "ad"], ["w"], name="where"),
        helper.make_node("QuantizeLinear", ["w", "sy"] if output_scale_input else ["w", "sy", "zy"], ["y"], name="q_y"),
    ]
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 3, 4, 4]),
        helper.make_tensor_value_info("b", TensorProto.UINT8, [1, 3, 4, 4]),
        helper.make_tensor_value_info("z1", TensorProto.UINT8, []),
    ]
    if output_scale_input:
        inits = [t for t in inits if t.name != "sy"]
        inputs.append(helper.make_tensor_value_info("sy", TensorProto.FLOAT, []))
    g = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 3, 4, 4])], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_qlinearwhere_zero_point_input_crashes_ort_and_qdqopt_says_so(tmp_path: Path) -> None:
    """ORT 1.32 fuses the unit into QLinearWhere, whose kernel then crashes the process at session creation (an ORT
    finding, checked live in a child process); qdqopt refuses the model saying so. At BASIC nothing is fused and
    both run it."""
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(_where_zp_input(), str(path))
    script = (
        "import sys, onnxruntime as ort\n"
        "so = ort.SessionOptions()\n"
        "so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[2])\n"
        "ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
    )
    for level in ("ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED"):
        done = subprocess.run([sys.executable, "-c", script, str(path), level], check=False, capture_output=True)
        assert (done.returncode < 0) == (level == "ORT_ENABLE_EXTENDED"), (level, done.returncode)
    with pytest.raises(ModelError, match="QLinearWhere kernel crashes the process"):
        run(_where_zp_input(), "extended")
    assert run(_where_zp_input(), "basic").model is not None
    # the output's scale a graph input: the kernel builds no lookup table, ORT creates the session, and so does qdqopt
    onnx.save(_where_zp_input(output_scale_input=True), str(path))
    done = subprocess.run([sys.executable, "-c", script, str(path), "ORT_ENABLE_EXTENDED"], check=False)
    assert done.returncode == 0
    comp = knownx.compare(_where_zp_input(output_scale_input=True), "extended")
    assert comp.report.holds("X") and comp.trace_matches, comp.lines()


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_nbits_"))
def test_knownx_nbits_fp16_units_as_ort(name: str, level: str, config: str) -> None:
    """DQMatMulToMatMulNBits leaves an fp16 MatMul with an activation DQ or a Q; fp32, or fp16 alone, fuse."""
    knownx.assert_exact(name, level, config)


def test_knownx_nbits_fp16_boundary_and_check_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    stays = ("fp16_act_dq", "fp16_q", "q_and_output", "q_and_relu")
    for name in knownx.fixtures("fz_nbits_"):
        ops = {n.op_type for n in run_reference(fixture_model(name), "extended").model.graph.node}
        assert ("MatMulNBits" in ops) == (not name.endswith(stays)), (name, ops)
    monkeypatch.setattr(selectors, "fp16_nbits_unit", lambda ctx, weight, in_unit: False)
    for name in ("knownx/fz_nbits_fp16_act_dq", "knownx/fz_nbits_fp16_q"):
        assert knownx.differs(name, "extended"), name


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_output_dtype_"))
def test_knownx_output_dtype_without_zero_point_as_ort(name: str, level: str, config: str) -> None:
    """A Q with output_dtype and no zero point fused into a contrib QLinear op: ORT fails unless it is uint8."""
    knownx.assert_exact(name, level, config)


def test_knownx_output_dtype_type_check_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.graph.core import Graph

    assert knownx.ort_modified("knownx/fz_output_dtype_uint8_sigmoid", "extended", "int8-allowed") is not None
    for name in knownx.fixtures("fz_output_dtype_int8_"):
        assert knownx.ort_modified(name, "extended", "int8-allowed") is None, name
        with pytest.raises(ModelError, match="Type Error: Type"):
            run(fixture_model(name), "extended", config=knownx.CONFIGS["int8-allowed"])
    monkeypatch.setattr(Graph, "_check_qlinear_input_types", lambda self: None)
    for name in knownx.fixtures("fz_output_dtype_int8_"):
        assert run(fixture_model(name), "extended", config=knownx.CONFIGS["int8-allowed"]).model is not None


@pytest.mark.parametrize("name", ["knownx/fz_nbits_q_and_output", "knownx/fz_nbits_q_and_relu"])
def test_knownx_nbits_q_side_check_is_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CanCreateNodeGroup's Q-side checks qdqopt makes MatMulNBits where ORT keeps the MatMul."""
    assert not knownx.differs(name)
    monkeypatch.setattr(selectors, "can_create_node_group", lambda graph, node, clip, dqs, qs: None)
    assert knownx.differs(name)
