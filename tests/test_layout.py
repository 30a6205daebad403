"""Differential: qdqopt at ORT_ENABLE_LAYOUT and ORT_ENABLE_ALL against real ORT, on every corpus model ORT accepts
and every fixture.

LAYOUT adds ORT's Level3: NchwcTransformer and ConvAddActivationFusion (implemented), NhwcTransformer and the two
transpose optimizers (not yet); ALL adds Level4. The passes qdqopt lacks are disabled on both sides (``compare_level``
without ``strict``, so the comparison says which); everything else must come out byte-identical to ORT's file
(tier P) with ORT's log lines, LAYOUT with the default config and ``session.qdqisint8allowed=1``, ALL with the
default config. One exception, ORT's own doing: where NchwcTransformer ends with two or more ``ReorderOutput``
nodes, ORT creates them in the iteration order of a hash map keyed by pointers, which changes from run to run, so
there the structure (tier S) and the trace must hold, and P is not required.

A session that ORT itself cannot create must fail in qdqopt too.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from qdqopt.compare import compare_level
from qdqopt.errors import QdqoptError
from qdqopt.reference import run_reference
from tests.conftest import corpus_params, final_reorder_outputs, fixture_model, fixture_names, ort_accepts

CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
RUNS = [("layout", "default"), ("layout", "int8-allowed"), ("all", "default")]

Model = Path | onnx.ModelProto


def _check(model: Model, level: str, config: dict[str, str]) -> None:
    try:
        run_reference(model, level, config=config)
    except QdqoptError:
        with pytest.raises(QdqoptError):
            compare_level(model, level, config=config)
        return
    comp = compare_level(model, level, config=config)
    assert comp.ours_lines == comp.ort_lines, f"trace differs\nours {comp.ours_lines}\nORT  {comp.ort_lines}"
    tier = "S" if final_reorder_outputs(comp.ort) >= 2 else "P"
    assert comp.report.holds(tier), "\n".join(comp.report.lines())


@pytest.mark.parametrize(("level", "config"), RUNS, ids=[f"{lv}-{c}" for lv, c in RUNS])
@pytest.mark.parametrize("path", corpus_params())
def test_corpus(path: Path, level: str, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check(path, level, CONFIGS[config])


@pytest.mark.parametrize(("level", "config"), RUNS, ids=[f"{lv}-{c}" for lv, c in RUNS])
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures(name: str, level: str, config: str) -> None:
    _check(fixture_model(name), level, CONFIGS[config])
