"""TransposeOptimizer / TransposeOptimizer_CPUExecutionProvider (``qdqopt/passes/transpose_optimizer.py``) against
ORT 1.32, live.

* Every ``transpose/`` fixture and the corpus models the transpose optimizer fires on, at BASIC and EXTENDED, both
  configs (default, ``session.qdqisint8allowed=1``): where the pass's gate admits the model, ORT's saved model byte
  for byte (tier P) and ORT's trace, with both transpose optimizers running on both sides.
* Where the gate refuses, its reason is a one-line string naming what is not reproduced.
* A mutation (the cost check comparing against the inverse perm, as the names in ORT's source suggest) must make
  the comparison fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import pytest

from fixtures.handbuilt import transpose as transpose_fixtures
from qdqopt.compare import compare_level
from qdqopt.config import SessionConfig
from qdqopt.graph.model import load_model
from qdqopt.passes import TRANSFORMERS, PassContext
from qdqopt.passes.transpose_optimization import OptimizerCtx, cost
from qdqopt.passes.transpose_optimization.perms import invert_perm
from qdqopt.passes.transpose_optimizer import TransposeOptimizer, TransposeOptimizerCPU
from qdqopt.target import Target
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
    *(f"tract/{op}_{i}/model.onnx" for op in ("qrelu", "qsigmoid", "qtanh") for i in (1, 2)),
]
#: corpus models ORT's optimizer fires on that the gate refuses, with the start of its reason
REFUSED = {
    # Shape and Reshape are handled now; the pushes would copy NodeArg shapes with symbolic dims (``batch``)
    f"{TESTDATA}/attention_past_state.u8s8.onnx": "it would copy a shape with symbolic dims",
    f"{TESTDATA}/attention_past_state.u8u8.onnx": "it would copy a shape with symbolic dims",
    f"{TESTDATA}/transpose_optimizer_cancel_squeeze_per_axis_dq.onnx": "it would change the shape",
    f"{TESTDATA}/transpose_optimizer_empty_dq_q_at_graph_output.onnx": "it would change the shape",
    f"{TESTDATA}/transpose_optimizer_in_place_transpose_unsqueeze_per_axis_dq.onnx": "it would change the shape",
}
NAMES = (TransposeOptimizer.name, TransposeOptimizerCPU.name)
OWN_REFUSED = {
}


@contextmanager
def registered() -> Iterator[None]:
    """Register both passes for the test (a no-op once qdqopt.passes registers them itself)."""
    saved = {n: TRANSFORMERS.get(n) for n in NAMES}
    TRANSFORMERS[TransposeOptimizer.name] = TransposeOptimizer
    TRANSFORMERS[TransposeOptimizerCPU.name] = TransposeOptimizerCPU
    try:
        yield
    finally:
        for n, cls in saved.items():
            if cls is None:
                TRANSFORMERS.pop(n, None)
            else:
                TRANSFORMERS[n] = cls


def _corpus(rel: str) -> Path:
    path = CORPUS / rel
    if not path.is_file():
        pytest.skip(f"corpus model {rel} not found")
    return path


def _check(model: Path | onnx.ModelProto, level: str, config: dict[str, str]) -> None:
    with registered():
        comp = compare_level(model, level, config=config)  # as ORT runs: only qdqopt's side could decline
    assert not [n for n in comp.unsupported if n in NAMES], comp.unsupported
    assert comp.report.holds("P"), "\n".join(comp.report.lines())
    assert comp.ours_lines == comp.ort_lines


def _fixture(name: str) -> onnx.ModelProto:
    return next(c for c in transpose_fixtures.CASES if c.name == name).build()


OWN = [c.name for c in transpose_fixtures.CASES if c.name not in OWN_REFUSED]


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


def _reason(model: Path | onnx.ModelProto) -> str | None:
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    loaded = load_model(proto)
    ctx = PassContext(SessionConfig.from_mapping({}, warn=False), Target.detect())
    return TransposeOptimizer().unsupported(loaded.graph, ctx)


@pytest.mark.parametrize("rel", sorted(REFUSED))
def test_gate_refuses_corpus(rel: str) -> None:
    with registered():  # the gate runs on the graph the Level1 passes before it leave
        comp = compare_level(_corpus(rel), "basic", isolate=True)
    assert TransposeOptimizer.name in comp.auto_disabled
    assert comp.unsupported[TransposeOptimizer.name].startswith(REFUSED[rel]), comp.unsupported
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


@pytest.mark.parametrize("name", sorted(OWN_REFUSED))
def test_gate_refuses_fixture(name: str) -> None:
    reason = _reason(_fixture(name))
    assert reason is not None and reason.startswith(OWN_REFUSED[name])
    with registered():  # refused on both sides, the rest still matches ORT
        comp = compare_level(_fixture(name), "basic", isolate=True)
    assert TransposeOptimizer.name in comp.auto_disabled
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def test_gate_admits_firing_models() -> None:
    for rel in FIRING:
        assert _reason(_corpus(rel)) is None, rel


def test_mutation_inverse_perm_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Comparing against the inverse perm in the cost check stops the pushes: the test must notice."""
    original = cost.estimate_transpose_value_cost

    def mutated(ctx: OptimizerCtx, value: str, perm: list[int]) -> int:
        return original(ctx, value, invert_perm(perm))

    monkeypatch.setattr(cost, "estimate_transpose_value_cost", mutated)
    with pytest.raises(AssertionError):
        _check(_fixture("transpose/relu_sigmoid_cancel"), "basic", {})
