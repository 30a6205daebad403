"""ReshapeFusion (``qdqopt/passes/reshape_fusion.py``) against ORT 1.32, computed live: alone on the
``rules/reshape_fusion*`` fixtures (three configs) and on the corpus model where ORT fuses, its trace, nodes,
initializers and bytes must be ORT's; the QDQ attention-Reshape fixtures as ORT runs them, at three levels."""

from __future__ import annotations

import pytest

from qdqopt.graph import core, inference
from tests.passes._helpers.gelu_family import assert_exact, differs, ort_modified
from tests.passes._helpers.sharing_rules import (
    _corpus_params,
    _fixture_params,
    check_corpus_alone_matches_ort,
    check_fixture_alone_matches_ort,
)


@pytest.mark.parametrize(("name", "config"), list(_fixture_params("ReshapeFusion")))
def test_fixture_alone_matches_ort(name: str, config: str) -> None:
    check_fixture_alone_matches_ort(name, config)


@pytest.mark.parametrize("config", ["default", "int8-allowed"])
@pytest.mark.parametrize(("rel", "name"), _corpus_params("ReshapeFusion"))
def test_corpus_alone_matches_ort(rel: str, name: str, config: str) -> None:
    check_corpus_alone_matches_ort(rel, name, config)


# ------------------------------------------- QDQ attention Reshapes (the quantize_static transformer fixtures' class)
_QDQ = ["rules/reshape_fusion_qdq_unk_dims", "rules/reshape_fusion_qdq_second_step"]


@pytest.mark.parametrize("config", ["default", "int8-allowed"])
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
@pytest.mark.parametrize("name", _QDQ)
def test_qdq_as_run(name: str, level: str, config: str) -> None:
    """As ORT runs (nothing disabled on either side): ORT's saved model byte for byte and its trace."""
    assert "ReshapeFusion" in (ort_modified(name, level, config) or frozenset())
    assert_exact(name, level, config)


def test_mutation_unk_dims_read_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a declared unk__<n> dim as unknown (as every shape read did) refuses the Shape/Reshape match."""
    real = core._read_type_facts

    def read_as_unknown(found: object) -> object:
        facts = real(found)  # type: ignore[arg-type]
        return (*facts[:3], facts[2])  # the dims as written are those as read

    monkeypatch.setattr(core, "_read_type_facts", read_as_unknown)
    assert differs("rules/reshape_fusion_qdq_unk_dims", "basic")


def test_mutation_shapes_not_inferred_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keeping ``View.DATA``'s first inference (the second Reshape's input never gets a shape) loses step 2."""
    monkeypatch.setattr(core.Graph, "_data_stale_at_pass_start", lambda self: False)
    assert differs("rules/reshape_fusion_qdq_second_step", "basic")


# ------------------------------------------ shape values as ORT keeps them (issue #11's Llama class, knownt/ fixtures)
_ROOTS = ["knownt/reshape_root_shape_unknown", "knownt/reshape_root_shape_folded"]


@pytest.mark.parametrize("config", ["default", "int8-allowed"])
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
@pytest.mark.parametrize("name", _ROOTS)
def test_roots_as_run(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_roots_boundary() -> None:
    """ORT folds both Concats of the twin (in two Level1 steps), none of the near miss."""
    assert "ReshapeFusion" not in (ort_modified("knownt/reshape_root_shape_unknown", "basic", "default") or ())
    assert "ReshapeFusion" in (ort_modified("knownt/reshape_root_shape_folded", "basic", "default") or ())


def test_mutation_symbols_propagated(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX's ``data_prop`` names b's dims (batch, seq): the second Reshape's shape match passes and it is folded."""
    every = lambda gp, types: {o: () for n in gp.node for o in n.output}  # noqa: E731 (all kept: ONNX's data_prop)
    monkeypatch.setattr(inference, "_ort_shape_values", every)
    assert differs("knownt/reshape_root_shape_unknown", "basic")


def test_mutation_first_data_inference_after_the_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's first inference with data made after the first fold types b already: both folded in one step."""
    monkeypatch.setattr(core.Graph, "_before_edit", lambda self: None)
    assert differs("knownt/reshape_root_shape_folded", "basic")
