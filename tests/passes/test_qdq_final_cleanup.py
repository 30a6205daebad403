"""QDQFinalCleanupTransformer (``qdqopt/passes/qdq_final_cleanup.py``) against ORT 1.32, live.

Every ``level2_small/cleanup_*`` fixture, at EXTENDED with the default config, with int8 allowed and with
``session.enable_quant_qdq_cleanup=1``, then the transformer by itself: the same trace and model bytes as ORT.
"""

from __future__ import annotations

import pytest

from tests.passes._helpers.level2_small import _fixtures_of, check_fixture_full_extended


@pytest.mark.parametrize("name", _fixtures_of("QDQFinalCleanupTransformer"))
def test_fixture_full_extended(name: str) -> None:
    check_fixture_full_extended(name)
