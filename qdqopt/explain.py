"""Why each QDQ node unit was, or was not, fused: ``QDQSelectorActionTransformer`` explained.

The model is run through ORT's session stages up to the first application of QDQSelectorActionTransformer (so
EnsureUniqueDQ, Level1, partitioning, ReluQuantRewrite/ClipQuantRewrite and QDQS8ToU8 have already rewritten it,
exactly as the fusion pass sees it), then every candidate target node is put through the selectors without
changing the graph. Each report names the target, the rule tried, the DQs and Qs around it, and either what it
becomes or the reasons it stays (ORT's own words where ORT has them). Units that only appear after a first round
of fusion (the fixed-point loop's later steps) are not listed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.graph import load_model
from qdqopt.levels import Level, parse_level
from qdqopt.manager import run_pipeline
from qdqopt.plugins import PluginSource, resolve_plugins
from qdqopt.registry import TRANSFORMERS
from qdqopt.target import Target

__all__ = ["FUSION_PASS", "NHWC_PASS", "LayoutReport", "explain", "explain_layout"]

FUSION_PASS = "QDQSelectorActionTransformer"
NHWC_PASS = "NhwcTransformer"
#: the ops ``explain_layout`` reports on: those that have an NHWC form on the CPU EP
LAYOUT_OPS = frozenset(
    {
        "QLinearConv",
        "Conv",
        "FusedConv",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "Resize",
    }
)


@dataclass(frozen=True)
class LayoutReport:
    """Where one conv, pool or Resize ended up at LAYOUT: ``nhwc`` (with the op it became) or ``nchw`` (with why)."""

    name: str
    op: str
    outcome: str
    detail: str


def explain(
    model: str | os.PathLike[str] | onnx.ModelProto,
    level: Level | int | str = "extended",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[object]:
    """The unit reports (``qdqopt.passes.qdq_selector_action.UnitReport``) for the model at this level (after the
    ``plugins`` placed before the fusion pass have run)."""
    if FUSION_PASS not in TRANSFORMERS:
        raise UsageError(f"explain needs {FUSION_PASS}, which qdqopt does not implement yet")
    from qdqopt.passes.qdq_selector_action import explain_units

    lvl = parse_level(level)
    cfg = SessionConfig.from_mapping(config)
    loaded = load_model(model)
    result = run_pipeline(
        loaded,
        lvl,
        config=cfg,
        disabled=set(disabled),
        target=Target.detect(),
        stop_before=FUSION_PASS,
        plugins=resolve_plugins(plugins),
    )
    if not result.stopped or result.context is None:
        raise UsageError(
            f"{FUSION_PASS} does not run in this session (level below EXTENDED, disabled, "
            "or session.disable_quant_qdq=1)"
        )
    return list(explain_units(loaded.graph, result.context))


def explain_layout(
    model: str | os.PathLike[str] | onnx.ModelProto,
    level: Level | int | str = "layout",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    plugins: Iterable[PluginSource] = (),
) -> list[LayoutReport]:
    """For every conv, pool and Resize as NhwcTransformer sees them: whether it went to NHWC and, if not, why.

    The model runs up to NhwcTransformer's application; the pass then runs on a copy with its events on: a conv
    in the conversion table is converted (or skipped, with the check that refused it); a pool or Resize goes to
    NHWC when the transpose optimizer pushes the new Transposes through it (or stays, with the handler's or the
    cost check's refusal, or because no NHWC Transpose reached it).
    """
    lvl = parse_level(level)
    if lvl < Level.LAYOUT:
        raise UsageError("NhwcTransformer runs at LAYOUT and ALL only")
    if NHWC_PASS not in TRANSFORMERS:
        raise UsageError(f"explain --level layout needs {NHWC_PASS}, which qdqopt does not implement yet")
    from qdqopt.passes.nhwc_transformer import NhwcTransformer

    cfg = SessionConfig.from_mapping(config)
    loaded = load_model(model)
    target = Target.detect()
    extra = resolve_plugins(plugins)
    result = run_pipeline(
        loaded, lvl, config=cfg, disabled=set(disabled), target=target, stop_before=NHWC_PASS, plugins=extra
    )
    if not result.stopped:
        raise UsageError(f"{NHWC_PASS} does not run in this session (disabled, or session.disable_quant_qdq=1)")
    graph = loaded.graph
    events = NhwcTransformer().explain(graph, target.with_config(cfg))
    stuck = [e.reason for e in events if e.outcome == "unsupported"]
    if stuck:
        raise UsageError(f"{NHWC_PASS} does not cover this model yet ({stuck[0]}), so qdqopt cannot explain it")
    reports: list[LayoutReport] = []
    for node in graph.topological_order():
        if node.op_type not in LAYOUT_OPS:
            continue
        mine = [e for e in events if e.node_index == node.index]
        done = next((e for e in mine if e.outcome in ("converted", "pushed")), None)
        if done is not None:
            became = done.reason if done.outcome == "converted" else _pushed_form(node.qualified_op)
            reports.append(LayoutReport(node.name, node.qualified_op, "nhwc", became))
        elif mine:
            reports.append(LayoutReport(node.name, node.qualified_op, "nchw", mine[-1].reason))
        else:
            reports.append(LayoutReport(node.name, node.qualified_op, "nchw", "no channels-last Transpose reached it"))
    return reports


def _pushed_form(op: str) -> str:
    return {
        "MaxPool": "com.microsoft.NhwcMaxPool",
        "com.microsoft.QLinearAveragePool": "com.microsoft.QLinearAveragePool(channels_last=1)",
        "com.microsoft.QLinearGlobalAveragePool": "com.microsoft.QLinearGlobalAveragePool(channels_last=1)",
    }.get(op, f"{op} on NHWC data")
