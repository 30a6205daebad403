"""Benchmark: qdqopt's load, pipeline and save against ORT's session creation, per model and level.

Usage: ``python benchmarks/bench.py [MODEL.onnx ...] [--levels 0,1,2] [--repeat 5]``. Without models it uses the
bundled example and, when the shared corpus is beside the checkout, its largest models. Each of ``--repeat`` rounds
times qdqopt's load, passes and save (the optimized model written to a file as the CLI writes it: ``write_atomic``)
and ORT's session creation with ``optimized_model_filepath`` (its creation alone: the session is destroyed after the
clock stops, as qdqopt's Model is dropped after its save) back to back; it prints the median
wall time of each step, the median of the rounds' ratios (qdqopt's load + passes + save over ORT's session) and
the lowest and highest of them (``rounds``: how far one round strays on a shared machine), and
qdqopt's peak Python memory (tracemalloc) per run; and, for a model measured at EXTENDED and at
LAYOUT or ALL, how much the layout level costs over EXTENDED (qdqopt's load + passes + save, and ORT's). Numbers, not
assertions: run it before and after a change.

``--memory`` measures peak resident memory instead (issue #10: at most 3 times the model file's size above the
imports): for each model, one child process per measurement imports what it needs, warms up on the bundled example,
resets its high-water mark (``/proc/self/clear_refs``), then runs once for the peak RSS (``VmHWM``) above the RSS it
had after the imports, and ``--repeat`` - 1 more times for the median times. The measurements: ``qdqopt`` (load,
passes, ``save_model``, the Model dropped as :func:`qdqopt.api.optimize` drops it, ``SerializeToString``, the bytes
written), ``stream`` (load, passes, ``write_model``, which writes the same bytes one initializer at a time: the CLI's
and ``qdqopt.run(...).save(path)``'s path), ORT
(session creation with ``optimized_model_filepath``). Without models, ``--memory`` generates a quantized ResNet18
(:func:`resnet18_qdq_model`, about 11.8 MB) and a ~100 MB synthetic QDQ model (:func:`synthetic_qdq_model`) in
``--workdir`` (default: a folder in the system's temp directory), and adds the corpus's MobileNetV3.

``--sweep [SIZES]`` runs the synthetic-size sweep instead (:mod:`sweep`): QDQ conv chains of 1k to 64k nodes at
EXTENDED, qdqopt's load + passes + save and ORT's session creation side by side (each in a fresh process), the ratio
and the exponent of a power law fitted to each (issue #10: at most 1.15 for qdqopt).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

import qdqopt
from qdqopt.api import run
from qdqopt.cli import example_model
from qdqopt.graph import Model, load_model, save_model
from qdqopt.levels import Level, parse_level
from qdqopt.manager import run_pipeline
from qdqopt.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
#: the corpus's real MobileNetV3 QDQ model (issue #10's speed target: load + passes + save within 2x ORT's session)
MOBILENETV3 = CORPUS / "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"
MIB = 2**20


def _default_models() -> list[Path]:
    models = [example_model()]
    if CORPUS.is_dir():
        models += sorted(CORPUS.rglob("*.onnx"), key=lambda p: p.stat().st_size, reverse=True)[:3]
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--levels", default=None, help="comma-separated levels (default 0,1,2,99; --memory: 99)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="peak RSS above the imports, qdqopt and ORT")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "qdqopt-bench")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument(
        "--sweep",
        nargs="?",
        const="1000,4000,16000,64000",
        help="synthetic QDQ conv chains of these sizes (default 1000,4000,16000,64000 nodes), qdqopt and ORT",
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.child:
        _child(*args.child)
        return
    if args.sweep:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from sweep import sweep

        sweep(tuple(int(size) for size in args.sweep.split(",")), level=args.levels or "extended")
        return
    if args.memory:
        _memory_main(args.models, args.levels or "99", args.workdir, args.repeat)
        return
    print(f"qdqopt {qdqopt.__version__}, {qdqopt.build()}")
    print(
        f"{'model':<48} {'level':<12} {'load ms':>8} {'passes ms':>9} {'save ms':>8} {'ORT ms':>8} {'ratio':>6} "
        f"{'rounds':>10} {'peak MiB':>8}"
    )
    ratios: list[str] = []
    for path in args.models or _default_models():
        totals: dict[Level, tuple[float, float]] = {}
        for text in (args.levels or "0,1,2,99").split(","):
            level = parse_level(text)
            row = _bench_one(path, level, args.repeat)
            if row:
                print(row[0])
                totals[level] = row[1]
        base = totals.get(Level.EXTENDED)
        for level in (Level.LAYOUT, Level.ALL):
            if base is not None and level in totals:
                ours, ort = totals[level]
                ratios.append(
                    f"{_short(path):<48} {level.short:<8} qdqopt {ours / base[0]:.2f}x EXTENDED "
                    f"({ours * 1e3:.1f} vs {base[0] * 1e3:.1f} ms), ORT {ort / base[1]:.2f}x"
                )
    if ratios:
        print("\nlayout level over EXTENDED (load + passes + save; ORT: session creation)")
        print("\n".join(ratios))


def _short(path: Path) -> str:
    return path.name if len(path.name) <= 48 else "..." + path.name[-45:]


def _bench_one(path: Path, level: Level, repeat: int) -> tuple[str, tuple[float, float]] | None:
    try:
        run_reference(path, level, capture_log=False)
    except Exception:
        return None  # a model ORT rejects is skipped
    disabled = sorted(run(path, level).pipeline.unsupported)  # what qdqopt declines on this model
    # each round times qdqopt's load, passes and save and ORT's session back to back, so that the machine's drift
    # over the run (a shared VM's speed moves by a third within a minute) reaches both alike; each writes its
    # optimized model to a file (qdqopt as its CLI does, ORT to optimized_model_filepath), and ORT's time is the
    # session's creation alone
    rounds = []
    with tempfile.TemporaryDirectory(prefix="qdqopt-bench-") as tmp:
        ours_out, ort_out = Path(tmp) / "qdqopt.onnx", Path(tmp) / "ort.onnx"
        for _ in range(repeat):
            steps = _qdqopt_steps(path, set(disabled), level, ours_out, "atomic")
            session = _ort_session(path, set(), level, ort_out, "ort")["session"]
            ours_out.unlink(missing_ok=True)
            ort_out.unlink(missing_ok=True)
            rounds.append((steps["load"], steps["passes"], steps["save"], session))
    load, passes, save, ort = (statistics.median(r[step] for r in rounds) for step in range(4))
    ratios = [(r[0] + r[1] + r[2]) / r[3] for r in rounds]
    ratio = statistics.median(ratios)
    tracemalloc.start()
    save_model(_run(path, level, disabled))
    peak = tracemalloc.get_traced_memory()[1] / MIB
    tracemalloc.stop()
    total = load + passes + save
    row = (
        f"{_short(path):<48} {level.short:<12} {load * 1e3:8.1f} {passes * 1e3:9.1f} {save * 1e3:8.1f} "
        f"{ort * 1e3:8.1f} {ratio:5.2f}x {min(ratios):5.2f}-{max(ratios):4.2f} {peak:8.1f}"
        + (f"  (declined: {', '.join(disabled)})" if disabled else "")
    )
    return row, (total, ort)


def _run(path: Path, level: Level, disabled: list[str]) -> Model:
    model = load_model(path)
    run_pipeline(model, level, disabled=set(disabled))
    return model


# ------------------------------------------------------------------------------------------------ peak memory
def _memory_main(models: list[Path], levels: str, workdir: Path, repeat: int) -> None:
    if not models:
        workdir.mkdir(parents=True, exist_ok=True)
        models = [
            resnet18_qdq_model(workdir / "resnet18_qdq.onnx"),
            synthetic_qdq_model(workdir / "synthetic_qdq_100mb.onnx"),
        ]
        if MOBILENETV3.is_file():
            models.append(MOBILENETV3)
    print(
        "peak RSS above the imports, MB and times the file's size (qdqopt: load, passes, save_model, "
        "SerializeToString, write; stream: load, passes, write_model; ORT: session with optimized_model_filepath);\n"
        f"median of {repeat} runs for the times\n"
    )
    print(
        f"{'model':<28} {'level':<8} {'file MB':>7} {'qdqopt MB':>16} {'stream MB':>16} {'ORT MB':>16} "
        f"{'load ms':>8} {'passes ms':>9} {'save ms':>8} {'write ms':>8} {'ORT ms':>8}"
    )
    for path in models:
        size = path.stat().st_size / 1e6
        for text in levels.split(","):
            level = parse_level(text)
            disabled = sorted(run(path, level).pipeline.unsupported)
            ours = _measure_in_child("qdqopt", path, level, disabled, repeat)
            stream = _measure_in_child("stream", path, level, disabled, repeat) if _write_model() else None
            ort = _measure_in_child("ort", path, level, [], repeat)
            write = f"{stream['save'] * 1e3:8.1f}" if stream else f"{'-':>8}"
            print(
                f"{_short(path)[:28]:<28} {level.short:<8} {size:7.1f} {_mb(ours, size)} {_mb(stream, size)} "
                f"{_mb(ort, size)} "
                f"{ours['load'] * 1e3:8.1f} {ours['passes'] * 1e3:9.1f} {ours['save'] * 1e3:8.1f} {write} "
                f"{ort['session'] * 1e3:8.1f}" + (f"  (declined: {', '.join(disabled)})" if disabled else "")
            )


def _mb(result: dict[str, float] | None, size: float) -> str:
    if result is None:
        return f"{'-':>16}"
    return f"{result['peak'] / 1e6:7.1f} ({result['peak'] / 1e6 / size:5.2f}x)"


def _write_model(*, atomic: bool = False) -> Callable[[Model, Path], object] | None:
    """``qdqopt.graph.model.write_model`` (``write_atomic`` if ``atomic``) where this checkout has it (the benchmark
    also runs on older ones)."""
    from qdqopt.graph import model as model_module

    return getattr(model_module, "write_atomic" if atomic else "write_model", None)


def _measure_in_child(tool: str, path: Path, level: Level, disabled: list[str], repeat: int) -> dict[str, float]:
    """Run one measurement in a fresh interpreter (peak RSS is per process) and return what it printed."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tool, str(path), str(int(level))]
    cmd += [",".join(disabled), str(repeat)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} on {path} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _status(key: str) -> int:
    """A ``/proc/self/status`` entry in bytes (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> int:
    """Reset the process's RSS high-water mark (Linux: ``clear_refs`` 5) and return the current RSS."""
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
    return _status("VmRSS")


