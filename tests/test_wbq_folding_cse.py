"""WeightBiasQuantization, ConstantFolding and CommonSubexpressionElimination against ORT 1.32, computed live.

Every comparison runs qdqopt and ORT at ORT_ENABLE_BASIC with the same session config and the same disabled list
(:func:`qdqopt.compare.compare_level`, which also disables what qdqopt does not implement on both sides) and checks:

* the transformer logs are identical (same passes reporting ``modified: 1``, in the same steps);
* the saved models are byte-identical once ``value_info`` and the graph inputs'/outputs' *types* are stripped:
  nodes, their order, names (``_token_N`` included), domains, doc strings, attributes, and initializer names,
  order and bytes, in every graph (what these passes write; value_info and types come from shape inference);
* the differ's tier: P (bytes) for the fixtures and for the corpus models where one of the three passes fires;
  for the other corpus candidates only S plus the above (what is left there belongs to other passes).

Models: the hand-built groups ``wbq/`` and ``folding/`` (fixtures/handbuilt), the PT2E TinyConvNet, and the corpus
models a static scan picks as candidates (a Conv/ConvTranspose/Gemm, a Shape or If, a node on constants only, or
two nodes with the same op on equal inputs); each is run with the default config, and with
``session.qdqisint8allowed=1`` when ORT's own log shows one of the three passes firing. Each pass is also run alone
(every other Level1 transformer and rule disabled on both sides), and a few models under the config keys that
change ConstantFolding.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

import fixtures
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.config import SessionConfig
from qdqopt.evaluate import clear_cache, evaluate_node
from qdqopt.levels import PASSES
from qdqopt.passes.constant_folding import DEFAULT_MAX_OUTPUT_BYTES, is_deterministic, max_output_size
from qdqopt.passes.weight_bias_quantization import weight_quantization_parameters
from qdqopt.reference import run_reference
from tests.conftest import corpus_id, corpus_models, ort_accepts

MINE = ("WeightBiasQuantization", "ConstantFolding", "CommonSubexpressionElimination")
INT8 = {"session.qdqisint8allowed": "1"}
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8_allowed": INT8}
FIXTURES = [
    f.name for f in fixtures.all_fixtures() if f.name.startswith(("wbq/", "folding/")) or f.name == "tinyconvnet_pt2e"
]
L1_NAMES = sorted(
    {p.name for p in PASSES if p.stage == "L1"} | {r.name for p in PASSES if p.stage == "L1" for r in p.rules}
)


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


def _fired(c: LevelComparison) -> set[str]:
    return {line.split()[1] for line in c.ort_lines if line.endswith("1")}


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_ort(name: str, config: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=CONFIGS[config], isolate=True), "P")


@pytest.mark.parametrize("alone", MINE)
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_pass_alone_matches_ort(name: str, alone: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", disabled=_only(alone), isolate=True), "P")


@pytest.mark.parametrize(
    ("group", "pass_name"),
    [
        ("wbq/", "WeightBiasQuantization"),
        ("folding/", "ConstantFolding"),
        ("folding/", "CommonSubexpressionElimination"),
    ],
)
def test_fixture_groups_cover_both_outcomes(group: str, pass_name: str) -> None:
    """Each group has cases where ORT's pass fires and cases where it must not (so the comparisons can fail)."""
    outcomes = set()
    for name in FIXTURES:
        if name.startswith(group):
            trace = run_reference(_fixture(name), "basic", disabled=_only(pass_name)).trace
            outcomes.add(any(t.name == pass_name and t.modified for t in trace))
    assert outcomes == {True, False}


# ------------------------------------------------------------------------------------------------ corpus
def _init_key(t: onnx.TensorProto) -> bytes:
    bare = onnx.TensorProto(data_type=t.data_type, dims=t.dims, raw_data=t.raw_data)
    bare.float_data.extend(t.float_data)
    bare.int32_data.extend(t.int32_data)
    bare.int64_data.extend(t.int64_data)
    return bytes(bare.SerializeToString())


