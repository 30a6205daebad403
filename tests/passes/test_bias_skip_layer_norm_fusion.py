"""BiasSkipLayerNormFusion (``qdqopt/passes/bias_skip_layer_norm_fusion.py``) against ORT 1.32, live.

* Every ``layernorm/bias_skip_*`` fixture (the Add of a MatMul, or of a MatMul -> Cast, and a 1-D bias before a
  SkipLayerNormalization written in the model or made by SkipLayerNormFusion, in If branches with the bias in the
  outer scope; the near misses) at BASIC, EXTENDED
  and ALL, both configs, nothing disabled on either side: ORT's saved model at tier P or X and ORT's trace line for
  line.
* Mutations (the Add's slot not kept, the default epsilon written over the SLN's) must make the comparison fail.
"""

from __future__ import annotations

import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.graph import Graph, Node
from qdqopt.passes import TRANSFORMERS, bias_skip_layer_norm_fusion
from tests.conftest import fixture_model, fixture_names

CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
LEVELS = ("basic", "extended", "all")
GROUP = [n for n in fixture_names() if n.startswith("layernorm/bias_skip_")]
FUSED = {
    "layernorm/bias_skip_sln",
    "layernorm/bias_skip_default_eps",
    "layernorm/bias_skip_bias_first",
    "layernorm/bias_skip_skip_slot1",
    "layernorm/bias_skip_cast",
    "layernorm/bias_skip_via_ln",
    "layernorm/bias_skip_symbolic",
    "layernorm/bias_skip_rank4",
    "layernorm/bias_skip_hidden_from_matmul",
    "layernorm/bias_skip_both_slots",
    "layernorm/bias_skip_if",
}


def _compare(key: str, level: str, config: str = "default") -> LevelComparison:
    return compare_level(fixture_model(key), level, config=CONFIGS[config])


def _holds(comp: LevelComparison) -> bool:
    return (comp.report.holds("P") or comp.report.holds("X")) and comp.ours_lines == comp.ort_lines


def test_registered() -> None:
    assert TRANSFORMERS["BiasSkipLayerNormFusion"] is bias_skip_layer_norm_fusion.BiasSkipLayerNormFusion


def test_fires_where_expected() -> None:
    """ORT's log says which fixtures BiasSkipLayerNormFusion changes; the list here is from the rules."""
    fired = set()
    for key in GROUP:
        comp = _compare(key, "extended")
        if any(line.startswith("GraphTransformer BiasSkipLayerNormFusion modified: 1") for line in comp.ort_lines):
            fired.add(key)
    assert fired == FUSED


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", GROUP)
def test_as_run(key: str, config: str, level: str) -> None:
    comp = _compare(key, level, config)
    assert comp.ours_lines == comp.ort_lines, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert comp.report.holds("P") or comp.report.holds("X"), "\n".join(comp.report.lines())


def test_mutation_slot_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MatMul side replaces the Add in the SLN slot the Add fed (slot 1 here), not always slot 0."""
    key = "layernorm/bias_skip_skip_slot1"
    assert _holds(_compare(key, "extended"))
    original = Graph.add_node

    def swapped(self: Graph, name: str, op_type: str, inputs: list[str], *args: object, **kw: object) -> Node:
        if op_type == "SkipLayerNormalization" and len(inputs) == 5:
            inputs = [inputs[1], inputs[0], *inputs[2:]]
        return original(self, name, op_type, inputs, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", swapped)
    assert not _holds(_compare(key, "extended"))


def test_mutation_epsilon_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SLN's epsilon is copied; 1e-12 only stands in for a missing one."""
    key = "layernorm/bias_skip_sln"
    assert _holds(_compare(key, "extended"))
    original = Graph.add_node

    def default_eps(self: Graph, name: str, op_type: str, *args: object, **kw: object) -> Node:
        if op_type == "SkipLayerNormalization" and kw.get("doc_string") == "fused SkipLayerNormalization and bias Add":
            kw["attributes"] = {"epsilon": onnx.helper.make_attribute("epsilon", 1e-12)}
        return original(self, name, op_type, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", default_eps)
    assert not _holds(_compare(key, "extended"))


def test_mutation_cast_path_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``Add <- Cast <- MatMul`` path is searched too."""
    key = "layernorm/bias_skip_cast"
    assert _holds(_compare(key, "extended"))
    monkeypatch.setattr(bias_skip_layer_norm_fusion, "_CAST", ())
    assert not _holds(_compare(key, "extended"))
