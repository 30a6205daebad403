"""DoubleQDQPairsRemover, QDQPropagationTransformer, WhereDummyDq and MatMulAddFusion against ORT, computed live.

* Every fixture of the ``doubleqdq/``, ``propagation/``, ``where/`` and ``matmuladd/`` groups, with the default
  config and with ``session.qdqisint8allowed=1``: its pass alone (every other Level1 transformer and rule disabled
  on both sides) and the whole BASIC level must come out byte-identical to ORT's (tier P), with ORT's log lines.
* Every corpus model on which ORT's own BASIC log shows one of the four passes modifying the graph, under both
  configs, each firing pass alone and the whole level: byte-identical too, with ORT's log lines.
* The arithmetic of DoubleQDQPairsRemover and the shared QDQ predicates, and the pass switches.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest

from fixtures.handbuilt import doubleqdq, matmuladd, propagation, where
from qdqopt.compare import compare_level
from qdqopt.graph import load_model
from qdqopt.levels import LEVEL1_RULES, PASSES
from qdqopt.passes.double_qdq import new_scale_and_zero_point
from qdqopt.passes.qdq_util import is_qdq_pair_supported, is_scalar_arg, q_zero_point_type
from qdqopt.reference import run_reference
from tests.conftest import CORPUS, corpus_id, corpus_models, ort_accepts

CONFIGS = {"default": {}, "int8": {"session.qdqisint8allowed": "1"}}
GROUPS = {
    doubleqdq.GROUP.prefix: ("DoubleQDQPairsRemover", doubleqdq.GROUP),
    propagation.GROUP.prefix: ("QDQPropagationTransformer", propagation.GROUP),
    where.GROUP.prefix: ("WhereDummyDq", where.GROUP),
    matmuladd.GROUP.prefix: ("MatMulAddFusion", matmuladd.GROUP),
}
MINE = tuple(name for name, _ in GROUPS.values())
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


# ---------------------------------------------------------------------------------------------------- fixtures
def _fixture_params() -> list[object]:
    params: list[object] = []
    for pass_name, group in GROUPS.values():
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


@pytest.mark.parametrize(("name", "pass_name", "config"), _fixture_params())
def test_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    model = _fixture(name)
    _assert_like_ort(model, CONFIGS[config], _alone(pass_name))
    _assert_like_ort(model, CONFIGS[config], [])


def test_fixture_groups_exercise_the_passes() -> None:
    """Most cases change the graph in ORT (so a pass that did nothing would fail them), some must not."""
    for pass_name, group in GROUPS.values():
        fired = [
            case.name
            for case in group.cases
            if any(t.name == pass_name and t.modified for t in run_reference(_fixture(case.name), "basic").trace)
        ]
        assert len(fired) >= len(group.cases) // 2, (pass_name, fired)
        assert len(fired) < len(group.cases), (pass_name, "no case where the pass must leave the graph alone")


def test_matmuladd_level2_drops_attention_preservation() -> None:
    """The Level2 instance fuses the Attention-like MatMul+Adds that the Level1 instance keeps."""
    model = _fixture("matmuladd/attention_pattern")
    basic = run_reference(model, "basic", disabled=_alone("MatMulAddFusion")).model
    assert sum(n.op_type == "Gemm" for n in basic.graph.node) == 0
    comp = compare_level(model, "extended", disabled=_alone("MatMulAddFusion"), isolate=True)
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines
    assert comp.ours is not None and sum(n.op_type == "Gemm" for n in comp.ours.graph.node) == 4


def test_double_qdq_remover_switch() -> None:
    """``session.disable_double_qdq_remover=1`` unregisters the pass on both sides."""
    model = _fixture("doubleqdq/u8_unequal")
    config = {"session.disable_double_qdq_remover": "1"}
    comp = compare_level(model, "basic", config=config, disabled=_alone("DoubleQDQPairsRemover"), isolate=True)
    assert not any("DoubleQDQPairsRemover" in line for line in comp.ours_lines)
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def test_quant_qdq_switch() -> None:
    """``session.disable_quant_qdq=1`` unregisters QDQPropagation and WhereDummyDq."""
    config = {"session.disable_quant_qdq": "1"}
    for name in ("propagation/t5b_fanout_and_graph_output", "where/t11a_u8_negative"):
        comp = compare_level(_fixture(name), "basic", config=config, isolate=True)
        assert not any(p in line for line in comp.ours_lines for p in ("QDQPropagation", "WhereDummyDq"))
        assert comp.report.holds("P"), "\n".join(comp.report.lines())


# ---------------------------------------------------------------------------------------------------- corpus
@functools.cache
def _firing_corpus() -> list[tuple[Path, str, tuple[str, ...]]]:
    """(model, config, passes) for every corpus model and config where ORT's BASIC log shows one of the four."""
    found = []
    for path in corpus_models():
        if not ort_accepts(path):
            continue
        for key, config in CONFIGS.items():
            try:
                trace = run_reference(path, "basic", config=config).trace
            except Exception:  # ORT accepts it at DISABLE_ALL only
                continue
            fired = tuple(sorted({t.name for t in trace if t.modified and t.name in MINE}))
            if fired:
                found.append((path, key, fired))
    return found


