"""Shared by the tests of MatMulScaleFusion (``tests/passes/test_matmul_scale_fusion.py``) and MatMulNBitsFusion
(``test_matmul_nbits_fusion.py``) and by ``tests/test_matmul_scale_nbits.py`` (the corpus, where they run together).

Every comparison is at EXTENDED, the transpose optimizers (LAYOUT work) disabled on both sides, as ORT runs: ORT's
saved model byte for byte (tier P) and ORT's trace; each pass also alone (every other Level2 transformer and rule
disabled on both sides) where it fires.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from fixtures.handbuilt import matmulscale, nbits
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.reference import run_reference

OWN = ("MatMulScaleFusion", "MatMulNBitsFusion")
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_NAMES = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]
L2_RULE_NAMES = [r.name for r in LEVEL2_RULES]
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
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


def check_fixture_extended_and_alone(name: str, config: str) -> None:
    """``test_fixture_extended_and_alone`` (one per pass module, parametrized by its fixture group): the whole
    EXTENDED level, then each pass that fires in ORT, alone."""
    model = FIXTURES[name]()
    cfg = CONFIGS[config]
    _assert_p(_compare(model, cfg, LAYOUT_WORK), f"{name} {config}")
    fired = _fired(model, cfg)
    for own in OWN:
        if own in fired:
            _assert_p(_compare(model, cfg, _alone(own)), f"{name} {config} [{own} alone]")
