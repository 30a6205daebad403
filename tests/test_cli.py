"""The command line: bad input gives one line and exit code 2; outputs are atomic; the input is never touched."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from qdqopt.api import optimize
from qdqopt.cli import example_model, main
from qdqopt.levels import PASSES
from qdqopt.passes import TRANSFORMERS
from tests.conftest import CORPUS, fixture_model


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qdqopt.cli", *args], capture_output=True, text=True, check=False, env=env
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_missing_file(tmp_path: Path) -> None:
    proc = _run("optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "out.onnx"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no such file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_not_onnx(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_text("this is not a model")
    for command in (["optimize", str(bad), "-o", str(tmp_path / "o.onnx")], ["diff", str(bad)], ["trace", str(bad)]):
        proc = _run(*command)
        assert proc.returncode == 2, proc.stderr
        assert "not an ONNX model" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_model_ort_rejects(tmp_path: Path) -> None:
    rejected = CORPUS / "openvino" / "quant_dequant_pattern.onnx"
    if not rejected.exists():
        pytest.skip("shared corpus not available")
    out = tmp_path / "o.onnx"
    proc = _run("optimize", str(rejected), "-o", str(out))
    assert proc.returncode == 2
    assert "ONNX Runtime rejected the model" in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert not out.exists()


def test_duplicate_initializer_is_named(tmp_path: Path) -> None:
    """ORT accepts a graph defining an initializer twice (invalid ONNX); qdqopt refuses it, naming the tensor."""
    const = [onnx.numpy_helper.from_array(np.full(2, v, np.float32), "c") for v in (1.0, 0.0)]
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "c"], ["y"], name="a")],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        const,
    )
    src = tmp_path / "dup.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)]), str(src))
    proc = _run("optimize", str(src), "-o", str(tmp_path / "o.onnx"))
    assert proc.returncode == 2 and "'c' is defined twice" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_unknown_level_is_usage_error(tmp_path: Path) -> None:
    proc = _run("trace", str(example_model()), "--level", "turbo")
    assert proc.returncode == 2 and "unknown optimization level" in proc.stderr


def test_optimize_writes_atomically_and_leaves_input(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    src.write_bytes(example_model().read_bytes())
    before = _digest(src)
    out = tmp_path / "sub" / "out.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--level", "disable_all"]) == 0
    assert _digest(src) == before
    assert onnx.load(str(out)).graph.node
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.onnx"]  # no temporary left behind
    assert main(["optimize", str(src), "-o", str(src)]) == 2  # refuses to overwrite its input


def test_unknown_names_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.onnx"
    status = main(
        [
            "optimize",
            str(example_model()),
            "-o",
            str(out),
            "-l",
            "0",
            "-d",
            "ReluQuantFusion",
            "-c",
            "session.qdqisint8alowed=1",
        ]
    )
    err = capsys.readouterr().err
    assert status == 0
    assert "'ReluQuantFusion' is not the name" in err
    assert "'session.qdqisint8alowed' is not one qdqopt knows" in err


def test_passes_lists_every_pass_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["passes", "--level", "all", "--all"]) == 0
    text = capsys.readouterr().out
    positions: list[int] = []
    for spec in PASSES:
        if spec.stage == "L0":
            continue
        marker = f"  {spec.name} "
        start = positions[-1] + 1 if positions else 0
        found = text.find(marker, start)
        assert found >= 0, f"{spec.name} missing or out of order"
        positions.append(found)
        for rule in spec.rules:
            assert f"- {rule.name} " in text


def test_trace_matches_ort_at_disable_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(example_model()), "--level", "disable_all", "--ort"]) == 0
    out = capsys.readouterr().out
    assert "GraphTransformer EnsureUniqueDQForNodeUnit modified: 1   DequantizeLinear +1" in out
    assert "identical" in out


def test_trace_matches_ort_at_extended_with_a_comma_separated_disable_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    layout_work = "TransposeOptimizer,TransposeOptimizer_CPUExecutionProvider"
    assert main(["trace", str(example_model()), "-l", "extended", "--ort", "-d", layout_work]) == 0
    out = capsys.readouterr().out
    assert "GraphTransformer QDQSelectorActionTransformer modified: 1" in out
    assert "TransposeOptimizer modified" not in out  # both names were taken, neither ran
    assert "identical" in out


def test_diff_reports_tiers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(fixture_model("eudq/t2b_same_node_twice_plus_other"), str(model))
    assert main(["diff", str(model), "--level", "0"]) == 0
    assert "tier P" in capsys.readouterr().out


def test_example_is_the_committed_fixture() -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tinyconvnet_pt2e.onnx"
    assert example_model().read_bytes() == fixture.read_bytes()


def test_explain_names_the_units_that_stay_float(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(example_model())]) == 0
    default = capsys.readouterr().out
    assert default.count("REJECTED") >= 2 and "mixed input types" in default
    assert main(["explain", str(example_model()), "-c", "session.qdqisint8allowed=1"]) == 0
    allowed = capsys.readouterr().out
    assert "REJECTED" not in allowed
    assert allowed.count("-> QLinearConv") == 4 and "-> com.microsoft.QLinearAdd" in allowed
    assert "-> com.microsoft.QGemm" in allowed


def test_explain_at_basic_has_no_qdq_units(capsys: pytest.CaptureFixture[str]) -> None:
    """Below EXTENDED the QDQ fusion does not run: explain shows only the Level1 transformer fusions."""
    assert main(["explain", str(example_model()), "--level", "basic"]) == 0
    out = capsys.readouterr().out
    assert "QDQ node units" not in out
    assert "GeluFusionL1" in out


def _level_blocks(out: str) -> list[str]:
    """The diff output, one block per level line (with its indented notes and differences)."""
    blocks: list[str] = []
    for line in out.splitlines():
        if line.startswith("ORT_"):
            blocks.append(line)
        elif blocks and line.startswith("    "):
            blocks[-1] += "\n" + line
    return blocks


def test_demo_runs_the_main_job(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: trace and compare the bundled example at every level, ORT as a user runs it."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "GraphTransformer EnsureUniqueDQForNodeUnit modified: 1" in out
    assert (
        "Compared with ORT as a user runs it" in out and out.count("ORT run as a user runs it (nothing disabled)") == 2
    )
    assert "isolation" not in out
    assert out.count("tier P") == 10  # five levels, default and int8-allowed
    assert "DIFF" not in out
    last = out.strip().splitlines()[-2]  # the report's path, then what it holds
    assert last.startswith("report: ") and "2 setup(s) side by side" in last
    page = Path(last.removeprefix("report: ").split(" (")[0])
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_demo_names_what_qdqopt_lacks(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without NhwcTransformer (as before issue 9) the demo's LAYOUT and ALL figures show ORT's NHWC rewrite."""
    monkeypatch.delitem(TRANSFORMERS, NHWC, raising=False)
    assert main(["demo", "--no-report"]) == 1
    blocks = _level_blocks(capsys.readouterr().out)
    assert len(blocks) == 10
    differing = [b for b in blocks if "tier P" not in b]
    assert [b.split()[0] for b in differing] == ["ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL"] * 2
    lacks = "qdqopt lacks NhwcTransformer, which ORT runs at this level and which modified this model"
    assert all(lacks in b and "DIFF" in b for b in differing)


