"""Drawings of the changed regions: laid out by Graphviz's ``dot``, drawn here as small inline SVG.

The layout is ``dot``'s layered layout, run by ``graphviz-pure`` (a pip-installed port of Graphviz 16 to Rust, one
self-contained program: no system Graphviz, no C library), every region of a report in one call (``-Tjson0``: the
positions only). The SVG is written here from those positions, so that it is compact (one ``<g>`` per node with
classes the page styles: ``added``, ``removed``, ``rewired``, ``context``) and carries the data the page and its
tests read (``data-op``, ``data-name``). ``docs`` of the README say why dot and not pyelk.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qdqopt.errors import QdqoptError
from qdqopt.report.collect import Region

__all__ = ["LayoutError", "dot_program", "draw_regions"]

PROGRAM = "graphviz-pure"
FONT = "Arimo"  # bundled by graphviz-pure; metric-compatible with Arial / Liberation Sans, which the page asks for
FONT_SIZE = 10.0
LINE = 12.0


class LayoutError(QdqoptError):
    """The layout program is missing or failed."""


def dot_program() -> str:
    """The ``graphviz-pure`` program: beside this Python (a virtual environment's ``bin``), or on ``PATH``."""
    beside = Path(sys.executable).parent / PROGRAM
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(PROGRAM)
    if found is None:
        raise LayoutError(f"{PROGRAM} not found (pip install graphviz-pure; it is one of qdqopt's dependencies)")
    return found


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _html_text(text: str) -> str:
    """Text inside a Graphviz HTML-like label (measured with the bold face for the op, as the SVG draws it)."""
    return html.escape(text, quote=False)


def _short(name: str, limit: int = 30) -> str:
    return name if len(name) <= limit else name[: limit // 2 - 1] + "\u2026" + name[-(limit // 2) :]


def _node_lines(op: str, name: str, lines: Sequence[str]) -> list[str]:
    return [op, _short(name) if name else "(no name)", *(line for line in lines if line)]


def _dot_source(key: str, region: Region) -> str:
    out = [
        f"digraph {_quote(key)} {{",
        "rankdir=TB; nodesep=0.2; ranksep=0.3;",
        f'node [shape=box fontname="{FONT}" fontsize={FONT_SIZE:g} margin="0.1,0.04"];',
        f'edge [fontname="{FONT}" fontsize=8 arrowsize=0.6];',
    ]
    for node in region.nodes:
        lines = _node_lines(node.op, node.name, node.lines)
        label = f"<B>{_html_text(lines[0])}</B>" + "".join(
            f'<BR/><FONT POINT-SIZE="9">{_html_text(line)}</FONT>' for line in lines[1:]
        )
        out.append(f"n{node.index} [label=<{label}>];")
    for i, (value, _, _) in enumerate(region.graph_inputs):
        out.append(f"i{i} [shape=ellipse fontsize=8 label={_quote(_short(value, 24))}];")
    for i, (value, _, _) in enumerate(region.graph_outputs):
        out.append(f"o{i} [shape=ellipse fontsize=8 label={_quote(_short(value, 24))}];")
    for edge in region.edges:
        label = f" [label={_quote(edge.type)}]" if edge.type else ""
        out.append(f"n{edge.src} -> n{edge.dst}{label};")
    for i, (_, index, type_) in enumerate(region.graph_inputs):
        out.append(f"i{i} -> n{index}" + (f" [label={_quote(type_)}]" if type_ else "") + ";")
    for i, (_, index, type_) in enumerate(region.graph_outputs):
        out.append(f"n{index} -> o{i}" + (f" [label={_quote(type_)}]" if type_ else "") + ";")
    out.append("}")
    return "\n".join(out)


@dataclass(frozen=True)
class _Layout:
    width: float
    height: float
    nodes: dict[str, tuple[float, float, float, float]]  # name -> centre x, centre y, width, height (points)
    edges: list[tuple[str, str, list[tuple[float, float]], tuple[float, float] | None, str, tuple[float, float]]]


def _points(text: str) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    end = None
    spline: list[tuple[float, float]] = []
    for part in text.split():
        if part.startswith("e,"):
            x, y = part[2:].split(",")
            end = (float(x), float(y))
        elif part.startswith("s,"):
            continue
        else:
            x, y = part.split(",")
            spline.append((float(x), float(y)))
    return spline, end


def _parse(doc: dict[str, object]) -> _Layout:
    bb = str(doc["bb"]).split(",")
    width, height = float(bb[2]), float(bb[3])
    nodes: dict[str, tuple[float, float, float, float]] = {}
    names: dict[int, str] = {}
    for obj in doc.get("objects", []) or []:  # type: ignore[attr-defined]
        x, y = (float(v) for v in obj["pos"].split(","))
        nodes[obj["name"]] = (x, height - y, float(obj["width"]) * 72, float(obj["height"]) * 72)
        names[obj["_gvid"]] = obj["name"]
    edges = []
    for edge in doc.get("edges", []) or []:  # type: ignore[attr-defined]
        spline, end = _points(edge["pos"])
        spline = [(x, height - y) for x, y in spline]
        end = (end[0], height - end[1]) if end is not None else None
        lp = (0.0, 0.0)
        if "lp" in edge:
            lx, ly = (float(v) for v in edge["lp"].split(","))
            lp = (lx, height - ly)
        edges.append((names[edge["tail"]], names[edge["head"]], spline, end, edge.get("label", ""), lp))
    return _Layout(width, height, nodes, edges)


def _layout_all(sources: Sequence[str]) -> list[_Layout]:
    if not sources:
        return []
    proc = subprocess.run(
        [dot_program(), "-Tjson0"], input="\n".join(sources), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise LayoutError(f"{PROGRAM} failed: {proc.stderr.strip()[:300]}")
    decoder = json.JSONDecoder()
    text, at = proc.stdout, 0
    out: list[_Layout] = []
    while len(out) < len(sources):
        while at < len(text) and text[at].isspace():
            at += 1
        doc, at = decoder.raw_decode(text, at)
        out.append(_parse(doc))
    return out


def _svg(layout: _Layout, region: Region, side: str) -> str:
    pad = 4.0
    w, h = layout.width + 2 * pad, layout.height + 2 * pad
    out = [
        f'<svg class="drawing {side}" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
        f'viewBox="{-pad:.0f} {-pad:.0f} {w:.0f} {h:.0f}">'
    ]
    for _, _, spline, end, label, lp in layout.edges:
        if not spline:
            continue
        d = f"M{spline[0][0]:.1f},{spline[0][1]:.1f}"
        for i in range(1, len(spline) - 2, 3):
            (ax, ay), (bx, by), (cx, cy) = spline[i : i + 3]
            d += f"C{ax:.1f},{ay:.1f} {bx:.1f},{by:.1f} {cx:.1f},{cy:.1f}"
        if end is not None:
            d += f"L{end[0]:.1f},{end[1]:.1f}"
        out.append(f'<path class="e" d="{d}"/>')
        if label:
            out.append(f'<text class="t" x="{lp[0]:.1f}" y="{lp[1] + 3:.1f}">{html.escape(label)}</text>')
    by_key = {f"n{n.index}": n for n in region.nodes}
    for key, (x, y, nw, nh) in layout.nodes.items():
        node = by_key.get(key)
        if node is None:  # a graph input or output
            value = key
            title = ""
            for i, (name, _, _) in enumerate(region.graph_inputs):
                if key == f"i{i}":
                    value, title = name, "graph input"
            for i, (name, _, _) in enumerate(region.graph_outputs):
                if key == f"o{i}":
                    value, title = name, "graph output"
            out.append(
                f'<g class="io"><title>{html.escape(title)} {html.escape(value)}</title>'
                f'<ellipse cx="{x:.1f}" cy="{y:.1f}" rx="{nw / 2:.1f}" ry="{nh / 2:.1f}"/>'
                f'<text x="{x:.1f}" y="{y + 3:.1f}">{html.escape(_short(value, 24))}</text></g>'
            )
            continue
        lines = _node_lines(node.op, node.name, node.lines)
        status = region.status[node.index]
        tip = "\n".join([f"{node.op} {node.name!r} ({status})", *node.tip])
        out.append(
            f'<g class="n {status}" data-op="{html.escape(node.op)}" data-name="{html.escape(node.name)}">'
            f"<title>{html.escape(tip)}</title>"
            f'<rect x="{x - nw / 2:.1f}" y="{y - nh / 2:.1f}" width="{nw:.1f}" height="{nh:.1f}" rx="4"/>'
        )
        spacing = min(LINE, (nh - 4) / len(lines))
        top = y - (len(lines) - 1) * spacing / 2 + FONT_SIZE * 0.35
        for i, line in enumerate(lines):
            cls = "op" if i == 0 else "nm" if i == 1 else "d"
            out.append(f'<text class="{cls}" x="{x:.1f}" y="{top + i * spacing:.1f}">{html.escape(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def draw_regions(regions: Sequence[tuple[Region, str]]) -> list[str]:
    """The SVG of each ``(region, side)`` (``side``: ``before`` or ``after``), laid out in one run of dot; should that
    run fail, each region on its own, and a region dot cannot lay out gets a line saying so instead of a drawing."""
    sources = [_dot_source(f"g{i}", region) for i, (region, _) in enumerate(regions)]
    try:
        layouts: list[_Layout | str] = list(_layout_all(sources))
    except LayoutError:
        layouts = []
        for source in sources:
            try:
                layouts.extend(_layout_all([source]))
            except LayoutError as exc:
                layouts.append(str(exc))
    return [
        _svg(layout, region, side) if isinstance(layout, _Layout) else f"<p class=bad>{html.escape(layout)}</p>"
        for layout, (region, side) in zip(layouts, regions, strict=True)
    ]
