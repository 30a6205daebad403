"""Bad input never crashes qdqopt (issue #12, item 4): the mutated-file fuzzer (:mod:`qdqopt.mutants`), a seeded
campaign over the corpus and the fixtures, and one test per crash class it found.

Every command runs in a process of its own (a fork of this one, or ``python -m qdqopt.cli``), so that an abort in
C++ ends the child only and shows up as a ``signal`` verdict here.
"""

from __future__ import annotations

import os
import random
import stat
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qdqopt.cli import main
from qdqopt.errors import QdqoptError
from qdqopt.mutants import (
    BYTE_MUTATIONS,
    COMMANDS,
    MUTATIONS,
    PROTO_MUTATIONS,
    Mutant,
    campaign,
    judge,
    mutate,
    run_cli,
    summary,
)
from tests.conftest import CORPUS, fixture_model

#: the CI budget: a seeded few hundred mutants (``QDQOPT_MUTANTS`` overrides it)
CI_COUNT = int(os.environ.get("QDQOPT_MUTANTS", "200"))
CI_SEED = 20261202


def _slice_model(dim: int) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([2], np.int64), "ends"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"], name="slice")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _mutant(model: onnx.ModelProto | bytes, kind: str = "hand") -> Mutant:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return Mutant(kind, "test", data)


# ------------------------------------------------------------------------------------------ the known classes
@pytest.mark.parametrize("command", COMMANDS)
def test_negative_dim_before_a_slice_does_not_abort(command: str) -> None:
    """ONNX's Slice inference (``std::clamp`` with hi < lo, in a wheel built with assertions) aborted the process
    on a graph input dim of -3: negative dims are now made unknown before ONNX's inference sees them."""
    outcome = run_cli(_mutant(_slice_model(-3)), command, "all")
    assert outcome.ok, (outcome.verdict, outcome.note, outcome.stderr[-400:])
    assert outcome.returncode in (0, 1)  # ORT takes the model; so does qdqopt


def test_negative_dim_keeps_the_result_of_a_valid_dim() -> None:
    """The guard changes nothing for a valid model (same bytes out as before the guard existed: ORT's)."""
    outcome = run_cli(_mutant(_slice_model(3)), "diff", "all")
    assert outcome.ok and outcome.returncode == 0, outcome.stderr[-400:]


