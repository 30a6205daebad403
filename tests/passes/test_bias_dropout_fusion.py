"""BiasDropoutFusion (``qdqopt/passes/bias_dropout_fusion.py``) against ORT 1.32, live, and on CUDA-assigned graphs
without ORT.

* Every ``biasdropout/`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace.
  In a CPU session the transformer fuses nothing (its nodes must be on the CUDA EP).
* A mutation (the pass taking CPU-assigned nodes) must make the comparison fail.
* The rules themselves, on graphs whose nodes are assigned to the CUDA EP (no ORT session can do that here).
"""

from __future__ import annotations

import onnx
import pytest

from fixtures.handbuilt._util import FLOAT, MS_DOMAIN, graph, model, node, vi
from qdqopt.config import SessionConfig
from qdqopt.graph import Graph, load_model
from qdqopt.passes import TRANSFORMERS, PassContext, bias_dropout_fusion
from qdqopt.target import Target
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, fired, holds

NAMES = [n for n in fixture_names() if n.startswith("biasdropout/")]
CUDA = "CUDAExecutionProvider"
FUSE = bias_dropout_fusion.BiasDropoutFusion


def test_registered() -> None:
    assert TRANSFORMERS["BiasDropoutFusion"] is FUSE


def test_never_on_cpu() -> None:
    assert fired(NAMES, "BiasDropoutFusion") == []


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("biasdropout/residual", "extended"))
    monkeypatch.setattr(FUSE, "compatible_eps", ("CPUExecutionProvider",))
    assert differs("biasdropout/residual")


# ------------------------------------------------------------------------------------------- on the CUDA EP
def _on_cuda(source: str | onnx.ModelProto) -> Graph:
    graph = load_model(fixture_model(source) if isinstance(source, str) else source).graph
    for node_ in graph.nodes():
        node_.ep = CUDA
    return graph


def _ctx() -> PassContext:
    return PassContext(SessionConfig(), Target.detect(), partitioned=True)


def _fused(graph: Graph) -> list[tuple[str, list[str], list[str]]]:
    return [(n.op_type, list(n.inputs), list(n.outputs)) for n in graph.nodes()]


@pytest.mark.parametrize(
    ("name", "inputs", "outputs", "rest"),
    [
        ("biasdropout/bias", ["x", "bias", "", "ratio"], ["d", "mask"], "d"),
        ("biasdropout/bias_first", ["x", "bias", "", "ratio"], ["d", "mask"], "d"),
        ("biasdropout/same_shape", ["x", "bias", "", "ratio"], ["d", "mask"], "d"),
        ("biasdropout/opset12", ["x", "bias", "", "ratio"], ["d", "mask"], "d"),
        ("biasdropout/symbolic", ["x", "bias", "", "ratio"], ["d", "mask"], "d"),
        ("biasdropout/training", ["x", "bias", "", "ratio", "training"], ["d"], "d"),
        ("biasdropout/training_residual", ["x", "bias", "r", "ratio", "training"], ["res"], "res"),
        ("biasdropout/no_mask", ["x", "bias", "", "ratio"], ["d"], "d"),
    ],
)
def test_rules_on_cuda(name: str, inputs: list[str], outputs: list[str], rest: str) -> None:
    graph = _on_cuda(name)
    assert FUSE().apply(graph, _ctx())
    neg, fused = graph.nodes()  # index order: the new node last
    assert (fused.op_type, fused.domain, fused.name, fused.ep) == ("BiasDropout", MS_DOMAIN, "BiasDropout", CUDA)
    assert fused.inputs == inputs and fused.outputs == outputs
    assert fused.doc_string == "fused Add-Dropout-(Add) for dropout"
    assert fused.attr_int("seed", 0) == 7
    assert neg.op_type == "Neg" and neg.inputs == [rest]


def test_read_twice_keeps_residual_on_cuda() -> None:
    graph = _on_cuda("biasdropout/read_twice")
    assert FUSE().apply(graph, _ctx())
    ops = _fused(graph)
    assert ops[-1] == ("BiasDropout", ["x", "bias", "", "ratio"], ["d", "mask"])
    assert [op for op, _, _ in ops] == ["Add", "Neg", "Sigmoid", "BiasDropout"]


def test_bias_2d_refused_on_cuda() -> None:
    assert not FUSE().apply(_on_cuda("biasdropout/bias_2d"), _ctx())


def test_cpu_assigned_refused() -> None:
    graph = load_model(fixture_model("biasdropout/residual")).graph
    for node_ in graph.nodes():
        node_.ep = "CPUExecutionProvider"
    assert not FUSE().apply(graph, _ctx())


@pytest.mark.parametrize("name", ["biasdropout/residual", "biasdropout/residual_first"])
def test_mask_output_keeps_residual_on_cuda(name: str) -> None:
    """The Dropout's mask is a graph output, so the Dropout "produces a graph output": the residual Add stays."""
    graph = _on_cuda(name)
    assert FUSE().apply(graph, _ctx())
    assert [op for op, _, _ in _fused(graph)] == ["Add", "Neg", "BiasDropout"]
    assert _fused(graph)[-1] == ("BiasDropout", ["x", "bias", "", "ratio"], ["d", "mask"])


def test_bitmask_dropout_on_cuda() -> None:
    """A com.microsoft BitmaskDropout after the bias Add: BitmaskBiasDropout, its outputs kept."""
    nodes = [
        node("Add", ["bias", "x"], ["h"], "bias_add"),
        node("BitmaskDropout", ["h", "ratio"], ["d", "mask"], "bd", domain=MS_DOMAIN, seed=3),
        node("Neg", ["d"], ["out"], "neg"),
    ]
    g = graph(
        nodes,
        "g",
        [vi("x", FLOAT, [2, 8]), vi("bias", FLOAT, [8]), vi("ratio", FLOAT, [])],
        [vi("out", FLOAT, [2, 8]), vi("mask", onnx.TensorProto.UINT32, None)],
    )
    graph_ = _on_cuda(model(g, 13, ms_opset=1))
    assert FUSE().apply(graph_, _ctx())
    neg, fused = graph_.nodes()
    assert (fused.op_type, fused.name, fused.domain) == ("BitmaskBiasDropout", "BitmaskBiasDropout", MS_DOMAIN)
    assert fused.inputs == ["x", "bias", "", "ratio"] and fused.outputs == ["d", "mask"]
    assert fused.doc_string == "fused Add-Dropout-(Add) for bd" and fused.attr_int("seed", 0) == 3
    assert neg.inputs == ["d"]
