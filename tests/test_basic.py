"""Differential: qdqopt at ORT_ENABLE_BASIC against real ORT, on every corpus model ORT accepts and every fixture.

* The whole level, ORT as it is except ``TransposeOptimizer`` (LAYOUT work), disabled on both sides: the outputs
  must be equal at tier X and P, and the trace must be the lines ORT logs. A Level1 pass qdqopt does not implement
  (GeluFusionL1, LayerNormFusionL1, SliceConcatToSpaceToDepthFusion: none fires on these models) runs in ORT and is
  skipped by qdqopt, so it would show up here the day a model makes it fire.
* Each implemented Level1 pass alone: wherever ORT's own log (full BASIC session) shows the pass modifying the
  model, ORT and qdqopt run with every *other* Level1 transformer and rule disabled, and must agree at tier X.
  A rule is isolated inside ``Level1_RuleBasedTransformer`` (the transformer stays, the other rules go).

ORT's answers are computed live from the installed onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from qdqopt.api import run
from qdqopt.compare import compare_level
from qdqopt.errors import QdqoptError
from qdqopt.levels import PASSES
from qdqopt.passes import RULES, TRANSFORMERS
from qdqopt.reference import run_reference
from tests.conftest import corpus_params, fixture_model, fixture_names, ort_accepts

CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
LAYOUT_WORK = ["TransposeOptimizer"]
L1_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L1" and not p.rules]
L1_RULES = [r.name for p in PASSES if p.name == "Level1_RuleBasedTransformer" for r in p.rules]

Model = Path | onnx.ModelProto


def _isolated(name: str) -> list[str]:
    """Every Level1 transformer and rule except ``name`` (a rule keeps its rule-based transformer)."""
    if name in L1_RULES:
        return [*L1_TRANSFORMERS, *(r for r in L1_RULES if r != name)]
    return [t for t in L1_TRANSFORMERS if t != name] + ["Level1_RuleBasedTransformer"]


def _fired(model: Model, config: dict[str, str]) -> frozenset[str]:
    """Level1 transformers ORT's own BASIC session reports as modifying the model."""
    trace = run_reference(model, "basic", config=config).trace
    return frozenset(t.name for t in trace if t.modified)


def _rule_fires(model: Model, config: dict[str, str], rule: str) -> bool:
    disabled = _isolated(rule)
    trace = run_reference(model, "basic", config=config, disabled=disabled).trace
    return any(t.modified and t.name == "Level1_RuleBasedTransformer" for t in trace)


def _ort_accepts_session(model: Model, config: dict[str, str]) -> bool:
    try:
        run_reference(model, "basic", config=config, disabled=LAYOUT_WORK, capture_log=False)
    except QdqoptError:
        return False
    return True


def _check_level(model: Model, config: dict[str, str]) -> None:
    if not _ort_accepts_session(model, config):
        with pytest.raises(QdqoptError):  # ORT cannot create the session: qdqopt must fail too
            run(model, "basic", config=config, disabled=LAYOUT_WORK)
        return
    # as ORT runs, but for TransposeOptimizer; a Level1 pass qdqopt lacks would show up as a difference
    comp = compare_level(model, "basic", config=config, disabled=LAYOUT_WORK)
    assert comp.report.holds("X"), "\n".join(comp.report.lines())
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines


def _check_alone(model: Model, config: dict[str, str]) -> None:
    if not _ort_accepts_session(model, config):
        pytest.skip("ORT cannot create this session (the level test checks that qdqopt fails too)")
    fired = _fired(model, config)
    names = [t for t in L1_TRANSFORMERS if t in fired and t in TRANSFORMERS]
    if "Level1_RuleBasedTransformer" in fired:
        names += [r for r in L1_RULES if r in RULES and _rule_fires(model, config, r)]
    if not names:
        pytest.skip("no implemented Level1 pass modifies this model")
    failures = []
    for name in names:
        comp = compare_level(model, "basic", config=config, disabled=_isolated(name), isolate=True)
        if not comp.report.holds("X") or comp.ours_lines != comp.ort_lines:
            failures.append(f"{name} alone:\n  " + "\n  ".join(comp.report.lines()))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_basic(path: Path, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check_level(path, CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures_basic(name: str, config: str) -> None:
    _check_level(fixture_model(name), CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_each_pass_alone(path: Path, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check_alone(path, CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures_each_pass_alone(name: str, config: str) -> None:
    _check_alone(fixture_model(name), CONFIGS[config])
