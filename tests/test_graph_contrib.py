"""Contrib-op inference (qdqopt.graph.contrib) against ORT: for each op, tiny models whose output is declared in
value_info without a type; ORT's saved model writes the type its Resolve inferred, qdqopt must infer the same.

Each model runs at BASIC, where EliminateIdentity removes an Identity behind the op so that both sides regenerate
the graph (an unmodified graph is written as it was loaded). ``QLinearReduceMean``, ``NhwcConv`` and
``NhwcFusedConv`` have no CPU kernel in this ORT build (ORT rejects such a model before it writes it): they are
checked against what ORT's inference functions compute instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import qdqopt
from qdqopt.graph import View, contrib, load_model
from qdqopt.graph.contrib import nchwc
from qdqopt.graph.contrib._base import KnownAttributes, display_name
from qdqopt.reference import run_reference
from qdqopt.target import Target
from tests.conftest import CORPUS

F, F16, U8, I8, U16 = TP.FLOAT, TP.FLOAT16, TP.UINT8, TP.INT8, TP.UINT16
MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
Shape = Any  # a dims list (int, str or None per dim) or None for no shape
Inputs = list[tuple[str, int, Shape]]


def _each(*items: Any) -> tuple[Any, ...]:
    """The cases' literals, typed loosely (mypy would unify each loop variable across loops)."""
    return items


def _f32(v: object) -> np.ndarray:
    return np.array(v, np.float32)


def _u8(v: object) -> np.ndarray:
    return np.array(v, np.uint8)


def _ms(op: str, ins: Sequence[str], outs: Sequence[str] = ("y",), domain: str = MS, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, list(ins), list(outs), domain=domain, **attrs)