def _child(tool: str, model: str, level_text: str, disabled_text: str, repeat_text: str) -> None:
    """One measurement: warm up on the bundled example, reset the high-water mark, run once for the peak, then
    ``repeat - 1`` more times for the median times."""
    level = parse_level(level_text)
    disabled = set(filter(None, disabled_text.split(",")))
    step = _ort_session if tool == "ort" else _qdqopt_steps
    with tempfile.TemporaryDirectory(prefix="qdqopt-bench-") as tmp:
        out = Path(tmp) / "optimized.onnx"
        step(example_model(), set(), Level.ALL, out, tool)  # lazy imports, schema tables, kernel registries
        out.unlink()
        base = _reset_peak()
        runs = [step(Path(model), disabled, level, out, tool)]
        peak = _status("VmHWM") - base
        for _ in range(int(repeat_text) - 1):
            out.unlink()
            runs.append(step(Path(model), disabled, level, out, tool))
    times = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(json.dumps({**times, "peak": peak, "base": base}))


def _qdqopt_steps(path: Path, disabled: set[str], level: Level, out: Path, tool: str) -> dict[str, float]:
    """load + passes + save into ``out``: ``save_model``'s ModelProto serialised and written, the Model dropped
    first as :func:`qdqopt.api.optimize` drops it (tool ``qdqopt``), ``write_model`` (tool ``stream``), or
    ``write_atomic``, the CLI's way: ``write_model`` into a temporary file renamed over ``out`` (tool ``atomic``)."""
    start = time.perf_counter()
    model = load_model(path)
    loaded = time.perf_counter()
    run_pipeline(model, level, disabled=disabled)
    passed = time.perf_counter()
    writer = _write_model(atomic=tool == "atomic")
    if tool in ("stream", "atomic") and writer is not None:
        writer(model, out)
    else:
        proto = save_model(model)
        del model
        out.write_bytes(proto.SerializeToString())
    saved = time.perf_counter()
    return {"load": loaded - start, "passes": passed - loaded, "save": saved - passed}


