"""``benchmarks/fidelity.py``, the fidelity table: a run is classed by live comparison with ORT, and the table's
shares count what the runs say (a difference shows, with its class)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_file_module

fidelity = load_file_module(ROOT / "benchmarks" / "fidelity.py", "qdqopt_fidelity")


def test_an_exact_fixture_is_exact_at_every_tier() -> None:
    result = fidelity.measure("eudq/subgraph_and_one_explicit", "extended", "default")
    assert result.verdict == "P" and result.numerics is True and result.exact("X")


def test_a_disabled_pass_on_one_side_shows_as_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """qdqopt's output emptied, ORT as it runs: the run is not exact and the table counts it and classes it (the
    table must be able to show a difference)."""
    from qdqopt import compare

    real = compare.run_paired

    def one_sided(*args: object, **kwargs: object) -> object:
        pair = real(*args, **kwargs)  # type: ignore[arg-type]
        pair.ours.model.graph.ClearField("node")  # qdqopt "wrote" an empty graph
        return pair

    monkeypatch.setattr(compare, "run_paired", one_sided)
    result = fidelity.measure("eudq/subgraph_and_one_explicit", "basic", "default", tiers=("S", "X", "P"))
    assert not result.exact("S") and result.verdict == "diff"
    lines = fidelity.table([result])
    level_line = next(line for line in lines if line.startswith("  basic "))
    assert level_line.split()[4:7] == ["0/1", "(0%)", "0/1"], level_line  # S 0 of 1, X 0 of 1
    assert "op counts: qdqopt minus ORT" in lines[-2], lines[-3:]


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fidelity.main(["no/such_fixture"])
    assert exc.value.code == 2
    assert "unknown fixture 'no/such_fixture'" in capsys.readouterr().err


def test_a_session_both_refuse_is_ref_and_counts_as_exact() -> None:
    """``layernorm/cast_leading_fp16`` at BASIC: ORT's session fails after LayerNormFusion, and qdqopt refuses the
    model the same way: a ``REF`` run, exact, named under the table."""
    result = fidelity.measure("layernorm/cast_leading_fp16", "basic", "default", tiers=("S", "X", "P"))
    assert result.verdict == "REF" and result.exact("X"), result
    assert any(line.startswith("(REF: 1 run(s)") for line in fidelity.table([result]))


def test_a_crash_in_ort_ends_one_measurement_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT 1.32's NchwcTransformer crashes the process on ``matmultranspose/transpose_cast_batch_mismatch`` at ALL;
    the measurements around it still come, the crashed one is an error result naming the crash, and the temporary
    files the crashed child made go with the run."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    work = [
        ("matmultranspose/transpose_cast_batch_mismatch", level, "default", ("S", "X", "P"))
        for level in ("extended", "all")
    ]
    work.append(("eudq/subgraph_and_one_explicit", "all", "default", ("S", "X", "P")))
    results = {(r.model, r.level): r for r in fidelity._measure_all(work, 2)}
    assert len(results) == 3
    assert results[("matmultranspose/transpose_cast_batch_mismatch", "extended")].verdict == "P"
    assert results[("eudq/subgraph_and_one_explicit", "all")].verdict == "P"
    crashed = results[("matmultranspose/transpose_cast_batch_mismatch", "all")]
    assert crashed.verdict == "ERR" and "crash in ORT's C++" in crashed.error
    assert not list(tmp_path.iterdir())
