"""Passes of one's own in ORT's pipeline: where they come from.

A plugin is a :class:`~qdqopt.passes.base.GraphTransformer` subclass written outside qdqopt, with the same base
class, helpers and trace as qdqopt's own passes, that declares where it goes (:class:`qdqopt.registry.Plugin`)::

    class DoubleReluElimination(GraphTransformer):
        name = "DoubleReluElimination"   # not a name ORT uses
        after = "ReluQuantRewrite"       # or before="...", or level="extended" (end of that level's stage)

        def apply_impl(self, graph, ctx, graph_level): ...

It is given by reference, as ``module:Class`` (``path/to/file.py:Class`` works too), or by the name of an entry
point in the :data:`ENTRY_POINT_GROUP` group of an installed distribution (``[project.entry-points."qdqopt.passes"]``
``double-relu = "mypkg.passes:DoubleReluElimination"``); the object referred to is a pass class or a
:class:`~qdqopt.registry.Plugin` (for a pass whose place is given apart from its class).

Plugins are active only where they are asked for (``--plugin`` on the command line, ``plugins=[...]`` in the API):
an installed entry point makes a plugin available by name, it never switches one on by itself, so a run without
``--plugin`` is exactly ORT's pipeline.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from qdqopt.errors import UsageError
from qdqopt.passes.base import GraphTransformer
from qdqopt.registry import Plugin, with_plugins

__all__ = ["ENTRY_POINT_GROUP", "PluginSource", "installed_plugins", "load_plugin", "resolve_plugins"]

#: The entry-point group installed distributions list their passes in.
ENTRY_POINT_GROUP = "qdqopt.passes"

#: What a plugin may be given as: ``"module:Class"``, an entry point's name, a pass class, or a :class:`Plugin`.
PluginSource = str | type[GraphTransformer] | Plugin


def installed_plugins() -> dict[str, str]:
    """Entry points of the :data:`ENTRY_POINT_GROUP` group: name -> ``module:attr`` (available, not active)."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _import_module(module: str) -> object:
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise UsageError(f"plugin {module}: no such file")
        name = f"qdqopt_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"plugin {module}: cannot load this file")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"plugin {module}: cannot import it ({exc})") from exc


def _as_plugin(obj: object, source: str) -> Plugin:
    if isinstance(obj, Plugin):
        return obj if obj.source else replace(obj, source=source)
    if isinstance(obj, type) and issubclass(obj, GraphTransformer):
        return Plugin.of(obj, source)
    raise UsageError(f"plugin {source}: {obj!r} is neither a GraphTransformer subclass nor a qdqopt.registry.Plugin")


def load_plugin(ref: str) -> Plugin:
    """The plugin ``ref`` names: ``module:Class``, ``path/to/file.py:Class``, or an installed entry point's name."""
    if ":" not in ref or ref.endswith(":"):
        found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == ref]
        if not found:
            known = ", ".join(sorted(installed_plugins())) or "none installed"
            raise UsageError(
                f"plugin {ref!r}: give module:Class, or the name of an entry point in {ENTRY_POINT_GROUP} ({known})"
            )
        try:
            obj = found[0].load()
        except ImportError as exc:
            raise UsageError(f"plugin {ref}: cannot import {found[0].value} ({exc})") from exc
        return _as_plugin(obj, f"entry point {ref} = {found[0].value}")
    module, _, qualname = ref.rpartition(":")
    obj = _import_module(module)
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"plugin {ref}: {module} has no {qualname}")
        obj = getattr(obj, part)
    return _as_plugin(obj, ref)


def resolve_plugins(items: Iterable[PluginSource] | None) -> tuple[Plugin, ...]:
    """Load and place ``items``, in order; raises :class:`UsageError` for one that cannot be loaded or placed."""
    if items is None:
        return ()
    if isinstance(items, str | Plugin | type):
        raise UsageError("plugins must be a list (of module:Class strings, pass classes or Plugin objects)")
    out: list[Plugin] = []
    for item in items:
        if isinstance(item, Plugin):
            out.append(item)
        elif isinstance(item, str):
            out.append(load_plugin(item))
        else:
            out.append(_as_plugin(item, f"{getattr(item, '__module__', '?')}:{getattr(item, '__qualname__', item)}"))
    with_plugins(out)  # every plugin must find its place now, not halfway through a run
    return tuple(out)
