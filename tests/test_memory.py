"""Loading and saving hold each weight once (issue #10): the file is read an initializer at a time, the loaded graph
shares the file's tensors and attributes, shape inference gets the weights' dims without their data, and
``write_model`` writes ``save_model``'s bytes one initializer at a time; the peak resident memory above the imports
stays within a few times the model file's size (measured in a child process, as ``benchmarks/bench.py --memory``)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from qdqopt.errors import ModelError
from qdqopt.graph import load_model, save_model
from qdqopt.graph import model as model_module
from qdqopt.graph.model import _NotSplittable, _read_split, read_model_proto, write_model
from qdqopt.levels import Level
from qdqopt.manager import run_pipeline
from tests.conftest import load_file_module

ROOT = Path(__file__).resolve().parents[1]
TP = onnx.TensorProto


@pytest.fixture(autouse=True)
def _split_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files as small as these are parsed whole unless told otherwise."""
    monkeypatch.setattr(model_module, "SPLIT_READ_BYTES", 0)


def _bench() -> ModuleType:
    return load_file_module(ROOT / "benchmarks" / "bench.py", "qdqopt_bench")


def _model() -> onnx.ModelProto:
    """A small QDQ model with a model-local function, an If whose branch has its own initializer, metadata, a typed
    (float_data) initializer ORT re-encodes, a Constant node, and weights big enough to be hidden from inference."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.integers(-127, 128, (64, 96), dtype=np.int8), "w")
    typed = helper.make_tensor("typed", TP.FLOAT, [96], rng.standard_normal(96).astype(np.float32).tolist())
    inits = [
        w,
        numpy_helper.from_array(np.array(0.02, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.1, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zp"),
        numpy_helper.from_array(rng.standard_normal((96, 5000)).astype(np.float32), "unused_big"),
        typed,
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    branch_init = numpy_helper.from_array(np.full((96,), 2.0, np.float32), "two")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["y", "two"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TP.FLOAT, None)],
        [branch_init],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TP.FLOAT, None)],
    )
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xdq"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wdq"], name="wdq"),
        helper.make_node("MatMul", ["xdq", "wdq"], ["mm"], name="matmul"),
        helper.make_node("Constant", [], ["c"], name="const", value=numpy_helper.from_array(np.ones(96, np.float32))),
        helper.make_node("Add", ["mm", "c"], ["a"], name="add"),
        helper.make_node("Twice", ["a"], ["t"], name="call", domain="local"),
        helper.make_node("Add", ["t", "typed"], ["y"], name="add2"),
        helper.make_node("If", ["cond"], ["out"], name="if", then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("out", TP.FLOAT, ["N", 96])],
        inits,
    )
    twice = helper.make_function(
        "local", "Twice", ["i"], ["o"], [helper.make_node("Add", ["i", "i"], ["o"])], [helper.make_opsetid("", 19)]
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("local", 1)],
        functions=[twice],
        ir_version=9,
        producer_name="test_memory",
    )
    helper.set_model_props(model, {"b": "2", "a": "1"})
    return model


def _unknown_field(number: int, value: int) -> bytes:
    """A varint field ``number`` no ONNX message has (kept as an unknown field by protobuf)."""
    return bytes([number << 3 & 0x7F | 0x80, number >> 4]) + bytes([value])


def _shuffled_bytes(model: onnx.ModelProto) -> bytes:
    """The model's bytes with its graph's initializers interleaved with its nodes and an unknown field in the model
    and in the graph: valid protobuf that ``SerializeToString`` would never write, parsed by ``onnx.load`` the same."""
    graph = model.graph
    fields = [b"\x0a" + _len(n.SerializeToString()) + n.SerializeToString() for n in graph.node]
    inits = [b"\x2a" + _len(t.SerializeToString()) + t.SerializeToString() for t in graph.initializer]
    rest = onnx.GraphProto()
    rest.CopyFrom(graph)
    rest.ClearField("node")
    rest.ClearField("initializer")
    mixed = [x for pair in zip(inits, fields, strict=False) for x in pair] + inits[len(fields) :] + fields[len(inits) :]
    graph_bytes: bytes = b"".join(mixed[:3]) + _unknown_field(1000, 7) + rest.SerializeToString() + b"".join(mixed[3:])
    head = onnx.ModelProto()
    head.CopyFrom(model)
    head.ClearField("graph")
    return _unknown_field(2000, 9) + bytes(head.SerializeToString()) + b"\x3a" + _len(graph_bytes) + graph_bytes


def _len(data: bytes) -> bytes:
    n, out = len(data), bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _saved(source: Path | onnx.ModelProto, level: Level) -> bytes:
    model = load_model(source)
    run_pipeline(model, level)
    return bytes(save_model(model).SerializeToString())


@pytest.mark.parametrize("shuffled", [False, True], ids=["plain", "shuffled"])
def test_split_read_is_onnx_load(tmp_path: Path, shuffled: bool) -> None:
    path = tmp_path / "m.onnx"
    model = _model()
    path.write_bytes(_shuffled_bytes(model) if shuffled else model.SerializeToString())
    whole = onnx.load(str(path), load_external_data=False)
    header, graph, initializers, has_graph = _read_split(path)
    assert has_graph and not header.HasField("graph") and not graph.initializer
    again = onnx.ModelProto()
    again.CopyFrom(header)
    again.graph.CopyFrom(graph)
    again.graph.initializer.extend(initializers)
    assert again.SerializeToString() == whole.SerializeToString()
    for level in (Level.DISABLE_ALL, Level.ALL):
        assert _saved(path, level) == _saved(whole, level)


def test_graph_given_twice_is_parsed_whole(tmp_path: Path) -> None:
    """Protobuf merges a message field given twice; the split reader leaves that to ``onnx.load``."""
    model = _model()
    first, second = onnx.ModelProto(), onnx.ModelProto()
    first.CopyFrom(model)
    del first.graph.node[4:]
    second.graph.node.extend(model.graph.node[4:])
    path = tmp_path / "twice.onnx"
    path.write_bytes(first.SerializeToString() + second.SerializeToString())
    with pytest.raises(_NotSplittable):
        _read_split(path)
    assert onnx.load(str(path)) == model
    assert _saved(path, Level.ALL) == _saved(model, Level.ALL)


@pytest.mark.parametrize("split", [True, False], ids=["split", "whole"])
def test_read_model_proto_without_initializers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    if not split:
        monkeypatch.setattr(model_module, "SPLIT_READ_BYTES", 1 << 40)
    path = tmp_path / "m.onnx"
    path.write_bytes(_shuffled_bytes(_model()))
    expected = onnx.load(str(path))
    expected.graph.ClearField("initializer")
    proto, base = read_model_proto(path, initializers=False)
    assert base == tmp_path.resolve()
    assert proto.SerializeToString() == expected.SerializeToString()


@pytest.mark.parametrize("split", [True, False], ids=["split", "whole"])
def test_external_data_outside_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    if not split:
        monkeypatch.setattr(model_module, "SPLIT_READ_BYTES", 1 << 40)
    model = _model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TP.EXTERNAL
    tensor.external_data.add(key="location", value="../weights.bin")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for read in (load_model, lambda p: read_model_proto(p, initializers=False), read_model_proto):
        with pytest.raises(ModelError, match="external data outside the model's folder"):
            read(path)


def test_bad_files(tmp_path: Path) -> None:
    data = _model().SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) - 100])
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_model(truncated)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="no graph"):
        load_model(empty)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_model(garbage)


@pytest.mark.parametrize("level", [Level.DISABLE_ALL, Level.BASIC, Level.ALL], ids=lambda lv: lv.short)
@pytest.mark.parametrize("shuffled", [False, True], ids=["plain", "shuffled"])
def test_write_model_is_save_model(tmp_path: Path, level: Level, shuffled: bool) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(_shuffled_bytes(model) if shuffled else model.SerializeToString())
    loaded = load_model(path)
    run_pipeline(loaded, level)
    expected = save_model(loaded).SerializeToString()
    out = tmp_path / "out.onnx"
    assert write_model(loaded, out) == len(expected)
    assert out.read_bytes() == expected
    buffer = io.BytesIO()
    write_model(loaded, buffer)
    assert buffer.getvalue() == expected


@pytest.mark.parametrize("level", [Level.DISABLE_ALL, Level.ALL], ids=lambda lv: lv.short)
def test_write_model_joins_small_pieces_and_writes_large_weights_alone(tmp_path: Path, level: Level) -> None:
    """write_model joins the initializers' headers and the small initializers into writes of up to 64 KiB and
    writes a weight as large on its own: the bytes are save_model's, whatever the sizes on either side of that
    bound (many small ones past it, one just under, at and over it), and the writes are few and never copy a large
    weight."""
    chunk = model_module._WRITE_CHUNK
    sizes = [3] * 40 + [chunk // 8 - 1] * 9 + [chunk // 4 - 4, chunk // 4, chunk // 4 + 1, 1, chunk // 2]
    rng = np.random.default_rng(1)
    inits, nodes, last = [], [], "x"
    for i, count in enumerate(sizes):
        inits.append(numpy_helper.from_array(rng.standard_normal(count).astype(np.float32), f"c{i}"))
        nodes.append(helper.make_node("Mul", ["x", f"c{i}"], [f"m{i}"]))  # (of the input: nothing folds)
        nodes.append(helper.make_node("ReduceSum", [f"m{i}"], [f"s{i}"], keepdims=0))
        nodes.append(helper.make_node("Add", [last, f"s{i}"], [f"a{i}"]))
        last = f"a{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [])],
        [helper.make_tensor_value_info(last, TP.FLOAT, [])],
        inits,
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    loaded = load_model(path)
    run_pipeline(loaded, level)
    expected = save_model(loaded).SerializeToString()
    writes: list[int] = []

    class Recording(io.BytesIO):
        def write(self, data: object) -> int:
            writes.append(len(data))  # type: ignore[arg-type]
            return super().write(data)  # type: ignore[arg-type]

    buffer = Recording()
    assert write_model(loaded, buffer) == len(expected)
    assert buffer.getvalue() == expected
    saved = [t.ByteSize() for t in save_model(loaded).graph.initializer]
    large = sorted(size for size in saved if size >= chunk)
    # (the test's own premise: weights over the bound, and one just under it)
    assert len(large) >= 3 and any(chunk - 32 < size < chunk for size in saved), saved
    # each large weight is one write of exactly its bytes; everything else went in joined writes, never above the
    # bound by more than one small piece
    assert sorted(n for n in writes if n in large) == large, writes
    joined = [n for n in writes if n not in large]
    assert len(joined) < len(saved) // 4, writes
    assert all(n < 2 * chunk for n in joined), writes
    out = tmp_path / "out.onnx"
    assert write_model(loaded, out) == len(expected)
    assert out.read_bytes() == expected


class _Stream(io.BytesIO):
    """A binary file object that cannot be sought (a pipe's)."""

    def seekable(self) -> bool:
        return False


@pytest.mark.parametrize("odd", ["short raw data", "unknown field", "doc string"])
def test_write_model_when_a_weight_is_not_as_its_fields_say(tmp_path: Path, odd: str) -> None:
    """``write_model`` computes a large weight's size from its fields; a weight whose raw data is shorter than its
    dims say, or which keeps a field the tensor does not know, makes that size wrong: the file is written again,
    each size counted, and the bytes are still ``save_model``'s (into a stream that cannot be sought, every size is
    counted at once). A doc string the loader drops (as ORT does) leaves it right."""
    model = _model()
    big = next(t for t in model.graph.initializer if t.name == "unused_big")
    model.graph.node.append(helper.make_node("Identity", ["unused_big"], ["big_out"]))
    model.graph.output.append(helper.make_tensor_value_info("big_out", TP.FLOAT, None))
    if odd == "short raw data":
        big.raw_data = big.raw_data[:-4]
    elif odd == "doc string":
        big.doc_string = "kept"
    elif odd == "unknown field":  # field 99, a varint: parsed, the tensor keeps it as a field it does not know
        big.CopyFrom(onnx.TensorProto.FromString(big.SerializeToString() + b"\x98\x06\x01"))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    loaded = load_model(path)
    expected = save_model(loaded).SerializeToString()
    out = tmp_path / "out.onnx"
    assert write_model(loaded, out) == len(expected)
    assert out.read_bytes() == expected
    stream = _Stream()
    assert write_model(loaded, stream) == len(expected)
    assert stream.getvalue() == expected


def test_result_save_is_optimize_output(tmp_path: Path) -> None:
    """The Python API's file path (``run(...).save(path)``) writes what ``result.model`` serialises to, without
    making that ModelProto, with the umask's mode."""
    import os

    from qdqopt.api import run

    source = tmp_path / "m.onnx"
    source.write_bytes(_model().SerializeToString())
    result = run(source, "all")
    out = tmp_path / "sub" / "out.onnx"
    old = os.umask(0o027)
    try:
        result.save(out)
    finally:
        os.umask(old)
    assert "model" not in vars(result)  # the cached ModelProto was not made
    assert out.read_bytes() == result.model.SerializeToString()
    assert out.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in out.parent.iterdir()] == ["out.onnx"]


