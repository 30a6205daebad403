"""Differential runs: qdqopt against real ORT for one model, level and session setup.

Two modes:

* **as ORT runs** (the default, :data:`AS_RUN`): ORT runs exactly as a user would run it, with only the caller's
  own ``disabled`` list and ``config`` applied (on both sides). qdqopt runs what it has: a pass it does not
  implement, or one that declines the model (``GraphTransformer.unsupported``), simply does not run on qdqopt's
  side. The comparison then says so plainly (:attr:`LevelComparison.notes`), naming each such pass and whether ORT's
  own log shows it modifying the model (then differences are expected). This is the fidelity result.
* **isolation** (``isolate=True``, :data:`ISOLATION`): every pass qdqopt lacks (that ORT lets one disable) and every
  pass that declines the model is disabled on *both* sides (ORT's ``disabled_optimizers``), so that what is compared
  is only what qdqopt reproduces. Useful to isolate passes; not a fidelity result, and every report says so.

Required passes cannot be disabled in ORT, so even in isolation mode a required pass qdqopt lacks shows up as a
difference.

Passes of one's own (``plugins``, :mod:`qdqopt.plugins`) run on qdqopt's side only: ORT knows nothing of them, so their
names are never sent to ORT (disabling one touches qdqopt's side only), their trace lines are left out of the
line-by-line check, and the notes name every one that was active. With none active (none given, or all disabled or at
a stage the level does not run), a comparison is exactly what it is without plugins.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from qdqopt.api import OptimizeResult, run
from qdqopt.config import SessionConfig
from qdqopt.diff import TIERS, DiffReport, compare
from qdqopt.errors import UsageError
from qdqopt.graph.model import ModelSource, read_model_proto
from qdqopt.levels import Level, parse_level
from qdqopt.plugins import PluginSource, resolve_plugins
from qdqopt.reference import ReferenceRun, TraceLine, run_reference
from qdqopt.registry import PASSES, implementation, registered_passes, rule_implementation
from qdqopt.target import Target

__all__ = [
    "AS_RUN",
    "ISOLATION",
    "LevelComparison",
    "PairedRun",
    "RunSetup",
    "compare_level",
    "isolation_header",
    "run_paired",
    "unimplemented_names",
]

#: ORT runs as a user runs it (only the caller's own disabled list and config): a fidelity result
AS_RUN = "as-run"
#: what qdqopt lacks or declines is disabled on both sides: isolates what qdqopt reproduces, not a fidelity result
ISOLATION = "isolation"


def isolation_header(ort_disabled: Iterable[str]) -> str:
    """The line every isolation-mode report starts with."""
    names = list(ort_disabled)
    what = ", ".join(names) if names else "nothing"
    return f"ORT run with {what} disabled on both sides (isolation mode; not a fidelity result)"


def _as_run_header(user_disabled: Iterable[str]) -> str:
    names = list(user_disabled)
    if not names:
        return "ORT run as a user runs it (nothing disabled)"
    return f"ORT run as a user runs it, with {', '.join(names)} disabled on both sides as asked"


def _owner_of_rule(name: str) -> str | None:
    return next((spec.name for spec in PASSES if any(r.name == name for r in spec.rules)), None)


def _listed(names: list[str], limit: int | None) -> str:
    if limit is None or len(names) <= limit:
        return ", ".join(names)
    return ", ".join([*names[:limit], f"... ({len(names) - limit} more)"])


@dataclass
class RunSetup:
    """How the two sides of a comparison were run: the mode, what was disabled on both sides, what qdqopt lacks or
    declined, and ORT's log (which says whether a pass qdqopt did not run modified the model)."""

    mode: str
    user_disabled: list[str]
    auto_disabled: list[str]
    lacking: list[str]
    unsupported: dict[str, str]
    ort_trace: list[TraceLine]
    #: passes of one's own active on qdqopt's side (name -> where it was placed); ORT has none of them
    plugins: dict[str, str] = field(default_factory=dict)
    #: of :attr:`plugins`, those that modified the model
    plugins_modified: list[str] = field(default_factory=list)
    #: passes of one's own that declined the model (name -> reason): they did not run
    plugins_declined: dict[str, str] = field(default_factory=dict)

    @property
    def ort_disabled(self) -> list[str]:
        return [*self.user_disabled, *(n for n in self.auto_disabled if n not in self.user_disabled)]

    @property
    def ort_only(self) -> list[str]:
        off = set(self.ort_disabled)
        return [n for n in [*self.lacking, *self.unsupported] if n not in off]

    @property
    def ort_only_modified(self) -> list[str]:
        modified = {t.name for t in self.ort_trace if t.modified}
        return [n for n in self.ort_only if n in modified or _owner_of_rule(n) in modified]

    def header(self, limit: int | None = None) -> str:
        if self.mode == ISOLATION:
            names = self.ort_disabled
            if limit is not None and len(names) > limit:
                names = [*names[:limit], f"{len(names) - limit} more"]
            return isolation_header(names)
        return _as_run_header(self.user_disabled)

    def plugin_notes(self) -> list[str]:
        """The lines naming the passes of one's own that were active (none when none was)."""
        out: list[str] = []
        if self.plugins:
            named = [
                f"{n} ({where}{', modified the model' if n in self.plugins_modified else ', no change'})"
                for n, where in self.plugins.items()
            ]
            tail = "differences expected" if self.plugins_modified else "it changed nothing here"
            out.append(
                f"plugins active on qdqopt's side only (not ORT's passes; their trace lines are left out of the "
                f"line-by-line check): {', '.join(named)}: {tail}"
            )
        out += [f"plugin {n} declined this model ({r}): it did not run" for n, r in self.plugins_declined.items()]
        return out

    def notes(self, limit: int | None = None) -> list[str]:
        return [*self.plugin_notes(), *self._ort_notes(limit)]

    def _ort_notes(self, limit: int | None = None) -> list[str]:
        if self.mode == ISOLATION:
            out = [
                f"{n} does not cover this model yet: {r} (disabled on both sides)" for n, r in self.unsupported.items()
            ]
            required = [n for n in self.lacking if n not in self.ort_disabled]
            out += [f"qdqopt lacks {n}, a required pass ORT cannot disable: differences expected" for n in required]
            return out
        logged = {t.name for t in self.ort_trace}
        modified = set(self.ort_only_modified)
        out = []
        quiet: list[str] = []
        for name in self.ort_only:
            if name in self.unsupported:
                continue
            owner = _owner_of_rule(name)
            what = f"rule {name} (of {owner})" if owner else name
            if name not in modified:
                if (owner or name) in logged:
                    quiet.append(what)
                else:
                    out.append(f"qdqopt lacks {what}, which ORT runs at this level: differences possible")
            elif owner:
                out.append(
                    f"qdqopt lacks {what}, which ORT runs at this level; {owner} modified this model in ORT's "
                    "log: differences possible"
                )
            else:
                out.append(
                    f"qdqopt lacks {name}, which ORT runs at this level and which modified this model: "
                    "differences expected"
                )
        if quiet:
            out.append(
                f"qdqopt lacks {len(quiet)} {'other ' if out else ''}pass{'es' if len(quiet) > 1 else ''} ORT runs "
                f"at this level, none of which modified this model in ORT's log: {_listed(quiet, limit)}"
            )
        for name, reason in self.unsupported.items():
            if name in modified:
                tail = "ORT runs it and it modified this model: differences expected"
            else:
                tail = "ORT runs it (it did not modify this model in ORT's log: only its trace lines differ)"
            out.append(f"{name} does not cover this model yet ({reason}), so qdqopt did not run it; {tail}")
        return out


