"""Saving findings (the minimal model with its seed) and the summary table of a fuzz run.

Each class of finding gets a folder ``<out>/<kind>-<level>-<hash>/`` holding ``model.onnx`` (the shrunk model),
``original.onnx`` (the generated one), and ``finding.json``: the seed and index that generated it (``qdqopt fuzz
--seed S --budget B`` regenerates it as case ``index``), the level and config, the kind, the first message, how many
cases of the run fell in the class, and the ORT and qdqopt versions. Ready to become a hand-built regression fixture.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx

from qdqopt.fuzz.runner import CONFIGS, FINDING_KINDS, ORT_KINDS, Finding, FuzzRun

__all__ = ["save_finding", "summary_lines"]


def save_finding(
    out: Path, finding: Finding, small: bytes, count: int, signature: str, levels: list[str] | None = None
) -> Path:
    """Write one class's minimal model, original model and description under ``out``; returns its folder."""
    import onnxruntime

    from qdqopt import __version__

    digest = hashlib.sha1(signature.encode()).hexdigest()[:8]
    folder = Path(out) / f"{finding.kind}-{finding.level}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(small)
    (folder / "original.onnx").write_bytes(finding.model)
    shrunk = onnx.ModelProto.FromString(small)
    info = {
        "kind": finding.kind,
        "about": "ORT itself" if finding.kind in ORT_KINDS else "qdqopt against ORT",
        "level": finding.level,
        "config": CONFIGS.get(finding.config, {}),
        "config_name": finding.config,
        "detail": finding.detail,
        "class": signature,
        "findings_in_class": count,
        "levels": levels or [finding.level],
        "seed": finding.seed,
        "index": finding.index,
        "nodes": len(shrunk.graph.node),
        "ops": sorted({n.op_type for n in shrunk.graph.node}),
        "onnxruntime": onnxruntime.__version__,
        "qdqopt": __version__,
    }
    (folder / "finding.json").write_text(json.dumps(info, indent=2) + "\n")
    return folder


def summary_lines(run: FuzzRun) -> list[str]:
    """The end-of-run table: outcomes per kind (rows) and level (columns), then one line per class of finding."""
    levels = sorted(
        {lvl for _, lvl in run.counts},
        key=lambda x: (
            ("disable_all", "basic", "extended", "layout", "all", "-").index(x)
            if x in ("disable_all", "basic", "extended", "layout", "all", "-")
            else 9
        ),
    )
    kinds = sorted({k for k, _ in run.counts}, key=lambda k: (k in FINDING_KINDS, k))
    i, n = run.shard
    rate = run.cases / run.seconds if run.seconds else 0.0
    lines = [
        f"seed {run.seed}, budget {run.budget}, shard {i}/{n}: {run.cases} cases in {run.seconds:.0f} s "
        f"({rate:.2f} cases/s)",
        f"  {'outcome':<16}" + "".join(f"{lvl:>10}" for lvl in levels) + f"{'total':>10}",
    ]
    for kind in kinds:
        row = [run.counts.get((kind, lvl), 0) for lvl in levels]
        mark = " *" if kind in FINDING_KINDS else ""
        lines.append(f"  {kind + mark:<16}" + "".join(f"{c:>10}" for c in row) + f"{sum(row):>10}")
    lines.append("  (* a finding; same: X and the trace lines hold; lacks: ORT ran a pass qdqopt does not implement)")
    classes = run.classes()
    lines.append(f"{len(run.findings)} findings in {len(classes)} classes")
    for signature, group in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        where = run.saved.get(signature)
        first = group[0]
        lines.append(f"  {len(group):>4} x {signature}")
        seen_at = ", ".join(dict.fromkeys(f.level for f in group))
        configs = ", ".join(dict.fromkeys(f.config for f in group))
        cases = len({f.index for f in group})
        lines.append(f"         {cases} cases; levels {seen_at}; configs {configs}")
        lines.append(f"         first: case {first.index} at {first.level} ({first.config}): {first.detail[:160]}")
        if where is not None:
            lines.append(f"         saved: {where}")
    return lines
