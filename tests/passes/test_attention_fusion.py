"""AttentionFusion (``qdqopt/passes/attention_fusion.py``) against ORT 1.32, live.

* Every ``attention/`` fixture at BASIC, EXTENDED and ALL, both configs (default, ``session.qdqisint8allowed=1``),
  nothing disabled on either side: ORT's saved model at tier P and ORT's trace line for line.
* The firing set is not empty by accident (the BERT layers fuse; the near misses do not).
* Mutations (the mask Mul's value ignored, the merged weights in another order, the k perm not checked, the shared
  mask nodes removed while another consumer reads them, no Cast of an int64 mask; DistilBERT's mask_filter_value;
  GPT-2's unidirectional flag, mask_filter_value choice, int32 mask Cast, transpose optimized pattern, divisor check
  and DistilBERT output shape; 1.32's external-use checks) make the comparison fail.
* The events channel names, for each candidate, what it was fused into or which check refused it.
"""

from __future__ import annotations

import numpy as np
import pytest

import qdqopt
from qdqopt.events import EventLog, Kind
from qdqopt.graph import Graph
from qdqopt.passes import (
    TRANSFORMERS,
    attention_fusion,
    attention_fusion_helper,
    attention_fusion_mobileclip,
    graph_utils,
)
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, differs, fired

GROUP = [n for n in fixture_names() if n.startswith("attention/")]
NAME = "AttentionFusion"


def test_registered() -> None:
    assert TRANSFORMERS[NAME] is attention_fusion.AttentionFusion


def test_fires_where_expected() -> None:
    fused = set(fired(GROUP, NAME))
    assert {"attention/bert_basic", "attention/bert_two_layers", "attention/bert_mask_big"} <= fused
    assert {"attention/distil_basic", "attention/distil_heads4", "attention/distil_op13"} <= fused
    assert len(fused) >= 16
    for refused in ("bert_op13", "bert_op17", "bert_k_perm", "bert_scale", "bert_softmax_axis", "bert_mask_one"):
        assert f"attention/{refused}" not in fused
    for refused in ("distil_named_dims", "distil_equal_b", "distil_softmax_axis", "distil_scale"):
        assert f"attention/{refused}" not in fused
    gpt = {
        "gpt_basic",
        "gpt_unshared",
        "gpt_mask",
        "gpt_ones",
        "gpt_where",
        "gpt_past",
        "gpt_past_mask",
        "gpt_out_concat",
    }
    assert {f"attention/{name}" for name in gpt} <= fused
    for refused in (
        "gpt_tril_other",
        "gpt_k_perm",
        "gpt_qkv_heads",
        "gpt_split_extra",
        "gpt_past_perm",
        "gpt_scale_input",
    ):
        assert f"attention/{refused}" not in fused
    for refused in ("bert_extra_q_t", "bert_extra_q_add", "bert_extra_k_r", "bert_extra_k_mm"):
        assert f"attention/{refused}" not in fused
    clip = {"clip_basic", "clip_op14", "clip_op18", "clip_op19", "clip_op23", "clip_gemm"}
    assert {f"attention/{name}" for name in clip} <= fused
    for refused in ("clip_softmax_axis", "clip_scale_input", "clip_gemm_output"):
        assert f"attention/{refused}" not in fused


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", GROUP)
def test_as_run(name: str, config: str, level: str) -> None:
    assert_exact(name, level, config)


def test_mutation_mask_filter_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT 1.32 writes the mask Mul's constant as mask_filter_value (not a fixed -10000)."""
    assert not differs("attention/bert_mask_big")
    monkeypatch.setattr(attention_fusion_helper, "float_scalar", lambda graph, name: -10000.0 if name else None)
    assert differs("attention/bert_mask_big")


def test_mutation_distil_mask_filter_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """DistilBERT's Attention gets -10000 (the struct's default), not the Where's -inf."""
    assert not differs("attention/distil_basic")
    monkeypatch.setattr(attention_fusion, "DISTIL_MASK_FILTER_VALUE", float("-inf"))
    assert differs("attention/distil_basic")


