"""TransposeOptimizer / TransposeOptimizer_CPUExecutionProvider (``qdqopt/passes/transpose_optimizer.py``) against
ORT 1.32, live.

* Every ``transpose/`` fixture and the corpus models the transpose optimizer fires on, at BASIC and EXTENDED, both
  configs (default, ``session.qdqisint8allowed=1``), with ORT as it runs: ORT's saved model byte for byte (tier P)
  and ORT's trace. The passes decline no model (every handler ORT 1.32 registers is implemented).
* A mutation (the cost check comparing against the inverse perm, as the names in ORT's source suggest) must make
  the comparison fail, and so must one dropping ORT 1.32's rule for outputs leading to a Transpose.
* Resize is pushed only by ORT's extended handler (``EPAwareHandleResize``: a CPU node, rank 4, NCHW <-> NHWC,
  then ``HandleResize``), so the ``resize_*`` fixtures fire at EXTENDED only.
* ``Permute1DConstant`` from ``TransposeInput`` (no ONNX-domain push reaches it) is checked on a built graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from fixtures.handbuilt import transpose as transpose_fixtures
from qdqopt.compare import compare_level
from qdqopt.graph import Graph
from qdqopt.graph.model import load_model
from qdqopt.passes.transpose_optimization import OptimizerCtx, cost, make_ctx
from qdqopt.passes.transpose_optimization.perms import invert_perm
from qdqopt.passes.transpose_optimizer import TransposeOptimizer, TransposeOptimizerCPU
from tests.conftest import CORPUS

CONFIGS = [{}, {"session.qdqisint8allowed": "1"}]
TESTDATA = "ort_testdata/onnxruntime/test/testdata"
FIRING = [
    f"{TESTDATA}/ort_github_issue_12151.onnx",
    f"{TESTDATA}/ort_github_issue_12151_neg_dq_axis.onnx",
    f"{TESTDATA}/transpose_optimizer_cancel_transpose_per_axis_dq.onnx",
    f"{TESTDATA}/transpose_optimizer_qdq_fixup_unsqueeze_per_axis_dq.onnx",
    f"{TESTDATA}/transpose_optimizer_shared_initializers.onnx",
    f"{TESTDATA}/transpose_optimizer_shared_initializers_broadcast.onnx",
    f"{TESTDATA}/transpose_optimizer_shared_initializers_broadcast2.onnx",
    # DQ -> Transpose repaired into a QDQ unit (TryFixTransposeMissingQ)
    *(f"migraphx/test/onnx/int4_const_identity{n}_qdq_test.onnx" for n in ("", "_block_sz_1", "_block_sz_2")),
    *(f"tract/{op}_{i}/model.onnx" for op in ("qrelu", "qsigmoid", "qtanh") for i in (1, 2)),
    # NodeArg types kept dim by dim (symbolic ``batch``), declared values saved with the types the run left
    f"{TESTDATA}/attention_past_state.u8s8.onnx",
    f"{TESTDATA}/attention_past_state.u8u8.onnx",
    f"{TESTDATA}/transpose_optimizer_cancel_squeeze_per_axis_dq.onnx",
    f"{TESTDATA}/transpose_optimizer_empty_dq_q_at_graph_output.onnx",
    f"{TESTDATA}/transpose_optimizer_in_place_transpose_unsqueeze_per_axis_dq.onnx",
]
NAMES = (TransposeOptimizer.name, TransposeOptimizerCPU.name)


def _corpus(rel: str) -> Path:
    path = CORPUS / rel
    if not path.is_file():
        pytest.skip(f"corpus model {rel} not found")
    return path


def _check(model: Path | onnx.ModelProto, level: str, config: dict[str, str]) -> None:
    comp = compare_level(model, level, config=config)  # as ORT runs
    assert not [n for n in comp.unsupported if n in NAMES], comp.unsupported
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines


def _fixture(name: str) -> onnx.ModelProto:
    return next(c for c in transpose_fixtures.CASES if c.name == name).build()


OWN = [c.name for c in transpose_fixtures.CASES]


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "int8"])
@pytest.mark.parametrize("level", ["basic", "extended"])
@pytest.mark.parametrize("name", OWN)
def test_fixture(name: str, level: str, config: dict[str, str]) -> None:
    _check(_fixture(name), level, config)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "int8"])
@pytest.mark.parametrize("level", ["basic", "extended"])
@pytest.mark.parametrize("rel", FIRING)
def test_corpus(rel: str, level: str, config: dict[str, str]) -> None:
    _check(_corpus(rel), level, config)


def test_mutation_inverse_perm_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Comparing against the inverse perm in the cost check stops the pushes: the test must notice."""
    original = cost.estimate_transpose_value_cost

    def mutated(ctx: OptimizerCtx, value: str, perm: list[int]) -> int:
        return original(ctx, value, invert_perm(perm))

    monkeypatch.setattr(cost, "estimate_transpose_value_cost", mutated)
    comp = compare_level(_fixture("transpose/relu_sigmoid_cancel"), "basic", config={})
    assert not comp.unsupported  # the pass ran, and left two Transposes that ORT cancels
    assert not comp.report.holds("S")
    assert any("'Transpose': 2" in str(d) for d in comp.report.differences), comp.report.lines()


def test_mutation_output_leading_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting every output in ``outputs_leading_to_transpose`` (ORT before 1.32) pushes where ORT 1.32 does not."""
    monkeypatch.setattr(cost, "pushed_transpose_cancels", lambda *args: True)
    comp = compare_level(_fixture("transpose/cost_two_consumers_no_cancel"), "basic", config={})
    assert not comp.unsupported  # the pass ran, and pushed the Transpose through the Sigmoid where ORT does not
    assert not comp.report.holds("S")
    assert any("Sigmoid 'sigmoid_s'" in str(d) for d in comp.report.differences), comp.report.lines()


def _add_with_1d_constant(shared: bool) -> tuple[Graph, OptimizerCtx]:
    """y = Add(x[2,2], c[2]) (and z = Neg(c) when ``shared``): ``TransposeInput`` on the Add's input 1."""
    nodes = [onnx.helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    outputs = [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])]
    if shared:
        nodes.append(onnx.helper.make_node("Neg", ["c"], ["z"], name="neg"))
        outputs.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2]))
    g = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 2])],
        outputs,
        [onnx.numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "c")],
    )
    graph = load_model(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 13)])).graph
    ctx = make_ctx(graph, "")
    assert ctx is not None
    return graph, ctx


@pytest.mark.parametrize("shared", [False, True])
def test_transpose_input_permutes_1d_constant(shared: bool) -> None:
    """A 1-D constant as long as the perm gets a permuted copy (``Permute1DConstant``), not a Transpose."""
    graph, ctx = _add_with_1d_constant(shared)
    add = next(n for n in graph.nodes() if n.op_type == "Add")
    ctx.transpose_input(add, 1, [1, 0], [1, 0])
    assert add.inputs[1] == "const_transpose_optimizer"
    assert graph.array("const_transpose_optimizer").tolist() == [2.0, 1.0]
    assert graph.is_initializer("c") == shared
    assert not any(n.op_type == "Transpose" for n in graph.nodes())
