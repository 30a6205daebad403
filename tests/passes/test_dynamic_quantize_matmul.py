"""DynamicQuantizeMatMulFusion (``qdqopt/passes/dynamic_quantize_matmul.py``) against ORT 1.32, live.

* Alone (every other Level2 transformer and rule disabled on both sides) on the model ORT writes with it disabled,
  which has MatMulIntegerToFloat nodes to fuse, for each corpus model where ORT's log shows it firing: both configs,
  ORT's trace and bytes (tier P).
* A mutation (B_zp and bias swapped) must make the comparison fail.

The whole EXTENDED level and the pass alone on the firing corpus models, with MatMulIntegerToFloatFusion:
``tests/test_dynamic_quant_fusions.py``.
"""

from __future__ import annotations

import pytest

from qdqopt.compare import compare_level
from qdqopt.graph import Graph, Node
from qdqopt.passes import dynamic_quantize_matmul
from qdqopt.reference import run_reference
from tests.passes._helpers.dynamic_quant import (
    CONFIGS,
    L2_NAMES,
    LAYOUT_WORK,
    _assert_p,
    _check,
    _holds,
    _ort_modified,
    _unimplemented_firing,
    _with_bias,
    firing_models,
)


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
