"""``qdqopt fuzz``'s machinery: generation, shards, the child process, planted differences and crashes, shrinking.

Everything is judged live: ORT runs in the fuzzer's child processes, nothing of its output is stored. The small seeded
run at the end is the CI budget (``QDQOPT_FUZZ_BUDGET`` raises it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("hypothesis")

from qdqopt.cli import main
from qdqopt.errors import UsageError
from qdqopt.fuzz.cli import parse_shard
from qdqopt.fuzz.runner import FINDING_KINDS, ORT_KINDS, Finding, FuzzRun, Worker, run_case, shard_cases
from qdqopt.fuzz.session import fuzz
from qdqopt.fuzz.shrink import _outer_names, candidates, prune
from qdqopt.fuzz.strategies import generate
from qdqopt.fuzz.worker import check_pair

ROOT = Path(__file__).resolve().parents[1]


def _digest(seed: int, budget: int) -> str:
    return hashlib.sha1(b"".join(c.model for c in generate(seed, budget))).hexdigest()


def test_generation_is_seeded_and_ort_accepts_it() -> None:
    cases = generate(7, 25)
    assert [c.index for c in cases] == list(range(25))
    assert len({c.model for c in cases}) == 25  # distinct graphs
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    accepted = 0
    for case in cases:
        onnx.checker.check_model(onnx.ModelProto.FromString(case.model))
        try:
            ort.InferenceSession(case.model, so, providers=["CPUExecutionProvider"])
            accepted += 1
        except Exception:
            pass
    assert accepted >= 20, "most generated graphs must be models ORT runs"


def test_generation_is_the_same_in_another_process() -> None:
    """Shards run in separate processes (a cluster's job array): they must see the same graphs."""
    code = "from tests.test_fuzz import _digest; print(_digest(3, 12))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.strip() == _digest(3, 12)


def test_shards_split_a_run_without_overlap() -> None:
    cases = generate(5, 20)
    parts = [shard_cases(cases, (i, 3)) for i in range(3)]
    seen = [c.index for part in parts for c in part]
    assert sorted(seen) == list(range(20))
    assert len(seen) == len(set(seen))
    assert parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "1", "a/b", "0/0"):
        with pytest.raises(UsageError):
            parse_shard(bad)


def _first_with(op: str, seed: int = 11, budget: int = 40) -> bytes:
    for case in generate(seed, budget):
        if any(n.op_type == op for n in onnx.ModelProto.FromString(case.model).graph.node):
            return case.model
    raise AssertionError(f"no generated graph has a {op}")


