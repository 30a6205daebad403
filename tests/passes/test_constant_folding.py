"""ConstantFolding's ``Graph::UpdateShapeInference`` and the NodeArg types around it, against ORT 1.32, live.

* Every ``shapes/`` fixture at DISABLE_ALL, BASIC, EXTENDED and LAYOUT, default config and
  ``session.qdqisint8allowed=1``, with ORT as it runs: ORT's saved model byte for byte (tier P) and ORT's log line
  for line.
* ConstantFolding folds a second Shape chain, made foldable by the first, in the same pass (ORT's log: modified in
  the first Level1 step only), and re-inference is what makes it: with ``update_shape_inference`` a no-op the
  fixtures differ from ORT.
* The merge of an inferred type into a NodeArg's, the type a schema binds for an output ONNX cannot infer, and how
  far shape values propagate at load.
* The QDQ folds: every ``folding/`` fixture but the ``cse_`` ones, default config and ``session.qdqisint8allowed=1``,
  the whole BASIC level, and ConstantFolding alone on every fixture of ``tests/passes/_helpers/wbq_folding.py``;
  a few models under the config keys that change ConstantFolding: ORT's log and ORT's bytes (tier P, value_info and
  graph I/O types aside).
* The evaluator (``qdqopt/evaluate.py``) gives the values ORT's ConstantFolding writes, int4 included; If inlining
  renames the values nested subgraphs read.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fixtures.handbuilt import shapes as shapes_fixtures
from qdqopt import run
from qdqopt.compare import compare_level
from qdqopt.config import SessionConfig
from qdqopt.evaluate import clear_cache, evaluate_node
from qdqopt.graph import load_model
from qdqopt.graph.model import merge_type
from qdqopt.partition import partition
from qdqopt.passes import constant_folding
from qdqopt.passes.constant_folding import DEFAULT_MAX_OUTPUT_BYTES, is_deterministic, max_output_size
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, patched
from tests.passes._helpers.wbq_folding import CONFIGS as FOLDING_CONFIGS
from tests.passes._helpers.wbq_folding import FIXTURES, _fixture, _fixtures_of, _only, assert_matches

CONFIGS = {"default": {}, "int8": {"session.qdqisint8allowed": "1"}}
NAMES = [c.name for c in shapes_fixtures.GROUP.cases]
LEVELS = ["disable_all", "basic", "extended", "layout"]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_fixture_as_ort_runs(name: str, level: str, config: str) -> None:
    comp = compare_level(fixture_model(name), level, config=CONFIGS[config])
    assert not comp.isolated and not comp.ort_disabled
    assert comp.ours_lines == comp.ort_lines, f"trace differs\nours {comp.ours_lines}\nORT  {comp.ort_lines}"
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


CHAINED = ["shapes/resize_sizes_float", "shapes/resize_sizes_qdq", "shapes/split_ends_after_resize"]


@pytest.mark.parametrize("name", CHAINED)
def test_second_shape_chain_folds_in_the_same_pass(name: str) -> None:
    comp = compare_level(fixture_model(name), "basic")
    folding = [line for line in comp.ort_lines if "GraphTransformer ConstantFolding " in line]
    assert folding == ["GraphTransformer ConstantFolding modified: 1", "GraphTransformer ConstantFolding modified: 0"]
    assert comp.ours_lines == comp.ort_lines
    assert comp.ours is not None
    assert "Shape" not in _op_types(comp.ours)


def test_split_made_at_extended() -> None:
    """The Slices whose ends the folds made constant become one Split (GatherSliceToSplitFusion)."""
    comp = compare_level(fixture_model("shapes/split_ends_after_resize"), "extended")
    assert comp.ours is not None
    ops = _op_types(comp.ours)
    assert "Split" in ops and "Slice" not in ops
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


@pytest.mark.parametrize("name", ["shapes/resize_sizes_float", "shapes/split_ends_after_resize"])
def test_without_reinference_the_fixture_differs(name: str) -> None:
    """Mutation: ConstantFolding without ``UpdateShapeInference`` does not fold the second Shape chain in the same
    pass (the next step's Resolve types it, so it may fold later: the log, or the file, differs from ORT's)."""
    with patched(constant_folding, "update_shape_inference", lambda graph, node: None):
        comp = compare_level(fixture_model(name), "basic")
    assert not comp.report.holds("P") or comp.ours_lines != comp.ort_lines


def test_symbolic_dims_take_the_inferred_values() -> None:
    """The dims ``quantize_static`` left symbolic are saved with the values the Resolve after the folds infers, and
    the Slice outputs the QDQ fusion leaves without a producer keep the type they had then."""
    model = fixture_model("shapes/slice_ends_symbolic_value_info")
    for level in ("basic", "extended"):
        saved = run(model, level).model
        types = {v.name: v.type.tensor_type for v in saved.graph.value_info}
        for value in ("p0", "p1", "cat"):
            dims = [d.dim_value for d in types[value].shape.dim]
            assert dims == ([1, 8, 4, 4] if value == "cat" else [1, 4, 4, 4]), (level, value, dims)


def test_value_info_of_unused_initializers_is_kept() -> None:
    saved = run(fixture_model("shapes/unused_constant_value_info"), "disable_all").model
    assert [v.name for v in saved.graph.value_info] == ["c_unused", "c_used", "i_unused", "x_dq"]
    assert "i_unused" not in {t.name for t in saved.graph.initializer}


def _dims(type_proto: onnx.TypeProto) -> list[int | str | None] | None:
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim]


@pytest.mark.parametrize(
    ("existing", "inferred", "merged"),
    [
        (["unk__0", 8, None], [1, 8, 4], [1, 8, 4]),  # a value replaces a symbolic or unknown dim
        ([1, "n", None], [None, "m", "k"], [1, "n", "k"]),  # a symbol fills only an unknown dim
        ([1, 8, 4], [1, 6, 4], [1, None, 4]),  # another value: UnionShapeInfo clears the dim
        ([1, 8], [1, 8, 4], None),  # another rank: the shape is cleared
        (None, [2, 3], [2, 3]),
    ],
)
def test_merge_type(
    existing: list[int | str | None] | None, inferred: list[int | str | None], merged: list[int | str | None] | None
) -> None:
    old = helper.make_tensor_type_proto(TensorProto.FLOAT, existing)
    new = helper.make_tensor_type_proto(TensorProto.FLOAT, inferred)
    assert _dims(merge_type(old, new)) == merged


def test_schema_bound_output_type_has_no_shape() -> None:
    """An output ONNX cannot infer a size for gets the element type its schema binds, not its input's dims (a Resize
    whose ``sizes`` values come from a Shape chain: at most the rank is known)."""
    model = load_model(fixture_model("shapes/split_ends_after_resize"))
    partition(model.graph)
    found = model.graph.value_type("t")
    assert found is not None and found.tensor_type.elem_type == TensorProto.FLOAT
    dims = found.tensor_type.shape.dim if found.tensor_type.HasField("shape") else []
    assert not any(d.HasField("dim_value") for d in dims)


def test_declared_dims_against_inferred_symbols() -> None:
    saved = run(fixture_model("shapes/declared_dims_kept"), "disable_all").model
    outputs = {v.name: _dims(v.type) for v in saved.graph.output}
    assert outputs["y_value"] == [1, 8] and outputs["y_name"] == ["M", 8]


def test_value_propagation_stops_where_orts_does() -> None:
    """At load, shape values reach a Resize, Expand, Reshape or ConstantOfShape only through what ORT propagates."""
    saved = run(fixture_model("shapes/value_propagation"), "disable_all").model
    outputs = {v.name: _dims(v.type) for v in saved.graph.output}
    assert outputs["y_resize"] == [1, 2, 8, 8] and outputs["y_expand"] == [1, 2, 8, 8]
    assert outputs["y_reshape"] == [4, 4, 2] and outputs["y_cos_mul"] == [1, 4, 16, 16]
    assert outputs["y_resize_sliced"] == [f"y_resize_sliced_{k}" for k in range(4)]
    assert outputs["y_cos_add"] == ["y_cos_add_0"]


# ------------------------------------------------------------------------------------------------ QDQ folding
# The ``folding/`` fixtures and the config keys that change ConstantFolding, byte for byte against ORT at BASIC
# (:func:`tests.passes._helpers.wbq_folding.assert_matches`); the corpus models: ``tests/test_wbq_folding_cse.py``.
@pytest.mark.parametrize("config", list(FOLDING_CONFIGS))
@pytest.mark.parametrize("name", _fixtures_of("ConstantFolding"))
def test_fixture_matches_ort(name: str, config: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=FOLDING_CONFIGS[config], isolate=True), "P")


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


@pytest.mark.parametrize("config", list(FOLDING_CONFIGS))
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_int4_folds_as_ort_runs(level: str, config: str) -> None:
    """ORT folds the int4 Q on a constant and the int4 DQ -> Transpose -> Q unit (nothing disabled): same bytes,
    same log; without the packed buffer qdqopt leaves both Qs."""
    model = _fixture("folding/int4_q_and_unit_on_constants")
    comp = compare_level(model, level, config=FOLDING_CONFIGS[config])
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


# ------------------------------------------------------------------------------------------------ subgraphs
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


@pytest.mark.parametrize("alone", ["ConstantFolding"])
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_pass_alone_matches_ort(name: str, alone: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", disabled=_only(alone), isolate=True), "P")
