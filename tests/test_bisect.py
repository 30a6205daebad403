"""``qdqopt bisect``: with one pass deliberately broken by a test-only monkeypatch, the search against ORT names
that pass (or rule) and its application, and ``--numerics`` names the first dump whose outputs moved; on the
unbroken example both find nothing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from qdqopt.bisect import bisect, bisect_numerics
from qdqopt.cli import example_model, main
from qdqopt.graph import Graph
from qdqopt.passes import PassContext, RuleEffect
from qdqopt.passes.constant_folding import ConstantFolding
from qdqopt.passes.rules_level2 import ReluQuantFusion

MODEL = str(example_model())


@pytest.fixture
def relu_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """ReluQuantRewrite broken: it never removes the Relu (ORT does, the Q's zero point being the type's min)."""
    monkeypatch.setattr(ReluQuantFusion, "apply", lambda self, graph, node, ctx: RuleEffect.NONE)


@pytest.fixture
def bias_tripled(monkeypatch: pytest.MonkeyPatch) -> None:
    """ConstantFolding broken: every int32 initializer it leaves (the folded biases) is multiplied by 3."""
    original = ConstantFolding.apply_impl

    def broken(self: ConstantFolding, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = original(self, graph, ctx, graph_level)
        for name in graph.initializer_names():
            value = graph.array(name)
            if value.dtype == np.int32 and value.size > 1:
                graph.remove_initializer(name)
                graph.add_initializer(numpy_helper.from_array(value * 3, name))
        return modified

    monkeypatch.setattr(ConstantFolding, "apply_impl", broken)


@pytest.mark.usefixtures("relu_kept")
def test_bisect_finds_a_broken_rule() -> None:
    found = bisect(MODEL, "extended")
    assert found.failing_level is not None and found.failing_level.name == "EXTENDED"
    assert found.culprit is not None
    assert (found.culprit.name, found.culprit.owner) == ("ReluQuantRewrite", "Level2_RuleBasedTransformer")
    assert found.application == ("L2", 1, 1)
    assert "ReluQuantRewrite" not in found.disabled
    assert any("Relu" in d for d in found.differences)
    text = "\n".join(found.lines())
    assert "--stop-after Level2_RuleBasedTransformer:1" in text


@pytest.mark.usefixtures("bias_tripled")
def test_bisect_finds_a_broken_pass_and_numerics_too() -> None:
    found = bisect(MODEL, "basic")
    assert found.failing_level is not None and found.failing_level.name == "BASIC"
    assert found.culprit is not None and found.culprit.name == "ConstantFolding"
    assert found.application == ("L1", 2, 2)  # its first application found nothing to fold
    moved = bisect_numerics(MODEL, "basic", 0.05)
    assert moved.first is not None and moved.first.dump == "02_L1_2_ConstantFolding.onnx"
    before = [s for s in moved.steps if s.dump < moved.first.dump]
    assert before and all(s.max_abs == 0.0 for s in before)


def test_nothing_to_find_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", MODEL, "--level", "basic"]) == 0
    assert "nothing to bisect" in capsys.readouterr().out
    assert main(["bisect", MODEL, "--level", "all", "--numerics", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "no application moves the outputs more than 0.05" in out
    assert "05_L2_1_QDQSelectorActionTransformer.onnx" in out
    # whether the fused int8 kernels move the outputs at all depends on the kernels ORT's MLAS picks for the CPU (on
    # an AVX-512 VNNI machine they give the float path's outputs exactly): the exit code and the application named
    # follow what ORT measures, live; nothing before the fusion moves them
    measured = bisect_numerics(MODEL, "all", 0.0)
    moved = [s for s in measured.steps if s.crashed or (s.max_abs or 0.0) > 0.0]
    code = main(["bisect", MODEL, "--level", "all", "--numerics", "0"])
    out = capsys.readouterr().out
    if moved:
        assert code == 1
        assert f"first application past the tolerance: {moved[0].dump.removesuffix('.onnx')}" in out
        assert moved[0].dump >= "05_L2_1_QDQSelectorActionTransformer.onnx"
    else:
        assert code == 0
        assert "no application moves the outputs more than 0" in out
