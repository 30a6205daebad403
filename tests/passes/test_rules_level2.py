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

from qdqopt.api import run as qdqopt_run
from qdqopt.passes import rules_level2
from tests.conftest import fixture_model
from tests.passes._helpers import knownx
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


# ------------------------------------------------------------------------------- issue #12: found by qdqopt fuzz
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_clip_", "fz_relu_"))
def test_knownx_float8_and_int4_after_activation_as_ort(name: str, level: str, config: str) -> None:
    """ClipQuantRewrite and ReluQuantRewrite before a float8 / 4-bit Q, as ORT runs them (or fails)."""
    knownx.assert_exact(name, level, config)


def test_knownx_clip_f8_can_remove_node_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT fails the session only when the Clip could be removed; checking CanRemoveNode after reading the Q's range
    (the bug this fixes) makes qdqopt fail on the graph-input twin, which ORT runs."""
    assert knownx.ort_modified("knownx/fz_clip_f8_after_node", "extended", "default") is None
    assert knownx.ort_modified("knownx/fz_clip_f8_graph_input", "extended", "default") is not None
    assert not knownx.differs("knownx/fz_clip_f8_graph_input")
    monkeypatch.setattr(rules_level2, "can_remove_node", lambda graph, node: True)
    assert knownx.differs("knownx/fz_clip_f8_graph_input")


def _outputs(name: str, level: str) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }[level]
    session = ort.InferenceSession(fixture_model(name).SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8)
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize("name", ["knownx/fz_relu_f8", "knownx/fz_relu_int4", "knownx/fz_relu_uint4"])
def test_knownx_relu_removal_changes_ort_outputs(name: str) -> None:
    """The ORT finding, live: removing the Relu before a float8 or int4 Q lets negative values through (EXTENDED's
    outputs differ from DISABLE_ALL's); before a uint4 Q of zero point 0 it changes nothing. qdqopt does as ORT."""
    before, after = _outputs(name, "disable_all"), _outputs(name, "extended")
    assert (before >= 0).all()
    assert ((after < 0).any()) == (not name.endswith("uint4")), after
    ops = [n.op_type for n in qdqopt_run(fixture_model(name), "extended").model.graph.node]
    assert "Relu" not in ops
