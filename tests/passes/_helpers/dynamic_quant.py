"""Shared by the tests of DynamicQuantizeMatMulFusion (``tests/passes/test_dynamic_quantize_matmul.py``) and
MatMulIntegerToFloatFusion (``test_matmul_integer_to_float.py``) and by ``tests/test_dynamic_quant_fusions.py``
(the two together on every corpus model where one fires).

The firing models are found from ORT's own log: every corpus model ORT accepts whose EXTENDED trace shows one of the
two passes modifying it. They are compared with the transpose optimizers (LAYOUT work) disabled on both sides, as
ORT runs (nothing isolated) unless ORT's log shows a pass qdqopt does not implement modifying the model; then those
unimplemented passes are disabled on both sides.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.passes import RULES, TRANSFORMERS
from qdqopt.reference import run_reference
from tests.conftest import corpus_models, ort_accepts

OWN = ("MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion")
LAYOUT_WORK = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]
L2_NAMES = [p.name for p in PASSES if p.stage == "L2" and not p.rules] + [r.name for r in LEVEL2_RULES]
CONFIGS: tuple[dict[str, str], ...] = ({}, {"session.qdqisint8allowed": "1"})


@functools.cache
def _ort_modified(path: Path) -> frozenset[str]:
    """Names of the transformers ORT's EXTENDED log shows modifying the model (default config)."""
    return frozenset(t.name for t in run_reference(path, "extended").trace if t.modified)


@functools.cache
def firing_models() -> tuple[Path, ...]:
    """Corpus models ORT accepts on which ORT's log shows one of the two passes modifying the model."""
    return tuple(p for p in corpus_models() if ort_accepts(p) and _ort_modified(p) & set(OWN))


def _unimplemented_firing(path: Path) -> list[str]:
    """Transformers qdqopt lacks that ORT's log shows modifying the model (rule containers are not transformers
    of their own: their rules are all listed separately)."""
    containers = {p.name for p in PASSES if p.rules}
    skip = containers | set(LAYOUT_WORK) | set(TRANSFORMERS) | set(RULES) | set(OWN)  # never disable ours
    return sorted(n for n in _ort_modified(path) if n not in skip)


def _check(path: Path, cfg: dict[str, str], disabled: list[str]) -> LevelComparison:
    extra = _unimplemented_firing(path)
    return compare_level(path, "extended", config=cfg, disabled=[*disabled, *extra])


def _holds(result: LevelComparison) -> bool:
    return result.report.holds("P") and result.ours_lines == result.ort_lines


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def _with_bias(op_type: str, slot: int) -> Path:
    """The first firing model whose ORT output has an ``op_type`` node with a bias at input ``slot``."""
    models = firing_models()
    if not models:
        pytest.skip("shared corpus not found")
    for path in models:
        ort = run_reference(path, "extended").model
        if any(n.op_type == op_type and len(n.input) > slot and n.input[slot] for n in ort.graph.node):
            return path
    raise AssertionError(f"no firing model where ORT writes {op_type} with a bias")
