"""DoubleQDQPairsRemover, QDQPropagationTransformer, WhereDummyDq and MatMulAddFusion together, against ORT,
computed live: what no one of the four pins alone (each pass's own tests are ``tests/passes/test_double_qdq.py``,
``test_qdq_propagation.py``, ``test_where_dummy_dq.py`` and ``test_matmul_add_fusion.py``).

* Every corpus model on which ORT's own BASIC log shows one of the four passes modifying the graph, under both
  configs (default, ``session.qdqisint8allowed=1``), each firing pass alone and the whole level: byte-identical to
  ORT's (tier P), with ORT's log lines.
* The four fixture groups exercise their passes; the ``session.disable_quant_qdq`` switch.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from qdqopt.compare import compare_level
from qdqopt.reference import run_reference
from tests.conftest import CORPUS, corpus_id, corpus_models, ort_accepts
from tests.passes._helpers.qdq_level1 import CONFIGS, GROUPS, _alone, _assert_like_ort, _fixture

MINE = tuple(name for name, _ in GROUPS.values())


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
