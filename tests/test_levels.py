"""The level table against ORT's own log: same transformers, same order, same gating by config keys.

On a model no transformer changes, ORT applies each registered transformer exactly once and logs
``GraphTransformer <name> modified: 0`` for it, in order: that sequence must be what qdqopt registers.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.levels import PASSES, Level, all_names, parse_level, registered_passes
from qdqopt.reference import run_reference
from qdqopt.target import Target


def _inert_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"], name="sig")],
        "inert",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


CONFIGS = {
    "default": {},
    "int8-allowed": {"session.qdqisint8allowed": "1"},
    "no-qdq": {"session.disable_quant_qdq": "1"},
    "no-double-qdq": {"session.disable_double_qdq_remover": "1"},
    "cast-chain": {"optimization.enable_cast_chain_elimination": "1"},
    "dq-matmulnbits": {"session.enable_dq_matmulnbits_fusion": "1"},
    "x64quantprecision": {"session.x64quantprecision": "1"},
    "x64quantprecision-no-qdq": {"session.x64quantprecision": "1", "session.disable_quant_qdq": "1"},
    "disable-by-config": {"optimization.disable_specified_optimizers": "ConstantFolding;QDQFinalCleanupTransformer"},
}


def _our_sequence(level: Level, config: dict[str, str], disabled: set[str]) -> list[str]:
    cfg = SessionConfig.from_mapping(config, warn=False)
    off = disabled | set(cfg.disabled_by_config())
    return [spec.name for spec, _ in registered_passes(level, cfg, Target.detect(), off) if spec.stage != "L0"]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("level", list(Level), ids=[lv.short for lv in Level])
def test_registered_sequence_matches_ort_log(level: Level, config: dict[str, str]) -> None:
    ref = run_reference(_inert_model(), level, config=config)
    assert [t.name for t in ref.trace] == _our_sequence(level, config, set())


def test_disabling_rules_and_transformers_matches_ort() -> None:
    level_one_rules = [r.name for p in PASSES if p.name == "Level1_RuleBasedTransformer" for r in p.rules]
    disabled = {*level_one_rules, "ConstantSharing", "NchwcTransformer", "MemcpyTransformer"}
    disabled.add("EnsureUniqueDQForNodeUnit")
    ref = run_reference(_inert_model(), Level.ALL, disabled=sorted(disabled))
    ours = _our_sequence(Level.ALL, {}, disabled)
    assert [t.name for t in ref.trace] == ours
    assert "Level1_RuleBasedTransformer" not in ours  # no rule left: the rule transformer is not registered
    assert ours[0] == "EnsureUniqueDQForNodeUnit" and ours[-1] == "MemcpyTransformer"  # required ones stay


def test_names_are_unique_per_stage_and_known() -> None:
    seen = set()
    for spec in PASSES:
        assert (spec.name, spec.stage) not in seen
        seen.add((spec.name, spec.stage))
    assert {"ReluQuantRewrite", "ClipQuantRewrite", "Pad_Fusion", "MatMul_BatchNormalization_Fusion"} <= all_names()


@pytest.mark.parametrize(
    ("text", "level"),
    [
        (0, Level.DISABLE_ALL),
        ("basic", Level.BASIC),
        ("ORT_ENABLE_EXTENDED", Level.EXTENDED),
        ("3", Level.LAYOUT),
        ("GraphOptimizationLevel.ORT_ENABLE_ALL", Level.ALL),
        (99, Level.ALL),
    ],
)
def test_parse_level(text: object, level: Level) -> None:
    assert parse_level(text) is level  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["fast", 4, "ORT_ENABLE_EVERYTHING"])
def test_parse_level_rejects(bad: object) -> None:
    with pytest.raises(UsageError):
        parse_level(bad)  # type: ignore[arg-type]


def test_parse_level_accepts_ort_enum() -> None:
    import onnxruntime as ort

    assert parse_level(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC) is Level.BASIC  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- passes that do not cover
def test_a_pass_that_does_not_cover_the_model_runs_on_neither_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GraphTransformer.unsupported``: the run is redone without the pass, the reason is reported, and a
    comparison disables the pass in ORT too (as ORT runs, ORT runs it, so the comparison fails)."""
    from qdqopt.api import run
    from qdqopt.compare import compare_level
    from qdqopt.passes.conv_activation_fusion import ConvActivationFusion
    from tests.conftest import fixture_model

    model = fixture_model("wbq/conv_relu_clip_chain")  # ORT's ConvActivationFusion fires here
    monkeypatch.setattr(ConvActivationFusion, "unsupported", lambda self, graph, ctx: "a case not covered")
    result = run(model, "extended")
    assert result.unsupported == {"ConvActivationFusion": "a case not covered"}
    assert all(e.name != "ConvActivationFusion" for e in result.pipeline.trace)
    assert not any(n.op_type == "FusedConv" for n in result.model.graph.node)
    off = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
    comp = compare_level(model, "extended", disabled=off, isolate=True)
    assert "ConvActivationFusion" in comp.auto_disabled and comp.unsupported
    assert comp.report.holds("P") and comp.ours_lines == comp.ort_lines
    strict = compare_level(model, "extended", disabled=off)
    assert not strict.report.holds("S")
