"""``qdqopt report`` in a real browser: headless Chromium loads the page, the test reads the DOM Chromium built and
a screenshot it painted.

For the bundled example (both targets side by side) and the corpus MobileNetV3 at ALL: one ``<section
class="application">`` per transformer application that modified the graph, in the trace's order, each with a
drawing whose node labels include every op the application added (both read from a fresh qdqopt run here, never
stored); the screenshot is not blank; the MobileNetV3 page is under 5 MB and the browser has it parsed, styled and
laid out in under 2 s. Where no Chromium is installed, the browser tests skip and say so; the page's structure is
then still checked from the HTML itself.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import html.parser
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from qdqopt.api import run
from qdqopt.cli import example_model, main
from qdqopt.graph import load_model
from qdqopt.report import collect_report, render_report
from qdqopt.report.collect import Collector
from tests.conftest import CORPUS

MOBILENETV3 = CORPUS / "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
MAX_BYTES = 5 * 2**20
MAX_OPEN_MS = 2000.0


def _browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    return None


needs_browser = pytest.mark.skipif(
    _browser() is None, reason="no Chromium found (Debian: apt-get install chromium; .ci/run installs it)"
)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    browser = _browser()
    assert browser is not None
    with tempfile.TemporaryDirectory(prefix="qdqopt-chromium-") as profile:
        return subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


@functools.cache
def _page(which: str) -> Path:
    """The report, written by the CLI as a user runs it."""
    out = Path(tempfile.mkdtemp(prefix="qdqopt-report-")) / f"{which}.html"
    if which == "example":
        args = ["report", str(example_model()), "-o", str(out), "--both-targets"]
    else:
        if not MOBILENETV3.is_file():
            pytest.skip(f"shared corpus not found at {CORPUS}")
        args = ["report", str(MOBILENETV3), "-o", str(out), "--level", "all"]
    assert main(args) == 0
    return out


def _runs(which: str) -> list[dict[str, str]]:
    return [{}, {"session.qdqisint8allowed": "1"}] if which == "example" else [{}]


def _model(which: str) -> Path:
    return example_model() if which.startswith("example") else MOBILENETV3


# ------------------------------------------------------------------------------------------------ the DOM, parsed
class _Dom(html.parser.HTMLParser):
    """The timeline sections of a page: per setup, each application section's pass, its added ops, and the op label
    of every node drawn ``added`` in its after-drawings."""

    def __init__(self) -> None:
        super().__init__()
        self.setups: list[list[dict[str, object]]] = []
        self._stack: list[tuple[str, set[str]]] = []
        self._section: dict[str, object] | None = None
        self._svg_side: str | None = None
        self._node: set[str] | None = None
        self._text_cls: str | None = None
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = set(a.get("class", "").split())
        if tag == "title" and not self._stack:
            self._in_title = True
        if tag == "div" and "timeline" in classes:
            self.setups.append([])
        if tag == "section" and "application" in classes:
            self._section = {"pass": a["data-pass"], "added_ops": a["data-added-ops"].split(), "drawn_added": set()}
            self.setups[-1].append(self._section)
        if tag == "svg" and "drawing" in classes:
            self._svg_side = "after" if "after" in classes else "before"
        if tag == "g" and "n" in classes:
            self._node = classes
        if tag == "text":
            self._text_cls = a.get("class", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        if tag == "svg":
            self._svg_side = None
        if tag == "g":
            self._node = None
        if tag == "text":
            self._text_cls = None
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        node = self._node
        in_after = self._section is not None and self._svg_side == "after" and node is not None
        if in_after and node is not None and self._section is not None and self._text_cls == "op" and "added" in node:
            drawn = self._section["drawn_added"]
            assert isinstance(drawn, set)
            drawn.add(data)


def _dom(text: str) -> _Dom:
    parser = _Dom()
    parser.feed(text)
    return parser


@functools.cache
def _modified(which: str) -> list[list[tuple[str, frozenset[str]]]]:
    """Per setup: each modifying application's pass and the ops it added (a fresh run, as the trace reports them)."""
    out = []
    for config in _runs(which):
        result = run(_model(which), "all", config=config)
        out.append(
            [
                (e.name, frozenset(op for op, n in e.op_delta.items() if n > 0))
                for e in result.pipeline.trace
                if e.modified
            ]
        )
    return out


