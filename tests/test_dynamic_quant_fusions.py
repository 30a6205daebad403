"""MatMulIntegerToFloatFusion and DynamicQuantizeMatMulFusion together, against ORT 1.32, live (each pass's own
tests: ``tests/passes/test_matmul_integer_to_float.py``, ``tests/passes/test_dynamic_quantize_matmul.py``).

* The firing models are found from ORT's own log: every corpus model ORT accepts whose EXTENDED trace shows one of
  the two passes modifying it (:func:`tests.passes._helpers.dynamic_quant.firing_models`).
* On each, both configs (default, ``session.qdqisint8allowed=1``), the transpose optimizers (LAYOUT work) disabled
  on both sides: the whole EXTENDED level must give ORT's trace and ORT's saved model byte for byte (tier P); and
  each pass that fires, alone (every other Level2 transformer and rule disabled on both sides).
"""

from __future__ import annotations

import pytest

from qdqopt.passes import TRANSFORMERS
from tests.passes._helpers.dynamic_quant import (
    CONFIGS,
    L2_NAMES,
    LAYOUT_WORK,
    OWN,
    _assert_p,
    _check,
    _ort_modified,
    firing_models,
)


def test_passes_registered() -> None:
    for name in OWN:
        assert name in TRANSFORMERS


def test_firing_models_found() -> None:
    models = firing_models()
    if not models:
        pytest.skip("shared corpus not found")
    fired = set().union(*(_ort_modified(p) for p in models))
    assert set(OWN) <= fired
    assert len(models) >= 15


def test_full_extended_and_alone() -> None:
    models = firing_models()
    if not models:
        pytest.skip("shared corpus not found")
    for path in models:
        for cfg in CONFIGS:
            _assert_p(_check(path, cfg, LAYOUT_WORK), f"{path.name} {cfg}")
        for own in OWN:
            if own not in _ort_modified(path):
                continue
            alone = [n for n in L2_NAMES if n != own]
            for cfg in CONFIGS:
                _assert_p(_check(path, cfg, [*LAYOUT_WORK, *alone]), f"{path.name} {cfg} [{own} alone]")
