"""WeightBiasQuantization, ConstantFolding and CommonSubexpressionElimination together, against ORT 1.32, live:
what no one of the three pins alone (each pass's own tests are ``tests/passes/test_weight_bias_quantization.py``,
``test_constant_folding.py`` and ``test_cse.py``; the comparison is
:func:`tests.passes._helpers.wbq_folding.assert_matches`).

* The corpus models a static scan picks as candidates (a Conv/ConvTranspose/Gemm, a Shape or If, a node on constants
  only, or two nodes with the same op on equal inputs), with the default config, and with
  ``session.qdqisint8allowed=1`` when ORT's own log shows one of the three passes firing: tier P where one fires,
  else S plus the stripped bytes.
* The PT2E TinyConvNet at BASIC, both configs; each fixture group has cases where ORT's pass fires and cases where it
  must not.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.reference import run_reference
from tests.conftest import corpus_id, corpus_models, ort_accepts
from tests.passes._helpers.wbq_folding import (
    CONFIGS,
    FIXTURES,
    INT8,
    MINE,
    _fixture,
    _fixtures_of,
    _only,
    assert_matches,
)


def _fired(c: LevelComparison) -> set[str]:
    return {line.split()[1] for line in c.ort_lines if line.endswith("1")}


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", _fixtures_of(None))
def test_fixture_matches_ort(name: str, config: str) -> None:
    assert_matches(compare_level(_fixture(name), "basic", config=CONFIGS[config], isolate=True), "P")


@pytest.mark.parametrize(
    ("group", "pass_name"),
    [
        ("wbq/", "WeightBiasQuantization"),
        ("folding/", "ConstantFolding"),
        ("folding/", "CommonSubexpressionElimination"),
    ],
)
def test_fixture_groups_cover_both_outcomes(group: str, pass_name: str) -> None:
    """Each group has cases where ORT's pass fires and cases where it must not (so the comparisons can fail)."""
    outcomes = set()
    for name in FIXTURES:
        if name.startswith(group):
            trace = run_reference(_fixture(name), "basic", disabled=_only(pass_name)).trace
            outcomes.add(any(t.name == pass_name and t.modified for t in trace))
    assert outcomes == {True, False}


# ------------------------------------------------------------------------------------------------ corpus
def _init_key(t: onnx.TensorProto) -> bytes:
    bare = onnx.TensorProto(data_type=t.data_type, dims=t.dims, raw_data=t.raw_data)
    bare.float_data.extend(t.float_data)
    bare.int32_data.extend(t.int32_data)
    bare.int64_data.extend(t.int64_data)
    return bytes(bare.SerializeToString())


def _candidate_graph(g: onnx.GraphProto, outer: frozenset[str]) -> bool:
    constants = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"} | outer
    keys = {t.name: _init_key(t) for t in g.initializer}
    produced = {o for n in g.node if n.op_type != "Constant" for o in n.output}
    seen: set[tuple[object, ...]] = set()
    for n in g.node:
        if n.op_type in ("Shape", "If", "Conv", "ConvTranspose", "Gemm"):
            return True
        if n.op_type == "Constant":
            continue
        present = [i for i in n.input if i]
        if all(i in constants and i not in produced for i in present):
            return True
        key = (n.domain, n.op_type, tuple(keys.get(i, i.encode()) for i in n.input))
        if key in seen:
            return True
        seen.add(key)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and _candidate_graph(a.g, frozenset(constants)):
                return True
    return False


def _corpus_candidates() -> list[object]:
    out: list[object] = []
    for path in corpus_models():
        proto = onnx.load(str(path), load_external_data=False)
        if _candidate_graph(proto.graph, frozenset()):
            out.append(pytest.param(path, id=corpus_id(path)))
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="shared corpus not found"))]


@pytest.mark.parametrize("path", _corpus_candidates())
def test_corpus_model_matches_ort(path: Path) -> None:
    if not ort_accepts(path):
        pytest.skip("ORT rejects the model")
    c = compare_level(path, "basic", isolate=True)
    if _fired(c) & set(MINE):
        assert_matches(c, "P")
        assert_matches(compare_level(path, "basic", config=INT8, isolate=True), "P")
    else:  # none of the three passes fires: they must at least leave the model to the others untouched
        assert_matches(c)
