"""ReluQuantRewrite, ClipQuantRewrite, QDQS8ToU8Transformer and QDQFinalCleanupTransformer against ORT 1.32, live.

* Fixtures ``level2_small/``: a full EXTENDED session (passes qdqopt lacks, e.g. QDQSelectorActionTransformer,
  disabled on both sides by :func:`compare_level`), with the default config and ``session.qdqisint8allowed=1``
  (S8ToU8 is then not registered), plus ``session.x64quantprecision=1`` for the S8ToU8 cases and
  ``session.enable_quant_qdq_cleanup=1`` for the cleanup cases; and each fixture's own pass alone (every other
  Level2 transformer and rule disabled on both sides). ORT's trace and the saved model byte for byte (tier P).
* Corpus models on which ORT's own EXTENDED log shows one of these passes modifying the model: same trace, tier P.
* Mutations (int16 zero points treated as "any value", no FLT_EPSILON slack, a wrong zp conversion) must make the
  comparison fail, so these tests can fail.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.passes import qdq_s8_to_u8, rules_level2
from tests.conftest import CORPUS, fixture_model, fixture_names

L2_NAMES = [p.name for p in PASSES if p.stage == "L2" and not p.rules] + [r.name for r in LEVEL2_RULES]
INT8_ALLOWED = {"session.qdqisint8allowed": "1"}

#: Fixture-name prefix -> (the pass it exercises, the extra config that matters for it).
OWN_PASS: dict[str, tuple[str, dict[str, str]]] = {
    "relu_": ("ReluQuantRewrite", {}),
    "clip_": ("ClipQuantRewrite", {}),
    "s8_": ("QDQS8ToU8Transformer", {"session.x64quantprecision": "1"}),
    "cleanup_": ("QDQFinalCleanupTransformer", {"session.enable_quant_qdq_cleanup": "1"}),
}

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

FIXTURES = [n for n in fixture_names() if n.startswith("level2_small/")]


def _own(name: str) -> tuple[str, dict[str, str]]:
    short = name.split("/", 1)[1]
    for prefix, found in OWN_PASS.items():
        if short.startswith(prefix):
            return found
    raise AssertionError(f"no pass for fixture {name}")


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def test_fixture_group_is_registered() -> None:
    assert len(FIXTURES) >= 40


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_full_extended(name: str) -> None:
    model = fixture_model(name)
    own, extra = _own(name)
    for tag, cfg in (("default", {}), ("int8", INT8_ALLOWED), ("extra", extra)):
        if tag == "extra" and not extra:
            continue
        _assert_p(compare_level(model, "extended", config=cfg, isolate=True), f"{name} [{tag}]")
    alone = [n for n in L2_NAMES if n != own]
    _assert_p(compare_level(model, "extended", config=extra, disabled=alone, isolate=True), f"{name} [{own} alone]")


@pytest.mark.parametrize("rel", CORPUS_CASES)
def test_corpus(rel: str) -> None:
    path = CORPUS / rel
    if not path.is_file():
        pytest.skip(f"corpus model {rel} not found")
    for cfg in ({}, INT8_ALLOWED):
        _assert_p(compare_level(path, "extended", config=cfg, isolate=True), f"{rel} {cfg}")


# ------------------------------------------------------------------------------------------------ mutations
def _holds(name: str, cfg: dict[str, str] | None = None) -> bool:
    return compare_level(fixture_model(name), "extended", config=cfg or {}, isolate=True).report.holds("P")


def test_mutation_int16_relu_zp(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/relu_int16_0")
    monkeypatch.delitem(rules_level2._QRANGE, onnx.TensorProto.INT16)
    assert not _holds("level2_small/relu_int16_0")


def test_mutation_clip_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/clip_int8_sym_removed")
    monkeypatch.setattr(rules_level2, "FLT_EPSILON", np.float32(-1.0))
    assert not _holds("level2_small/clip_int8_sym_removed")


def test_mutation_s8_zp_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/s8_conv_unit")
    original = qdq_s8_to_u8._raw_tensor

    def shifted(name: str, dims: list[int], data: bytes) -> onnx.TensorProto:
        if name.startswith("qdq_s8_to_u8_zp_conversion"):
            data = bytes([(data[0] + 1) & 0xFF])
        return original(name, dims, data)

    monkeypatch.setattr(qdq_s8_to_u8, "_raw_tensor", shifted)
    assert not _holds("level2_small/s8_conv_unit")
