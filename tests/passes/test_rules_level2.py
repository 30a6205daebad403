"""The Level2 rewrite rules ReluQuantRewrite and ClipQuantRewrite (``qdqopt/passes/rules_level2.py``) against
ORT 1.32, live.

* Their ``level2_small/`` fixtures (``relu_*``, ``clip_*``): a full EXTENDED session, both configs, and the rule alone
  (:func:`tests.passes._helpers.level2_small.check_fixture_full_extended`): ORT's trace and bytes (tier P).
* Mutations (int16 zero points treated as "any value", no FLT_EPSILON slack) must make the comparison fail.

The corpus models where they fire: ``tests/test_level2_small.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from qdqopt.passes import rules_level2
from tests.passes._helpers.level2_small import _fixtures_of, _holds, check_fixture_full_extended


def test_mutation_int16_relu_zp(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/relu_int16_0")
    monkeypatch.delitem(rules_level2._QRANGE, onnx.TensorProto.INT16)
    assert not _holds("level2_small/relu_int16_0")


def test_mutation_clip_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/clip_int8_sym_removed")
    monkeypatch.setattr(rules_level2, "FLT_EPSILON", np.float32(-1.0))
    assert not _holds("level2_small/clip_int8_sym_removed")


@pytest.mark.parametrize("name", _fixtures_of("ReluQuantRewrite", "ClipQuantRewrite"))
def test_fixture_full_extended(name: str) -> None:
    check_fixture_full_extended(name)