def _corpus_params() -> list[object]:
    if not CORPUS.is_dir():
        return [pytest.param(None, "", (), marks=pytest.mark.skip(reason=f"no corpus at {CORPUS}"))]
    return [pytest.param(p, key, fired, id=f"{corpus_id(p)}-{key}") for p, key, fired in _firing_corpus()]


@pytest.mark.parametrize(("path", "config", "fired"), _corpus_params())
def test_corpus_model_where_the_passes_fire(path: Path, config: str, fired: tuple[str, ...]) -> None:
    for name in fired:
        _assert_like_ort(str(path), CONFIGS[config], _alone(name))
    _assert_like_ort(str(path), CONFIGS[config], [])


def test_corpus_has_firing_models() -> None:
    if not CORPUS.is_dir():
        pytest.skip("no corpus")
    fired = {name for _, _, names in _firing_corpus() for name in names}
    assert {"DoubleQDQPairsRemover", "QDQPropagationTransformer"} <= fired


# ---------------------------------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize(
    ("params", "dtype", "expected"),
    [  # ORT 1.32's results, from shared/spec/experiments/t4_doubleqdq.txt
        ((0.1, 128, 0.2, 128), onnx.TensorProto.UINT8, (0.10000000149011612, 128)),
        ((0.02, -5, 0.03, 7), onnx.TensorProto.INT8, (0.019999999552965164, -5)),
        ((0.013, 3, 0.011, -17), onnx.TensorProto.INT8, (0.01099999900907278, -17)),
    ],
)
def test_new_scale_and_zero_point(
    params: tuple[float, int, float, int], dtype: int, expected: tuple[float, int]
) -> None:
    scale, zp = new_scale_and_zero_point(*params, dtype)
    assert scale == np.float32(expected[0])
    assert zp == expected[1]


def test_zero_point_rounds_half_away_from_zero() -> None:
    """``qmin - real_min / S`` is exactly 2.5 and -102.5 here: std::round gives 3 and -103 (banker's 2 and -102)."""
    assert new_scale_and_zero_point(0.5, 1, 0.5, 154, onnx.TensorProto.UINT8) == (np.float32(0.2), 3)
    scale, zp = new_scale_and_zero_point(0.5, -127, 0.5, 118, onnx.TensorProto.INT8)
    assert zp == -103 and scale == np.float32(5.0) / np.float32(255.0)


def test_qdq_predicates() -> None:
    m = load_model(_fixture("doubleqdq/equal_values_other_names"))
    g = m.graph
    q1, dq1, q2, dq2 = (n for n in g.nodes() if n.op_type in ("QuantizeLinear", "DequantizeLinear"))
    assert is_qdq_pair_supported(g, q1, dq1) and is_qdq_pair_supported(g, q2, dq2)
    assert is_qdq_pair_supported(g, q1, dq2)  # equal values under other names pass
    assert is_scalar_arg(g, "s1") and not is_scalar_arg(g, "x")
    assert q_zero_point_type(g, q1) == onnx.TensorProto.UINT8
    m = load_model(_fixture("doubleqdq/first_pair_mismatch"))
    q1, dq1 = (n for n in m.graph.nodes() if n.name in ("Q1", "DQ1"))
    assert not is_qdq_pair_supported(m.graph, q1, dq1)