def _candidate_graph(g: onnx.GraphProto, outer: frozenset[str]) -> bool:
    constants = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"} | outer
    keys = {t.name: _init_key(t) for t in g.initializer}
    produced = {o for n in g.node if n.op_type != "Constant" for o in n.output}
    seen: set[tuple[object, ...]] = set()
    for n in g.node:
        if n.op_type in ("Shape", "If", "Conv", "ConvTranspose", "Gemm"):
            return True
        if n.op_type == "Constant":
            continue
        present = [i for i in n.input if i]
        if all(i in constants and i not in produced for i in present):
            return True
        key = (n.domain, n.op_type, tuple(keys.get(i, i.encode()) for i in n.input))
        if key in seen:
            return True
        seen.add(key)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and _candidate_graph(a.g, frozenset(constants)):
                return True
    return False


def _corpus_candidates() -> list[object]:
    out: list[object] = []
    for path in corpus_models():
        proto = onnx.load(str(path), load_external_data=False)
        if _candidate_graph(proto.graph, frozenset()):
            out.append(pytest.param(path, id=corpus_id(path)))
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="shared corpus not found"))]


@pytest.mark.parametrize("path", _corpus_candidates())
def test_corpus_model_matches_ort(path: Path) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects the model")
    c = compare_level(path, "basic", isolate=True)
    if _fired(c) & set(MINE):
        assert_matches(c, "P")
        assert_matches(compare_level(path, "basic", config=INT8, isolate=True), "P")
    else:  # none of the three passes fires: they must at least leave the model to the others untouched
        assert_matches(c)


# ------------------------------------------------------------------------------------------------ config keys
CONFIG_VARIANTS: dict[str, dict[str, str]] = {
    "no_qdq": {"session.disable_quant_qdq": "1"},
    "no_qdq_keep_dq": {"session.disable_quant_qdq": "1", "session.disable_qdq_constant_folding": "1"},
    "keep_dq_only": {"session.disable_qdq_constant_folding": "1"},
    "limit_16": {"optimization.constant_folding_max_output_size_in_bytes": "16"},
    "limit_0": {"optimization.constant_folding_max_output_size_in_bytes": "0"},
    "limit_bad": {"optimization.constant_folding_max_output_size_in_bytes": "16 bytes"},
}
CONFIG_MODELS = [
    "tinyconvnet_pt2e",
    "wbq/conv_per_channel_bias",
    "folding/dq_transpose_q_unit",
    "folding/dq_into_conv_not_folded",
    "folding/nonzero_not_folded",
    "folding/constant_chain_to_graph_output",
    "folding/shape_of_static_input",
]


@pytest.mark.parametrize("variant", list(CONFIG_VARIANTS))
@pytest.mark.parametrize("name", CONFIG_MODELS)
def test_config_variant_matches_ort(name: str, variant: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=CONFIG_VARIANTS[variant], isolate=True), "P")


def test_max_output_size_parsing() -> None:
    def limit(value: str | None) -> int:
        cfg = {} if value is None else {"optimization.constant_folding_max_output_size_in_bytes": value}
        return max_output_size(SessionConfig(cfg))

    assert limit(None) == DEFAULT_MAX_OUTPUT_BYTES
    assert limit("16") == 16
    assert limit("0") == 0
    assert limit("-1") == DEFAULT_MAX_OUTPUT_BYTES
    assert limit("16 bytes") == DEFAULT_MAX_OUTPUT_BYTES
    assert limit(str(2**63)) == DEFAULT_MAX_OUTPUT_BYTES


def test_is_deterministic() -> None:
    assert is_deterministic("", "Round")
    assert is_deterministic("ai.onnx", "QuantizeLinear")
    assert not is_deterministic("", "Dropout")
    assert not is_deterministic("", "RandomUniformLike")
    assert is_deterministic("com.microsoft", "DequantizeLinear")
    assert not is_deterministic("com.microsoft", "QLinearConv")
    assert not is_deterministic("ai.onnx.ml", "LabelEncoder")


