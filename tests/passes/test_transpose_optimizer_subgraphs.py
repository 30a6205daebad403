"""The transpose optimizer's NodeArg types and its recursion into subgraphs (``qdqopt/passes/transpose_optimizer.py``,
``transpose_optimization/api.py``, the saver's pinned types in ``qdqopt/graph``).

* ``ApiGraph`` keeps NodeArg types as ORT does: ``SetShape`` writes only dims > 0 and leaves an untyped NodeArg alone,
  ``CopyValueInfo``/``PermuteDims``/``UnsqueezeDims`` copy dims as they are (symbolic names too), new nodes and
  ``MoveOutput`` create untyped NodeArgs, ``Shape()`` reads a symbolic dim as -1.
* Saved models, against ORT 1.32 live (tier P, in ``tests/passes/test_transpose_optimizer.py`` for every
  ``transpose/`` fixture): here the facts the fixtures were built to show, and mutations that must make the
  comparison fail.
"""

from __future__ import annotations

import onnx
import pytest

from fixtures.handbuilt import transpose as transpose_fixtures
from qdqopt.compare import compare_level
from qdqopt.graph.model import load_model
from qdqopt.passes import transpose_optimizer as pass_module
from qdqopt.passes.transpose_optimization import OptimizerCtx, make_ctx, optimize
from qdqopt.passes.transpose_optimization.api import UNTYPED
from qdqopt.passes.transpose_optimizer import TransposeOptimizer, TransposeOptimizerCPU

NAMES = (TransposeOptimizer.name, TransposeOptimizerCPU.name)


def _fixture(name: str) -> onnx.ModelProto:
    return next(c for c in transpose_fixtures.CASES if c.name == f"transpose/{name}").build()


def _compare(model: onnx.ModelProto, level: str = "basic") -> bool:
    """Whether qdqopt's saved model equals ORT's byte for byte, with both transpose optimizers on both sides."""
    comp = compare_level(model, level)
    assert not [n for n in comp.unsupported if n in NAMES], comp.unsupported
    return comp.report.holds("P")


def _ctx(model: onnx.ModelProto) -> OptimizerCtx:
    ctx = make_ctx(load_model(model).graph, "")
    assert ctx is not None
    return ctx


def _symbolic_model() -> onnx.ModelProto:
    return _fixture("nodearg_killed_symbolic")


# ------------------------------------------------------------------------------------------------ ApiGraph types
def test_copy_and_permute_keep_symbolic_dims() -> None:
    ctx = _ctx(_symbolic_model())
    tr = ctx.make_transpose("x", [0, 3, 1, 2])
    out = tr.outputs[0]
    assert ctx.value_type(out) == UNTYPED  # a new node's output has no type until Resolve
    ctx.copy_value_info("x", out)
    ctx.permute_dims(out, [0, 3, 1, 2])
    assert ctx.value_type(out) == (onnx.TensorProto.FLOAT, ["N", 3, 4, 5])
    assert ctx.shape(out) == [-1, 3, 4, 5]  # Shape(): a symbolic dim reads as -1
    ctx.unsqueeze_dims(out, [0, 5])
    assert ctx.value_type(out) == (onnx.TensorProto.FLOAT, [1, "N", 3, 4, 5, 1])


def test_set_shape_writes_only_positive_dims() -> None:
    ctx = _ctx(_symbolic_model())
    ctx.set_shape("r", ctx.shape("x"))  # [-1, 4, 5, 3]: the symbolic N is lost
    assert ctx.value_type("r") == (onnx.TensorProto.FLOAT, [None, 4, 5, 3])
    ctx.set_shape("r", [0, 2])
    assert ctx.value_type("r") == (onnx.TensorProto.FLOAT, [None, 2])
    ctx.set_shape("r", None)  # ClearShape: the element type stays
    assert ctx.value_type("r") == (onnx.TensorProto.FLOAT, None)


def test_set_shape_and_copy_leave_untyped_nodeargs_alone() -> None:
    ctx = _ctx(_symbolic_model())
    out = ctx.make_transpose("x", [0, 3, 1, 2]).outputs[0]
    ctx.set_shape(out, [1, 2, 3, 4])  # NodeArg::SetShape only edits a tensor type
    assert ctx.value_type(out) == UNTYPED
    ctx.copy_value_info(out, "r")  # nothing to copy from an untyped NodeArg
    assert ctx.value_type("r") == (onnx.TensorProto.FLOAT, ["N", 3, 4, 5])


