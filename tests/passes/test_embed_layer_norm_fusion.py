"""EmbedLayerNormFusion (``qdqopt/passes/embed_layer_norm_fusion.py``) against ORT 1.32, live.

* Every ``embedln/`` fixture at BASIC, EXTENDED and ALL, both configs (default, ``session.qdqisint8allowed=1``),
  nothing disabled on either side: ORT's saved model at tier P and X and ORT's trace line for line.
* The refusals qdqopt reports (``no-match`` events) are among the lines ORT logs at VERBOSE from
  ``embed_layer_norm_fusion.cc`` where ORT logs any.
* Mutations (the segment-ids shape check dropped, the extracted embedding's change not reported, the Range start
  not checked, the epsilon not copied, the Shape start/end check dropped) must make the comparison fail.
"""

from __future__ import annotations

import pytest

from qdqopt import events
from qdqopt.api import run
from qdqopt.explain import explain_pass
from qdqopt.passes import TRANSFORMERS, embed_layer_norm_fusion
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, differs, ort_modified

PASS = "EmbedLayerNormFusion"
GROUP = [n for n in fixture_names() if n.startswith("embedln/")]


def test_registered() -> None:
    assert TRANSFORMERS[PASS] is embed_layer_norm_fusion.EmbedLayerNormFusion


def test_fires_where_expected() -> None:
    """The firing set is not empty by accident, and the near misses are missed."""
    fired = {k for k in GROUP if PASS in (ort_modified(k, "extended", "default") or frozenset())}
    assert len(fired) >= 20
    for key in ("embedln/range", "embedln/nonzero", "embedln/where", "embedln/const_add", "embedln/distil_range"):
        assert key in fired
    for key in ("embedln/no_attention", "embedln/no_beta", "embedln/range_start_1", "embedln/shape_other_input"):
        assert key not in fired
    assert PASS not in (ort_modified("embedln/range", "basic", "default") or frozenset())


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", GROUP)
def test_as_run(key: str, config: str, level: str) -> None:
    assert_exact(key, level, config)


def _our_reasons(key: str) -> list[str]:
    result = run(fixture_model(key), "extended")
    found = [e for e in result.pipeline.events.events if e.kind == events.Kind.NO_MATCH and e.pass_name == PASS]
    return [e.text for e in found]


@pytest.mark.parametrize(
    "key",
    [
        "embedln/seg_shape_differs",
        "embedln/const_indices_wrong",
        "embedln/const_add_batches_differ",
        "embedln/shape_end_explicit",
        "embedln/range_start_1",
        "embedln/shape_other_input",
    ],
)
def test_refusals_in_orts_words(key: str) -> None:
    """Each refusal qdqopt reports for these candidates is a line ORT logs from embed_layer_norm_fusion.cc."""
    ref = run_reference(fixture_model(key), "extended")
    ort_lines = {r.message.strip() for r in ref.diagnostics if r.file == "embed_layer_norm_fusion.cc"}
    ours = [r for r in _our_reasons(key) if not r.startswith("(")]
    assert ours, "no refusal reported"
    assert {r.strip() for r in ours} <= ort_lines, (ours, ort_lines)


def test_explain_names_each_candidate() -> None:
    """``qdqopt explain --pass EmbedLayerNormFusion``: each LayerNormalization fused into what, or refused why."""
    fused = explain_pass(fixture_model("embedln/range"), PASS)
    assert [(r.name, r.outcome) for r in fused] == [("layernorm", "fused")]
    assert "EmbedLayerNormalization" in fused[0].detail
    assert _our_reasons("embedln/range") == []
    refused = explain_pass(fixture_model("embedln/range_start_1"), PASS)
    assert [(r.name, r.outcome) for r in refused] == [("layernorm", "refused")]
    assert refused[0].detail == "The first input of Range should be a constant with value 0."
    assert _our_reasons("embedln/no_attention") == ["no Attention after the LayerNormalization"]
    assert _our_reasons("embedln/no_beta") == ["LayerNormalization without beta (three inputs needed)"]


# -------------------------------------------------------------------------------------------------- mutations
def test_mutation_segment_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "embedln/seg_shape_differs"
    assert not differs(key)
    monkeypatch.setattr(embed_layer_norm_fusion, "_tensor_shape", lambda graph, name: [])
    assert differs(key)


def test_mutation_extracted_not_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT reports a change once it extracted the position embedding, even when a later check refuses."""
    key = "embedln/const_add_late_refusal"
    assert not differs(key)
    original = embed_layer_norm_fusion.EmbedLayerNormFusion._extract_embedding

    def quiet(self, graph, name, input_ids, hidden):  # type: ignore[no-untyped-def]
        found = original(self, graph, name, input_ids, hidden)
        self._extracted = False
        return found

    monkeypatch.setattr(embed_layer_norm_fusion.EmbedLayerNormFusion, "_extract_embedding", quiet)
    assert differs(key)


def test_mutation_range_start(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "embedln/range_start_1"
    assert not differs(key)
    monkeypatch.setattr(embed_layer_norm_fusion, "int_initializer_is", lambda graph, name, expected: True)
    assert differs(key)


def test_mutation_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "embedln/epsilon_3"
    assert not differs(key)
    original = embed_layer_norm_fusion.EmbedLayerNormFusion._rewrite

    def drop_epsilon(self, graph, ln, *args):  # type: ignore[no-untyped-def]
        ln.attributes.pop("epsilon", None)
        return original(self, graph, ln, *args)

    monkeypatch.setattr(embed_layer_norm_fusion.EmbedLayerNormFusion, "_rewrite", drop_epsilon)
    assert differs(key)


def test_mutation_shape_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "embedln/shape_end_explicit"
    assert not differs(key)
    monkeypatch.setattr(embed_layer_norm_fusion, "_shape_attrs_default", lambda node: True)
    assert differs(key)
