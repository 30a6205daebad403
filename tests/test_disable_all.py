"""Differential: qdqopt at ORT_DISABLE_ALL (and with no pass at all) against real ORT, on every model ORT accepts.

ORT's answer is computed live from the installed onnxruntime. Acceptance of the foundation issue:

* with no pass at all (``session.disable_quant_qdq=1`` at level 0) the graph core round-trips as ORT saves it;
* at ORT_DISABLE_ALL, with the default config and with ``session.qdqisint8allowed=1``;

each at tier X (we also hold tier P, byte-identical serialisation, and check it: a P failure names the field).
The trace qdqopt prints must be the lines ORT logs.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from qdqopt import run
from qdqopt.diff import compare
from qdqopt.reference import run_reference
from tests.conftest import corpus_params, fixture_model, fixture_names, ort_accepts

CONFIGS = {
    "no-pass": {"session.disable_quant_qdq": "1"},
    "default": {},
    "int8-allowed": {"session.qdqisint8allowed": "1"},
}


def _check(model: Path | onnx.ModelProto, config: dict[str, str], base_dir: Path | None) -> None:
    ref = run_reference(model, 0, config=config)
    ours = run(model, 0, config=config)
    report = compare(ours.model, ref.model, base_dir=base_dir)
    assert report.holds("X"), "\n".join(report.lines())
    assert report.holds("P"), "\n".join(report.lines())
    assert ours.pipeline.ort_lines() == [str(t) for t in ref.trace]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_disable_all(path: Path, config: dict[str, str]) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects this model")
    _check(path, config, path.parent)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name", fixture_names())
def test_fixtures_disable_all(name: str, config: dict[str, str]) -> None:
    _check(fixture_model(name), config, None)
