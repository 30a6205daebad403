"""The ``qdqopt`` command line.

Commands::

    qdqopt optimize IN -o OUT [--level L] [--disable NAME[,NAME...]]... [--config KEY=VALUE]... [--plugin REF]...
                    [--dump-dir DIR] [--stop-after PASS[:N]]
    qdqopt passes [--level L] [--config KEY=VALUE]... [--plugin REF]... [--json]
    qdqopt trace IN [--level L] [--disable NAME]... [--config KEY=VALUE]... [--ort [--isolate]] [--verbose [--why]]
                 [--times] [--json]
    qdqopt diff IN [--level L | --all-levels] [--disable NAME]... [--config KEY=VALUE]... [--isolate] [--json]
    qdqopt explain IN [--level L] [--disable NAME]... [--config KEY=VALUE]... [--all] [--pass NAME] [--json]
    qdqopt report IN -o OUT.html [--level L] [--disable NAME]... [--config KEY=VALUE[,KEY=VALUE...]]... [--both-targets]
    qdqopt view IN [--app netron|model-explorer] [--level L [--stop-after PASS[:N]] [--disable ...] [--config ...]]
    qdqopt bisect IN [--level L] [--disable NAME]... [--config KEY=VALUE]... [--tier T | --numerics TOL [--seed S]]
    qdqopt demo [--isolate] [--no-report]
    qdqopt fuzz [--seed S] [--budget N] [--jobs J] [--shard I/N] [--out DIR] [--level L]... [--no-shrink]

``--dump-dir`` and ``--stop-after``: :mod:`qdqopt.dumps`; ``--json``: :mod:`qdqopt.jsonout` and docs/json.md;
``view``: :mod:`qdqopt.overlay`; ``bisect``: :mod:`qdqopt.bisect`; ``report``: :mod:`qdqopt.report`.

``diff``, ``trace --ort`` and ``demo`` compare with ORT as a user runs it: only the ``--disable`` list and the
``--config`` entries given are applied, on both sides. A pass qdqopt lacks, or one that declines the model, does not
run on qdqopt's side, and the output says so (and whether ORT's log shows it modifying the model). ``--isolate``
disables those passes on both sides instead, to isolate what qdqopt reproduces; every report then says it is not a
fidelity result.

``--plugin module:Class`` (or ``file.py:Class``, or an installed entry point's name; repeatable) slots a pass of
one's own into ORT's pipeline at the place it declares (:mod:`qdqopt.plugins`), on ``optimize``, ``passes``,
``trace``, ``diff`` and ``explain``. ``passes`` and ``trace`` mark it as not ORT's; ``--disable`` takes its name;
comparisons with ORT name the active ones and leave their trace lines out of the line-by-line check.

Bad input (a missing file, a file that is not ONNX, a model ORT rejects, an unknown level) prints one line on
stderr and exits with code 2. Warnings (an unknown pass name or config key, which ORT would silently ignore) go to
stderr too. Output files are written atomically; the input file is never modified.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from qdqopt import __version__, build, events, jsonout, reference
from qdqopt.api import run
from qdqopt.compare import ISOLATION, compare_level, run_paired
from qdqopt.config import SessionConfig
from qdqopt.dumps import run_with_dumps
from qdqopt.errors import QdqoptError, UsageError
from qdqopt.graph.model import read_model_proto
from qdqopt.graph.model import write_atomic as _write_atomic
from qdqopt.levels import Level, parse_level
from qdqopt.manager import PipelineResult
from qdqopt.plugins import installed_plugins, resolve_plugins
from qdqopt.reference import ReferenceRun, check_accepted_in_child
from qdqopt.registry import Plugin
from qdqopt.target import Target

if TYPE_CHECKING:
    from qdqopt.explain import FusionSection
    from qdqopt.passes.qdq_selector_action import UnitReport

__all__ = ["main"]

EXIT_DIFF = 1
EXIT_USAGE = 2


def _config(items: Sequence[str] | None) -> dict[str, str]:
    return SessionConfig.from_mapping(list(items or ())).as_dict()


def _plugins(args: argparse.Namespace) -> tuple[Plugin, ...]:
    """The ``--plugin`` passes, loaded and placed (none when the command has no such option)."""
    return resolve_plugins(getattr(args, "plugin", None) or ())


def _op_counts(model: onnx.ModelProto) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for node in model.graph.node:
        counts[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"] += 1
    return counts


def _op_table(before: onnx.ModelProto, after: onnx.ModelProto) -> list[str]:
    a, b = _op_counts(before), _op_counts(after)
    ops = sorted(set(a) | set(b), key=lambda k: (-a.get(k, 0), k))
    width = max([len(k) for k in ops] + [2])
    lines = [f"  {'op':<{width}}  {'in':>5}  {'out':>5}"]
    for op in ops:
        mark = "" if a[op] == b[op] else f"  ({b[op] - a[op]:+d})"
        lines.append(f"  {op:<{width}}  {a[op]:>5}  {b[op]:>5}{mark}")
    return lines


# ------------------------------------------------------------------------------------------------------ commands
def cmd_optimize(args: argparse.Namespace) -> int:
    source = Path(args.input)
    out = Path(args.output)
    if source.exists() and out.exists() and source.resolve() == out.resolve():
        raise QdqoptError(f"{out}: refusing to overwrite the input model")
    before, _ = read_model_proto(source, initializers=False)  # for the op table: the weights are not needed
    check_accepted_in_child(source)
    plugins = _plugins(args)
    dumped = run_with_dumps(
        source,
        args.level,
        dump_dir=args.dump_dir,
        stop_after=args.stop_after,
        disabled=args.disable or (),
        config=_config(args.config),
        plugins=plugins,
    )
    result = dumped.result
    _write_atomic(result.loaded, out)
    after, _ = read_model_proto(out, initializers=False)
    print(f"qdqopt {__version__}: {source} -> {out} at {result.level.ort_name}")
    if dumped.stopped_after is not None:
        entry = dumped.stopped_after
        print(f"stopped after {args.stop_after} ({entry.stage} step {entry.step + 1}): the output is that model")
    if args.dump_dir is not None:
        print(f"{len(dumped.dumps)} dumps (one per application that modified the graph) in {args.dump_dir}")
    print("\n".join(_op_table(before, after)))
    fired = [e for e in result.pipeline.trace if e.modified]
    print(f"passes that modified the graph: {', '.join(dict.fromkeys(e.name for e in fired)) or 'none'}")
    if result.plugins:
        print(f"plugins that ran (passes of your own, not ORT's): {', '.join(result.plugins)}")
    if result.unimplemented:
        print(f"not implemented in qdqopt (skipped; ORT would run them): {', '.join(result.unimplemented)}")
    for name, reason in result.unsupported.items():
        print(f"not run on this model (qdqopt does not cover it yet; ORT would run it): {name}: {reason}")
    return 0


def cmd_passes(args: argparse.Namespace) -> int:
    level = parse_level(args.level)
    cfg = SessionConfig.from_mapping(list(args.config or ()))
    target = Target.detect()
    plugins = _plugins(args)
    rows = jsonout.pass_rows(level, cfg, target, plugins, include_all=args.all)
    if getattr(args, "json", False):
        return _print_json(jsonout.passes_doc(level, cfg, target, rows))
    print(
        f"ORT 1.32 CPU passes at {level.ort_name} (target {target.machine}, int8 allowed: "
        f"{target.with_config(cfg).int8_allowed}, NCHWc block {target.nchwc_block_size})"
    )
    print(f"  {'#':>3}  {'name':<42} {'level':<9} {'once':<5} {'impl':<5} gated by")
    legend = "  impl: yes | no (skipped; ORT runs it: diff reports it, --isolate disables it on both sides) | part"
    legend += " (declines, with a reason, what it does not cover yet)"
    if plugins:
        legend += " | plugin (a pass of your own, not ORT's: ORT never runs it)"
    for row in rows:
        registered = row["registered"]
        gate = row["gate"] + ("" if registered else "  [not registered for this session]")
        once = "yes" if row["apply_once"] else ""
        print(f"  {row['index']:>3}  {row['name']:<42} {row['level']:<9} {once:<5} {row['impl']:<5} {gate}")
        for rule in row["rules"]:
            note = rule["gate"] + ("" if rule["registered"] or not registered else "  [not registered]")
            print(f"       - {rule['name']:<40} {'rule':<9} {'':<5} {rule['impl']:<5} {note}")
    print(legend)
    installed = {k: v for k, v in installed_plugins().items() if k not in {p.source for p in plugins}}
    for name, value in installed.items():
        print(f"  installed plugin {name} = {value} (not active; --plugin {name} runs it)")
    return 0


def _print_json(doc: dict[str, object], status: int = 0) -> int:
    """Print a ``--json`` document (:mod:`qdqopt.jsonout`, schemas in docs/json.md) and return the exit code."""
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return status


def cmd_trace(args: argparse.Namespace) -> int:
    isolate = bool(getattr(args, "isolate", False))
    if isolate and not args.ort:
        raise UsageError("--isolate only applies with --ort (it says how ORT is run)")
    ort_lines: list[str] | None = None
    notes: list[str] = []
    plugins = _plugins(args)
    if args.ort:
        pair = run_paired(
            args.input,
            args.level,
            config=_config(args.config),
            disabled=args.disable or (),
            isolate=isolate,
            plugins=plugins,
        )
        result = pair.ours
        ort_lines = [str(t) for t in pair.ref.trace]
        limit = None if getattr(args, "verbose", False) else SHOWN
        notes = [pair.header(limit), *pair.notes(limit)]
    else:
        result = run(args.input, args.level, disabled=args.disable or (), config=_config(args.config), plugins=plugins)
    if getattr(args, "json", False):
        doc = jsonout.trace_doc(str(args.input), result, pair if args.ort else None, with_events=args.verbose)
        comparison = doc["ort_comparison"]
        return _print_json(doc, EXIT_DIFF if comparison is not None and not comparison["identical"] else 0)
    print(f"trace of {args.input} at {result.level.ort_name}")
    for note in notes:
        print(f"  {note}")
    if not args.ort:
        for name, reason in result.unsupported.items():
            print(f"  {name}: not run, qdqopt does not cover this model yet ({reason})")
    if getattr(args, "why", False) and not getattr(args, "verbose", False):
        raise UsageError("--why only applies with --verbose (it adds qdqopt's own events to ORT's VERBOSE lines)")
    if getattr(args, "verbose", False):
        return _print_events(result.pipeline, pair.ref if args.ort else None, why=getattr(args, "why", False))
    last_stage = None
    i = 0  # the line of ORT's log this entry faces (a plugin's entry faces none)
    for entry in result.pipeline.trace:
        stage = entry.stage if entry.stage in ("pre", "loop", "post") else f"{entry.stage} step {entry.step + 1}"
        if stage != last_stage:
            print(f"[{stage}]")
            last_stage = stage
        delta = " ".join(f"{k} {v:+d}" for k, v in entry.op_delta.items())
        note = "" if entry.implemented else "  (not implemented: skipped)"
        if entry.missing_rules:
            note = f"  (rules not implemented, skipped: {', '.join(entry.missing_rules)})"
        if entry.plugin:
            note = "  [plugin: not ORT's]"
        check = ""
        if ort_lines is not None and not entry.plugin:
            check = "  ok" if i < len(ort_lines) and ort_lines[i] == entry.ort_line() else "  <> ORT"
        i += 0 if entry.plugin else 1
        took = f"  {entry.seconds * 1e3:.1f} ms" if getattr(args, "times", False) else ""
        if took and entry.replayed:
            took += " (replayed: the graph is as its last application left it)"
        print(f"  {entry.ort_line()}{('   ' + delta) if delta else ''}{note}{check}{took}")
    if getattr(args, "times", False):
        total = sum(entry.seconds for entry in result.pipeline.trace)
        print(f"passes took {total * 1e3:.1f} ms (each application with the Resolve after it)")
    if ort_lines is not None:
        same = ort_lines == result.pipeline.ort_lines()
        extra = len(result.pipeline.trace) - len(result.pipeline.ort_lines())
        print(
            f"ORT logged {len(ort_lines)} transformer lines; qdqopt {len(result.pipeline.ort_lines())}"
            f"{f' (and {extra} of plugins, not checked)' if extra else ''}: {'identical' if same else 'DIFFERENT'}"
        )
        if not same:
            for i, line in enumerate(ort_lines):
                ours = result.pipeline.ort_lines()
                if i >= len(ours) or ours[i] != line:
                    print(f"  first difference at line {i + 1}: ORT {line!r}")
                    break
            return EXIT_DIFF
    return 0


def _print_events(pipeline: PipelineResult, ref: ReferenceRun | None, *, why: bool = False) -> int:
    """``trace --verbose``: every event ORT logs too, in ORT's words (severity letter first, op-count changes after
    a ``modified`` line); with ORT's run, each line checked against ORT's optimizer lines and the first difference
    named. qdqopt's own events (refusals, units fused, layout decisions: ``events.QDQOPT_ONLY``) are left out, or,
    with ``why``, printed (``Q``) and never checked. Returns the exit code."""
    ort = ref.verbose if ref is not None else None
    deltas = iter(pipeline.trace)
    i = 0  # the line of ORT's optimizer lines this event faces (a plugin's event faces none)
    for event in pipeline.events.events:
        if not event.kind.ort:
            if why:
                print(f"  {event.severity} {_own_event(event)}")
            continue
        extra = ""
        if event.kind is events.Kind.MODIFIED:
            entry = next(deltas, None)
            if entry is not None and entry.op_delta:
                extra = "   " + " ".join(f"{k} {v:+d}" for k, v in entry.op_delta.items())
            if entry is not None and not entry.implemented:
                extra += "  (not implemented: skipped)"
            elif entry is not None and entry.missing_rules:
                extra += f"  (rules not implemented, skipped: {', '.join(entry.missing_rules)})"
        if event.plugin:
            extra += "  [plugin: not ORT's]"
        elif ort is not None:
            extra += "  ok" if i < len(ort) and ort[i] == event.text else "  <> ORT"
            i += 1
        print(f"  {event.severity} {event.text}{extra}")
    if ref is None or ort is None:
        return 0
    ours = pipeline.verbose_lines()
    same = ours == ort
    left_out = ref.diagnostics
    print(f"ORT logged {len(ort)} optimizer lines; qdqopt {len(ours)}: {'identical' if same else 'DIFFERENT'}")
    if left_out:
        kinds = collections.Counter(f"{r.file.removesuffix('.cc')}" for r in left_out)
        listed = ", ".join(f"{name} {count}" for name, count in sorted(kinds.items()))
        print(f"  not compared: {len(left_out)} lines of transformers' own diagnostics ({listed})")
    if same:
        return 0
    at = next((k for k, (a, b) in enumerate(zip(ort, ours, strict=False)) if a != b), min(len(ort), len(ours)))
    print(f"  first difference at line {at + 1}:")
    print(f"    ORT:    {ort[at] if at < len(ort) else '(nothing more)'}")
    print(f"    qdqopt: {ours[at] if at < len(ours) else '(nothing more)'}")
    return EXIT_DIFF


def _own_event(event: events.Event) -> str:
    """One of qdqopt's own events as ``trace --why`` prints it: kind, pass, node, then the text."""
    node = f" {event.nodes[0]!r}" if event.nodes else ""
    return f"[{event.kind}] {event.pass_name}{node}: {event.text}"