def test_a_killed_run_leaves_no_temporary_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed at its timeout (here in the ORT check, made to hang) leaves no temporary files behind: the child
    keeps them in a folder ``run_cli`` removes (a killed child never cleans up after itself)."""
    import qdqopt.reference as reference

    monkeypatch.setattr(reference, "_CHILD_CHECK", "import time\ntime.sleep(60)\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    outcome = run_cli(_mutant(_slice_model(3)), "optimize", "basic", timeout=3.0)
    assert outcome.verdict == "hang", (outcome.verdict, outcome.stderr[-300:])
    assert not list(tmp_path.iterdir())


def _non_utf8_name_model() -> bytes:
    model = _slice_model(3)
    model.graph.node[0].name = "PLACEHOLDR"
    data: bytes = model.SerializeToString()
    return data.replace(b"PLACEHOLDR", b"\xff" * 10)


@pytest.mark.parametrize("command", COMMANDS)
def test_non_utf8_name_is_a_one_line_error(command: str) -> None:
    outcome = run_cli(_mutant(_non_utf8_name_model()), command, "basic")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "node[0].name is not valid UTF-8" in outcome.stderr


@pytest.mark.parametrize(
    "field",
    ["producer_name", "graph_name", "output_name", "doc_string", "initializer_name", "initializer_doc", "metadata"],
)
def test_non_utf8_anywhere_is_a_one_line_error(field: str) -> None:
    """Found by the campaign (seed 1, #1500): a bit flip in ``producer_name`` failed in the copy of the model's
    header, before the names were checked; every string field of the model is now checked first. An initializer's
    strings are checked apart from the rest of a small file (the load parses the file without its weights again)."""
    model = _slice_model(3)
    token = "PLACEHOLDR"
    if field == "producer_name":
        model.producer_name = token
    elif field == "graph_name":
        model.graph.name = token
    elif field == "output_name":
        model.graph.node[0].output[0] = token
        model.graph.output[0].name = token
    elif field == "initializer_name":
        model.graph.node[0].input[2] = token
        model.graph.initializer[1].name = token
    elif field == "initializer_doc":
        model.graph.initializer[2].doc_string = token
    elif field == "metadata":
        entry = model.graph.initializer[0].metadata_props.add()
        entry.key, entry.value = "note", token
    else:
        model.graph.node[0].doc_string = token
    data = model.SerializeToString().replace(token.encode(), b"\xe9" * len(token))
    for command in ("explain", "optimize"):
        outcome = run_cli(_mutant(data), command, "layout")
        assert outcome.ok and outcome.returncode == 2, (field, command, outcome.verdict, outcome.stderr[-400:])
        assert "is not valid UTF-8" in outcome.stderr


def test_non_utf8_attribute_string_is_no_internal_error() -> None:
    """An attribute string is bytes by type: qdqopt reads it with surrogateescape, as ORT compares bytes, and the
    Resize whose ``mode`` is no valid mode is rejected by ORT's kernel (exit 2), never a UnicodeDecodeError."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode=b"near\xffst")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    for command in ("optimize", "trace"):
        outcome = run_cli(_mutant(model), command, "extended")
        assert outcome.ok, (outcome.verdict, outcome.stderr[-400:])
        assert "UnicodeDecodeError" not in outcome.stderr


def test_short_initializer_is_refused_in_orts_words() -> None:
    model = fixture_model("layernorm/rms_op17")
    data = model.SerializeToString()
    rng = random.Random(3)
    for _ in range(20):  # a raw initializer cut short
        mutant = mutate("layernorm/rms_op17", data, "short_initializer", rng)
        assert mutant is not None
        outcome = run_cli(mutant, "explain", "extended")
        assert outcome.ok, (mutant.detail, outcome.verdict, outcome.stderr[-400:])
        if outcome.returncode == 2 and "Deserialize tensor" in outcome.stderr:
            return
    raise AssertionError("no short initializer was refused in ORT's words")


@pytest.mark.parametrize("command", ["optimize", "trace", "diff", "explain", "passes"])
def test_unknown_config_key_warned_once(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_slice_model(3), str(path))
    argv = {
        "optimize": ["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "-l", "basic"],
        "trace": ["trace", str(path), "-l", "basic"],
        "diff": ["diff", str(path), "-l", "basic"],
        "explain": ["explain", str(path)],
        "passes": ["passes", "-l", "basic"],
    }[command]
    assert main([*argv, "--config", "no.such.key=1"]) in (0, 1)
    err = capsys.readouterr().err
    assert err.count("'no.such.key' is not one qdqopt knows") == 1, err


def test_optimize_output_mode_in_a_child_with_the_umask() -> None:
    """Through the real command in a process with umask 022: a 0644 file, nothing else left in the folder."""
    outcome = run_cli(_mutant(_slice_model(3)), "optimize", "basic")
    assert outcome.ok and outcome.returncode == 0, (outcome.verdict, outcome.note)


def test_the_exec_runner_gives_the_same_verdict() -> None:
    """``python -m qdqopt.cli`` as a subprocess (slow: one import) judges as the forked runner does."""
    outcome = run_cli(_mutant(_non_utf8_name_model()), "trace", "basic", exec_cli=True)
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])


# ---------------------------------------------------------------------------------------- the fuzzer itself
def test_every_mutation_makes_a_mutant() -> None:
    data = fixture_model("eudq/t2b_same_node_twice_plus_other").SerializeToString()
    for kind in MUTATIONS:
        made = [mutate("seed", data, kind, random.Random(i)) for i in range(8)]
        changed = [m for m in made if m is not None and m.data != data]
        assert changed, kind
    assert set(MUTATIONS) == set(BYTE_MUTATIONS) | set(PROTO_MUTATIONS)


@pytest.mark.parametrize(
    ("code", "stderr", "hung", "verdict"),
    [
        (0, "", False, "ok"),
        (1, "", False, "ok"),
        (2, "qdqopt: warning: x\nqdqopt: error: bad\n", False, "ok"),
        (2, "qdqopt: error: bad\nmore\n", False, "multiline"),
        (2, "usage: qdqopt\n", False, "multiline"),
        (3, "qdqopt: internal error: ValueError: x\n", False, "internal"),
        (1, "Traceback (most recent call last):\n  x\nValueError: y\n", False, "traceback"),
        (-6, "Assertion failed\n", False, "signal"),
        (134, "", False, "exit"),
        (None, "", True, "hang"),
    ],
)
def test_judge(code: int | None, stderr: str, hung: bool, verdict: str) -> None:
    assert judge(code, stderr, hung)[0] == verdict