def unimplemented_names(level: Level, config: SessionConfig, target: Target, disabled: set[str]) -> list[str]:
    """Names ORT would register for this session that qdqopt does not implement (in ORT's order).

    Required passes are left out: ``disabled_optimizers`` does not reach them, so they cannot be disabled on the ORT
    side; an unimplemented required pass shows up as a difference instead.
    """
    out: list[str] = []
    for spec, rules in registered_passes(level, config, target, disabled):
        if spec.required:  # ORT cannot switch these off: they must be implemented
            continue
        if spec.rules:
            out.extend(r.name for r in rules if rule_implementation(r) is None)
        elif implementation(spec) is None:
            out.append(spec.name)
    return out


def _resolve_mode(isolate: bool, strict: bool | None) -> bool:
    """``isolate``, reconciled with the deprecated ``strict`` (``strict=True`` is the default now)."""
    if strict is None:
        return isolate
    warnings.warn(
        "compare_level(strict=...) is deprecated: ORT runs as a user runs it by default; pass isolate=True to "
        "disable what qdqopt lacks on both sides",
        DeprecationWarning,
        stacklevel=3,
    )
    if isolate and strict:
        raise UsageError("isolate=True and strict=True contradict each other")
    return isolate or not strict


class _SidesView:
    """What :class:`PairedRun` and :class:`LevelComparison` tell of their :class:`RunSetup` (``sides``)."""

    sides: RunSetup

    @property
    def mode(self) -> str:
        """:data:`AS_RUN` or :data:`ISOLATION`."""
        return self.sides.mode

    @property
    def isolated(self) -> bool:
        return self.sides.mode == ISOLATION

    @property
    def ort_disabled(self) -> list[str]:
        """Everything ORT ran with in ``disabled_optimizers`` (disabled on qdqopt's side too)."""
        return self.sides.ort_disabled

    @property
    def plugins(self) -> list[str]:
        """The passes of one's own that were active on qdqopt's side (ORT has none of them)."""
        return list(self.sides.plugins)

    def header(self, limit: int | None = None) -> str:
        """One line saying how ORT was run (in isolation mode, what it disabled on both sides)."""
        return self.sides.header(limit)

    def notes(self, limit: int | None = None) -> list[str]:
        """Plain lines naming the active plugins, what ran on ORT's side only (and whether ORT's log shows it
        modifying the model), or what isolation mode could not disable; ``limit`` shortens long lists of names."""
        return self.sides.notes(limit)


