"""Differential: function inlining (``Graph::InlineFunction``), ahead of time and in the partitioner, against live ORT.

* Every ``inlining/*`` fixture at every level, default config, ORT as a user runs it: tier X and P, and ORT's trace.
* The model-local fixtures with ``session.disable_aot_function_inlining=1``: the partitioner inlines them instead.
* The names ORT gives: a fixed expectation, and a mutation of the prefix that the comparison must catch.
* Bad input ORT rejects (missing or recursive function, an inlined name the graph already defines) is a one-line
  ModelError naming the node, never a traceback.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import qdqopt
from fixtures.handbuilt import inlining
from fixtures.handbuilt._util import FLOAT, graph, init, node, vi
from qdqopt.compare import LevelComparison, compare_level
from qdqopt.config import SessionConfig
from qdqopt.diff import compare
from qdqopt.errors import ModelError, ReferenceError
from qdqopt.graph import function_inlining, load_model, save_model
from qdqopt.levels import parse_level
from qdqopt.manager import run_pipeline
from qdqopt.passes.base import Unsupported
from qdqopt.reference import run_reference
from tests.conftest import patched

LEVELS = ["disable_all", "basic", "extended", "layout", "all"]
CASES = {case.name.removeprefix("inlining/"): case for case in inlining.GROUP.cases}
LOCAL = [name for name, case in CASES.items() if case.build().functions]
NO_AOT = {"session.disable_aot_function_inlining": "1"}
ONNX17 = helper.make_opsetid("", 17)


def _model(name: str) -> onnx.ModelProto:
    return CASES[name].build()


def _assert_matches(comp: LevelComparison) -> None:
    assert comp.report.holds("X"), "\n".join(comp.lines())
    assert comp.report.holds("P"), "\n".join(comp.lines())
    assert not comp.ort_only_modified, comp.notes()
    # a pass that declines the model (the transpose optimizer on a graph with subgraphs) ran in ORT only
    ort_lines = [line for line in comp.ort_lines if line.split()[1] not in comp.unsupported]
    assert comp.ours_lines == ort_lines


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(CASES))
def test_fixture_matches_ort(name: str, level: str) -> None:
    _assert_matches(compare_level(_model(name), level))


# --------------------------------------------------------------------------- ahead-of-time inlining switched off
def _run_without_aot(model: onnx.ModelProto, level: str) -> tuple[onnx.ModelProto, list[str], set[str]]:
    """qdqopt with ``session.disable_aot_function_inlining=1`` (the local functions stay calls until partitioning);
    like ``qdqopt.run``, a pass that declines the model is left out."""
    declined: set[str] = set()
    while True:
        loaded = load_model(model, inline_local_functions=False)
        try:
            pipeline = run_pipeline(
                loaded, parse_level(level), config=SessionConfig.from_mapping(NO_AOT), disabled=declined
            )
        except Unsupported as skipped:
            declined.add(skipped.name)
            continue
        return save_model(loaded), pipeline.ort_lines(), declined


@pytest.mark.parametrize("level", ["disable_all", "basic", "extended", "all"])
@pytest.mark.parametrize("name", LOCAL)
def test_local_functions_inlined_by_the_partitioner(name: str, level: str) -> None:
    model = _model(name)
    ours, ours_lines, declined = _run_without_aot(model, level)
    ref = run_reference(model, level, config=NO_AOT)
    report = compare(ours, ref.model)
    assert report.holds("X"), "\n".join(report.lines())
    assert report.holds("P"), "\n".join(report.lines())
    assert ours_lines == [str(t) for t in ref.trace if t.name not in declined]
    assert [f.name for f in ours.functions] == [f.name for f in model.functions]  # kept, as ORT keeps them


def test_run_honours_disable_aot_function_inlining() -> None:
    model = _model("local_function_before_eudq")
    ours = qdqopt.run(model, "disable_all", config=NO_AOT).model
    assert compare(ours, run_reference(model, "disable_all", config=NO_AOT).model).holds("P")


# ---------------------------------------------------------------------------------------------------------- names
def _names(model: onnx.ModelProto) -> list[tuple[str, str, list[str]]]:
    return [(n.name, n.op_type, list(n.output)) for n in model.graph.node]


def test_inlined_names_are_orts() -> None:
    expected = [
        ("", "HardSigmoid", ["_inlfunc_HardSwish_token_0_HS_X"]),
        ("", "Mul", ["a"]),
        ("_inlfunc_HardSwish", "Relu", ["_inlfunc_HardSwish_HS_X"]),
        ("", "HardSigmoid", ["_inlfunc_HardSwish_token_1_HS_X"]),
        ("", "Mul", ["y"]),
    ]
    model = _model("hardswish_name_collision")
    assert _names(run_reference(model, "disable_all").model) == expected
    assert _names(qdqopt.run(model, "disable_all").model) == expected
    twice = _model("local_function_twice")
    ours = qdqopt.run(twice, "disable_all").model
    assert _names(ours) == _names(run_reference(twice, "disable_all").model)
    assert [n.name for n in ours.graph.node] == [
        "",
        "_inlfunc_F_lr",
        "",
        "_inlfunc_F_token_0_id",
        "_inlfunc_F_token_0_lr",
        "_inlfunc_F_id",
    ]
    assert [t.name for t in ours.graph.initializer] == ["_inlfunc_F_k", "_inlfunc_F_token_0_k"]


def test_comparison_catches_other_inlined_names() -> None:
    """A different prefix keeps the structure (tier S) but not the names (tier X): the tests above would fail."""
    with patched(function_inlining, "INLINE_PREFIX", "_inl_"):
        comp = compare_level(_model("local_function_attributes"), "disable_all")
    assert comp.report.holds("S")
    assert not comp.report.holds("X")


# ------------------------------------------------------------------------------------------- what ORT does beyond
def test_inlined_nodes_resolve_at_the_models_opset() -> None:
    """A function importing ONNX 18 in an opset-17 model (the checker refuses it, ORT does not): its ReduceMax is
    ReduceMax-13 with the attribute form, as the model's opset says."""
    body = [node("ReduceMax", ["a"], ["b"], "rm", keepdims=1)]
    f = helper.make_function("custom", "FN", ["a"], ["b"], body, [helper.make_opsetid("", 18)])
    g = graph([node("FN", ["x"], ["y"], "c", "custom")], "g", [vi("x", FLOAT, [2, 4])], [vi("y", FLOAT, [1, 1])])
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)], functions=[f]
    )
    model.ir_version = 8
    for level in ("disable_all", "extended"):
        _assert_matches(compare_level(model, level))


