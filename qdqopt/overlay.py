"""``qdqopt view``: a model (or a dump) in Netron or in Google's Model Explorer, with qdqopt's data on each node.

With ``--level`` (and optionally ``--stop-after``), ``view`` optimizes the model as ``optimize`` would and shows the
result; with Model Explorer every node then carries three overlays (node data, in Model Explorer's words), computed
by :func:`node_overlay` from the run's events and from ORT run at the same level, config and disabled list:

* **created by**: the pass application that added the node, ``<pass> (<stage> step <s>)``, or ``input model``;
* **node unit**: the QDQ node unit QDQSelectorActionTransformer saw the node in (its target and what became of it:
  ``Conv unit node_conv2d: fused into QLinearConv``), or ``-``;
* **in ORT**: 1 when ORT's optimized model has a node of that name and op, else 0 (coloured: green, red).

Netron has no overlay mechanism: it shows the model as it is. Both viewers are optional extras
(``pip install 'qdqopt[view]'``); without them ``view`` says so in one line and exits with code 2.

Model Explorer's ONNX adapter (``model-explorer-onnx``) uses a node's name as its id, which is what the overlays
are keyed by (a node without a name gets no overlay).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from qdqopt.api import OptimizeResult
from qdqopt.events import Kind, Unit
from qdqopt.graph.model import save_model
from qdqopt.reference import run_reference

__all__ = ["NodeInfo", "check_viewer", "model_explorer_node_data", "node_overlay", "open_viewer"]

VIEWERS = ("netron", "model-explorer")
#: the importable modules each viewer needs, and the pip names that provide them
_NEEDS = {
    "netron": (("netron", "netron"),),
    "model-explorer": (("model_explorer", "ai-edge-model-explorer"), ("model_explorer_onnx", "model-explorer-onnx")),
}


@dataclass(frozen=True)
class NodeInfo:
    """qdqopt's data on one node of the viewed model."""

    created_by: str
    node_unit: str
    in_ort: bool | None


def _qualified(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _unit_label(unit: Unit, kind: Kind) -> str:
    if kind is Kind.FUSED:
        what = f"fused into {unit.result_op}"
    elif kind is Kind.DROPPED:
        what = f"Q/DQ dropped, {unit.result_op} stays"
    else:
        what = "not fused"
    return f"{unit.op} unit {unit.target}: {what}"


def node_overlay(
    result: OptimizeResult, ort_model: onnx.ModelProto | None, model: onnx.ModelProto | None = None
) -> dict[str, NodeInfo]:
    """qdqopt's data on every named node of ``model`` (default: the run's output, ``result.model``)."""
    shown = model if model is not None else save_model(result.loaded)
    pipeline = result.pipeline
    changed = [e for e in pipeline.events.events if e.kind is Kind.CHANGED]
    fired_by_pass = [e for e in pipeline.trace if e.modified]
    created: dict[str, str] = {}
    for event in changed:
        # the trace entry of this application: the next modifying one of the same pass
        entry = next((e for e in fired_by_pass if e.name == event.pass_name), None)
        if entry is not None:
            fired_by_pass.remove(entry)
        where = f"{entry.stage} step {entry.step + 1}" if entry is not None else "?"
        data = event.data
        for _, name, _op in getattr(data, "removed", ()):
            created.pop(name, None)
        for _, name, _op in getattr(data, "added", ()):  # a fused node often takes the name of the one it replaces
            created[name] = f"{event.pass_name} ({where})"
    units: dict[str, str] = {}
    for event in pipeline.events.events:
        if event.kind in (Kind.FUSED, Kind.DROPPED, Kind.NO_MATCH) and isinstance(event.data, Unit):
            unit = event.data
            label = _unit_label(unit, event.kind)
            for name in (unit.target, *unit.dq_nodes, *unit.q_nodes):
                if event.kind is not Kind.NO_MATCH or name not in units:
                    units[name] = label
    in_ort: set[tuple[str, str]] | None = None
    if ort_model is not None:
        in_ort = {(n.name, _qualified(n)) for n in ort_model.graph.node}
    out: dict[str, NodeInfo] = {}
    for node in shown.graph.node:
        if not node.name:
            continue
        out[node.name] = NodeInfo(
            created_by=created.get(node.name, "input model"),
            node_unit=units.get(node.name, "-"),
            in_ort=None if in_ort is None else (node.name, _qualified(node)) in in_ort,
        )
    return out


def ort_reference_model(
    model: str | os.PathLike[str], level: str, config: Mapping[str, str], disabled: Iterable[str]
) -> onnx.ModelProto:
    """ORT's optimized model at the same level, config and disabled list (for the ``in ORT`` overlay)."""
    return run_reference(model, level, config=config, disabled=list(disabled), capture_log=False).model


def model_explorer_node_data(overlay: Mapping[str, NodeInfo]) -> dict[str, dict[str, Any]]:
    """The overlays as Model Explorer's node data (``GraphNodeData`` JSON: ``results`` keyed by node id), one
    document per overlay, keyed by its title."""
    created = {name: {"value": info.created_by} for name, info in overlay.items()}
    units = {name: {"value": info.node_unit} for name, info in overlay.items()}
    docs: dict[str, dict[str, Any]] = {
        "qdqopt created by": {"results": created, "showExpandedSummaryOnGroupNode": True},
        "qdqopt node unit": {"results": units},
    }
    if any(info.in_ort is not None for info in overlay.values()):
        docs["qdqopt in ORT"] = {
            "results": {
                name: {"value": int(bool(info.in_ort)), "bgColor": "#b7e4c7" if info.in_ort else "#f4a6a6"}
                for name, info in overlay.items()
                if info.in_ort is not None
            },
            "thresholds": [{"value": 0, "bgColor": "#f4a6a6"}, {"value": 1, "bgColor": "#b7e4c7"}],
        }
    return docs


def write_node_data(overlay: Mapping[str, NodeInfo], folder: Path) -> list[Path]:
    """Write :func:`model_explorer_node_data`'s documents to ``folder`` (one ``.json`` each)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for title, doc in model_explorer_node_data(overlay).items():
        path = folder / f"{title.replace(' ', '_')}.json"
        path.write_text(json.dumps(doc, indent=1))
        paths.append(path)
    return paths


def missing_packages(viewer: str) -> list[str]:
    """The pip packages ``viewer`` needs that are not installed."""
    return [pip for module, pip in _NEEDS[viewer] if importlib.util.find_spec(module) is None]


def check_viewer(viewer: str) -> str | None:
    """One line saying what to install when ``viewer`` cannot run, else None."""
    if viewer not in _NEEDS:
        return f"unknown viewer {viewer!r}: {' or '.join(VIEWERS)}"
    missing = missing_packages(viewer)
    if not missing:
        return None
    return (
        f"{viewer} is not installed (missing {', '.join(missing)}): pip install 'qdqopt[view]'"
        f" or pip install {' '.join(missing)}"
    )


def open_viewer(
    viewer: str, path: Path, node_data: list[Path], *, port: int | None = None, browse: bool = True
) -> None:  # pragma: no cover - needs the optional extras and a browser
    """Serve ``path`` in the viewer until interrupted."""
    if viewer == "netron":
        import netron

        netron.start(str(path), address=port, browse=browse)
        netron.wait()
        return
    import model_explorer

    config = model_explorer.config().add_model_from_path(str(path))
    for data in node_data:
        config.add_node_data_from_path(str(data))
    kwargs: dict[str, Any] = {"extensions": ["model_explorer_onnx"], "no_open_in_browser": not browse}
    if port is not None:
        kwargs["port"] = port
    model_explorer.visualize_from_config(config, **kwargs)