#: names shown in a list before "... (N more)" unless --verbose
SHOWN = 6


def _mode_line(isolate: bool, disabled: Sequence[str]) -> str:
    if isolate:
        return "isolation mode: what qdqopt lacks or declines is disabled on both sides; not a fidelity result"
    if disabled:
        return f"ORT run as a user runs it, with {', '.join(disabled)} disabled on both sides as asked"
    return "ORT run as a user runs it (nothing disabled)"


def cmd_diff(args: argparse.Namespace) -> int:
    levels = list(Level) if args.all_levels else [parse_level(args.level)]
    cfg = _config(args.config)
    isolate = bool(args.isolate)
    limit = None if args.verbose else SHOWN
    worst = 0
    plugins = _plugins(args)
    own = {p.name for p in plugins}
    if getattr(args, "json", False):
        comps = [
            compare_level(args.input, lv, config=cfg, disabled=args.disable or (), isolate=isolate, plugins=plugins)
            for lv in levels
        ]
        mode = _mode_line(isolate, [n for n in args.disable or [] if n not in own])
        doc = jsonout.diff_doc(str(args.input), cfg, mode, comps, args.max_lines)
        return _print_json(doc, 0 if doc["equal"] else EXIT_DIFF)
    print(f"qdqopt vs ORT on {args.input}" + (f" with {cfg}" if cfg else ""))
    print(f"  {_mode_line(isolate, [n for n in args.disable or [] if n not in own])}")
    for level in levels:
        comp = compare_level(
            args.input, level, config=cfg, disabled=args.disable or (), isolate=isolate, plugins=plugins
        )
        rep = comp.report
        flags = "  ".join(f"{t}:{rep.flag(t)}" for t in rep.verdict)
        trace = "trace: same" if comp.trace_matches else "trace: DIFFERENT"
        tag = "  (isolation)" if comp.mode == ISOLATION else ""
        print(f"{level.ort_name:<20} tier {rep.tier:<2}  [{flags}]  {trace}{tag}")
        if comp.isolated:
            print(f"    {comp.header(limit)}")
        for note in comp.notes(limit):
            print(f"    {note}")
        for diff in rep.differences[: args.max_lines]:
            print(f"    {diff}")
        if not rep.holds("X") or not comp.trace_matches:
            worst = EXIT_DIFF
    return worst