# ------------------------------------------------------------------------------------------------ evaluator, numbers
def _run_single_node_in_ort(node: onnx.NodeProto, inits: list[onnx.TensorProto]) -> list[np.ndarray]:
    """The same node as an ORT session at ORT_ENABLE_BASIC: ConstantFolding folds it; read the initializers."""
    g = onnx.helper.make_graph([node], "g", [], [onnx.ValueInfoProto(name=o) for o in node.output])
    g.initializer.extend(inits)
    model = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    saved = run_reference(model, "basic", capture_log=False).model
    folded = {t.name: onnx.numpy_helper.to_array(t) for t in saved.graph.initializer}
    return [folded[o] for o in node.output]


@pytest.mark.parametrize(
    ("op_type", "values", "attrs"),
    [
        ("Round", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e30, float("nan")], {}),
        ("Cast", [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 2.5], {"to": onnx.TensorProto.INT32}),
        ("Cast", [1e-8, 70000.0, -70000.0, float("nan")], {"to": onnx.TensorProto.FLOAT16}),
    ],
)
def test_evaluator_equals_ort_constant_folding(op_type: str, values: list[float], attrs: dict[str, int]) -> None:
    """qdqopt.evaluate gives the very values ORT's ConstantFolding writes (edge values numpy would not match)."""
    clear_cache()
    tensor = onnx.numpy_helper.from_array(np.array(values, np.float32), "a")
    node = onnx.helper.make_node(op_type, ["a"], ["y"], name="n")
    node.attribute.extend(onnx.helper.make_attribute(k, v) for k, v in attrs.items())
    attributes = list(node.attribute)
    result = evaluate_node(op_type, "", attributes, [tensor], [True], {"": 21})
    assert result.ok, result.error
    (expected,) = _run_single_node_in_ort(node, [tensor])
    assert result.values[0].dtype == expected.dtype
    assert result.values[0].tobytes() == expected.tobytes()
    assert result.shapes[0] == expected.shape


def test_evaluator_refuses_a_node_without_cpu_kernel() -> None:
    tensor = onnx.numpy_helper.from_array(np.array([4.0, 9.0], np.float16), "a")
    result = evaluate_node("Sqrt", "", [], [tensor], [True], {"": 21})
    assert not result.ok
    ok = evaluate_node(
        "Sqrt", "", [], [onnx.numpy_helper.from_array(np.array([4.0], np.float32), "a")], [True], {"": 21}
    )
    assert ok.ok and ok.values[0].tolist() == [2.0]


def test_evaluator_keeps_the_packed_int4_buffer() -> None:
    """An int4 output (no numpy type in ORT's binding) comes back as the kernel's packed buffer, the very raw_data
    ORT's ConstantFolding writes (odd count: the last byte half used), and decoded for ``values``."""
    clear_cache()
    tensor = onnx.numpy_helper.from_array(np.array([-9.0, -8.5, -0.5, 0.5, 1.5, 7.49, 20.0], np.float32), "a")
    scale = onnx.numpy_helper.from_array(np.array(1.0, np.float32), "s")
    zp = onnx.helper.make_tensor("z", onnx.TensorProto.INT4, [], [0])
    node = onnx.helper.make_node("QuantizeLinear", ["a", "s", "z"], ["y"], name="n")
    result = evaluate_node("QuantizeLinear", "", [], [tensor, scale, zp], [True], {"": 21})
    assert result.ok, result.error
    assert result.types == ("tensor(int4)",) and result.shapes == ((7,),)
    g = onnx.helper.make_graph([node], "g", [], [onnx.ValueInfoProto(name="y")], [tensor, scale, zp])
    model = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    saved = run_reference(model, "basic", capture_log=False).model
    (folded,) = [t for t in saved.graph.initializer if t.name == "y"]
    assert folded.data_type == onnx.TensorProto.INT4
    assert result.raw == (folded.raw_data,) and len(folded.raw_data) == 4
    assert result.values[0].astype(np.int8).tolist() == [-8, -8, 0, 0, 2, 7, 7]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_int4_folds_as_ort_runs(level: str, config: str) -> None:
    """ORT folds the int4 Q on a constant and the int4 DQ -> Transpose -> Q unit (nothing disabled): same bytes,
    same log; without the packed buffer qdqopt leaves both Qs."""
    model = _fixture("folding/int4_q_and_unit_on_constants")
    comp = compare_level(model, level, config=CONFIGS[config])
    assert comp.ours_lines == comp.ort_lines
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours is not None and "QuantizeLinear" not in [n.op_type for n in comp.ours.graph.node]


