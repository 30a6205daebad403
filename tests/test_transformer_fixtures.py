"""The transformer fixtures (``fixtures.TRANSFORMERS``, built by ``fixtures/transformers.py``).

Every one is committed, small, passes ``onnx.checker`` (full check), loads in ONNX Runtime 1.32 CPU at
ORT_DISABLE_ALL (in a child process: a crash there must not take pytest down), and ``qdqopt.optimize(model,
"extended")`` either runs or stops with one of qdqopt's own errors, the one recorded for it in :data:`KNOWN_ERRORS`
(never an internal exception; the CI sample only, all with QDQOPT_FULL=1). The set covers every architecture with
each exporter and each variant the module docstring lists. How qdqopt compares with ORT on them is measured by
``python -m benchmarks.transformer_table``; the per-fixture differential sweeps run a sample of them
(``tests/conftest.py``). Rebuilding needs torch and onnxscript (skipped without them).
"""

from __future__ import annotations

import collections
import importlib.util

import onnx
import pytest

import fixtures
import qdqopt
from fixtures.transformers import ARCHS, EXPORTERS, FP16_EXPORTER, QUANTIZED, combinations, fixture_name
from qdqopt.errors import QdqoptError
from tests.conftest import assert_committed_sizes, ort_disable_all_failures

NAMES = list(fixtures.TRANSFORMERS)

#: fixture -> the start of the qdqopt error ``optimize(..., "extended")`` stops with today (a fixture that is not
#: listed must optimize). A listed fixture that optimizes passes too: then its entry is stale and can go.
KNOWN_ERRORS: dict[str, str] = {}

MAX_FILE_BYTES = 1_500_000
MAX_TOTAL_BYTES = 25_000_000


def test_registry() -> None:
    assert NAMES, "no transformer fixture registered"
    assert [fixture_name(*c) for c in combinations()] == NAMES
    kinds = {name: kind for name, (kind, _) in fixtures.TRANSFORMERS.items()}
    assert set(kinds.values()) == {"float", "ortquant", "ortdynamic", "ortnbits"}
    assert not set(NAMES) & (set(fixtures.COMMITTED) | set(fixtures.REALARCH))
    listed = {f.name: f.kind for f in fixtures.all_fixtures()}
    assert all(listed[name] == kinds[name] for name in NAMES)
    for arch in ARCHS:
        for exporter in EXPORTERS:
            for variant in ("fp32", *QUANTIZED):
                assert fixture_name(arch, variant, exporter) in NAMES
        assert fixture_name(arch, "qdq4", "dynamo") in NAMES
        assert fixture_name(arch, "fp16", FP16_EXPORTER) in NAMES
    exporters = collections.Counter(n.rsplit("_", 1)[1] for n in NAMES)
    assert set(exporters) == set(EXPORTERS)


def test_exports_are_what_the_docstring_says() -> None:
    """Opsets per exporter, fp16 really float16, the quantized forms present (so that a silent change of exporter
    or quantizer shows up here, not as a puzzling difference in the sweeps)."""
    for name in NAMES:
        model = fixtures.get(name).build()
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        ops = collections.Counter(n.op_type for n in model.graph.node)
        exporter, variant = name.rsplit("_", 1)[1], name.split("_", 1)[1].rsplit("_", 1)[0]
        if variant == "qdq_a16w8":
            assert opset == 21, name  # quantize_static raises the opset for 16-bit types
            qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
            assert qdq and all(n.domain == "com.microsoft" for n in qdq), name
        else:
            assert opset == {"ts13": 13, "ts14": 14, "dynamo": 21}[exporter], name
        inputs = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
        if variant == "fp16":
            assert set(inputs.values()) <= {onnx.TensorProto.INT64, onnx.TensorProto.FLOAT16}, name
        else:
            assert onnx.TensorProto.FLOAT16 not in inputs.values(), name
        expected = {
            "dyn": ("DynamicQuantizeLinear", "MatMulInteger"),
            "qdq_u8u8": ("QuantizeLinear", "DequantizeLinear"),
            "qdq_u8s8": ("QuantizeLinear", "DequantizeLinear"),
            "qdq_a16w8": ("QuantizeLinear", "DequantizeLinear"),
            "nbits4": ("MatMulNBits",),
            "qdq4": ("DequantizeLinear",),
        }.get(variant, ("MatMul",))
        assert all(ops[op] for op in expected), (name, ops)


def test_files_are_small() -> None:
    assert_committed_sizes(NAMES, MAX_FILE_BYTES, MAX_TOTAL_BYTES)


def test_ort_loads_every_fixture_at_disable_all() -> None:
    """One child process creates an ORT_DISABLE_ALL session for each fixture and reports what failed."""
    assert ort_disable_all_failures([str(fixtures.committed_model_path(name)) for name in NAMES]) == {}


def test_checker_accepts_every_fixture() -> None:
    for name in NAMES:
        onnx.checker.check_model(fixtures.get(name).build(), full_check=True)


# parametrized by ``name``: tests/conftest.py runs the CI sample of them unless QDQOPT_FULL=1 (a run on a transformer
# fixture takes seconds; benchmarks/transformer_table.py runs qdqopt on every one at four levels)
@pytest.mark.parametrize("name", NAMES)
def test_optimizes(name: str) -> None:
    try:
        qdqopt.optimize(fixtures.get(name).build(), "extended")
    except QdqoptError as exc:
        assert name in KNOWN_ERRORS, f"unexpected qdqopt error: {exc}"
        assert str(exc).startswith(KNOWN_ERRORS[name]), str(exc)


@pytest.mark.parametrize("fixture", NAMES)
def test_reproducible(fixture: str) -> None:
    pytest.importorskip("torch")
    if importlib.util.find_spec("onnxscript") is None:  # the dynamo exporter needs it
        pytest.skip("onnxscript is not installed")
    from fixtures import build

    assert build.serialize(build.builders()[fixture]()) == fixtures.committed_model_path(fixture).read_bytes(), (
        "the committed model differs from a fresh build: rerun `python -m fixtures.build --only transformers`"
    )
