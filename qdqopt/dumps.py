"""Stop and dump: the model after every pass application that modified it, and runs that stop after a chosen one.

``qdqopt optimize IN -o OUT --dump-dir DIR`` writes, beside the output, one model per application that modified the
graph, in the order they ran::

    DIR/00_pre_1_EnsureUniqueDQForNodeUnit.onnx
    DIR/01_L1_1_WeightBiasQuantization.onnx
    DIR/02_L1_2_ConstantFolding.onnx
    ...

``<NN>`` numbers the dumps, ``<level>`` is the stage (``pre``, ``L0``..``L4``, ``loop``, ``post``: the trace's), and
``<step>`` the step of that level's fixed-point loop, 1-based as ORT logs it. Each is saved by the saver
``optimize`` uses (:func:`qdqopt.graph.model.write_model`: what ORT would write to ``optimized_model_filepath`` if
the session ended there), written atomically with the mode a new file gets under the umask. Saving only reads the
graph, so a run with dumps produces the same output as one without; the last dump is the output byte for byte
unless the session's final Resolve (after every pass) still removed something, in which case one more dump,
``<NN>_final_Resolve.onnx``, holds the output. InsertCastTransformer and RemoveDuplicateCastTransformer share one
modified flag (see :mod:`qdqopt.manager`): their application is dumped once, under InsertCastTransformer.

``--stop-after PASS[:N]`` ends the run right after the N-th application (default 1) of the transformer ``PASS``,
counted as the trace counts them (every application, ``modified: 0`` or ``1``); the output is the model as that
application left it. A pass that the run applies fewer than N times is an error.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Unpack

from qdqopt.api import OptimizeResult, RunOptions, run
from qdqopt.errors import UsageError
from qdqopt.graph import Graph, Model
from qdqopt.graph.model import ModelSource, write_atomic, write_model
from qdqopt.levels import Level
from qdqopt.manager import StopRun, TraceEntry

__all__ = ["DumpRun", "StopAfter", "dump_name", "run_with_dumps"]


@dataclass(frozen=True)
class StopAfter:
    """``PASS[:N]``: the N-th application of transformer ``PASS`` (1-based)."""

    name: str
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> StopAfter:
        match = re.fullmatch(r"([A-Za-z_][\w.]*)(?::(\d+))?", text.strip())
        if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
            raise UsageError(f"--stop-after {text!r}: expected PASS or PASS:N (N >= 1), e.g. ConstantFolding:2")
        return cls(match.group(1), int(match.group(2) or 1))

    def __str__(self) -> str:
        return f"{self.name}:{self.count}"


def dump_name(index: int, entry: TraceEntry) -> str:
    """``<NN>_<level>_<step>_<pass>.onnx``."""
    return f"{index:02d}_{entry.stage}_{entry.step + 1}_{entry.name}.onnx"


@dataclass
class DumpRun:
    """A run with dumps and/or a stop: the result and the files written, in order."""

    result: OptimizeResult
    dumps: list[Path] = field(default_factory=list)
    #: the application the run stopped after (``--stop-after``), or None when it ran to the end
    stopped_after: TraceEntry | None = None


class _Hooks:
    """The snapshot hooks of one run: dump after each modifying application, stop after the chosen one."""

    def __init__(self, dump_dir: Path | None, stop: StopAfter | None) -> None:
        self.dump_dir = dump_dir
        self.stop = stop
        self.model: Model | None = None
        self.dumps: list[Path] = []
        self.seen = 0
        self.stopped_after: TraceEntry | None = None

    def on_load(self, model: Model) -> None:
        # a pass declined the model: the run starts again from a fresh load, and what the aborted run dumped goes
        for path in self.dumps:
            path.unlink(missing_ok=True)
        self.model, self.dumps, self.seen, self.stopped_after = model, [], 0, None

    def on_entry(self, entry: TraceEntry, graph: Graph) -> None:
        shared_flag_first = entry.name == "RemoveDuplicateCastTransformer" and entry.stage == "loop"
        if self.dump_dir is not None and entry.modified and not shared_flag_first:
            self.write(dump_name(len(self.dumps), entry))
        if self.stop is not None and entry.name == self.stop.name:
            self.seen += 1
            if self.seen == self.stop.count:
                self.stopped_after = entry
                raise StopRun

    def write(self, name: str) -> None:
        assert self.model is not None and self.dump_dir is not None
        path = self.dump_dir / name
        write_atomic(self.model, path)
        self.dumps.append(path)


def run_with_dumps(
    model: ModelSource,
    level: Level | int | str = "all",
    *,
    dump_dir: str | os.PathLike[str] | None = None,
    stop_after: StopAfter | str | None = None,
    **options: Unpack[RunOptions],
) -> DumpRun:
    """:func:`qdqopt.api.run` (``options``: its ``disabled``, ``config`` and ``plugins``), writing a dump after every
    application that modified the graph (when ``dump_dir`` is given) and ending right after ``stop_after``'s
    application. Raises :class:`UsageError` when the run applied the pass fewer times than asked."""
    stop = StopAfter.parse(stop_after) if isinstance(stop_after, str) else stop_after
    hooks = _Hooks(Path(dump_dir) if dump_dir is not None else None, stop)
    if hooks.dump_dir is not None:
        hooks.dump_dir.mkdir(parents=True, exist_ok=True)
    result = run(model, level, on_entry=hooks.on_entry, on_load=hooks.on_load, **options)
    if stop is not None and hooks.stopped_after is None:
        raise UsageError(
            f"--stop-after {stop}: {stop.name} was applied {hooks.seen} time(s) at {result.level.ort_name}"
            " (the trace lists every application)"
        )
    if hooks.dump_dir is not None and hooks.stopped_after is None and hooks.model is not None:
        _dump_final(hooks)
    return DumpRun(result, hooks.dumps, hooks.stopped_after)


def _dump_final(hooks: _Hooks) -> None:
    """One more dump when the session's final Resolve changed the model after the last pass (or when no pass
    modified it but saving does: never, since an unmodified graph is saved verbatim)."""
    assert hooks.model is not None and hooks.dump_dir is not None
    if not hooks.dumps:
        return
    buffer = io.BytesIO()
    write_model(hooks.model, buffer)
    if buffer.getvalue() != hooks.dumps[-1].read_bytes():
        hooks.write(f"{len(hooks.dumps):02d}_final_Resolve.onnx")
