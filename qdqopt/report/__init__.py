"""``qdqopt report``: one self-contained HTML page showing what ORT's passes do to a model, pass by pass.

* :mod:`qdqopt.report.collect`: each pass application's changed region, before and after (the ``on_pass`` hook);
* :mod:`qdqopt.report.data`: the five levels against the live ORT and the input model's numbers, the timeline and
  the ``explain`` tables, for each session setup (side by side);
* :mod:`qdqopt.report.draw`: the drawings (dot's layout, by graphviz-pure; SVG written here);
* :mod:`qdqopt.report.page`: the page (inline CSS, SVG and JS: it opens offline).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from qdqopt.levels import Level
from qdqopt.report.data import ReportData, collect_report
from qdqopt.report.draw import draw_regions
from qdqopt.report.page import Drawings, drawings_wanted, render_page

__all__ = ["ReportData", "build_report", "collect_report", "render_report"]


def render_report(data: ReportData) -> str:
    """The page for gathered data: every drawing laid out (one run of dot), then the HTML."""
    wanted = drawings_wanted(data.setups)
    regions = [(piece.before if key[3] == "before" else piece.after, key[3]) for key, piece in wanted]
    svgs: Drawings = dict(zip((key for key, _ in wanted), draw_regions(regions), strict=True))
    return render_page(data, svgs)


def build_report(
    model: str | os.PathLike[str],
    level: Level | int | str = "all",
    *,
    configs: Iterable[Mapping[str, str]] = ({},),
    disabled: Iterable[str] = (),
) -> str:
    """The report's HTML for ``model``: the timeline at ``level``, each config in ``configs`` side by side."""
    return render_report(collect_report(model, level, configs=configs, disabled=disabled))
