"""ConstantSharing (``qdqopt/passes/constant_sharing.py``) against ORT 1.32, computed live.

* The ``sharing/`` fixtures and the corpus models where ORT's log shows it firing, the pass alone, both configs:
  ORT's trace and bytes (see ``tests/passes/_helpers/sharing_rules.py``).
* A wrong survivor order (file order instead of libstdc++ hash order) must make the comparison fail; the element
  count limit.
"""

from __future__ import annotations

import pytest

from qdqopt.compare import compare_level
from qdqopt.passes import constant_sharing as cs_module
from qdqopt.passes.constant_sharing import ConstantSharing, _element_count
from tests.conftest import fixture_model
from tests.passes._helpers.sharing_rules import (
    _alone,
    _corpus_params,
    _fixture_params,
    _report,
    check_corpus_alone_matches_ort,
    check_fixture_alone_matches_ort,
)


def test_survivor_follows_hash_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """With file order instead of ``name_to_initial_tensor_`` order the surviving scale name is wrong."""
    name = "sharing/cs_many_scales_hash_order"
    good = compare_level(fixture_model(name), "basic", disabled=_alone(ConstantSharing.name), isolate=True)
    assert good.report.holds("P"), _report(good)
    monkeypatch.setattr(cs_module, "initializer_map_order", lambda graph: graph.initializer_names())
    bad = compare_level(fixture_model(name), "basic", disabled=_alone(ConstantSharing.name), isolate=True)
    assert not bad.report.holds("X")


@pytest.mark.parametrize(("name", "config"), list(_fixture_params("ConstantSharing")))
def test_fixture_alone_matches_ort(name: str, config: str) -> None:
    check_fixture_alone_matches_ort(name, config)


@pytest.mark.parametrize(
    ("dims", "count"),
    [([], 1), ([8], 8), ([2, 4], 8), ([9], None), ([3, 3], None), ([0], None), ([2, 0, 5], None), (["n", 1], None)],
)
def test_constant_sharing_element_limit(dims: list[int | str | None], count: int | None) -> None:
    assert _element_count(dims) == count


@pytest.mark.parametrize("config", ["default", "int8-allowed"])
@pytest.mark.parametrize(("rel", "name"), _corpus_params("ConstantSharing"))
def test_corpus_alone_matches_ort(rel: str, name: str, config: str) -> None:
    check_corpus_alone_matches_ort(rel, name, config)
