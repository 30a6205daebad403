"""GroupQueryAttentionFusion and GroupQueryAttentionPreNormFusion (``qdqopt/passes/group_query_attention_fusion.py``,
``group_query_attention_pre_norm_fusion.py``) against ORT 1.32, live, and on CUDA/WebGPU-assigned graphs without ORT.

* Every ``gqa/`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace. In a
  CPU session neither transformer fuses anything (their nodes must be on the CUDA, or WebGPU, EP).
* Mutations (either pass taking CPU-assigned nodes) must make the comparison fail.
* The rules themselves, on graphs whose nodes are assigned to the CUDA or WebGPU EP (no ORT session can do that
  here): the expected weights are computed from the fixture's own initializers, never stored.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from qdqopt.config import SessionConfig
from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node, load_model
from qdqopt.passes import TRANSFORMERS, PassContext
from qdqopt.passes import group_query_attention_fusion as gqa_fusion
from qdqopt.passes import group_query_attention_pre_norm_fusion as pre_norm
from qdqopt.target import Target
from tests.conftest import fixture_model, fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, fired, holds

NAMES = [n for n in fixture_names() if n.startswith("gqa/")]
CUDA = "CUDAExecutionProvider"
WEBGPU = "WebGpuExecutionProvider"
GQA_PASSES = ("GroupQueryAttentionFusion", "GroupQueryAttentionPreNormFusion")


def test_registered() -> None:
    assert TRANSFORMERS["GroupQueryAttentionFusion"] is gqa_fusion.GroupQueryAttentionFusion
    assert TRANSFORMERS["GroupQueryAttentionPreNormFusion"] is pre_norm.GroupQueryAttentionPreNormFusion


@pytest.mark.parametrize("transformer", GQA_PASSES)
def test_never_on_cpu(transformer: str) -> None:
    assert fired(NAMES, transformer) == []


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


@pytest.mark.parametrize(
    ("module", "cls", "name"),
    [
        (gqa_fusion, "GroupQueryAttentionFusion", "gqa/rotary_matmul"),
        (gqa_fusion, "GroupQueryAttentionFusion", "gqa/rotary_nbits"),
        (pre_norm, "GroupQueryAttentionPreNormFusion", "gqa/prenorm"),
    ],
)
def test_mutation_on_cpu(monkeypatch: pytest.MonkeyPatch, module: object, cls: str, name: str) -> None:
    assert holds(compare(name, "extended"))
    monkeypatch.setattr(getattr(module, cls), "compatible_eps", ("CPUExecutionProvider",))
    assert differs(name)


# ------------------------------------------------------------------------------------------- on the CUDA EP
def _on(name: str, ep: str = CUDA) -> Graph:
    graph = load_model(fixture_model(name)).graph
    for node in graph.nodes():
        node.ep = ep
    return graph


def _ctx() -> PassContext:
    return PassContext(SessionConfig(), Target.detect(), partitioned=True)


def _attrs(node: Node) -> dict[str, object]:
    return {k: onnx.helper.get_attribute_value(v) for k, v in node.attributes.items()}


def _only(graph: Graph, op_type: str) -> Node:
    (node,) = [n for n in graph.nodes() if n.op_type == op_type]
    return node


def _source(name: str) -> dict[str, np.ndarray]:
    """The fixture's initializers, as written."""
    return {t.name: onnx.numpy_helper.to_array(t) for t in fixture_model(name).graph.initializer}


def _gqa_after_fusion(graph: Graph, projection: str) -> Node:
    gqa = _only(graph, "GroupQueryAttention")
    assert gqa.inputs == [
        projection, "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos", "sin"
    ]  # fmt: skip
    assert _attrs(gqa)["do_rotary"] == 1
    return gqa


@pytest.mark.parametrize(
    ("name", "order", "q_hidden", "kv_hidden"),
    [
        ("gqa/rotary_matmul", "qkv", 16, 8),
        ("gqa/rotary_matmul_heads", "qkv", 32, 16),
        ("gqa/rotary_default_do_rotary", "qkv", 16, 8),
        ("gqa/rotary_k_first", "kqv", 16, 16),  # the first rotary met (node order) is taken as Q's
    ],
)
def test_matmul_rules_on_cuda(name: str, order: str, q_hidden: int, kv_hidden: int) -> None:
    graph = _on(name)
    assert gqa_fusion.GroupQueryAttentionFusion().apply(graph, _ctx())
    assert sorted(n.op_type for n in graph.nodes()) == ["GroupQueryAttention", "MatMul"]
    matmul = _only(graph, "MatMul")
    assert (matmul.name, matmul.domain, matmul.ep, matmul.doc_string) == ("MatMul", "", CUDA, "MatMul fusion node")
    assert matmul.inputs == ["x", "qkv_B"] and matmul.outputs == ["MatMul_output"]
    total = q_hidden + 2 * kv_hidden
    out_type = graph.value_type("MatMul_output")  # the layer norm value's type, dim 2 the merged width
    assert out_type is not None
    dims = [d.dim_value or d.dim_param for d in out_type.tensor_type.shape.dim]
    assert (out_type.tensor_type.elem_type, dims) == (onnx.TensorProto.FLOAT16, [1, "S", total])
    src = _source(name)
    expected = np.concatenate([src[f"W{tag}"] for tag in order], axis=1)
    assert expected.shape == (32, total)
    np.testing.assert_array_equal(graph.array("qkv_B"), expected)
    assert graph.initializer("qkv_B").data_type == onnx.TensorProto.FLOAT16  # type: ignore[union-attr]
    assert not any(graph.is_initializer(f"W{tag}") for tag in "qkv")  # Resolve dropped them
    _gqa_after_fusion(graph, "MatMul_output")


