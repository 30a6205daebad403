"""The graph core against ORT: topological order on random DAGs, names, external data, targets, load/save; the
transformer fixtures' graph-core classes (``knownt/``: NodeArg types, shape values, initializers)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qdqopt import partition as partition_module
from qdqopt import run
from qdqopt.cli import example_model
from qdqopt.diff import compare
from qdqopt.errors import ModelError, ReferenceError
from qdqopt.graph import Changes, Graph, inference, load_model, save_model
from qdqopt.graph import model as model_module
from qdqopt.levels import parse_level
from qdqopt.manager import run_pipeline
from qdqopt.reference import run_reference
from qdqopt.target import Target
from tests.conftest import (
    corpus_id,
    corpus_models,
    corpus_sample,
    fixture_model,
    handbuilt_sample,
    realarch_sample,
    transformers_sample,
)
from tests.passes._helpers import knownx
from tests.passes._helpers.gelu_family import differs

F = TensorProto.FLOAT


def _random_dag(seed: int) -> onnx.ModelProto:
    """A shuffled random DAG with one DQ shared by several consumers, so that ORT modifies and re-sorts it."""
    r = random.Random(seed)
    tensors = ["x1", "x2", "d"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x1", "s", "z"], ["q"], name="qn"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
    ]
    for i in range(r.randint(6, 18)):
        op = r.choice(["Add", "Mul", "Sigmoid", "Neg", "Relu", "Sub"])
        ins = [r.choice(tensors) for _ in range(2 if op in ("Add", "Mul", "Sub") else 1)]
        if i < 2 and "d" not in ins:
            ins[0] = "d"
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
        tensors.append(f"t{i}")
    used = {x for n in nodes for x in n.input}
    outs = [t for t in tensors[3:] if t not in used or r.random() < 0.15]
    r.shuffle(nodes)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x1", F, [2, 3]), helper.make_tensor_value_info("x2", F, [2, 3])],
        [helper.make_tensor_value_info(o, F, [2, 3]) for o in outs],
        [
            numpy_helper.from_array(np.array(0.1, np.float32), "s"),
            numpy_helper.from_array(np.array(128, np.uint8), "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("seed", range(40))
def test_random_dag_order_and_names_match_ort(seed: int) -> None:
    model = _random_dag(seed)
    ours = run(model, "disable_all").model
    ref = run_reference(model, "disable_all").model
    report = compare(ours, ref)
    assert report.holds("P"), "\n".join(report.lines())


def test_name_generator_shares_one_counter() -> None:
    g = Graph(name="g", opsets={"": 21})
    g.add_node("n", "Relu", ["a"], ["b"])
    assert g.generate_value_name("c") == "c"  # free: no token, counter untouched
    assert g.generate_value_name("b") == "b_token_0"  # existing value
    assert g.generate_node_name("n") == "n_token_1"  # live node; the counter is shared
    assert g.generate_node_name("m") == "m"
    assert g.generate_node_name("m") == "m_token_2"  # generated names stay reserved
    assert g.generate_value_name("c") == "c_token_3"


def test_node_indices_are_never_reused() -> None:
    g = Graph(name="g", opsets={"": 21})
    a = g.add_node("a", "Relu", ["x"], ["y"])
    g.remove_node(a)
    b = g.add_node("b", "Relu", ["x"], ["z"])
    assert b.index == 1 and g.node(0) is None


def test_output_edges_in_edge_end_compare_order() -> None:
    g = Graph(name="g", opsets={"": 21})
    dq = g.add_node("dq", "DequantizeLinear", ["q", "s", "z"], ["d"])
    g.add_node("late", "Mul", ["d", "d"], ["m"])
    g.add_node("early", "Sigmoid", ["d"], ["y"])
    edges = g.output_edges(dq)
    assert [(e.dst, e.dst_slot) for e in edges] == [(1, 0), (1, 1), (2, 0)]


def _external_model(tmp_path: Path, location: str) -> Path:
    weights = np.arange(64, dtype=np.float32)
    tensor = numpy_helper.from_array(weights, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(weights.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", F, [64])],
        [helper.make_tensor_value_info("y", F, [64])],
        [tensor],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (tmp_path / "outside.bin").write_bytes(weights.tobytes())
    (folder / "inside.bin").write_bytes(weights.tobytes())
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    return path


def test_external_data_only_from_the_models_folder(tmp_path: Path) -> None:
    inside = _external_model(tmp_path, "inside.bin")
    ours = run(inside, "disable_all").model
    ref = run_reference(inside, "disable_all").model
    assert compare(ours, ref, base_dir=inside.parent).holds("P")
    outside = _external_model(tmp_path, "../outside.bin")
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(outside)


def test_load_then_save_is_verbatim_for_unmodified_models() -> None:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"], name="s", doc_string="keep me")],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    saved = save_model(load_model(model))
    assert saved.graph.node[0] == model.graph.node[0]


def test_target_detection_agrees_with_ort() -> None:
    assert Target.probe().nchwc_block_size == Target.detect().nchwc_block_size


def _output_shape_after_rewrite(resolves: int) -> onnx.TypeProto:
    """x[1,4] -> Sigmoid -> y[1,4]; a 'pass' makes y a ReduceSum(keepdims=0) of x (a scalar), then Resolve runs
    ``resolves`` times; what type does the saved graph output get?"""
    g = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"], name="s")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    graph = model.graph
    sigmoid = next(n for n in graph.nodes() if n.op_type == "Sigmoid")
    graph.remove_node(sigmoid)
    attr = helper.make_attribute("keepdims", 0)
    graph.add_node("r", "ReduceSum", ["x"], ["y"], attributes={"keepdims": attr})
    for _ in range(resolves):
        graph.resolve()
    out: onnx.TypeProto = save_model(model).graph.output[0].type
    return out


def test_conflicting_reinference_clears_then_refills_the_shape() -> None:
    # the Resolve right after the rewrite merges leniently: another rank clears the shape (as ORT writes it)
    assert not _output_shape_after_rewrite(1).tensor_type.HasField("shape")
    # a later Resolve fills the cleared shape from inference: the scalar's empty shape
    refilled = _output_shape_after_rewrite(2).tensor_type
    assert refilled.HasField("shape") and len(refilled.shape.dim) == 0


def test_clone_is_independent_and_equal() -> None:
    """A pass run on a clone leaves the original as it was, and gives what it gives on the original."""
    from qdqopt.levels import parse_level
    from qdqopt.manager import run_pipeline

    source = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tinymixnet_pt2e.onnx"
    original = load_model(source)
    untouched = save_model(original).SerializeToString()
    copy_model = load_model(source)
    copy_model.graph = original.graph.clone()
    run_pipeline(copy_model, parse_level("extended"))
    assert save_model(original).SerializeToString() == untouched
    run_pipeline(original, parse_level("extended"))
    assert save_model(copy_model).SerializeToString() == save_model(original).SerializeToString()


# ------------------------------------------------------------------------------------------------ change record
def test_take_changes_nets_out_what_a_stretch_did() -> None:
    graph = Graph(name="g", opsets={"": 17})
    graph.inputs.append(helper.make_tensor_value_info("x", F, [1]))
    a = graph.add_node("a", "Relu", ["x"], ["ya"])
    graph.take_changes()
    b = graph.add_node("b", "Neg", ["ya"], ["yb"])
    c = graph.add_node("c", "Neg", ["ya"], ["yc"])
    graph.remove_node(c)  # added and removed: in neither list
    graph.set_input(b, 0, "x")  # a new node rewired: still only "added"
    graph.set_input(a, 0, "yb")
    graph.remove_node(a)
    changes = graph.take_changes()
    assert changes.added == ((b.index, "b", "Neg"),)
    assert changes.removed == ((a.index, "a", "Relu"),)
    assert changes.rewired == ()
    assert not graph.take_changes()


def test_changed_events_agree_with_the_op_counts() -> None:
    """Every application that modified the graph has a ``changed`` event whose nodes added minus removed are the
    op-count change the trace shows (no other edit path escapes the record)."""
    from collections import Counter

    from qdqopt.cli import example_model
    from qdqopt.events import Kind

    result = run(example_model(), "all").pipeline
    changed = [e for e in result.events.events if e.kind is Kind.CHANGED]
    modified = [t for t in result.trace if t.modified]
    assert [e.pass_name for e in changed] == [t.name for t in modified]
    for event, entry in zip(changed, modified, strict=True):
        assert isinstance(event.data, Changes)
        delta = Counter(op for _, _, op in event.data.added)
        delta.subtract(Counter(op for _, _, op in event.data.removed))
        assert {k: v for k, v in delta.items() if v} == entry.op_delta, entry.name


# ------------------------------------------------------ issue #11: the transformer fixtures' classes (knownt/ fixtures)
_KNOWNT = knownx.cases("dropped_reshape", "shape_values", "initializer_fields", group="knownt")


@pytest.mark.parametrize(("name", "level", "config"), _KNOWNT)
def test_knownt_as_ort(name: str, level: str, config: str) -> None:
    """NodeArg types of values a QDQ fusion takes the producer of, shape values, large initializers: ORT's saved
    model byte for byte and its trace, as ORT runs it."""
    knownx.assert_exact(name, level, config)


def _dims(model: onnx.ModelProto, name: str) -> list[int | str | None]:
    found = next(v for v in (*model.graph.output, *model.graph.value_info) if v.name == name)
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in found.type.tensor_type.shape.dim]


def test_knownt_boundary() -> None:
    """What the fixtures pin is ORT's: a dead Reshape output saved with the dims the last Resolve gave it; shape
    values propagated when static, not when a symbol is in them."""
    dropped = run_reference(fixture_model("knownt/dropped_reshape_value_info"), "extended").model
    assert _dims(dropped, "r") == ["N", 2, 4]
    assert "r" not in {o for n in dropped.graph.node for o in n.output}
    kept = run_reference(fixture_model("knownt/shape_values_kept"), "disable_all").model
    assert _dims(kept, "p_static") == [2, 6] and _dims(kept, "p_static_product") == [12]
    assert _dims(kept, "p_start") == [6]
    for name in ("p_symbolic", "p_expand", "p_gathered", "p_static_dim", "p_slice"):
        assert all(d is None for d in _dims(kept, name)), name


def test_knownt_dying_types_need_the_last_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a type kept for a value the drop action re-points (``set_output``), or for one dying after the types
    were inferred again mid-application, the load-time types are saved."""
    real = Graph._record_died
    monkeypatch.setattr(Graph, "_record_died", lambda self, node, only=None: None if only else real(self, node))
    assert differs("knownt/dropped_reshape_value_info", "extended")
    monkeypatch.setattr(
        Graph,
        "_record_died",
        lambda self, node, only=None: None if self._pass_refreshed and self._pass_rewired else real(self, node, only),
    )
    assert differs("knownt/dropped_reshapes_value_info", "extended")


