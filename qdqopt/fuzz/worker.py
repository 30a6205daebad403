"""The fuzzer's child process: runs ORT and qdqopt on one model at a time and reports what it saw.

The parent (:mod:`qdqopt.fuzz.runner`) starts ``python -m qdqopt.fuzz.worker`` and writes one JSON task per line on
its stdin; the worker answers with JSON lines on stdout: ``{"stage": ...}`` before each step that may kill the
process (an ORT session, a run of a model, a qdqopt run, which calls ORT's kernels too), then one ``{"result":
...}`` per task. ORT's C++ can abort; when the worker dies, the last stage it announced names the culprit, and the
parent starts a new worker.

A task: ``{"path": model file, "pairs": [[level, config name], ...], "configs": {name: {key: value}},
"ours_disabled": [...], "drift": bool, "qdqopt_only": bool}`` (``qdqopt_only``: after ORT crashed on a pair, qdqopt
alone, :func:`qdqopt_alone`). ``ours_disabled`` disables passes on qdqopt's side only (the planted
differences of the fuzzer's own tests). The result lists one outcome per pair (see :func:`check_pair`) and, with
``drift``, ORT's findings against its own ORT_DISABLE_ALL results.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

__all__ = ["check_pair", "main", "make_feeds"]


def _say(obj: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


#: the (level, config name) being checked, named in every stage message
_PAIR: list[str] = ["-", "-"]


def _stage(text: str) -> None:
    _say({"stage": text, "pair": _PAIR})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0][:300]}" if text else exc.__class__.__name__


def make_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: floats around 0 (scales fed as inputs: positive), integers in range,
    booleans; a symbolic dim is 1."""
    from qdqopt.diff import random_inputs

    return random_inputs(model, seed, spread=2.0, positive_scales=True)


def _run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    from qdqopt.diff import run_numbers

    return run_numbers(model, feeds)


_NUMBER = re.compile(r"(?<![A-Za-z])-?\d+(\.\d+)?(e-?\d+)?|_\d+")


def normalize(text: str) -> str:
    """A message with numbers and generated name counters blanked (``conv_12`` -> ``conv#``): what groups findings
    into classes (op types and pass names stay)."""
    return _NUMBER.sub("#", text)[:200]


def check_pair(
    model: onnx.ModelProto,
    level: str,
    config: Mapping[str, str],
    ours_disabled: Sequence[str] = (),
    *,
    want_ref: bool = False,
) -> tuple[dict[str, Any], onnx.ModelProto | None]:
    """qdqopt against ORT for one level and config. The outcome's ``kind``:

    * ``same``: X holds and the transformer lines match; ``trace``: X holds, the lines differ;
    * ``diff-S`` / ``diff-X`` (S holds) with ``diff-N`` noted when the outputs differ too;
    * ``lacks``: a difference, and ORT's log shows a pass qdqopt does not implement modifying the model;
    * ``both-reject``: ORT rejects the model and qdqopt fails with one of its errors (what it must do);
    * ``qdqopt-accepts``: ORT rejects it, qdqopt optimizes it; ``qdqopt-fails``: the reverse;
    * ``qdqopt-internal``: qdqopt raised something other than its own error (a bug: a traceback for the user);
    * ``ort-nondeterministic``: a difference at X only, and a second ORT session differs from the first there too.
    """
    from qdqopt.api import run
    from qdqopt.diff import compare
    from qdqopt.errors import QdqoptError
    from qdqopt.reference import run_reference

    _stage(f"ort {level}")
    ref = ort_error = None
    try:
        ref = run_reference(model, level, config=dict(config))
    except QdqoptError as exc:
        ort_error = str(exc)
    _stage(f"qdqopt {level}")
    ours = ours_error = None
    internal = False
    try:
        ours = run(model, level, config=dict(config), disabled=list(ours_disabled))
        _ = ours.model
    except QdqoptError as exc:
        ours_error = str(exc)
    except Exception as exc:
        ours_error, internal = _first_line(exc), True
    if internal:
        return {"kind": "qdqopt-internal", "detail": ours_error, "ort": ort_error or "accepted"}, None
    if ort_error is not None:
        if ours_error is not None:
            return {"kind": "both-reject", "detail": ort_error, "ours": ours_error}, None
        return {"kind": "qdqopt-accepts", "detail": ort_error}, None
    assert ref is not None
    if ours_error is not None:
        return {"kind": "qdqopt-fails", "detail": ours_error}, ref.model if want_ref else None
    assert ours is not None
    _stage(f"compare {level}")
    report = compare(ours.model, ref.model, tiers=("N", "S", "X"))
    ours_lines = ours.pipeline.ort_lines()
    ort_lines = [str(t) for t in ref.trace]
    first = [str(d) for d in report.differences[:3]]
    modified = {t.name for t in ref.trace if t.modified}
    lacking = sorted(modified & set(ours.unimplemented) | (modified & set(ours.unsupported)))
    out: dict[str, Any]
    if report.holds("X"):
        if ours_lines == ort_lines:
            out = {"kind": "same"}
        else:
            at = next((i for i, (a, b) in enumerate(zip(ours_lines, ort_lines, strict=False)) if a != b), None)
            line = f"ours {ours_lines[at]!r} vs ORT {ort_lines[at]!r}" if at is not None else "lengths differ"
            out = {"kind": "trace", "detail": line}
    else:
        kind = "diff-X" if report.holds("S") else "diff-S"
        out = {"kind": kind, "detail": "; ".join(first), "n_differs": report.verdict.get("N") is False}
        if lacking:
            out = {"kind": "lacks", "detail": ", ".join(lacking), "then": kind}
        elif kind == "diff-X":
            # ORT itself is not deterministic everywhere (NchwcTransformer names its final ReorderOutputs in the
            # order of a hash map keyed by pointers): a second session that differs from the first at X is an ORT
            # finding, not a difference of qdqopt's
            for _ in range(3):  # the order is random: in 8 sessions of one model one order came 6 times
                _stage(f"ort again {level}")
                again = run_reference(model, level, config=dict(config))
                itself = compare(again.model, ref.model, tiers=("S", "X"))
                if not itself.holds("X"):
                    detail = "; ".join(str(d) for d in itself.differences[:2])
                    out = {"kind": "ort-nondeterministic", "detail": detail, "ours": out["detail"]}
                    break
    return out, ref.model if want_ref else None


