"""The Level1 rewrite rules (``qdqopt/passes/rules_level1.py``, run by ``Level1_RuleBasedTransformer``) against ORT
1.32, computed live.

* The ``rules/`` fixtures (but ``rules/reshape_fusion*``) with every config of the sweep, and the corpus models where
  ORT's log shows the rule-based transformer firing: the transformer alone with all its rules, ORT's trace and
  bytes (see ``tests/passes/_helpers/sharing_rules.py``).
* BatchNorm folding in float64 must make the comparison fail.

The rule registry: ``tests/test_sharing_rules.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from qdqopt.compare import compare_level
from qdqopt.passes import rules_level1
from tests.conftest import fixture_model
from tests.passes._helpers.sharing_rules import (
    RULE_BASED,
    _alone,
    _corpus_params,
    _fixture_params,
    check_corpus_alone_matches_ort,
    check_fixture_alone_matches_ort,
)


@pytest.mark.parametrize(("name", "config"), list(_fixture_params(RULE_BASED)))
def test_fixture_alone_matches_ort(name: str, config: str) -> None:
    check_fixture_alone_matches_ort(name, config)


def test_bn_folding_precision_matters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folding BatchNormalization in float64 gives other weight bytes than ORT's float32 steps."""

    def in_float64(scale: np.ndarray, var: np.ndarray, epsilon: float) -> np.ndarray:
        wide = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
        return wide.astype(scale.dtype)

    monkeypatch.setattr(rules_level1, "_bn_factor", in_float64)
    comp = compare_level(fixture_model("rules/conv_bn_bias"), "basic", disabled=_alone(RULE_BASED), isolate=True)
    assert comp.report.holds("S") is False or not comp.report.holds("P")


@pytest.mark.parametrize("config", ["default", "int8-allowed"])
@pytest.mark.parametrize(("rel", "name"), _corpus_params(RULE_BASED))
def test_corpus_alone_matches_ort(rel: str, name: str, config: str) -> None:
    check_corpus_alone_matches_ort(rel, name, config)