def test_knownt_symbols_are_not_propagated(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX's own ``data_prop`` (symbols, partial values, initializers read) is not ORT's."""
    every = lambda gp, types: {o: () for n in gp.node for o in n.output}  # noqa: E731 (all kept: ONNX's data_prop)
    monkeypatch.setattr(inference, "_ort_shape_values", every)
    assert differs("knownt/shape_values_kept", "disable_all")


def _first_data_types(source: str | onnx.ModelProto, *, seeded: bool) -> dict[str, bytes] | None:
    """The types the run's first inference with data (``View.DATA``) keeps, from the load-time types when
    ``seeded`` (None: the loader does not seed this model), else from ``inference.infer_with_data``."""
    graph = load_model(source).graph
    if seeded and graph._load_data_types is None:
        return None
    if not seeded:
        graph._load_data_types = None
    graph._infer_data_types()
    return {name: found.SerializeToString() for name, found in (graph._data_types or {}).items()}


def test_seeded_data_types_are_those_of_the_inference_with_data() -> None:
    """Where the loader seeds ``View.DATA`` with its own types (``model._data_types_as_loaded``), they are exactly
    what the inference with data gives the graph as loaded: same values, same types. Over the corpus's CI sample and
    the fixtures of the sweeps' samples; MobileNetV3 is seeded, and the models it must not seed are refused."""
    sources: list[tuple[str, str | onnx.ModelProto]] = [
        (corpus_id(path), str(path)) for path in corpus_models() if corpus_id(path) in corpus_sample("seed")
    ]
    names = sorted(realarch_sample() | transformers_sample() | handbuilt_sample())
    names += ["roundtrip/not_topo_sorted", "shapes/declared_dims_kept", "inlining/local_function_twice"]
    sources += [(name, fixture_model(name)) for name in names]
    seeded: list[str] = []
    refused: list[str] = []
    for key, source in sources:
        try:
            found = _first_data_types(source, seeded=True)
        except ModelError:
            continue  # refused at load (bad input)
        if found is None:
            refused.append(key)
            continue
        assert found == _first_data_types(source, seeded=False), key
        seeded.append(key)
    assert "roundtrip/not_topo_sorted" in refused  # the loader's inference leaves a value untyped there
    assert "shapes/declared_dims_kept" in refused  # a declared output shape the loader's inference overrides
    assert "inlining/local_function_twice" in refused  # the graph as loaded is not the one inlined later
    if corpus_models():
        assert "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx" in seeded
    assert len(seeded) > len(refused)


def _first_pass_types(source: str | onnx.ModelProto, level: str) -> tuple[dict[str, bytes], dict[str, bytes]] | None:
    """At the run's first Resolve inference (``View.PASS``), the types the seed gives (``Graph.seeded_pass_types``)
    and those the inference gives; None where the loader does not seed or the seed does not hold there."""
    from qdqopt.graph.core import Graph as CoreGraph

    found: list[tuple[dict[str, bytes], dict[str, bytes]] | None] = []
    real = inference.infer_types

    def first(graph: CoreGraph) -> None:
        if not found and graph.parent is None:
            seeded = graph.seeded_pass_types()  # (asked once: the inference below runs in full)
            real(graph)
            if seeded is None:
                found.append(None)
            else:
                serialised = {name: t.SerializeToString() for name, t in seeded.items()}
                found.append((serialised, {name: t.SerializeToString() for name, t in graph._types.items()}))
            return
        real(graph)

    model = load_model(source)
    if model.graph._load_pass_types is None:
        return None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inference, "infer_types", first)
        patch.setattr(partition_module, "infer_types", first)
        run_pipeline(model, parse_level(level))
    return found[0] if found else None


