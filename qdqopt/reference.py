"""Real ONNX Runtime as the reference: its optimized model and its transformer log for one session.

ORT writes the graph it optimized to ``SessionOptions.optimized_model_filepath``; at log severity INFO it prints
``GraphTransformer <name> modified: <0|1>`` for every transformer it applies, in order. We create a CPU session with
the same level, session config entries and ``disabled_optimizers`` as the qdqopt run, read the file back and parse
the log (captured by redirecting file descriptor 2 around session creation, since ORT's C++ logger writes there).

The log is captured at VERBOSE (``log_severity_level=0``), which holds the INFO lines too. Each line
``<date> <time> [<S>:onnxruntime:<logid>, <file>:<line> <function>] <message>`` becomes a :class:`LogRecord` (a
message continued on further lines, as an exception's text, is joined to its record). The **optimizer lines**
(:func:`optimizer_lines`, what ``qdqopt trace --ort --verbose`` compares with qdqopt's events) are the records:

* of ``graph_transformer_mgr.cc`` (``GraphTransformerManager::ApplyTransformers``): every message, i.e. ``No graph
  transformers registered for level L.``, ``Applying N graph transformer(s) for level L for up to S step(s).``,
  ``Graph transformer step s of S for level L started.`` / ``... completed. graph_changed: 0|1.``, ``Skipping graph
  transformer X on step s because it should only apply once.``, ``Applying graph transformer X on step s.``,
  ``Stopping graph transformer iteration for level L after step s because the graph was not modified.``;
* of ``graph_transformer.cc``: ``GraphTransformer X modified: 0|1 with status: OK``;
* of ``inference_session.cc`` in ``TransformGraph``: ``Running graph optimizations in loop N time/s (Graph
  Optimizations Loop Level : L)``;
* of ``graph.cc`` in ``CleanUnusedInitializersAndNodeArgs`` at INFO: Resolve's ``Removing initializer '...'. It is no
  longer used by any node.`` and ``Removing NodeArg '...'. It is no longer used by any node.``, in ORT's order;
* of ``selector_action_transformer.cc``: ``Matched <op type>`` (one per node unit a selector-action transformer
  matched: QDQSelectorActionTransformer, ConvActivationFusion, ConvAddActivationFusion, MatMulNBitsFusion).

Left out: session setup and teardown (session options, thread pools, ``Initializing session.``, node placements,
session state, allocation planner, saving initializers, the optimized-model warning), the partitioner's AOT-inlining
note, everything logged while the model is loaded (the WARNING ``Removing initializer '...'. It is not used by any
node and should be removed from the model.`` of the first Resolve), Resolve's shape-merge warnings (``Error merging
shape info for output ...``), and the diagnostics of individual transformers other than the selectors' ``Matched``
(ConstantSharing's ``Total shared scalar initializer count``, ReshapeFusion's ``Fused reshape node``,
QDQPropagationTransformer's ``Inserted Q/DQ pair ...``, AttentionFusion's ``fusion skipped``, ConstantFolding's
exceptions): :func:`transformer_diagnostics` lists those.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from qdqopt.errors import ReferenceError
from qdqopt.levels import Level, parse_level

if TYPE_CHECKING:
    from qdqopt.graph.model import ModelSource

_Config = Mapping[str, str] | None

__all__ = [
    "LogRecord",
    "ReferenceRun",
    "TraceLine",
    "check_accepted",
    "is_optimizer_line",
    "optimizer_lines",
    "parse_log",
    "run_reference",
    "transformer_diagnostics",
]

_LOG_LINE = re.compile(r"GraphTransformer (\S+) modified: ([01])")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[([VIWEF]):onnxruntime:[^,\]]*, ([^\s:\]]+):(\d+) ([^\]]*)\] ?(.*)$"
)
_MODIFIED = re.compile(r"^GraphTransformer \S+ modified: [01] with status: ")
_FD_LOCK = threading.Lock()


@dataclass(frozen=True)
class TraceLine:
    """One ``GraphTransformer <name> modified: <0|1>`` line."""

    name: str
    modified: bool

    def __str__(self) -> str:
        return f"GraphTransformer {self.name} modified: {int(self.modified)}"


@dataclass(frozen=True)
class LogRecord:
    """One message of ORT's log: severity letter (``V``, ``I``, ``W``, ``E``, ``F``), source file, line, function and
    message (continuation lines joined with newlines; colour codes stripped)."""

    severity: str
    file: str
    line: int
    function: str
    message: str

    def __str__(self) -> str:
        return f"[{self.severity}] {self.file}:{self.line} {self.function}: {self.message}"


def parse_log(text: str) -> list[LogRecord]:
    """Every message of an ORT log, in order (see the module doc for the line format)."""
    records: list[LogRecord] = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        found = _RECORD.match(line)
        if found is not None:
            severity, file, number, function, message = found.groups()
            records.append(LogRecord(severity, file, int(number), function, message))
        elif records and line:
            last = records[-1]
            records[-1] = LogRecord(last.severity, last.file, last.line, last.function, f"{last.message}\n{line}")
    return records


def is_optimizer_line(record: LogRecord) -> bool:
    """Whether ``record`` is one of the optimizer lines qdqopt's events stand for (the filter is in the module doc)."""
    if record.file == "graph_transformer_mgr.cc":
        return True
    if record.file == "graph_transformer.cc":
        return _MODIFIED.match(record.message) is not None
    if record.file == "inference_session.cc":
        return record.function == "TransformGraph" and record.message.startswith("Running graph optimizations in loop ")
    if record.file == "graph.cc":
        return record.function == "CleanUnusedInitializersAndNodeArgs" and record.severity == "I"
    if record.file == "selector_action_transformer.cc":
        return record.message.startswith("Matched ")
    return False


