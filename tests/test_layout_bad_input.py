"""Bad input on the LAYOUT code path (transpose optimizer, NhwcTransformer): a clear one-line error or a result,
never a traceback (CLI exit 3) or a crash, at every level; and where ORT accepts the model, qdqopt matches it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

Builder = Callable[[], onnx.ModelProto]


def _model(nodes: list[onnx.NodeProto], x: onnx.ValueInfoProto, inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _x(shape: list[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)


def _transpose(src: str, dst: str, perm: list[int], name: str) -> onnx.NodeProto:
    node = helper.make_node("Transpose", [src], [dst], name=name)
    node.attribute.append(helper.make_attribute("perm", perm, attr_type=onnx.AttributeProto.INTS))
    return node


def _pair(perm1: list[int], perm2: list[int], shape: list[int | str | None] | None = None) -> onnx.ModelProto:
    return _model(
        [
            _transpose("x", "t", perm1, "tp1"),
            helper.make_node("Relu", ["t"], ["r"], name="relu"),
            _transpose("r", "y", perm2, "tp2"),
        ],
        _x(shape if shape is not None else [1, 2, 3, 4]),
    )


def _qconv(shape: list[int | str | None] | None) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(rng.integers(-5, 5, size=(4, 2, 1, 1)).astype(np.int8), "w"),
        numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("QLinearConv", ["xq", "s", "z", "w", "ws", "wz", "s", "z"], ["yq"], name="conv"),
        helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["y"], name="dq"),
    ]
    return _model(nodes, _x(shape), inits)


CASES: dict[str, Builder] = {
    "perm_repeated": lambda: _pair([0, 0, 1, 2], [0, 3, 1, 2]),
    "perm_out_of_range": lambda: _pair([0, 2, 3, 7], [0, 3, 1, 2]),
    "perm_negative": lambda: _pair([0, -1, 1, 2], [0, 3, 1, 2]),
    "perm_rank_mismatch": lambda: _pair([0, 2, 1], [0, 2, 1]),
    "perm_empty": lambda: _pair([], []),
    "symbolic_dims": lambda: _pair([0, 2, 3, 1], [0, 3, 1, 2], ["N", 2, "H", 4]),
    "unknown_dims": lambda: _pair([0, 2, 3, 1], [0, 3, 1, 2], [None, 2, None, 4]),
    "qconv_symbolic_batch": lambda: _qconv(["N", 2, 5, 5]),
    "qconv_rank_2": lambda: _qconv([2, 5]),
    "qconv_rank_mismatch_weight": lambda: _qconv([1, 2, 5]),
}


@pytest.mark.parametrize("level", ["layout", "all"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_never_tracebacks(name: str, level: str, tmp_path: Path) -> None:
    src = tmp_path / f"{name}.onnx"
    onnx.save(CASES[name](), src)
    before = src.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "qdqopt.cli", "diff", str(src), "--level", level],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    if proc.returncode == 2:  # a one-line error that names what is at fault
        errors = [line for line in proc.stderr.splitlines() if line.startswith("qdqopt: error")]
        assert len(errors) == 1, proc.stderr
    assert src.read_bytes() == before