@dataclass
class PairedRun(_SidesView):
    """qdqopt's run and ORT's for one model and session setup, in one mode (what :func:`run_paired` returns)."""

    ours: OptimizeResult
    ref: ReferenceRun
    sides: RunSetup
    #: the model file's folder (external data), None for a ModelProto
    base_dir: Path | None = None


def run_paired(
    model: ModelSource,
    level: Level | int | str,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Iterable[str] = (),
    isolate: bool = False,
    target: Target | None = None,
    plugins: Iterable[PluginSource] = (),
) -> PairedRun:
    """Run qdqopt and ORT on the same model and setup, as ORT runs or in isolation mode (see the module doc).

    ``plugins`` run on qdqopt's side only; ``disabled`` may name them (they are then off, and ORT never hears of
    them).
    """
    if isinstance(disabled, str):
        raise UsageError("disabled must be a list of names, not a single string")
    lvl = parse_level(level)
    cfg = SessionConfig.from_mapping(config, warn=False)
    tgt = target or Target.detect()
    extra = resolve_plugins(plugins)
    own = {p.name for p in extra}
    asked = list(disabled)
    names = [n for n in asked if n not in own]  # what ORT hears of
    auto = unimplemented_names(lvl, cfg, tgt, set(names) | set(cfg.disabled_by_config())) if isolate else []
    off = names + [n for n in auto if n not in names]
    proto, base = read_model_proto(model)
    ours_off = off + [n for n in asked if n in own]
    source = proto if base is None else model
    ours = run(source, lvl, disabled=ours_off, config=cfg.as_dict(), target=tgt, plugins=extra)
    if isolate:  # a pass that does not cover this model runs on neither side
        gated = [n for n in ours.unsupported if n not in off and n not in own]
        auto += gated
        off += gated
    ref = run_reference(model, lvl, config=cfg.as_dict(), disabled=off)
    placed = {spec.name: spec.placement for spec, _ in registered_passes(lvl, cfg, tgt, set(), extra) if spec.is_plugin}
    sides = RunSetup(
        mode=ISOLATION if isolate else AS_RUN,
        user_disabled=names,
        auto_disabled=[n for n in auto if n not in names],
        lacking=list(dict.fromkeys(ours.unimplemented)),  # a pass registered at two stages is named once
        unsupported={n: r for n, r in ours.unsupported.items() if n not in own},
        ort_trace=list(ref.trace),
        plugins={n: placed.get(n, "") for n in ours.plugins},
        plugins_modified=list(dict.fromkeys(e.name for e in ours.pipeline.trace if e.plugin and e.modified)),
        plugins_declined={n: r for n, r in ours.unsupported.items() if n in own},
    )
    return PairedRun(ours, ref, sides, base)


