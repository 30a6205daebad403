"""SwiGluFusion and BiasSoftmaxFusion (``qdqopt/passes/swiglu_fusion.py``, ``bias_softmax_fusion.py``) against
ORT 1.32, live, and on CUDA-assigned graphs without ORT.

* Every ``swiglu/`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace. In
  a CPU session neither transformer fuses anything (their nodes must be on the CUDA / ROCm EP).
* Mutations (either pass taking CPU-assigned nodes) must make the comparison fail.
* The rules themselves, on graphs whose nodes are assigned to the CUDA EP (no ORT session can do that here).
"""

from __future__ import annotations

import onnx
import pytest

from qdqopt.config import SessionConfig
from qdqopt.graph import Graph, load_model
from qdqopt.passes import TRANSFORMERS, PassContext, bias_softmax_fusion, swiglu_fusion
from qdqopt.target import Target
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, fired, holds

NAMES = [n for n in fixture_names() if n.startswith("swiglu/")]
CUDA = "CUDAExecutionProvider"


def test_registered() -> None:
    assert TRANSFORMERS["SwiGluFusion"] is swiglu_fusion.SwiGluFusion
    assert TRANSFORMERS["BiasSoftmaxFusion"] is bias_softmax_fusion.BiasSoftmaxFusion


def test_never_on_cpu() -> None:
    assert fired(NAMES, "SwiGluFusion") == []
    assert fired(NAMES, "BiasSoftmaxFusion") == []
    assert "swiglu/glu_silu" in fired(NAMES, "QuickGeluFusion")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_swiglu_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("swiglu/glu_quick_gelu", "extended"))
    monkeypatch.setattr(swiglu_fusion.SwiGluFusion, "compatible_eps", ("CPUExecutionProvider",))
    assert differs("swiglu/glu_quick_gelu")


def test_mutation_bias_softmax_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert holds(compare("swiglu/softmax_bert_opset13", "extended"))
    monkeypatch.setattr(bias_softmax_fusion, "FUSING_EPS", ("CPUExecutionProvider",))
    assert differs("swiglu/softmax_bert_opset13")


# ------------------------------------------------------------------------------------------- on the CUDA EP
def _on_cuda(name: str) -> Graph:
    graph = load_model(fixture_model(name)).graph
    for node in graph.nodes():
        node.ep = CUDA
    return graph


def _ctx() -> PassContext:
    return PassContext(SessionConfig(), Target.detect(), partitioned=True)


def _attrs(node: object) -> dict[str, object]:
    return {k: onnx.helper.get_attribute_value(v) for k, v in node.attributes.items()}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["swiglu/glu_quick_gelu", "swiglu/glu_up_first", "swiglu/glu_symbolic"])
def test_swiglu_rules_on_cuda(name: str) -> None:
    graph = _on_cuda(name)
    assert swiglu_fusion.SwiGluFusion().apply(graph, _ctx())
    (node,) = graph.nodes()
    assert (node.op_type, node.domain, node.name, node.ep) == ("SwiGLU", "com.microsoft", "mul/SwiGluFusion/", CUDA)
    assert node.inputs == ["g", "u"] and node.outputs == ["y"] and node.doc_string == "fused QuickGelu and Mul"
    attrs = _attrs(node)  # the schema's defaults (activation_beta, limit) filled in by Resolve, as ORT does
    assert attrs["activation_alpha"] == pytest.approx(1.5) and attrs["round_activation"] == 1


def test_swiglu_default_alpha_and_broadcast_on_cuda() -> None:
    graph = _on_cuda("swiglu/glu_default_alpha")
    assert swiglu_fusion.SwiGluFusion().apply(graph, _ctx())
    assert _attrs(graph.nodes()[0])["activation_alpha"] == pytest.approx(1.702)
    assert not swiglu_fusion.SwiGluFusion().apply(_on_cuda("swiglu/glu_broadcast"), _ctx())


@pytest.mark.parametrize(
    ("name", "inputs", "axis", "inner"),
    [
        ("swiglu/softmax_bert_opset13", ["x", "m"], 3, 1),
        ("swiglu/softmax_bert_opset11", ["x", "m"], 3, 1),
        ("swiglu/softmax_mask_first", ["x", "m"], 3, 1),
        ("swiglu/softmax_outer", ["x", "m"], 3, 0),
    ],
)
def test_bias_softmax_rules_on_cuda(name: str, inputs: list[str], axis: int, inner: int) -> None:
    graph = _on_cuda(name)
    assert bias_softmax_fusion.BiasSoftmaxFusion().apply(graph, _ctx())
    (node,) = graph.nodes()
    assert (node.op_type, node.domain, node.name) == ("BiasSoftmax", "com.microsoft", "BiasSoftmax")
    assert node.inputs == inputs and node.outputs == ["y"]
    assert node.doc_string == "fused add and softmax into softmax(input + bias)"
    assert _attrs(node) == {"axis": axis, "is_inner_broadcast": inner}


def test_bias_softmax_13_needs_last_axis_on_cuda() -> None:
    assert not bias_softmax_fusion.BiasSoftmaxFusion().apply(_on_cuda("swiglu/softmax_axis1_opset13"), _ctx())