def test_float_conv_hardswish_at_layout() -> None:
    """An inlined float HardSwish (HardSigmoid(1/6, 0.5) + Mul) between two Convs: at LAYOUT NchwcTransformer fuses
    it into the first nchwc.Conv as activation HardSwish. 16 channels, so that the second Conv reads the NCHWc value
    with block size 8 and 16 alike (one final ReorderOutput: no random order)."""
    rng = np.random.default_rng(3)
    inits = [
        init("w", rng.standard_normal((16, 3, 3, 3)), np.float32),
        init("b", rng.standard_normal(16), np.float32),
        init("w2", rng.standard_normal((16, 16, 1, 1)), np.float32),
    ]
    nodes = [
        node("Conv", ["x", "w", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
        node("HardSwish", ["c"], ["h"], "hs"),
        node("Conv", ["h", "w2"], ["y"], "conv2"),
    ]
    g = graph(nodes, "g", [vi("x", FLOAT, [1, 3, 8, 8])], [vi("y", FLOAT, [1, 16, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    comp = compare_level(model, "layout")
    _assert_matches(comp)
    assert comp.ort is not None
    fused = [n for n in comp.ort.graph.node if n.op_type == "Conv" and n.domain == "com.microsoft.nchwc"]
    activations = [helper.get_attribute_value(a) for n in fused for a in n.attribute if a.name == "activation"]
    assert activations == [b"HardSwish"]
    assert not any(n.op_type in ("HardSigmoid", "Mul") for n in comp.ort.graph.node)


def test_contrib_function_body_is_refused_clearly() -> None:
    """fp16 com.microsoft.Gelu: ORT inlines the body its C++ schema builds; qdqopt has no such body and says so."""
    g = graph([node("Gelu", ["x"], ["y"], "gelu", "com.microsoft")], "g", [vi("x", 10, [2, 4])], [vi("y", 10, [2, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    run_reference(model, "disable_all")  # ORT accepts it
    with pytest.raises(ModelError, match=r"'gelu' \(com.microsoft.Gelu-1\).*does not have that body"):
        qdqopt.run(model, "disable_all")


# ------------------------------------------------------------------------------------------------------ bad input
def _local_model(nodes: list[onnx.NodeProto], functions: list[onnx.FunctionProto]) -> onnx.ModelProto:
    g = graph(nodes, "g", [vi("x", FLOAT, [1, 4])], [vi("y", FLOAT, [1, 4])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    model = helper.make_model(g, opset_imports=opsets, functions=functions)
    model.ir_version = 8
    return model


def _calls(name: str, target: str) -> onnx.FunctionProto:
    body = [node(target, ["a"], ["b"], f"to_{target}", "custom")]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    return helper.make_function("custom", name, ["a"], ["b"], body, opsets)


BAD = {
    "missing_function": (
        _local_model(
            [node("Nope", ["x"], ["y"], "call_nope", "custom")],
            [helper.make_function("custom", "Other", ["a"], ["b"], [node("Neg", ["a"], ["b"], "n")], [ONNX17])],
        ),
        r"^node 'call_nope' \(custom:Nope\) is neither an operator ORT knows",
    ),
    "too_many_inputs": (
        _local_model(
            [node("F", ["x", "x"], ["y"], "call_f", "custom")],
            [helper.make_function("custom", "F", ["a"], ["b"], [node("Neg", ["a"], ["b"], "n")], [ONNX17])],
        ),
        r"^node 'call_f' \(custom.F\) has 2 inputs .*cannot exceed the number of formal parameters",
    ),
    "recursive_function": (
        _local_model([node("R", ["x"], ["y"], "call_r", "custom")], [_calls("R", "R")]),
        r"^node 'to_R' of model-local function custom:R calls custom:R: .*\(custom:R -> custom:R\)",
    ),
    "mutually_recursive_functions": (
        _local_model([node("R1", ["x"], ["y"], "call_r1", "custom")], [_calls("R1", "R2"), _calls("R2", "R1")]),
        r"^node 'to_R1' of model-local function custom:R2 calls custom:R1: .*\(custom:R1 -> custom:R2 -> custom:R1\)",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_functions_fail_like_ort(case: str) -> None:
    model, message = BAD[case]
    with pytest.raises(ReferenceError):
        run_reference(model, "disable_all")
    with pytest.raises(ModelError, match=message) as caught:
        qdqopt.run(model, "disable_all")
    assert "\n" not in str(caught.value)


def test_inlined_value_the_graph_defines_fails_like_ort() -> None:
    nodes = [
        node("Relu", ["x"], ["_inlfunc_HardSwish_HS_X"], "r"),
        node("HardSwish", ["_inlfunc_HardSwish_HS_X"], ["y"], "hs"),
    ]
    model = helper.make_model(
        graph(nodes, "g", [vi("x", FLOAT, [1, 4])], [vi("y", FLOAT, [1, 4])]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    with pytest.raises(ReferenceError, match=r"Duplicate definition of name \(_inlfunc_HardSwish_HS_X\)"):
        run_reference(model, "disable_all")
    with pytest.raises(ModelError, match=r"^node 'hs' \(HardSwish\).*Duplicate definition of name"):
        qdqopt.run(model, "disable_all")
