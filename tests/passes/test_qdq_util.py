"""The shared QDQ predicates of ``qdqopt/passes/qdq_util.py`` (DoubleQDQPairsRemover, the QDQ selectors,
QDQFinalCleanupTransformer and GatherSliceToSplitFusion use them), on ``doubleqdq/`` fixtures."""

from __future__ import annotations

import onnx

from qdqopt.graph import load_model
from qdqopt.passes.qdq_util import is_qdq_pair_supported, is_scalar_arg, q_zero_point_type
from tests.passes._helpers.qdq_level1 import _fixture


def test_qdq_predicates() -> None:
    m = load_model(_fixture("doubleqdq/equal_values_other_names"))
    g = m.graph
    q1, dq1, q2, dq2 = (n for n in g.nodes() if n.op_type in ("QuantizeLinear", "DequantizeLinear"))
    assert is_qdq_pair_supported(g, q1, dq1) and is_qdq_pair_supported(g, q2, dq2)
    assert is_qdq_pair_supported(g, q1, dq2)  # equal values under other names pass
    assert is_scalar_arg(g, "s1") and not is_scalar_arg(g, "x")
    assert q_zero_point_type(g, q1) == onnx.TensorProto.UINT8
    m = load_model(_fixture("doubleqdq/first_pair_mismatch"))
    q1, dq1 = (n for n in m.graph.nodes() if n.name in ("Q1", "DQ1"))
    assert not is_qdq_pair_supported(m.graph, q1, dq1)
