"""DoubleQDQPairsRemover (``qdqopt/passes/double_qdq.py``) against ORT, computed live.

* Every ``doubleqdq/`` fixture, both configs: the pass alone and the whole BASIC level give ORT's model byte for byte
  (tier P) and ORT's log lines (:func:`check_fixture_alone_and_together`).
* ``session.disable_double_qdq_remover=1`` unregisters the pass on both sides.
* The arithmetic of DoubleQDQPairsRemover (the new scale and zero point).

The corpus models where the pass fires, and what DoubleQDQPairsRemover, QDQPropagationTransformer,
WhereDummyDq and MatMulAddFusion do together: ``tests/test_doubleqdq_propagation_where_matmuladd.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from qdqopt.compare import compare_level
from qdqopt.passes.double_qdq import new_scale_and_zero_point
from tests.passes._helpers.qdq_level1 import _alone, _fixture, _fixture_params, check_fixture_alone_and_together


def test_double_qdq_remover_switch() -> None:
    """``session.disable_double_qdq_remover=1`` unregisters the pass on both sides."""
    model = _fixture("doubleqdq/u8_unequal")
    config = {"session.disable_double_qdq_remover": "1"}
    comp = compare_level(model, "basic", config=config, disabled=_alone("DoubleQDQPairsRemover"), isolate=True)
    assert not any("DoubleQDQPairsRemover" in line for line in comp.ours_lines)
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


@pytest.mark.parametrize(
    ("params", "dtype", "expected"),
    [  # ORT 1.32's results, from shared/spec/experiments/t4_doubleqdq.txt
        ((0.1, 128, 0.2, 128), onnx.TensorProto.UINT8, (0.10000000149011612, 128)),
        ((0.02, -5, 0.03, 7), onnx.TensorProto.INT8, (0.019999999552965164, -5)),
        ((0.013, 3, 0.011, -17), onnx.TensorProto.INT8, (0.01099999900907278, -17)),
    ],
)
def test_new_scale_and_zero_point(
    params: tuple[float, int, float, int], dtype: int, expected: tuple[float, int]
) -> None:
    scale, zp = new_scale_and_zero_point(*params, dtype)
    assert scale == np.float32(expected[0])
    assert zp == expected[1]


def test_zero_point_rounds_half_away_from_zero() -> None:
    """``qmin - real_min / S`` is exactly 2.5 and -102.5 here: std::round gives 3 and -103 (banker's 2 and -102)."""
    assert new_scale_and_zero_point(0.5, 1, 0.5, 154, onnx.TensorProto.UINT8) == (np.float32(0.2), 3)
    scale, zp = new_scale_and_zero_point(0.5, -127, 0.5, 118, onnx.TensorProto.INT8)
    assert zp == -103 and scale == np.float32(5.0) / np.float32(255.0)


@pytest.mark.parametrize(("name", "pass_name", "config"), _fixture_params("DoubleQDQPairsRemover"))
def test_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    check_fixture_alone_and_together(name, pass_name, config)