@pytest.mark.parametrize(
    ("name", "zero_points", "scale_dims"),
    [
        ("gqa/rotary_nbits", True, [64]),
        ("gqa/rotary_nbits_no_zp", False, [64]),
        ("gqa/rotary_nbits_scales_2d", True, [32, 2]),
    ],
)
def test_nbits_rules_on_cuda(name: str, zero_points: bool, scale_dims: list[int]) -> None:
    graph = _on(name)
    assert gqa_fusion.GroupQueryAttentionFusion().apply(graph, _ctx())
    assert sorted(n.op_type for n in graph.nodes()) == ["GroupQueryAttention", "MatMulNBits"]
    nbits = _only(graph, "MatMulNBits")
    assert (nbits.name, nbits.domain, nbits.doc_string) == ("MatMulNBits", "com.microsoft", "MatMulNBits fusion node")
    wanted = ["x", "qkv_B", "qkv_scale", *(["qkv_zp"] if zero_points else [])]
    assert nbits.inputs == wanted and nbits.outputs == ["MatMul_output"]
    attrs = _attrs(nbits)  # Q's, with N set to the merged width (and the schema's defaults filled by Resolve)
    assert {k: attrs[k] for k in ("K", "N", "bits", "block_size")} == {"K": 32, "N": 32, "bits": 4, "block_size": 16}
    src = _source(name)
    np.testing.assert_array_equal(graph.array("qkv_B"), np.concatenate([src[f"B{t}"] for t in "qkv"]))
    scales = np.concatenate([src[f"scales_{t}"].reshape(-1) for t in "qkv"]).reshape(scale_dims)
    np.testing.assert_array_equal(graph.array("qkv_scale"), scales)
    if zero_points:
        zps = np.concatenate([src[f"zp_{t}"] for t in "qkv"])  # blocks / 2 = 1 byte a row
        np.testing.assert_array_equal(graph.array("qkv_zp"), zps)
    _gqa_after_fusion(graph, "MatMul_output")


@pytest.mark.parametrize("name", ["gqa/rotary_already", "gqa/rotary_no_v_matmul"])
def test_near_misses_on_cuda(name: str) -> None:
    graph = _on(name)
    before = sorted(n.op_type for n in graph.nodes())
    assert not gqa_fusion.GroupQueryAttentionFusion().apply(graph, _ctx())
    assert sorted(n.op_type for n in graph.nodes()) == before


def test_float_weights_fail_on_cuda() -> None:
    """ORT reads the weights as fp16 (``Initializer::data<MLFloat16>``): a float32 one fails the session."""
    with pytest.raises(ModelError, match="Tensor type mismatch"):
        gqa_fusion.GroupQueryAttentionFusion().apply(_on("gqa/rotary_float"), _ctx())


def test_gqa_fusion_not_on_webgpu() -> None:
    assert not gqa_fusion.GroupQueryAttentionFusion().apply(_on("gqa/rotary_matmul", WEBGPU), _ctx())


# -------------------------------------------------------------------------------------- the pre-norm variant
@pytest.mark.parametrize(("name", "ep"), [("gqa/prenorm", CUDA), ("gqa/prenorm", WEBGPU), ("gqa/prenorm_float", CUDA)])
def test_pre_norm_rules(name: str, ep: str) -> None:
    graph = _on(name, ep)
    assert pre_norm.GroupQueryAttentionPreNormFusion().apply(graph, _ctx())
    (gqa,) = graph.nodes()
    assert (gqa.op_type, gqa.domain, gqa.name, gqa.ep) == ("GroupQueryAttention", "com.microsoft", "gqa_qknorm", ep)
    assert gqa.doc_string == "GroupQueryAttention with fused per-head Q/K RMSNorm"
    assert gqa.inputs == [
        "q_proj", "k_proj", "v_proj", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos", "sin",
        "", "", "", "", "", "q_norm_weight", "k_norm_weight",
    ]  # fmt: skip
    assert gqa.outputs == ["out", "present_key", "present_value"]
    attrs = _attrs(gqa)
    assert attrs["qk_norm_epsilon"] == pytest.approx(1e-6)
    assert {k: attrs[k] for k in ("num_heads", "kv_num_heads", "do_rotary")} == {
        "num_heads": 2, "kv_num_heads": 1, "do_rotary": 1
    }  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "gqa/prenorm_eps_mismatch",
        "gqa/prenorm_no_rotary",
        "gqa/prenorm_k_inner_wrong",
        "gqa/prenorm_q_weight_2d",
        "gqa/prenorm_axis3",
        "gqa/prenorm_packed",
    ],
)
def test_pre_norm_near_misses_on_cuda(name: str) -> None:
    graph = _on(name)
    before = sorted(n.op_type for n in graph.nodes())
    assert not pre_norm.GroupQueryAttentionPreNormFusion().apply(graph, _ctx())
    assert sorted(n.op_type for n in graph.nodes()) == before


def test_pre_norm_then_nothing_for_gqa_fusion_on_cuda() -> None:
    """The pre-norm fixture has no RotaryEmbedding: GroupQueryAttentionFusion leaves it (and it is do_rotary=1)."""
    assert not gqa_fusion.GroupQueryAttentionFusion().apply(_on("gqa/prenorm"), _ctx())
