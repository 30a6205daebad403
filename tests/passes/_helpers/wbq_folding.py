"""Shared by the tests of WeightBiasQuantization, ConstantFolding and CommonSubexpressionElimination
(``tests/passes/test_weight_bias_quantization.py``, ``test_constant_folding.py``, ``test_cse.py``) and by
``tests/test_wbq_folding_cse.py`` (the corpus, where the three run together).

Every comparison runs qdqopt and ORT at ORT_ENABLE_BASIC with the same session config and the same disabled list
(:func:`qdqopt.compare.compare_level`, which also disables what qdqopt does not implement on both sides) and
:func:`assert_matches` checks:

* the transformer logs are identical (same passes reporting ``modified: 1``, in the same steps);
* the saved models are byte-identical once ``value_info`` and the graph inputs'/outputs' *types* are stripped:
  nodes, their order, names (``_token_N`` included), domains, doc strings, attributes, and initializer names,
  order and bytes, in every graph (what these passes write; value_info and types come from shape inference);
* the differ's tier: P (bytes) for the fixtures and for the corpus models where one of the three passes fires;
  for the other corpus candidates only S plus the above (what is left there belongs to other passes).

Fixtures: the hand-built groups ``wbq/`` and ``folding/`` (fixtures/handbuilt) and the PT2E TinyConvNet, each with
the default config and with ``session.qdqisint8allowed=1``; each pass is also run alone on every one of them (every
other Level1 transformer and rule disabled on both sides).
"""

from __future__ import annotations

import functools

import onnx

import fixtures
from qdqopt.compare import LevelComparison
from qdqopt.levels import PASSES

MINE = ("WeightBiasQuantization", "ConstantFolding", "CommonSubexpressionElimination")
INT8 = {"session.qdqisint8allowed": "1"}
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8_allowed": INT8}
FIXTURES = [
    f.name for f in fixtures.all_fixtures() if f.name.startswith(("wbq/", "folding/")) or f.name == "tinyconvnet_pt2e"
]
L1_NAMES = sorted(
    {p.name for p in PASSES if p.stage == "L1"} | {r.name for p in PASSES if p.stage == "L1" for r in p.rules}
)


def _fixtures_of(pass_name: str | None) -> list[str]:
    """The FIXTURES made for ``pass_name``: ``wbq/`` for WeightBiasQuantization, the ``folding/cse_`` cases for
    CommonSubexpressionElimination, the other ``folding/`` cases for ConstantFolding; None: the PT2E TinyConvNet,
    made for none of them."""

    def made_for(name: str) -> str | None:
        if name.startswith("wbq/"):
            return "WeightBiasQuantization"
        if name.startswith("folding/cse_"):
            return "CommonSubexpressionElimination"
        if name.startswith("folding/"):
            return "ConstantFolding"
        return None

    return [name for name in FIXTURES if made_for(name) == pass_name]


@functools.cache
def _fixture(name: str) -> onnx.ModelProto:
    return fixtures.get(name).build()


def _only(*names: str) -> list[str]:
    """The disabled list that leaves only ``names`` of Level1 running."""
    return [n for n in L1_NAMES if n not in names]


def _strip(model: onnx.ModelProto) -> bytes:
    """The model without value_info and graph input/output types (in every graph), serialized."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)

    def strip_graph(g: onnx.GraphProto) -> None:
        del g.value_info[:]
        for vi in (*g.input, *g.output):
            vi.ClearField("type")
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    strip_graph(a.g)

    strip_graph(copy.graph)
    return bytes(copy.SerializeToString())


def _first_node_difference(ours: onnx.GraphProto, ort: onnx.GraphProto) -> str:
    a = [(n.op_type, n.name, list(n.input), list(n.output)) for n in ours.node]
    b = [(n.op_type, n.name, list(n.input), list(n.output)) for n in ort.node]
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"node #{i}: {x} vs ORT {y}"
    ia = [t.name for t in ours.initializer]
    ib = [t.name for t in ort.initializer]
    if ia != ib:
        return f"initializers {ia} vs ORT {ib}"
    return f"{len(a)} nodes vs ORT {len(b)}; first difference elsewhere (attributes, bytes, doc strings)"


def _has_subgraphs(model: onnx.ModelProto) -> bool:
    return any(a.type == onnx.AttributeProto.GRAPH for n in model.graph.node for a in n.attribute)


def assert_matches(c: LevelComparison, tier: str = "S") -> None:
    ours = [line for line in c.ours_lines if line.endswith("1")]
    ort = [line for line in c.ort_lines if line.endswith("1")]
    assert c.trace_matches, f"transformer logs differ:\nqdqopt {ours}\nORT    {ort}"
    assert c.ours is not None and c.ort is not None
    assert _strip(c.ours) == _strip(c.ort), "\n".join(
        [_first_node_difference(c.ours.graph, c.ort.graph), *c.report.lines()[:8]]
    )
    assert c.report.holds(tier), "\n".join(c.report.lines())