def test_int4_fold_needs_the_packed_buffer() -> None:
    """Mutation: reading int4 outputs through numpy (which refuses them) leaves the Qs in place, unlike ORT."""
    from qdqopt import evaluate
    from tests.conftest import patched

    clear_cache()
    try:
        with patched(evaluate, "_RAW_ONLY", frozenset()):
            comp = compare_level(_fixture("folding/int4_q_and_unit_on_constants"), "basic")
    finally:
        clear_cache()
    assert not comp.report.holds("S")


def test_weight_quantization_parameters_equal_ort() -> None:
    """``GetQuantizationParameter<int8>``: the scale and zp ORT writes for a fp32 Conv weight, bit for bit."""
    model = _fixture("wbq/conv_fp32_weight_and_bias")
    weight = next(t for t in model.graph.initializer if t.name == "W")
    saved = run_reference(model, "basic", capture_log=False).model
    folded: Mapping[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in saved.graph.initializer}
    scale, zp = weight_quantization_parameters(onnx.numpy_helper.to_array(weight))
    assert folded["convF_weight_scale"].tobytes() == np.float32(scale).tobytes()
    assert folded["convF_weight_zp"].tobytes() == np.int8(zp).tobytes()


# ------------------------------------------------------------------------------------------------ subgraphs
def test_subgraph_initializer_order() -> None:
    """Initializers removed inside a subgraph are swapped with the last one, as in the main graph."""
    assert_matches(compare_level(_fixture("wbq/subgraph_conv_outer_bias"), "basic", isolate=True), "P")


def _if_inlining_a_read_node_output() -> onnx.ModelProto:
    """If(constant false) whose else-branch computes ``t`` and a nested If (on a graph input) reads ``t``."""
    h = onnx.helper
    f = onnx.TensorProto.FLOAT
    inner_then = h.make_graph(
        [h.make_node("Mul", ["t", "x"], ["it_out"], name="inner_mul")],
        "then_branch",
        [],
        [h.make_tensor_value_info("it_out", f, [3])],
    )
    inner_else = h.make_graph(
        [h.make_node("Sub", ["t", "x"], ["ie_out"], name="inner_sub")],
        "else_branch",
        [],
        [h.make_tensor_value_info("ie_out", f, [3])],
    )
    else_g = h.make_graph(
        [
            h.make_node("Add", ["x", "k"], ["t"], name="else_add"),
            h.make_node("If", ["cond2"], ["else_out"], name="inner_if", then_branch=inner_then, else_branch=inner_else),
        ],
        "else_branch",
        [],
        [h.make_tensor_value_info("else_out", f, [3])],
        [onnx.numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "k")],
    )
    then_g = h.make_graph(
        [h.make_node("Neg", ["x"], ["then_out"], name="then_neg")],
        "then_branch",
        [],
        [h.make_tensor_value_info("then_out", f, [3])],
    )
    g = h.make_graph(
        [h.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        "g",
        [h.make_tensor_value_info("x", f, [3]), h.make_tensor_value_info("cond2", onnx.TensorProto.BOOL, [])],
        [h.make_tensor_value_info("y", f, [3])],
        [onnx.numpy_helper.from_array(np.array(False), "cond")],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_if_inlining_renames_values_read_by_nested_subgraphs() -> None:
    """The nested If's implicit input follows the renaming, and its value_info entry is typed."""
    assert_matches(compare_level(_if_inlining_a_read_node_output(), "basic", isolate=True), "P")