def optimizer_lines(records: Sequence[LogRecord]) -> list[str]:
    """The messages of the optimizer lines, in order: what qdqopt's events print (``PipelineResult.verbose_lines``)."""
    return [r.message for r in records if is_optimizer_line(r)]


#: source files of the session, the partitioner, the allocation planner and the session state (left out)
_SESSION_FILES = frozenset(
    {
        "inference_session.cc",
        "session_state.cc",
        "session_state_utils.cc",
        "allocation_planner.cc",
        "graph_partitioner.cc",
        "graph.cc",
    }
)


def transformer_diagnostics(records: Sequence[LogRecord]) -> list[LogRecord]:
    """What individual transformers logged besides the optimizer lines (ConstantSharing's counts, ReshapeFusion's and
    QDQPropagationTransformer's notes, AttentionFusion's skips, ConstantFolding's exceptions...): not compared."""
    return [r for r in records if not is_optimizer_line(r) and r.file not in _SESSION_FILES]


@dataclass
class ReferenceRun:
    """What ORT produced: the saved model, the transformer lines it logged, and its whole log (VERBOSE)."""

    model: onnx.ModelProto
    trace: list[TraceLine] = field(default_factory=list)
    log: str = ""
    #: every message of the log, parsed
    records: list[LogRecord] = field(default_factory=list)

    @property
    def verbose(self) -> list[str]:
        """ORT's optimizer lines (see the module doc), in order."""
        return optimizer_lines(self.records)

    @property
    def diagnostics(self) -> list[LogRecord]:
        """The transformers' own lines left out of :attr:`verbose` (:func:`transformer_diagnostics`)."""
        return transformer_diagnostics(self.records)


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
    model: ModelSource,
    level: Level | int | str = Level.ALL,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Sequence[str] = (),
    capture_log: bool = True,
) -> ReferenceRun:
    """Create an ORT CPU session and return its optimized model (and its log, captured at VERBOSE).

    After :func:`sessions_in_child` (the CLI's setting), the session is created in a forked child: ORT's C++ can
    crash on a model it accepted at DISABLE_ALL (NchwcTransformer on an unresolved graph), and that must end the
    child only, reported as a :class:`ReferenceError`."""
    lvl = parse_level(level)
    run = functools.partial(_run_reference, model, lvl, config, disabled, capture_log)
    return _in_child(run, lvl) if _SETTINGS["in_child"] else run()


#: whether :func:`run_reference` creates its sessions in a forked child (:func:`sessions_in_child`)
_SETTINGS = {"in_child": False}


