"""MatMulIntegerToFloatFusion and DynamicQuantizeMatMulFusion against ORT 1.32, live.

* The firing models are found from ORT's own log: every corpus model ORT accepts whose EXTENDED trace shows one of
  the two passes modifying it.
* On each, both configs (default, ``session.qdqisint8allowed=1``), the transpose optimizers (LAYOUT work) disabled
  on both sides: the whole EXTENDED level must give ORT's trace and ORT's saved model byte for byte (tier P). It runs
  as ORT runs (nothing isolated) unless ORT's log shows a pass qdqopt does not implement modifying the model; then
  those unimplemented passes are disabled on both sides.
* Each pass alone (every other Level2 transformer and rule disabled on both sides): same checks; and
  DynamicQuantizeMatMulFusion alone on the model ORT writes with it disabled (so it has MatMulIntegerToFloat nodes
  to fuse).
* Mutations (bias shape check always false, B_zp and bias swapped) must make the comparison fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.graph import Graph, Node
from qdqopt.levels import LEVEL2_RULES, PASSES
from qdqopt.passes import RULES, TRANSFORMERS, dynamic_quantize_matmul, matmul_integer_to_float
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


def test_passes_registered() -> None:
    for name in OWN:
        assert name in TRANSFORMERS


def test_firing_models_found() -> None:
    models = firing_models()
    if not models:
        pytest.skip("shared corpus not found")
    fired = set().union(*(_ort_modified(p) for p in models))
    assert set(OWN) <= fired
    assert len(models) >= 15


def test_full_extended_and_alone() -> None:
    models = firing_models()
    if not models:
        pytest.skip("shared corpus not found")
    for path in models:
        for cfg in CONFIGS:
            _assert_p(_check(path, cfg, LAYOUT_WORK), f"{path.name} {cfg}")
        for own in OWN:
            if own not in _ort_modified(path):
                continue
            alone = [n for n in L2_NAMES if n != own]
            for cfg in CONFIGS:
                _assert_p(_check(path, cfg, [*LAYOUT_WORK, *alone]), f"{path.name} {cfg} [{own} alone]")


def test_dynamic_quantize_matmul_alone_on_orts_intermediate() -> None:
    """DynamicQuantizeMatMulFusion alone on the model ORT writes with it disabled (MatMulIntegerToFloat nodes in
    place), where it has something to fuse."""
    models = [p for p in firing_models() if "DynamicQuantizeMatMulFusion" in _ort_modified(p)]
    if not models:
        pytest.skip("shared corpus not found")
    own = "DynamicQuantizeMatMulFusion"
    alone = [n for n in L2_NAMES if n != own]
    for path in models:
        extra = _unimplemented_firing(path)
        intermediate = run_reference(path, "extended", disabled=[*LAYOUT_WORK, own, *extra]).model
        assert any(n.op_type == "MatMulIntegerToFloat" for n in intermediate.graph.node), path.name
        for cfg in CONFIGS:
            result = compare_level(intermediate, "extended", config=cfg, disabled=[*LAYOUT_WORK, *alone])
            assert any(str(t) == f"GraphTransformer {own} modified: 1" for t in result.ort_lines), path.name
            _assert_p(result, f"{path.name} {cfg} [{own} alone, on ORT's intermediate]")


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


def test_mutation_bias_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    path = _with_bias("MatMulIntegerToFloat", 6)
    assert _holds(_check(path, {}, LAYOUT_WORK))
    monkeypatch.setattr(matmul_integer_to_float, "_bias_shape_ok", lambda shape: False)
    assert not _holds(_check(path, {}, LAYOUT_WORK))


def test_mutation_dqm_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    path = _with_bias("DynamicQuantizeMatMul", 4)
    assert _holds(_check(path, {}, LAYOUT_WORK))
    original = dynamic_quantize_matmul.DynamicQuantizeMatMulFusion._try_fuse

    def swapped(
        self: dynamic_quantize_matmul.DynamicQuantizeMatMulFusion, graph: Graph, mtf: Node, to_remove: list[Node]
    ) -> None:
        if len(mtf.inputs) >= 7:
            mtf.inputs[5], mtf.inputs[6] = mtf.inputs[6], mtf.inputs[5]
        original(self, graph, mtf, to_remove)

    monkeypatch.setattr(dynamic_quantize_matmul.DynamicQuantizeMatMulFusion, "_try_fuse", swapped)
    assert not _holds(_check(path, {}, LAYOUT_WORK))
