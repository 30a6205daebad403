"""The synthetic-size sweep of ``benchmarks/bench.py --sweep``: QDQ conv chains of 1k to 64k nodes, qdqopt's load +
passes + save against ORT's session creation (``optimized_model_filepath``), each in a fresh child process, and the
exponent of a power law fitted to each (time ~ nodes^k; issue #10 asks k <= 1.15 for qdqopt).

A chain block is six nodes, as ``quantize_static`` writes a quantized Conv + Relu: DequantizeLinear of the activation,
of the per-channel int8 weight and of the int32 bias, Conv, Relu, QuantizeLinear, with one shared activation scale
and zero point (so those initializers have thousands of consumers, as in real models).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["conv_chain", "fit_exponent", "sweep"]

SIZES = (1000, 4000, 16000, 64000)


def conv_chain(nodes: int, channels: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A QDQ Conv + Relu chain of about ``nodes`` nodes (opset 17, u8 activations, s8 per-channel weights)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array(0.05, np.float32), "act_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "act_zp"),
    ]
    graph_nodes = [helper.make_node("QuantizeLinear", ["x", "act_scale", "act_zp"], ["q0"], name="q_in")]
    current = "q0"
    for i in range((nodes - 2) // 6):
        weight_scale = rng.random(channels).astype(np.float32) * 0.01 + 0.001
        inits += [
            numpy_helper.from_array(rng.integers(-127, 127, (channels, channels, 3, 3), dtype=np.int8), f"w{i}"),
            numpy_helper.from_array(weight_scale, f"ws{i}"),
            numpy_helper.from_array(np.zeros(channels, np.int8), f"wz{i}"),
            numpy_helper.from_array(rng.integers(-100, 100, channels, dtype=np.int32), f"b{i}"),
            numpy_helper.from_array((weight_scale * np.float32(0.05)).astype(np.float32), f"bs{i}"),
        ]
        graph_nodes += [
            helper.make_node("DequantizeLinear", [current, "act_scale", "act_zp"], [f"a{i}"], name=f"dqa{i}"),
            helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wf{i}"], name=f"dqw{i}", axis=0),
            helper.make_node("DequantizeLinear", [f"b{i}", f"bs{i}"], [f"bf{i}"], name=f"dqb{i}", axis=0),
            helper.make_node("Conv", [f"a{i}", f"wf{i}", f"bf{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("QuantizeLinear", [f"r{i}", "act_scale", "act_zp"], [f"q{i + 1}"], name=f"q{i}"),
        ]
        current = f"q{i + 1}"
    graph_nodes.append(helper.make_node("DequantizeLinear", [current, "act_scale", "act_zp"], ["y"], name="dq_out"))
    shape = [1, channels, 8, 8]
    graph = helper.make_graph(
        graph_nodes,
        "conv_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def fit_exponent(nodes: list[int], seconds: list[float]) -> float:
    """k of the least-squares fit of log(seconds) = k log(nodes) + c."""
    return float(np.polyfit(np.log(nodes), np.log(seconds), 1)[0])


def _time_child(which: str, path: Path, level: str) -> float:
    """Wall time of one run in a fresh child process (qdqopt: load + passes + the optimized model written as the CLI
    writes it; ORT: session creation, which writes it to ``optimized_model_filepath``)."""
    code = (
        "import json, os, sys, tempfile, time, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from pathlib import Path\n"
        "from qdqopt.graph import load_model\n"
        "from qdqopt.graph.model import write_atomic\n"
        "from qdqopt.levels import parse_level\n"
        "from qdqopt.manager import run_pipeline\n"
        "import onnxruntime as ort\n"
        "which, path, level = sys.argv[1:4]\n"
        "lvl = parse_level(level)\n"
        "tmp = tempfile.mkdtemp(prefix='qdqopt-sweep-')\n"
        "out = os.path.join(tmp, 'optimized.onnx')\n"
        "so = ort.SessionOptions()\n"
        "so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, lvl.ort_name)\n"
        "so.log_severity_level = 3\n"
        "so.optimized_model_filepath = out\n"
        "start = time.perf_counter()\n"
        "if which == 'qdqopt':\n"
        "    model = load_model(path)\n"
        "    run_pipeline(model, lvl)\n"
        "    write_atomic(model, Path(out))\n"
        "else:\n"
        "    session = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])\n"
        "print(json.dumps(time.perf_counter() - start))\n"
        "os.unlink(out)\n"
        "os.rmdir(tmp)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, which, str(path), level], capture_output=True, text=True, check=True
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1]))


def sweep(sizes: tuple[int, ...] = SIZES, level: str = "extended", repeat: int = 1) -> None:
    """Print qdqopt and ORT side by side per size, the ratio, and both fitted exponents."""
    print(f"synthetic QDQ conv chains at {level} (wall time, fresh process each, best of {repeat})")
    print(f"{'nodes':>7} {'qdqopt s':>9} {'ORT s':>8} {'ratio':>6}")
    counts: list[int] = []
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            model = conv_chain(size)
            path = Path(folder) / f"chain_{size}.onnx"
            onnx.save(model, path)
            mine = min(_time_child("qdqopt", path, level) for _ in range(repeat))
            ort = min(_time_child("ort", path, level) for _ in range(repeat))
            counts.append(len(model.graph.node))
            ours.append(mine)
            theirs.append(ort)
            print(f"{counts[-1]:>7} {mine:9.2f} {ort:8.2f} {mine / ort:6.1f}", flush=True)
    if len(counts) > 1:
        print(
            f"fitted exponent ({counts[0]} to {counts[-1]} nodes): qdqopt {fit_exponent(counts, ours):.2f}, "
            f"ORT {fit_exponent(counts, theirs):.2f}"
        )


if __name__ == "__main__":
    start = time.perf_counter()
    sweep(tuple(int(s) for s in sys.argv[1].split(",")) if len(sys.argv) > 1 else SIZES)
    print(f"({time.perf_counter() - start:.0f} s)")