def test_seeded_pass_types_are_those_of_the_first_resolve_inference() -> None:
    """Where the loader seeds ``View.PASS`` with its own types and every node still types as at load when the first
    Resolve inference runs (the partitioner's, after Level1), the seed gives exactly what that inference gives: same
    values, same types. Over the corpus's CI sample and the fixtures of the sweeps' samples, at DISABLE_ALL, BASIC
    and ALL; MobileNetV3 is seeded at ALL (Level1 removes 300 Identity and 76 Cast nodes before the partitioner), and
    a graph whose nodes Level1 changes is refused."""
    sources: list[tuple[str, str | onnx.ModelProto]] = [
        (corpus_id(path), str(path)) for path in corpus_models() if corpus_id(path) in corpus_sample("passseed")
    ]
    names = sorted(realarch_sample() | transformers_sample() | handbuilt_sample())
    sources += [(name, fixture_model(name)) for name in names]
    sources.append(("reshape_behind_identity", _reshape_behind_identity()))
    used: list[str] = []
    refused: list[str] = []
    for key, source in sources:
        for level in ("disable_all", "basic", "all"):
            try:
                found = _first_pass_types(source, level)
            except ModelError:
                break  # refused (bad input, or a session ORT fails)
            if found is None:
                refused.append(f"{key}|{level}")
                continue
            seeded, inferred = found
            assert seeded == inferred, (key, level, sorted(set(seeded) ^ set(inferred))[:5])
            used.append(f"{key}|{level}")
    if corpus_models():
        assert "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx|all" in used
    assert "reshape_behind_identity|disable_all" in used  # as loaded
    assert "reshape_behind_identity|basic" in refused  # the Reshape reads its shape's data once the Identity is gone
    assert used and refused


