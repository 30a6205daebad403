"""ConstantFolding's ``Graph::UpdateShapeInference`` and the NodeArg types around it, against ORT 1.32, live.

* Every ``shapes/`` fixture at DISABLE_ALL, BASIC, EXTENDED and LAYOUT, default config and
  ``session.qdqisint8allowed=1``, with ORT as it runs: ORT's saved model byte for byte (tier P) and ORT's log line
  for line.
* ConstantFolding folds a second Shape chain, made foldable by the first, in the same pass (ORT's log: modified in
  the first Level1 step only), and re-inference is what makes it: with ``update_shape_inference`` a no-op the
  fixtures differ from ORT.
* The merge of an inferred type into a NodeArg's, the type a schema binds for an output ONNX cannot infer, and how
  far shape values propagate at load.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from fixtures.handbuilt import shapes as shapes_fixtures
from qdqopt import run
from qdqopt.compare import compare_level
from qdqopt.graph import load_model
from qdqopt.graph.model import merge_type
from qdqopt.partition import partition
from qdqopt.passes import constant_folding
from tests.conftest import fixture_model, patched

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
    """Mutation: ConstantFolding without ``UpdateShapeInference`` leaves the second Shape chain in place."""
    with patched(constant_folding, "update_shape_inference", lambda graph, node: None):
        comp = compare_level(fixture_model(name), "basic")
    assert not comp.report.holds("S")


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
    """An output ONNX cannot infer gets the element type its schema binds, not its input's shape (a Resize whose
    ``sizes`` length is unknown to inference without initializer data)."""
    model = load_model(fixture_model("shapes/split_ends_after_resize"))
    partition(model.graph)
    found = model.graph.value_type("t")
    assert found is not None and found.tensor_type.elem_type == TensorProto.FLOAT
    assert not found.tensor_type.HasField("shape")


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
