"""``optimize --dump-dir`` and ``--stop-after``: one dump per modifying application, in order, each the model as
that application left it (its op counts are the input's plus the trace's deltas so far), each accepted by ORT, the
last one optimize's output byte for byte; a run with dumps gives the same output as one without; a stop gives the
model of the application it stops after."""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from qdqopt.api import run
from qdqopt.cli import example_model, main
from qdqopt.dumps import StopAfter, dump_name, run_with_dumps
from qdqopt.errors import UsageError
from qdqopt.graph import Graph
from qdqopt.passes import GraphTransformer, PassContext

MODEL = example_model()
NAME = re.compile(r"(\d\d)_(pre|L[0-4]|loop|post)_(\d+)_(\w+)\.onnx")


def _counts(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node
    )


def _accepted_by_ort(path: Path) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("config", [[], ["--config", "session.qdqisint8allowed=1"]], ids=["default", "int8"])
def test_dump_dir_at_all(tmp_path: Path, config: list[str]) -> None:
    out, plain, dumps = tmp_path / "out.onnx", tmp_path / "plain.onnx", tmp_path / "dumps"
    assert main(["optimize", str(MODEL), "-o", str(out), "--dump-dir", str(dumps), *config]) == 0
    assert main(["optimize", str(MODEL), "-o", str(plain), *config]) == 0
    files = sorted(dumps.iterdir())
    result = run(MODEL, "all", config=config[1:])
    fired = [e for e in result.pipeline.trace if e.modified]
    # one file per modifying application, named after it, in order
    assert [p.name for p in files] == [dump_name(i, e) for i, e in enumerate(fired)]
    assert all(NAME.fullmatch(p.name) for p in files)
    # each is the model as its application left it: the input's op counts plus the deltas so far
    counts = _counts(onnx.load(str(MODEL)))
    for path, entry in zip(files, fired, strict=True):
        counts.update(entry.op_delta)
        assert +counts == _counts(onnx.load(str(path))), path.name
        _accepted_by_ort(path)
    # the last is the output byte for byte, and dumping does not change the output
    assert files[-1].read_bytes() == out.read_bytes() == plain.read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in files} == {0o666 & ~umask}


def test_stop_after_gives_that_applications_model(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    full = run_with_dumps(MODEL, "all", dump_dir=dumps)
    by_name = {p.name: p for p in full.dumps}
    for stop, dump in [
        ("ConstantFolding:2", "02_L1_2_ConstantFolding.onnx"),
        ("QDQSelectorActionTransformer", "05_L2_1_QDQSelectorActionTransformer.onnx"),
    ]:
        out = tmp_path / f"{stop.replace(':', '_')}.onnx"
        assert main(["optimize", str(MODEL), "-o", str(out), "--stop-after", stop]) == 0
        assert out.read_bytes() == by_name[dump].read_bytes(), stop


def test_stop_after_an_application_that_changed_nothing(tmp_path: Path) -> None:
    stopped = run_with_dumps(MODEL, "all", stop_after="ConstantFolding:3", dump_dir=tmp_path / "d")
    assert stopped.stopped_after is not None and not stopped.stopped_after.modified
    assert stopped.result.pipeline.stopped
    # the L1 fixed point ended with that application's step: the model is the one after ConstantFolding:2
    assert [p.name for p in stopped.dumps][-1] == "02_L1_2_ConstantFolding.onnx"
    assert stopped.result.pipeline.trace[-1].name == "ConstantFolding"


def test_stop_after_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="applied 3 time"):
        run_with_dumps(MODEL, "all", stop_after="ConstantFolding:4")
    assert main(["optimize", str(MODEL), "-o", str(tmp_path / "o.onnx"), "--stop-after", "X:0"]) == 2
    assert "expected PASS or PASS:N" in capsys.readouterr().err
    assert StopAfter.parse("NhwcTransformer") == StopAfter("NhwcTransformer", 1)


class DeclinesAtLevel2(GraphTransformer):
    """A plugin that declines every model, at Level2: the run is redone without it, after dumps were written."""

    name = "DeclinesAtLevel2"
    level = "extended"

    def unsupported(self, graph: Graph, ctx: PassContext) -> str | None:
        return "declines everything (test)"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        raise AssertionError("never applied")


def test_a_redone_run_leaves_no_stale_dumps(tmp_path: Path) -> None:
    plain = run_with_dumps(MODEL, "all", dump_dir=tmp_path / "plain")
    redone = run_with_dumps(MODEL, "all", dump_dir=tmp_path / "redone", plugins=[DeclinesAtLevel2])
    assert redone.result.unsupported == {"DeclinesAtLevel2": "declines everything (test)"}
    assert sorted(p.name for p in (tmp_path / "redone").iterdir()) == [p.name for p in plain.dumps]
    assert [p.read_bytes() for p in redone.dumps] == [p.read_bytes() for p in plain.dumps]
