"""CommonSubexpressionElimination (``qdqopt/passes/cse.py``) against ORT 1.32, computed live, byte for byte
(:func:`tests.passes._helpers.wbq_folding.assert_matches`): the whole BASIC level on the ``folding/cse_`` cases, both
configs, and the pass alone on every ``wbq/`` and ``folding/`` fixture and the TinyConvNet. The corpus models:
``tests/test_wbq_folding_cse.py``."""

from __future__ import annotations

import pytest

from qdqopt.compare import compare_level
from tests.passes._helpers.wbq_folding import CONFIGS, FIXTURES, _fixture, _fixtures_of, _only, assert_matches


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", _fixtures_of("CommonSubexpressionElimination"))
def test_fixture_matches_ort(name: str, config: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=CONFIGS[config], isolate=True), "P")


@pytest.mark.parametrize("alone", ["CommonSubexpressionElimination"])
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_pass_alone_matches_ort(name: str, alone: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", disabled=_only(alone), isolate=True), "P")
