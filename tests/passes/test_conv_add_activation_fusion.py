"""ConvAddActivationFusion against ORT 1.32, live.

* Every ``convaddact/`` fixture (and every other fixture or corpus model where ORT's log shows the pass firing, see
  ``OTHER_FIRING``), at LAYOUT and ALL, both configs (default, ``session.qdqisint8allowed=1``), NchwcTransformer
  disabled on both sides (on x86 it takes most float Convs before this pass) and the passes qdqopt lacks
  disabled on both sides (isolation): ORT's trace and ORT's saved model byte for byte (tier P).
* Each fixture means what its name says: ORT's own log shows the pass firing unless the name ends in ``_kept``; for
  the ``*_nonchwc`` ones ORT fires it with NchwcTransformer enabled too (NchwcTransformer leaves those Convs alone).
* Once ``NchwcTransformer`` is implemented (not a skeleton), the ``*_nonchwc`` fixtures are also compared with it
  enabled.
* Mutations (an activation dropped, the shape test skipped, the Add's last producer taken as the target, the extra
  attributes inserted in the wrong order, the output edge check skipped) must make the comparison fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.graph import Graph, Node
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes import (
    TRANSFORMERS,
    conv_activation_fusion,
    conv_add_activation_fusion,
    graph_utils,
    nchwc_transformer,
)
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names

NAME = "ConvAddActivationFusion"
NCHWC = "NchwcTransformer"
CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
LEVELS = ("layout", "all")
#: Fixtures of other groups where ORT fires the pass at LAYOUT (NchwcTransformer disabled); no corpus model of
#: ``../shared/corpus`` does (checked with both configs).
OTHER_FIRING = ("convact/conv_add_relu_kept",)
OWN = [n for n in fixture_names() if n.startswith("convaddact/")]
NON_NCHWC = [n for n in OWN if n.endswith("_nonchwc")]
CASES = [*OWN, *OTHER_FIRING]


def _compare(name: str, level: str = "layout", config: dict[str, str] | None = None) -> LevelComparison:
    return compare_level(fixture_model(name), level, config=config or {}, disabled=[NCHWC], isolate=True)


def _holds(result: LevelComparison) -> bool:
    return result.report.holds("P") and result.ours_lines == result.ort_lines


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def _ort_fired(name: str, disabled: tuple[str, ...] = (NCHWC,)) -> set[str]:
    trace = run_reference(fixture_model(name), "layout", disabled=list(disabled)).trace
    return {t.name for t in trace if t.modified}


def _nchwc_is_skeleton() -> bool:
    return (nchwc_transformer.__doc__ or "").startswith("NchwcTransformer: SKELETON")


def test_registered() -> None:
    assert TRANSFORMERS[NAME] is conv_add_activation_fusion.ConvAddActivationFusion
    assert len(OWN) >= 50
    assert len(NON_NCHWC) >= 6
    assert all(n in fixture_names() for n in OTHER_FIRING)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", CASES)
def test_level(name: str, level: str, config: str) -> None:
    _assert_p(_compare(name, level, CONFIGS[config]), f"{name} {level.upper()} {config}")


@pytest.mark.parametrize("name", CASES)
def test_fixture_means_what_it_says(name: str) -> None:
    assert (NAME in _ort_fired(name)) is (name in OTHER_FIRING or not name.endswith("_kept"))
    if name in NON_NCHWC:
        fired = _ort_fired(name, disabled=())
        assert NAME in fired and NCHWC not in fired


@pytest.mark.skipif(_nchwc_is_skeleton(), reason="NchwcTransformer is still a skeleton")
@pytest.mark.parametrize("name", NON_NCHWC)
def test_nchwc_enabled(name: str) -> None:
    # isolation until NhwcTransformer (issue 9) covers every model: today it declines some
    result = compare_level(fixture_model(name), "layout", config={}, isolate=True)
    _assert_p(result, f"{name} LAYOUT with NchwcTransformer")


# ------------------------------------------------------------------------------------------------ mutations
def test_mutation_activation_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "convaddact/tanh_v13_opset21"
    assert _holds(_compare(name))
    reduced = {k: v for k, v in conv_add_activation_fusion._ACTIVATIONS.items() if k != "Tanh"}
    monkeypatch.setattr(conv_add_activation_fusion, "_ACTIVATIONS", reduced)
    assert not _holds(_compare(name))


def test_mutation_shape_test_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "convaddact/z_broadcast_kept"
    assert _holds(_compare(name))
    monkeypatch.setattr(conv_add_activation_fusion, "_shapes_match", lambda graph, add: True)
    assert not _holds(_compare(name))


def test_mutation_last_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking the last eligible producer of the Add (here: the visited Conv) instead of the first fuses the wrong
    Conv."""
    name = "convaddact/two_convs"
    assert _holds(_compare(name))
    module = conv_add_activation_fusion

    def last_producer(graph: Graph, add: Node) -> Node | None:
        if not module._shapes_match(graph, add):
            return None
        eligible = [p for p in graph.input_nodes(add) if module._producer_ok(graph, p) and len(p.inputs) == 3]
        return eligible[-1] if eligible else None

    monkeypatch.setattr(module, "select_producer_conv", last_producer)
    assert not _compare(name).report.holds("S")


def test_mutation_attribute_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inserting ``activation_params`` before ``activation`` changes only the saved attribute order."""
    name = "convaddact/leakyrelu_alpha"
    assert _holds(_compare(name))

    class Reversed(StdUnorderedMap):
        def __iter__(self) -> Iterator[str]:
            return iter(list(super().__iter__())[::-1])

    monkeypatch.setattr(conv_activation_fusion, "StdUnorderedMap", Reversed)  # the shared attribute builder
    result = _compare(name)
    assert result.report.holds("S")
    assert not result.report.holds("P")


def test_mutation_output_edges_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "convaddact/conv_graph_output_kept"
    assert _holds(_compare(name))

    def first_consumer(graph: Graph, node: Node) -> Node | None:  # GetLoneConsumerNode without its edge check
        return next(iter(graph_utils.output_nodes(graph, node)), None)

    monkeypatch.setattr(conv_add_activation_fusion, "lone_consumer", first_consumer)
    result = _compare(name)  # the Conv with a second consumer fused all the same: ORT keeps it
    assert not result.report.holds("S")
    assert any("com.microsoft.FusedConv" in str(d) for d in result.report.differences), result.report.lines()