def cmd_explain(args: argparse.Namespace) -> int:
    from qdqopt.explain import explain, explain_fusions

    config = _config(args.config)
    plugins = _plugins(args)
    if args.pass_name:
        from qdqopt.explain import explain_pass

        found = explain_pass(
            args.input, args.pass_name, args.level, config=config, disabled=args.disable or (), plugins=plugins
        )
        if getattr(args, "json", False):
            int8 = Target.detect().with_config(SessionConfig.from_mapping(config, warn=False)).int8_allowed
            doc = jsonout.explain_doc(str(args.input), parse_level(args.level), int8, [], None)
            return _print_json(jsonout.with_candidates(doc, args.pass_name, found))
        print(f"Candidates of {args.pass_name} in {args.input} ({len(found)})")
        for cand in found:
            print(f"  {cand.outcome:<8} {cand.name!r}: {cand.detail}")
            for reason in cand.reasons[1:]:
                print(f"           - {reason}")
        outcomes = collections.Counter(cand.outcome for cand in found)
        print(f"summary: {outcomes['fused']} fused, {outcomes['refused']} refused")
        return 0
    level = parse_level(args.level)
    if getattr(args, "json", False):
        reports = (
            explain(args.input, args.level, config=config, disabled=args.disable or (), plugins=plugins)
            if level >= Level.EXTENDED
            else []
        )
        int8 = Target.detect().with_config(SessionConfig.from_mapping(config, warn=False)).int8_allowed
        layout = None
        if level >= Level.LAYOUT:
            from qdqopt.explain import explain_layout

            layout = explain_layout(args.input, args.level, config=config, disabled=args.disable or (), plugins=plugins)
        return _print_json(jsonout.explain_doc(str(args.input), level, int8, reports, layout))
    if parse_level(args.level) >= Level.EXTENDED:
        _print_units(args, explain(args.input, args.level, config=config, disabled=args.disable or (), plugins=plugins))
    sections = explain_fusions(args.input, args.level, config=config, disabled=args.disable or (), plugins=plugins)
    _print_fusions(sections)
    if parse_level(args.level) >= Level.LAYOUT:
        from qdqopt.explain import explain_layout

        layout = explain_layout(args.input, args.level, config=config, disabled=args.disable or (), plugins=plugins)
        print(f"Convs, pools and Resizes as NhwcTransformer sees them ({len(layout)})")
        for item in layout:
            verdict = "NHWC" if item.outcome == "nhwc" else "NCHW"
            arrow = "->" if item.outcome == "nhwc" else "stays:"
            print(f"  {verdict:<5} {item.name!r} ({item.op}) {arrow} {item.detail}")
            for earlier in (r for r in item.reasons if r != item.detail):
                print(f"          earlier: {earlier}")
        tally = collections.Counter(item.outcome for item in layout)
        print(f"summary: {tally['nhwc']} to NHWC, {tally['nchw']} stay NCHW")
    return 0


