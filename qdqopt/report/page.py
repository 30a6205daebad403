"""The report as one self-contained HTML page: inline CSS, inline SVG, a few lines of inline JS, nothing fetched.

Sections: the op counts of the input and of each level (each setup side by side); qdqopt against the live ORT at
each level with the numerics against the input model; per setup, the timeline of the asked level (each modifying
pass application a ``<section class="application">`` with ORT's log line, the op delta, the nodes added, removed and
rewired, and the drawings before and after; the passes that modified nothing folded into one ``<details>`` per step,
and one button that opens them all); the ``explain`` tables.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from qdqopt import __version__
from qdqopt.levels import Level
from qdqopt.manager import TraceEntry
from qdqopt.report.collect import Application, Piece
from qdqopt.report.data import LevelResult, ReportData, SetupResult

__all__ = ["Drawings", "drawings_wanted", "render_page"]

#: each drawing's SVG by (setup, application number, piece, side)
Drawings = dict[tuple[int, int, int, str], str]

#: pieces drawn open per application; the others are behind one click
OPEN_PIECES = 6
#: names listed per piece before "and N more"
PLACES = 12
#: node names listed per kind (added, removed, rewired) before "and N more"
LISTED = 60

_CSS = """
body{font:13px/1.4 Arimo,"Liberation Sans",Arial,sans-serif;margin:0;color:#1d232b;background:#fafbfc}
header{background:#20303f;color:#fff;padding:12px 20px}header h1{margin:0;font-size:19px}
header p{margin:4px 0 0;color:#c9d4de}nav a{color:#9fd0ff;margin-right:14px}
main{padding:8px 20px 40px;max-width:1500px}h2{margin:26px 0 8px;border-bottom:2px solid #20303f}
h3{margin:18px 0 6px;font-size:14px;color:#20303f}
table{border-collapse:collapse;margin:6px 0;background:#fff}td,th{border:1px solid #d5dbe1;padding:2px 6px;
vertical-align:top}th{background:#eef2f6;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.up{background:#e3f6e3}td.down{background:#fde8e8}td.ortdiff{outline:2px solid #d9822b}
.ok{color:#217a21;font-weight:bold}.bad{color:#b42318;font-weight:bold}.muted{color:#6b7785}
section.application{background:#fff;border:1px solid #d5dbe1;border-left:5px solid #3b82c4;margin:8px 0;
padding:6px 10px}section.application h4{margin:0;font:600 13px ui-monospace,monospace}
.delta span{display:inline-block;margin-right:8px;font-family:ui-monospace,monospace}
.delta .p{color:#217a21}.delta .m{color:#b42318}
.pair{display:flex;gap:10px;align-items:flex-start;overflow-x:auto}
figure{margin:4px 0;border:1px solid #e3e7eb;background:#fff;padding:2px;flex:none;max-width:100%;overflow:auto;
max-height:720px}figcaption{font-size:11px;color:#6b7785}
svg.drawing text{font:10px Arimo,"Liberation Sans",Arial,sans-serif;text-anchor:middle}
svg.drawing text.op{font-weight:bold}svg.drawing text.nm{fill:#56606b;font-size:9px}
svg.drawing text.d{fill:#5b3d00;font-size:9px}svg.drawing text.t{font-size:8px;fill:#3d5a80}
svg.drawing path.e{fill:none;stroke:#66727e;stroke-width:1;marker-end:url(#arrow)}
svg.drawing g.n rect{fill:#f4f6f8;stroke:#8895a2}svg.drawing g.added rect{fill:#d9f5d9;stroke:#217a21;
stroke-width:2}svg.drawing g.removed rect{fill:#fde2e2;stroke:#b42318;stroke-width:2;stroke-dasharray:4 2}
svg.drawing g.rewired rect{fill:#fff1c7;stroke:#b7791f;stroke-width:2}
svg.drawing g.io ellipse{fill:#fff;stroke:#8895a2}
svg.drawing g.also-removed rect{fill:#fdf1f1;stroke:#d79a94;stroke-dasharray:4 2}
svg.drawing g.also-added rect{fill:#eefaee;stroke:#8cc58c}svg.drawing g.also-rewired rect{fill:#fff8e3}
details.noop{margin:4px 0 4px 6px;color:#56606b}details.noop li{font-family:ui-monospace,monospace;font-size:12px}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border:1px solid}
.legend .added{background:#d9f5d9;border-color:#217a21}.legend .removed{background:#fde2e2;border-color:#b42318}
.legend .rewired{background:#fff1c7;border-color:#b7791f}.legend .context{background:#f4f6f8;border-color:#8895a2}
button{margin:4px 6px 4px 0}ul.names{margin:2px 0;padding-left:20px;font-family:ui-monospace,monospace;
font-size:12px}tr.norule{display:none}body.show-norule tr.norule{display:table-row}
"""

_JS = """
function toggleNoop(btn){var all=document.querySelectorAll('details.noop');var open=btn.dataset.open!=='1';
all.forEach(function(d){d.open=open});btn.dataset.open=open?'1':'0';
btn.textContent=open?'hide the passes that did not modify the graph':'show the passes that did not modify the graph'}
function toggleNoRule(btn){document.body.classList.toggle('show-norule')}
"""

_ARROW = (
    '<svg width="0" height="0" style="position:absolute"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" '
    'refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
    'fill="#66727e"/></marker></defs></svg>'
)


def _e(text: object) -> str:
    return html.escape(str(text))


def _stage_label(entry: TraceEntry) -> str:
    if entry.stage in ("pre", "post"):
        return {"pre": "before Level1 (EnsureUniqueDQForNodeUnit)", "post": "after the optimization loop"}[entry.stage]
    if entry.stage == "loop":
        return "optimization loop: InsertCastTransformer"
    return f"{entry.stage} (TransformerLevel {entry.stage[1:]}) step {entry.step + 1}"


# --------------------------------------------------------------------------------------------------- op counts
def _op_table(data: ReportData) -> str:
    setups = data.setups
    ops: dict[str, None] = dict.fromkeys(sorted(data.inputs, key=lambda k: (-data.inputs[k], k)))
    for setup in setups:
        for result in setup.levels:
            ops.update(dict.fromkeys(sorted(result.ours)))
    head = ["<tr><th rowspan=2>op</th><th rowspan=2>input</th>"]
    head += [f"<th colspan={len(Level)}>{_e(s.label)}</th>" for s in setups]
    head.append("</tr><tr>")
    head += [f"<th>{_e(lvl.name.lower())}</th>" for _ in setups for lvl in Level]
    head.append("</tr>")
    rows = []
    for op in ops:
        cells = [f"<td>{_e(op)}</td><td class=n>{data.inputs.get(op, 0) or ''}</td>"]
        for setup in setups:
            previous = data.inputs.get(op, 0)
            for result in setup.levels:
                if result.error:
                    cells.append("<td class=n>-</td>")
                    continue
                count = result.ours.get(op, 0)
                cls = "n up" if count > previous else "n down" if count < previous else "n"
                title = ""
                if result.ort is not None and result.ort.get(op, 0) != count:
                    cls += " ortdiff"
                    title = f' title="ORT: {result.ort.get(op, 0)}"'
                cells.append(f"<td class='{cls}'{title}>{count or ''}</td>")
                previous = count
        rows.append("<tr>" + "".join(cells) + "</tr>")
    totals = [f"<td><b>nodes</b></td><td class=n>{sum(data.inputs.values())}</td>"]
    for setup in setups:
        totals += [f"<td class=n>{sum(r.ours.values()) if not r.error else '-'}</td>" for r in setup.levels]
    rows.append("<tr>" + "".join(totals) + "</tr>")
    note = (
        "<p class=muted>qdqopt's output at each level (the main graph). Green: more than the level before (the "
        "input for disable_all), red: fewer. An orange frame marks a count ORT's own output differs in (hover for "
        "ORT's).</p>"
    )
    return f"<table id=op-table>{''.join(head)}{''.join(rows)}</table>{note}"


# --------------------------------------------------------------------------------------------------- comparison
def _sqnr(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "\u221e (identical)" if value > 0 else "-\u221e"
    return f"{value:.1f} dB"


def _compare_table(setup: SetupResult) -> str:
    rows = [
        "<tr><th>level</th><th>tier</th><th>N S X P</th><th>trace</th><th>max |\u0394| vs input</th>"
        "<th>SQNR vs input</th><th>how ORT was run, notes, first differences</th></tr>"
    ]
    for result in setup.levels:
        rows.append(_compare_row(result))
    return f"<table class=compare>{''.join(rows)}</table>"


def _compare_row(result: LevelResult) -> str:
    name = _e(result.level.ort_name)
    if result.error:
        return f"<tr><td>{name}</td><td colspan=6 class=bad>{_e(result.error)}</td></tr>"
    tier_cls = "ok" if result.tier in ("X", "P") else "bad"
    flags = " ".join(f"{t}:{_e(f)}" for t, f in result.flags.items())
    trace = "<span class=ok>same</span>" if result.trace_matches else "<span class=bad>different</span>"
    numerics = result.numerics
    if numerics is None:
        abs_text, sqnr_text = "-", "-"
    elif numerics.error:
        abs_text, sqnr_text = _e(numerics.error), "-"
    else:
        abs_text = f"{numerics.max_abs:.6g}" if numerics.max_abs is not None else "-"
        sqnr_text = _sqnr(numerics.sqnr_db)
    lines = [result.header, *result.notes]
    more = ""
    if result.differences:
        listed = "".join(f"<li>{_e(d)}</li>" for d in result.differences[:8])
        more = f"<details><summary>{len(result.differences)} first difference(s)</summary><ul>{listed}</ul></details>"
    notes = "<br>".join(_e(line) for line in lines if line)
    return (
        f"<tr class=level data-level='{name}' data-tier='{_e(result.tier)}'><td>{name}</td>"
        f"<td class={tier_cls}>{_e(result.tier)}</td><td>{flags}</td><td>{trace}</td><td class=n>{abs_text}</td>"
        f"<td class=n>{sqnr_text}</td><td>{notes}{more}</td></tr>"
    )


# --------------------------------------------------------------------------------------------------- timeline
def _delta(entry: TraceEntry) -> str:
    parts = [f"<span class={'p' if v > 0 else 'm'}>{_e(k)} {v:+d}</span>" for k, v in entry.op_delta.items()]
    return f"<p class=delta>{''.join(parts) or '<span class=muted>no op count changed</span>'}</p>"


def _names(title: str, items: Sequence[tuple[int, str, str]]) -> str:
    if not items:
        return ""
    listed = "".join(f"<li>{_e(op)} {_e(name)!s}</li>" for _, name, op in items[:LISTED])
    more = f"<li class=muted>and {len(items) - LISTED} more</li>" if len(items) > LISTED else ""
    return f"<div><b>{title}</b><ul class=names>{listed}{more}</ul></div>"


def _piece(piece: Piece, before: str, after: str) -> str:
    places = piece.places
    where = ", ".join(_e(p) for p in places[:PLACES])
    if len(places) > PLACES:
        where += f" and {len(places) - PLACES} more"
    count = f"{len(places)} places of this shape" if len(places) > 1 else "at"
    for side, region in (("before", piece.before), ("after", piece.after)):
        if region.cut_from:
            where += f" (the drawing {side} shows the first {len(region.nodes)} of its {region.cut_from} nodes)"
    return (
        f"<div class=piece data-places='{len(places)}'><p class=muted>{count}: {where}</p><div class=pair>"
        f"<figure>{before}<figcaption>before</figcaption></figure>"
        f"<figure>{after}<figcaption>after</figcaption></figure></div></div>"
    )


def _application(entry: TraceEntry, app: Application, svgs: Drawings, setup: int, number: int) -> str:
    changes = app.changes
    added = changes.added if changes else ()
    removed = changes.removed if changes else ()
    rewired = changes.rewired if changes else ()
    added_ops = sorted({op for _, _, op in added})
    summary = f"{len(added)} node(s) added, {len(removed)} removed, {len(rewired)} rewired"
    lists = _names("added", added) + _names("removed", removed) + _names("rewired", rewired)
    pieces = []
    for k, piece in enumerate(app.pieces):
        pieces.append(_piece(piece, svgs[(setup, number, k, "before")], svgs[(setup, number, k, "after")]))
    shown = "".join(pieces[:OPEN_PIECES])
    if len(pieces) > OPEN_PIECES:
        shown += (
            f"<details><summary>{len(pieces) - OPEN_PIECES} more rewrites of other shapes</summary>"
            f"{''.join(pieces[OPEN_PIECES:])}</details>"
        )
    missing = ""
    if app.not_drawn:
        missing = f"<p class=muted>{app.not_drawn} touched node(s) inside subgraphs are not drawn.</p>"
    plugin = " <span class=muted>[plugin: not ORT's]</span>" if entry.plugin else ""
    return (
        f"<section class=application id=app-{setup}-{number} data-pass='{_e(entry.name)}' "
        f"data-stage='{_e(entry.stage)}' data-step='{entry.step + 1}' data-added-ops='{_e(' '.join(added_ops))}'>"
        f"<h4>{_e(entry.ort_line())}{plugin}</h4>{_delta(entry)}"
        f"<details><summary>{summary}</summary><div class=pair>{lists}</div></details>"
        f"{shown}{missing}</section>"
    )


def _noop(entries: Sequence[TraceEntry]) -> str:
    if not entries:
        return ""
    items = []
    for entry in entries:
        note = "" if entry.implemented else " (not implemented in qdqopt: skipped)"
        if entry.missing_rules:
            note = f" (rules not implemented, skipped: {', '.join(entry.missing_rules)})"
        items.append(f"<li>{_e(entry.ort_line())}{_e(note)}</li>")
    return (
        f"<details class=noop><summary>{len(entries)} pass(es) did not modify the graph</summary>"
        f"<ul>{''.join(items)}</ul></details>"
    )


def _timeline(setup: SetupResult, svgs: Drawings, index: int) -> str:
    if setup.error:
        return f"<p class=bad>{_e(setup.error)}</p>"
    out: list[str] = []
    group: str | None = None
    idle: list[TraceEntry] = []
    modified = 0
    for number, (entry, app) in enumerate(zip(setup.trace, setup.applications, strict=True)):
        label = _stage_label(entry)
        if label != group:
            out.append(_noop(idle))
            idle = []
            out.append(f"<h3>{_e(label)}</h3>")
            group = label
        if entry.modified:
            out.append(_noop(idle))
            idle = []
            out.append(_application(entry, app, svgs, index, number))
            modified += 1
        else:
            idle.append(entry)
    out.append(_noop(idle))
    head = (
        f"<p>{len(setup.trace)} transformer applications, {modified} of which modified the graph. "
        "<button onclick='toggleNoop(this)'>show the passes that did not modify the graph</button></p>"
        "<p class=legend><span class=added>added</span><span class=removed>removed</span>"
        "<span class=rewired>rewired</span><span class=context>one ring of neighbours</span>(pale: changed by the "
        "same application elsewhere) "
        "<span style='border:0'>Edges carry the tensor's type; a Q or DQ shows its scale and zero point; hover a "
        "node for its attributes. Rewrites of the same shape are drawn once.</span></p>"
    )
    extra = ""
    if setup.unimplemented:
        extra += f"<p class=muted>Not implemented in qdqopt (ORT runs them): {_e(', '.join(setup.unimplemented))}</p>"
    for name, reason in setup.unsupported.items():
        extra += f"<p class=muted>{_e(name)} not run: qdqopt does not cover this model yet ({_e(reason)})</p>"
    return head + extra + "".join(out)


# --------------------------------------------------------------------------------------------------- explain
def _explain(setup: SetupResult) -> str:
    out = []
    if setup.units is None:
        out.append(f"<p class=muted>{_e(setup.units_note)}</p>")
    else:
        counts: dict[str, int] = {}
        rows = [
            "<tr><th>outcome</th><th>node</th><th>op</th><th>rule</th><th>became</th><th>DQ</th><th>Q</th>"
            "<th>why not</th></tr>"
        ]
        for unit in setup.units:
            counts[unit.outcome] = counts.get(unit.outcome, 0) + 1
            cls = " class=norule" if unit.outcome == "no rule" else ""
            reasons = "<br>".join(_e(r) for r in unit.reasons)
            rows.append(
                f"<tr{cls} data-outcome='{_e(unit.outcome)}'><td>{_e(unit.outcome)}</td><td>{_e(unit.target)}</td>"
                f"<td>{_e(unit.op_type)}</td><td>{_e(unit.rule or '')}</td><td>{_e(unit.result_op or '')}</td>"
                f"<td>{_e(', '.join(unit.dq_nodes))}</td><td>{_e(', '.join(unit.q_nodes))}</td><td>{reasons}</td></tr>"
            )
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        out.append(
            f"<p>QDQ node units as {_e('QDQSelectorActionTransformer')} sees them at its first application: "
            f"{_e(summary)}. <button onclick='toggleNoRule(this)'>show/hide the nodes no rule applies to</button></p>"
            f"<table class=explain>{''.join(rows)}</table>"
        )
    if setup.layout is None:
        out.append(f"<p class=muted>{_e(setup.layout_note)}</p>")
    else:
        rows = ["<tr><th>layout</th><th>node</th><th>op</th><th>became, or why it stays NCHW</th></tr>"]
        for item in setup.layout:
            verdict = "NHWC" if item.outcome == "nhwc" else "NCHW"
            rows.append(
                f"<tr><td>{verdict}</td><td>{_e(item.name)}</td><td>{_e(item.op)}</td><td>{_e(item.detail)}</td></tr>"
            )
        out.append(
            f"<p>Convs, pools and Resizes as NhwcTransformer sees them:</p><table class=layout>{''.join(rows)}</table>"
        )
    return "".join(out)


# --------------------------------------------------------------------------------------------------- page
def render_page(data: ReportData, svgs: Drawings) -> str:
    """The whole page, with the drawings ``svgs``."""
    setups = data.setups
    nav = ['<a href="#ops">op counts</a>', '<a href="#compare">against ORT</a>']
    for i, setup in enumerate(setups):
        nav.append(f'<a href="#timeline-{i}">timeline ({_e(setup.label)})</a>')
        nav.append(f'<a href="#explain-{i}">explain ({_e(setup.label)})</a>')
    body = [
        f"<header><h1>qdqopt report: {_e(data.model.rsplit('/', 1)[-1])}</h1>",
        f"<p>{_e(data.model)} ({data.nodes} nodes) \u00b7 timeline at {_e(data.level.ort_name)}"
        + (f" \u00b7 disabled: {_e(', '.join(data.disabled))}" if data.disabled else "")
        + f" \u00b7 qdqopt {_e(__version__)} against ONNX Runtime 1.32 (CPU EP)</p>",
        f"<nav>{''.join(nav)}</nav></header><main>{_ARROW}",
        "<h2 id=ops>Op counts: the input and each level</h2>",
        _op_table(data),
        "<h2 id=compare>qdqopt against the live ORT, and each level's numerics against the input model</h2>",
        "<p class=muted>Tiers: N same numbers, S same structure, X same names and order, P same bytes. Numerics: "
        "each level's output and the input model run by ORT's CPU EP (no optimization) on the same seeded inputs; "
        "worst output.</p>",
    ]
    for setup in setups:
        body.append(f"<h3>{_e(setup.label)}</h3>{_compare_table(setup)}")
    for i, setup in enumerate(setups):
        body.append(f"<h2 id=timeline-{i}>Timeline at {_e(data.level.ort_name)}: {_e(setup.label)}</h2>")
        body.append(f"<div class=timeline data-setup='{i}'>{_timeline(setup, svgs, i)}</div>")
    for i, setup in enumerate(setups):
        body.append(f"<h2 id=explain-{i}>Explain: {_e(setup.label)}</h2>{_explain(setup)}")
    body.append("</main>")
    title = f"qdqopt report: {data.model.rsplit('/', 1)[-1]}"
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
        f"<meta name=viewport content='width=device-width'><style>{_CSS}</style><script>{_JS}</script></head>"
        f"<body>{''.join(body)}</body></html>"
    )


def drawings_wanted(setups: Iterable[SetupResult]) -> list[tuple[tuple[int, int, int, str], Piece]]:
    """Every drawing the page shows: its key in :data:`Drawings`, and its piece."""
    out = []
    for i, setup in enumerate(setups):
        for number, (entry, app) in enumerate(zip(setup.trace, setup.applications, strict=True)):
            if not entry.modified:
                continue
            for k, piece in enumerate(app.pieces):
                out.append(((i, number, k, "before"), piece))
                out.append(((i, number, k, "after"), piece))
    return out
