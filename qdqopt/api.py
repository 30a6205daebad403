"""The public API: :func:`optimize` and :func:`run`."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import onnx

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.graph import Model, load_model, save_model
from qdqopt.graph.model import ModelSource, write_atomic
from qdqopt.levels import Level, parse_level
from qdqopt.manager import EntryHook, PipelineResult, Snapshot, run_pipeline
from qdqopt.passes.base import Unsupported
from qdqopt.plugins import PluginSource, resolve_plugins
from qdqopt.registry import Plugin, all_names
from qdqopt.target import Target

__all__ = ["OptimizeResult", "RunOptions", "optimize", "run"]

ConfigSource = Mapping[str, object] | Iterable[str] | None


class RunOptions(TypedDict, total=False):
    """What a caller of :func:`run` may pass through to it unchanged (``**options``), as :func:`run` takes it."""

    disabled: Iterable[str]
    config: ConfigSource
    plugins: Iterable[PluginSource]


@dataclass
class OptimizeResult:
    """The optimized model with the trace of the run that made it."""

    #: the optimized graph as qdqopt holds it (:func:`qdqopt.graph.model.write_model` writes it without a copy)
    loaded: Model
    level: Level
    pipeline: PipelineResult
    config: SessionConfig
    disabled: tuple[str, ...]

    @functools.cached_property
    def model(self) -> onnx.ModelProto:
        """The ModelProto ORT would write (made on first use: it holds its own copy of the weights)."""
        return save_model(self.loaded)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the optimized model to ``path`` as ``qdqopt optimize`` does: atomically, with the mode a new file
        gets under the umask, one initializer at a time (no second copy of the weights, unlike :attr:`model`)."""
        write_atomic(self.loaded, Path(path))

    @property
    def unimplemented(self) -> list[str]:
        """Passes ORT would have run here that qdqopt does not implement yet (they were skipped)."""
        return self.pipeline.unimplemented

    @property
    def unsupported(self) -> dict[str, str]:
        """Implemented passes that do not cover this model yet (name -> reason); the run was made without them."""
        return self.pipeline.unsupported

    @property
    def plugins(self) -> list[str]:
        """The passes of one's own that ran (registered at this level and not disabled): ORT has none of them."""
        return self.pipeline.plugins


def _check_disabled(disabled: Iterable[str], plugins: Iterable[Plugin] = ()) -> tuple[str, ...]:
    names = tuple(disabled)
    known = all_names() | {p.name for p in plugins}
    for name in names:
        if name not in known:
            warnings.warn(
                f"{name!r} is not the name of any ORT 1.32 transformer or rule; ORT ignores it silently",
                stacklevel=3,
            )
    return names


def run(
    model: ModelSource,
    level: Level | int | str = "all",
    *,
    disabled: Iterable[str] = (),
    config: ConfigSource = None,
    target: Target | None = None,
    on_pass: Snapshot | None = None,
    plugins: Iterable[PluginSource] = (),
    on_entry: EntryHook | None = None,
    on_load: Callable[[Model], None] | None = None,
) -> OptimizeResult:
    """Optimize like an ORT CPU session would, and return the model with the trace.

    ``plugins`` are passes of one's own (``"module:Class"``, an installed entry point's name, a pass class or a
    :class:`~qdqopt.registry.Plugin`: see :mod:`qdqopt.plugins`), run at their declared places and marked in the
    trace; ``disabled`` switches them off by name like ORT's passes.

    ``on_pass(name, graph)`` / ``on_entry(trace_entry, graph)`` are called after every pass application (raising
    :class:`~qdqopt.manager.StopRun` there ends the run: ``pipeline.stopped``); ``on_load(model)`` with each model
    loaded for a run (again when a pass declined the model and the run is redone without it), so that a hook can
    save the model as it stands (:mod:`qdqopt.dumps`).
    """
    if isinstance(disabled, str):
        raise UsageError("disabled must be a list of names, not a single string")
    lvl = parse_level(level)
    cfg = SessionConfig.from_mapping(config)
    extra = resolve_plugins(plugins)
    names = _check_disabled(disabled, extra)
    tgt = target or Target.detect()
    unsupported: dict[str, str] = {}
    while True:
        loaded = load_model(model, inline_local_functions=cfg.get("session.disable_aot_function_inlining") != "1")
        if on_load is not None:
            on_load(loaded)
        try:
            pipeline = run_pipeline(
                loaded,
                lvl,
                config=cfg,
                disabled=set(names) | set(unsupported),
                target=tgt,
                on_pass=on_pass,
                plugins=extra,
                on_entry=on_entry,
            )
        except Unsupported as skipped:  # a pass does not cover this model: run again without it
            unsupported[skipped.name] = skipped.reason
            continue
        pipeline.unsupported = unsupported
        return OptimizeResult(loaded, lvl, pipeline, cfg, names)


def optimize(
    model: ModelSource,
    level: Level | int | str = "all",
    *,
    disabled: Iterable[str] = (),
    config: ConfigSource = None,
    plugins: Iterable[PluginSource] = (),
) -> onnx.ModelProto:
    """Return what ORT's CPU session would write to ``optimized_model_filepath``, for the passes qdqopt implements.

    Args:
        model: a ModelProto or a path to an .onnx file (external data only from the model's own folder).
        level: 0/1/2/3/99, ``"disable_all"|"basic"|"extended"|"layout"|"all"``, or ORT's enum names.
        disabled: transformer or rule names to switch off, as ORT's ``disabled_optimizers``.
        config: session config entries, e.g. ``{"session.qdqisint8allowed": "1"}``.
        plugins: passes of one's own to slot into ORT's pipeline (see :func:`run` and :mod:`qdqopt.plugins`).
    """
    return run(model, level, disabled=disabled, config=config, plugins=plugins).model
