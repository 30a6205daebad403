"""MatMulScaleFusion and MatMulNBitsFusion against ORT 1.32, live.

* Every ``matmulscale/`` and ``nbits/`` fixture and the corpus models where ORT's log shows one of the two passes
  modifying the model, at EXTENDED, both configs (default, ``session.qdqisint8allowed=1``), the transpose
  optimizers (LAYOUT work) disabled on both sides, as ORT runs: ORT's saved model byte for byte (tier P) and ORT's
  trace.
* Each pass alone (every other Level2 transformer and rule disabled on both sides) on the models where it fires.
* Mutations (the trailing scale's reciprocal not taken, the NBits bias shape check dropped) must make the
  comparison fail, so the checks above can fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest

from fixtures.handbuilt import matmulscale, nbits
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.passes import TRANSFORMERS, matmul_nbits_fusion, matmul_scale_fusion
from qdqopt.reference import run_reference
from tests.conftest import CORPUS, patched

OWN = ("MatMulScaleFusion", "MatMulNBitsFusion")
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_NAMES = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]
L2_RULE_NAMES = [r.name for r in LEVEL2_RULES]
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
TESTDATA = CORPUS / "ort_testdata" / "onnxruntime" / "test" / "testdata"
CORPUS_MODELS = (
    TESTDATA / "attention_past_state.u8s8.onnx",
    TESTDATA / "attention_past_state.u8u8.onnx",
    TESTDATA / "transform" / "runtime_optimization" / "matmulnbits_add.onnx",
)
FIXTURES = {case.name: case.build for case in (*matmulscale.GROUP.cases, *nbits.GROUP.cases)}

Model = Path | onnx.ModelProto


def _alone(name: str) -> list[str]:
    """Every Level2 transformer and rule but ``name`` (and the layout work)."""
    return [*LAYOUT_WORK, *(n for n in L2_NAMES if n != name), *L2_RULE_NAMES]


def _compare(model: Model, config: dict[str, str], disabled: list[str]) -> LevelComparison:
    return compare_level(model, "extended", config=config, disabled=disabled)


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs\n{result.ours_lines}\n{result.ort_lines}"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def _fired(model: Model, config: dict[str, str]) -> set[str]:
    return {t.name for t in run_reference(model, "extended", config=config, disabled=LAYOUT_WORK).trace if t.modified}


@functools.cache
def _corpus_fired(path: Path) -> frozenset[str]:
    return frozenset(_fired(path, {}))


def test_passes_registered() -> None:
    for name in OWN:
        assert name in TRANSFORMERS
        assert name in L2_NAMES


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", list(FIXTURES))
def test_fixture_extended_and_alone(name: str, config: str) -> None:
    model = FIXTURES[name]()
    cfg = CONFIGS[config]
    _assert_p(_compare(model, cfg, LAYOUT_WORK), f"{name} {config}")
    fired = _fired(model, cfg)
    for own in OWN:
        if own in fired:
            _assert_p(_compare(model, cfg, _alone(own)), f"{name} {config} [{own} alone]")


def test_fixtures_exercise_both_passes() -> None:
    """The fixture groups make each pass fire, and each has cases where it does not."""
    for group, own in ((matmulscale, "MatMulScaleFusion"), (nbits, "MatMulNBitsFusion")):
        fired = [own in _fired(case.build(), {}) for case in group.GROUP.cases]
        assert any(fired) and not all(fired), own


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", CORPUS_MODELS, ids=lambda p: p.name)
def test_corpus_extended_and_alone(path: Path, config: str) -> None:
    if not path.is_file():
        pytest.skip(f"corpus model not found: {path}")
    fired = _corpus_fired(path)
    assert fired & set(OWN), f"{path.name}: neither pass fires in ORT any more"
    cfg = CONFIGS[config]
    _assert_p(_compare(path, cfg, LAYOUT_WORK), f"{path.name} {config}")
    for own in OWN:
        if own in fired:
            _assert_p(_compare(path, cfg, _alone(own)), f"{path.name} {config} [{own} alone]")


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

    def wrong(graph, types, node):  # type: ignore[no-untyped-def]
        found = original(graph, types, node)
        if found is not None and node.op_type == "Div":
            return np.float32(1.0) / found[0], found[1]
        return found

    with patched(matmul_scale_fusion, "_scale_from_node", wrong):
        result = _compare(FIXTURES["matmulscale/div_after"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P")


def test_mutation_scale_rank_check_dropped_fails() -> None:
    """Accepting a scale whose rank exceeds the other input's must make a not-fused case differ."""
    original = matmul_scale_fusion._scalar_constant

    def lax(graph, types, name, max_rank):  # type: ignore[no-untyped-def]
        return original(graph, types, name, 99)

    with patched(matmul_scale_fusion, "_scalar_constant", lax):
        result = _compare(FIXTURES["matmulscale/mul_after_rank_too_big"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P") or result.ours_lines != result.ort_lines


def test_mutation_nbits_bias_shape_check_dropped_fails() -> None:
    """Folding a [1, N] bias must make the comparison fail."""
    original = matmul_nbits_fusion._select_bias

    def lax(graph, node, types):  # type: ignore[no-untyped-def]
        found = original(graph, node, types)
        if found is not None:
            return found
        edges = graph.output_edges(node)
        if len(edges) != 1:
            return None
        add = graph.node(edges[0].dst)
        return (add, 1 if edges[0].dst_slot == 0 else 0) if add is not None and add.op_type == "Add" else None

    with patched(matmul_nbits_fusion, "_select_bias", lax):
        result = _compare(FIXTURES["nbits/bias_1n"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P") or result.ours_lines != result.ort_lines
