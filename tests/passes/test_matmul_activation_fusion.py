"""MatMulActivationFusion (``qdqopt/passes/matmul_activation_fusion.py``) against ORT 1.32, live, and on
DirectML-assigned graphs without ORT.

* Every ``matmulact/`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace.
  In a CPU session the transformer fuses nothing (its nodes must be on the DirectML EP), even after
  MatmulTransposeFusion / MatMulScaleFusion made the FusedMatMul.
* A mutation (the pass taking CPU-assigned nodes) must make the comparison fail.
* The rules themselves, on graphs whose nodes are assigned to the DirectML EP (no ORT session can do that here).
"""

from __future__ import annotations

import onnx
import pytest

from qdqopt.config import SessionConfig
from qdqopt.graph import Graph, load_model
from qdqopt.passes import TRANSFORMERS, PassContext, matmul_activation_fusion
from qdqopt.target import Target
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, fired, holds

NAMES = [n for n in fixture_names() if n.startswith("matmulact/")]
DML = "DmlExecutionProvider"
FUSE = matmul_activation_fusion.MatMulActivationFusion


def test_registered() -> None:
    assert TRANSFORMERS["MatMulActivationFusion"] is FUSE


def test_never_on_cpu() -> None:
    assert fired(NAMES, "MatMulActivationFusion") == []
    assert "matmulact/transpose_softmax" in fired(NAMES, "MatmulTransposeFusion")
    assert "matmulact/scale_softmax" in fired(NAMES, "MatMulScaleFusion")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


@pytest.mark.parametrize("name", ["matmulact/fused_softmax", "matmulact/transpose_softmax"])
def test_mutation_on_cpu(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    assert holds(compare(name, "extended"))
    monkeypatch.setattr(FUSE, "compatible_eps", ("CPUExecutionProvider",))
    assert differs(name)


# -------------------------------------------------------------------------------------------- on the Dml EP
def _on_dml(name: str) -> Graph:
    graph = load_model(fixture_model(name)).graph
    for node in graph.nodes():
        node.ep = DML
    return graph


def _ctx() -> PassContext:
    return PassContext(SessionConfig(), Target.detect(), partitioned=True)


def _attrs(node: object) -> dict[str, object]:
    return {k: onnx.helper.get_attribute_value(v) for k, v in node.attributes.items()}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "axis"), [("matmulact/fused_softmax", None), ("matmulact/fused_softmax11", 1)])
def test_rules_on_dml(name: str, axis: int | None) -> None:
    graph = _on_dml(name)
    assert FUSE().apply(graph, _ctx())
    neg, fused = graph.nodes()  # index order: the new node last
    assert (fused.op_type, fused.domain, fused.ep) == ("FusedMatMulActivation", "com.microsoft", DML)
    assert fused.name == "fused_matmul_FusedActivation"
    assert fused.inputs == ["a", "B"] and fused.outputs == ["y"] and neg.inputs == ["y"]
    assert fused.doc_string == " with activation Softmax"
    attrs = _attrs(fused)
    assert attrs["alpha"] == pytest.approx(0.5) and attrs["transB"] == 1 and attrs["activation"] == b"Softmax"
    # a Softmax without axis has the schema's default (-1 at opset 13) from Resolve, as in ORT: it is copied too
    assert attrs["activation_axis"] == (-1 if axis is None else axis)
    assert set(fused.attribute_order()) == set(attrs)  # written in the map's (std::unordered_map) order


@pytest.mark.parametrize("name", ["matmulact/fused_relu", "matmulact/read_twice", "matmulact/graph_output"])
def test_refused_on_dml(name: str) -> None:
    assert not FUSE().apply(_on_dml(name), _ctx())


def test_cpu_assigned_refused() -> None:
    graph = load_model(fixture_model("matmulact/fused_softmax")).graph
    for node in graph.nodes():
        node.ep = "CPUExecutionProvider"
    assert not FUSE().apply(graph, _ctx())
