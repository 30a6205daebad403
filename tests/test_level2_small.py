"""ReluQuantRewrite, ClipQuantRewrite, QDQS8ToU8Transformer and QDQFinalCleanupTransformer together, against ORT
1.32, live: what no one of them pins alone (their own tests: ``tests/passes/test_rules_level2.py``,
``test_qdq_s8_to_u8.py``, ``test_qdq_final_cleanup.py``, on the ``level2_small/`` fixtures).

* Corpus models on which ORT's own EXTENDED log shows these passes modifying the model: same trace, tier P.
* The ``level2_small/`` fixture group is there.
"""

from __future__ import annotations

import pytest

from qdqopt.compare import compare_level
from tests.conftest import CORPUS
from tests.passes._helpers.level2_small import FIXTURES, INT8_ALLOWED, _assert_p

#: Corpus models (relative to the shared corpus) where ORT's EXTENDED log shows these passes modifying the model.
CORPUS_CASES = [
    "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx",
    "ort_testdata/onnxruntime/test/testdata/conv_qdq_s8s8.onnx",
    "ort_testdata/onnxruntime/test/testdata/conv_qdq_s8s8_perchannel.onnx",
    "ort_testdata/onnxruntime/test/testdata/test_conv_follow_convtrans_s8.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/fusion/qdq_fusion_int8.onnx",
    "third_party_fp32_qdq/light_shufflenet.s8s8_pc_sym.qdq.onnx",
    "third_party_fp32_qdq/light_shufflenet.u8s8_pc.qdq.onnx",
    "third_party_fp32_qdq/light_shufflenet.u8u8_pt.qdq.onnx",
    "third_party_fp32_qdq/light_squeezenet.s8s8_pc_sym.qdq.onnx",
    "third_party_fp32_qdq/ultraface_rfb320.s8s8_pc_sym.qdq.onnx",
    "tract/qlstm_3-2-3_T3_S1/model.onnx",
    "tract/qrelu_1/model.onnx",
    "tract/qrelu_2/model.onnx",
    "tract/qsigmoid_1/model.onnx",
    "tract/qsigmoid_2/model.onnx",
    "tract/qtanh_1/model.onnx",
    "tract/qtanh_2/model.onnx",
    "tract/qtdnn_10x5_101_i32_biases/model.onnx",
]


def test_fixture_group_is_registered() -> None:
    assert len(FIXTURES) >= 40


@pytest.mark.parametrize("rel", CORPUS_CASES)
def test_corpus(rel: str) -> None:
    path = CORPUS / rel
    if not path.is_file():
        pytest.skip(f"corpus model {rel} not found")
    for cfg in ({}, INT8_ALLOWED):
        _assert_p(compare_level(path, "extended", config=cfg, isolate=True), f"{rel} {cfg}")
