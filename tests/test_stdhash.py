"""Checks of the libstdc++ ``unordered_map`` emulator against the real thing.

* ``std::_Hash_bytes`` and ``_Prime_rehash_policy`` are compared with the
  functions exported by the ``libstdc++.so.6`` loaded in this process (the one
  onnxruntime uses), called through ctypes.
* Metadata and node-attribute order are compared with what onnxruntime writes
  to ``SessionOptions.optimized_model_filepath`` (computed live).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, defs, helper, numpy_helper

from qdqopt.graph.stdhash import (
    PrimeRehashPolicy,
    StdUnorderedMap,
    iteration_order,
    node_attribute_order,
    std_hash_bytes,
    std_hash_string,
)

ort = pytest.importorskip("onnxruntime")

SEEDS = [0, 1, 2]


# --------------------------------------------------------------------------
# libstdc++ via ctypes
# --------------------------------------------------------------------------


class _PolicyStruct(ctypes.Structure):
    _fields_ = [("max_load_factor", ctypes.c_float), ("next_resize", ctypes.c_size_t)]


class _BoolSize(ctypes.Structure):
    _fields_ = [("first", ctypes.c_bool), ("second", ctypes.c_size_t)]


def _libstdcxx() -> ctypes.CDLL:
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        return ctypes.CDLL(name)
    except OSError:
        pytest.skip("libstdc++ not loadable")


def _random_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))


@pytest.mark.parametrize("seed", SEEDS)
def test_hash_bytes_matches_libstdcxx(seed: int) -> None:
    lib = _libstdcxx()
    fn = lib._ZSt11_Hash_bytesPKvmm
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t]
    rng = random.Random(seed)
    for _ in range(300):
        data = _random_bytes(rng)
        seed_value = rng.choice([0xC70F6907, 0, rng.getrandbits(64)])
        assert std_hash_bytes(data, seed_value) == fn(data, len(data), seed_value)
    assert std_hash_string("é") == fn("é".encode(), 2, 0xC70F6907)


@pytest.mark.parametrize("seed", SEEDS)
def test_prime_rehash_policy_matches_libstdcxx(seed: int) -> None:
    lib = _libstdcxx()
    next_bkt = lib._ZNKSt8__detail20_Prime_rehash_policy11_M_next_bktEm
    next_bkt.restype = ctypes.c_size_t
    next_bkt.argtypes = [ctypes.POINTER(_PolicyStruct), ctypes.c_size_t]
    need = lib._ZNKSt8__detail20_Prime_rehash_policy14_M_need_rehashEmmm
    need.restype = _BoolSize
    need.argtypes = [ctypes.POINTER(_PolicyStruct)] + [ctypes.c_size_t] * 3
    rng = random.Random(seed)
    probes = list(range(40)) + [rng.randrange(1 << rng.randrange(1, 40)) for _ in range(300)]
    for n in probes:
        start = rng.choice([0, 1, 2, 13, 29, rng.randrange(1000)])
        c_pol = _PolicyStruct(1.0, start)
        py_pol = PrimeRehashPolicy()
        py_pol.next_resize = start
        assert py_pol.next_bkt(n) == next_bkt(ctypes.byref(c_pol), n)
        assert py_pol.next_resize == c_pol.next_resize
    for _ in range(500):
        n_bkt = rng.choice([1, 2, 5, 13, 29, 59, 127, 257, rng.randrange(1, 5000)])
        n_elt = rng.randrange(0, 2 * n_bkt + 2)
        n_ins = rng.choice([1, 1, 1, 2, rng.randrange(1, 100)])
        start = rng.choice([0, n_bkt, n_elt, rng.randrange(0, 3 * n_bkt + 1)])
        c_pol = _PolicyStruct(1.0, start)
        py_pol = PrimeRehashPolicy()
        py_pol.next_resize = start
        res = need(ctypes.byref(c_pol), n_bkt, n_elt, n_ins)
        assert py_pol.need_rehash(n_bkt, n_elt, n_ins) == (res.first, res.second)
        assert py_pol.next_resize == c_pol.next_resize


# --------------------------------------------------------------------------
# Full container against a small C++ program (skipped without a C++ compiler)
# --------------------------------------------------------------------------

_CXX_DRIVER = r"""
#include <iostream>
#include <string>
#include <unordered_map>
int main() {
  using Map = std::unordered_map<std::string, int>;
  Map* m = new Map();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    char op = line[0];
    std::string arg = line.size() > 2 ? line.substr(2) : std::string();
    if (op == 'N') { delete m; size_t h = std::stoul(arg); m = h ? new Map(h) : new Map(); }
    else if (op == 'I') (*m)[arg];
    else if (op == 'E') m->erase(arg);
    else if (op == 'R') m->reserve(std::stoul(arg));
    else if (op == 'H') m->rehash(std::stoul(arg));
    else if (op == 'C') { Map* c = new Map(*m); delete m; m = c; }
    else if (op == 'A') { Map* c = new Map(); *c = *m; delete m; m = c; }
    else if (op == 'P') {
      std::cout << "B " << m->bucket_count() << "\n";
      for (auto& kv : *m) std::cout << "K " << kv.first << "\n";
    }
  }
  delete m;
}
"""


def _key(rng: random.Random) -> str:
    alphabet = "abcxyz_ABC019.:"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))


def _script(rng: random.Random, memo: bool = False) -> tuple[list[str], list[str]]:
    """A random script of map operations for the C++ driver, and what each ``P`` prints (``memo``: the maps in
    memo mode, where a small map is a remembered snapshot)."""
    ops: list[str] = []
    expected: list[str] = []
    table = StdUnorderedMap(memo=memo)
    keys: list[str] = []
    for _ in range(rng.randint(1, 6)):
        choice = rng.random()
        if choice < 0.15:
            hint = rng.choice([0, 1, 2, 5, 13, 14, 30, 100])
            ops.append(f"N {hint}")
            table = StdUnorderedMap(hint, memo=memo)
            keys = []
        elif choice < 0.3:
            n = rng.randrange(0, 80)
            ops.append(f"R {n}")
            table.reserve(n)
        elif choice < 0.35:
            n = rng.randrange(0, 80)
            ops.append(f"H {n}")
            table.rehash(n)
        elif choice < 0.45:
            ops.append(rng.choice("CA"))
            table = table.copy()
        for _ in range(rng.choice([1, 3, 12, 13, 14, 21, 30, 70])):
            if keys and rng.random() < 0.25:
                key = rng.choice(keys)
                ops.append(f"E {key}")
                table.erase(key)
            else:
                key = _key(rng) if not keys or rng.random() < 0.85 else rng.choice(keys)
                keys.append(key)
                ops.append(f"I {key}")
                table.insert(key)
        ops.append("P")
        expected.append(f"B {table.bucket_count}")
        expected.extend(f"K {k}" for k in table)
    return ops, expected


@pytest.fixture(scope="module")
def cxx_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to build the reference driver")
    work = tmp_path_factory.mktemp("stdhash")
    source = work / "driver.cc"
    source.write_text(_CXX_DRIVER)
    binary = work / "driver"
    subprocess.run([compiler, "-O1", "-std=c++17", "-o", str(binary), str(source)], check=True)
    return binary


@pytest.mark.parametrize("memo", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_container_matches_libstdcxx(seed: int, memo: bool, cxx_driver: Path) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        ops, expected = _script(rng, memo)
        result = subprocess.run(
            [str(cxx_driver)],
            input="\n".join(ops) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.splitlines() == expected, ops


@pytest.mark.parametrize("seed", SEEDS)
def test_memo_mode_iterates_as_the_linked_table(seed: int) -> None:
    """A map in memo mode (snapshots shared and remembered per operation) and a plain one go through the same
    scripts, twice (the second time every step is remembered), and iterate alike at every step."""
    for _ in range(2):
        plain_ops, plain = _script(random.Random(seed))
        memo_ops, memo = _script(random.Random(seed), memo=True)
        assert memo_ops == plain_ops
        assert memo == plain


def test_memo_mode_copies_share_and_diverge() -> None:
    original = StdUnorderedMap(memo=True)
    original.reserve(3)
    original.update(["kernel_shape", "pads", "strides"])
    copied = original.copy()
    copied.insert("group")
    copied.erase("pads")
    assert list(original) == iteration_order(["kernel_shape", "pads", "strides"], reserve=3)
    assert "group" in copied and "pads" not in copied and "pads" in original
    plain = StdUnorderedMap()
    plain.reserve(3)
    plain.update(["kernel_shape", "pads", "strides", "group"])
    plain.erase("pads")
    assert list(copied) == list(plain)
    assert (copied.bucket_count, copied.next_resize) == (plain.bucket_count, plain.next_resize)
    big = StdUnorderedMap(memo=True)  # past the snapshot size: a linked table from then on
    big.update(f"k{i}" for i in range(100))
    assert list(big) == iteration_order(f"k{i}" for i in range(100))


# --------------------------------------------------------------------------
# onnxruntime: metadata_props
# --------------------------------------------------------------------------


def _optimize(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    src = tmp / "in.onnx"
    dst = tmp / "out.onnx"
    onnx.save(model, str(src))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return onnx.load(str(dst))


def _identity_model(metadata: list[tuple[str, str]]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    for key, value in metadata:
        prop = model.metadata_props.add()
        prop.key = key
        prop.value = value
    return model


@pytest.mark.parametrize("seed", SEEDS)
def test_metadata_props_order(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    sizes = [0, 1, 2, 3, 5, 12, 13, 14, 15, 20, 21, 28, 29, 30, 40] + [rng.randrange(1, 70) for _ in range(10)]
    for k in sizes:
        keys = list(dict.fromkeys(_key(rng) + str(rng.randrange(10 ** rng.randrange(1, 6))) for _ in range(k)))
        if keys and rng.random() < 0.4:
            # a repeated key: first position, last value
            keys.insert(rng.randrange(len(keys) + 1), rng.choice(keys))
        pairs = [(key, f"v{i}") for i, key in enumerate(keys)]
        saved = [(p.key, p.value) for p in _optimize(_identity_model(pairs), tmp_path).metadata_props]
        last_value = dict(pairs)
        assert saved == [(key, last_value[key]) for key in iteration_order(keys)], keys


# --------------------------------------------------------------------------
# onnxruntime: node attributes
# --------------------------------------------------------------------------

_OPTIONAL: dict[str, dict[str, Any]] = {
    "QuantizeLinear": {
        "axis": 1,
        "saturate": 1,
        "output_dtype": TensorProto.UINT8,
        "block_size": 0,
    },
    "DequantizeLinear": {"axis": 1, "block_size": 0},
    "Conv": {
        "auto_pad": "NOTSET",
        "dilations": [1, 1],
        "group": 1,
        "kernel_shape": [3, 3],
        "pads": [1, 1, 1, 1],
        "strides": [1, 1],
    },
    "MaxPool": {
        "auto_pad": "NOTSET",
        "ceil_mode": 0,
        "dilations": [1, 1],
        "pads": [1, 1, 1, 1],
        "storage_order": 0,
        "strides": [1, 1],
    },
    "AveragePool": {
        "auto_pad": "NOTSET",
        "ceil_mode": 0,
        "count_include_pad": 0,
        "strides": [1, 1],
    },
    "Flatten": {"axis": 1},
    "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
    "Softmax": {"axis": -1},
    "Resize": {
        "antialias": 0,
        "coordinate_transformation_mode": "half_pixel",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        "keep_aspect_ratio_policy": "stretch",
        "mode": "nearest",
        "nearest_mode": "round_prefer_floor",
    },
    "LeakyRelu": {"alpha": 0.01},
    "Cast": {"saturate": 1},
    "ReduceMean": {"keepdims": 1, "noop_with_empty_axes": 0},
}
_REQUIRED: dict[str, dict[str, Any]] = {
    "MaxPool": {"kernel_shape": [3, 3]},
    "AveragePool": {"kernel_shape": [3, 3]},
    "Concat": {"axis": 1},
    "Cast": {"to": TensorProto.FLOAT},
    "Transpose": {"perm": [0, 1, 3, 2]},
}


def _attrs(rng: random.Random, op: str) -> dict[str, Any]:
    optional = _OPTIONAL.get(op, {})
    required = _REQUIRED.get(op, {})
    names = [n for n in optional if rng.random() < 0.5] + list(required)
    rng.shuffle(names)
    return {n: optional[n] if n in optional else required[n] for n in names}


def _qdq_model(rng: random.Random) -> onnx.ModelProto:
    """A graph whose DQ output feeds two nodes, so EnsureUniqueDQ rewrites the graph."""
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "zp"),
        numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "W"),
        numpy_helper.from_array(np.ones((256, 3), np.float32), "B"),
        numpy_helper.from_array(np.array([], np.float32), "roi"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
    ]
    wiring = [
        ("QuantizeLinear", ["x", "s", "zp"], "q"),
        ("DequantizeLinear", ["q", "s", "zp"], "dq"),
        ("Conv", ["dq", "W"], "c"),
        ("MaxPool", ["dq"], "mp"),
        ("AveragePool", ["mp"], "ap"),
        ("Concat", ["c", "c"], "cat"),
        ("Softmax", ["cat"], "sm"),
        ("LeakyRelu", ["sm"], "lr"),
        ("Resize", ["lr", "roi", "scales"], "rs"),
        ("Transpose", ["rs"], "tr"),
        ("Cast", ["tr"], "y1"),
        ("ReduceMean", ["mp"], "rm"),
        ("Flatten", ["mp"], "fl"),
        ("Gemm", ["x2", "B"], "y2"),
    ]
    nodes = [
        helper.make_node(op, inputs, [out], name=f"n{i}_{op}", **_attrs(rng, op))
        for i, (op, inputs, out) in enumerate(wiring)
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 256]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["y1", "y2", "rm", "fl", "ap"]],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _schema_defaults(node: onnx.NodeProto, opset: int) -> list[str]:
    schema = defs.get_schema(node.op_type, opset, node.domain)
    # dict order == iteration order of OpSchema::attributes() (a std::unordered_map)
    return [name for name, attr in schema.attributes.items() if attr.default_value.name]


@pytest.mark.parametrize("seed", SEEDS)
def test_node_attribute_order(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    checked = duplicated = 0
    for _ in range(8):
        model = _qdq_model(rng)
        saved = _optimize(model, tmp_path)
        source = {n.name: n for n in model.graph.node}
        saved_order = {n.name: [a.name for a in n.attribute] for n in saved.graph.node}
        for name, got in saved_order.items():
            if "/duplicated" in name:
                # DQ copied by EnsureUniqueDQForNodeUnit: a copy of the original's map.
                assert got == saved_order[name.split("/duplicated")[0]]
                duplicated += 1
                continue
            node = source[name]
            expected = node_attribute_order([a.name for a in node.attribute], _schema_defaults(node, 21))
            assert got == expected, (node.op_type, [a.name for a in node.attribute])
            checked += 1
    assert checked == 8 * 14
    assert duplicated == 8
