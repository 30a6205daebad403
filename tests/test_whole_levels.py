"""Differential: LAYOUT and ALL as ORT runs them, against real ORT, on every corpus model ORT accepts and every fixture.

ORT runs as a user runs it: nothing disabled on either side, no pass declined by qdqopt, in the default config and
with ``session.qdqisint8allowed=1``. qdqopt's file must be byte-identical to ORT's (tier P, so X) and its trace must
be ORT's log line for line.

One exception, ORT's own doing: where NchwcTransformer ends with two or more ``ReorderOutput`` nodes, ORT creates
them in the iteration order of a hash map keyed by pointers, which changes from session to session. There the
structure (tier S) and the trace must hold, and the test shows the randomness: over a dozen more sessions ORT's own
output changes (or takes qdqopt's order). A session that ORT itself cannot create must fail in qdqopt too.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pytest

import fixtures
from qdqopt.api import run
from qdqopt.compare import compare_level
from qdqopt.errors import QdqoptError, ReferenceError
from qdqopt.reference import run_reference
from tests.conftest import corpus_params, final_reorder_outputs, fixture_model, fixture_names, ort_accepts

CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
RUNS = [(level, config) for level in ("layout", "all") for config in ("default", "int8-allowed")]

Model = Path | onnx.ModelProto


def _check(model: Model, level: str, config: dict[str, str]) -> None:
    try:
        comp = compare_level(model, level, config=config)  # ORT as a user runs it: nothing disabled on either side
    except ReferenceError:  # ORT cannot create this session: qdqopt must fail too
        with pytest.raises(QdqoptError):
            run(model, level, config=config)
        return
    except QdqoptError:  # qdqopt failed: only right where ORT fails too
        with pytest.raises(ReferenceError):
            run_reference(model, level, config=config)
        return
    assert not comp.isolated and not comp.ort_disabled
    assert not comp.unsupported, comp.unsupported
    assert comp.ours_lines == comp.ort_lines, f"trace differs\nours {comp.ours_lines}\nORT  {comp.ort_lines}"
    if comp.report.holds("P"):
        return
    assert final_reorder_outputs(comp.ort) >= 2, "\n".join(comp.report.lines())
    # ORT makes its final ReorderOutputs in an order it draws at random: the structure must hold, and ORT's own
    # output must be shown to change from session to session (or to take qdqopt's order on some run)
    assert comp.report.holds("S"), "\n".join(comp.report.lines())
    assert _ort_varies(model, level, config, comp.ort, comp.ours), "ORT gave the same other output on every run"


_SESSION = """
import hashlib, json, sys
import onnx
from qdqopt.reference import run_reference
model, level, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
saved = run_reference(onnx.load(model), level, config=config, capture_log=False).model
print(hashlib.sha256(saved.SerializeToString()).hexdigest())
"""


def _ort_varies(
    model: Model, level: str, config: dict[str, str], first: onnx.ModelProto | None, ours: onnx.ModelProto | None
) -> bool:
    """Whether, over a dozen more ORT sessions in fresh processes (the order follows heap addresses, which a new
    process lays out anew), ORT's output differs from ``first`` or equals qdqopt's."""
    assert first is not None and ours is not None
    seen = hashlib.sha256(first.SerializeToString()).hexdigest()
    mine = hashlib.sha256(ours.SerializeToString()).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model if isinstance(model, onnx.ModelProto) else onnx.load(model), path)
        for _ in range(12):
            proc = subprocess.run(
                [sys.executable, "-c", _SESSION, str(path), level, json.dumps(config)],
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            )
            digest = proc.stdout.strip().splitlines()[-1]
            if digest != seen or digest == mine:
                return True
    return False


@pytest.mark.parametrize(("level", "config"), RUNS, ids=[f"{lv}-{c}" for lv, c in RUNS])
@pytest.mark.parametrize("path", corpus_params())
def test_corpus(path: Path, level: str, config: str) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check(path, level, CONFIGS[config])


@pytest.mark.parametrize(("level", "config"), RUNS, ids=[f"{lv}-{c}" for lv, c in RUNS])
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures(name: str, level: str, config: str) -> None:
    if level in fixtures.get(name).ort_crashes:
        pytest.skip("ORT 1.32 itself crashes creating this session (the fixture says why; test_fixtures checks it)")
    _check(fixture_model(name), level, CONFIGS[config])