def _reshape_behind_identity() -> onnx.ModelProto:
    """A Reshape whose shape comes through an Identity: the load-time inference does not see the shape's data (an
    Identity output's), the partitioner's, after Level1 removed the Identity, does (the initializer's)."""
    nodes = [
        helper.make_node("Identity", ["shape"], ["shape_id"], name="id"),
        helper.make_node("Reshape", ["x", "shape_id"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])],  # as the loader types it
        [numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_pass_seed_holds_only_while_the_nodes_type_as_loaded() -> None:
    """The seed stands for the first Resolve inference only while every node types as at load, and is asked once:
    an initializer added, a node added, or an input pointed at a value of another type make the partitioner infer."""

    def seeded() -> Graph:
        graph = load_model(example_model()).graph
        assert graph._load_pass_types is not None
        return graph

    graph = seeded()
    assert graph.seeded_pass_types() is not None
    assert graph.seeded_pass_types() is None  # asked once
    graph = seeded()
    graph.add_initializer(helper.make_tensor("extra", TensorProto.FLOAT, [1], [0.0]))
    assert graph.seeded_pass_types() is None
    graph = seeded()
    graph.add_node("extra_relu", "Relu", [graph.graph_output_names()[0]], ["extra_out"])
    assert graph.seeded_pass_types() is None
    graph = seeded()
    dq = next(n for n in graph.nodes() if n.op_type == "DequantizeLinear")
    graph.set_input(dq, 0, dq.inputs[1])  # the quantized tensor swapped for its (float) scale
    assert graph.seeded_pass_types() is None


def test_knownt_large_initializers_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = tuple(name for name in model_module._OTHER_SINGULAR if name != "doc_string")  # (a doc string kept)
    monkeypatch.setattr(model_module, "_OTHER_SINGULAR", kept)
    assert differs("knownt/initializer_fields_rewritten", "disable_all")


# ------------------------------------------------------------------------------- issue #12: found by qdqopt fuzz
@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_loop_output_"))
def test_knownx_declared_output_dims_reach_downstream_as_ort(name: str, level: str, config: str) -> None:
    """A Loop's output declared as a graph output: ORT's NodeArg keeps the declared dims ONNX's inference does not
    give, and the values computed from it get shapes at Resolve; qdqopt's saver does the same."""
    knownx.assert_exact(name, level, config)


def test_knownx_declared_output_dims_are_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    from qdqopt.graph import inference

    assert not knownx.differs("knownx/fz_loop_output_shape_downstream", "basic")
    monkeypatch.setattr(inference, "_fill_declared_outputs", lambda types, declared: set())
    assert knownx.differs("knownx/fz_loop_output_shape_downstream", "basic")


def test_knownx_load_types_survive_dq_duplication(monkeypatch: pytest.MonkeyPatch) -> None:
    """``knownx/fz_loop_output_nhwc``: NhwcTransformer converts the QLinearConv as ORT does only when View.DATA's
    NodeArgs start from the load-time types (the first inference with data runs before the first edit of a pass,
    ``Graph._before_edit``, here EnsureUniqueDQForNodeUnit's)."""
    assert "NhwcTransformer" in (knownx.ort_modified("knownx/fz_loop_output_nhwc", "all", "default") or ())
    assert not knownx.differs("knownx/fz_loop_output_nhwc", "all")
    monkeypatch.setattr(Graph, "_before_edit", lambda self: None)
    assert knownx.differs("knownx/fz_loop_output_nhwc", "all")


@pytest.mark.parametrize(("name", "level", "config"), knownx.cases("fz_concat_"))
def test_knownx_concat_unifies_unknown_dims_as_ort(name: str, level: str, config: str) -> None:
    knownx.assert_exact(name, level, config)


def test_knownx_concat_unify_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX's invented dim names keep a Concat's batch dim from unifying with a declared one; ORT's do not."""
    from qdqopt.graph import inference

    assert not knownx.differs("knownx/fz_concat_symbolic_batch", "basic")
    monkeypatch.setattr(inference, "_unify_concat_dims", lambda gp, types: set())
    assert knownx.differs("knownx/fz_concat_symbolic_batch", "basic")


@pytest.mark.parametrize("seed", range(5))
def test_topological_order_read_from_the_adjacency_is_the_reference_order(seed: int) -> None:
    """The graph core's order (:func:`ort_order_of_adjacency`: each source pushed once) is the reference algorithm's
    (:func:`ort_topological_order`: one push per input edge), on random DAGs with repeated edges and dead ends."""
    from qdqopt.graph.order import ort_order_of_adjacency, ort_topological_order

    rng = random.Random(seed)
    for _ in range(50):
        count = rng.randrange(1, 40)
        indices = sorted(rng.sample(range(3 * count), count))
        pred: dict[int, dict[int, list[int]]] = {i: {} for i in indices}
        succ: dict[int, dict[int, list[int]]] = {i: {} for i in indices}
        for pos, dst in enumerate(indices):
            for src in rng.sample(indices[:pos], min(pos, rng.randrange(0, 4))):
                edges = [0] * rng.randrange(1, 3)  # one or two edges between the pair
                pred[dst][src] = succ[src][dst] = edges
        inputs = {i: sorted(s for s, keys in pred[i].items() for _ in keys) for i in indices}
        outputs = {i: bool(succ[i]) for i in indices}
        expected = ort_topological_order(indices, inputs.__getitem__, outputs.__getitem__)
        assert ort_order_of_adjacency(indices, pred, succ) == expected


def _if_model(then_nodes: list[onnx.NodeProto], main_first: bool = True) -> onnx.ModelProto:
    """An If whose then-branch is ``then_nodes`` (reading ``x`` and ``w`` from the main graph, writing ``t2``); ``w``
    comes from a Neg placed after the If in the main graph unless ``main_first``."""
    f = TensorProto.FLOAT
    then = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t2", f, [2])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", f, [2])]
    )
    neg = helper.make_node("Neg", ["x"], ["w"], name="neg")
    branch = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [neg, branch] if main_first else [branch, neg],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", f, [2])],
        [helper.make_tensor_value_info("y", f, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("then_nodes", "main_first", "refused"),
    [
        ([helper.make_node("Relu", ["t1"], ["t2"], name="relu"), helper.make_node("Add", ["x", "w"], ["t1"])], 1, 1),
        ([helper.make_node("Add", ["x", "w"], ["t1"]), helper.make_node("Relu", ["t1"], ["t2"], name="relu")], 1, 0),
        ([helper.make_node("Add", ["x", "w"], ["t1"]), helper.make_node("Relu", ["t1"], ["t2"], name="relu")], 0, 0),
    ],
    ids=["subgraph-unsorted", "sorted", "main-graph-unsorted"],
)
def test_a_subgraph_must_be_sorted_the_main_graph_need_not(
    then_nodes: list[onnx.NodeProto], main_first: int, refused: int
) -> None:
    """ONNX's inference of an If/Loop/Scan body, which ORT runs at load, wants the body's nodes in topological order;
    ORT sorts the main graph itself (its outer values may come from any main-graph node). ORT's answer, live; qdqopt's
    load refuses exactly where ORT does, naming the node."""
    model = _if_model(then_nodes, bool(main_first))
    try:
        run_reference(model, "disable_all", capture_log=False)
        ort_refuses = False
    except ReferenceError as exc:
        assert "topologically sorted" in str(exc)
        ort_refuses = True
    assert ort_refuses == bool(refused)
    if refused:
        with pytest.raises(ModelError, match=r"node 'relu' \(Relu\) in a subgraph of If 'if': input 't1' is not"):
            load_model(model)
    else:
        assert compare(run(model, "all").model, run_reference(model, "all", capture_log=False).model).holds("P")


@pytest.mark.parametrize("shape", [None, [], [1], [2, 3, 4], ["N", None, 3], [0, -1], ["unk__1"]], ids=repr)
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT64, TensorProto.FLOAT16])
def test_tensor_type_proto_is_the_onnx_helpers(elem: int, shape: list[int | str | None] | None) -> None:
    """The graph core's compiled twins of ``make_tensor_type_proto`` and ``make_tensor_value_info`` make the same
    protos: the same bytes, and an empty shape present exactly when the helper's is."""
    from qdqopt.graph.schema import tensor_type_proto, tensor_value_info

    ours, theirs = tensor_type_proto(elem, shape), helper.make_tensor_type_proto(elem, shape)
    assert ours.SerializeToString() == theirs.SerializeToString()
    assert ours.tensor_type.HasField("shape") == theirs.tensor_type.HasField("shape")
    vi, expected = tensor_value_info("v", elem, shape), helper.make_tensor_value_info("v", elem, shape)
    assert vi.SerializeToString() == expected.SerializeToString()
    with pytest.raises(ValueError):
        tensor_type_proto(elem, [1.5])  # type: ignore[list-item]


