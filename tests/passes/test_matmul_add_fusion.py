"""MatMulAddFusion (``qdqopt/passes/matmul_add_fusion.py``) against ORT 1.32.

* ``matmuladd/`` fixtures: alone and within BASIC, default and int8-allowed configs, tier P plus the log.
* Its Level2 instance fuses the Attention-like MatMul+Adds that the Level1 instance keeps.
"""

from __future__ import annotations

import pytest

from qdqopt.compare import compare_level
from qdqopt.reference import run_reference
from tests.passes._helpers.qdq_level1 import _alone, _fixture, _fixture_params, check_fixture_alone_and_together


def test_matmuladd_level2_drops_attention_preservation() -> None:
    """The Level2 instance fuses the Attention-like MatMul+Adds that the Level1 instance keeps."""
    model = _fixture("matmuladd/attention_pattern")
    basic = run_reference(model, "basic", disabled=_alone("MatMulAddFusion")).model
    assert sum(n.op_type == "Gemm" for n in basic.graph.node) == 0
    comp = compare_level(model, "extended", disabled=_alone("MatMulAddFusion"), isolate=True)
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines
    assert comp.ours is not None and sum(n.op_type == "Gemm" for n in comp.ours.graph.node) == 4


@pytest.mark.parametrize(("name", "pass_name", "config"), _fixture_params("MatMulAddFusion"))
def test_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    check_fixture_alone_and_together(name, pass_name, config)


def test_mutation_a_shape_without_constant_data_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A = Reshape(x, constant): ORT knows A's dims from the constant; read without that data the fusion is missed."""
    from qdqopt.graph import Graph, View

    model = _fixture("matmuladd/reshaped_a_op12")
    assert compare_level(model, "basic").report.holds("P")
    original = Graph.shape

    def without_data(self, value, *, view=View.PASS, as_written=False):  # type: ignore[no-untyped-def]
        producer = self.producer(value)
        if producer is not None and producer.op_type == "Reshape":  # as if the Reshape's constant were not read
            return None
        return original(self, value, view=view, as_written=as_written)

    monkeypatch.setattr(Graph, "shape", without_data)
    assert not compare_level(model, "basic").report.holds("P")
