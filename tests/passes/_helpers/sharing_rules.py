"""Shared by the tests of ConstantSharing (``tests/passes/test_constant_sharing.py``), the Level1 rewrite rules
(``test_rules_level1.py``) and ReshapeFusion (``test_reshape_fusion.py``) and by ``tests/test_sharing_rules.py``.

* Fixtures ``sharing/`` and ``rules/``: the pass under test alone (every other Level1 transformer disabled on both
  sides; the rules keep ``Level1_RuleBasedTransformer`` with all its rules), with the default config and with
  ``session.qdqisint8allowed=1`` (``rules/`` also with ``optimization.enable_cast_chain_elimination=1``): ORT's
  trace, and byte-identical models (tier P).
* Corpus models on which ORT's own log shows the pass modifying the model: the same trace, the same nodes (in
  order, attributes and subgraphs included) and the same initializers (names, order, bytes); every remaining
  difference must lie in value_info or in the graph's input/output declarations, which the graph core writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL1_RULES, PASSES
from qdqopt.passes.constant_sharing import ConstantSharing
from qdqopt.passes.reshape_fusion import ReshapeFusion
from tests.conftest import CORPUS, fixture_model, fixture_names

CONFIGS = {
    "default": {},
    "int8-allowed": {"session.qdqisint8allowed": "1"},
    "cast-chain": {"optimization.enable_cast_chain_elimination": "1"},
}
L1_TRANSFORMERS = [p.name for p in PASSES if p.stage == "L1" and not p.rules]
L1_RULE_NAMES = [r.name for r in LEVEL1_RULES]
RULE_BASED = "Level1_RuleBasedTransformer"

#: Fixtures whose only difference from ORT is outside these passes (the reason says whose).
OUTSIDE_SCOPE: dict[str, str] = {}

#: Corpus models (relative to the shared corpus) and the pass that ORT's log shows firing on them.
CORPUS_CASES = [
    ("ort_testdata/onnxruntime/test/testdata/qdq_with_multi_consumer_dq_nodes.onnx", "ConstantSharing"),
    ("third_party_fp32_qdq/mnist.u8u8_pt.qdq.onnx", "ConstantSharing"),
    ("third_party_fp32_qdq/light_squeezenet.u8s8_pc.qdq.onnx", "ConstantSharing"),
    ("ort_testdata/onnxruntime/test/testdata/float8/te.cast_fp8_1_fp32.onnx", "ConstantSharing"),
    ("migraphx_fixed/test/onnx/qlinearadd_test.onnx", "ConstantSharing"),
    ("ort_testdata/onnxruntime/test/testdata/transform/runtime_optimization/qdq_convs.onnx", "ConstantSharing"),
    ("tract/qrelu_1/model.onnx", "ConstantSharing"),
    ("ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx", RULE_BASED),
    ("migraphx/test/onnx/int4_const_identity_block_sz_1_qdq_test.onnx", RULE_BASED),
    ("tract/qlstm_3-2-3_T3_S1/model.onnx", RULE_BASED),
    ("ort_testdata/onnxruntime/test/testdata/attention_past_state.u8s8.onnx", "ReshapeFusion"),
    ("ort_testdata/onnxruntime/test/testdata/attention_past_state.u8u8.onnx", RULE_BASED),
]


def _alone(name: str) -> list[str]:
    """Every Level1 name but ``name`` (a rule-based transformer keeps all its rules)."""
    keep = {name, *L1_RULE_NAMES} if name == RULE_BASED else {name}
    return [n for n in (*L1_TRANSFORMERS, RULE_BASED, *L1_RULE_NAMES) if n not in keep]


def _pass_of(fixture: str) -> str:
    if fixture.startswith("sharing/"):
        return ConstantSharing.name
    if fixture.startswith("rules/reshape_fusion"):
        return ReshapeFusion.name
    return RULE_BASED


def _report(comp: LevelComparison) -> str:
    return "\n".join(
        [*comp.report.lines(), "ours: " + " | ".join(comp.ours_lines), "ORT:  " + " | ".join(comp.ort_lines)]
    )


# ------------------------------------------------------------------------------------------------------ fixtures
def _fixture_params(only: str) -> Iterator[object]:
    """The ``sharing/`` and ``rules/`` fixtures made for the pass ``only`` (see :func:`_pass_of`), with each config."""
    for name in fixture_names():
        if not name.startswith(("sharing/", "rules/")) or _pass_of(name) != only:
            continue
        configs = ["default", "int8-allowed"] + (["cast-chain"] if name.startswith("rules/") else [])
        for config in configs:
            marks = [pytest.mark.xfail(strict=True, reason=OUTSIDE_SCOPE[name])] if name in OUTSIDE_SCOPE else []
            yield pytest.param(name, config, id=f"{name}-{config}", marks=marks)


def check_fixture_alone_matches_ort(name: str, config: str) -> None:
    """``test_fixture_alone_matches_ort`` (one per pass module, parametrized by its fixtures)."""
    comp = compare_level(
        fixture_model(name), "basic", config=CONFIGS[config], disabled=_alone(_pass_of(name)), isolate=True
    )
    assert comp.ours_lines == comp.ort_lines, _report(comp)
    assert comp.report.holds("P"), _report(comp)


# -------------------------------------------------------------------------------------------------------- corpus
def _node_key(node: onnx.NodeProto) -> bytes:
    """A node's bytes with the initializers of its subgraphs sorted by name (their order is the graph core's)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    for attr in copy.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            _sort_initializers(sub)
    return bytes(copy.SerializeToString(deterministic=True))


def _sort_initializers(graph: onnx.GraphProto) -> None:
    inits = sorted(graph.initializer, key=lambda t: t.name)
    del graph.initializer[:]
    graph.initializer.extend(inits)
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _sort_initializers(sub)


def _corpus_params(only: str) -> list[object]:
    """The CORPUS_CASES where ORT's log shows the pass ``only`` firing."""
    return [
        pytest.param(rel, name, id=Path(rel).parent.name + "/" + Path(rel).stem)
        for rel, name in CORPUS_CASES
        if name == only
    ]


def check_corpus_alone_matches_ort(rel: str, name: str, config: str) -> None:
    """``test_corpus_alone_matches_ort`` (one per pass module, parametrized by its corpus models)."""
    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    comp = compare_level(str(path), "basic", config=CONFIGS[config], disabled=_alone(name), isolate=True)
    assert f"GraphTransformer {name} modified: 1" in comp.ort_lines, "ORT no longer runs the pass on this model"
    assert comp.ours_lines == comp.ort_lines, _report(comp)
    assert comp.ours is not None and comp.ort is not None
    assert [_node_key(n) for n in comp.ours.graph.node] == [_node_key(n) for n in comp.ort.graph.node], _report(comp)
    assert list(comp.ours.graph.initializer) == list(comp.ort.graph.initializer), _report(comp)
    assert comp.report.holds("P"), _report(comp)
