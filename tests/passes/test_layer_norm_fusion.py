"""LayerNormFusion (L1 and L2) and SimplifiedLayerNormFusion (``qdqopt/passes/layer_norm_fusion.py``) against ORT
1.32, live.

* Every ``layernorm/`` fixture but the SkipLayerNorm ones (``test_skip_layer_norm_fusion.py``), at BASIC,
  EXTENDED and ALL, both configs (default, ``session.qdqisint8allowed=1``), nothing disabled on either side: ORT's
  saved model at tier P or X and ORT's trace line for line. A model ORT cannot create a session for (a float16
  Cast before a LayerNormalization-17 that ORT fuses anyway) must fail in qdqopt too.
* Mutations (the epsilon read from the Add's input 1 only, the Level1 instance ignoring the opset, positive axes
  kept, the RMSNorm Div not required to read the Pow's input) must make the comparison fail.
"""

from __future__ import annotations

import functools

import pytest

from qdqopt.api import run
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.errors import QdqoptError
from qdqopt.graph import Graph, Node
from qdqopt.passes import TRANSFORMERS, layer_norm_fusion
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names

OWN = ("LayerNormFusionL1", "LayerNormFusionL2", "SimplifiedLayerNormFusion")
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
LEVELS = ("basic", "extended", "all")
GROUP = [n for n in fixture_names() if n.startswith("layernorm/") and not n.startswith("layernorm/skip_")]


@functools.cache
def _ort_fired(key: str, level: str, config: str) -> frozenset[str] | None:
    """The LayerNorm passes ORT's log shows modifying the model; None when ORT cannot create the session."""
    try:
        trace = run_reference(fixture_model(key), level, config=CONFIGS[config]).trace
    except QdqoptError:
        return None
    return frozenset(t.name for t in trace if t.modified and t.name in OWN)


def _compare(key: str, level: str, config: str = "default") -> LevelComparison:
    return compare_level(fixture_model(key), level, config=CONFIGS[config])


def _holds(comp: LevelComparison) -> bool:
    return (comp.report.holds("P") or comp.report.holds("X")) and comp.ours_lines == comp.ort_lines


def test_registered() -> None:
    assert TRANSFORMERS["LayerNormFusionL1"] is layer_norm_fusion.LayerNormFusionL1
    assert TRANSFORMERS["LayerNormFusionL2"] is layer_norm_fusion.LayerNormFusionL2
    assert TRANSFORMERS["SimplifiedLayerNormFusion"] is layer_norm_fusion.SimplifiedLayerNormFusion


def test_fires_where_expected() -> None:
    """The firing sets are not empty by accident."""
    fired = {k: _ort_fired(k, "extended", "default") or frozenset() for k in GROUP}
    assert len([k for k, f in fired.items() if "LayerNormFusionL1" in f]) >= 15
    assert len([k for k, f in fired.items() if "LayerNormFusionL2" in f]) >= 5
    assert len([k for k, f in fired.items() if "SimplifiedLayerNormFusion" in f]) >= 8
    assert fired["layernorm/basic_op13"] == {"LayerNormFusionL2"}
    assert fired["layernorm/basic_op17"] == {"LayerNormFusionL1"}
    assert _ort_fired("layernorm/basic_op13", "basic", "default") == frozenset()
    assert _ort_fired("layernorm/cast_leading_fp16", "basic", "default") is None


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", GROUP)
def test_as_run(key: str, config: str, level: str) -> None:
    if _ort_fired(key, level, config) is None:
        with pytest.raises(QdqoptError):  # ORT cannot create the session: qdqopt must fail too
            run(fixture_model(key), level, config=CONFIGS[config])
        return
    comp = _compare(key, level, config)
    assert comp.ours_lines == comp.ort_lines, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert comp.report.holds("P") or comp.report.holds("X"), "\n".join(comp.report.lines())


def test_mutation_epsilon_input_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT 1.32 takes the epsilon from whichever Add input is not the variance."""
    key = "layernorm/eps_first"
    assert _holds(_compare(key, "basic"))
    original = layer_norm_fusion._epsilon_attribute

    def input_1_only(graph: Graph, add: Node, variance: str) -> object:
        if add.inputs[1] == variance:
            return original(graph, add, "")
        return original(graph, add, variance)

    monkeypatch.setattr(layer_norm_fusion, "_epsilon_attribute", input_1_only)
    assert not _holds(_compare(key, "basic"))


def test_mutation_level1_any_opset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below opset 17 the Level1 instance does nothing (the Level2 one fuses)."""
    key = "layernorm/basic_op13"
    assert _holds(_compare(key, "basic"))
    monkeypatch.setattr(layer_norm_fusion.LayerNormFusionL2, "level", 1)
    monkeypatch.setattr(
        layer_norm_fusion.LayerNormFusion,
        "apply_impl",
        lambda self, graph, ctx, graph_level: self.visit_in_order(
            graph, ctx, graph_level, lambda n: self._fuse(graph, n)
        ),
    )
    assert not _holds(_compare(key, "basic"))


def test_mutation_positive_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused node's axis is the normalised negative one."""
    key = "layernorm/axes_positive"
    assert _holds(_compare(key, "basic"))
    original = layer_norm_fusion.check_axes

    def keep_positive(axes: list[int], rank: int) -> list[int] | None:
        found = original(axes, rank)
        return None if found is None else sorted(axes)

    monkeypatch.setattr(layer_norm_fusion, "check_axes", keep_positive)
    assert not _holds(_compare(key, "basic"))


def test_mutation_rms_div_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """SimplifiedLayerNormFusion needs the Div to divide the Pow's own input."""
    key = "layernorm/rms_div_other"
    assert _holds(_compare(key, "extended"))
    monkeypatch.setattr(layer_norm_fusion, "divides_pow_input", lambda div, pow_node: True)
    assert not _holds(_compare(key, "extended"))