def test_demo_isolated_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--isolate", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "isolation mode (--isolate)" in out and "not fidelity results" in out
    blocks = _level_blocks(out)
    assert len(blocks) == 10 and all("tier P" in b and "(isolation)" in b for b in blocks)
    assert all("disabled on both sides (isolation mode; not a fidelity result)" in b for b in blocks)


def test_optimize_and_diff_name_a_pass_that_does_not_cover_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from qdqopt.passes.conv_activation_fusion import ConvActivationFusion

    src = tmp_path / "m.onnx"
    onnx.save(fixture_model("wbq/conv_relu_clip_chain"), str(src))
    monkeypatch.setattr(ConvActivationFusion, "unsupported", lambda self, graph, ctx: "a case not covered")
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "-l", "extended"]) == 0
    assert "ConvActivationFusion: a case not covered" in capsys.readouterr().out
    assert main(["diff", str(src), "-l", "extended", "--isolate"]) == 0
    assert "ConvActivationFusion does not cover this model yet: a case not covered" in capsys.readouterr().out
    assert main(["diff", str(src), "-l", "extended"]) == 1  # as ORT runs: ORT fuses, qdqopt declined
    out = capsys.readouterr().out
    assert "ConvActivationFusion does not cover this model yet (a case not covered), so qdqopt did not run it" in out
    assert "it modified this model: differences expected" in out


def test_passes_marks_partly_covered_passes(capsys: pytest.CaptureFixture[str]) -> None:
    """A pass that can decline a model (it overrides ``unsupported``) is listed as ``part``, not ``yes``."""
    from qdqopt.passes import TRANSFORMERS, GraphTransformer

    assert main(["passes", "--level", "all", "--all"]) == 0
    out = capsys.readouterr().out
    for name, cls in TRANSFORMERS.items():
        expected = "part" if cls.unsupported is not GraphTransformer.unsupported else "yes"
        line = next(line for line in out.splitlines() if f" {name} " in line)
        assert f" {expected} " in line, line
    assert "part" in out


# ----------------------------------------------------------------------------- as ORT runs (default) vs --isolate
CNN = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tinyconvnet_ortquant_u8s8.onnx"
NHWC = "NhwcTransformer"
ISOLATION_TAIL = "disabled on both sides (isolation mode; not a fidelity result)"


def test_diff_compares_with_ort_as_it_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """At LAYOUT ORT's NhwcTransformer rewrites the QLinearConvs; without it qdqopt differs (1), and says why."""
    monkeypatch.delitem(TRANSFORMERS, NHWC, raising=False)
    assert main(["diff", str(CNN), "-l", "layout"]) == 1
    out = capsys.readouterr().out
    assert "ORT run as a user runs it (nothing disabled)" in out and "isolation" not in out
    assert "qdqopt lacks NhwcTransformer, which ORT runs at this level and which modified this model" in out
    assert "S:DIFF" in out and "trace: DIFFERENT" in out


