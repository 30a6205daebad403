"""MatMulScaleFusion and MatMulNBitsFusion together, against ORT 1.32, live (each pass's own tests:
``tests/passes/test_matmul_scale_fusion.py``, ``tests/passes/test_matmul_nbits_fusion.py``).

* The corpus models where ORT's log shows one of the two passes modifying the model, at EXTENDED, both configs
  (default, ``session.qdqisint8allowed=1``), the transpose optimizers (LAYOUT work) disabled on both sides, as ORT
  runs: ORT's saved model byte for byte (tier P) and ORT's trace; each pass alone where it fires.
* Both passes are registered, and each fixture group makes its pass fire, and has cases where it does not.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from fixtures.handbuilt import matmulscale, nbits
from qdqopt.passes import TRANSFORMERS
from tests.conftest import CORPUS
from tests.passes._helpers.matmul_scale_nbits import (
    CONFIGS,
    L2_NAMES,
    LAYOUT_WORK,
    OWN,
    _alone,
    _assert_p,
    _compare,
    _fired,
)

TESTDATA = CORPUS / "ort_testdata" / "onnxruntime" / "test" / "testdata"
CORPUS_MODELS = (
    TESTDATA / "attention_past_state.u8s8.onnx",
    TESTDATA / "attention_past_state.u8u8.onnx",
    TESTDATA / "transform" / "runtime_optimization" / "matmulnbits_add.onnx",
)


@functools.cache
def _corpus_fired(path: Path) -> frozenset[str]:
    return frozenset(_fired(path, {}))


def test_passes_registered() -> None:
    for name in OWN:
        assert name in TRANSFORMERS
        assert name in L2_NAMES


def test_fixtures_exercise_both_passes() -> None:
    """The fixture groups make each pass fire, and each has cases where it does not."""
    for group, own in ((matmulscale, "MatMulScaleFusion"), (nbits, "MatMulNBitsFusion")):
        fired = [own in _fired(case.build(), {}) for case in group.GROUP.cases]
        assert any(fired) and not all(fired), own


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("path", CORPUS_MODELS, ids=lambda p: p.name)
def test_corpus_extended_and_alone(path: Path, config: str) -> None:
    if not path.is_file():
        pytest.skip(f"corpus model not found: {path}")
    fired = _corpus_fired(path)
    assert fired & set(OWN), f"{path.name}: neither pass fires in ORT any more"
    cfg = CONFIGS[config]
    _assert_p(_compare(path, cfg, LAYOUT_WORK), f"{path.name} {config}")
    for own in OWN:
        if own in fired:
            _assert_p(_compare(path, cfg, _alone(own)), f"{path.name} {config} [{own} alone]")
