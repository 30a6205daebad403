"""WhereDummyDq (``qdqopt/passes/where_dummy_dq.py``) against ORT, live.

Each ``where/`` case, default config and ``session.qdqisint8allowed=1``, is run twice, WhereDummyDq alone and the
full BASIC level, and both times ORT's saved bytes and transformer log must come out. The switch that unregisters
it (``session.disable_quant_qdq``) is checked in ``tests/test_doubleqdq_propagation_where_matmuladd.py``.
"""

from __future__ import annotations

import pytest

from tests.passes._helpers.qdq_level1 import _fixture_params, check_fixture_alone_and_together


@pytest.mark.parametrize(("name", "pass_name", "config"), _fixture_params("WhereDummyDq"))
def test_fixture_alone_and_together(name: str, pass_name: str, config: str) -> None:
    check_fixture_alone_and_together(name, pass_name, config)
