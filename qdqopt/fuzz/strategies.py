"""Random QDQ graphs: a builder driven by a source of choices, and the Hypothesis strategy over it.

:func:`build_model` makes one valid-looking QDQ model from a :class:`Choices` (``pick``, ``integer``, ``chance``):
a chain or DAG of the float ops ORT's QDQ passes look at, each data input behind ``QuantizeLinear ->
DequantizeLinear``, weights behind a ``DequantizeLinear`` of a constant. The model-wide draws come first (opset 13 to
23, Q/DQ domain ONNX or ``com.microsoft``, activation and weight types u8/s8/u16/s16/u4/s4/float8 where the opset
and ORT take them, 4-bit activations included, fp32 or fp16, a symbolic batch dim, a symbolic sequence dim), then 1
to ``max_ops`` steps, each an op from :data:`OPS` on tensors already made. Quantization parameters come as
initializers, Constant nodes or graph inputs, zero points are sometimes left out (a uint8 Q's, or from opset 21 any
Q's, which then says its type with ``output_dtype``), scales are shared between a Q and its DQ or not, and values
are drawn at the boundaries the passes test: zero points at the ends of their range and at .5 ties of a float,
scales of exactly ``FLT_EPSILON`` or one step of ``2**-k``, Clip bounds exactly at the quantized range's ends. Graph
outputs come from anywhere (a Q's output, a DQ's, an activation's), a DQ feeds several consumers when a value is
used twice, ``If`` branches and ``Loop`` bodies dequantize outer values, and bfloat16 appears where ORT's CPU EP
takes it (its only bf16 kernel is Cast): constants cast to the float type, and values cast through bf16 and back.

:func:`graphs` wraps the builder as a Hypothesis strategy (its choices are Hypothesis draws, so Hypothesis can shrink
them, or, with ``uniform``, a seeded ``random.Random``); :func:`generate` is a seeded, deterministic run of the
builder over seeded ``random.Random`` choices (no Hypothesis).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["OPS", "Choices", "GeneratedCase", "build_model", "generate", "graphs"]

T = TypeVar("T")

FLT_EPSILON = float(np.finfo(np.float32).eps)
MS = "com.microsoft"

#: element type -> (numpy dtype for the values, lowest, highest)
QTYPES: dict[int, tuple[Any, int, int]] = {
    TensorProto.UINT8: (np.uint8, 0, 255),
    TensorProto.INT8: (np.int8, -128, 127),
    TensorProto.UINT16: (np.uint16, 0, 65535),
    TensorProto.INT16: (np.int16, -32768, 32767),
    TensorProto.UINT4: (np.uint8, 0, 15),
    TensorProto.INT4: (np.int8, -8, 7),
}
FLOAT8 = (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2)


class Choices(Protocol):
    """Where the builder's choices come from (Hypothesis draws, or a seeded ``random.Random``)."""

    def pick(self, options: Sequence[T]) -> T: ...

    def integer(self, low: int, high: int) -> int: ...

    def chance(self, percent: int) -> bool: ...


class RandomChoices:
    """:class:`Choices` from a ``random.Random`` (used to replay a case without Hypothesis)."""

    def __init__(self, rnd: Any) -> None:
        self.rnd = rnd

    def pick(self, options: Sequence[T]) -> T:
        picked: T = options[self.rnd.randrange(len(options))]
        return picked

    def integer(self, low: int, high: int) -> int:
        return int(self.rnd.randint(low, high))

    def chance(self, percent: int) -> bool:
        return bool(self.rnd.randrange(100) < percent)


class HypothesisChoices:
    """:class:`Choices` as Hypothesis draws (shrinkable: a smaller draw is a simpler graph)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(self.st.sampled_from(list(options)))  # type: ignore[no-any-return]

    def integer(self, low: int, high: int) -> int:
        return int(self.draw(self.st.integers(low, high)))

    def chance(self, percent: int) -> bool:
        return int(self.draw(self.st.integers(0, 99))) < percent


@dataclass
class Tensor:
    """A float value of the graph being built, as the builder knows it."""

    name: str
    shape: list[int | str]
    #: the Q output this float value is the DQ of (so a consumer may take another DQ of it: DQ fan-out per consumer)
    quant: QParams | None = None


@dataclass
class QParams:
    """Quantization parameters of one Q or DQ: the q value's name, its type, and the scale/zp input names."""

    q: str
    qtype: int
    scale: str
    zp: str | None
    axis: int | None = None
    block: int | None = None