def test_a_child_that_dies_is_reported_not_propagated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker aborts (as ORT's C++ can) on a model with a Conv: the case ends in ``qdqopt-crash`` for the pair
    that was running, the other pairs still run in a new child, and this process lives on."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_first_with("Conv"))
    monkeypatch.setenv("QDQOPT_FUZZ_PLANT_CRASH", "Conv")
    worker = Worker()
    try:
        outcomes = run_case(worker, str(path), [("basic", "default"), ("extended", "default")], drift=False)
    finally:
        worker.close()
    kinds = [(o["kind"], o["level"]) for o in outcomes]
    assert ("qdqopt-crash", "basic") in kinds and ("qdqopt-crash", "extended") in kinds, kinds
    assert all("signal 6" in o["detail"] for o in outcomes if o["kind"] == "qdqopt-crash")
    monkeypatch.delenv("QDQOPT_FUZZ_PLANT_CRASH")
    worker = Worker()
    try:
        fine = run_case(worker, str(path), [("basic", "default")], drift=False)
    finally:
        worker.close()
    assert [o["kind"] for o in fine if o["kind"] in FINDING_KINDS] == [] or fine[0]["kind"] != "qdqopt-crash"


def _ort_modified(model: bytes) -> set[str]:
    from qdqopt.reference import run_reference

    try:
        trace = run_reference(onnx.ModelProto.FromString(model), "extended").trace
    except Exception:
        return set()
    return {t.name for t in trace if t.modified}


def test_a_planted_difference_is_found_shrunk_and_saved(tmp_path: Path) -> None:
    """qdqopt's side runs without its QDQ fusion (planted: ORT's side keeps it): the fuzzer must report a structural
    difference, shrink the model and save it; the saved model still shows the difference, and is no false one (with
    nothing planted, qdqopt equals ORT on it)."""
    cases = [c for c in generate(2, 40) if "QDQSelectorActionTransformer" in _ort_modified(c.model)][:1]
    assert cases, "no generated graph that ORT's QDQ fusion changes"
    run = fuzz(
        cases=cases,
        levels=("extended",),
        configs=("default",),
        ours_disabled=["QDQSelectorActionTransformer"],
        out=tmp_path,
        drift=False,
        shrink_checks=12,
    )
    diffs = [f for f in run.findings if f.kind in ("diff-S", "diff-X")]
    assert diffs, [f.signature for f in run.findings]
    assert run.saved
    folder = next(iter(run.saved.values()))
    info = json.loads((folder / "finding.json").read_text())
    assert info["seed"] == 2 and info["kind"] in ("diff-S", "diff-X")
    small = onnx.load(str(folder / "model.onnx"))
    original = onnx.load(str(folder / "original.onnx"))
    assert len(small.graph.node) < len(original.graph.node), "the shrinker removed nothing"
    planted, _ = check_pair(small, info["level"], info["config"], ["QDQSelectorActionTransformer"])
    assert planted["kind"] == info["kind"]
    clean, _ = check_pair(small, info["level"], info["config"])
    assert clean["kind"] in ("same", "trace"), clean


def test_shrink_candidates_are_smaller_and_prune_keeps_outputs() -> None:
    model = onnx.ModelProto.FromString(_first_with("Conv"))
    n = len(model.graph.node)
    seen = 0
    for cand in candidates(model):
        seen += 1
        smaller = (len(cand.graph.node), len(cand.graph.output)) < (n, len(model.graph.output))
        assert smaller and len(cand.graph.node) <= n
        assert cand.graph.output
    assert seen > 0
    pruned = prune(onnx.ModelProto.FromString(model.SerializeToString()))
    produced = {o for node in pruned.graph.node for o in node.output} | {i.name for i in pruned.graph.input}
    assert {o.name for o in model.graph.output} <= produced | {t.name for t in pruned.graph.initializer}
    read = {i for node in pruned.graph.node for i in node.input} | {o.name for o in pruned.graph.output}
    read |= _outer_names(pruned.graph)  # what If branches and Loop bodies read
    assert all(any(o in read for o in node.output) for node in pruned.graph.node)  # what is left is used
    again = prune(onnx.ModelProto.FromString(pruned.SerializeToString()))
    assert again.SerializeToString() == pruned.SerializeToString()


def test_summary_and_exit_code_of_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["fuzz", "--seed", "4", "--budget", "2", "--level", "basic", "--quiet", "--no-drift", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert "seed 4, budget 2, shard 0/1: 2 cases" in out
    assert "outcome" in out and "basic" in out
    assert status in (0, 1)
    assert (status == 1) == ("0 findings" not in out)
    assert main(["fuzz", "--shard", "1/1"]) == 2


def test_finding_signature_blanks_names_and_numbers() -> None:
    a = Finding(0, 1, "diff-S", "extended", "default", "[S] node 'conv_12': QLinearConv vs 3 inputs")
    b = Finding(0, 2, "diff-S", "extended", "default", "[S] node 'conv_7': QLinearConv vs 4 inputs")
    c = Finding(0, 2, "diff-S", "extended", "default", "[S] node 'conv_7': QGemm vs 4 inputs")
    assert a.signature == b.signature != c.signature


BUDGET = int(os.environ.get("QDQOPT_FUZZ_BUDGET", "300"))


@pytest.fixture(scope="module")
def ci_run() -> FuzzRun:
    """Three hundred generated graphs at EXTENDED and ALL, both configs, two child processes (about 30 s)."""
    return fuzz(seed=20261202, budget=BUDGET, jobs=2, levels=("extended", "all"), shrink=False, drift=False)


def test_seeded_ci_budget_never_crashes_qdqopt(ci_run: FuzzRun) -> None:
    """Every case gets an outcome for every pair, and qdqopt never crashes, raises something other than its own
    error (a traceback for the user), or accepts what ORT rejects."""
    assert ci_run.cases == BUDGET
    pairs = sum(n for (kind, _), n in ci_run.counts.items() if kind not in ("ort-level-reject",))
    assert pairs >= BUDGET * 4
    bad = [
        f for f in ci_run.findings if f.kind in ("qdqopt-internal", "qdqopt-crash", "worker-error", "qdqopt-accepts")
    ]
    assert not bad, "\n".join(f"case {f.index} {f.level} {f.config}: {f.detail}" for f in bad)


def test_seeded_ci_budget_finds_no_difference(ci_run: FuzzRun) -> None:
    """qdqopt equals ORT (X and the trace lines) or fails where ORT fails, on every generated graph."""
    ours = [f for f in ci_run.findings if f.kind not in ORT_KINDS]
    assert not ours, "\n".join(f"case {f.index} {f.level} {f.config}: {f.signature}" for f in ours)


def test_an_ort_crash_is_reported_and_qdqopt_is_asked_alone(tmp_path: Path) -> None:
    """A model on which ORT's own session crashes (a QLinearWhere with a graph-input zero point: an ORT finding): the
    pair is an ``ort-crash``, and qdqopt, run alone in a child of its own, must refuse the model saying so
    (``both-reject``), not optimize it; the other pairs still run."""
    from tests.passes.test_qdq_selector_action import _where_zp_input

    path = tmp_path / "m.onnx"
    onnx.save(_where_zp_input(), str(path))
    worker = Worker()
    try:
        outcomes = run_case(worker, str(path), [("basic", "default"), ("extended", "default")], drift=False)
    finally:
        worker.close()
    kinds = {(o["kind"], o["level"]) for o in outcomes}
    assert {("ort-crash", "extended"), ("both-reject", "extended"), ("same", "basic")} <= kinds, outcomes
    said = next(o for o in outcomes if o["kind"] == "both-reject")
    assert "crashes the process" in said["ours"]