def _ort_session(path: Path, disabled: set[str], level: Level, out: Path, tool: str) -> dict[str, float]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level.ort_name)
    so.log_severity_level = 3
    so.optimized_model_filepath = str(out)
    start = time.perf_counter()
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    created = time.perf_counter()
    # the session is destroyed after the clock stops (its thread pool joined, its memory freed: 1.6 ms on
    # MobileNetV3), as qdqopt's Model is dropped after its save is timed: both times are creation alone
    del session
    return {"session": created - start}


# ------------------------------------------------------------------------------------------- generated models
def resnet18_qdq_model(path: Path) -> Path:
    """A ResNet18 (torchvision's layout: BasicBlock, [2, 2, 2, 2], BatchNorm folded into the convs) with random
    weights, quantized by ``onnxruntime.quantization.quantize_static`` (QDQ, u8 activations, s8 per-channel weights):
    about 11.7 MB. Built once in ``path``."""
    if path.exists():
        return path
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(18)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool) -> str:
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.weight"), numpy_helper.from_array(b, f"{name}.bias")])
        pad = k // 2
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.weight", f"{name}.bias"],
                [f"{name}_out"],
                name=name,
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[pad] * 4,
            )
        )
        if not relu:
            return f"{name}_out"
        nodes.append(helper.make_node("Relu", [f"{name}_out"], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"

    x = conv("input", 3, 64, 7, 2, "conv1", relu=True)
    nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        )
    )
    x, cin = "pool", 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"layer{stage}.{block}"
            y = conv(x, cin, cout, 3, stride, f"{name}.conv1", relu=True)
            y = conv(y, cout, cout, 3, 1, f"{name}.conv2", relu=False)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = conv(x, cin, cout, 1, stride, f"{name}.downsample", relu=False)
            nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}_add"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}_add"], [f"{name}_out"], name=f"{name}.relu"))
            x, cin = f"{name}_out", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="avgpool"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    fc_w = (rng.standard_normal((1000, 512)) * np.sqrt(1.0 / 512)).astype(np.float32)
    inits.extend(
        [numpy_helper.from_array(fc_w, "fc.weight"), numpy_helper.from_array(np.zeros(1000, np.float32), "fc.bias")]
    )
    nodes.append(helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["output"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes,
        "resnet18",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 1000])],
        inits,
    )
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    source, tmp = path.with_suffix(".fp32.onnx"), path.with_suffix(".tmp.onnx")
    onnx.save(fp32, str(source))
    # in a fresh interpreter: onnxruntime.quantization imports onnx.reference, which rejects the contrib schemas
    # qdqopt registers with onnx
    subprocess.run([sys.executable, "-c", _QUANTIZE, str(source), str(tmp)], check=True)
    source.unlink()
    tmp.replace(path)
    return path