def _check_sections(dom: _Dom, which: str) -> None:
    expected = _modified(which)
    assert len(dom.setups) == len(expected), "one timeline per setup"
    for sections, modified in zip(dom.setups, expected, strict=True):
        assert [s["pass"] for s in sections] == [name for name, _ in modified], (
            "one section per modifying pass application, in the trace's order"
        )
        for section, (name, added) in zip(sections, modified, strict=True):
            drawn = section["drawn_added"]
            assert isinstance(drawn, set)
            assert added <= drawn, f"{name}: the drawings lack the ops it added: {sorted(added - drawn)}"
            listed = section["added_ops"]
            assert isinstance(listed, list)
            assert added <= set(listed)


def _dump_dom(page: Path) -> str:
    proc = _chromium("--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# ------------------------------------------------------------------------------------------------ screenshots
def _png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit RGB or RGBA PNG (as Chromium writes screenshots) as an array of shape (height, width, channels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, [], b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        at += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6), f"unexpected PNG format: depth {depth}, color type {color}"
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:
            row = (line + prev) & 255
        elif kind == 1:  # Sub: each byte adds the byte bpp before it (per channel, a running sum)
            row = (np.cumsum(line.reshape(width, bpp), axis=0) & 255).reshape(-1)
        else:
            row = _unfilter_slow(int(kind), line.tolist(), prev.tolist(), bpp)
        out[y] = row
        prev = np.asarray(row, dtype=np.int32)
    return out.reshape(height, width, bpp)


def _unfilter_slow(kind: int, line: list[int], prev: list[int], bpp: int) -> np.ndarray:
    row = [0] * len(line)
    for i, value in enumerate(line):
        left = row[i - bpp] if i >= bpp else 0
        up = prev[i]
        if kind == 3:
            row[i] = (value + (left + up) // 2) & 255
        else:
            corner = prev[i - bpp] if i >= bpp else 0
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            row[i] = (value + pred) & 255
    return np.asarray(row, dtype=np.int32)


def _assert_not_blank(png: Path) -> None:
    pixels = _png_pixels(png.read_bytes())[:, :, :3]
    colours = collections.Counter(map(bytes, pixels.reshape(-1, 3)[::7]))
    _, most = colours.most_common(1)[0]
    share = 1 - most / sum(colours.values())
    assert len(colours) > 20 and share > 0.02, f"blank screenshot: {len(colours)} colours, {share:.1%} non-background"


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("which", ["example", "mobilenetv3"])
def test_page_structure(which: str) -> None:
    """The HTML as written: self-contained (nothing fetched), one section per modifying application."""
    text = _page(which).read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text), "the page must not fetch anything"
    assert "<script src" not in text and "<link" not in text
    _check_sections(_dom(text), which)


@needs_browser
@pytest.mark.parametrize("which", ["example", "mobilenetv3"])
def test_in_chromium(which: str, tmp_path: Path) -> None:
    """Chromium's DOM: one section per modifying application, drawings with the ops each added; a screenshot that is
    not blank."""
    page = _page(which)
    dom = _dom(_dump_dom(page))
    _check_sections(dom, which)
    shot = tmp_path / f"{which}.png"
    proc = _chromium(f"--screenshot={shot}", "--window-size=1280,1400", page.as_uri())
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    _assert_not_blank(shot)


@needs_browser
def test_mobilenetv3_page_is_small_and_opens_fast(tmp_path: Path) -> None:
    """Under 5 MB; parsed, styled and laid out by Chromium in under 2 s (measured in the page, from navigation start
    to a forced layout after the load event: the browser's own start is not the page's cost). Then one click on the
    page's button opens every fold of passes that did nothing."""
    page = _page("mobilenetv3")
    assert page.stat().st_size < MAX_BYTES, f"{page.stat().st_size} bytes"
    probe = (
        "<script>addEventListener('load',function(){document.body.offsetHeight;var t=performance.now();"
        "var folds=document.querySelectorAll('details.noop');document.querySelector('button[onclick^=toggleNoop]')"
        ".click();var open=document.querySelectorAll('details.noop[open]').length;"
        "document.title='opened '+t.toFixed(0)+' folds '+open+' of '+folds.length})</script>"
    )
    timed = tmp_path / "timed.html"
    timed.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    times = []
    for _ in range(3):  # the best of three: the machine is shared, and a busy moment is not the page's cost
        dom = _dom(_dump_dom(timed))
        found = re.search(r"opened (\d+) folds (\d+) of (\d+)", dom.title)
        assert found, f"the page did not finish loading: title {dom.title!r}"
        opened, folds = int(found.group(2)), int(found.group(3))
        assert folds > 0 and opened == folds, f"one click opens {opened} of {folds} folds"
        times.append(float(found.group(1)))
        if times[-1] < MAX_OPEN_MS:
            break
    assert min(times) < MAX_OPEN_MS, f"opened in {times} ms"


def test_sections_fail_when_a_drawing_loses_the_added_ops() -> None:
    """Mutation: a page whose drawings lose the nodes a pass added (their status wiped) fails the check."""
    data = collect_report(example_model(), "all")
    for app in data.setups[0].applications:
        for piece in app.pieces:
            piece.after = dataclasses.replace(piece.after, status=dict.fromkeys(piece.after.status, "context"))
    with pytest.raises(AssertionError, match="lack the ops"):
        _check_sections(_dom(render_report(data)), "example-default")


def test_sections_fail_when_an_application_is_missing() -> None:
    """Mutation: a page that drops one modifying application (a collector losing track) fails the check."""
    data = collect_report(example_model(), "all")
    setup = data.setups[0]
    first = next(i for i, e in enumerate(setup.trace) if e.modified)
    setup.trace[first].modified = False
    with pytest.raises(AssertionError, match="one section per modifying"):
        _check_sections(_dom(render_report(data)), "example-default")


def test_collector_follows_the_trace() -> None:
    """The collector sees every application, in the trace's order, and the run is the same with it as without."""
    collector = Collector(load_model(example_model()).graph)
    with_hook = run(example_model(), "all", on_pass=collector)
    without = run(example_model(), "all")
    assert [a.name for a in collector.applications] == [e.name for e in with_hook.pipeline.trace]
    assert with_hook.pipeline.ort_lines() == without.pipeline.ort_lines()
    assert with_hook.model.SerializeToString() == without.model.SerializeToString()
    changed = [a for a, e in zip(collector.applications, with_hook.pipeline.trace, strict=True) if e.modified]
    assert changed and all(a.pieces for a in changed)


def test_setups_side_by_side() -> None:
    """``--config`` once per setup (entries comma-separated, ``default`` for none); ``--both-targets`` adds the
    default and ``session.qdqisint8allowed=1``; a setup asked twice is shown once."""
    from qdqopt.cli import _parser, _report_setups

    def setups(*args: str) -> list[dict[str, str]]:
        return _report_setups(_parser().parse_args(["report", "m.onnx", "-o", "r.html", *args]))

    assert setups() == [{}]
    assert setups("--config", "default", "--config", "session.qdqisint8allowed=1") == [
        {},
        {"session.qdqisint8allowed": "1"},
    ]
    assert setups("--config", "session.qdqisint8allowed=1,session.disable_quant_qdq=0") == [
        {"session.qdqisint8allowed": "1", "session.disable_quant_qdq": "0"}
    ]
    assert setups("--both-targets", "--config", "default") == [{}, {"session.qdqisint8allowed": "1"}]


@needs_browser
def test_a_blank_screenshot_is_caught(tmp_path: Path) -> None:
    """Mutation: the screenshot of an empty page fails the not-blank check."""
    empty = tmp_path / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body style='background:#fafbfc'></body></html>", encoding="utf-8")
    shot = tmp_path / "empty.png"
    proc = _chromium(f"--screenshot={shot}", "--window-size=1280,1400", empty.as_uri())
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    with pytest.raises(AssertionError, match="blank screenshot"):
        _assert_not_blank(shot)


def test_a_node_without_a_name_is_drawn() -> None:
    """ORT's nodes may have no name: the drawing says so (dot rejects an empty line in a label)."""
    from qdqopt.report.collect import NodeRecord, Region, RegionEdge
    from qdqopt.report.draw import draw_regions

    def record(index: int, name: str, op: str, lines: tuple[str, ...]) -> NodeRecord:
        return NodeRecord(index, name, op, "", (), (), lines, (), (), False)

    region = Region(
        (record(1, "", "Softmax", ("",)), record(2, "b", "Cast", ())),
        (RegionEdge(1, 2, "v", "f16[2]"),),
        {1: "added", 2: "context"},
    )
    (svg,) = draw_regions([(region, "after")])
    assert svg.startswith("<svg") and "(no name)" in svg and 'data-op="Softmax"' in svg
