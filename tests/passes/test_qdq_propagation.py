"""QDQPropagationTransformer (``qdqopt/passes/qdq_propagation.py``) against ORT, computed live: on every
``propagation/`` fixture, with either config, the pass alone and the whole BASIC level must match ORT (tier P, log
lines included). The corpus models it fires on: ``tests/test_doubleqdq_propagation_where_matmuladd.py``."""

from __future__ import annotations

import pytest

from tests.passes._helpers.qdq_level1 import _fixture_params, check_fixture_alone_and_together


@pytest.mark.parametrize(("name", "pass_name", "config"), _fixture_params("QDQPropagationTransformer"))
def test_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    check_fixture_alone_and_together(name, pass_name, config)