def _print_units(args: argparse.Namespace, reports: list[UnitReport]) -> None:
    int8 = Target.detect().with_config(SessionConfig.from_mapping(_config(args.config), warn=False)).int8_allowed
    print(f"QDQ node units of {args.input} as QDQSelectorActionTransformer sees them (int8 allowed: {int8})")
    counts: collections.Counter[str] = collections.Counter()
    for report in reports:
        outcome = report.outcome
        counts[outcome] += 1
        if outcome == "no rule" and not args.all:
            continue
        head = f"  {outcome.upper() if outcome == 'rejected' else outcome:<9} {report.target!r} "
        head += f"({report.op_type}{', rule ' + report.rule if report.rule else ''})"
        if report.result_op:
            head += f" -> {report.result_op}"
        print(head)
        if report.dq_nodes or report.q_nodes:
            print(f"            DQ: {', '.join(report.dq_nodes) or '-'}   Q: {', '.join(report.q_nodes) or '-'}")
        for reason in report.reasons:
            print(f"            - {reason}")
    print("summary: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def _print_fusions(sections: list[FusionSection]) -> None:
    """The transformer fusions' candidates, a section per pass that has any; the others on one line."""
    quiet: list[str] = []
    for section in sections:
        if not section.candidates:
            quiet.append(section.pass_name if section.status == "ran" else f"{section.pass_name} ({section.status})")
            continue
        tally = collections.Counter(c.outcome for c in section.candidates)
        status = "" if section.status == "ran" else f" [{section.status}]"
        print(f"{section.pass_name}{status}: {tally['fused']} fused, {tally['refused']} refused")
        for c in section.candidates:
            if c.outcome == "fused":
                print(f"  fused     {c.candidate!r} -> {c.op} {c.node!r}")
                for reason in c.reasons:
                    print(f"            earlier: {reason}")
            else:
                print(f"  REFUSED   {c.candidate!r}")
                for reason in c.reasons:
                    print(f"            - {reason}")
    if quiet:
        print("transformer fusions without candidates: " + ", ".join(quiet))


def cmd_bisect(args: argparse.Namespace) -> int:
    from qdqopt.bisect import bisect, bisect_numerics

    cfg = _config(args.config)
    if args.plugin:
        raise UsageError("bisect searches ORT's own passes: --plugin is not supported here")
    if args.numerics is not None:
        found = bisect_numerics(
            args.input, args.level, args.numerics, config=cfg, disabled=args.disable or (), seed=args.seed
        )
        print(f"qdqopt bisect --numerics on {args.input} at {found.level.ort_name}")
        print("\n".join(found.lines()))
        return EXIT_DIFF if found.first is not None else 0
    print(f"qdqopt bisect on {args.input} at {parse_level(args.level).ort_name} (tier {args.tier}; ORT as run)")
    result = bisect(
        args.input,
        args.level,
        config=cfg,
        disabled=args.disable or (),
        tier=args.tier,
        progress=lambda line: print(line, flush=True),
    )
    print("\n".join(result.lines()[len(result.log) :]))
    return EXIT_DIFF if result.found else 0


def cmd_view(args: argparse.Namespace) -> int:
    from qdqopt import overlay

    problem = overlay.check_viewer(args.app)
    if problem is not None:
        raise UsageError(problem)
    source = Path(args.input)
    if args.level is None:
        if args.stop_after or args.config or args.disable:
            raise UsageError("--stop-after, --config and --disable need --level (view then optimizes the model)")
        read_model_proto(source, initializers=False)  # a clear error for a file that is not a model
        print(f"opening {source} in {args.app} (give --level for qdqopt's overlays)")
        overlay.open_viewer(args.app, source, [], port=args.port, browse=not args.no_browser)
        return 0
    check_accepted_in_child(source)
    cfg = _config(args.config)
    dumped = run_with_dumps(
        source, args.level, stop_after=args.stop_after, disabled=args.disable or (), config=cfg, plugins=_plugins(args)
    )
    result = dumped.result
    with tempfile.TemporaryDirectory(prefix="qdqopt-view-") as tmp:
        shown = Path(tmp) / f"{source.stem}.{result.level.name.lower()}.onnx"
        _write_atomic(result.loaded, shown)
        data: list[Path] = []
        if args.app == "model-explorer":
            ort_model = overlay.ort_reference_model(source, args.level, cfg, args.disable or ())
            data = overlay.write_node_data(overlay.node_overlay(result, ort_model), Path(tmp))
        print(f"opening {source} optimized at {result.level.ort_name} in {args.app}")
        overlay.open_viewer(args.app, shown, data, port=args.port, browse=not args.no_browser)
    return 0


def _report_setups(args: argparse.Namespace) -> list[dict[str, str]]:
    """``report``'s setups, side by side: one per ``--config`` (its entries comma-separated; ``default`` or an empty
    string for none), the default and ``session.qdqisint8allowed=1`` with ``--both-targets``."""
    setups = [
        _config([e for e in item.split(",") if e.strip() and e.strip() != "default"]) for item in args.config or ()
    ]
    if args.both_targets:
        setups += [{}, {"session.qdqisint8allowed": "1"}]
    unique = list({tuple(sorted(s.items())): s for s in setups or [{}]}.values())
    return unique


def cmd_report(args: argparse.Namespace) -> int:
    from qdqopt.report import build_report

    source, out = Path(args.input), Path(args.output)
    if source.exists() and out.exists() and source.resolve() == out.resolve():
        raise QdqoptError(f"{out}: refusing to overwrite the input model")
    check_accepted_in_child(source)
    setups = _report_setups(args)
    page = build_report(source, args.level, configs=setups, disabled=args.disable or ())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    size = len(page.encode()) / 1024
    print(f"report: {out} ({size:.0f} KiB; {len(setups)} setup(s) side by side; open it in a browser)")
    return 0


def example_model() -> Path:
    """The bundled example: the PT2E-quantized TinyConvNet."""
    return Path(str(resources.files("qdqopt") / "examples" / "tinyconvnet_pt2e.onnx"))


def cmd_demo(args: argparse.Namespace) -> int:
    model = example_model()
    isolate = bool(getattr(args, "isolate", False))
    print(f"Bundled example: {model.name} (TinyConvNet, PT2E XNNPACK int8, torch.onnx.export dynamo)\n")
    trace_args = argparse.Namespace(input=str(model), level="all", disable=None, config=None, ort=False)
    cmd_trace(trace_args)
    print()
    if isolate:
        print("Compared with ORT in isolation mode (--isolate): what qdqopt lacks is disabled on both sides, so the")
        print("figures below are not fidelity results.\n")
    else:
        print("Compared with ORT as a user runs it (nothing disabled on either side): where qdqopt lacks a pass ORT")
        print("runs, the figures show it, and the report names the pass (--isolate disables such passes on both")
        print("sides instead).\n")
    status = 0
    for config in ([], ["session.qdqisint8allowed=1"]):
        diff_args = argparse.Namespace(
            input=str(model),
            level="all",
            all_levels=True,
            config=config,
            disable=None,
            isolate=isolate,
            max_lines=3,
            verbose=False,
        )
        status = max(status, cmd_diff(diff_args))
        print()
    if not getattr(args, "no_report", False):
        report = Path(tempfile.gettempdir()) / "qdqopt-demo-report.html"
        report_args = argparse.Namespace(
            input=str(model), output=str(report), level="all", config=None, disable=None, both_targets=True
        )
        cmd_report(report_args)
        print("  (the op counts, every pass application drawn before and after, explain, and ORT's verdicts)")
    return status


def cmd_fuzz(args: argparse.Namespace) -> int:
    from qdqopt.fuzz.cli import run_fuzz

    return run_fuzz(args)


# ---------------------------------------------------------------------------------------------------------- main
class _NameList(argparse.Action):
    """``--disable A --disable B,C`` -> ``[A, B, C]`` (ORT's transformer and rule names never hold a comma)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        names = list(getattr(namespace, self.dest, None) or [])
        names.extend(n.strip() for n in str(values).split(",") if n.strip())
        setattr(namespace, self.dest, names)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qdqopt", description="See, toggle and test ORT's QDQ graph rewrites.")
    parser.add_argument("--version", action="version", version=f"qdqopt {__version__} ({build()})")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, *, disable: bool = True) -> None:
        p.add_argument("--level", "-l", default="all", help="0/1/2/3/99, disable_all|basic|extended|layout|all")
        p.add_argument("--config", "-c", action="append", metavar="KEY=VALUE", help="session config entry")
        p.add_argument(
            "--plugin",
            "-p",
            action="append",
            metavar="MODULE:CLASS",
            help="a pass of your own to slot into ORT's pipeline where it says (module:Class, file.py:Class or an"
            " installed entry point's name; repeatable; see docs/adding_a_pass.md)",
        )
        if disable:
            p.add_argument(
                "--disable",
                "-d",
                action=_NameList,
                metavar="NAME[,NAME...]",
                help="transformer or rule to disable (repeatable; a comma-separated list works too)",
            )

    def json_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print one JSON document instead (schema: docs/json.md)")

    def isolate_option(p: argparse.ArgumentParser, *, strict: bool = True) -> None:
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            "--isolate",
            action="store_true",
            help="disable on both sides (ORT's disabled_optimizers) every pass qdqopt lacks or that declines the model,"
            " to isolate what qdqopt reproduces (not a fidelity result; the output says so). Default: ORT runs as a"
            " user runs it",
        )
        if strict:  # the old name for the default, kept so that old scripts still run
            group.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)

    def command(
        name: str, help: str, func: Callable[[argparse.Namespace], int], *, model: bool = True, disable: bool = True
    ) -> argparse.ArgumentParser:
        """A subcommand running ``func`` on a model (``input``, unless not ``model``) with the :func:`common`
        options."""
        p = sub.add_parser(name, help=help)
        p.set_defaults(func=func)
        if model:
            p.add_argument("input")
        common(p, disable=disable)
        return p

    p = sub.add_parser("optimize", help="write the model qdqopt's ORT passes produce")
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True)
    common(p)
    p.add_argument(
        "--dump-dir",
        metavar="DIR",
        help="also write the model after every pass application that modified it: DIR/<NN>_<level>_<step>_<pass>.onnx",
    )
    p.add_argument(
        "--stop-after",
        metavar="PASS[:N]",
        help="stop right after the N-th application (default 1) of transformer PASS; the output is that model",
    )
    p.set_defaults(func=cmd_optimize)

    p = command(
        "passes",
        "list ORT's passes for a level, in order, and which qdqopt implements",
        cmd_passes,
        model=False,
        disable=False,
    )
    p.add_argument("--all", action="store_true", help="also list passes not registered for this session")
    json_option(p)

    p = command("trace", "print each pass and whether it modified the graph, as ORT's INFO log does", cmd_trace)
    p.add_argument("--ort", action="store_true", help="also run ORT (as a user runs it) and check its log line by line")
    isolate_option(p, strict=False)
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="print what ORT logs at VERBOSE, in its words: levels, steps, skips, stops, the optimization loop,"
        " matched QDQ units and Resolve's removals (with --ort: checked line by line against ORT's own); also name"
        " every pass in the notes on how ORT was run",
    )
    p.add_argument(
        "--why",
        action="store_true",
        help="with --verbose: also print qdqopt's own events (Q), which ORT does not log and which are never"
        " compared: each candidate a selector, filter or check refused and why (ORT's words where ORT has them),"
        " each unit fused or dropped, each NHWC conversion and Transpose push",
    )
    p.add_argument("--times", action="store_true", help="each pass application's wall time (with its Resolve)")
    json_option(p)

    p = command("diff", "compare qdqopt with real ORT at tiers N, S, X (and P: bytes)", cmd_diff)
    p.add_argument("--all-levels", action="store_true", help="compare at all five levels")
    isolate_option(p)
    p.add_argument("--max-lines", type=int, default=8, help="differences shown per level")
    p.add_argument("--verbose", "-v", action="store_true", help="name every pass in the notes on how ORT was run")
    json_option(p)

    p = command(
        "explain", "list every QDQ node unit and transformer-fusion candidate: fused into what, or why not", cmd_explain
    )
    p.set_defaults(level="extended")
    p.add_argument("--all", action="store_true", help="also list nodes no fusion rule applies to")
    p.add_argument(
        "--pass",
        dest="pass_name",
        metavar="NAME",
        help="instead: every candidate of this fusion pass (e.g. EmbedLayerNormFusion), fused into what or refused why",
    )
    json_option(p)

    p = command(
        "bisect",
        "the first pass application after which qdqopt can no longer reach ORT's result (or, with --numerics, after"
        " which the outputs move more than TOL)",
        cmd_bisect,
    )
    p.add_argument("--tier", default="X", help="the tier that must hold to agree with ORT (N, S, X or P; default X)")
    p.add_argument(
        "--numerics",
        type=float,
        metavar="TOL",
        help="instead: the first application whose dump's outputs differ from the input model's by more than TOL"
        " (max |diff|; ORT CPU at DISABLE_ALL on seeded inputs, in a child process)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs of --numerics")

    p = command(
        "view",
        "open a model or a dump in Netron or Model Explorer (with --level: optimized, with qdqopt's overlays)",
        cmd_view,
    )
    p.set_defaults(level=None)
    p.add_argument("--app", choices=["netron", "model-explorer"], default="netron", help="the viewer (default netron)")
    p.add_argument("--stop-after", metavar="PASS[:N]", help="with --level: show the model right after that application")
    p.add_argument("--port", type=int, help="the viewer's port")
    p.add_argument("--no-browser", action="store_true", help="serve without opening a browser")

    p = sub.add_parser(
        "report", help="one HTML page: op counts per level, each pass application drawn before and after, explain, ORT"
    )
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True, help="the HTML file to write (self-contained: opens offline)")
    p.add_argument("--level", "-l", default="all", help="the timeline's level (the tables show all five)")
    p.add_argument(
        "--config",
        "-c",
        action="append",
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="one session setup (repeat for several, shown side by side; 'default' for none)",
    )
    p.add_argument("--both-targets", action="store_true", help="default and session.qdqisint8allowed=1 side by side")
    p.add_argument("--disable", "-d", action=_NameList, metavar="NAME[,NAME...]", help="as optimize's --disable")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="trace and diff the bundled example model at every level, and write its report")
    isolate_option(p, strict=False)
    p.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    p.set_defaults(func=cmd_demo)

    from qdqopt.fuzz.cli import add_arguments

    p = sub.add_parser("fuzz", help="differential fuzzing: generated QDQ graphs through ORT and qdqopt")
    add_arguments(p)
    p.set_defaults(func=cmd_fuzz)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    isolated = reference.in_child_now()
    reference.sessions_in_child()  # an ORT crash ends a child, never the command
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            status: int = args.func(args)
        except QdqoptError as exc:
            print(f"qdqopt: error: {exc}", file=sys.stderr)
            status = EXIT_USAGE
        except KeyboardInterrupt:
            status = 130
        except Exception as exc:
            if os.environ.get("QDQOPT_DEBUG"):
                raise
            print(
                f"qdqopt: internal error: {exc.__class__.__name__}: {exc} (set QDQOPT_DEBUG=1 for a traceback)",
                file=sys.stderr,
            )
            status = 3
        finally:
            reference.sessions_in_child(isolated)
    # once each: a command reads its config (and pass names) in more than one place (the CLI, qdqopt's run, ORT's)
    for message in dict.fromkeys(str(warning.message) for warning in caught):
        print(f"qdqopt: warning: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