def test_a_crash_is_caught_as_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness must be able to fail: an abort planted in the CLI shows up as a ``signal`` verdict."""
    import qdqopt.cli

    monkeypatch.setattr(qdqopt.cli, "cmd_trace", lambda args: os.abort())
    outcome = run_cli(_mutant(_slice_model(3)), "trace", "basic")
    assert outcome.verdict == "signal", outcome


def test_a_partial_output_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import qdqopt.cli

    def half_written(args: object) -> int:
        Path(args.output).write_bytes(b"\x08")  # type: ignore[attr-defined]
        raise QdqoptError("failed after writing")

    monkeypatch.setattr(qdqopt.cli, "cmd_optimize", half_written)
    outcome = run_cli(_mutant(_slice_model(3)), "optimize", "basic")
    assert outcome.verdict == "partial_output", outcome


def test_a_changed_input_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import qdqopt.cli

    def scribble(args: object) -> int:
        Path(args.input).write_bytes(b"")  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(qdqopt.cli, "cmd_explain", scribble)
    outcome = run_cli(_mutant(_slice_model(3)), "explain", "extended")
    assert outcome.verdict == "input_changed", outcome


def test_a_wrong_mode_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import qdqopt.cli

    original = qdqopt.cli._write_atomic  # type: ignore[attr-defined]

    def private(model: object, path: Path) -> None:
        original(model, path)  # type: ignore[arg-type]
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)

    monkeypatch.setattr(qdqopt.cli, "_write_atomic", private)
    outcome = run_cli(_mutant(_slice_model(3)), "optimize", "basic")
    assert outcome.verdict == "mode", outcome


# ------------------------------------------------------------------------------------------------ the campaign
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_seeded_campaign() -> None:
    """A seeded few hundred mutants over the corpus and every fixture, every command: no crash of any class."""
    results = campaign(CI_COUNT, CI_SEED, corpus=CORPUS, timeout=120.0, jobs=2, progress=False)
    failures = [(c, o) for c, _, o in results if o is not None and not o.ok]
    assert len([o for _, _, o in results if o is not None]) >= CI_COUNT * 0.95, "\n".join(summary(results))
    assert not failures, "\n".join(
        f"#{c.index} {o.verdict} {c.seed_name} {c.kind} {' '.join(o.command[:2])} --level {c.level}: {o.note}"
        for c, o in failures
    )


def test_node_output_named_as_an_initializer_is_refused_as_ort_does() -> None:
    """Found by the CI campaign (seed 20261202, #80): a node writing an initializer's name crashed the transpose
    optimizer (IndexError); ORT's loader refuses it, "Duplicate definition of name", and so does qdqopt's now."""
    model = _slice_model(3)
    model.graph.node[0].output[0] = "starts"
    model.graph.output[0].name = "starts"
    outcome = run_cli(_mutant(model), "trace", "layout")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "Duplicate definition of name (starts)" in outcome.stderr


def _label_encoder_reading_nothing(in_subgraph: bool) -> onnx.ModelProto:
    encoder = helper.make_node(
        "LabelEncoder",
        ["nowhere"],
        ["s"],
        name="le",
        domain="ai.onnx.ml",
        keys_int64s=[1, 2],
        values_strings=["a", "b"],
        default_string="_",
    )
    if not in_subgraph:
        graph = helper.make_graph(
            [encoder],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
            [helper.make_tensor_value_info("s", TensorProto.STRING, [3])],
        )
    else:
        branch = helper.make_graph([encoder], "b", [], [helper.make_tensor_value_info("s", TensorProto.STRING, [3])])
        cond = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)
        graph = helper.make_graph(
            [cond],
            "g",
            [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("y", TensorProto.STRING, [3])],
        )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 4)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("in_subgraph", [False, True], ids=["main", "subgraph"])
@pytest.mark.parametrize("command", ["trace", "diff"])
def test_input_nobody_defines_is_refused_before_shape_inference(command: str, in_subgraph: bool) -> None:
    """Found by the CI campaign (seed 20261202, #4): ONNX's LabelEncoder inference reads the type of an input that
    no node, initializer or graph input defines without checking it, and crashed the process (signal 11). qdqopt now
    refuses such a node input first, as ORT's Resolve does ("is not a graph input, initializer, or output of a
    previous node"), in a subgraph as well."""
    outcome = run_cli(_mutant(_label_encoder_reading_nothing(in_subgraph)), command, "disable_all")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "'le' (LabelEncoder): input 'nowhere' is not a graph input, initializer, or output" in outcome.stderr


def test_every_door_to_onnx_inference_guards_negative_dims() -> None:
    """The report's drawings and the fuzzer's shrinker call ONNX's inference through
    :func:`qdqopt.graph.inference.infer_shapes` too (a direct ``onnx.shape_inference`` call aborted the process on
    a negative dim before a Slice); the model handed over is left as it was."""
    from qdqopt.graph import inference

    model = _slice_model(-3)
    before = model.SerializeToString()
    inferred = inference.infer_shapes(model)
    assert model.SerializeToString() == before
    assert not inferred.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")
    root = Path(__file__).resolve().parents[1] / "qdqopt"
    direct = [p.name for p in root.rglob("*.py") if "shape_inference.infer_shapes(" in p.read_text()]
    assert not direct, direct


@pytest.mark.parametrize(
    ("attr", "expected"),
    [
        (helper.make_attribute("value", [3, 4]), [3, 4]),  # INTS under the name "value"
        (helper.make_attribute("value", 2.5), 2.5),  # FLOAT under the name "value"
        (helper.make_attribute("value_ints", [5]), [5]),
    ],
    ids=["value-ints", "value-float", "value_ints"],
)
def test_constant_follows_its_attribute_type_as_ort(attr: onnx.AttributeProto, expected: object) -> None:
    """Found by the campaign (seed 1202, #1119: a Constant's ``value`` replaced by INTS): ORT's
    ``ConstantNodeProtoToTensorProto`` switches on the attribute's type, not its name; qdqopt made an empty tensor
    (and its differ failed on it, exit 3). Both now hold the values, and ``diff`` is exact."""
    const = helper.make_node("Constant", [], ["c"], name="const")
    const.attribute.append(attr)
    cast = helper.make_node("Cast", ["c"], ["y"], name="cast", to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["x", "y"], ["z"], name="add")
    graph = helper.make_graph(
        [const, cast, add],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from qdqopt.api import run

    ours = run(model, "disable_all").model
    found = next(t for t in ours.graph.initializer if t.name == "c")
    assert numpy_helper.to_array(found).tolist() == expected
    outcome = run_cli(_mutant(model), "diff", "basic")
    assert outcome.ok and outcome.returncode == 0, (outcome.verdict, outcome.stderr[-400:])


@pytest.mark.parametrize("perm", [helper.make_attribute("perm", 1.5), helper.make_attribute("perm", [1.5, 2.5])])
@pytest.mark.parametrize("command", ["explain", "trace"])
def test_attribute_of_the_wrong_type_is_refused_as_ort_does(perm: onnx.AttributeProto, command: str) -> None:
    """Found by the campaign (seed 1203, #1259 and #3106): a Transpose whose ``perm`` is a FLOAT(S) reached the
    transpose optimizer (an AssertionError, exit 3); ORT's Resolve refuses it ("Mismatched attribute type"), and so
    does qdqopt's load now, on every schema attribute."""
    node = helper.make_node("Transpose", ["x"], ["y"], name="t")
    node.attribute.append(perm)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    outcome = run_cli(_mutant(model), command, "all")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "(ORT: Mismatched attribute type in 't : perm')" in outcome.stderr


def test_initializer_of_an_unknown_data_type_is_refused_as_ort_does() -> None:
    """Found by the campaign (seed 1203, #4032: a bit flip made an initializer's data type 39): a KeyError in
    qdqopt's load before; ORT's Graph constructor says "does not have valid data type", and so does qdqopt."""
    model = _slice_model(3)
    model.graph.initializer[0].data_type = 39
    outcome = run_cli(_mutant(model), "trace", "layout")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "Tensor 'starts' does not have valid data type." in outcome.stderr


def test_declared_value_of_an_unknown_data_type_is_refused_as_ort_does() -> None:
    """Found by the campaign (seed 1204, #2675: a bit flip made a graph output's element type 67): a ValueError
    from protobuf's enum inside qdqopt's inference before; ORT's loader says "Invalid tensor data type 67.", and so
    does qdqopt, naming the value."""
    model = _slice_model(3)
    model.graph.output[0].type.tensor_type.elem_type = 67
    outcome = run_cli(_mutant(model), "diff", "basic")
    assert outcome.ok and outcome.returncode == 2, (outcome.verdict, outcome.stderr[-400:])
    assert "Invalid tensor data type 67. (value 'y')" in outcome.stderr