def test_initializers_and_attributes_are_shared() -> None:
    model = _model()
    loaded = load_model(model)
    assert loaded.graph.initializer("w") is model.graph.initializer[0]
    if_node = next(n for n in loaded.graph.nodes() if n.name == "if")
    then_branch = next(a for a in model.graph.node[8].attribute if a.name == "then_branch")
    assert if_node.attributes["then_branch"] is then_branch


_CHILD = """
import json, sys, warnings
warnings.simplefilter("ignore")
from pathlib import Path
from qdqopt.graph import load_model
from qdqopt.graph.model import write_model
from qdqopt.levels import parse_level
from qdqopt.manager import run_pipeline

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

from qdqopt.cli import example_model

model, level, out = Path(sys.argv[1]), parse_level(sys.argv[2]), Path(sys.argv[3])
m = load_model(example_model())  # warm-up: lazy imports, schema tables
run_pipeline(m, level)
write_model(m, out)
del m
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
base = status("VmRSS")
m = load_model(model)
run_pipeline(m, level)
write_model(m, out)
print(json.dumps({"peak": status("VmHWM") - base}))
"""


def _peak_ratio(tmp_path: Path, level: Level) -> float:
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux's /proc/self/clear_refs")
    bench = _bench()
    model = bench.synthetic_qdq_model(tmp_path / "synthetic.onnx", target_mb=30)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), str(int(level)), str(tmp_path / "out.onnx")],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peak"]
    return float(peak / model.stat().st_size)


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS from /proc")
def test_peak_memory_basic(tmp_path: Path) -> None:
    """Load + BASIC + write_model: the weights once, plus a little (one more copy of them would be 2x)."""
    assert _peak_ratio(tmp_path, Level.BASIC) <= 1.6


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS from /proc")
def test_peak_memory_all(tmp_path: Path) -> None:
    """Issue #10's acceptance: at most 3 times the file's size at ALL."""
    assert _peak_ratio(tmp_path, Level.ALL) <= 3.0
