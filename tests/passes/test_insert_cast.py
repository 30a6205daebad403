"""Tests of the CPU partitioner, InsertCastTransformer and RemoveDuplicateCastTransformer, against ORT computed live.

The 8 corpus models where the two passes fire at ORT_DISABLE_ALL, under the three session configs of the sweep,
must come out byte-identical to ORT's optimized model, with ORT's transformer log. Small hand-built fp16 graphs
(from docs/notes/insert_cast_probe.py) pin the rules one by one, and the unit tests check the kernel lookups.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qdqopt
from qdqopt.diff import compare
from qdqopt.errors import ModelError
from qdqopt.errors import ReferenceError as OrtRejected
from qdqopt.graph import load_model
from qdqopt.kernels import CPU, cpu_kernel_for_types, input_arg_counts, node_has_cpu_kernel, node_schema
from qdqopt.partition import partition
from qdqopt.passes import insert_cast
from qdqopt.reference import run_reference
from tests.passes._helpers import knownx

H, F, I64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.INT64
CORPUS = Path("/work/shared/corpus")
CORPUS_MODELS = [
    "onnx_backend_node/test_qlinearmatmul_2D_int8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_2D_uint8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_3D_int8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_3D_uint8_float16/model.onnx",
    "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8s8.onnx",
    "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8u8.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/fusion/matmul_integer_to_float16_int8.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/qdq_optimization/dup_qdq_float16.onnx",
]
CONFIGS = {
    "no_qdq": {"session.disable_quant_qdq": "1"},
    "default": {},
    "int8_allowed": {"session.qdqisint8allowed": "1"},
}


def _corpus_params() -> list[object]:
    params: list[object] = []
    for rel in CORPUS_MODELS:
        for key, cfg in CONFIGS.items():
            params.append(
                pytest.param(
                    rel,
                    cfg,
                    id=f"{Path(rel).parent.name if rel.endswith('model.onnx') else Path(rel).stem}-{key}",
                )
            )
    return params


def assert_like_ort(model: str | onnx.ModelProto, config: dict[str, str] | None = None) -> qdqopt.OptimizeResult:
    """qdqopt's DISABLE_ALL output is byte-identical to ORT's, and its log lines are ORT's."""
    cfg = config if config is not None else {"session.disable_quant_qdq": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = run_reference(model, 0, config=cfg)
        ours = qdqopt.run(model, 0, config=cfg)
    report = compare(ours.model, ref.model, tiers=("S", "X", "P"))
    assert report.holds("P"), "\n".join(report.lines())
    assert ours.pipeline.ort_lines() == [str(t) for t in ref.trace]
    return ours


# ------------------------------------------------------------------------------------------------- corpus, live ORT
@pytest.mark.parametrize(("rel", "config"), _corpus_params())
def test_corpus_model_matches_ort(rel: str, config: dict[str, str]) -> None:
    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    result = assert_like_ort(str(path), config)
    assert result.pipeline.ort_lines()[-3:-1] == [
        "GraphTransformer RemoveDuplicateCastTransformer modified: 1",
        "GraphTransformer CastFloat16Transformer modified: 1",
    ]


# ------------------------------------------------------------------------------------------------ hand-built graphs
def vi(name: str, elem: int, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def node(op: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=name, **attrs)


def model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    opset: int = 21,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def h16(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float16)


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def test_chain_of_two_wrapped_nodes() -> None:
    """Relu and Sigmoid have no fp16 CPU kernel: one input Cast, one output Cast, the pair between them removed."""
    m = model(
        [node("Relu", ["x"], ["a"], "relu"), node("Sigmoid", ["a"], ["y"], "sig")], [vi("x", H, [4])], [vi("y", H, [4])]
    )
    out = assert_like_ort(m).model
    assert [(n.op_type, n.name) for n in out.graph.node] == [
        ("Cast", "InsertedPrecisionFreeCast_x"),
        ("Relu", "relu"),
        ("Sigmoid", "sig"),
        ("Cast", "InsertedPrecisionFreeCast_y"),
    ]
    assert list(out.graph.node[1].output) == ["InsertedPrecisionFreeCast_a"]  # the back-cast's arg, kept


def test_fp16_graph_io_initializer_and_shared_cast() -> None:
    """fp16 graph input and initializer stay fp16 behind a Cast; one Cast per arg; a graph output keeps its name."""
    m = model(
        [
            node("Add", ["x", "w"], ["a"], "add"),
            node("Mul", ["a", "x"], ["y"], "mul"),
            node("Neg", ["a"], ["z"], "neg"),
        ],
        [vi("x", H, [4])],
        [vi("y", H, [4]), vi("a", H, [4]), vi("z", H, [4])],
        [init("w", h16(4))],
    )
    out = assert_like_ort(m).model
    assert [i.name for i in out.graph.initializer] == ["w"]
    assert out.graph.initializer[0].data_type == H


def test_isolated_fp16_node_is_forced_to_fp32() -> None:
    """Round has an fp16 kernel but sits between kernel-less nodes: it runs in fp32 too (no Casts around it)."""
    m = model(
        [
            node("Relu", ["x"], ["a"], "relu"),
            node("Round", ["a"], ["b"], "round"),
            node("Sigmoid", ["b"], ["y"], "sig"),
        ],
        [vi("x", H, [4])],
        [vi("y", H, [4])],
    )
    out = assert_like_ort(m).model
    assert sum(n.op_type == "Cast" for n in out.graph.node) == 2


def test_fp16_kernels_left_alone() -> None:
    """Nodes with an fp16 CPU kernel need nothing: both log lines say 0 and the graph is saved as it came."""
    m = model(
        [node("Identity", ["x"], ["a"], "id"), node("Round", ["a"], ["y"], "round")],
        [vi("x", H, [4])],
        [vi("y", H, [4])],
    )
    result = assert_like_ort(m)
    assert "GraphTransformer CastFloat16Transformer modified: 0" in result.pipeline.ort_lines()


def test_model_casts_only() -> None:
    """The remover acts on the model's own Casts: lossless round trips go, lossy ones stay."""
    m = model(
        [
            node("Cast", ["x"], ["c1"], "f32_to_f64", to=TensorProto.DOUBLE),
            node("Cast", ["c1"], ["c2"], "f64_to_f32", to=F),
            node("Relu", ["c2"], ["y1"], "relu1"),
            node("Cast", ["x"], ["d1"], "f32_to_f16", to=H),
            node("Cast", ["d1"], ["d2"], "f16_to_f32", to=F),
            node("Relu", ["d2"], ["y2"], "relu2"),
            node("Cast", ["i"], ["f1"], "i64_a", to=I64),
            node("Cast", ["f1"], ["f2"], "i64_b", to=I64),
            node("Neg", ["f2"], ["y3"], "neg"),
        ],
        [vi("x", F, [4]), vi("i", I64, [4])],
        [vi("y1", F, [4]), vi("y2", F, [4]), vi("y3", I64, [4])],
    )
    out = assert_like_ort(m).model
    assert sorted(n.name for n in out.graph.node if n.op_type == "Cast") == ["f16_to_f32", "f32_to_f16"]


def test_if_subgraph_and_dtype() -> None:
    """A subgraph gets its own Casts and name counter; EyeLike's dtype=FLOAT16 becomes FLOAT."""
    then_g = helper.make_graph(
        [node("Relu", ["x"], ["t1"], "then_relu"), node("Sigmoid", ["t1"], ["t2"], "then_sig")],
        "then",
        [],
        [vi("t2", H, [4])],
    )
    else_g = helper.make_graph([node("Identity", ["x"], ["e1"], "else_id")], "else", [], [vi("e1", H, [4])])
    m = model(
        [
            node("Neg", ["x"], ["nx"], "neg"),
            node("If", ["cond"], ["o"], "if", then_branch=then_g, else_branch=else_g),
            node("Add", ["o", "nx"], ["y"], "add"),
            node("EyeLike", ["s"], ["e"], "eye", dtype=H),
            node("Add", ["e", "s"], ["y2"], "add2"),
        ],
        [vi("x", H, [4]), vi("cond", TensorProto.BOOL, []), vi("s", H, [3, 3])],
        [vi("y", H, [4]), vi("y2", H, [3, 3])],
    )
    assert_like_ort(m)


def test_counter_continues_after_ensure_unique_dq() -> None:
    """EnsureUniqueDQ's names use the graph's counter first; the Casts' _token_ numbers continue from there."""
    m = model(
        [
            node("QuantizeLinear", ["x", "s", "z"], ["q"], "Q"),
            node("DequantizeLinear", ["q", "s", "z"], ["d"], "DQ"),
            node("Relu", ["x"], ["rx"], "InsertedPrecisionFreeCast_x"),
            *[node("Relu", ["d"], [f"r{i}"], f"relu{i}") for i in range(3)],
        ],
        [vi("x", H, [4])],
        [vi("r0", H, [4]), vi("r1", H, [4]), vi("r2", H, [4]), vi("rx", H, [4])],
        [init("s", np.array(0.1, np.float16)), init("z", np.array(0, np.uint8))],
    )
    assert_like_ort(m, {})


def test_duplicate_tensor_name_fails_like_ort() -> None:
    """A Cast's new arg is named like the node: an existing tensor of that name is ORT's 'Duplicate definition'."""
    m = model(
        [node("Relu", ["x"], ["InsertedPrecisionFreeCast_q"], "relu"), node("Neg", ["q"], ["y2"], "neg")],
        [vi("x", H, [4]), vi("q", H, [4])],
        [vi("InsertedPrecisionFreeCast_q", H, [4]), vi("y2", H, [4])],
    )
    with pytest.raises(OrtRejected, match="Duplicate definition"):
        run_reference(m, 0)
    with pytest.raises(ModelError, match="Duplicate definition"):
        qdqopt.run(m, 0)


def test_output_only_fp16_node_fails_like_ort() -> None:
    """RandomNormal(dtype=FLOAT16) has no kernel and no fp16 input to cast: ORT's session fails, so does qdqopt."""
    m = model(
        [node("RandomNormal", [], ["r"], "rn", dtype=H, shape=[4]), node("Relu", ["r"], ["y"], "relu")],
        [],
        [vi("y", H, [4])],
    )
    with pytest.raises(OrtRejected, match="Could not find an implementation for RandomNormal"):
        run_reference(m, 0)
    with pytest.raises(ModelError, match="Could not find an implementation for RandomNormal"):
        qdqopt.run(m, 0)


# -------------------------------------------------------------------------------------------------------- unit level
def test_partition_assigns_by_kernel_and_types() -> None:
    m = model(
        [
            node("Add", ["x", "x"], ["a"], "add"),
            node("Identity", ["a"], ["b"], "id"),
            node("Add", ["f", "f"], ["y"], "addf"),
        ],
        [vi("x", H, [4]), vi("f", F, [4])],
        [vi("b", H, [4]), vi("y", F, [4])],
    )
    loaded = load_model(m)
    partition(loaded.graph)
    assert {n.name: n.ep for n in loaded.graph.nodes()} == {"add": "", "id": CPU, "addf": CPU}
    add = loaded.graph.nodes()[0]
    assert not node_has_cpu_kernel(loaded.graph, add)
    schema = node_schema(add)
    assert schema is not None
    assert cpu_kernel_for_types("", "Add", schema.since_version, {"T": "tensor(float)"})
    assert not cpu_kernel_for_types("", "Add", schema.since_version, {"T": "tensor(float16)"})


def test_input_arg_counts() -> None:
    m = model(
        [node("Concat", ["a", "b", "c"], ["y"], "cat", axis=0)], [vi(n, F, [1]) for n in "abc"], [vi("y", F, [3])]
    )
    loaded = load_model(m)
    schema = node_schema(loaded.graph.nodes()[0])
    assert schema is not None
    assert input_arg_counts(schema, 3) == [3]
    clip = model([node("Clip", ["a", "", "c"], ["y"], "clip")], [vi(n, F, [1]) for n in "ac"], [vi("y", F, [1])])
    clip_schema = node_schema(load_model(clip).graph.nodes()[0])
    assert clip_schema is not None
    assert input_arg_counts(clip_schema, 3) == [1, 1, 1]
    assert input_arg_counts(clip_schema, 1) == [1, 0, 0]


# ------------------------------------------------------------------------------------ issue #12: fp16, int8 activations
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fp16_"))
def test_knownx_fp16_int8_activations_as_ort(name: str, level: str, config: str) -> None:
    """fp16 ConvTranspose / Conv with int8 (and, the twin, uint8) activations, at every level and both configs."""
    knownx.assert_exact(name, level, config)


def test_knownx_fp16_boundary() -> None:
    """QDQS8ToU8Transformer rewrites the int8 pairs at the default config only; not the uint8 twin."""
    for name in knownx.fixtures("fp16_conv_s8", "fp16_convtranspose_s8"):
        assert "QDQS8ToU8Transformer" in (knownx.ort_modified(name, "extended", "default") or ()), name
        assert "QDQS8ToU8Transformer" not in (knownx.ort_modified(name, "extended", "int8-allowed") or ()), name
    twin = knownx.ort_modified("knownx/fp16_convtranspose_u8", "extended", "default")
    assert twin is not None and "QDQS8ToU8Transformer" not in twin


@pytest.mark.parametrize("name", knownx.fixtures("fp16_conv_s8", "fp16_convtranspose_s8"))
def test_knownx_fp16_resolved_types_are_needed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read without the types the last Resolve gave S8ToU8's new values, the activation DQ stays fp16 with a Cast
    on its output, where ORT casts its scale: the model differs."""
    monkeypatch.setattr(insert_cast, "_has_untyped_value", lambda graph: False)
    comp = knownx.compare(name, "extended")
    assert not comp.report.holds("S")
    assert any("Cast 'InsertedPrecisionFreeCast_xs'" in line for line in comp.lines()), comp.lines()