def test_mutation_weight_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merged weights are q, k, v side by side in each row."""
    assert not differs("attention/bert_basic")
    original = attention_fusion.AttentionFusion._add_merged

    def stacked(graph: Graph, base: str, array: np.ndarray) -> str:
        if array.ndim == 2:
            w = array.shape[0]
            array = np.concatenate([array[:, 2 * w :], array[:, w : 2 * w], array[:, :w]], axis=1)
        return original(graph, base, array)

    monkeypatch.setattr(attention_fusion.AttentionFusion, "_add_merged", staticmethod(stacked))
    assert differs("attention/bert_basic")


def test_mutation_k_perm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The k Transpose must be (0, 2, 3, 1)."""
    assert not differs("attention/bert_k_perm")
    original = attention_fusion_helper.perm_is
    monkeypatch.setattr(
        attention_fusion_helper, "perm_is", lambda node, perm: True if perm == (0, 2, 3, 1) else original(node, perm)
    )
    assert differs("attention/bert_k_perm")


def test_mutation_shared_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mask's Mul, Sub, Cast and Unsqueezes stay while another layer still reads the Mul."""
    assert not differs("attention/bert_extra_mask_mul")
    monkeypatch.setattr(
        attention_fusion, "set_mask_nodes_to_remove", lambda graph, mask: [*mask.remove_always, *mask.shared]
    )
    assert differs("attention/bert_extra_mask_mul")


def test_mutation_mask_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    """An int64 mask reaches Attention through a new Cast to int32."""
    assert not differs("attention/bert_basic")
    monkeypatch.setattr(
        attention_fusion.AttentionFusion, "_mask_int32", staticmethod(lambda graph, mask, cache, ep: mask)
    )
    assert differs("attention/bert_basic")


def test_mutation_gpt_unidirectional(monkeypatch: pytest.MonkeyPatch) -> None:
    """An all-ones causal mask gives unidirectional 0."""
    assert not differs("attention/gpt_ones")
    monkeypatch.setattr(attention_fusion_helper, "_unidir_mask_kind", lambda graph, name: True)
    assert differs("attention/gpt_ones")


def test_mutation_gpt_mask_filter_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The input mask's Mul constant wins over the Where's fill value when it is not -10000."""
    assert not differs("attention/gpt_where_mask_value")
    original = attention_fusion_helper.match_input_mask

    def default_value(graph: Graph, qkv_matmul: object, *, optional: bool = False) -> object:
        found = original(graph, qkv_matmul, optional=optional)  # type: ignore[arg-type]
        if isinstance(found, attention_fusion_helper.MaskNodes):
            found.mask_filter_value = attention_fusion_helper.GPT_MASK_FILTER
        return found

    monkeypatch.setattr(attention_fusion_helper, "match_input_mask", default_value)
    assert differs("attention/gpt_where_mask_value")


def test_mutation_gpt_int32_mask_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT-2 form casts even an int32 mask (GetOrCreateMaskInt32)."""
    assert not differs("attention/gpt_mask_int32")
    original = attention_fusion_helper.get_or_create_mask_int32

    def skip_int32(graph: Graph, mask: str, cache: dict[str, str], ep: str) -> str:
        return mask if graph.elem_type(mask) == 6 else original(graph, mask, cache, ep)

    monkeypatch.setattr(attention_fusion_helper, "get_or_create_mask_int32", skip_int32)
    assert differs("attention/gpt_mask_int32")


def test_mutation_gpt_transpose_optimized_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """With past, Level1's transpose optimizer leaves k as Transpose -> Concat -> Transpose, which 1.32 fuses."""
    assert not differs("attention/gpt_past")
    original = graph_utils.is_supported_op

    def no_transpose(node: object, op_type: str, versions: object, domain: str = "") -> bool:
        return op_type != "Transpose" and original(node, op_type, versions, domain)  # type: ignore[arg-type]

    monkeypatch.setattr(attention_fusion_helper, "is_supported_op", no_transpose)
    assert differs("attention/gpt_past")


