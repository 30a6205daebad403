"""Shared by the tests of DoubleQDQPairsRemover, QDQPropagationTransformer, WhereDummyDq and MatMulAddFusion
(``tests/passes/test_double_qdq.py``, ``test_qdq_propagation.py``, ``test_where_dummy_dq.py``,
``test_matmul_add_fusion.py``, ``test_qdq_util.py``) and by ``tests/test_doubleqdq_propagation_where_matmuladd.py``
(what the four passes do together): their fixture groups, each pass alone at BASIC, the comparison with ORT."""

from __future__ import annotations

import functools

import onnx
import pytest

from fixtures.handbuilt import doubleqdq, matmuladd, propagation, where
from qdqopt.compare import compare_level
from qdqopt.levels import LEVEL1_RULES, PASSES

CONFIGS = {"default": {}, "int8": {"session.qdqisint8allowed": "1"}}
GROUPS = {
    doubleqdq.GROUP.prefix: ("DoubleQDQPairsRemover", doubleqdq.GROUP),
    propagation.GROUP.prefix: ("QDQPropagationTransformer", propagation.GROUP),
    where.GROUP.prefix: ("WhereDummyDq", where.GROUP),
    matmuladd.GROUP.prefix: ("MatMulAddFusion", matmuladd.GROUP),
}
L1_NAMES = sorted(
    ({p.name for p in PASSES if p.stage == "L1"} | {r.name for r in LEVEL1_RULES}) - {"Level1_RuleBasedTransformer"}
)

Model = str | onnx.ModelProto


def _alone(name: str) -> list[str]:
    return [n for n in L1_NAMES if n != name]


def _assert_like_ort(model: Model, config: dict[str, str], disabled: list[str]) -> None:
    # isolated: what qdqopt lacks or declines (the transpose optimizer on some models) is off on both sides
    comp = compare_level(model, "basic", config=config, disabled=disabled, isolate=True)
    assert comp.ours_lines == comp.ort_lines, f"ours {comp.ours_lines}\nORT  {comp.ort_lines}"
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def _fixture_params(only: str) -> list[object]:
    """The cases of the fixture group of the pass ``only``, each with each config."""
    params: list[object] = []
    for pass_name, group in GROUPS.values():
        if pass_name != only:
            continue
        for case in group.cases:
            for key in CONFIGS:
                params.append(pytest.param(case.name, pass_name, key, id=f"{case.name}-{key}"))
    return params


@functools.cache
def _fixture(name: str) -> onnx.ModelProto:
    for _, group in GROUPS.values():
        for case in group.cases:
            if case.name == name:
                return case.build()
    raise KeyError(name)


def check_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    """``test_fixture_alone_and_together`` (one per pass module, parametrized by the pass's fixture group), with the
    default config and with ``session.qdqisint8allowed=1``: the pass alone (every other Level1 transformer and rule
    disabled on both sides), then the whole BASIC level, must come out byte-identical to ORT's (tier P), with ORT's
    log lines."""
    model = _fixture(name)
    _assert_like_ort(model, CONFIGS[config], _alone(pass_name))
    _assert_like_ort(model, CONFIGS[config], [])
