"""ReshapeFusion (``qdqopt/passes/reshape_fusion.py``) against ORT 1.32, computed live: alone on the
``rules/reshape_fusion*`` fixtures (three configs) and on the corpus model where ORT fuses, its trace, nodes,
initializers and bytes must be ORT's."""

from __future__ import annotations

import pytest

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
