"""ConvActivationFusion against ORT 1.32, live.

* Every ``convact/`` fixture and the fixtures of other groups where ORT's log shows the pass firing
  (``wbq/conv_relu_clip_chain``, ``selector/conv_clip_kept_u8`` / ``_s8``), both configs (default,
  ``session.qdqisint8allowed=1``), the transpose optimizers (LAYOUT work) disabled on both sides: the whole EXTENDED
  level, as ORT runs (nothing isolated), must give ORT's trace and ORT's saved model byte for byte (tier P).
* The pass alone (every other Level2 transformer and rule disabled on both sides): the same checks.
* Each ``convact/`` fixture means what its name says: ORT's own log shows the pass firing unless the name ends in
  ``_kept``.
* Mutations (an activation dropped from the selector, the extra attributes inserted in the wrong order, the output
  edge check skipped) must make the comparison fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.graph import Graph, Node
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.passes import TRANSFORMERS, conv_activation_fusion, graph_utils
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names

NAME = "ConvActivationFusion"
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]
ALONE = [*LAYOUT_WORK, *(t for t in L2_TRANSFORMERS if t != NAME), "Level2_RuleBasedTransformer"]
CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
OTHER_FIRING = ("wbq/conv_relu_clip_chain", "selector/conv_clip_kept_u8", "selector/conv_clip_kept_s8")
OWN = [n for n in fixture_names() if n.startswith("convact/")]
CASES = [*OWN, *OTHER_FIRING]


def _compare(name: str, config: dict[str, str], disabled: list[str]) -> LevelComparison:
    return compare_level(fixture_model(name), "extended", config=config, disabled=disabled)


def _holds(result: LevelComparison) -> bool:
    return result.report.holds("P") and result.ours_lines == result.ort_lines


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def _ort_fired(name: str) -> bool:
    trace = run_reference(fixture_model(name), "extended", disabled=LAYOUT_WORK).trace
    return any(t.name == NAME and t.modified for t in trace)


def test_registered() -> None:
    assert TRANSFORMERS[NAME] is conv_activation_fusion.ConvActivationFusion
    assert len(OWN) >= 30
    assert all(n in fixture_names() for n in OTHER_FIRING)
    assert not any(r.name == NAME for r in LEVEL2_RULES)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", CASES)
def test_extended_level(name: str, config: str) -> None:
    _assert_p(_compare(name, CONFIGS[config], LAYOUT_WORK), f"{name} EXTENDED")


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", CASES)
def test_pass_alone(name: str, config: str) -> None:
    _assert_p(_compare(name, CONFIGS[config], ALONE), f"{name} {NAME} alone")


@pytest.mark.parametrize("name", CASES)
def test_fixture_means_what_it_says(name: str) -> None:
    assert _ort_fired(name) is not name.endswith("_kept") or name in OTHER_FIRING
    if name in OTHER_FIRING:
        assert _ort_fired(name)


# ------------------------------------------------------------------------------------------------ mutations
def test_mutation_activation_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "convact/tanh_v13_opset21"
    assert _holds(_compare(name, {}, ALONE))
    reduced = {k: v for k, v in conv_activation_fusion._ACTIVATIONS.items() if k != "Tanh"}
    monkeypatch.setattr(conv_activation_fusion, "_ACTIVATIONS", reduced)
    assert not _holds(_compare(name, {}, ALONE))


def test_mutation_attribute_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inserting ``activation_params`` before ``activation`` changes only the saved attribute order."""
    name = "convact/leakyrelu_alpha"
    assert _holds(_compare(name, {}, ALONE))

    class Reversed(StdUnorderedMap):
        def __iter__(self) -> Iterator[str]:
            return iter(list(super().__iter__())[::-1])

    monkeypatch.setattr(conv_activation_fusion, "StdUnorderedMap", Reversed)
    result = _compare(name, {}, ALONE)
    assert result.report.holds("S")
    assert not result.report.holds("P")


def test_mutation_output_edges_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "convact/two_consumers_kept"
    assert _holds(_compare(name, {}, ALONE))

    def first_consumer(graph: Graph, node: Node) -> Node | None:  # GetLoneConsumerNode without its edge check
        return next(iter(graph_utils.output_nodes(graph, node)), None)

    monkeypatch.setattr(conv_activation_fusion, "lone_consumer", first_consumer)
    result = _compare(name, {}, ALONE)  # the Relu with a second consumer fused all the same: ORT keeps it
    assert not result.report.holds("S")
    assert any("com.microsoft.FusedConv" in str(d) for d in result.report.differences), result.report.lines()
