"""GemmActivationFusion against ORT 1.32, live.

* Every ``gemmact/`` case (built from :mod:`fixtures.handbuilt.gemmact`), both configs (default,
  ``session.qdqisint8allowed=1``), the transpose optimizers (LAYOUT work) disabled on both sides: the whole EXTENDED
  level, as ORT runs, must give ORT's trace and ORT's saved model byte for byte (tier P); and the same with the pass
  alone (every other Level2 transformer and rule disabled on both sides).
* Each case means what its name says: ORT's own log shows the pass firing unless the name ends in ``_kept``.
* Mutations (an activation dropped from the list, the graph output check skipped) must make the comparison fail.
"""

from __future__ import annotations

import functools

import onnx
import pytest

from fixtures.handbuilt import gemmact
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import PASSES
from qdqopt.passes import TRANSFORMERS, gemm_activation_fusion, graph_utils
from qdqopt.reference import run_reference

NAME = "GemmActivationFusion"
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]
ALONE = [*LAYOUT_WORK, *(t for t in L2_TRANSFORMERS if t != NAME), "Level2_RuleBasedTransformer"]
CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
CASES = [case.name for case in gemmact.GROUP.cases]


@functools.cache
def _model(name: str) -> onnx.ModelProto:
    return next(case for case in gemmact.GROUP.cases if case.name == name).build()


def _compare(name: str, config: dict[str, str], disabled: list[str]) -> LevelComparison:
    return compare_level(_model(name), "extended", config=config, disabled=disabled)


def _holds(result: LevelComparison) -> bool:
    return result.report.holds("P") and result.ours_lines == result.ort_lines


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def test_registered() -> None:
    assert TRANSFORMERS[NAME] is gemm_activation_fusion.GemmActivationFusion
    assert len(CASES) >= 25


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", CASES)
def test_extended_level(name: str, config: str) -> None:
    _assert_p(_compare(name, CONFIGS[config], LAYOUT_WORK), f"{name} EXTENDED")


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", CASES)
def test_pass_alone(name: str, config: str) -> None:
    _assert_p(_compare(name, CONFIGS[config], ALONE), f"{name} {NAME} alone")


@pytest.mark.parametrize("name", CASES)
def test_case_means_what_it_says(name: str) -> None:
    trace = run_reference(_model(name), "extended", disabled=LAYOUT_WORK).trace
    fired = any(t.name == NAME and t.modified for t in trace)
    assert fired is not name.endswith("_kept")


def test_mutation_activation_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "gemmact/selu_alpha_gamma"
    assert _holds(_compare(name, {}, ALONE))
    reduced = {k: v for k, v in gemm_activation_fusion._ACTIVATIONS.items() if k != "Selu"}
    monkeypatch.setattr(gemm_activation_fusion, "_ACTIVATIONS", reduced)
    assert not _holds(_compare(name, {}, ALONE))


def test_mutation_graph_output_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "gemmact/gemm_graph_output_kept"
    assert _holds(_compare(name, {}, ALONE))
    monkeypatch.setattr(graph_utils, "node_produces_graph_output", lambda graph, node: False)
    result = _compare(name, {}, ALONE)  # the Gemm whose output is a graph output fused all the same: ORT keeps it
    assert not result.report.holds("S")
    assert any("com.microsoft.FusedGemm" in str(d) for d in result.report.differences), result.report.lines()
