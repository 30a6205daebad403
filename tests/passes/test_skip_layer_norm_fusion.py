"""SkipLayerNormFusion (``qdqopt/passes/skip_layer_norm_fusion.py``) against ORT 1.32, live.

* Every ``layernorm/skip_*`` fixture (formats 1-3 before a LayerNormalization-17, and before a decomposed LayerNorm
  that LayerNormFusion fuses first) at BASIC, EXTENDED and ALL, both configs, nothing disabled on either side: ORT's
  saved model at tier P or X and ORT's trace line for line.
* Mutations (format 2's bias Add input put in slot 0, the LN's epsilon not copied) must make the comparison fail.
"""

from __future__ import annotations

import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.graph import Graph, Node, inference
from qdqopt.passes import TRANSFORMERS, skip_layer_norm_fusion
from tests.conftest import fixture_model, fixture_names

CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
LEVELS = ("basic", "extended", "all")
GROUP = [n for n in fixture_names() if n.startswith("layernorm/skip_")]


def _compare(key: str, level: str, config: str = "default") -> LevelComparison:
    return compare_level(fixture_model(key), level, config=CONFIGS[config])


def _holds(comp: LevelComparison) -> bool:
    return (comp.report.holds("P") or comp.report.holds("X")) and comp.ours_lines == comp.ort_lines


def test_registered() -> None:
    assert TRANSFORMERS["SkipLayerNormFusion"] is skip_layer_norm_fusion.SkipLayerNormFusion


def test_fires_where_expected() -> None:
    fired = []
    for key in GROUP:
        ort = _compare(key, "extended").ort
        assert ort is not None
        if any(n.op_type == "SkipLayerNormalization" for n in ort.graph.node):
            fired.append(key)
    assert len(fired) >= 9
    assert "layernorm/skip_rank2" not in fired


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", GROUP)
def test_as_run(key: str, config: str, level: str) -> None:
    comp = _compare(key, level, config)
    assert comp.ours_lines == comp.ort_lines, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert comp.report.holds("P") or comp.report.holds("X"), "\n".join(comp.report.lines())


def test_mutation_format2_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Format 2's bias Add feeds the residual input (slot 1), not slot 0."""
    key = "layernorm/skip_format2"
    assert _holds(_compare(key, "extended"))
    original = Graph.add_node

    def swapped(self: Graph, name: str, op_type: str, inputs: list[str], *args: object, **kw: object) -> Node:
        if op_type == "SkipLayerNormalization":
            inputs = [inputs[1], inputs[0], *inputs[2:]]
        return original(self, name, op_type, inputs, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", swapped)
    assert not _holds(_compare(key, "extended"))


def test_mutation_epsilon_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LN's epsilon attribute is copied; the default (1e-12) only stands in for a missing one."""
    key = "layernorm/skip_epsilon"
    assert _holds(_compare(key, "extended"))
    original = Graph.add_node

    def default_eps(self: Graph, name: str, op_type: str, *args: object, **kw: object) -> Node:
        if op_type == "SkipLayerNormalization":
            kw["attributes"] = {"epsilon": onnx.helper.make_attribute("epsilon", 1e-12)}
        return original(self, name, op_type, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", default_eps)
    assert not _holds(_compare(key, "extended"))


def test_mutation_invented_dims_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dim ORT's Resolve cannot infer stays unnamed; kept as ONNX's ``unk__<n>``, both Adds' inputs would match."""
    key = "layernorm/skip_unnamed_dims"
    assert _holds(_compare(key, "extended"))
    monkeypatch.setattr(inference, "_clear_invented_dims_deep", lambda gp, declared: None)
    assert not _holds(_compare(key, "extended"))
