"""Real ONNX Runtime as the reference: its optimized model and its transformer log for one session.

ORT writes the graph it optimized to ``SessionOptions.optimized_model_filepath``; at log severity INFO it prints
``GraphTransformer <name> modified: <0|1>`` for every transformer it applies, in order. We create a CPU session with
the same level, session config entries and ``disabled_optimizers`` as the qdqopt run, read the file back and parse
the log (captured by redirecting file descriptor 2 around session creation, since ORT's C++ logger writes there).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from qdqopt.errors import ReferenceError
from qdqopt.levels import Level, parse_level

__all__ = ["ReferenceRun", "TraceLine", "check_accepted", "run_reference"]

_LOG_LINE = re.compile(r"GraphTransformer (\S+) modified: ([01])")
_FD_LOCK = threading.Lock()


@dataclass(frozen=True)
class TraceLine:
    """One ``GraphTransformer <name> modified: <0|1>`` line."""

    name: str
    modified: bool

    def __str__(self) -> str:
        return f"GraphTransformer {self.name} modified: {int(self.modified)}"


@dataclass
class ReferenceRun:
    """What ORT produced: the saved model and the transformer lines it logged."""

    model: onnx.ModelProto
    trace: list[TraceLine] = field(default_factory=list)
    log: str = ""


_ORT_ERROR = re.compile(r"\[ONNXRuntimeError\] : \d+ : (\w+) : ")


def _ort_message(exc: BaseException) -> str:
    """The useful tail of an ORT exception: the last '[ONNXRuntimeError] : N : CODE : message', first line."""
    text = str(exc).strip()
    if not text:
        return exc.__class__.__name__
    parts = _ORT_ERROR.split(text)
    if len(parts) >= 3:
        code, message = parts[-2], parts[-1].strip()
        # drop "Load model from <path> failed:<source location> <signature>" prefixes
        return f"{code}: {message.splitlines()[0]}"
    return text.splitlines()[0]


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    out: list[str] = []
    with _FD_LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            out.append(sink.read().decode("utf-8", "replace"))


def run_reference(
    model: str | os.PathLike[str] | onnx.ModelProto,
    level: Level | int | str = Level.ALL,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Sequence[str] = (),
    capture_log: bool = True,
) -> ReferenceRun:
    """Create an ORT CPU session and return its optimized model (and transformer log)."""
    import onnxruntime as ort

    lvl = parse_level(level)
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, lvl.ort_name)
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    if capture_log:
        so.log_severity_level = 1
    else:
        so.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="qdqopt-ref-") as tmp:
        out_path = Path(tmp) / "optimized.onnx"
        so.optimized_model_filepath = str(out_path)
        source: str | bytes
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
        kwargs: dict[str, object] = {"providers": ["CPUExecutionProvider"]}
        if disabled:
            kwargs["disabled_optimizers"] = list(disabled)
        text = ""
        try:
            if capture_log:
                with _captured_stderr() as captured:
                    ort.InferenceSession(source, so, **kwargs)
                text = captured[0] if captured else ""
            else:
                ort.InferenceSession(source, so, **kwargs)
        except Exception as exc:
            raise ReferenceError(f"ONNX Runtime rejected the model: {_ort_message(exc)}") from exc
        if not out_path.exists():
            raise ReferenceError("ONNX Runtime did not write an optimized model")
        saved = onnx.load(str(out_path), load_external_data=False)
    trace = [TraceLine(name, flag == "1") for name, flag in _LOG_LINE.findall(text)]
    return ReferenceRun(model=saved, trace=trace, log=text)


def check_accepted(model: str | os.PathLike[str] | onnx.ModelProto) -> None:
    """Raise :class:`ReferenceError` if ORT's CPU EP cannot create a session for the model at all."""
    run_reference(model, Level.DISABLE_ALL, config={"session.disable_quant_qdq": "1"}, capture_log=False)