@dataclass
class Builder:
    """The model under construction."""

    ch: Choices
    opset: int
    qdomain: str
    ftype: int
    act_type: int
    w_type: int
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    shared: dict[str, str] = field(default_factory=dict)
    counter: int = 0
    notes: list[str] = field(default_factory=list)

    # ---------------------------------------------------------------------------------------------- plumbing
    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}_{self.counter}"

    @property
    def npf(self) -> Any:
        return np.float16 if self.ftype == TensorProto.FLOAT16 else np.float32

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, domain: str = "", **attrs: Any) -> list[str]:
        name = self.fresh(op.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs

    def const(self, stem: str, value: Any, *, how: str = "init") -> str:
        """A constant as an initializer, a Constant node, or (how="input") a graph input fed at run time."""
        arr = np.asarray(value)
        name = self.fresh(stem)
        if how == "constant":
            self.nodes.append(
                helper.make_node(
                    "Constant", [], [name], name=self.fresh("constant"), value=numpy_helper.from_array(arr, name)
                )
            )
        elif how == "input":
            elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
            self.inputs.append(helper.make_tensor_value_info(name, elem, list(arr.shape)))
        else:
            self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def typed_const(self, stem: str, values: Any, elem: int, dims: Sequence[int], how: str = "init") -> str:
        """A constant of an ONNX element type numpy cannot hold (int4, float8) through ``make_tensor``."""
        name = self.fresh(stem)
        flat = np.asarray(values).reshape(-1).tolist()
        tensor = helper.make_tensor(name, elem, list(dims), flat)
        if how == "constant":
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh("constant"), value=tensor))
        else:
            self.inits.append(tensor)
        return name

    # ---------------------------------------------------------------------------------------------- Q/DQ
    def draw_scale(self) -> float:
        return float(
            self.ch.pick(
                [
                    0.0078125,
                    1 / 255,
                    0.05,
                    0.1,
                    0.02,
                    2.0**-10,
                    FLT_EPSILON,
                    0.5,
                    0.003921568859368563,
                    float(np.float32(0.1) * 3),
                ]
            )
        )

    def draw_zp(self, qtype: int) -> int:
        _, low, high = QTYPES[qtype]
        mid = (low + high + 1) // 2
        return int(self.ch.pick([0, low, high, mid, mid - 1, low + 1, high - 1, 0 if low < 0 else mid]))

    def qparams_const(
        self,
        qtype: int,
        n: int = 1,
        axis: int | None = None,
        block: int | None = None,
        dims: Sequence[int] | None = None,
    ) -> tuple[str, str | None]:
        """Scale and zero point inputs; ``n`` values per axis (or ``dims`` for blocked)."""
        how = self.ch.pick(["init"] * 6 + ["constant", "input"])
        shape: list[int] = list(dims) if dims is not None else ([n] if axis is not None else [])
        count = int(np.prod(shape)) if shape else 1
        scales = np.array([self.draw_scale() for _ in range(min(count, 3))] * count, dtype=self.npf)[:count]
        scale = self.const("scale", scales.reshape(shape), how=how)
        if qtype == TensorProto.UINT8 and self.ch.chance(25):
            return scale, None
        if self.opset >= 21 and self.qdomain == "" and self.ch.chance(10):
            return scale, None  # no zero point: a Q says its type with output_dtype, a DQ reads it from its input
        if qtype in FLOAT8:
            zp = self.typed_const("zp", [0.0] * count, qtype, shape, how="constant" if how == "constant" else "init")
            return scale, zp
        if qtype in (TensorProto.UINT4, TensorProto.INT4):
            zv = [self.draw_zp(qtype)] * count
            return scale, self.typed_const("zp", zv, qtype, shape, how="constant" if how == "constant" else "init")
        dtype = QTYPES[qtype][0]
        zvals = np.array([self.draw_zp(qtype) for _ in range(min(count, 2))] * count, dtype=dtype)[:count]
        zp = self.const("zp", zvals.reshape(shape), how="init" if how == "input" and self.ch.chance(50) else how)
        return scale, zp

    def quantize(self, x: Tensor, qtype: int | None = None) -> QParams:
        qtype = self.act_type if qtype is None else qtype
        key = f"{x.name}:{qtype}"
        if key in self.shared and self.ch.chance(60):
            scale, zp = self.shared[key].split("|")
            zp_name: str | None = zp or None
        else:
            scale, zp_name = self.qparams_const(qtype)
            self.shared[key] = f"{scale}|{zp_name or ''}"
        ins = [x.name, scale] + ([zp_name] if zp_name else [])
        attrs: dict[str, Any] = {}
        if qtype in FLOAT8 and self.ch.chance(30):
            attrs["saturate"] = 0
        if zp_name is None and qtype != TensorProto.UINT8:
            attrs["output_dtype"] = qtype
        (q,) = self.node("QuantizeLinear", ins, domain=self.qdomain, **attrs)
        return QParams(q, qtype, scale, zp_name)

    def dequantize(self, qp: QParams, shape: Sequence[int | str]) -> Tensor:
        scale, zp = qp.scale, qp.zp
        if self.ch.chance(15):  # the DQ with its own copy of the parameters (ORT's ConstantSharing may merge them)
            pass
        ins = [qp.q, scale] + ([zp] if zp else [])
        attrs: dict[str, Any] = {}
        if qp.axis is not None:
            attrs["axis"] = qp.axis
        if qp.block is not None:
            attrs["block_size"] = qp.block
        (out,) = self.node("DequantizeLinear", ins, domain=self.qdomain, **attrs)
        return Tensor(out, list(shape), qp)

    def qdq(self, x: Tensor) -> Tensor:
        """``x`` behind Q -> DQ (activation type); a value already so quantized may get a fresh DQ of its Q."""
        if x.quant is not None and self.ch.chance(50):
            return self.dequantize(x.quant, x.shape) if self.ch.chance(50) else x
        return self.dequantize(self.quantize(x), x.shape)

    def weight(self, shape: Sequence[int], axis: int | None = None, block_axis: int | None = None) -> str:
        """A constant weight behind a DQ: per tensor, per axis (``axis``) or blocked (``block_axis``, opset 21)."""
        rng = np.random.default_rng(self.counter * 7919 + len(shape))
        qtype = self.w_type
        mode = "tensor"
        if axis is not None and self.ch.chance(50):
            mode = "axis"
        if block_axis is not None and self.opset >= 21 and self.qdomain == "" and self.ch.chance(35):
            mode = "block"
        _, low, high = QTYPES.get(qtype, (None, -8, 7))
        values = rng.integers(max(low, -20), min(high, 20) + 1, size=list(shape))
        if self.ch.chance(20):
            values.flat[0] = low
            values.flat[-1] = high
        if qtype in FLOAT8:
            data = self.typed_const("w", values.astype(np.float32) / 4, qtype, shape)
        elif qtype in (TensorProto.UINT4, TensorProto.INT4):
            data = self.typed_const("w", values, qtype, shape)
        else:
            data = self.const("w", values.astype(QTYPES[qtype][0]))
        if mode == "axis":
            assert axis is not None
            scale, zp = self.qparams_const(qtype, n=shape[axis], axis=axis)
            qp = QParams(data, qtype, scale, zp, axis=axis)
        elif mode == "block":
            assert block_axis is not None
            block = self.ch.pick([16, 32, 2])
            dims = list(shape)
            dims[block_axis] = math.ceil(shape[block_axis] / block)
            scale, zp = self.qparams_const(qtype, dims=dims)
            qp = QParams(data, qtype, scale, zp, axis=block_axis, block=block)
        else:
            scale, zp = self.qparams_const(qtype)
            qp = QParams(data, qtype, scale, zp)
        return self.dequantize(qp, list(shape)).name

    def bias(self, n: int) -> str | None:
        choice = self.ch.pick(["none", "float", "int32"])
        if choice == "none":
            return None
        rng = np.random.default_rng(self.counter + n)
        if choice == "float":
            return self.const("b", rng.standard_normal(n).astype(self.npf))
        data = self.const("b", rng.integers(-500, 500, n).astype(np.int32))
        scale = self.const("bscale", np.array(self.draw_scale() * 0.01, dtype=self.npf))
        zp = self.const("bzp", np.array(0, dtype=np.int32)) if self.ch.chance(50) else None
        (out,) = self.node("DequantizeLinear", [data, scale] + ([zp] if zp else []), domain=self.qdomain)
        return out

    def pick_tensor(self, rank: int | None = None, last: bool = True) -> Tensor | None:
        found = [t for t in self.tensors if rank is None or len(t.shape) == rank]
        if not found:
            return None
        if last and self.ch.chance(70):
            return found[-1]
        return self.ch.pick(found)

    def out(self, name: str, shape: list[int | str], quantize: bool = True) -> Tensor:
        """A new float value; usually behind its own Q -> DQ (the next op's input)."""
        t = Tensor(name, shape)
        if quantize and self.ch.chance(85):
            qp = self.quantize(t)
            if self.ch.chance(10):
                self.add_output(qp.q, shape, elem=qp.qtype)
            t = self.dequantize(qp, shape)
        self.tensors.append(t)
        return t

    def add_output(self, name: str, shape: Sequence[int | str] | None, elem: int | None = None) -> None:
        if any(o.name == name for o in self.outputs):
            return
        self.outputs.append(helper.make_tensor_value_info(name, self.ftype if elem is None else elem, shape))