def test_move_output_gives_the_source_an_untyped_nodearg() -> None:
    ctx = _ctx(_symbolic_model())
    relu = next(n for n in ctx.graph.nodes() if n.op_type == "Relu")
    tr = ctx.make_transpose("", [0, 2, 3, 1])
    ctx.move_output(relu, 0, tr, 0)
    assert tr.outputs[0] == "r"
    assert ctx.value_type("r") == (onnx.TensorProto.FLOAT, ["N", 3, 4, 5])  # the NodeArg moves with its type
    assert relu.outputs[0] == "relu"
    assert ctx.value_type("relu") == UNTYPED


def test_killed_declared_values_keep_their_types() -> None:
    """t0 and r (declared) lose their producers: the run reports them with the types they had (N included)."""
    ctx = _ctx(_symbolic_model())
    optimize(ctx)
    replaced = ctx.replaced_types()
    assert replaced["t0"] == (onnx.TensorProto.FLOAT, ["N", 3, 4, 5])
    assert replaced["r"] == (onnx.TensorProto.FLOAT, ["N", 3, 4, 5])
    assert "y" in replaced  # the graph output moved to the Relu: kept, but saved only should it die
    assert ctx.graph.producer("t0") is None and ctx.graph.producer("r") is None
    pass_module.write_back_types(ctx.graph, ctx)
    assert sorted(ctx.graph.pinned_types()) == ["r", "relu", "t0"]  # relu: the type the run set (not saved)


# ------------------------------------------------------------------------------------------------ saved models
def test_each_graph_counts_its_own_tokens() -> None:
    """Every graph of the model names its second new Transpose ``Transpose_token_1`` (ORT: one generator per graph)."""
    model = load_model(_fixture("subgraph_if_tokens"))
    TransposeOptimizer()._run(model.graph)
    graphs = [model.graph, *(sub for _, _, sub in model.graph.subgraphs())]
    assert len(graphs) == 3
    for graph in graphs:
        names = sorted(n.name for n in graph.nodes() if n.op_type == "Transpose")
        assert names == ["Transpose_token_1"], (graph.name, names)


def test_main_graph_then_subgraphs() -> None:
    """The main graph is optimized before its subgraphs, each subgraph modified on its own."""
    model = load_model(_fixture("subgraph_if_cancel"))
    seen: list[str] = []
    base = TransposeOptimizer()
    original = base._optimize

    def record(graph):  # type: ignore[no-untyped-def]
        seen.append(graph.name)
        return original(graph)

    base._optimize = record  # type: ignore[method-assign]
    assert base._run(model.graph)[1]
    assert seen[0] == "g" and sorted(seen[1:]) == ["else", "then"]
    assert all(sub.modified for _, _, sub in model.graph.subgraphs())


def test_mutation_no_recursion() -> None:
    """Without the recursion the branches keep their Transposes: the comparison must fail."""
    assert _compare(_fixture("subgraph_if_cancel"))
    original = pass_module._TransposeOptimizerBase._run

    def main_only(self: pass_module._TransposeOptimizerBase, graph):  # type: ignore[no-untyped-def]
        return self._optimize(graph)

    pass_module._TransposeOptimizerBase._run = main_only  # type: ignore[method-assign]
    try:
        assert not _compare(_fixture("subgraph_if_cancel"))
    finally:
        pass_module._TransposeOptimizerBase._run = original  # type: ignore[method-assign]


@pytest.mark.parametrize("name", ["nodearg_dq_declared_static", "nodearg_ir3_initializer_inputs"])
def test_mutation_types_not_pinned(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the pinned types the saver writes the declared shapes as loaded: the comparison must fail."""
    assert _compare(_fixture(name))
    monkeypatch.setattr("qdqopt.graph.core.Graph.pin_value_type", lambda self, name, type_proto: None)
    assert not _compare(_fixture(name))


def test_mutation_killed_value_not_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attention model's declared '177' dies in the run: saved with the type the Level1 passes before gave it."""
    from tests.conftest import CORPUS

    path = CORPUS / "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8s8.onnx"
    if not path.is_file():
        pytest.skip("corpus model not found")
    model = onnx.load(path)
    assert _compare(model)
    monkeypatch.setattr(OptimizerCtx, "replaced_types", lambda self: {})
    assert not _compare(model)