def in_child_now() -> bool:
    """Whether :func:`run_reference` creates its sessions in a forked child now."""
    return _SETTINGS["in_child"]


def sessions_in_child(on: bool = True) -> None:
    """Have :func:`run_reference` create every ORT session in a forked child process from now on."""
    _SETTINGS["in_child"] = on and hasattr(os, "fork")


def _in_child(run: Callable[[], ReferenceRun], lvl: Level) -> ReferenceRun:
    """``run()`` in a forked child: its run, or the ReferenceError it raised, passed back through a pickle."""
    import pickle

    with tempfile.TemporaryDirectory(prefix="qdqopt-child-") as tmp:
        result = Path(tmp) / "result.pickle"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: its answer (the run, or ORT's refusal) in a file, then out without cleanup
            code = 0
            tempfile.tempdir = tmp  # what the child leaves when ORT crashes it goes with the parent's folder
            try:
                try:
                    answer: object = run()
                except ReferenceError as exc:
                    answer = exc
                result.write_bytes(pickle.dumps(answer))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            raise ReferenceError(
                f"ONNX Runtime crashed (signal {os.WTERMSIG(status)}) creating a session at {lvl.ort_name}"
            )
        if not result.exists():
            raise ReferenceError(f"ONNX Runtime's session at {lvl.ort_name} failed in its child process")
        answer = pickle.loads(result.read_bytes())
    if isinstance(answer, ReferenceError):
        raise answer
    assert isinstance(answer, ReferenceRun)
    return answer


def _run_reference(model: ModelSource, lvl: Level, config: _Config, disabled: Sequence[str], log: bool) -> ReferenceRun:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, lvl.ort_name)
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    if log:
        so.log_severity_level = 0
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
            if log:
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
    return ReferenceRun(model=saved, trace=trace, log=text, records=parse_log(text))


def check_accepted(model: ModelSource) -> None:
    """Raise :class:`ReferenceError` if ORT's CPU EP cannot create a session for the model at all."""
    run_reference(model, Level.DISABLE_ALL, config={"session.disable_quant_qdq": "1"}, capture_log=False)


#: :func:`check_accepted` as a script that imports onnxruntime alone (importing qdqopt would take seconds more): it
#: prints ORT's exception text after the marker line and exits 3 when ORT rejects the model, exits 4 when ORT wrote
#: no optimized model
_CHILD_MARKER = "--- qdqopt: ORT rejected the model ---"
_CHILD_CHECK = f"""
import os, sys, tempfile
import onnxruntime as ort
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
so.add_session_config_entry("session.disable_quant_qdq", "1")
so.log_severity_level = 3
with tempfile.TemporaryDirectory(prefix="qdqopt-ref-", dir=sys.argv[2]) as tmp:
    so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
    try:
        ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        print({_CHILD_MARKER!r}, file=sys.stderr)
        print(str(exc), file=sys.stderr)
        sys.exit(3)
    if not os.path.exists(so.optimized_model_filepath):
        sys.exit(4)
"""


def check_accepted_in_child(path: str | os.PathLike[str]) -> None:
    """:func:`check_accepted` in a child process: ORT's C++ can crash on a model it should reject (a signal then ends
    only the child, and is reported as ORT's crash), and the memory the session takes goes with the child."""
    with tempfile.TemporaryDirectory(prefix="qdqopt-child-") as tmp:  # the child's files, kept if ORT crashes it
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD_CHECK, os.fspath(path), tmp],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
    if proc.returncode == 0:
        return
    if proc.returncode < 0:
        raise ReferenceError(f"ONNX Runtime crashed (signal {-proc.returncode}) creating a session for {path}")
    if proc.returncode == 3 and _CHILD_MARKER in proc.stderr:
        text = proc.stderr.split(_CHILD_MARKER, 1)[1]
        raise ReferenceError(f"ONNX Runtime rejected the model: {_ort_message(RuntimeError(text))}")
    if proc.returncode == 4:
        raise ReferenceError("ONNX Runtime did not write an optimized model")
    lines = proc.stderr.strip().splitlines()
    raise ReferenceError(f"ORT's check failed: {lines[-1:]}")