def _drift(
    model: onnx.ModelProto, optimized: onnx.ModelProto, expected: list[np.ndarray], level: str
) -> dict[str, Any] | None:
    """ORT's own output run against ORT_DISABLE_ALL's results: a failure to run, or outputs further apart than the
    quantization steps on the way explain (``1 + number of Q nodes`` steps of the largest scale, in floats; that many
    integer steps for a quantized output)."""
    feeds = make_feeds(model)
    _stage(f"ort-run-own {level}")
    try:
        got = _run(optimized, feeds)
    except Exception as exc:
        return {"kind": "ort-own-output", "detail": _first_line(exc)}
    n_q = sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear") + 1
    step = max(_scale_values(model, feeds), default=1.0)
    for i, (raw_a, raw_b) in enumerate(zip(got, expected, strict=False)):
        name = model.graph.output[i].name
        a, b = _as_numbers(raw_a, model.graph.output[i]), _as_numbers(raw_b, model.graph.output[i])
        if a.shape != b.shape:
            return {"kind": "ort-drift", "detail": f"output {name}: shape {list(a.shape)} vs {list(b.shape)}"}
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            x, y = a.astype(np.float64), b.astype(np.float64)
            if (np.isnan(x) != np.isnan(y)).any():
                return {"kind": "ort-drift", "detail": f"output {name}: NaN where DISABLE_ALL has none (or back)"}
            finite = np.isfinite(x) & np.isfinite(y)
            err = float(np.max(np.abs(x[finite] - y[finite]), initial=0.0))
            span = float(np.max(np.abs(y[finite]), initial=0.0))
            if err > n_q * step and err > 1e-2 * max(span, 1.0):
                return {
                    "kind": "ort-drift",
                    "detail": f"output {name}: max |diff| {err:.4g} > {n_q} steps of {step:.3g}",
                }
        elif a.dtype.kind in "iu":
            # in the output Q's own steps: the float error allowed above, divided by its scale
            out_scale = _output_scale(model, name, feeds)
            allowed = max(n_q, math.ceil(n_q * step / out_scale)) if out_scale else n_q
            err = float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)), initial=0))
            if err > allowed:
                return {"kind": "ort-drift", "detail": f"output {name}: {err:.0f} integer steps apart (> {allowed})"}
    return None


def _output_scale(model: onnx.ModelProto, output: str, feeds: Mapping[str, np.ndarray]) -> float | None:
    """The smallest scale of the QuantizeLinear producing a graph output (its integer steps), if known."""
    producer = next((n for n in model.graph.node if output in n.output), None)
    if producer is None or producer.op_type != "QuantizeLinear" or len(producer.input) < 2:
        return None
    found = _scale_values(model, feeds, only=producer.input[1], smallest=True)
    return found[0] if found and found[0] > 0 else None


