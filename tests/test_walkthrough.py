"""docs/walkthrough.md: every command and snippet it shows is run here, its shown output checked (each line shown is
in the real output, in order; ``...`` marks lines left out, or the end of a line; a snippet's output exactly), and
the claim next to it checked against the model or ORT. A command added to the page without a claim here fails
``test_every_command_is_checked``."""

from __future__ import annotations

import collections
import contextlib
import io
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest

from qdqopt.cli import example_model, main
from qdqopt.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "walkthrough.md"
SEEDS = ROOT.parent / "shared" / "seeds"
MODEL = str(example_model())
X86 = platform.machine().lower() in ("x86_64", "amd64")


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(console|python|text)\n(.*?)```", PAGE.read_text(), re.S)


def commands() -> list[tuple[str, list[str]]]:
    """Each ``$ command`` of the page's console blocks with the output lines shown under it."""
    out: list[tuple[str, list[str]]] = []
    for kind, body in _blocks():
        if kind != "console":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out:
                out[-1][1].append(line)
    return out


def snippets() -> list[tuple[str, str]]:
    """Each python block with the text block that follows it (its output)."""
    blocks = _blocks()
    return [(body, blocks[i + 1][1]) for i, (kind, body) in enumerate(blocks) if kind == "python"]


def _norm(line: str) -> str:
    return " ".join(line.split())


def _shown_in_order(shown: list[str], output: str) -> None:
    lines = [_norm(x) for x in output.splitlines()]
    at = 0
    for want in (_norm(x) for x in shown if x.strip() and x.strip() != "..."):
        # a line ending in "..." stands for any line it begins
        while at < len(lines) and not (
            lines[at] == want or (want.endswith("...") and lines[at].startswith(want[:-3].rstrip()))
        ):
            at += 1
        assert at < len(lines), f"shown line not in the output (in order): {want!r}\n--- output:\n{output}"
        at += 1


# ------------------------------------------------------------------------------------------------- the claims
def _op_counts(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node
    )


def claim_diff(status: int, out: str, argv: list[str]) -> None:
    assert status == 0  # tier X (here P) and the trace at every level
    assert out.count("tier P") == 5


def claim_duplicated(status: int, out: str, argv: list[str]) -> None:
    # the duplicated DQ's original feeds two consumers in the input model, one of them the Add
    model = onnx.load(MODEL)
    (dq,) = [n for n in model.graph.node if n.name == "node_dequantize_per_tensor_2"]
    consumers = [n for n in model.graph.node if dq.output[0] in n.input]
    assert sorted(n.op_type for n in consumers) == ["Add", "Conv"]
    ort = run_reference(MODEL, "disable_all", capture_log=False).model
    assert any(n.name == "node_dequantize_per_tensor_2/duplicated" for n in ort.graph.node)


def claim_add_unit(status: int, out: str, argv: list[str]) -> None:
    assert status == 0 and "summary: 3 dropped, 6 fused, 1 no rule" in out


def claim_basic(status: int, out: str, argv: list[str]) -> None:
    ort = run_reference(MODEL, "basic")
    modified = [t.name for t in ort.trace if t.modified]
    assert modified == ["EnsureUniqueDQForNodeUnit", "WeightBiasQuantization", "ConstantFolding"]
    counts = _op_counts(ort.model)
    assert counts["DequantizeLinear"] == 22 and not counts["Round"]  # 17 + the five int32 bias DQs


def claim_extended_int8(status: int, out: str, argv: list[str]) -> None:
    ort = run_reference(MODEL, "extended", config={"session.qdqisint8allowed": "1"})
    assert [t.name for t in ort.trace if t.modified][-2:] == [
        "Level2_RuleBasedTransformer",
        "QDQSelectorActionTransformer",
    ]
    assert "QDQS8ToU8Transformer" not in out


def claim_norelu(status: int, out: str, argv: list[str]) -> None:
    ort = run_reference(
        MODEL, "extended", config={"session.qdqisint8allowed": "1"}, disabled=["ReluQuantRewrite"], capture_log=False
    )
    assert _op_counts(ort.model)["Relu"] == 0
    assert _op_counts(onnx.load(argv[argv.index("-o") + 1])) == _op_counts(ort.model)


def claim_reduce_mean(status: int, out: str, argv: list[str]) -> None:
    ort = run_reference(MODEL, "all", config={"session.qdqisint8allowed": "1"}, capture_log=False).model
    fed = {o for n in ort.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    float_ops = sorted({n.op_type for n in ort.graph.node if n.op_type != "QuantizeLinear" and set(n.input) & fed})
    assert float_ops == ["ReduceMean"]  # the seed's check, on ORT's graph


def claim_layout_int8(status: int, out: str, argv: list[str]) -> None:
    ort = run_reference(MODEL, "layout", config={"session.qdqisint8allowed": "1"}, capture_log=False).model
    counts = _op_counts(ort)
    assert counts["com.microsoft.QLinearConv"] == 4 and counts["com.microsoft.NhwcMaxPool"] == 2
    assert counts["Transpose"] == 2


def claim_x86_extended(status: int, out: str, argv: list[str]) -> None:
    if not X86:
        pytest.skip("QDQS8ToU8Transformer is registered where int8 activations are not allowed (x86)")
    ort = run_reference(MODEL, "extended")
    assert "QDQS8ToU8Transformer" in [t.name for t in ort.trace if t.modified]


def claim_x86_explain(status: int, out: str, argv: list[str]) -> None:
    if not X86:
        pytest.skip("x86 only")
    # the Q feeding the duplicated DQ has two DQ consumers after DISABLE_ALL's duplication, so it stays int8
    ort = run_reference(MODEL, "extended", capture_log=False).model
    dq = next(n for n in ort.graph.node if n.name == "node_dequantize_per_tensor_2/duplicated")
    inits = {t.name: t for t in ort.graph.initializer}
    assert inits[dq.input[2]].data_type == onnx.TensorProto.INT8
    base = run_reference(MODEL, "disable_all", capture_log=False).model
    (q,) = [n for n in base.graph.node if dq.input[0] in n.output]
    assert q.op_type == "QuantizeLinear"
    assert sorted(n.name for n in base.graph.node if q.output[0] in n.input) == [
        "node_dequantize_per_tensor_2",
        "node_dequantize_per_tensor_2/duplicated",
    ]


def claim_x86_layout(status: int, out: str, argv: list[str]) -> None:
    if not X86:
        pytest.skip("x86 only")
    counts = _op_counts(run_reference(MODEL, "layout", capture_log=False).model)
    assert counts["Conv"] == 1 and counts["com.microsoft.nchwc.MaxPool"] == 1


def claim_dumps(status: int, out: str, argv: list[str]) -> None:
    folder = Path(argv[argv.index("--dump-dir") + 1])
    files = sorted(folder.glob("*.onnx"))
    assert len(files) == 8 and files[0].name == "00_pre_1_EnsureUniqueDQForNodeUnit.onnx"
    assert files[-1].read_bytes() == Path(argv[argv.index("-o") + 1]).read_bytes()


CLAIMS: dict[str, Callable[[int, str, list[str]], None]] = {
    "qdqopt diff $M --all-levels": claim_diff,
    "qdqopt trace $M --level disable_all --verbose --why": claim_duplicated,
    "qdqopt explain $M --config session.qdqisint8allowed=1": claim_add_unit,
    "qdqopt trace $M --level basic": claim_basic,
    "qdqopt trace $M --level extended --config session.qdqisint8allowed=1": claim_extended_int8,
    "qdqopt optimize $M -o /tmp/walkthrough_norelu.onnx --level extended --config session.qdqisint8allowed=1"
    " --disable ReluQuantRewrite": claim_norelu,
    "qdqopt explain $M --config session.qdqisint8allowed=1 --all": claim_reduce_mean,
    "qdqopt explain $M --level layout --config session.qdqisint8allowed=1": claim_layout_int8,
    "qdqopt trace $M --level extended": claim_x86_extended,
    "qdqopt explain $M": claim_x86_explain,
    "qdqopt explain $M --level layout": claim_x86_layout,
    "qdqopt optimize $M -o /tmp/walkthrough_out.onnx --dump-dir /tmp/walkthrough_steps": claim_dumps,
}
SET_M = 'M=$(python -c "from qdqopt.cli import example_model; print(example_model())")'
X86_OUTPUT = {"qdqopt trace $M --level extended", "qdqopt explain $M", "qdqopt explain $M --level layout"}


def test_every_command_is_checked() -> None:
    shown = [cmd for cmd, _ in commands()]
    assert shown[0] == SET_M
    assert sorted(shown[1:]) == sorted(CLAIMS)


def test_setting_m() -> None:
    code = re.fullmatch(r'M=\$\(python -c "(.*)"\)', SET_M)
    assert code is not None
    printed = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True, check=True)
    assert printed.stdout.strip() == MODEL and Path(MODEL).is_file()


@pytest.mark.parametrize(("command", "shown"), [c for c in commands() if c[0] != SET_M], ids=lambda c: str(c)[:60])
def test_command(
    command: str, shown: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if command in X86_OUTPUT and not X86:
        pytest.skip("the page shows x86's output")
    argv = shlex.split(command.replace("$M", shlex.quote(MODEL)))
    assert argv[0] == "qdqopt"
    for flag in ("-o", "--dump-dir"):  # the page's /tmp paths, made private to this test
        if flag in argv:
            i = argv.index(flag) + 1
            argv[i] = str(tmp_path / argv[i].removeprefix("/tmp/"))
    status = main(argv[1:])
    out = capsys.readouterr().out
    _shown_in_order([line.replace("/tmp/", f"{tmp_path}/") for line in shown], out)
    CLAIMS[command](status, out, argv)


def test_snippets() -> None:
    namespace: dict[str, Any] = {}
    for code, expected in snippets():
        if "op_table(" in code and not X86 and "qdqisint8allowed" not in code:
            continue  # the default table is x86's
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(code, str(PAGE), "exec"), namespace)
        assert buffer.getvalue().rstrip("\n").splitlines() == expected.rstrip("\n").splitlines()


def _seed_table() -> dict[str, list[int]]:
    (seed,) = SEEDS.glob("000_*")
    rows: dict[str, list[int]] = {}
    lines = seed.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op\t"))
    for line in lines[start + 1 :]:
        if "\t" not in line:
            break
        cells = line.split("\t")
        rows[cells[0]] = [int(c) if c else 0 for c in [*cells[1:], *[""] * (7 - len(cells))]]
    return rows


@pytest.mark.skipif(not any(SEEDS.glob("000_*")), reason="the seed notebook (../shared/seeds) is not here")
def test_int8_allowed_gives_the_seeds_arm64_table() -> None:
    """The page's claim: with session.qdqisint8allowed=1, ORT's own graphs give the seed's table (made on arm64)."""
    seed = _seed_table()
    ours: dict[str, list[int]] = collections.defaultdict(lambda: [0] * 6)
    counts = [_op_counts(onnx.load(MODEL))]
    counts += [
        _op_counts(run_reference(MODEL, lv, config={"session.qdqisint8allowed": "1"}, capture_log=False).model)
        for lv in ("disable_all", "basic", "extended", "layout", "all")
    ]
    for i, c in enumerate(counts):
        for op, n in c.items():
            ours[op][i] = n
    assert {op: row[:6] for op, row in seed.items()} == dict(ours)