def _model(
    node: onnx.NodeProto,
    inputs: Inputs,
    inits: dict[str, Any],
    opsets: Sequence[tuple[str, int]] = (("", 21), (MS, 1)),
) -> onnx.ModelProto:
    """``node``, its outputs declared in value_info without a type, then Identity -> Identity -> graph output."""
    nodes = [
        node,
        helper.make_node("Identity", [node.output[0]], ["__y2"], name="id1"),
        helper.make_node("Identity", ["__y2"], ["__out"], name="id2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, elem, shape) for name, elem, shape in inputs],
        [onnx.ValueInfoProto(name="__out")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
        value_info=[onnx.ValueInfoProto(name=o) for o in node.output if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    return model


def _saved_type(model: onnx.ModelProto, name: str) -> onnx.TypeProto | None:
    for vi in (*model.graph.value_info, *model.graph.output):
        if vi.name == name:
            return vi.type if vi.HasField("type") else None
    raise AssertionError(f"{name!r} is not in the saved model's value_info")


def _text(t: onnx.TypeProto | None) -> str:
    if t is None or not t.HasField("tensor_type"):
        return "untyped"
    tt = t.tensor_type
    text = TP.DataType.Name(tt.elem_type) if tt.elem_type else "?"
    if not tt.HasField("shape"):
        return text + "(no shape)"
    dims = [
        str(d.dim_value)
        if d.HasField("dim_value")
        else ("?" if d.dim_param.startswith("unk__") else d.dim_param or "?")
        for d in tt.shape.dim
    ]
    return f"{text}[{','.join(dims)}]"


def _dims(t: onnx.TypeProto | None) -> list[int | str | None] | None:
    if t is None or not t.tensor_type.HasField("shape"):
        return None
    return [
        int(d.dim_value) if d.HasField("dim_value") else (str(d.dim_param) if d.HasField("dim_param") else None)
        for d in t.tensor_type.shape.dim
    ]


# ----------------------------------------------------------------------------------------------------------- cases
QP = {"xs": _f32(0.1), "xz": _u8(1), "ys": _f32(0.2), "yz": _u8(2)}
AB = {"as": _f32(0.1), "az": _u8(1), "bs": _f32(0.1), "bz": _u8(1), "cs": _f32(0.1), "cz": _u8(1)}
CONV = {
    "xs": _f32(0.1),
    "xz": _u8(1),
    "w": np.ones((6, 3, 3, 3), np.uint8),
    "ws": _f32(0.1),
    "wz": _u8(0),
    "ys": _f32(0.2),
    "yz": _u8(2),
    "b": np.zeros(6, np.int32),
}
LN = {"g": np.ones(4, np.float32), "be": np.ones(4, np.float32), "bi": np.ones(4, np.float32)}
POOLS: list[dict[str, Any]] = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1},  # a window dropped
]
NHWC_SHAPES: list[Shape] = [[1, 5, 7, 3], ["N", 9, "W", 4], [1, None, 6, 3], None, [1, 2, 2, 3]]
O13 = (("", 13), (MS, 1))
ONC = (("", 13), (NCHWC, 1))


def _cases() -> Iterator[tuple[str, onnx.ModelProto]]:
    # contrib Q / DQ
    yield "Q no zero point", _model(_ms("QuantizeLinear", ["x", "s"]), [("x", F, ["N", 3])], {"s": _f32(0.1)})
    for zp in (np.array(0, np.int8), np.array(0, np.uint16)):
        yield (
            f"Q {zp.dtype}",
            _model(_ms("QuantizeLinear", ["x", "s", "z"]), [("x", F, ["N", 3])], {"s": _f32(0.1), "z": zp}),
        )
    yield (
        "Q per axis",
        _model(
            _ms("QuantizeLinear", ["x", "s", "z"], axis=1),
            [("x", F, ["N", 3])],
            {"s": _f32([0.1] * 3), "z": np.zeros(3, np.int8)},
        ),
    )
    yield "Q empty zp", _model(_ms("QuantizeLinear", ["x", "s", ""]), [("x", F, [2, 3])], {"s": _f32(0.1)})
    yield (
        "Q fp16",
        _model(
            _ms("QuantizeLinear", ["x", "s", "z"]),
            [("x", F16, ["N", 3])],
            {"s": np.array(0.1, np.float16), "z": _u8(0)},
        ),
    )
    for shape in _each(["N", 3], None):
        yield (
            f"DQ {shape}",
            _model(_ms("DequantizeLinear", ["x", "s", "z"]), [("x", U8, shape)], {"s": _f32(0.1), "z": _u8(0)}),
        )
    yield (  # ORT's function says float; the T2 binding of the scale makes it float16
        "DQ fp16 scale",
        _model(
            _ms("DequantizeLinear", ["x", "s", "z"]),
            [("x", U8, ["N", 3])],
            {"s": np.array(0.1, np.float16), "z": _u8(0)},
        ),
    )
    yield "DQ int32", _model(_ms("DequantizeLinear", ["x", "s"]), [("x", TP.INT32, [4])], {"s": _f32(0.1)})
    # element-wise QLinear
    for sa, sb in _each((["N", 3, 1], [4]), ([2, "A"], ["B", 1, "A"]), ([2, None], [None]), ([1], []), (None, [3])):
        for op in _each("QLinearAdd", "QLinearMul"):
            node = _ms(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
            yield f"{op} {sa} {sb}", _model(node, [("a", U8, sa), ("b", U8, sb)], AB)
    for shape in _each([2, 3, 4], ["N", None], None):
        unary: list[tuple[str, dict[str, Any]]] = [
            ("QLinearLeakyRelu", {"alpha": 0.1}),
            ("QLinearSigmoid", {}),
            ("QLinearSoftmax", {"opset": 13, "axis": -1}),
        ]
        for op, attrs in unary:
            yield f"{op} {shape}", _model(_ms(op, ["x", "xs", "xz", "ys", "yz"], **attrs), [("x", U8, shape)], QP)
    concat = {"ys": _f32(0.1), "yz": np.array(0, np.int8), "s1": _f32(0.1), "z1": np.array(0, np.int8)}
    concat |= {"s2": _f32(0.1), "z2": np.array(0, np.int8)}
    for sa, sb in _each((["N", 2, "H"], ["N", 3, "W"]), (["N", 2, "H"], ["M", None, "H"]), ([1, 2], None)):
        node = _ms("QLinearConcat", ["ys", "yz", "a", "s1", "z1", "b", "s2", "z2"], axis=1)
        yield f"QLinearConcat {sa} {sb}", _model(node, [("a", I8, sa), ("b", I8, sb)], concat)
    where = {"xs": _f32(0.1), "xz": _u8(1), "ys": _f32(0.1), "yz": _u8(1), "zs": _f32(0.1), "zz": _u8(1)}
    for sc, sx, sy in _each(([2, 1], [1, 3], [3]), (["N", 1], [1, "M"], None), ([2, 3], ["A", 3], ["A", 3])):
        node = _ms("QLinearWhere", ["c", "x", "xs", "xz", "yy", "ys", "yz", "zs", "zz"])
        yield f"QLinearWhere {sc} {sx} {sy}", _model(node, [("c", TP.BOOL, sc), ("x", U8, sx), ("yy", U8, sy)], where)
    # QGemm
    gemm = {"as": _f32(0.1), "az": _u8(1), "B": np.ones((4, 5), np.uint8), "BT": np.ones((5, 4), np.uint8)}
    gemm |= {"bs": _f32(0.1), "bz": _u8(1), "C": np.zeros(5, np.int32), "ys": _f32(0.1), "yz": _u8(2)}
    for sa in _each(["M", 4], [3, 4], None):
        node = _ms("QGemm", ["a", "as", "az", "B", "bs", "bz", "C"])
        yield f"QGemm float {sa}", _model(node, [("a", U8, sa)], gemm)
        node = _ms("QGemm", ["a", "as", "az", "BT", "bs", "bz", "C", "ys", "yz"], transB=1)
        yield f"QGemm quantized {sa}", _model(node, [("a", U8, sa)], gemm)
        node = _ms("QGemm", ["a", "as", "az", "B", "bs", "bz", "", "ys", "yz"], transA=1)
        yield f"QGemm transA {sa}", _model(node, [("a", U8, sa[::-1] if sa else None)], gemm)
    # integer MatMuls
    mm = {"B": np.ones((4, 5), np.int8), "as": _f32(0.1), "bs": _f32([0.1] * 5), "az": _u8(1)}
    mm |= {"bias": np.zeros(5, np.float32), "as16": np.array(0.1, np.float16), "bs16": np.array(0.1, np.float16)}
    for sa in _each(["N", "S", 4], [4], None, ["N", None]):
        node = _ms("MatMulIntegerToFloat", ["a", "B", "as", "bs", "az", "", "bias"])
        yield f"MatMulIntegerToFloat {sa}", _model(node, [("a", U8, sa)], mm)
        yield (
            f"DynamicQuantizeMatMul {sa}",
            _model(_ms("DynamicQuantizeMatMul", ["a", "B", "bs", "", "bias"]), [("a", F, sa)], mm),
        )
    node = _ms("MatMulIntegerToFloat", ["a", "B", "as16", "bs16"])
    yield "MatMulIntegerToFloat fp16", _model(node, [("a", U8, [2, 4])], mm)
    nbits = {"B": np.zeros((8, 1, 16), np.uint8), "sc": np.ones(8, np.float32)}
    for sa in _each(["N", "S", 32], ["N", None], None):
        node = _ms("MatMulNBits", ["a", "B", "sc"], K=32, N=8, bits=4, block_size=32)
        yield f"MatMulNBits {sa}", _model(node, [("a", F, sa)], nbits)
    # NHWC: pools, QLinearConv
    for shape in NHWC_SHAPES:
        for attrs in POOLS:
            yield f"NhwcMaxPool {shape} {attrs}", _model(_ms("NhwcMaxPool", ["x"], **attrs), [("x", U8, shape)], {})
            for cl in (0, 1):
                node = _ms("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], channels_last=cl, **attrs)
                yield f"QLinearAveragePool cl={cl} {shape} {attrs}", _model(node, [("x", U8, shape)], QP)
        dilated = _ms("NhwcMaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2])
        yield f"NhwcMaxPool dilated {shape}", _model(dilated, [("x", U8, shape)], {})
        for cl in (0, 1):
            node = _ms("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], channels_last=cl)
            yield f"QLinearGlobalAveragePool cl={cl} {shape}", _model(node, [("x", U8, shape)], QP)
    yield (
        "NhwcMaxPool 1-D",
        _model(_ms("NhwcMaxPool", ["x"], kernel_shape=[3], strides=[2]), [("x", U8, [2, 8, 3])], {}),
    )
    convs: list[dict[str, Any]] = [
        {},
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"dilations": [2, 2]},
        {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"},
    ]
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    for nchw, nhwc in _each(
        ([1, 3, 8, 8], [1, 8, 8, 3]), (["N", 3, "H", 9], ["N", "H", 9, 3]), ([1, 3, None, 7], None)
    ):
        for attrs in convs:
            yield f"QLinearConv {nchw} {attrs}", _model(_ms("QLinearConv", ins, **attrs), [("x", U8, nchw)], CONV)
            node = _ms("QLinearConv", ins, channels_last=1, **attrs)
            yield f"QLinearConv channels_last {nhwc} {attrs}", _model(node, [("x", U8, nhwc)], CONV)
    # float fusions
    for shape in _each(["N", "S", 4], ["T", 4], None, [2, None, 4]):
        for outs in _each(("y",), ("y", "m", "iv", "s"), ("y", "", "", "s"), ("y", "m")):
            node = _ms("SkipLayerNormalization", ["x", "sk", "g", "be", "bi"], outs)
            yield f"SkipLayerNormalization {shape} {outs}", _model(node, [("x", F, shape), ("sk", F, shape)], LN)
            node = _ms("SkipSimplifiedLayerNormalization", ["x", "sk", "g"], outs)
            yield (
                f"SkipSimplifiedLayerNormalization {shape} {outs}",
                _model(node, [("x", F, shape), ("sk", F, shape)], LN),
            )
        for op in _each("Gelu", "QuickGelu"):
            yield f"{op} {shape}", _model(_ms(op, ["x"]), [("x", F, shape)], {})
        for op in _each("FastGelu", "BiasGelu"):
            yield f"{op} {shape}", _model(_ms(op, ["x", "bi"]), [("x", F, shape)], LN)
    for shape in _each(["N", "S", 4], [3, "S", 4], None):
        for axis in (-1, -2, 0, 2):
            node = helper.make_node("LayerNormalization", ["x", "g"], ["y", "m", "iv"], axis=axis)
            yield f"LayerNormalization-1 {shape} axis={axis}", _model(node, [("x", F, shape)], LN, O13)
            node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y", "iv"], axis=axis)
            yield f"SimplifiedLayerNormalization-1 {shape} axis={axis}", _model(node, [("x", F, shape)], LN, O13)
    weight = {"W": np.ones((4, 3, 3, 3), np.float32)}
    for shape in _each(["N", 3, 8, "W"], [1, 3, 7, 7], None):
        node = _ms("FusedConv", ["x", "W"], activation="Relu", pads=[1, 1, 1, 1], strides=[2, 2])
        yield f"FusedConv {shape}", _model(node, [("x", F, shape)], weight)
    gemm_f = {"b": np.ones((5, 3), np.float32), "c": np.ones(5, np.float32), "bt": np.ones((3, 5), np.float32)}
    for sa in _each(["N", 3], [3, "M"], None):
        node = _ms("FusedGemm", ["a", "b", "c"], activation="LeakyRelu", activation_alpha=0.1, transB=1)
        yield f"FusedGemm {sa}", _model(node, [("a", F, sa)], gemm_f)
        node = _ms("FusedGemm", ["a", "bt"], activation="Relu", transA=1)
        yield f"FusedGemm transA {sa}", _model(node, [("a", F, sa)], gemm_f)
        yield f"FusedMatMul {sa}", _model(_ms("FusedMatMul", ["a", "b"], transB=1), [("a", F, sa)], gemm_f)
    # com.microsoft.nchwc
    for shape in _each(["N", 16, "H", 8], [1, 16, 9, 9], None, [1, None, 5, 5]):
        for attrs in [*POOLS[:4], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [2, 2]}]:
            for op in _each("MaxPool", "AveragePool"):
                node = _ms(op, ["x"], domain=NCHWC, **attrs)
                yield f"nchwc.{op} {shape} {attrs}", _model(node, [("x", F, shape)], {}, ONC)
        for op in _each("GlobalMaxPool", "GlobalAveragePool"):
            yield f"nchwc.{op} {shape}", _model(_ms(op, ["x"], domain=NCHWC), [("x", F, shape)], {}, ONC)
        node = _ms("Conv", ["x", "W", "B"], domain=NCHWC, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        conv = {"W": np.ones((16, 16, 3, 3), np.float32), "B": np.ones(16, np.float32)}
        yield f"nchwc.Conv {shape}", _model(node, [("x", F, shape)], conv, ONC)
        node = _ms("ReorderOutput", ["x"], domain=NCHWC, channels=13)
        yield f"nchwc.ReorderOutput {shape}", _model(node, [("x", F, shape)], {}, ONC)
        node = _ms("ReorderOutput", ["x"], domain=NCHWC, channels=13, channels_last=1)
        yield f"nchwc.ReorderOutput channels_last {shape}", _model(node, [("x", F, shape)], {}, ONC)
        node = _ms("Upsample", ["x"], domain=NCHWC, scales=[1, 1, 2, 3])
        yield f"nchwc.Upsample {shape}", _model(node, [("x", F, shape)], {}, ONC)
    for shape in _each(["N", 3, "H", 5], [1, 17, 2, 2], None, ["N", None, 4]):
        yield (
            f"nchwc.ReorderInput {shape}",
            _model(_ms("ReorderInput", ["x"], domain=NCHWC), [("x", F, shape)], {}, ONC),
        )
        node = _ms("ReorderInput", ["x"], domain=NCHWC, channels_last=1)
        yield f"nchwc.ReorderInput channels_last {shape}", _model(node, [("x", F, shape)], {}, ONC)


CASES = dict(_cases())


@pytest.fixture(scope="module", autouse=True)
def _ort_block_size() -> Iterator[None]:
    """ReorderInput rounds channels to the block size of the ORT we compare with."""
    nchwc.set_nchwc_block_size(Target.probe().nchwc_block_size)
    yield
    nchwc.set_nchwc_block_size(None)


@pytest.mark.parametrize("case", list(CASES))
def test_inferred_type_matches_ort(case: str) -> None:
    model = CASES[case]
    ref = run_reference(model, "basic", capture_log=False).model
    ours = qdqopt.run(model, "basic").model
    loaded = load_model(model)
    for name in (o for o in model.graph.node[0].output if o):
        expected = _saved_type(ref, name)
        got = _saved_type(ours, name)
        assert _text(got) == _text(expected), f"{name}: qdqopt {_text(got)}, ORT {_text(expected)}"
        assert got == expected
        # what the passes read (NodeArg type of the loaded graph)
        elem = expected.tensor_type.elem_type if expected is not None else 0
        assert (loaded.graph.elem_type(name, view=View.DATA) or 0) == elem
        assert loaded.graph.shape(name, view=View.DATA) == _dims(expected)


# ----------------------------------------------------------------------------- ops without a CPU kernel in this build
def _inferred(node: onnx.NodeProto, inputs: Inputs, inits: dict[str, np.ndarray]) -> str:
    model = _model(node, inputs, inits)
    inferred = onnx.shape_inference.infer_shapes(model)
    found = next((vi for vi in inferred.graph.value_info if vi.name == node.output[0]), None)
    return _text(found.type if found is not None else None)


@pytest.mark.parametrize(
    ("attrs", "shape", "expected"),
    [
        ({"axes": [1], "keepdims": 1}, [2, 3, 4], "UINT8[2,1,4]"),
        ({"axes": [-1, 0], "keepdims": 0}, ["N", 3, 4], "UINT8[3]"),
        ({"keepdims": 1}, ["N", 3], "UINT8[1,1]"),
        ({"axes": [1], "keepdims": 0}, None, "UINT8(no shape)"),
    ],
)
def test_qlinear_reduce_mean(attrs: dict[str, Any], shape: Shape, expected: str) -> None:
    """``QLinearReduceMean`` (no CPU kernel): ``axes`` (all when absent) reduced, kept as 1 with keepdims=1."""
    node = _ms("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], **attrs)
    assert _inferred(node, [("x", U8, shape)], QP) == expected


@pytest.mark.parametrize("op", ["NhwcConv", "NhwcFusedConv"])
def test_nhwc_conv(op: str) -> None:
    """``NhwcConv`` / ``NhwcFusedConv`` (no CPU kernel on x86): ONNX's Conv inference on the NCHW view."""
    weight = {"W": np.ones((4, 3, 3, 3), np.float32)}
    node = _ms(op, ["x", "W"], pads=[1, 1, 1, 1], strides=[2, 2])
    assert _inferred(node, [("x", F, ["N", 8, 7, 3])], weight) == "FLOAT[N,4,4,4]"
    assert _inferred(node, [("x", F, ["N", None, 7, 3])], weight) == "FLOAT[N,?,4,4]"


# ------------------------------------------------------------------------------------------------------ registry
def test_register_is_idempotent_and_keeps_onnx_schemas() -> None:
    first = contrib.register()
    assert first == contrib.register()
    assert "com.microsoft::QLinearConv-1" in first
    assert "ai.onnx::LayerNormalization-1" in first
    assert onnx.defs.get_schema("LayerNormalization", 17, "").since_version == 17  # ONNX's own, untouched
    assert onnx.defs.get_schema("QLinearConv", 21, "").since_version == 10
    assert onnx.defs.get_schema("QLinearMatMul", 21, "").since_version == 21


def test_block_size_is_settable() -> None:
    node = _ms("ReorderInput", ["x"], domain=NCHWC)
    model = _model(node, [("x", F, [1, 3, 4, 4])], {}, ONC)
    nchwc.set_nchwc_block_size(8)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    finally:
        nchwc.set_nchwc_block_size(Target.probe().nchwc_block_size)
    found = next(vi for vi in inferred.graph.value_info if vi.name == "y")
    assert _text(found.type) == "FLOAT[1,8,4,4]"


# ------------------------------------------------------------------------------------------------------- corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")
@pytest.mark.parametrize("level", ["layout", "all"])
def test_qlinear_conv_after_contrib_q_goes_nhwc(level: str) -> None:
    """The QLinearConvs fed by com.microsoft Q/DQ get a typed input 0: NhwcTransformer converts them as ORT does."""
    from qdqopt.compare import compare_level

    path = (
        CORPUS
        / "ort_testdata/onnxruntime/test/testdata/transform/qdq_with_multi_consumer_dq_nodes.fixed.qdq_contrib.onnx"
    )
    comparison = compare_level(path, level)
    assert comparison.report.holds("P"), "\n".join(comparison.lines())


def _infer_with(model: onnx.ModelProto, known: dict[str, Any] | None) -> list[str]:
    if known is None:
        inferred = onnx.shape_inference.infer_shapes(model)
    else:
        with KnownAttributes(known):
            inferred = onnx.shape_inference.infer_shapes(model)
    return [f"{vi.name}: {_text(vi.type)}" for vi in (*inferred.graph.value_info, *inferred.graph.output)]


@pytest.mark.parametrize("case", list(CASES))
def test_known_attributes_infer_as_the_context_does(case: str) -> None:
    """The save's inference hands the contrib inference functions the nodes' attributes (KnownAttributes, by node
    name) instead of their asking ONNX's context for each: the types are the same."""
    model = onnx.ModelProto()
    model.CopyFrom(CASES[case])
    node = model.graph.node[0]
    node.name = "the node"
    known = {display_name(node.op_type, node.domain, node.name): {a.name: a for a in node.attribute}}
    assert _infer_with(model, known) == _infer_with(model, None)


def test_known_attributes_are_read_only_for_the_node_they_name() -> None:
    """A node is known by its display name (name, op and domain): its attributes come from the map, not from the
    context; an entry for another op or domain under that name, or for another name, is not read."""
    inputs: Inputs = [("x", TP.UINT8, [1, 8, 8, 3])]
    inits = {
        "xs": _f32(1.0), "xz": _u8(0), "w": np.zeros([4, 3, 3, 3], np.int8), "ws": _f32(1.0),
        "wz": np.int8(0), "ys": _f32(1.0), "yz": _u8(0),
    }  # fmt: skip
    node = _ms("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], channels_last=1, name="conv")
    model = _model(node, inputs, inits)
    strided = {
        "channels_last": helper.make_attribute("channels_last", 1),
        "strides": helper.make_attribute("strides", [2, 2]),
    }
    as_given = _infer_with(model, None)
    assert as_given[0] == "y: UINT8[1,6,6,4]", as_given
    assert _infer_with(model, {display_name("QLinearConv", MS, "conv"): strided})[0] == "y: UINT8[1,3,3,4]"
    for other in (
        display_name("QLinearAdd", MS, "conv"),
        display_name("QLinearConv", "com.other", "conv"),
        display_name("QLinearConv", MS, "conv2"),
    ):
        assert _infer_with(model, {other: strided}) == as_given, other
