"""The differ: each tier fails on the kind of difference it is about, and names it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qdqopt.diff import compare


def _model(*, names: tuple[str, str] = ("a", "b"), weight: float = 2.0, order: bool = True) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Mul", ["x", "w"], [names[0]], name="mul"),
        helper.make_node("Sigmoid", [names[0]], [names[1]], name="sig"),
        helper.make_node("Add", [names[1], "x"], ["y"], name="add"),
    ]
    if not order:
        nodes = [nodes[0], nodes[1], nodes[2]][::-1]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((3,), weight, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_identical_models_hold_every_tier() -> None:
    report = compare(_model(), _model())
    assert report.tier == "P" and report.holds("P")
    assert "N" in report.implied  # S holds, so the models were not run


def test_renamed_tensor_breaks_x_not_s() -> None:
    report = compare(_model(names=("a", "renamed")), _model())
    assert report.holds("S") and not report.holds("X")
    assert any("'renamed'" in str(d) and d.tier == "X" for d in report.differences)


def test_node_order_breaks_x() -> None:
    report = compare(_model(order=False), _model())
    assert report.holds("S") and not report.holds("X")
    assert any(d.where.startswith("node #0") for d in report.differences)


def test_changed_initializer_breaks_s_and_n() -> None:
    report = compare(_model(weight=3.0), _model())
    assert report.verdict["S"] is False and report.verdict["N"] is False
    assert "N" not in report.implied
    assert any(d.tier == "N" and "values differ" in d.what for d in report.differences)
    assert report.tier == "-"


def test_attribute_order_breaks_only_p() -> None:
    ours, ref = _model(), _model()
    for model, attrs in ((ours, ("alpha", "beta")), (ref, ("beta", "alpha"))):
        gemm_attrs = [helper.make_attribute(a, 1.0) for a in attrs]
        node = helper.make_node("Gemm", ["x", "x2"], ["g"], name="gemm")
        node.attribute.extend(gemm_attrs)
        model.graph.node.append(node)
        model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 2]))
        model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 2]))
    report = compare(ours, ref)
    assert report.holds("X") and not report.holds("P")
    assert any("attribute order" in d.what for d in report.differences)