@pytest.mark.parametrize("collecting", [True, False])
def test_load_run_and_save_pause_the_cyclic_collector_and_restore_it(
    collecting: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Loading, the passes and saving run with the cyclic garbage collector off (they make no cycles to collect),
    and leave it as they found it, also when they fail."""
    import gc

    from qdqopt.graph.model import write_model

    seen: dict[str, bool] = {}

    def spy(name: str, inner: object) -> object:
        def call(*args: object, **kwargs: object) -> object:
            seen[name] = gc.isenabled()
            return inner(*args, **kwargs)  # type: ignore[operator]

        return call

    monkeypatch.setattr(model_module, "_read_parts", spy("load", model_module._read_parts))
    monkeypatch.setattr(model_module, "_save_parts", spy("save", model_module._save_parts))
    was = gc.isenabled()
    try:
        gc.enable() if collecting else gc.disable()
        model = load_model(example_model())
        assert gc.isenabled() == collecting
        passes: list[bool] = []
        result = run_pipeline(model, parse_level("all"), on_pass=lambda *_: passes.append(gc.isenabled()))
        assert gc.isenabled() == collecting
        assert passes and not any(passes)
        assert not result.stopped
        save_model(model)
        assert gc.isenabled() == collecting
        write_model(model, tmp_path / "out.onnx")
        assert gc.isenabled() == collecting
        assert seen == {"load": False, "save": False}
        with pytest.raises(ModelError):
            load_model(tmp_path / "missing.onnx")
        assert gc.isenabled() == collecting
    finally:
        gc.enable() if was else gc.disable()


def _reading(nodes: list[onnx.NodeProto], *, bad_tensor: bool = False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    if bad_tensor:
        w.data_type = 99  # not in the TensorProto enum: the loader's own refusal, met after the inputs' check
    graph = helper.make_graph(nodes, "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bad_tensor", [False, True], ids=["alone", "with-a-bad-initializer"])
def test_an_undefined_input_of_the_main_graph_is_reported_first(bad_tensor: bool) -> None:
    """The loader checks that every input is defined on the graph it built (no node holds a subgraph); an invalid
    model still names its first undefined input, before anything else the loader finds wrong (here, an initializer
    of a data type the enum lacks, which the graph's build refuses)."""
    nodes = [
        helper.make_node("Add", ["x", "w"], ["t"], name="add"),
        helper.make_node("Mul", ["t", "nowhere"], ["y"], name="mul"),
    ]
    with pytest.raises(ModelError, match=r"node 'mul' \(Mul\): input 'nowhere' is not a graph input"):
        load_model(_reading(nodes, bad_tensor=bad_tensor))
    fine = [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Mul", ["t", "w"], ["y"])]
    if bad_tensor:
        with pytest.raises(ModelError, match="does not have valid data type"):
            load_model(_reading(fine, bad_tensor=True))
    else:
        assert load_model(_reading(fine)).graph.reads_only_defined_values()


def test_reads_only_defined_values_follows_the_graph_as_edited() -> None:
    """``Graph.reads_only_defined_values``: graph inputs, initializers and node outputs are defined; a node input
    renamed to a value nothing defines is not."""
    graph = load_model(_reading([helper.make_node("Add", ["x", "w"], ["y"], name="add")])).graph
    assert graph.reads_only_defined_values()
    add = next(iter(graph.nodes()))
    graph.set_input(add, 1, "nowhere")
    assert not graph.reads_only_defined_values()


def test_split_serialized_puts_unknown_fields_in_the_tail() -> None:
    """``model._split_serialized`` splits the bytes where the missing field would go: the known fields of lower
    numbers, then the rest, the unknown fields last (as protobuf writes them), whatever their numbers."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [], [])
    graph.output.add().name = "y"
    unknown = bytes([3 << 3, 5])  # field 3 (reserved in GraphProto), varint 5
    parsed = onnx.GraphProto.FromString(graph.SerializeToString() + unknown)
    head, tail = model_module._split_serialized(parsed, "initializer")
    known_head = onnx.GraphProto(node=parsed.node, name=parsed.name).SerializeToString()
    assert head == known_head
    assert tail.endswith(unknown) and head + tail == parsed.SerializeToString()
    assert onnx.GraphProto.FromString(tail).output[0].name == "y"


def test_edges_asked_again_are_the_graphs_current_ones() -> None:
    """``Graph.output_edges``/``input_edges`` keep the last node's edges until the structure changes: a caller's
    edit of the list it got changes nothing, and every edit of the graph is seen at the next call."""
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="a"),
        helper.make_node("Neg", ["t"], ["u"], name="b"),
        helper.make_node("Add", ["t", "u"], ["y"], name="c"),
    ]
    graph = load_model(_reading(nodes)).graph
    a, b, c = graph.nodes()
    first = graph.output_edges(a)
    assert [(e.dst, e.dst_slot) for e in first] == [(b.index, 0), (c.index, 0)]
    first.clear()
    assert graph.output_edges(a) == graph.output_edges(a) != []
    assert [e.src for e in graph.input_edges(c)] == [a.index, b.index]
    graph.set_input(c, 1, "t")  # c reads a's output twice, b's not at all
    assert [(e.dst, e.dst_slot) for e in graph.output_edges(a)] == [(b.index, 0), (c.index, 0), (c.index, 1)]
    assert [e.src for e in graph.input_edges(c)] == [a.index, a.index]
    assert graph.output_edges(b) == []
    graph.remove_node(b)
    assert [(e.dst, e.dst_slot) for e in graph.output_edges(a)] == [(c.index, 0), (c.index, 1)]


def test_a_pause_leaves_what_it_allocated_old_and_nothing_frozen() -> None:
    """Leaving ``CollectionPaused`` moves what the pause allocated (the model) to the oldest generation, so that the
    next young collection does not walk it, and leaves nothing frozen; objects someone else froze stay frozen, and
    nothing is moved then. A load followed by a run triggers no collection at all."""
    import gc

    from qdqopt.graph.core import CollectionPaused

    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    was = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(count)
    try:
        with CollectionPaused():
            kept = [[i] for i in range(20_000)]  # far more than a young generation's threshold
        assert gc.get_count()[0] < 100 and gc.get_freeze_count() == 0
        model = load_model(example_model())
        run_pipeline(model, parse_level("all"))
        assert collections == [] and gc.get_freeze_count() == 0
        user = [[0] for _ in range(10)]
        gc.freeze()
        frozen = gc.get_freeze_count()
        with CollectionPaused():
            kept += [[i] for i in range(20_000)]
        assert gc.get_freeze_count() == frozen  # someone else's frozen objects: left as they are
        gc.unfreeze()
        del user, kept, model
    finally:
        gc.callbacks.remove(count)
        gc.enable() if was else gc.disable()


def test_every_kind_of_edit_moves_the_state_stamp() -> None:
    """``Graph.state_stamp``, which the manager's replay of a pass that found nothing relies on, changes with each
    kind of edit a pass can make (a replay on an edited graph would record the events of a graph that is gone)."""
    relu = helper.make_node("Relu", ["x"], ["t"], name="relu")
    neg = helper.make_node("Neg", ["t"], ["y"], name="neg")
    graph = load_model(_reading([relu, neg])).graph
    first, second = graph.nodes()
    float_type = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    edits: dict[str, Callable[[], object]] = {
        "set_input": lambda: graph.set_input(second, 0, "x"),
        "set_output": lambda: graph.set_output(first, 0, "t2"),
        "set_attribute": lambda: graph.set_attribute(first, helper.make_attribute("alpha", 1.0)),
        "remove_attribute": lambda: graph.remove_attribute(first, "alpha"),
        "add_node": lambda: graph.add_node("id", "Identity", ["x"], ["z"]),
        "remove_node": lambda: graph.remove_node(graph.nodes()[-1]),
        "add_initializer": lambda: graph.add_initializer(numpy_helper.from_array(np.zeros(2, np.float32), "c")),
        "remove_initializer": lambda: graph.remove_initializer("c"),
        "set_value_type": lambda: graph.set_value_type("t2", float_type),
        "pin_value_type": lambda: graph.pin_value_type("t", float_type),
        "generate_value_name": lambda: graph.generate_value_name("t2"),
        "generate_node_name": lambda: graph.generate_node_name("relu"),
        "resolve": graph.resolve,
        "outputs": lambda: graph.outputs.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])),
    }
    for name, edit in edits.items():
        before = graph.state_stamp()
        edit()
        assert graph.state_stamp() != before, name


def test_type_facts_read_once_and_as_the_views_read_them() -> None:
    """``Graph._facts``: a type's element type and dims, as written and as read (a name ONNX's inference invented,
    ``unk__<n>``, unknown); None for an element type of 0, for dims without a shape, and for both when the type is
    not a tensor type; each TypeProto read once."""
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    denoted = helper.make_tensor_type_proto(TensorProto.FLOAT, [5, "C"])
    denoted.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    negative = onnx.TypeProto()
    negative.tensor_type.elem_type = -7
    cases: list[tuple[onnx.TypeProto, int | None, list[int | str | None] | None, list[int | str | None] | None]] = [
        (helper.make_tensor_type_proto(TensorProto.UINT8, [1, "N", None, 0]), 2, [1, "N", None, 0], [1, "N", None, 0]),
        (helper.make_tensor_type_proto(TensorProto.FLOAT, []), 1, [], []),
        (helper.make_tensor_type_proto(TensorProto.FLOAT, None), 1, None, None),
        (helper.make_tensor_type_proto(0, [3]), None, [3], [3]),
        (
            helper.make_tensor_type_proto(TensorProto.INT64, [-1, -(2**63), "unk__3", ""]),
            7,
            [-1, -(2**63), None, ""],
            [-1, -(2**63), "unk__3", ""],
        ),
        (sequence, None, None, None),
        (helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2, 2]), None, None, None),
        (onnx.TypeProto(), None, None, None),
        (denoted, 1, [5, "C"], [5, "C"]),
        (negative, -7, None, None),
    ]
    graph = Graph(name="g", opsets={"": 17})
    for found, elem, read, written in cases:
        facts = graph._facts(found)
        assert facts[0] is found
        assert facts[1] == elem, found
        assert (None if facts[2] is None else list(facts[2])) == read, found
        assert (None if facts[3] is None else list(facts[3])) == written, found
        assert graph._facts(found) is facts  # read once