_QUANTIZE = """
import sys
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

class Reader(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(224)
        self.left = [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(4)]

    def get_next(self):
        return self.left.pop() if self.left else None

quantize_static(sys.argv[1], sys.argv[2], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
"""


def synthetic_qdq_model(path: Path, *, target_mb: float = 100.0) -> Path:
    """A QDQ chain with big int8 weights, about ``target_mb`` MB: 8 Convs (512x512x3x3, per-channel), a global
    average pool, then MatMuls (2048x2048, per-tensor) to the target size, u8 activations between them. Built once
    in ``path``."""
    if path.exists():
        return path
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(100)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def scalar(name: str, value: float | int, dtype: type) -> str:
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def qdq(x: str, name: str) -> str:
        scale, zp = scalar(f"{name}.scale", 0.05, np.float32), scalar(f"{name}.zp", 128, np.uint8)
        nodes.append(helper.make_node("QuantizeLinear", [x, scale, zp], [f"{name}_q"], name=f"{name}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", scale, zp], [f"{name}_dq"], name=f"{name}_DQ"))
        return f"{name}_dq"

    def weight(name: str, shape: tuple[int, ...], per_channel: bool) -> str:
        w = rng.integers(-127, 128, size=shape, dtype=np.int8)
        inits.append(numpy_helper.from_array(w, f"{name}.weight_q"))
        channels = shape[0] if per_channel else None
        scale = np.full(channels or (), 0.01, np.float32)
        inits.append(numpy_helper.from_array(scale, f"{name}.weight_scale"))
        inits.append(numpy_helper.from_array(np.zeros(channels or (), np.int8), f"{name}.weight_zp"))
        dq = helper.make_node(
            "DequantizeLinear",
            [f"{name}.weight_q", f"{name}.weight_scale", f"{name}.weight_zp"],
            [f"{name}.weight"],
            name=f"{name}.weight_DQ",
        )
        if per_channel:
            dq.attribute.append(helper.make_attribute("axis", 0))
        nodes.append(dq)
        return f"{name}.weight"

    x = qdq("input", "input")
    size = 0
    for i in range(8):
        w = weight(f"conv{i}", (512, 512, 3, 3), per_channel=True)
        size += 512 * 512 * 9
        nodes.append(helper.make_node("Conv", [x, w], [f"conv{i}_out"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"conv{i}_out"], [f"conv{i}_relu"], name=f"conv{i}_relu"))
        x = qdq(f"conv{i}_relu", f"conv{i}_act")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    x = qdq("gap", "gap_act")
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    x, width, i = qdq("flat", "flat_act"), 512, 0
    while size < target_mb * 1e6 - 2048 * 2048 / 2:
        w = weight(f"fc{i}", (width, 2048), per_channel=False)
        size += width * 2048
        nodes.append(helper.make_node("MatMul", [x, w], [f"fc{i}_out"], name=f"fc{i}"))
        x, width, i = qdq(f"fc{i}_out", f"fc{i}_act"), 2048, i + 1
    graph = helper.make_graph(
        nodes,
        "synthetic_qdq",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 512, 8, 8])],
        [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    onnx.save(proto, str(tmp))
    tmp.replace(path)
    return path


if __name__ == "__main__":
    main()
