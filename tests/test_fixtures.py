"""Tests of the fixture registry and models (``fixtures/``).

Every fixture builds, passes ``onnx.checker.check_model`` (except where noted) and loads in ONNX Runtime 1.32 CPU at
ORT_DISABLE_ALL. The EnsureUniqueDQForNodeUnit cases are checked against ORT live. Tests that rebuild the committed
models need torch and are skipped without it; everything else runs without torch.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

import fixtures
import qdqopt
from fixtures.handbuilt.eudq import ORT_EXPECTED_DQ_COUNT

ROOT = Path(__file__).resolve().parents[1]

ALL = fixtures.all_fixtures()
NAMES = [f.name for f in ALL]

# Models that ORT accepts but onnx.checker rejects: their nodes are deliberately not topologically sorted
# (ORT sorts them itself; the checker requires file order to be topological).
CHECKER_SKIP = {
    "roundtrip/not_topo_sorted": "nodes not topologically sorted on purpose",
    "eudq/t2a_consumer_lower_index_is_later": "nodes not topologically sorted on purpose",
    "matmultranspose/unknown_rank_batch": "a graph input of unknown rank (no shape): ORT accepts it, the checker not",
    "nhwc/unknown_rank": "a graph input of unknown rank (no shape): ORT accepts it, the checker not",
    "layernorm/unknown_rank": "a graph input of unknown rank (no shape): ORT accepts it, the checker not",
    "layernorm/unknown_rank_positive_axes": "a graph input of unknown rank (no shape): ORT accepts it, the checker not",
    "focus/no_shape": "a graph input of unknown rank (no shape): ORT accepts it, the checker not",
    **{
        f"gqa/{name}": "SimplifiedLayerNormalization is ORT's own op in the ONNX domain: the checker does not know it"
        for name in (
            "prenorm",
            "prenorm_eps_mismatch",
            "prenorm_no_rotary",
            "prenorm_k_inner_wrong",
            "prenorm_q_weight_2d",
            "prenorm_axis3",
            "prenorm_float",
            "prenorm_packed",
        )
    },
}

EXPORTED_OPS = {
    "tinyconvnet_pt2e": {
        "DequantizeLinear": 16,
        "QuantizeLinear": 11,
        "Conv": 4,
        "Relu": 4,
        "MaxPool": 2,
        "Add": 1,
        "Gemm": 1,
        "ReduceMean": 1,
        "Reshape": 1,
    },
    # quantize_static removes each Relu after a Conv (it folds into the Q's range), so no Relu is left.
    "tinyconvnet_ortquant_u8s8": {
        "DequantizeLinear": 20,
        "QuantizeLinear": 10,
        "Conv": 4,
        "MaxPool": 2,
        "Add": 1,
        "Gemm": 1,
        "ReduceMean": 1,
        "Reshape": 1,
    },
    "tinyconvnet_ortquant_s8s8": {
        "DequantizeLinear": 20,
        "QuantizeLinear": 10,
        "Conv": 4,
        "MaxPool": 2,
        "Add": 1,
        "Gemm": 1,
        "ReduceMean": 1,
        "Reshape": 1,
    },
    # TinyMixNet: MatMul / Where / Transpose / Slice / Squeeze-Unsqueeze / shared-input branches
    "tinymixnet_pt2e": {
        "DequantizeLinear": 13,
        "QuantizeLinear": 10,
        "MatMul": 5,
        "Transpose": 4,
        "Add": 4,
        "Slice": 2,
        "Unsqueeze": 2,
        "Squeeze": 1,
        "Greater": 1,
        "Where": 1,
        "Relu": 1,
        "ReduceMean": 1,
        "Reshape": 1,
        "Gemm": 1,
    },
    "tinymixnet_ortquant_u8s8": {
        "DequantizeLinear": 28,
        "QuantizeLinear": 21,
        "MatMul": 5,
        "Add": 4,
        "Transpose": 2,
        "Slice": 2,
        "Unsqueeze": 2,
        "Squeeze": 1,
        "Greater": 1,
        "Where": 1,
        "Relu": 1,
        "ReduceMean": 1,
        "Reshape": 1,
        "Gemm": 1,
    },
    "tinymixnet_ortquant_s8s8": {
        "DequantizeLinear": 28,
        "QuantizeLinear": 21,
        "MatMul": 5,
        "Add": 4,
        "Transpose": 2,
        "Slice": 2,
        "Unsqueeze": 2,
        "Squeeze": 1,
        "Greater": 1,
        "Where": 1,
        "Relu": 1,
        "ReduceMean": 1,
        "Reshape": 1,
        "Gemm": 1,
    },
}


def op_counts(graph: onnx.GraphProto) -> dict[str, int]:
    c = collections.Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in graph.node)
    return dict(c)


def ort_optimized(
    model: onnx.ModelProto,
    tmp_path: Path,
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
) -> onnx.ModelProto:
    """Create an ORT CPU session and return the optimized model ORT saves."""
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3  # no "Removing initializer ..." warnings
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


def dq_counts_per_graph(graph: onnx.GraphProto, prefix: str = "") -> dict[str, int]:
    """DequantizeLinear count (any domain) of ``graph`` and of each subgraph, keyed "node/attr[/...]"."""
    out = {prefix: sum(n.op_type == "DequantizeLinear" for n in graph.node)}
    for n in graph.node:
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for i, sub in enumerate(subs):
                key = f"{n.name}/{a.name}" + (f"[{i}]" if a.type == onnx.AttributeProto.GRAPHS else "")
                out.update(dq_counts_per_graph(sub, f"{prefix}/{key}" if prefix else key))
    return out


# ---------------------------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------------------------
def test_registry_names_unique_and_order_deterministic() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert [f.name for f in fixtures.all_fixtures()] == NAMES
    assert NAMES[: len(fixtures.COMMITTED)] == list(fixtures.COMMITTED)
    assert {f.kind for f in ALL} <= {"pt2e", "ortquant", "handbuilt", "float", "ortdynamic", "ortnbits"}
    assert all(f.description for f in ALL)
    assert fixtures.get("eudq/dq_shared_among_nodes").name == "eudq/dq_shared_among_nodes"
    with pytest.raises(KeyError):
        fixtures.get("no/such/fixture")


def test_registry_and_committed_models_need_no_torch() -> None:
    code = (
        "import sys\n"
        "for m in ('torch', 'torchao'):\n"
        "    sys.modules[m] = None  # makes `import torch` fail, as if it were not installed\n"
        "import fixtures\n"
        "for f in fixtures.all_fixtures():\n"
        "    f.build()\n"
        "print(len(fixtures.all_fixtures()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == len(ALL)


def test_expected_counts_match_ort_cpp_table() -> None:
    assert list(ORT_EXPECTED_DQ_COUNT.values()) == [3, 4, 4, 4, 10, 11, 11, 11]


# ---------------------------------------------------------------------------------------------------------------
# every fixture
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", ALL, ids=NAMES)
def test_fixture_builds_checks_and_loads_in_ort(fixture: fixtures.Fixture, tmp_path: Path) -> None:
    model = fixture.build()
    assert isinstance(model, onnx.ModelProto)
    if fixture.name not in CHECKER_SKIP:
        onnx.checker.check_model(model, full_check=True)
    ort_optimized(model, tmp_path)


@pytest.mark.parametrize("name", [f.name for f in ALL if f.kind == "handbuilt"])
def test_handbuilt_is_fresh_and_deterministic(name: str) -> None:
    build = fixtures.get(name).build
    a, b = build(), build()
    assert a is not b
    assert a.SerializeToString() == b.SerializeToString()


# ---------------------------------------------------------------------------------------------------------------
# committed models
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(fixtures.COMMITTED))
def test_committed_model_file(name: str) -> None:
    path = fixtures.committed_model_path(name)
    assert path.is_file(), "run `python -m fixtures.build`"
    assert path.stat().st_size < 1_000_000
    model = fixtures.get(name).build()
    assert op_counts(model.graph) == EXPORTED_OPS[name]


@pytest.mark.parametrize("name", list(fixtures.COMMITTED))
def test_committed_model_is_reproducible(name: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from fixtures import build

    assert build.serialize(build.builders()[name]()) == fixtures.committed_model_path(name).read_bytes(), (
        "the committed model differs from a fresh build: rerun `python -m fixtures.build`"
    )


# ---------------------------------------------------------------------------------------------------------------
# EnsureUniqueDQForNodeUnit against ORT, live
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ORT_EXPECTED_DQ_COUNT))
def test_eudq_ort_cpp_cases_dq_count(name: str, tmp_path: Path) -> None:
    optimized = ort_optimized(fixtures.get(name).build(), tmp_path)
    count = sum(n.op_type == "DequantizeLinear" for n in optimized.graph.node)
    assert count == ORT_EXPECTED_DQ_COUNT[name]


@pytest.mark.parametrize("name", list(ORT_EXPECTED_DQ_COUNT))
def test_eudq_ort_cpp_cases_dq_count_qdqopt(name: str) -> None:
    optimized = qdqopt.optimize(fixtures.get(name).build(), "disable_all")
    count = sum(n.op_type == "DequantizeLinear" for n in optimized.graph.node)
    assert count == ORT_EXPECTED_DQ_COUNT[name]


def test_eudq_per_axis_duplicate_keeps_axis(tmp_path: Path) -> None:
    optimized = ort_optimized(fixtures.get("eudq/per_axis_weight_shared_by_two_convs").build(), tmp_path)
    weight_dqs = [n for n in optimized.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "w_q"]
    assert sorted(n.name for n in weight_dqs) == ["w_DQ", "w_DQ/duplicated"]
    for n in weight_dqs:
        assert {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}["axis"] == 0


def test_eudq_contrib_duplicate_keeps_domain(tmp_path: Path) -> None:
    optimized = ort_optimized(fixtures.get("eudq/contrib_dq_fanout").build(), tmp_path)
    dqs = [n for n in optimized.graph.node if n.op_type == "DequantizeLinear"]
    assert sorted(n.name for n in dqs) == ["in_DQ", "in_DQ/duplicated"]
    assert {n.domain for n in dqs} == {"com.microsoft"}


_CRASHES = [(f.name, level) for f in ALL for level in f.ort_crashes]


@pytest.mark.parametrize(("name", "level"), _CRASHES or [pytest.param(None, None, marks=pytest.mark.skip)])
def test_claimed_ort_crash_is_real(name: str, level: str, tmp_path: Path) -> None:
    """A fixture that says ORT crashes at a level: ORT really dies there (in a child process), and creates the
    session at the level below the lowest it crashes at."""
    path = tmp_path / "m.onnx"
    onnx.save(fixtures.get(name).build(), str(path))
    script = (
        "import sys, onnxruntime as ort\n"
        "so = ort.SessionOptions()\n"
        "so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[2])\n"
        "ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
    )
    levels = ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL"]
    short = ["disable_all", "basic", "extended", "layout", "all"]
    ort_level = levels[short.index(level)]
    below = levels[min(short.index(c) for c in fixtures.get(name).ort_crashes) - 1]
    crashed = subprocess.run([sys.executable, "-c", script, str(path), ort_level], check=False, capture_output=True)
    assert crashed.returncode < 0, f"ORT did not crash at {level}: {crashed.returncode} {crashed.stderr[-300:]!r}"
    fine = subprocess.run([sys.executable, "-c", script, str(path), below], check=False, capture_output=True)
    assert fine.returncode == 0, fine.stderr[-300:]
