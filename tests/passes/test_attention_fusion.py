"""AttentionFusion (``qdqopt/passes/attention_fusion.py``) against ORT 1.32, live.

* Every ``attention/`` fixture at BASIC, EXTENDED and ALL, both configs (default, ``session.qdqisint8allowed=1``),
  nothing disabled on either side: ORT's saved model at tier P and ORT's trace line for line.
* The firing set is not empty by accident (the BERT layers fuse; the near misses do not).
* Mutations (the mask Mul's value ignored, the merged weights in another order, the k perm not checked, the shared
  mask nodes removed while another consumer reads them, no Cast of an int64 mask) make the comparison fail.
* The events channel names, for each candidate, what it was fused into or which check refused it.
"""

from __future__ import annotations

import numpy as np
import pytest

import qdqopt
from qdqopt.events import EventLog, Kind
from qdqopt.graph import Graph
from qdqopt.passes import TRANSFORMERS, attention_fusion
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


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", GROUP)
def test_as_run(name: str, config: str, level: str) -> None:
    assert_exact(name, level, config)


def test_mutation_mask_filter_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT 1.32 writes the mask Mul's constant as mask_filter_value (not a fixed -10000)."""
    assert not differs("attention/bert_mask_big")
    monkeypatch.setattr(attention_fusion, "_float_scalar", lambda graph, name: -10000.0 if name else None)
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
    original = attention_fusion._perm_is
    monkeypatch.setattr(
        attention_fusion, "_perm_is", lambda node, perm: True if perm == (0, 2, 3, 1) else original(node, perm)
    )
    assert differs("attention/bert_k_perm")


def test_mutation_shared_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mask's Mul, Sub, Cast and Unsqueezes stay while another layer still reads the Mul."""
    assert not differs("attention/bert_extra_mask_mul")
    monkeypatch.setattr(attention_fusion, "check_output_edges", lambda graph, node, n: True)
    assert differs("attention/bert_extra_mask_mul")


def test_mutation_mask_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    """An int64 mask reaches Attention through a new Cast to int32."""
    assert not differs("attention/bert_basic")
    monkeypatch.setattr(
        attention_fusion.AttentionFusion, "_mask_int32", staticmethod(lambda graph, mask, cache, ep: mask)
    )
    assert differs("attention/bert_basic")


def _events(name: str) -> EventLog:
    return qdqopt.run(fixture_model(name), "extended").pipeline.events


def test_explain_events() -> None:
    fused = [e for e in _events("attention/bert_basic").of_kind(Kind.FUSED, pass_name=NAME) if "Attention" in e.text]
    assert len(fused) == 1 and "com.microsoft.Attention" in fused[0].text
    refused = _events("attention/bert_k_perm").of_kind(Kind.NO_MATCH, pass_name=NAME)
    assert any(e.text == "k_transpose perm attribute not matched" for e in refused)
    refused = _events("attention/bert_mask_one").of_kind(Kind.NO_MATCH, pass_name=NAME)
    assert any(e.text == "Failed in match input mask subgraph" for e in refused)