def test_mutation_gpt_divisor_initializer(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's q path goes through CheckNodesInPathQ too: its divisor, compared with sqrt(-1), must still be a scalar
    initializer (a graph input is refused)."""
    assert not differs("attention/gpt_scale_input")
    monkeypatch.setattr(
        attention_fusion_helper, "is_initializer_with_expected_value", lambda graph, name, value, is_constant: True
    )
    assert differs("attention/gpt_scale_input")


def test_mutation_gpt_distil_output_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's output Reshape goes through CheckNodesInPathV too: a shape that is DistilBERT's Concat passes."""
    assert not differs("attention/gpt_out_concat")
    monkeypatch.setattr(attention_fusion_helper, "check_distil_bert_reshape_shape", lambda graph, reshape, hidden: None)
    assert differs("attention/gpt_out_concat")


def test_mutation_external_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.32 refuses a q projection with another consumer (fusing would remove a node still read)."""
    assert not differs("attention/bert_extra_q_add")
    monkeypatch.setattr(attention_fusion, "external_use_free", lambda graph, *nodes: True)
    assert differs("attention/bert_extra_q_add")


def test_mutation_mobileclip_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MultiHeadAttention's scale is the q Mul's constant."""
    assert not differs("attention/clip_basic")
    monkeypatch.setattr(attention_fusion_mobileclip, "float_scalar", lambda graph, name: 1.0)
    assert differs("attention/clip_basic")


def test_mutation_mobileclip_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.32 fuses Reshape-19/21/23 (the public source lists 5, 13, 14 only)."""
    assert not differs("attention/clip_op23")
    monkeypatch.setattr(attention_fusion_mobileclip, "_RESHAPE", (5, 13, 14))
    assert differs("attention/clip_op23")


def test_mutation_mobileclip_projection_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Gemm projection's input shape comes from its Reshape's constant (ORT's Resolve reads it)."""
    assert not differs("attention/clip_gemm")
    from qdqopt.graph import View

    original = Graph.shape

    def without_data(self: Graph, value: str, *, view: View = View.PASS, as_written: bool = False) -> object:
        producer = self.producer(value)
        if producer is not None and producer.op_type == "Reshape":  # as if the Reshape's constant were not read
            return None
        return original(self, value, view=view, as_written=as_written)

    monkeypatch.setattr(Graph, "shape", without_data)
    assert differs("attention/clip_gemm")


def _events(name: str) -> EventLog:
    return qdqopt.run(fixture_model(name), "extended").pipeline.events


def test_explain_events() -> None:
    fused = [e for e in _events("attention/bert_basic").of_kind(Kind.FUSED, pass_name=NAME) if "Attention" in e.text]
    assert len(fused) == 1 and "com.microsoft.Attention" in fused[0].text
    refused = _events("attention/bert_k_perm").of_kind(Kind.NO_MATCH, pass_name=NAME)
    assert any(e.text == "k_transpose perm attribute not matched" for e in refused)
    refused = _events("attention/bert_mask_one").of_kind(Kind.NO_MATCH, pass_name=NAME)
    assert any(e.text == "Failed in match input mask subgraph" for e in refused)
    fused = _events("attention/gpt_past").of_kind(Kind.FUSED, pass_name=NAME)
    assert len(fused) == 1 and "com.microsoft.Attention" in fused[0].text
    refused = _events("attention/gpt_tril_other").of_kind(Kind.NO_MATCH, pass_name=NAME)
    texts = [e.text for e in refused]
    assert "MatchUnidirMaskSubgraph returns NULL" in texts and "Mask is neither unidirectional nor all ones" in texts
    fused = _events("attention/clip_basic").of_kind(Kind.FUSED, pass_name=NAME)
    assert len(fused) == 1 and "com.microsoft.MultiHeadAttention" in fused[0].text
    refused = _events("attention/clip_softmax_axis").of_kind(Kind.NO_MATCH, pass_name=NAME)
    assert any(e.nodes[0] == "qkv_matmul" and e.text == "Softmax(axis=-1) not matched" for e in refused)
