"""DQMatMulNBitsFusion (``qdqopt/passes/dq_matmulnbits_fusion.py``) against ORT 1.32, live, on the ``dqnbits/``
fixtures: every fixture at BASIC, EXTENDED and ALL, with ``session.enable_dq_matmulnbits_fusion=1`` (with int8
allowed too) and without, nothing disabled on either side: tier P (so X) and ORT's trace; a model ORT cannot
create a session for must fail in qdqopt too. Mutations (int4 accepted, the all-8s zp kept, the direct pattern's
scale order) must make the comparison fail.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.errors import QdqoptError
from qdqopt.passes import TRANSFORMERS, dq_matmulnbits_fusion
from qdqopt.passes.qdq import actions
from qdqopt.reference import run_reference
from tests.conftest import fixture_model, fixture_names

NB = {"session.enable_dq_matmulnbits_fusion": "1"}
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "nb": NB, "nb-int8": {**NB, "session.qdqisint8allowed": "1"}}
LEVELS = ("basic", "extended", "all")
NAMES = [n for n in fixture_names() if n.startswith("dqnbits/")]
OWN = "DQMatMulNBitsFusion"


@functools.cache
def ort_modified(name: str, level: str, config: str) -> frozenset[str] | None:
    try:
        trace = run_reference(fixture_model(name), level, config=CONFIGS[config]).trace
    except QdqoptError:
        return None
    return frozenset(t.name for t in trace if t.modified)


def compare(name: str, level: str = "basic", config: str = "nb") -> LevelComparison:
    return compare_level(fixture_model(name), level, config=CONFIGS[config])


def holds(comp: LevelComparison) -> bool:
    return comp.report.holds("P") and comp.report.holds("X") and comp.trace_matches


def differs(name: str) -> bool:
    try:
        return not holds(compare(name))
    except QdqoptError:
        return True


def test_registered() -> None:
    assert TRANSFORMERS[OWN] is dq_matmulnbits_fusion.DQMatMulNBitsFusion


def test_fires_where_expected() -> None:
    fired = {n.split("/", 1)[1] for n in NAMES if OWN in (ort_modified(n, "basic", "nb") or frozenset())}
    assert {"direct_zp", "direct_no_zp", "direct_zp8", "direct_gemm_bias", "direct_fp16", "reshape_zp"} <= fired
    assert {"reshape_no_zp", "reshape_shape_wildcards", "reshape_no_perm", "reshape_cast"} <= fired
    assert not {"direct_int4", "direct_bs8", "direct_gemm_transb"} & fired


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    if ort_modified(name, level, config) is None:
        with pytest.raises(QdqoptError):
            compare(name, level, config)
        return
    comp = compare(name, level, config)
    assert comp.trace_matches, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert holds(comp), "\n".join(comp.lines())


def test_mutation_int4(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.32 takes uint4 weights only."""
    assert holds(compare("dqnbits/direct_int4"))
    original = dq_matmulnbits_fusion._common

    def any_4bit(graph, dq):  # type: ignore[no-untyped-def]
        w = graph.initializer(dq.inputs[0]) if dq.inputs and graph.is_initializer(dq.inputs[0]) else None
        if w is not None and w.data_type == dq_matmulnbits_fusion.TP.INT4:
            return w, graph.initializer(dq.inputs[1])
        return original(graph, dq)

    monkeypatch.setattr(dq_matmulnbits_fusion, "_common", any_4bit)
    assert differs("dqnbits/direct_int4")


def test_mutation_zp8_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zp of all 8s (MatMulNBits' default) is left out."""
    assert holds(compare("dqnbits/direct_zp8"))
    monkeypatch.setattr(dq_matmulnbits_fusion, "_all_eights", lambda zp: False)
    assert differs("dqnbits/direct_zp8")


def test_mutation_scale_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct pattern's scales go column by column ([N * nb], n major)."""
    assert holds(compare("dqnbits/direct_zp"))
    original = actions.pack_nbits

    def row_major(*args, **kwargs):  # type: ignore[no-untyped-def]
        w, _, z = original(*args, **kwargs)
        return w, np.asarray(args[1]).reshape(-1), z

    monkeypatch.setattr(dq_matmulnbits_fusion, "pack_nbits", row_major)
    assert differs("dqnbits/direct_zp")