# -------------------------------------------------------------------------------------------------------- the ops
def _static(shape: Sequence[int | str]) -> list[int]:
    return [d if isinstance(d, int) else 1 for d in shape]


def op_conv(b: Builder) -> bool:
    x = b.pick_tensor(4)
    if x is None:
        return False
    c = int(_static(x.shape)[1])
    depthwise = b.ch.chance(20)
    cout = c if depthwise else b.ch.pick([2, 4, 8, 3])
    k = b.ch.pick([1, 3])
    group = c if depthwise else 1
    pad = b.ch.pick([0, k // 2])
    stride = b.ch.pick([1, 1, 2])
    w = b.weight([cout, c // group, k, k], axis=0)
    xin = b.qdq(x)
    bias = b.bias(cout)
    attrs: dict[str, Any] = {"kernel_shape": [k, k], "pads": [pad] * 4, "strides": [stride, stride]}
    if group > 1:
        attrs["group"] = group
    (y,) = b.node("Conv", [xin.name, w] + ([bias] if bias else []), **attrs)
    h, wd = (int(d) for d in _static(x.shape)[2:])
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    if oh < 1 or ow < 1:
        return False
    b.out(y, [x.shape[0], cout, oh, ow])
    return True


def op_conv_transpose(b: Builder) -> bool:
    x = b.pick_tensor(4)
    if x is None:
        return False
    c = int(_static(x.shape)[1])
    cout = b.ch.pick([2, 4])
    k = b.ch.pick([1, 2, 3])
    stride = b.ch.pick([1, 2])
    w = b.weight([c, cout, k, k], axis=1)
    xin = b.qdq(x)
    bias = b.bias(cout)
    (y,) = b.node(
        "ConvTranspose", [xin.name, w] + ([bias] if bias else []), kernel_shape=[k, k], strides=[stride, stride]
    )
    h, wd = (int(d) for d in _static(x.shape)[2:])
    b.out(y, [x.shape[0], cout, (h - 1) * stride + k, (wd - 1) * stride + k])
    return True


def op_matmul(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None or len(x.shape) < 2:
        return False
    k = int(_static(x.shape)[-1])
    xin = b.qdq(x)
    other = [t for t in b.tensors if t.shape == x.shape and len(t.shape) >= 2 and t is not x]
    if b.ch.chance(20) and k == int(_static(x.shape)[-2]):
        y_in = b.qdq(b.ch.pick(other) if other else x)
        (y,) = b.node("MatMul", [xin.name, y_in.name])
        b.out(y, list(x.shape))
        return True
    m = b.ch.pick([4, 8, 16, 32])
    w = b.weight([k, m], axis=1, block_axis=0)
    (y,) = b.node("MatMul", [xin.name, w])
    t = b.out(y, [*x.shape[:-1], m])
    if b.ch.chance(30):  # MatMul followed by Add: MatMulAddFusion / MatMulNBits' bias
        bias = b.bias(m) or b.const("b", np.zeros(m, dtype=b.npf))
        (z,) = b.node("Add", [b.qdq(t).name, bias])
        b.out(z, list(t.shape))
    return True


def op_gemm(b: Builder) -> bool:
    x = b.pick_tensor(2)
    if x is None:
        return False
    k = int(_static(x.shape)[1])
    n = b.ch.pick([4, 8, 10])
    trans_b = b.ch.pick([0, 1])
    w = b.weight([n, k] if trans_b else [k, n], axis=0 if trans_b else 1)
    xin = b.qdq(x)
    bias = b.bias(n)
    attrs: dict[str, Any] = {"transB": trans_b}
    if b.ch.chance(20):
        attrs["alpha"] = b.ch.pick([1.0, 0.5, 2.0])
    if bias and b.ch.chance(20):
        attrs["beta"] = b.ch.pick([1.0, 0.5])
    (y,) = b.node("Gemm", [xin.name, w] + ([bias] if bias else []), **attrs)
    b.out(y, [x.shape[0], n])
    return True


def op_binary(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None:
        return False
    op = b.ch.pick(["Add", "Mul", "Sub", "Div", "Add"])
    same = [t for t in b.tensors if t.shape == x.shape]
    if b.ch.chance(50) and len(same) > 1:
        other = b.qdq(b.ch.pick(same)).name
    else:
        shape = [1] * len(x.shape)
        if len(shape) >= 2 and b.ch.chance(50):
            shape[1] = int(_static(x.shape)[1])
        rng = np.random.default_rng(b.counter)
        vals = (rng.random(shape) + 0.5).astype(np.float32)
        if b.ch.chance(50):
            q = b.const(
                "c",
                np.clip(np.round(vals * 10), 1, 100).astype(np.uint8 if b.act_type == TensorProto.UINT8 else np.int8),
            )
            qtype = TensorProto.UINT8 if b.act_type == TensorProto.UINT8 else TensorProto.INT8
            scale, zp = b.qparams_const(qtype)
            other = b.dequantize(QParams(q, qtype, scale, zp), shape).name
        elif b.ch.chance(25):  # a bfloat16 constant (ORT's CPU EP has no bf16 kernels but Cast): Cast to the float type
            bf16 = b.typed_const("c_bf16", vals, TensorProto.BFLOAT16, shape)
            (other,) = b.node("Cast", [bf16], to=b.ftype)
        else:
            other = b.const("c", vals.astype(b.npf))
    xin = b.qdq(x)
    ins = [xin.name, other] if b.ch.chance(70) else [other, xin.name]
    (y,) = b.node(op, ins)
    b.out(y, list(x.shape))
    return True


def op_unary(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None:
        return False
    ops = ["Relu", "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Clip", "Erf", "Softmax", "Identity", "HardSwish"]
    if b.opset >= 20:
        ops.append("Gelu")
    op = b.ch.pick(ops)
    xin = b.qdq(x) if b.ch.chance(85) else x
    attrs: dict[str, Any] = {}
    ins = [xin.name]
    if op == "LeakyRelu":
        attrs["alpha"] = b.ch.pick([0.01, 0.1, 0.0, 0.2])
    elif op == "Softmax":
        attrs["axis"] = b.ch.pick([-1, 1])
    elif op == "Gelu" and b.ch.chance(50):
        attrs["approximate"] = "tanh"
    elif op == "Clip":
        lo = b.ch.pick([0.0, -FLT_EPSILON, FLT_EPSILON, -1.0, None])
        hi = b.ch.pick([6.0, 1.0, None, 6e4])
        ins.append(b.const("min", np.array(lo, dtype=b.npf)) if lo is not None else "")
        if hi is not None:
            ins.append(b.const("max", np.array(hi, dtype=b.npf)))
        while ins and ins[-1] == "":
            ins.pop()
    (y,) = b.node(op, ins, **attrs)
    t = b.out(y, list(x.shape))
    if b.ch.chance(10):
        b.add_output(y, t.shape)
    return True


def op_pool(b: Builder) -> bool:
    x = b.pick_tensor(4)
    if x is None:
        return False
    op = b.ch.pick(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "MaxPool"])
    xin = b.qdq(x)
    h, w = (int(d) for d in _static(x.shape)[2:])
    if op.startswith("Global"):
        (y,) = b.node(op, [xin.name])
        b.out(y, [x.shape[0], x.shape[1], 1, 1])
        return True
    k = b.ch.pick([2, 3])
    pad = b.ch.pick([0, 1]) if k == 3 else 0
    stride = b.ch.pick([1, 2])
    attrs: dict[str, Any] = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
    if op == "AveragePool" and b.ch.chance(30):
        attrs["count_include_pad"] = 1
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if oh < 1 or ow < 1:
        return False
    (y,) = b.node(op, [xin.name], **attrs)
    b.out(y, [x.shape[0], x.shape[1], oh, ow])
    return True


def op_resize(b: Builder) -> bool:
    x = b.pick_tensor(4)
    if x is None:
        return False
    xin = b.qdq(x)
    mode = b.ch.pick(["nearest", "linear"])
    ctm = b.ch.pick(["half_pixel", "asymmetric", "align_corners", "tf_crop_and_resize", "pytorch_half_pixel"])
    roi = b.const("roi", np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.float32)) if ctm == "tf_crop_and_resize" else ""
    scales = b.const("scales", np.array([1, 1, 2, 2], dtype=np.float32))
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest" and b.ch.chance(50):
        attrs["nearest_mode"] = b.ch.pick(["floor", "round_prefer_ceil"])
    (y,) = b.node("Resize", [xin.name, roi, scales], **attrs)
    h, w = (int(d) for d in _static(x.shape)[2:])
    b.out(y, [x.shape[0], x.shape[1], 2 * h, 2 * w])
    return True


def op_concat(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None or len(x.shape) < 2:
        return False
    same = [
        t for t in b.tensors if len(t.shape) == len(x.shape) and t.shape[:1] + t.shape[2:] == x.shape[:1] + x.shape[2:]
    ]
    parts = [x, b.ch.pick(same)]
    if b.ch.chance(30):
        parts.append(b.ch.pick(same))
    ins = [b.qdq(p).name for p in parts]
    (y,) = b.node("Concat", ins, axis=1)
    c = sum(int(_static(p.shape)[1]) for p in parts)
    b.out(y, [x.shape[0], c, *x.shape[2:]])
    return True


def op_split(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None or len(x.shape) < 2 or int(_static(x.shape)[1]) % 2:
        return False
    xin = b.qdq(x)
    c = int(_static(x.shape)[1])
    if b.opset >= 18 and b.ch.chance(50):
        outs = b.node("Split", [xin.name], n_out=2, axis=1, num_outputs=2)
    else:
        outs = b.node(
            "Split", [xin.name, b.const("split", np.array([c // 2, c // 2], dtype=np.int64))], n_out=2, axis=1
        )
    for o in outs:
        b.out(o, [x.shape[0], c // 2, *x.shape[2:]])
    return True


def op_shape_ops(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None:
        return False
    op = b.ch.pick(
        [
            "Reshape",
            "Flatten",
            "Transpose",
            "Squeeze",
            "Unsqueeze",
            "Slice",
            "Pad",
            "Gather",
            "Expand",
            "Tile",
            "DepthToSpace",
        ]
    )
    xin = b.qdq(x)
    shape = list(x.shape)
    dims = _static(shape)
    rank = len(shape)
    if op == "Reshape":
        if rank < 2:
            return False
        target = [0, -1] if b.ch.chance(60) else [int(dims[0]), -1]
        (y,) = b.node("Reshape", [xin.name, b.const("shape", np.array(target, dtype=np.int64))])
        new: list[int | str] = [shape[0], int(np.prod(dims[1:]))]
    elif op == "Flatten":
        (y,) = b.node("Flatten", [xin.name], axis=1)
        new = [shape[0], int(np.prod(dims[1:]))]
    elif op == "Transpose":
        perm = list(range(rank))[::-1] if b.ch.chance(30) else ([0, 2, 3, 1] if rank == 4 else list(range(rank))[::-1])
        (y,) = b.node("Transpose", [xin.name], perm=perm)
        new = [shape[p] for p in perm]
    elif op == "Unsqueeze":
        (y,) = b.node("Unsqueeze", [xin.name, b.const("axes", np.array([rank], dtype=np.int64))])
        new = [*shape, 1]
    elif op == "Squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1 and i > 0]
        if not ones:
            return False
        (y,) = b.node("Squeeze", [xin.name, b.const("axes", np.array(ones[:1], dtype=np.int64))])
        new = [d for i, d in enumerate(shape) if i != ones[0]]
    elif op == "Slice":
        axis = rank - 1
        n = int(dims[axis])
        if n < 2:
            return False
        step = b.ch.pick([1, 1, 2])
        ins = [
            xin.name,
            b.const("starts", np.array([0], dtype=np.int64)),
            b.const("ends", np.array([n - 1], dtype=np.int64)),
            b.const("axes", np.array([axis], dtype=np.int64)),
        ]
        if step != 1:
            ins.append(b.const("steps", np.array([step], dtype=np.int64)))
        (y,) = b.node("Slice", ins)
        new = [*shape[:-1], len(range(0, n - 1, step))]
    elif op == "Pad":
        if rank != 4:
            return False
        mode = b.ch.pick(["constant", "reflect", "edge"])
        pads = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64)
        ins = [xin.name, b.const("pads", pads)]
        if mode == "constant" and b.ch.chance(50):
            ins.append(b.const("cval", np.array(b.ch.pick([0.0, 1.0]), dtype=b.npf)))
        if mode == "reflect" and min(dims[2:]) < 2:
            return False
        (y,) = b.node("Pad", ins, mode=mode)
        new = [shape[0], shape[1], int(dims[2]) + 2, int(dims[3]) + 2]
    elif op == "Gather":
        if rank < 2:
            return False
        n = int(dims[1])
        if b.ch.chance(30):
            idx = b.const("idx", np.array(n - 1, dtype=np.int64))
            new = [shape[0], *shape[2:]]
        else:
            idx = b.const("idx", np.array([0, n - 1][: max(1, min(2, n))], dtype=np.int64))
            new = [shape[0], min(2, n), *shape[2:]]
        (y,) = b.node("Gather", [xin.name, idx], axis=1)
    elif op == "Expand":
        (y,) = b.node("Expand", [xin.name, b.const("eshape", np.array([1] * rank, dtype=np.int64))])
        new = shape
    elif op == "Tile":
        reps = [1] * rank
        reps[-1] = 2
        (y,) = b.node("Tile", [xin.name, b.const("reps", np.array(reps, dtype=np.int64))])
        new = [*shape[:-1], int(dims[-1]) * 2]
    else:  # DepthToSpace
        if rank != 4 or int(dims[1]) % 4:
            return False
        (y,) = b.node("DepthToSpace", [xin.name], blocksize=2)
        new = [shape[0], int(dims[1]) // 4, int(dims[2]) * 2, int(dims[3]) * 2]
    b.out(y, new)
    return True


def op_where(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None:
        return False
    rng = np.random.default_rng(b.counter)
    cond = b.const("cond", rng.random([1] * (len(x.shape) - 1) + [int(_static(x.shape)[-1])]) > 0.5)
    same = [t for t in b.tensors if t.shape == x.shape]
    other = b.qdq(b.ch.pick(same)).name
    (y,) = b.node("Where", [cond, b.qdq(x).name, other])
    b.out(y, list(x.shape))
    return True


def op_layernorm(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None or b.opset < 17:
        return False
    n = int(_static(x.shape)[-1])
    scale = b.const("gamma", np.ones(n, dtype=b.npf))
    bias = b.const("beta", np.zeros(n, dtype=b.npf))
    (y,) = b.node("LayerNormalization", [b.qdq(x).name, scale, bias], axis=-1, epsilon=1e-5)
    b.out(y, list(x.shape))
    return True


def op_reduce_argmax(b: Builder) -> bool:
    x = b.pick_tensor()
    if x is None or len(x.shape) < 2:
        return False
    if b.ch.chance(50):
        (y,) = b.node("ArgMax", [b.qdq(x).name], axis=1, keepdims=1)
        b.add_output(y, [x.shape[0], 1, *x.shape[2:]], elem=TensorProto.INT64)
        return True
    axes = b.const("axes", np.array([-1], dtype=np.int64))
    if b.opset >= 18:
        (y,) = b.node("ReduceMean", [b.qdq(x).name, axes], keepdims=1)
    else:
        (y,) = b.node("ReduceMean", [b.qdq(x).name], axes=[-1], keepdims=1)
    b.out(y, [*x.shape[:-1], 1])
    return True


def op_if(b: Builder) -> bool:
    """An If whose branches dequantize an outer Q value and apply an op to it (outer-scope values)."""
    x = b.pick_tensor()
    if x is None:
        return False
    qp = x.quant or b.quantize(x)
    cond_name = b.fresh("cond")
    b.inputs.append(helper.make_tensor_value_info(cond_name, TensorProto.BOOL, []))
    outs = []
    branches = []
    for tag, op in (("then", "Relu"), ("else", b.ch.pick(["Sigmoid", "Identity", "Relu"]))):
        dq_out, y = f"{tag}_{b.counter}_dq", f"{tag}_{b.counter}_y"
        nodes = [
            helper.make_node(
                "DequantizeLinear",
                [qp.q, qp.scale] + ([qp.zp] if qp.zp else []),
                [dq_out],
                name=f"{tag}_dq_{b.counter}",
                domain=b.qdomain or None,
            ),
            helper.make_node(op, [dq_out], [y], name=f"{tag}_op_{b.counter}"),
        ]
        branches.append(
            helper.make_graph(
                nodes, f"{tag}_{b.counter}", [], [helper.make_tensor_value_info(y, b.ftype, list(x.shape))]
            )
        )
        outs.append(y)
    (y,) = b.node("If", [cond_name], then_branch=branches[0], else_branch=branches[1])
    b.out(y, list(x.shape))
    return True


def op_cast_round_trip(b: Builder) -> bool:
    """A value through bfloat16 (or the other float type) and back: ``Cast(to=bf16) -> Cast(to=float type)``, which
    ORT's CPU EP runs (Cast is its only bf16 kernel) and its Cast passes may merge."""
    x = b.pick_tensor()
    if x is None:
        return False
    via = b.ch.pick([TensorProto.BFLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT])
    (mid,) = b.node("Cast", [b.qdq(x).name], to=via)
    (y,) = b.node("Cast", [mid], to=b.ftype)
    b.out(y, list(x.shape))
    return True


def op_loop(b: Builder) -> bool:
    """A Loop (trip count 1 or 2) whose body dequantizes an outer Q value (outer-scope values: the Q's output and
    its parameters) and adds it to the loop-carried value, optionally behind its own Q -> DQ."""
    x = b.pick_tensor()
    if x is None:
        return False
    qp = x.quant or b.quantize(x)
    trips = b.const("trips", np.array(b.ch.pick([1, 2]), dtype=np.int64))
    cond = b.const("cond", np.array(True))
    tag = b.fresh("body")
    dq_out, v_out, c_out = f"{tag}_dq", f"{tag}_v", f"{tag}_c"
    nodes = [
        helper.make_node(
            "DequantizeLinear",
            [qp.q, qp.scale] + ([qp.zp] if qp.zp else []),
            [dq_out],
            name=f"{tag}_dq_node",
            domain=b.qdomain or None,
        ),
    ]
    add_in = dq_out
    if b.ch.chance(50):  # a QDQ unit inside the body
        nodes.append(helper.make_node("Relu", [dq_out], [f"{tag}_r"], name=f"{tag}_relu"))
        add_in = f"{tag}_r"
    nodes += [
        helper.make_node("Add", [f"{tag}_vin", add_in], [v_out], name=f"{tag}_add"),
        helper.make_node("Identity", [f"{tag}_cin"], [c_out], name=f"{tag}_id"),
    ]
    body = helper.make_graph(
        nodes,
        tag,
        [
            helper.make_tensor_value_info(f"{tag}_i", TensorProto.INT64, []),
            helper.make_tensor_value_info(f"{tag}_cin", TensorProto.BOOL, []),
            helper.make_tensor_value_info(f"{tag}_vin", b.ftype, list(x.shape)),
        ],
        [
            helper.make_tensor_value_info(c_out, TensorProto.BOOL, []),
            helper.make_tensor_value_info(v_out, b.ftype, list(x.shape)),
        ],
    )
    (y,) = b.node("Loop", [trips, cond, b.qdq(x).name], body=body)
    b.out(y, list(x.shape))
    return True


def op_reshape_2d(b: Builder) -> bool:
    """Flatten a 4-D value to 2-D so that Gemm has something to eat."""
    x = b.pick_tensor(4)
    if x is None:
        return False
    (y,) = b.node("Flatten", [b.qdq(x).name], axis=1)
    b.out(y, [x.shape[0], int(np.prod(_static(x.shape)[1:]))])
    return True


#: name -> (builder, weight): the op families a step draws from (few table entries: Hypothesis draws an index into a
#: long table very unevenly, leaving some families out of whole runs)
OPS: dict[str, tuple[Callable[[Builder], bool], int]] = {
    "conv": (op_conv, 2),
    "conv_transpose": (op_conv_transpose, 1),
    "matmul": (op_matmul, 2),
    "gemm": (op_gemm, 1),
    "binary": (op_binary, 2),
    "unary": (op_unary, 2),
    "pool": (op_pool, 1),
    "resize": (op_resize, 1),
    "concat": (op_concat, 1),
    "split": (op_split, 1),
    "shape": (op_shape_ops, 2),
    "where": (op_where, 1),
    "layernorm": (op_layernorm, 1),
    "reduce": (op_reduce_argmax, 1),
    "if": (op_if, 1),
    "loop": (op_loop, 1),
    "cast": (op_cast_round_trip, 1),
    "flatten": (op_reshape_2d, 1),
}
_OP_TABLE = [name for name, (_, w) in OPS.items() for _ in range(w)]


U8, S8, U16, S16, U4, S4 = (
    TensorProto.UINT8,
    TensorProto.INT8,
    TensorProto.UINT16,
    TensorProto.INT16,
    TensorProto.UINT4,
    TensorProto.INT4,
)
#: (activation type, weight type, needs: "" any, "16" u16/s16 Q/DQ, "4" int4 weights, "f8" float8)
SCHEMES = [
    (U8, S8, ""),
    (U8, U8, ""),
    (S8, S8, ""),
    (U8, S8, ""),
    (U16, S8, "16"),
    (S16, S8, "16"),
    (U16, U16, "16"),
    (U8, S4, "4"),
    (U16, U4, "4"),
    (U4, U4, "4"),
    (S4, S4, "4"),
    (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FN, "f8"),
    (TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2, "f8"),
]


def _setup(ch: Choices) -> tuple[int, str, int, int]:
    """Opset, Q/DQ domain, activation and weight types: the scheme first, then a domain and an opset that have it
    (16-bit and 4-bit Q/DQ: opset 21 or com.microsoft; float8: opset 19, ONNX domain)."""
    act, wts, needs = ch.pick(SCHEMES)
    qdomain = "" if needs == "f8" else (MS if ch.chance(25) else "")
    low = 19 if needs == "f8" else (21 if needs in ("16", "4") and qdomain == "" else 13)
    opset = ch.pick([o for o in (13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23) if o >= low])
    return opset, qdomain, act, wts


def build_model(ch: Choices, max_ops: int = 6) -> onnx.ModelProto:
    """One QDQ model from ``ch``'s choices (see the module doc)."""
    opset, qdomain, act, wts = _setup(ch)
    ftype = TensorProto.FLOAT
    if ch.chance(20) and (opset >= 19 or qdomain == MS):
        ftype = TensorProto.FLOAT16
    b = Builder(ch, opset, qdomain, ftype, act, wts)
    batch: int | str = "N" if ch.chance(20) else 1
    rank = ch.pick([4, 4, 4, 2, 3])
    shape: list[int | str] = [batch, ch.pick([3, 4, 8])] + [ch.pick([4, 6, 8])] * (rank - 2)
    if rank == 3 and ch.chance(25):
        shape[1] = "S"  # a symbolic sequence dim (1 wherever the builder needs a value, and fed as 1)
    b.inputs.append(helper.make_tensor_value_info("input", ftype, shape))
    b.tensors.append(Tensor("input", shape))
    steps = ch.integer(1, max_ops)
    done = 0
    for _ in range(steps * 3):
        if done >= steps:
            break
        op = ch.pick(_OP_TABLE)
        if OPS[op][0](b):
            done += 1
    last = b.tensors[-1]
    if last.name == "input":  # nothing could be built on it
        t = b.qdq(last)
        (y,) = b.node("Relu", [t.name])
        last = b.out(y, last.shape)
    b.add_output(last.name, last.shape)
    if ch.chance(25) and len(b.tensors) > 2:
        extra = ch.pick(b.tensors[1:-1])
        b.add_output(extra.name, extra.shape)
    opsets = [helper.make_opsetid("", opset)]
    if qdomain == MS or any(n.domain == MS for n in b.nodes):
        opsets.append(helper.make_opsetid(MS, 1))
    g = helper.make_graph(b.nodes, "fuzz", b.inputs, b.outputs, b.inits)
    ir = 10 if opset >= 21 else (9 if opset >= 19 else 8)
    model = helper.make_model(g, opset_imports=opsets, ir_version=ir, producer_name="qdqopt-fuzz")
    return model


def graphs(max_ops: int = 6, *, uniform: bool = False) -> Any:
    """A Hypothesis strategy of QDQ models: :func:`build_model` over Hypothesis draws (each choice a draw, so that
    Hypothesis can shrink a failing graph choice by choice), or with ``uniform`` over a ``random.Random`` seeded by
    one Hypothesis draw. Hypothesis's draws are far from uniform over a list of a dozen options or more (an index
    into 49 op entries came out between 4 and 116 times in 3,000 draws; opset 17 once in 300 graphs), so a seeded
    run (:func:`generate`) uses ``uniform``: every op family, opset and type scheme comes up at its weight."""
    import random

    from hypothesis import strategies as st

    @st.composite
    def _models(draw: Callable[[Any], Any]) -> onnx.ModelProto:
        if uniform:
            return build_model(RandomChoices(random.Random(draw(st.integers(0, 2**63 - 1)))), max_ops)
        return build_model(HypothesisChoices(draw), max_ops)

    return _models()


@dataclass(frozen=True)
class GeneratedCase:
    """One generated model with where it came from: the run's seed and its index in the run."""

    seed: int
    index: int
    model: bytes


def generate(seed: int, budget: int, max_ops: int = 6) -> list[GeneratedCase]:
    """A seeded, deterministic run of the builder: ``budget`` distinct models, each serialized, each built from a
    ``random.Random`` whose seed the run's own ``random.Random(seed)`` draws (as :func:`graphs` with ``uniform`` does,
    without Hypothesis: its draws of large integers depend on the constants of the modules a process has loaded, so
    two processes would not see the same graphs). The same seed and budget give the same models in every process,
    so that shards (``index % n``) split one run without overlap."""
    import random

    rng = random.Random(seed)
    found: dict[bytes, None] = {}
    for _ in range(budget * 4):
        model = build_model(RandomChoices(random.Random(rng.getrandbits(64))), max_ops)
        found.setdefault(model.SerializeToString())  # a graph drawn twice counts once
        if len(found) >= budget:
            break
    return [GeneratedCase(seed, i, m) for i, m in enumerate(list(found)[:budget])]