def _scale_values(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], only: str | None = None, smallest: bool = False
) -> list[float]:
    """The largest (``smallest``: smallest) magnitude of every Q/DQ scale of the main graph (or of the value
    ``only``), wherever it comes from: an initializer, a Constant node, or a graph input (as fed)."""
    values: dict[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            values[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    values.update(feeds)
    found = []
    pick = np.min if smallest else np.max
    names = (
        [only]
        if only is not None
        else [
            n.input[1]
            for n in model.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1
        ]
    )
    for name in names:
        value = values.get(name)
        if value is not None and value.size and value.dtype.kind == "f":
            found.append(float(pick(np.abs(value.astype(np.float64)))))
    return found


def _as_numbers(value: np.ndarray, output: onnx.ValueInfoProto) -> np.ndarray:
    """An output as ORT's Python binding hands it over, as numbers: float8 outputs come as their raw bytes (uint8),
    which are decoded (two NaNs of another sign bit are no drift)."""
    elem = output.type.tensor_type.elem_type
    if elem in _FLOAT8 and value.dtype == np.uint8:
        return value.view(onnx.helper.tensor_dtype_to_np_dtype(elem)).astype(np.float32)
    return value


_FLOAT8 = (
    onnx.TensorProto.FLOAT8E4M3FN,
    onnx.TensorProto.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2,
    onnx.TensorProto.FLOAT8E5M2FNUZ,
)


def qdqopt_alone(
    model: onnx.ModelProto, level: str, config: Mapping[str, str], ours_disabled: Sequence[str] = ()
) -> dict[str, Any]:
    """qdqopt on a model ORT crashed on (the session's process died): it must say so, or at least fail with one of
    its errors, not optimize the model nor raise something else. ``both-reject`` (what it must do),
    ``qdqopt-accepts`` or ``qdqopt-internal``."""
    from qdqopt.api import run
    from qdqopt.errors import QdqoptError

    _stage(f"qdqopt {level}")
    try:
        _ = run(model, level, config=dict(config), disabled=list(ours_disabled)).model
    except QdqoptError as exc:
        return {"kind": "both-reject", "detail": "ORT crashed", "ours": str(exc)}
    except Exception as exc:
        return {"kind": "qdqopt-internal", "detail": _first_line(exc), "ort": "crashed"}
    return {"kind": "qdqopt-accepts", "detail": "ORT's process crashed creating the session; qdqopt optimized it"}


def handle(task: Mapping[str, Any]) -> dict[str, Any]:
    model = onnx.load(task["path"], load_external_data=False)
    configs: Mapping[str, Mapping[str, str]] = task["configs"]
    if task.get("qdqopt_only"):
        alone: list[dict[str, Any]] = []
        for level, cname in task["pairs"]:
            _PAIR[:] = [level, cname]
            out = qdqopt_alone(model, level, configs[cname], task.get("ours_disabled", ()))
            alone.append({**out, "level": level, "config": cname})
        return {"outcomes": alone}
    plant = os.environ.get("QDQOPT_FUZZ_PLANT_CRASH")
    outcomes: list[dict[str, Any]] = []
    expected: list[np.ndarray] | None = None
    if task.get("drift"):
        _stage("ort-run-input")
        try:
            expected = _run(model, make_feeds(model))
        except Exception:
            expected = None
    for level, cname in task["pairs"]:
        _PAIR[:] = [level, cname]
        if plant and any(n.op_type == plant for n in model.graph.node):
            _stage(f"qdqopt {level}")
            os.abort()  # the fuzzer's own test: a child that dies must be reported, not propagated
        out, ref = check_pair(model, level, configs[cname], task.get("ours_disabled", ()), want_ref=True)
        out.update(level=level, config=cname)
        outcomes.append(out)
        if expected is not None and out["kind"] in ("both-reject", "qdqopt-accepts"):
            # ORT ran the model at DISABLE_ALL but cannot create a session at this level: it fails on its own rewrite
            outcomes.append({"kind": "ort-level-reject", "detail": out["detail"], "level": level, "config": cname})
        if expected is not None and ref is not None and level != "disable_all":
            found = _drift(model, ref, expected, level)
            if found is not None:
                found.update(level=level, config=cname)
                outcomes.append(found)
    return {"outcomes": outcomes}


def main() -> int:
    import resource
    import warnings

    warnings.simplefilter("ignore")
    # an abort in ORT's C++ ends this child (the parent reports it): no core file to write
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for line in sys.stdin:
        if not line.strip():
            continue
        task = json.loads(line)
        try:
            result = handle(task)
        except Exception as exc:  # the worker's own failure: reported as such, the worker carries on
            result = {"outcomes": [{"kind": "worker-error", "detail": _first_line(exc), "level": "-", "config": "-"}]}
        _say({"result": result, "id": task.get("id")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
