"""Why each QDQ node unit was, or was not, fused; and where each conv, pool and Resize ended up at LAYOUT.

Both read the events of a run (:mod:`qdqopt.events`), nothing else. The model runs through ORT's session stages up
to and including the first application of the pass explained, QDQSelectorActionTransformer (so EnsureUniqueDQ,
Level1, partitioning, ReluQuantRewrite/ClipQuantRewrite and QDQS8ToU8 have already rewritten it, exactly as the
fusion pass sees it) or NhwcTransformer, and stops there. That application recorded, as it went, each rule's or
check's refusal (``no-match``, ORT's own words where ORT has them) and each unit fused, dropped or converted and
each Transpose pushed; a report is those events, grouped by node. Units that only appear after a first round of
fusion (the fixed-point loop's later steps) are not listed.

The transformer fusions (GeluFusion, LayerNormFusion, AttentionFusion, SkipLayerNormFusion, ...) are explained from
a whole run at the level asked (:func:`explain_fusions`): a candidate refused in one step may fuse in a later one,
once an earlier fusion made its input (AttentionFusion needs LayerNormFusion's LayerNormalization). Each candidate
(the node a pass starts its match from: a LayerNorm-shaped subgraph's ReduceMean, an attention block's
LayerNormalization, ...) is the first node of its ``no-match`` and ``fused`` events; its report says what it was fused
into (``fused``, :class:`~qdqopt.events.Fusion`) or which checks refused it, in the order they did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qdqopt import events
from qdqopt.api import run
from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.graph import Graph, load_model
from qdqopt.graph.model import ModelSource
from qdqopt.levels import Level, parse_level
from qdqopt.manager import run_pipeline
from qdqopt.plugins import PluginSource, resolve_plugins
from qdqopt.registry import TRANSFORMERS
from qdqopt.target import Target

if TYPE_CHECKING:
    from qdqopt.passes.qdq_selector_action import UnitReport

__all__ = [
    "FUSION_PASS",
    "NHWC_PASS",
    "TRANSFORMER_FUSIONS",
    "CandidateReport",
    "FusionSection",
    "LayoutReport",
    "explain",
    "explain_fusions",
    "explain_layout",
    "explain_pass",
    "fusion_reports",
    "layout_reports",
    "recorded",
]

FUSION_PASS = "QDQSelectorActionTransformer"
NHWC_PASS = "NhwcTransformer"
#: the transformer fusions ``explain_fusions`` reports on, in ORT's order (those the level runs)
TRANSFORMER_FUSIONS = (
    "GeluFusionL1",
    "LayerNormFusionL1",
    "GeluFusionL2",
    "LayerNormFusionL2",
    "SimplifiedLayerNormFusion",
    "AttentionFusion",
    "EmbedLayerNormFusion",
    "BiasGeluFusion",
    "GroupQueryAttentionFusion",
    "SkipLayerNormFusion",
    "BiasSkipLayerNormFusion",
    "FastGeluFusion",
    "QuickGeluFusion",
    "SwiGluFusion",
    "BiasSoftmaxFusion",
)


@dataclass(frozen=True)
class CandidateReport:
    """One candidate of a transformer fusion: ``fused`` (``op``: what it became, ``node``: the new node's name) or
    ``refused`` (``reasons``: each check that refused it, in order, once each; a candidate fused in a later step
    keeps the earlier refusals)."""

    pass_name: str
    candidate: str
    outcome: str
    op: str | None = None
    node: str | None = None
    reasons: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.candidate

    @property
    def detail(self) -> str:
        """What it became (``fused into <op> '<node>'``), or the first check that refused it."""
        if self.outcome == "fused" and self.op is not None and self.node is not None:
            return events.Fusion(self.op, self.node).text
        return self.reasons[0] if self.reasons else ""


@dataclass(frozen=True)
class FusionSection:
    """A transformer fusion registered for the session: whether qdqopt ran it (``status``: ``ran``, ``not
    implemented``, or the reason it declined the model) and its candidates, in the order they were first met."""

    pass_name: str
    status: str
    candidates: tuple[CandidateReport, ...] = ()


@dataclass(frozen=True)
class LayoutReport:
    """Where one conv, pool or Resize ended up at LAYOUT: ``nhwc`` (``detail``: the op it became) or ``nchw``
    (``detail``: the last refusal; ``reasons``: every refusal recorded for it, in order)."""

    name: str
    op: str
    outcome: str
    detail: str
    reasons: tuple[str, ...] = ()


class _Recorded(Exception):
    """Ends a run right after the pass explained (carrying the run's events)."""

    def __init__(self, log: events.EventLog) -> None:
        super().__init__()
        self.log = log


def recorded(
    model: ModelSource,
    level: Level | int | str,
    through: str,
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[events.Event] | None:
    """The events of the first application of pass ``through`` in a run of ``model`` at ``level`` (the run stops
    right after it), or None when that pass does not run in this session."""

    def stop_after(name: str, graph: Graph) -> None:
        log = events.active()
        if name == through and log is not None:
            raise _Recorded(log)

    cfg = SessionConfig.from_mapping(config)
    try:
        run_pipeline(
            load_model(model),
            parse_level(level),
            config=cfg,
            disabled=set(disabled),
            target=Target.detect(),
            on_pass=stop_after,
            plugins=resolve_plugins(plugins),
        )
    except _Recorded as done:
        return [e for e in done.log.events if e.pass_name == through]
    return None


def explain(
    model: ModelSource,
    level: Level | int | str = "extended",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[UnitReport]:
    """The unit reports (:class:`~qdqopt.passes.qdq_selector_action.UnitReport`) for the model at this level (after
    the ``plugins`` placed before the fusion pass have run), from the events of the fusion pass's first
    application."""
    if FUSION_PASS not in TRANSFORMERS:
        raise UsageError(f"explain needs {FUSION_PASS}, which qdqopt does not implement yet")
    from qdqopt.passes.qdq_selector_action import unit_reports

    found = recorded(model, level, FUSION_PASS, config=config, disabled=disabled, plugins=plugins)
    if found is None:
        raise UsageError(
            f"{FUSION_PASS} does not run in this session (level below EXTENDED, disabled, "
            "or session.disable_quant_qdq=1)"
        )
    return unit_reports(found)


def explain_layout(
    model: ModelSource,
    level: Level | int | str = "layout",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[LayoutReport]:
    """For every conv, pool and Resize as NhwcTransformer sees them (``nhwc_transformer.LAYOUT_OPS``): whether it went
    to NHWC and, if not, why.

    Read from the events of NhwcTransformer's application: a conv in the conversion table is ``converted`` (or
    refused, with the check that refused it); a pool or Resize goes to NHWC when the transpose optimizer pushes the
    new Transposes through it (``pushed``) or stays, with the handler's or the cost check's refusal, or because no
    Transpose reached it.
    """
    lvl = parse_level(level)
    if lvl < Level.LAYOUT:
        raise UsageError("NhwcTransformer runs at LAYOUT and ALL only")
    if NHWC_PASS not in TRANSFORMERS:
        raise UsageError(f"explain --level layout needs {NHWC_PASS}, which qdqopt does not implement yet")
    found = recorded(model, lvl, NHWC_PASS, config=config, disabled=disabled, plugins=plugins)
    if found is None:
        raise UsageError(f"{NHWC_PASS} does not run in this session (disabled, or session.disable_quant_qdq=1)")
    return layout_reports(found)


def fusion_reports(recorded_events: Iterable[events.Event], pass_name: str) -> list[CandidateReport]:
    """The candidates of one transformer fusion, from its ``no-match`` and ``fused`` events (candidate first among
    each event's nodes), in the order they were first met."""
    reasons: dict[str, list[str]] = {}
    fused: dict[str, events.Fusion] = {}
    for event in recorded_events:
        if event.pass_name != pass_name or not event.nodes:
            continue
        candidate = event.nodes[0]
        if event.kind is events.Kind.NO_MATCH:
            found = reasons.setdefault(candidate, [])
            if event.text not in found:
                found.append(event.text)
        elif event.kind is events.Kind.FUSED and isinstance(event.data, events.Fusion):
            reasons.setdefault(candidate, [])
            fused.setdefault(candidate, event.data)
    reports: list[CandidateReport] = []
    for candidate, why in reasons.items():
        done = fused.get(candidate)
        if done is not None:
            reports.append(CandidateReport(pass_name, candidate, "fused", done.op, done.node, tuple(why)))
        else:
            reports.append(CandidateReport(pass_name, candidate, "refused", reasons=tuple(why)))
    return reports


def explain_fusions(
    model: ModelSource,
    level: Level | int | str = "extended",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[FusionSection]:
    """One section per transformer fusion of :data:`TRANSFORMER_FUSIONS` the session registers at this level (in
    ORT's order), with its candidates, read from the events of a whole run at that level."""
    result = run(model, level, config=config, disabled=disabled, plugins=plugins).pipeline
    applied = {entry.name for entry in result.trace}
    sections: list[FusionSection] = []
    for name in TRANSFORMER_FUSIONS:
        if name in result.unsupported:
            status = f"declined by qdqopt: {result.unsupported[name]}"
        elif name in result.unimplemented:
            status = "not implemented by qdqopt"
        elif name in applied:
            status = "ran"
        else:
            continue
        sections.append(FusionSection(name, status, tuple(fusion_reports(result.events.events, name))))
    return sections


def layout_reports(recorded_events: Iterable[events.Event]) -> list[LayoutReport]:
    """One report per conv, pool and Resize, in the order NhwcTransformer visited them, from its events (payload
    ``PushEvent``): its own verdict first (``converted`` or ``skipped``), then what the transpose optimizer did."""
    from qdqopt.passes.transpose_optimization.context import PushEvent

    decisions: dict[tuple[str, int], list[PushEvent]] = {}
    for event in recorded_events:
        push = event.data
        if not isinstance(push, PushEvent):
            continue
        key = (push.node_name, push.node_index)
        if push.outcome in ("converted", "skipped"):
            decisions.setdefault(key, [])
        if key in decisions:
            decisions[key].append(push)
    reports: list[LayoutReport] = []
    for pushes in decisions.values():
        first = pushes[0]
        done = next((p for p in pushes if p.outcome in ("converted", "pushed")), None)
        if done is not None:
            reports.append(LayoutReport(first.node_name, first.op, "nhwc", done.reason))
        else:
            why = tuple(dict.fromkeys(p.reason for p in pushes))
            reports.append(LayoutReport(first.node_name, first.op, "nchw", pushes[-1].reason, why))
    return reports


def explain_pass(
    model: ModelSource,
    pass_name: str,
    level: Level | int | str = "extended",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[CandidateReport]:
    """For every candidate the pass ``pass_name`` looked at in its first application: fused into what, or which
    check refused it (from its ``fused`` and ``no-match`` events)."""
    if pass_name not in TRANSFORMERS:
        raise UsageError(f"explain --pass needs {pass_name}, which qdqopt does not implement (or is not ORT's)")
    found = recorded(model, level, pass_name, config=config, disabled=disabled, plugins=plugins)
    if found is None:
        raise UsageError(f"{pass_name} does not run in this session (level, disabled, or gated off)")
    return fusion_reports(found, pass_name)