def test_diff_isolate(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(TRANSFORMERS, NHWC, raising=False)
    assert main(["diff", str(CNN), "-l", "layout", "--isolate", "-v"]) == 0
    out = capsys.readouterr().out
    level_line = next(line for line in out.splitlines() if line.startswith("ORT_ENABLE_LAYOUT"))
    assert "tier P" in level_line and level_line.endswith("(isolation)")
    header = next(line for line in out.splitlines() if line.strip().startswith("ORT run with"))
    assert header.endswith(ISOLATION_TAIL) and NHWC in header
    assert "ORT run as a user runs it" not in out


def test_diff_exit_codes_with_a_missing_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 equal, 1 a difference, in both modes, whatever qdqopt implements (a pass is made missing on purpose)."""
    from qdqopt.passes.conv_activation_fusion import ConvActivationFusion

    src = tmp_path / "m.onnx"
    onnx.save(fixture_model("wbq/conv_relu_clip_chain"), str(src))
    assert main(["diff", str(src), "-l", "extended"]) == 0  # qdqopt has the pass: equal as ORT runs
    assert "tier P" in capsys.readouterr().out
    monkeypatch.delitem(TRANSFORMERS, ConvActivationFusion.name)
    assert main(["diff", str(src), "-l", "extended"]) == 1
    assert "qdqopt lacks ConvActivationFusion, which ORT runs" in capsys.readouterr().out
    assert main(["diff", str(src), "-l", "extended", "--isolate", "-v"]) == 0
    out = capsys.readouterr().out
    assert ISOLATION_TAIL in out and "ConvActivationFusion" in out


def test_isolate_bad_input_and_bad_combinations(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_text("this is not a model")
    for command in (["diff", str(bad), "--isolate"], ["trace", str(bad), "--ort", "--isolate"]):
        proc = _run(*command)
        assert proc.returncode == 2 and "not an ONNX model" in proc.stderr, proc.stderr
    proc = _run("diff", str(CNN), "--isolate", "--strict")  # --strict, the old name of the default, contradicts it
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    proc = _run("trace", str(CNN), "--isolate")  # --isolate says how ORT runs: it needs --ort
    assert proc.returncode == 2 and "--isolate only applies with --ort" in proc.stderr


def test_diff_strict_is_still_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(CNN), "-l", "0", "--strict"]) == 0
    assert "ORT run as a user runs it (nothing disabled)" in capsys.readouterr().out


def test_trace_ort_as_it_runs_and_isolated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(CNN), "-l", "layout", "--ort"]) == 0
    out = capsys.readouterr().out
    assert "ORT run as a user runs it (nothing disabled)" in out and "identical" in out


def test_trace_ort_without_a_pass(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(TRANSFORMERS, NHWC, raising=False)
    assert main(["trace", str(CNN), "-l", "layout", "--ort"]) == 1
    out = capsys.readouterr().out
    assert (
        "DIFFERENT" in out and "GraphTransformer NhwcTransformer modified: 0  (not implemented: skipped)  <> ORT" in out
    )
    assert "qdqopt lacks NhwcTransformer, which ORT runs at this level and which modified this model" in out
    assert main(["trace", str(CNN), "-l", "layout", "--ort", "--isolate"]) == 0
    out = capsys.readouterr().out
    assert ISOLATION_TAIL in out and "identical" in out


def test_optimize_output_takes_the_umask_mode(tmp_path: Path) -> None:
    """The output is written atomically (a temporary file renamed) and gets the mode a new file gets, not 0600."""
    out = tmp_path / "o.onnx"
    old = os.umask(0o027)
    try:
        assert main(["optimize", str(example_model()), "-o", str(out), "--level", "basic"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert out.read_bytes() == optimize(example_model(), "basic").SerializeToString()  # streamed = save_model's


def test_ort_check_runs_in_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash inside ORT's C++ while checking the input ends only the child: one error line, exit 2."""
    import qdqopt.reference as reference

    monkeypatch.setattr(reference, "_CHILD_CHECK", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(example_model()), "-o", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parametrize("command", [["diff"], ["trace", "--ort"]])
def test_ort_crashing_at_a_level_is_a_one_line_error(command: list[str], tmp_path: Path) -> None:
    """ORT 1.32 accepts ``matmultranspose/transpose_cast_batch_mismatch`` at DISABLE_ALL but its NchwcTransformer
    crashes the process at ALL (the fixture says why): a command that runs ORT at ALL creates that session in a
    child, so the crash ends the child and the command says so in one line (exit 2), never with signal 11. The
    temporary files the crashed child made go too."""
    path = tmp_path / "model.onnx"
    onnx.save(fixture_model("matmultranspose/transpose_cast_batch_mismatch"), path)
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = _run(*command, str(path), "--level", "all", env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-400:])
    assert "ONNX Runtime crashed (signal" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not [p.name for p in temp.iterdir() if p.name.startswith("qdqopt-")]  # (importing ORT writes .ses)
