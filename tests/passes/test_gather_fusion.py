"""GatherSliceToSplitFusion (``qdqopt/passes/gather_fusion.py``) against ORT 1.32, live.

* Every ``gathersplit/`` fixture, the corpus models it fires on (UltraFace RFB-320, 3 quantizations) and the
  TinyMixNet fixtures, at EXTENDED, both configs (default, ``session.qdqisint8allowed=1``), the transpose
  optimizers (LAYOUT work) disabled on both sides and nothing else: ORT's saved model byte for byte (tier P) and
  ORT's trace. A model ORT cannot create a session for must fail in qdqopt too.
* The pass alone (every other Level2 transformer and rule disabled on both sides) on every model it fires on; the
  same for GatherToSliceFusion (``Range -> Gather`` becomes a Slice; the ``gathersplit/range_*`` fixtures).
* Mutations (ascending consumer order instead of ORT's ``unordered_set`` order; a Squeeze never needed; the Slice
  of GatherToSliceFusion without its step) must make the comparison fail.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from qdqopt.api import run
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.errors import QdqoptError
from qdqopt.graph import Graph, Node
from qdqopt.levels import PASSES
from qdqopt.passes import TRANSFORMERS, gather_fusion
from qdqopt.reference import run_reference
from tests.conftest import CORPUS, fixture_model, fixture_names

NAME = "GatherSliceToSplitFusion"
OWN = (NAME, "GatherToSliceFusion")
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L2" and not p.rules and p.name not in LAYOUT_WORK]


def _alone(name: str) -> list[str]:
    """Every Level2 transformer and rule but ``name``, and the transpose optimizers."""
    return [*LAYOUT_WORK, *(t for t in L2_TRANSFORMERS if t != name), "Level2_RuleBasedTransformer"]


CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}

Model = Path | onnx.ModelProto

GROUP = [n for n in fixture_names() if n.startswith("gathersplit/")]
TINYMIXNET = [n for n in fixture_names() if n.startswith("tinymixnet_")]
CORPUS_FIRING = sorted((CORPUS / "third_party_fp32_qdq").glob("ultraface_rfb320.*.qdq.onnx"))


def _model(key: str) -> Model:
    return Path(key) if key.endswith(".onnx") else fixture_model(key)


def _id_gen() -> Iterator[object]:
    for name in GROUP + TINYMIXNET:
        yield pytest.param(name, id=name)
    for path in CORPUS_FIRING:
        yield pytest.param(str(path), id=path.name)


IDS = list(_id_gen())


@functools.cache
def _ort_fired(key: str, config: str, alone: str = "", name: str = NAME) -> bool | None:
    """Whether ORT's log shows ``name`` modifying the model (with every Level2 pass but ``alone`` disabled, if
    given); None when ORT cannot create the session."""
    disabled = _alone(alone) if alone else LAYOUT_WORK
    try:
        trace = run_reference(_model(key), "extended", config=CONFIGS[config], disabled=disabled).trace
    except QdqoptError:
        return None
    return any(t.name == name and t.modified for t in trace)


def _compare(key: str, config: str, disabled: list[str]) -> LevelComparison:
    return compare_level(_model(key), "extended", config=CONFIGS[config], disabled=disabled)


def _assert_exact(comp: LevelComparison) -> None:
    assert comp.ours_lines == comp.ort_lines, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def test_registered() -> None:
    assert TRANSFORMERS[NAME] is gather_fusion.GatherSliceToSplitFusion
    assert TRANSFORMERS["GatherToSliceFusion"] is gather_fusion.GatherToSliceFusion


def test_fires_where_expected() -> None:
    """The firing set is not empty by accident: ORT fuses on the group, the corpus and TinyMixNet."""
    keys = GROUP + TINYMIXNET + [str(p) for p in CORPUS_FIRING]
    fired = [k for k in keys if any(_ort_fired(k, config) for config in CONFIGS)]
    assert len([k for k in fired if k.startswith("gathersplit/")]) >= 20
    assert set(TINYMIXNET) <= set(fired)
    assert all(str(p) in fired for p in CORPUS_FIRING)
    assert len([k for k in GROUP if _ort_fired(k, "default", name="GatherToSliceFusion")]) >= 4


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", IDS)
def test_extended_exact(key: str, config: str) -> None:
    if _ort_fired(key, config) is None:
        with pytest.raises(QdqoptError):  # ORT cannot create the session: qdqopt must fail too
            run(_model(key), "extended", config=CONFIGS[config], disabled=LAYOUT_WORK)
        return
    _assert_exact(_compare(key, config, LAYOUT_WORK))


@pytest.mark.parametrize("name", OWN)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", IDS)
def test_alone_exact(key: str, config: str, name: str) -> None:
    if not _ort_fired(key, config, alone=name, name=name):
        pytest.skip("ORT does not run the pass here with every other Level2 pass disabled")
    _assert_exact(_compare(key, config, _alone(name)))


def _holds(key: str) -> bool:
    comp = _compare(key, "default", LAYOUT_WORK)
    return comp.report.holds("P") and comp.ours_lines == comp.ort_lines


def test_mutation_consumer_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT names the Split after the first piece in its consumer set's order (2, 14, 1 here), not index order."""
    key = "gathersplit/consumer_bucket_collision"
    assert _holds(key)

    def ascending(self: gather_fusion._ConsumerOrder, value: str) -> list[Node]:
        return self.graph.consumers(value)

    monkeypatch.setattr(gather_fusion._ConsumerOrder, "consumers", ascending)
    assert not _holds(key)


def test_mutation_no_squeeze(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Gather with a rank-0 index needs a Squeeze after the Split."""
    key = "gathersplit/gather_scalar"
    assert _holds(key)
    original = gather_fusion.GatherSliceToSplitFusion._gather

    def never_squeeze(self: gather_fusion.GatherSliceToSplitFusion, graph: Graph, *args: object) -> object:
        piece = original(self, graph, *args)  # type: ignore[arg-type]
        if piece is not None:
            piece.squeeze = False
        return piece

    monkeypatch.setattr(gather_fusion.GatherSliceToSplitFusion, "_gather", never_squeeze)
    assert not _holds(key)


def test_mutation_range_slice_without_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """GatherToSliceFusion's Slice takes the Range's delta as its steps input."""
    key = "gathersplit/range_gather"
    assert _holds(key)
    original = Graph.add_node

    def drop_steps(self: Graph, name: str, op_type: str, inputs: list[str], *args: object, **kw: object) -> Node:
        if op_type == "Slice" and len(inputs) == 5:
            inputs = inputs[:4]
        return original(self, name, op_type, inputs, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "add_node", drop_steps)
    assert not _holds(key)
