"""Differential: qdqopt at ORT_ENABLE_EXTENDED against real ORT, on every corpus model ORT accepts and every fixture.

* The whole level, ORT as it is except the two transpose optimizers (LAYOUT work), disabled on both sides: the
  outputs must be equal at tier X and P and the trace must be the lines ORT logs. Where ORT's own log shows a pass
  qdqopt does not implement yet modifying the model, that pass is disabled on both sides too, the rest must still
  be exact, and the case is reported as an expected failure (xfail) that names the missing pass.
* Each implemented Level2 transformer and rule alone: wherever ORT's own log (full EXTENDED session) shows it
  modifying the model, ORT and qdqopt run with every *other* Level2 transformer and rule disabled (Level1 stays as
  it is), and must agree at tier X with the same trace.

A session that ORT itself cannot create is expected to fail in qdqopt too.
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
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]
L2_RULES = [r.name for p in PASSES if p.name == "Level2_RuleBasedTransformer" for r in p.rules]

Model = Path | onnx.ModelProto


def _isolated(name: str) -> list[str]:
    """Every Level2 transformer and rule except ``name`` (a rule keeps its rule-based transformer)."""
    if name in L2_RULES:
        return [*LAYOUT_WORK, *L2_TRANSFORMERS, *(r for r in L2_RULES if r != name)]
    return [*LAYOUT_WORK, *(t for t in L2_TRANSFORMERS if t != name), "Level2_RuleBasedTransformer"]


def _ort_trace(model: Model, config: dict[str, str], disabled: list[str]) -> list[tuple[str, bool]] | None:
    try:
        return [(t.name, t.modified) for t in run_reference(model, "extended", config=config, disabled=disabled).trace]
    except QdqoptError:
        return None


def _implemented(name: str) -> bool:
    spec = next((p for p in PASSES if p.name == name and p.stage in ("L1", "L2")), None)
    if spec is not None and spec.rules:
        return all(r.name in RULES for r in spec.rules)
    return name in TRANSFORMERS


def _check_level(model: Model, config: dict[str, str]) -> None:
    trace = _ort_trace(model, config, LAYOUT_WORK)
    if trace is None:
        with pytest.raises(QdqoptError):  # ORT cannot create the session: qdqopt must fail too
            run(model, "extended", config=config, disabled=LAYOUT_WORK)
        return
    missing = sorted({name for name, modified in trace if modified and not _implemented(name)})
    # as ORT runs unless ORT's log shows a pass qdqopt lacks modifying the model: then isolation mode disables it on
    # both sides, the rest must still be exact, and the case is reported as an expected failure naming the pass
    comp = compare_level(model, "extended", config=config, disabled=LAYOUT_WORK, isolate=bool(missing))
    assert comp.report.holds("X"), "\n".join(comp.report.lines())
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines
    if missing:
        pytest.xfail(f"ORT runs passes qdqopt does not implement yet: {', '.join(missing)}")


def _check_alone(model: Model, config: dict[str, str]) -> None:
    trace = _ort_trace(model, config, LAYOUT_WORK)
    if trace is None:
        pytest.skip("ORT cannot create this session")
    fired = {name for name, modified in trace if modified}
    names = [t for t in L2_TRANSFORMERS if t in fired and t in TRANSFORMERS]
    if "Level2_RuleBasedTransformer" in fired:
        for rule in L2_RULES:
            alone = _ort_trace(model, config, _isolated(rule)) or []
            if rule in RULES and ("Level2_RuleBasedTransformer", True) in alone:
                names.append(rule)
    if not names:
        pytest.skip("no implemented Level2 pass modifies this model")
    failures = []
    for name in names:
        comp = compare_level(model, "extended", config=config, disabled=_isolated(name))
        if not comp.report.holds("X") or comp.ours_lines != comp.ort_lines:
            failures.append(f"{name} alone:\n  " + "\n  ".join(comp.report.lines()))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_extended(path: Path, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check_level(path, CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures_extended(name: str, config: str) -> None:
    _check_level(fixture_model(name), CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_each_level2_pass_alone(path: Path, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check_alone(path, CONFIGS[config])


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures_each_level2_pass_alone(name: str, config: str) -> None:
    _check_alone(fixture_model(name), CONFIGS[config])
