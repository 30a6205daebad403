"""MatMulIntegerToFloatFusion (``qdqopt/passes/matmul_integer_to_float.py``) against ORT 1.32, live: with its bias
shape check always false, the first firing corpus model where ORT writes a MatMulIntegerToFloat with a bias must no
longer match. The whole EXTENDED level and the pass alone on the corpus models where it fires:
``tests/test_dynamic_quant_fusions.py``.
"""

from __future__ import annotations

import pytest

from qdqopt.passes import matmul_integer_to_float
from tests.passes._helpers.dynamic_quant import LAYOUT_WORK, _check, _holds, _with_bias


def test_mutation_bias_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    path = _with_bias("MatMulIntegerToFloat", 6)
    assert _holds(_check(path, {}, LAYOUT_WORK))
    monkeypatch.setattr(matmul_integer_to_float, "_bias_shape_ok", lambda shape: False)
    assert not _holds(_check(path, {}, LAYOUT_WORK))
