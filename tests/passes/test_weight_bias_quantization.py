"""WeightBiasQuantization (``qdqopt/passes/weight_bias_quantization.py``) against ORT 1.32, computed live.

* The ``wbq/`` fixtures at BASIC, default config and ``session.qdqisint8allowed=1``, and the pass alone on every
  fixture of ``tests/passes/_helpers/wbq_folding.py``: ORT's log and ORT's bytes (tier P, value_info and graph I/O
  types aside).
* The weight's scale and zero point bit for bit; initializers removed inside a subgraph.

The corpus models: ``tests/test_wbq_folding_cse.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest

from qdqopt.compare import compare_level
from qdqopt.passes.weight_bias_quantization import weight_quantization_parameters
from qdqopt.reference import run_reference
from tests.passes._helpers import knownx
from tests.passes._helpers.wbq_folding import CONFIGS, FIXTURES, _fixture, _fixtures_of, _only, assert_matches


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", _fixtures_of("WeightBiasQuantization"))
def test_fixture_matches_ort(name: str, config: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=CONFIGS[config], isolate=True), "P")


def test_weight_quantization_parameters_equal_ort() -> None:
    """``GetQuantizationParameter<int8>``: the scale and zp ORT writes for a fp32 Conv weight, bit for bit."""
    model = _fixture("wbq/conv_fp32_weight_and_bias")
    weight = next(t for t in model.graph.initializer if t.name == "W")
    saved = run_reference(model, "basic", capture_log=False).model
    folded: Mapping[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in saved.graph.initializer}
    scale, zp = weight_quantization_parameters(onnx.numpy_helper.to_array(weight))
    assert folded["convF_weight_scale"].tobytes() == np.float32(scale).tobytes()
    assert folded["convF_weight_zp"].tobytes() == np.int8(zp).tobytes()


def test_subgraph_initializer_order() -> None:
    """Initializers removed inside a subgraph are swapped with the last one, as in the main graph."""
    assert_matches(compare_level(_fixture("wbq/subgraph_conv_outer_bias"), "basic", isolate=True), "P")


@pytest.mark.parametrize("alone", ["WeightBiasQuantization"])
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_pass_alone_matches_ort(name: str, alone: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", disabled=_only(alone), isolate=True), "P")


# ------------------------------------------------------------------------------- issue #12: found by qdqopt fuzz
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_wbq_"))
def test_knownx_fp16_bias_dq_as_ort(name: str, level: str, config: str) -> None:
    """An fp16 bias DQ of the ONNX domain before opset 19: ORT's Resolve rejects it, and qdqopt's too."""
    knownx.assert_exact(name, level, config)


def test_knownx_fp16_bias_dq_type_check_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.api import run
    from qdqopt.errors import ModelError
    from qdqopt.graph.core import Graph
    from tests.conftest import fixture_model

    assert knownx.ort_modified("knownx/fz_wbq_fp16_bias_opset15", "basic", "default") is None
    assert "WeightBiasQuantization" in (
        knownx.ort_modified("knownx/fz_wbq_fp16_bias_opset19", "basic", "default") or ()
    )
    with pytest.raises(ModelError, match=r"Type 'tensor\(float16\)' of input parameter \(conv_bias_scale\)"):
        run(fixture_model("knownx/fz_wbq_fp16_bias_opset15"), "basic")
    monkeypatch.setattr(Graph, "_check_qlinear_input_types", lambda self: None)
    assert run(fixture_model("knownx/fz_wbq_fp16_bias_opset15"), "basic").model is not None