@dataclass
class LevelComparison(_SidesView):
    """One level's comparison: the report, the trace lines of both sides, and how ORT was run for it.

    :attr:`mode` is :data:`AS_RUN` (ORT as a user runs it: a fidelity result) or :data:`ISOLATION` (what qdqopt
    lacks or declines disabled on both sides: not a fidelity result); :attr:`ort_disabled` is everything ORT ran with
    disabled (also disabled on qdqopt's side).
    """

    level: Level
    report: DiffReport
    ours_lines: list[str]
    ort_lines: list[str]
    sides: RunSetup
    ours: onnx.ModelProto | None = None
    ort: onnx.ModelProto | None = None

    @property
    def user_disabled(self) -> list[str]:
        """The caller's own disabled list (both sides, either mode)."""
        return list(self.sides.user_disabled)

    @property
    def auto_disabled(self) -> list[str]:
        """Isolation mode only: what it disabled on both sides (qdqopt lacks it, or it declines the model)."""
        return list(self.sides.auto_disabled)

    @property
    def unsupported(self) -> dict[str, str]:
        """Implemented passes that do not cover this model (name -> reason): qdqopt did not run them; ORT did unless
        isolated."""
        return dict(self.sides.unsupported)

    @property
    def lacking(self) -> list[str]:
        """Passes and rules registered for this session that qdqopt does not implement (it skipped them)."""
        return list(self.sides.lacking)

    @property
    def ort_only(self) -> list[str]:
        """Passes and rules ORT ran that qdqopt did not: what it lacks and what declined the model (as ORT runs;
        in isolation mode only a required pass qdqopt lacks)."""
        return self.sides.ort_only

    @property
    def ort_only_modified(self) -> list[str]:
        """Of :attr:`ort_only`, those ORT's own log shows modifying the model: differences expected."""
        return self.sides.ort_only_modified

    @property
    def trace_matches(self) -> bool:
        """Whether qdqopt's trace lines equal ORT's log (plugins' lines are not in :attr:`ours_lines`)."""
        return self.ours_lines == self.ort_lines

    def lines(self) -> list[str]:
        """The report's lines: how ORT was run, the verdicts, what ran on one side only, the first differences."""
        return self.report.lines()


def compare_level(
    model: ModelSource,
    level: Level | int | str,
    *,
    config: Mapping[str, str] | None = None,
    disabled: Iterable[str] = (),
    isolate: bool = False,
    tiers: Iterable[str] = TIERS,
    target: Target | None = None,
    strict: bool | None = None,
    plugins: Iterable[PluginSource] = (),
) -> LevelComparison:
    """Run qdqopt and ORT on the same model and setup, and compare their outputs.

    Args:
        disabled: names disabled on both sides (ORT's ``disabled_optimizers``), as a user would disable them.
        isolate: also disable on both sides what qdqopt lacks and the passes that decline the model (isolation
            mode: not a fidelity result, and the report says so). By default ORT runs as a user runs it.
        strict: deprecated; ``strict=True`` is the default now, ``strict=False`` means ``isolate=True``.
        plugins: passes of one's own, run on qdqopt's side only (:mod:`qdqopt.plugins`); the notes name the active
            ones, and their trace lines are left out of :attr:`LevelComparison.trace_matches`.
    """
    isolate = _resolve_mode(isolate, strict)
    pair = run_paired(model, level, config=config, disabled=disabled, isolate=isolate, target=target, plugins=plugins)
    report = compare(pair.ours.model, pair.ref.model, tiers=tiers, base_dir=pair.base_dir)
    report.mode = pair.mode
    report.ort_disabled = pair.ort_disabled
    report.header = pair.header()
    report.notes = pair.notes()
    return LevelComparison(
        level=pair.ours.level,
        report=report,
        ours_lines=pair.ours.pipeline.ort_lines(),
        ort_lines=[str(t) for t in pair.ref.trace],
        sides=pair.sides,
        ours=pair.ours.model,
        ort=pair.ref.model,
    )
