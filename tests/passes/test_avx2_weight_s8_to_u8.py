"""Avx2WeightS8ToU8Transformer (``qdqopt/passes/avx2_weight_s8_to_u8.py``) against ORT 1.32, live, on the
``avx2s8/`` fixtures.

* Every fixture at BASIC, EXTENDED and ALL, with ``session.x64quantprecision=1`` (the pass registered on an AVX2
  CPU) and without, each with int8 allowed and not, nothing disabled on either side: tier P (so X) and ORT's trace;
  a model ORT cannot create a session for (one int8 weight read twice) must fail in qdqopt too. One more run with
  ``session.disable_quant_qdq=1``, which does not gate this pass.
* Mutations (the [-64, 64] test, ORT's version table, the LSTM's joint decision, the XOR, the empty zero-point
  name) must make the comparison fail.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.errors import QdqoptError
from qdqopt.graph import Graph, Node
from qdqopt.passes import TRANSFORMERS, avx2_weight_s8_to_u8, s8_to_u8
from qdqopt.reference import run_reference
from qdqopt.target import Target
from tests.conftest import fixture_model, fixture_names

pytestmark = pytest.mark.skipif(not Target.detect().u8s8_overflow, reason="needs an x86 CPU with AVX2")

X64 = {"session.x64quantprecision": "1"}
INT8 = {"session.qdqisint8allowed": "1"}
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "int8-allowed": INT8, "x64": X64, "x64-int8": {**X64, **INT8}}
LEVELS = ("basic", "extended", "all")
NAMES = [n for n in fixture_names() if n.startswith("avx2s8/")]
OWN = "Avx2WeightS8ToU8Transformer"


@functools.cache
def ort_modified(name: str, level: str, config: str) -> frozenset[str] | None:
    """The transformers ORT's log shows modifying the fixture; None when ORT cannot create the session."""
    try:
        trace = run_reference(fixture_model(name), level, config=CONFIGS[config]).trace
    except QdqoptError:
        return None
    return frozenset(t.name for t in trace if t.modified)


def compare(name: str, level: str = "extended", config: str = "x64") -> LevelComparison:
    return compare_level(fixture_model(name), level, config=CONFIGS[config])


def holds(comp: LevelComparison) -> bool:
    return comp.report.holds("P") and comp.report.holds("X") and comp.trace_matches


def differs(name: str, level: str = "extended", config: str = "x64") -> bool:
    try:
        return not holds(compare(name, level, config))
    except QdqoptError:
        return True


def test_registered() -> None:
    assert TRANSFORMERS[OWN] is avx2_weight_s8_to_u8.Avx2WeightS8ToU8Transformer


def test_fires_where_expected() -> None:
    fired = {n.split("/", 1)[1] for n in NAMES if OWN in (ort_modified(n, "extended", "x64") or frozenset())}
    assert {
        "qlinearconv_full",
        "qlinearconv_one_out",
        "qlinearconv_per_channel",
        "qlinearmatmul_opset17",
        "matmulinteger_no_zp",
        "matmulintegertofloat_empty_zp_bias",
        "dynamicquantizematmul_no_zp_bias",
        "qgemm",
        "qattention",
        "dynamicquantizelstm_r_only",
        "if_matmulinteger",
    } <= fired
    refused = {"qlinearconv_small", "qlinearconv_edge", "qlinearconv_weight_input", "qlinearmatmul_opset21"}
    assert not refused & fired
    assert OWN in (ort_modified("avx2s8/qdq_conv_u8s8", "extended", "x64-int8") or frozenset())
    assert ort_modified("avx2s8/qdq_shared_weight", "extended", "x64") is None  # ORT fails the session


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    if ort_modified(name, level, config) is None:
        with pytest.raises(QdqoptError):
            compare(name, level, config)
        return
    comp = compare(name, level, config)
    assert comp.trace_matches, "trace differs:\n" + "\n".join(
        f"{a}  |  {b}" for a, b in zip(comp.ours_lines, comp.ort_lines, strict=False) if a != b
    )
    assert holds(comp), "\n".join(comp.lines())


def test_not_gated_by_disable_quant_qdq() -> None:
    comp = compare_level(
        fixture_model("avx2s8/qlinearconv_full"), "extended", config={**X64, "session.disable_quant_qdq": "1"}
    )
    assert f"GraphTransformer {OWN} modified: 1" in comp.ort_lines
    assert holds(comp)


def test_mutation_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights within [-64, 64] stay int8."""
    assert holds(compare("avx2s8/qlinearconv_edge"))
    original = s8_to_u8.flip_int8

    def narrower(graph: Graph, src: onnx.TensorProto) -> tuple[bytes, bool]:
        data, _ = original(graph, src)
        values = np.asarray(graph.array(src.name)).astype(np.int16)
        return data, bool(np.any(np.abs(values) > 63))

    monkeypatch.setattr(s8_to_u8, "flip_int8", narrower)
    assert differs("avx2s8/qlinearconv_edge")


def test_mutation_version_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT's table has QLinearMatMul at since_version 10 only."""
    assert holds(compare("avx2s8/qlinearmatmul_opset21"))
    table = dict(avx2_weight_s8_to_u8.S8_OVERFLOW_OPS)
    table["QLinearMatMul"] = table["QLinearMatMul"]._replace(versions=(10, 21))
    monkeypatch.setattr(avx2_weight_s8_to_u8, "S8_OVERFLOW_OPS", table)
    assert differs("avx2s8/qlinearmatmul_opset21")


def test_mutation_lstm_joint(monkeypatch: pytest.MonkeyPatch) -> None:
    """W converts with R when only R lies outside [-64, 64]."""
    assert holds(compare("avx2s8/dynamicquantizelstm_r_only"))
    original = s8_to_u8.flip_int8

    def w_decides(graph: Graph, src: onnx.TensorProto) -> tuple[bytes, bool]:
        data, outside = original(graph, src)
        return data, outside and src.name == "W"

    monkeypatch.setattr(avx2_weight_s8_to_u8, "flip_int8", w_decides)
    assert differs("avx2s8/dynamicquantizelstm_r_only")


def test_mutation_xor(monkeypatch: pytest.MonkeyPatch) -> None:
    """uint8 = int8 XOR 0x80 (v + 128), not a plain reinterpretation."""
    assert holds(compare("avx2s8/qlinearconv_full"))
    original = s8_to_u8.flip_int8

    def as_is(graph: Graph, src: onnx.TensorProto) -> tuple[bytes, bool]:
        _, outside = original(graph, src)
        return np.asarray(graph.array(src.name)).astype(np.int8).tobytes(), outside

    monkeypatch.setattr(s8_to_u8, "flip_int8", as_is)
    assert differs("avx2s8/qlinearconv_full")


def test_mutation_empty_zero_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty zero-point name counts as absent (a zero point is generated), not as a refusal."""
    assert holds(compare("avx2s8/matmulintegertofloat_empty_zp_bias"))

    def convert(graph: Graph, node: Node, weight: int, zp: int) -> bool:
        if zp < len(node.inputs) and node.inputs[zp] == "":
            return False
        return s8_to_u8.convert_s8_weight_to_u8(graph, node, weight, zp)

    monkeypatch.setattr(avx2_weight_s8_to_u8, "convert_s8_weight_to_u8", convert)
    assert differs("avx2s8/matmulintegertofloat_empty_zp_bias")
