"""The rewrite rules of ``Level1_RuleBasedTransformer`` (and GemmTransposeFusion, also a Level2 rule), under ORT's
exact rule names (docs/notes/rule_names.md). None is QDQ-specific; on QDQ models they fire where float islands hold
the pattern::

    eliminations                               fusions
    P ─> Identity ─> C        =>  P ─> C       Conv(W,B) ─> Add(c)          =>  Conv(W, B+c)
    P ─> Slice(0:INT64_MAX) ─> C => P ─> C     Conv(W,B) ─> Mul(s)          =>  Conv(W·s, B·s)
    x ─> Add(0) / Mul(1) ─> C  =>  x ─> C      Conv ─> BatchNormalization   =>  Conv(W', B')
    Unsqueeze(const, axes)     =>  const'      Pad(0) ─> Conv/AveragePool   =>  Conv(pads += ...)
    Cast(to = own type)        =>  removed     Gemm ─> Sum(C)               =>  Gemm(A, B, C)
    Relu ─> Clip(min)          =>  Clip(max(min, 0))
    Not ─> Where(c, a, b)      =>  Where(x, b, a)

Rules (the ``SatisfyCondition``/``Apply`` of each ORT ``.cc``, ORT 1.32):

* Node removals go through :mod:`qdqopt.passes.graph_utils` (``CanRemoveNode``: one used output, no graph output,
  exactly one input edge or a single input def). EliminateIdentity may also remove an Identity whose output is a
  graph output: its producer then writes that graph output directly.
* Op versions and domains are checked as ORT lists them (``IsSupportedOptypeVersionAndDomain``).
* New names: ``GenerateNodeArgName`` for initializers (``UnsqueezeElimination_<x>``, ``ConvAddFusion_B_<b>``,
  ``ConvAddFusion_Add_B_<c>``, ``ConvMulFusion_W_<w>``, ``ConvMulFusion_Mul_B_<s>``, ``ConvBnFusion_W_<w>``,
  ``ConvBnFusion_BN_B_<b>``, ``FuseReluClip_<relu>_min_zero_constant``, ``MatMulBnFusion_GemmB_<b>``,
  ``MatMulBnFusion_GemmBias``, and the Gemm node's name ``MatMulBnFusion_Gemm``); ``GenerateNodeName`` for
  ``<gemm>/GemmSumFusion/`` and ``<gemm>/GemmTransposeFusion/``. Names are generated exactly where ORT generates
  them, including calls whose rule then gives up (UnsqueezeElimination on Unsqueeze-13), so that the shared
  ``_token_N`` counter stays in step.
* Fused weights use ORT's ``Initializer`` arithmetic: element-wise in the tensor type (float16/bfloat16 through
  float32 and back), ``var + epsilon`` with the float epsilon, ``sqrt``, ``scale / sqrt(...)``, then
  ``W[o, ...] *= scale[o]`` (MatMul: ``B[:, n] *= scale[n]``) and the bias formulas of ConvBNFusion /
  MatMulBNFusion in ORT's order. Every step is one IEEE operation, which numpy reproduces bit for bit.
* ``ORT_THROW``/error statuses inside a rule (invalid Unsqueeze axes, an unexpected Clip ``min`` type) fail the
  session in ORT; they raise :class:`~qdqopt.errors.ModelError` here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node, View
from qdqopt.passes.base import PassContext, RewriteRule, RuleEffect
from qdqopt.passes.graph_utils import (
    can_remove_node,
    can_replace_node_with_initializer,
    constant_initializer,
    finalize_node_fusion,
    finalize_nodes_fusion,
    input_edge_count,
    input_node,
    is_constant,
    is_output_used,
    is_supported_op,
    node_produces_graph_output,
    output_edge_count,
    output_nodes,
    remove_node,
    replace_downstream_node_input,
    replace_node_with_initializer,
)

__all__ = [
    "CastChainElimination",
    "CastElimination",
    "ConvAddFusion",
    "ConvBNFusion",
    "ConvMulFusion",
    "DivMulFusion",
    "EliminateDropout",
    "EliminateIdentity",
    "EliminateSlice",
    "ExpandElimination",
    "FuseReluClip",
    "GemmSumFusion",
    "GemmTransposeFusion",
    "LabelEncoderFusion",
    "MatmulBNFusion",
    "NoopElimination",
    "NotWhereFusion",
    "PadFusion",
    "PreShapeNodeElimination",
    "UnsqueezeElimination",
]

TP = onnx.TensorProto
INT64_MAX = int(np.iinfo(np.int64).max)
_FLOATING = frozenset({TP.FLOAT, TP.FLOAT16, TP.DOUBLE})  # optimizer_utils::IsFloatingPointDataType
_HALF = frozenset({TP.FLOAT16, TP.BFLOAT16})


# --------------------------------------------------------------------------------------------------- helpers
def _tensor(graph: Graph, name: str) -> onnx.TensorProto | None:
    found = constant_initializer(graph, name)
    return None if found is None else found[1]


def _array(graph: Graph, name: str) -> np.ndarray:
    found = constant_initializer(graph, name)
    assert found is not None, name
    owner, _ = found
    return owner.array(name)


def _first_value(array: np.ndarray) -> float:
    """``*initializer.data<T>()`` taken as float (``halfToFloat`` for float16)."""
    return float(np.asarray(array).reshape(-1)[0])


def _numeric(array: np.ndarray) -> np.ndarray:
    """``ToNumeric<T>``: half types compute in float32, the others in their own type."""
    return array.astype(np.float32) if array.dtype.itemsize == 2 and array.dtype.kind not in "iu" else array


def _elementwise(op: Callable[[np.ndarray, np.ndarray], np.ndarray], lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``Initializer::add/sub/mul/div``: ``T(op(numeric(a), numeric(b)))`` element by element."""
    left = _numeric(lhs).reshape(-1)
    right = _numeric(rhs).reshape(-1).astype(left.dtype)
    with np.errstate(all="ignore"):
        out = op(left, right)
    return np.asarray(out).astype(lhs.dtype).reshape(lhs.shape)


def _add_scalar(array: np.ndarray, value: float) -> np.ndarray:
    """``Initializer::add(float)``: ``T(numeric(x) + v)`` with the float ``v``."""
    numeric = _numeric(array)
    with np.errstate(all="ignore"):
        out = numeric + np.asarray(np.float32(value), dtype=numeric.dtype)
    return np.asarray(out).astype(array.dtype)


def _sqrt(array: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(np.sqrt(_numeric(array))).astype(array.dtype)


def _scale_by_axis(data: np.ndarray, scalers: np.ndarray, axis: int, column_major: bool = False) -> np.ndarray:
    """``Initializer::scale_by_axis``: blocks of ``prod(dims[axis:])`` elements, block i times ``scalers[i]`` (or
    element j of each block times ``scalers[j]`` when column-major; one scaler scales everything)."""
    block = int(np.prod(data.shape[axis:], dtype=np.int64))
    blocks = int(np.prod(data.shape[:axis], dtype=np.int64))
    values = _numeric(data).reshape(blocks, block) if data.size else _numeric(data).reshape(0, 0)
    factors = _numeric(scalers).reshape(-1).astype(values.dtype)
    with np.errstate(all="ignore"):
        if factors.size == 1:
            out = values * factors[0]
        elif column_major:
            out = values * factors[np.newaxis, :]
        else:
            out = values * factors[:, np.newaxis]
    return np.asarray(out).astype(data.dtype).reshape(data.shape)


def _make_tensor(array: np.ndarray, name: str, data_type: int, dims: list[int] | None = None) -> onnx.TensorProto:
    """``Initializer::ToProto`` (``TensorToTensorProto``): dims, type and ``raw_data`` (strings: ``string_data``)."""
    shape = list(array.shape) if dims is None else list(dims)
    if data_type == TP.STRING:
        tensor = numpy_helper.from_array(np.asarray(array, dtype=object).reshape(shape), name)
    else:
        tensor = onnx.helper.make_tensor(name, data_type, shape, vals=np.ascontiguousarray(array).tobytes(), raw=True)
    return tensor


def _dims(tensor: onnx.TensorProto) -> list[int]:
    return [int(d) for d in tensor.dims]


def _is_one(dim: int | str | None) -> bool:
    return isinstance(dim, int) and dim == 1


def _dim_eq(left: int | str | None, right: int | str | None) -> bool:
    """ORT's ``operator==`` on ``TensorShapeProto_Dimension``: equal known values or equal non-empty params."""
    if isinstance(left, int):
        return isinstance(right, int) and left == right
    if isinstance(left, str):
        return isinstance(right, str) and left == right and left != ""
    return False


def _same_ep(a: Node, b: Node) -> bool:
    return a.ep == b.ep


def _reason(ok: bool, why: str) -> str | None:
    return None if ok else why


# ------------------------------------------------------------------------------------------- eliminations
class EliminateIdentity(RewriteRule):
    """``EliminateIdentity`` (identity_elimination.cc)."""

    name = "EliminateIdentity"
    op_types = ("Identity",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if can_remove_node(graph, node):
            return None
        if output_edge_count(graph, node) != 0 or len(node.outputs) != 1:
            return "cannot remove, and the output is used or the node has several outputs"
        if not node_produces_graph_output(graph, node):
            return "cannot remove"
        producer = input_node(graph, node, 0)
        if producer is None:
            return "graph output fed from a graph input or initializer"
        if producer.op_type == "YieldOp":
            return "input comes from a YieldOp"
        src = producer.outputs.index(node.inputs[0])
        if graph.is_graph_output(producer.outputs[src]):
            return "the input is a graph output too"
        if sum(1 for e in graph.output_edges(producer) if e.src_slot == src) > 1:
            return "the input has other consumers"
        return None

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        if not node_produces_graph_output(graph, node):
            return RuleEffect.REMOVED_CURRENT_NODE if remove_node(graph, node) else RuleEffect.NONE
        output = node.outputs[0]
        producer = input_node(graph, node, 0)
        assert producer is not None
        slot = producer.outputs.index(node.inputs[0])
        graph.remove_node(node)
        graph.set_output(producer, slot, output)
        return RuleEffect.REMOVED_CURRENT_NODE


class _RemoveNodeRule(RewriteRule):
    """Rules whose ``Apply`` is ``graph_utils::RemoveNode``."""

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        return RuleEffect.REMOVED_CURRENT_NODE if remove_node(graph, node) else RuleEffect.NONE


def _int_values(graph: Graph, name: str) -> list[int]:
    """EliminateSlice's ``get_initializer_data``: int32/int64 values, anything else is empty."""
    tensor = _tensor(graph, name)
    if tensor is None or tensor.data_type not in (TP.INT32, TP.INT64):
        return []
    return [int(v) for v in _array(graph, name).reshape(-1)]


def _constant_input(graph: Graph, node: Node, slot: int) -> str | None:
    """Input ``slot`` of ``node`` if it is given and constant, else None."""
    name = node.input(slot)
    return name if name and is_constant(graph, name) else None


class EliminateSlice(_RemoveNodeRule):
    """``EliminateSlice`` (slice_elimination.cc): starts all 0, ends all >= INT64_MAX (steps 1 if given)."""

    name = "EliminateSlice"
    op_types = ("Slice",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Slice", (1, 10, 11, 13)):
            return "Slice version"
        if not can_remove_node(graph, node):
            return "cannot remove"
        if node.since_version == 1:
            starts = node.attr_ints("starts")
            ends = node.attr_ints("ends")
            if starts is None or ends is None or len(starts) != len(ends):
                return "starts/ends attributes"
            axes = node.attr_ints("axes")
            if axes is not None and len(axes) != len(starts):
                return "axes attribute"
        else:
            starts_name, ends_name = _constant_input(graph, node, 1), _constant_input(graph, node, 2)
            if starts_name is None or ends_name is None:
                return "starts/ends not constant"
            starts, ends = _int_values(graph, starts_name), _int_values(graph, ends_name)
            if not starts or not ends or len(starts) != len(ends):
                return "starts/ends sizes"
            if node.input(3):
                axes_name = _constant_input(graph, node, 3)
                axes_tensor = _tensor(graph, axes_name) if axes_name is not None else None
                if axes_tensor is None or len(axes_tensor.dims) != 1 or int(axes_tensor.dims[0]) != len(starts):
                    return "axes"
                if node.input(4):
                    steps_name = _constant_input(graph, node, 4)
                    if steps_name is None:
                        return "steps not constant"
                    steps = _int_values(graph, steps_name)
                    if len(steps) != len(starts) or any(s != 1 for s in steps):
                        return "steps"
        if any(s != 0 or e < INT64_MAX for s, e in zip(starts, ends, strict=False)):
            return "not a full slice"
        return None


class UnsqueezeElimination(RewriteRule):
    """``UnsqueezeElimination`` (unsqueeze_elimination.cc): Unsqueeze(axes attribute) of a constant initializer."""

    name = "UnsqueezeElimination"
    op_types = ("Unsqueeze",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        return _reason(bool(node.inputs) and is_constant(graph, node.inputs[0]), "input is not a constant initializer")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        source = node.inputs[0]
        tensor = _tensor(graph, source)
        assert tensor is not None
        new_name = graph.generate_value_name("UnsqueezeElimination_" + source)
        if not can_replace_node_with_initializer(graph, node, new_name):
            return RuleEffect.NONE
        axes = node.attr_ints("axes")
        if axes is None:
            return RuleEffect.NONE
        rank = len(axes) + len(tensor.dims)
        normalized: list[int] = []
        for axis in axes:
            if not -rank <= axis < rank:
                raise ModelError(
                    f"'axes' has an out of range axis value {axis} for output rank {rank}. "
                    f"This is an invalid model. Node: {node.name}"
                )
            normalized.append(axis + rank if axis < 0 else axis)
        new_dims = [0] * rank
        for axis in normalized:
            if new_dims[axis] != 0:
                raise ModelError(
                    f"'axes' has a duplicate axis value {axis}. This is an invalid model. Node: {node.name}"
                )
            new_dims[axis] = 1
        remaining = iter(_dims(tensor))
        new_dims = [d if d != 0 else next(remaining) for d in new_dims]
        array = _array(graph, source)
        graph.add_initializer(_make_tensor(array, new_name, int(tensor.data_type), new_dims))
        replace_node_with_initializer(graph, node, new_name)
        return RuleEffect.REMOVED_CURRENT_NODE


class EliminateDropout(_RemoveNodeRule):
    """``EliminateDropout`` (dropout_elimination.cc): the mask output must be unused."""

    name = "EliminateDropout"
    op_types = ("Dropout",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Dropout", (1, 6, 7, 10, 12, 13, 22)):
            return "Dropout version"
        return _reason(can_remove_node(graph, node) and not is_output_used(graph, node, 1), "cannot remove")


class ExpandElimination(_RemoveNodeRule):
    """``ExpandElimination`` (expand_elimination.cc): the constant target shape does not grow the input."""

    name = "ExpandElimination"
    op_types = ("Expand",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not can_remove_node(graph, node):
            return "cannot remove"
        shape = graph.shape(node.inputs[0], view=View.DATA)
        if shape is None:
            return "input shape unknown"
        tensor = _tensor(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        if tensor is None or len(tensor.dims) != 1 or int(tensor.dims[0]) <= 0:
            return "shape is not a constant 1-D tensor"
        if tensor.data_type != TP.INT64:
            return "shape is not int64"
        target = [int(v) for v in _array(graph, node.inputs[1]).reshape(-1)]
        i, j = len(shape) - 1, int(tensor.dims[0]) - 1
        if i < j:
            return "target has a higher rank"
        while i >= 0 and j >= 0:
            dim = shape[i]
            if isinstance(dim, int):
                if dim != target[j] and target[j] > 1:
                    return "target grows a dim"
            elif target[j] > 1:
                return "target dim > 1 on an unknown dim"
            i -= 1
            j -= 1
        return None


class CastElimination(_RemoveNodeRule):
    """``CastElimination`` (cast_elimination.cc): Cast to the input's own element type."""

    name = "CastElimination"
    op_types = ("Cast",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not can_remove_node(graph, node):
            return "cannot remove"
        elem = graph.elem_type(node.inputs[0], view=View.DATA)
        if elem is None:
            return "input type unknown"
        return _reason(node.attr_int("to") == elem, "casts to another type")


class CastChainElimination(RewriteRule):
    """``CastChainElimination`` (cast_chain_elimination.cc, only with
    ``optimization.enable_cast_chain_elimination=1``): a removable Cast whose single consumer is a Cast goes."""

    name = "CastChainElimination"
    op_types = ("Cast",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not can_remove_node(graph, node):
            return "cannot remove"
        if output_edge_count(graph, node) != 1:
            return "not one output edge"
        return _reason(output_nodes(graph, node)[0].op_type == "Cast", "next node is not a Cast")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        nxt = output_nodes(graph, node)[0]
        output = node.outputs[0]
        slot = nxt.inputs.index(output)
        graph.set_input(nxt, slot, node.inputs[0])
        graph.remove_node(node)
        return RuleEffect.REMOVED_CURRENT_NODE


class PreShapeNodeElimination(RewriteRule):
    """``PreShapeNodeElimination`` (pre_shape_node_elimination.cc): a Cast read only by Shape nodes goes."""

    name = "PreShapeNodeElimination"
    op_types = ("Cast",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not can_remove_node(graph, node):
            return "cannot remove"
        consumers = graph.consumers(node.outputs[0])
        if not consumers:
            return "no consumer"
        ok = all(is_supported_op(c, "Shape", (13, 15, 19, 21, 23, 24, 25)) for c in consumers)
        return _reason(ok, "a consumer is not Shape")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        consumers = [e.dst for e in graph.output_edges(node)]
        for index in consumers:
            shape_node = graph.node(index)
            assert shape_node is not None
            graph.set_input(shape_node, 0, node.inputs[0])
        graph.remove_node(node)
        return RuleEffect.REMOVED_CURRENT_NODE


class NoopElimination(_RemoveNodeRule):
    """``NoopElimination`` (noop_elimination.cc): x+0, 0+x, x-0, x*1, 1*x, x/1 with a single-element constant."""

    name = "NoopElimination"
    op_types = ("Add", "Sub", "Mul", "Div")

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if len(node.inputs) < 2:
            return "fewer than two inputs"
        first = is_constant(graph, node.inputs[0])
        second = is_constant(graph, node.inputs[1])
        if first == second:
            return "both or neither input constant"
        op = node.op_type
        if op in ("Sub", "Div") and not second:
            return "constant on the left of Sub/Div"
        const_name = node.inputs[0 if first else 1]
        tensor = _tensor(graph, const_name)
        assert tensor is not None
        other_shape = graph.shape(node.inputs[1 if first else 0], view=View.DATA)
        if other_shape is None or len(tensor.dims) > len(other_shape):
            return "other input shape unknown or of lower rank"
        size = int(np.prod(_dims(tensor), dtype=np.int64))
        if size > 1 or size == 0:
            return "constant is not a single element"
        if tensor.data_type not in (TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.INT32, TP.INT64):
            return "constant type"
        value = np.float32(_first_value(_array(graph, const_name)))
        if op in ("Add", "Sub") and value != np.float32(0.0):
            return "not 0"
        if op in ("Mul", "Div") and value != np.float32(1.0):
            return "not 1"
        return _reason(can_remove_node(graph, node), "cannot remove")


# ----------------------------------------------------------------------------------------------- fusions
class DivMulFusion(RewriteRule):
    """``DivMulFusion`` (div_mul_fusion.cc): ``Mul(Div(1, x), y)`` becomes ``Div(y, x)``."""

    name = "DivMulFusion"
    op_types = ("Div",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Div", (7, 13, 14)) or output_edge_count(graph, node) != 1:
            return "Div version or not one output edge"
        nxt = output_nodes(graph, node)[0]
        if not is_supported_op(nxt, "Mul", (7, 13, 14)) or not _same_ep(nxt, node):
            return "next node is not Mul"
        if not is_constant(graph, node.inputs[0]):
            return "numerator not constant"
        tensor = _tensor(graph, node.inputs[0])
        assert tensor is not None
        array = _array(graph, node.inputs[0])
        if array.size != 1:
            return "numerator not a single element"
        if tensor.data_type not in (TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.INT32, TP.INT64):
            return "numerator type"
        if _first_value(array) != 1.0:
            return "numerator is not 1"
        return _reason(not node_produces_graph_output(graph, node), "Div produces a graph output")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        mul = output_nodes(graph, node)[0]
        other = mul.inputs[1] if mul.inputs[0] == node.outputs[0] else mul.inputs[0]
        graph.set_input(node, 0, other)
        finalize_node_fusion(graph, node, mul)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


class FuseReluClip(RewriteRule):
    """``FuseReluClip`` (relu_clip_fusion.cc): Relu before Clip goes; Clip's min becomes at least 0."""

    name = "FuseReluClip"
    op_types = ("Relu",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Relu", (6, 13, 14)) or output_edge_count(graph, node) != 1:
            return "Relu version or not one output edge"
        nxt = output_nodes(graph, node)[0]
        if not is_supported_op(nxt, "Clip", (6, 11, 12, 13)) or not _same_ep(nxt, node):
            return "next node is not Clip"
        return _reason(can_remove_node(graph, node), "cannot remove")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        clip = output_nodes(graph, node)[0]
        attributes = is_supported_op(clip, "Clip", (6,))
        replace_min = False
        replacement: onnx.TensorProto | None = None
        if attributes:
            replace_min = clip.attr_float("min", float(-np.finfo(np.float32).max)) < 0.0
        else:
            min_name = clip.inputs[1] if len(clip.inputs) > 1 and clip.inputs[1] else None
            tensor = None
            if min_name is not None:
                tensor = _tensor(graph, min_name)
                if tensor is None:
                    return RuleEffect.NONE
            if tensor is None:
                elem = graph.elem_type(clip.inputs[0], view=View.DATA)
                if elem is None:
                    return RuleEffect.NONE
                data_type = elem
                replace_min = True
            else:
                assert min_name is not None
                data_type = int(tensor.data_type)
                array = _array(graph, min_name)
                if array.size == 0:
                    return RuleEffect.NONE
                if data_type not in (TP.FLOAT, TP.FLOAT16, TP.BFLOAT16):
                    raise ModelError(f"Unexpected data type for Clip 'min' input of {data_type}")
                replace_min = _first_value(array) < 0.0
            if replace_min:
                new_name = graph.generate_value_name(f"FuseReluClip_{node.name}_min_zero_constant")
                itemsize = onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
                replacement = onnx.helper.make_tensor(new_name, data_type, [], vals=b"\x00" * itemsize, raw=True)
        if not remove_node(graph, node):
            return RuleEffect.NONE
        if replace_min:
            if attributes:
                graph.remove_attribute(clip, "min")
                graph.set_attribute(clip, onnx.helper.make_attribute("min", 0.0))
            else:
                assert replacement is not None
                graph.add_initializer(replacement)
                graph.set_input(clip, 1, replacement.name)
        return RuleEffect.REMOVED_CURRENT_NODE


class GemmSumFusion(RewriteRule):
    """``GemmSumFusion`` (gemm_sum_fusion.cc): Gemm without C whose only consumer is a 2-input Sum takes the other
    Sum input as C."""

    name = "GemmSumFusion"
    op_types = ("Gemm",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if (
            not is_supported_op(node, "Gemm", (11, 13))
            or node_produces_graph_output(graph, node)
            or len(node.inputs) != 2
        ):
            return "Gemm version, graph output or C present"
        if output_edge_count(graph, node) != 1:
            return "not one output edge"
        out = output_nodes(graph, node)[0]
        if not is_supported_op(out, "Sum", (1, 6, 8, 13)) or len(out.inputs) != 2 or not _same_ep(out, node):
            return "consumer is not a 2-input Sum"
        other = out.inputs[1] if out.inputs[0] == node.outputs[0] else out.inputs[0]
        bias = graph.shape(other, view=View.DATA)
        if bias is None:
            return "other Sum input has no shape"
        result = graph.shape(node.outputs[0], view=View.DATA)
        if result is None or len(result) != 2:
            return "Gemm output shape"
        m, n = result
        valid = (
            (len(bias) == 1 and _dim_eq(bias[0], n))
            or (len(bias) == 2 and _is_one(bias[0]) and _dim_eq(bias[1], n))
            or (len(bias) == 2 and _dim_eq(bias[0], m) and (_is_one(bias[1]) or _dim_eq(bias[1], n)))
        )
        return _reason(valid, "C shape not broadcastable by Gemm")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        trans_a = node.attr_int("transA", 0)
        trans_b = node.attr_int("transB", 0)
        alpha = node.attr_float("alpha", 1.0)
        sum_node = output_nodes(graph, node)[0]
        other = sum_node.inputs[1] if sum_node.inputs[0] == node.outputs[0] else sum_node.inputs[0]
        attributes = {
            "transA": onnx.helper.make_attribute("transA", int(bool(trans_a))),
            "transB": onnx.helper.make_attribute("transB", int(bool(trans_b))),
            "alpha": onnx.helper.make_attribute("alpha", alpha),
            "beta": onnx.helper.make_attribute("beta", 1.0),
        }
        graph.add_node(
            graph.generate_node_name(node.name + "/GemmSumFusion/"),
            node.op_type,
            [*node.inputs, other],
            list(sum_node.outputs),
            domain=node.domain,
            attributes=attributes,
            doc_string="Fused Gemm with Sum",
        )
        graph.remove_node(node)
        graph.remove_node(sum_node)
        return RuleEffect.REMOVED_CURRENT_NODE


_TRANSPOSE_VERSIONS = (1, 13, 21, 23, 24, 25)


class GemmTransposeFusion(RewriteRule):
    """``GemmTransposeFusion`` (gemm_transpose_fusion.cc): Transposes on A/B become transA/transB; a Transpose of
    the output (no C) swaps the operands, (AB)' = B'A'. Registered in Level1 and Level2."""

    name = "GemmTransposeFusion"
    op_types = ("Gemm",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Gemm", (1, 6, 7, 9, 11, 13)) or output_edge_count(graph, node) > 1:
            return "Gemm version or several output edges"
        for producer in graph.input_nodes(node):
            if (
                is_supported_op(producer, "Transpose", _TRANSPOSE_VERSIONS)
                and not node_produces_graph_output(graph, producer)
                and _same_ep(producer, node)
                and _gemm_children(graph, producer) == output_edge_count(graph, producer)
            ):
                return None
        if (
            not is_supported_op(node, "Gemm", (11, 13))
            or node_produces_graph_output(graph, node)
            or len(node.inputs) > 2
        ):
            return "no input Transpose, and no output fusion possible"
        consumers = output_nodes(graph, node)
        if (
            consumers
            and is_supported_op(consumers[0], "Transpose", _TRANSPOSE_VERSIONS)
            and input_edge_count(graph, consumers[0]) == 1
            and _same_ep(consumers[0], node)
        ):
            return None
        return "no Transpose to fuse"

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        a_node = input_node(graph, node, 0)
        b_node = input_node(graph, node, 1)
        consumers = output_nodes(graph, node)
        trans_a = bool(node.attr_int("transA", 0))
        trans_b = bool(node.attr_int("transB", 0))
        to_remove: list[Node] = []
        inputs = list(node.inputs)
        for slot, producer in ((0, a_node), (1, b_node)):
            if producer is None or producer.op_type != "Transpose":
                continue
            if _gemm_children(graph, producer) != output_edge_count(graph, producer):
                continue
            if slot == 0:
                trans_a = not trans_a
            else:
                trans_b = not trans_b
            if output_edge_count(graph, producer) <= 1:
                to_remove.append(producer)
            inputs[slot] = producer.inputs[0]
        to_remove.append(node)
        if consumers and len(node.inputs) <= 2 and consumers[0].op_type == "Transpose":
            inputs.reverse()
            trans_a, trans_b = not trans_b, not trans_a
            to_remove.append(consumers[0])
        attributes = {
            "transA": onnx.helper.make_attribute("transA", int(trans_a)),
            "transB": onnx.helper.make_attribute("transB", int(trans_b)),
            "alpha": onnx.helper.make_attribute("alpha", node.attr_float("alpha", 1.0)),
            "beta": onnx.helper.make_attribute("beta", node.attr_float("beta", 1.0)),
        }
        new_node = graph.add_node(
            graph.generate_node_name(node.name + "/GemmTransposeFusion/"),
            node.op_type,
            inputs,
            [""] * len(to_remove[-1].outputs),
            domain=node.domain,
            attributes=attributes,
            doc_string="Fused Gemm with Transpose",
            ep=node.ep,
        )
        finalize_nodes_fusion(graph, to_remove, new_node)
        return RuleEffect.REMOVED_CURRENT_NODE


def _gemm_children(graph: Graph, node: Node) -> int:
    """``FindChildrenByType(node, "Gemm").size()``: output edges into Gemm nodes."""
    return sum(1 for child in output_nodes(graph, node) if child.op_type == "Gemm")


class NotWhereFusion(RewriteRule):
    """``NotWhereFusion`` (not_where_fusion.cc): Where(Not(c), a, b) becomes Where(c, b, a)."""

    name = "NotWhereFusion"
    op_types = ("Where",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "Where", (9, 16)):
            return "Where version"
        not_node = input_node(graph, node, 0)
        if not_node is None or not is_supported_op(not_node, "Not", (1,)) or not _same_ep(not_node, node):
            return "condition does not come from Not"
        if output_edge_count(graph, not_node) > 1 and not all(
            is_supported_op(c, "Where", (9, 16)) for c in output_nodes(graph, not_node)
        ):
            return "Not has a consumer other than Where"
        return _reason(can_remove_node(graph, not_node), "cannot remove Not")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        not_node = input_node(graph, node, 0)
        assert not_node is not None
        not_input = not_node.inputs[0]
        where_ids = [e.dst for e in graph.output_edges(not_node)]
        producer = input_node(graph, not_node, 0)
        if producer is not None:
            replace_downstream_node_input(graph, not_node, 0, producer, producer.outputs.index(not_input))
        for index in where_ids:
            where = graph.node(index)
            assert where is not None
            inputs = list(where.inputs)
            if producer is None:
                graph.set_input(where, 0, not_input)
            graph.set_input(where, 1, inputs[2])
            graph.set_input(where, 2, inputs[1])
        graph.remove_node(not_node)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


_CONV_VERSIONS = (1, 11, 22)


def _conv_then(graph: Graph, node: Node, op: str, versions: tuple[int, ...], constant_slots: range) -> str | None:
    """The common ``SatisfyCondition`` of ConvAdd/ConvMul/ConvBN fusion."""
    if not is_supported_op(node, "Conv", _CONV_VERSIONS) or output_edge_count(graph, node) != 1:
        return "Conv version or not one output edge"
    nxt = output_nodes(graph, node)[0]
    if not is_supported_op(nxt, op, versions) or input_edge_count(graph, nxt) != 1 or not _same_ep(nxt, node):
        return f"next node is not a single-edge {op}"
    if not is_constant(graph, node.inputs[1]) or (len(node.inputs) == 3 and not is_constant(graph, node.inputs[2])):
        return "Conv weight or bias not constant"
    if any(slot >= len(nxt.inputs) or not is_constant(graph, nxt.inputs[slot]) for slot in constant_slots):
        return f"{op} parameters not constant"
    if op == "BatchNormalization" and any(o for o in nxt.outputs[1:]):
        return "BatchNormalization optional outputs exist"
    return _reason(not node_produces_graph_output(graph, node), "Conv produces a graph output")


def _per_channel_axis(param: onnx.TensorProto, weight: onnx.TensorProto) -> int | None:
    """ConvAdd/ConvMul: the axis of a [1,C,1,1] / [C,1,1] parameter that matches the Conv's output channels."""
    if len(param.dims) == len(weight.dims):
        axis = 1
    elif len(param.dims) == len(weight.dims) - 1:
        axis = 0
    else:
        return None
    if int(param.dims[axis]) != int(weight.dims[0]):
        return None
    if any(int(d) != 1 for i, d in enumerate(param.dims) if i != axis):
        return None
    return axis


class ConvAddFusion(RewriteRule):
    """``ConvAddFusion`` (conv_add_fusion.cc): a per-channel constant Add after Conv goes into the bias."""

    name = "ConvAddFusion"
    op_types = ("Conv",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        return _conv_then(graph, node, "Add", (7, 13, 14), range(1, 2))

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        add = output_nodes(graph, node)[0]
        weight = _tensor(graph, node.inputs[1])
        add_b = _tensor(graph, add.inputs[1])
        assert weight is not None and add_b is not None
        if weight.data_type not in _FLOATING or weight.data_type != add_b.data_type or len(weight.dims) <= 2:
            return RuleEffect.NONE
        if _per_channel_axis(add_b, weight) is None:
            return RuleEffect.NONE
        if len(node.inputs) == 3:
            bias_name = node.inputs[2]
            bias = _tensor(graph, bias_name)
            assert bias is not None
            if bias.data_type != add_b.data_type or len(bias.dims) != 1 or bias.dims[0] != weight.dims[0]:
                return RuleEffect.NONE
            bias_value = _array(graph, bias_name)
            add_value = _array(graph, add.inputs[1])
            if bias_value.size != add_value.size:
                return RuleEffect.NONE
            fused = _elementwise(np.add, bias_value, add_value)
            new_name = graph.generate_value_name("ConvAddFusion_B_" + bias_name)
            graph.add_initializer(_make_tensor(fused, new_name, int(bias.data_type)))
            graph.set_input(node, 2, new_name)
        else:
            add_value = _array(graph, add.inputs[1])
            new_name = graph.generate_value_name("ConvAddFusion_Add_B_" + add_b.name)
            graph.add_initializer(_make_tensor(add_value, new_name, int(add_b.data_type), [int(weight.dims[0])]))
            graph.set_input(node, 2, new_name)
        finalize_node_fusion(graph, node, add)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


class ConvMulFusion(RewriteRule):
    """``ConvMulFusion`` (conv_mul_fusion.cc): a per-channel (or scalar) constant Mul after Conv scales the weight
    and bias."""

    name = "ConvMulFusion"
    op_types = ("Conv",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        return _conv_then(graph, node, "Mul", (7, 13, 14), range(1, 2))

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        mul = output_nodes(graph, node)[0]
        weight = _tensor(graph, node.inputs[1])
        mul_b = _tensor(graph, mul.inputs[1])
        assert weight is not None and mul_b is not None
        if weight.data_type not in _FLOATING or weight.data_type != mul_b.data_type or len(weight.dims) <= 2:
            return RuleEffect.NONE
        if len(mul_b.dims) != 0 and _per_channel_axis(mul_b, weight) is None:
            return RuleEffect.NONE
        weight_value = _array(graph, node.inputs[1])
        scale = _array(graph, mul.inputs[1])
        has_bias = len(node.inputs) == 3
        bias_value: np.ndarray | None = None
        if has_bias:
            bias = _tensor(graph, node.inputs[2])
            assert bias is not None
            if bias.data_type != mul_b.data_type or len(bias.dims) != 1 or bias.dims[0] != weight.dims[0]:
                return RuleEffect.NONE
            bias_value = _array(graph, node.inputs[2])
        new_weight = _scale_by_axis(weight_value, scale, 1)
        if bias_value is not None:
            bias_value = (
                _elementwise(np.multiply, bias_value, scale)
                if len(mul_b.dims) != 0
                else _scale_by_axis(bias_value, scale, 0)
            )
        w_name = graph.generate_value_name("ConvMulFusion_W_" + weight.name)
        graph.add_initializer(_make_tensor(new_weight, w_name, int(weight.data_type)))
        graph.set_input(node, 1, w_name)
        if bias_value is not None:
            b_name = graph.generate_value_name("ConvMulFusion_Mul_B_" + mul_b.name)
            graph.add_initializer(_make_tensor(bias_value, b_name, int(mul_b.data_type)))
            graph.set_input(node, 2, b_name)
        finalize_node_fusion(graph, node, mul)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


def _bn_factor(scale: np.ndarray, var: np.ndarray, epsilon: float) -> np.ndarray:
    """``scale / sqrt(var + epsilon)`` as ConvBNFusion / MatmulBNFusion compute it."""
    return _elementwise(np.divide, scale, _sqrt(_add_scalar(var, epsilon)))


class ConvBNFusion(RewriteRule):
    """``ConvBNFusion`` (conv_bn_fusion.cc): a BatchNormalization with constant parameters after Conv goes into
    the Conv's weight and bias."""

    name = "ConvBNFusion"
    op_types = ("Conv",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        return _conv_then(graph, node, "BatchNormalization", (7, 9, 14, 15), range(1, 5))

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        bn = output_nodes(graph, node)[0]
        epsilon = bn.attr_float("epsilon")
        if epsilon is None:
            return RuleEffect.NONE
        params = [_tensor(graph, bn.inputs[i]) for i in range(1, 5)]
        weight = _tensor(graph, node.inputs[1])
        assert weight is not None and all(p is not None for p in params)
        scale_t, b_t, mean_t, var_t = (p for p in params if p is not None)
        types = {int(p.data_type) for p in (scale_t, b_t, mean_t, var_t)}
        if (
            any(t not in _FLOATING for t in (*types, weight.data_type))
            or any(len(p.dims) != 1 for p in (scale_t, b_t, mean_t, var_t))
            or len({int(p.dims[0]) for p in (scale_t, b_t, mean_t, var_t)}) != 1
            or len(types) != 1
            or weight.data_type != scale_t.data_type
            or not (len(weight.dims) > 2 and weight.dims[0] == scale_t.dims[0])
        ):
            return RuleEffect.NONE
        scale, bn_b, mean, var = (_array(graph, bn.inputs[i]) for i in range(1, 5))
        weight_value = _array(graph, node.inputs[1])
        conv_b: np.ndarray | None = None
        if len(node.inputs) == 3:
            bias = _tensor(graph, node.inputs[2])
            assert bias is not None
            if (
                bias.data_type not in _FLOATING
                or len(bias.dims) != 1
                or bias.dims[0] != b_t.dims[0]
                or bias.data_type != b_t.data_type
            ):
                return RuleEffect.NONE
            conv_b = _array(graph, node.inputs[2])
        factor = _bn_factor(scale, var, epsilon)
        new_weight = _scale_by_axis(weight_value, factor, 1)
        if conv_b is not None:
            centred = _elementwise(np.subtract, conv_b, mean)
            new_bias = _elementwise(np.add, _elementwise(np.multiply, centred, factor), bn_b)
        else:
            new_bias = _elementwise(np.subtract, bn_b, _elementwise(np.multiply, mean, factor))
        w_name = graph.generate_value_name("ConvBnFusion_W_" + weight.name)
        b_name = graph.generate_value_name("ConvBnFusion_BN_B_" + b_t.name)
        graph.add_initializer(_make_tensor(new_weight, w_name, int(weight.data_type)))
        graph.set_input(node, 1, w_name)
        graph.add_initializer(_make_tensor(new_bias, b_name, int(b_t.data_type)))
        graph.set_input(node, 2, b_name)
        finalize_node_fusion(graph, node, bn, n_outputs=1)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


class PadFusion(RewriteRule):
    """``PadFusion`` (rule ``Pad_Fusion``, pad_fusion.cc): a zero constant-mode Pad on spatial dims goes into the
    pads of the following Conv/AveragePool (possibly behind a Cast)."""

    name = "Pad_Fusion"
    op_types = ("Pad",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if (
            not is_supported_op(node, "Pad", (1, 2, 11, 13, 18, 19, 21, 23, 24, 25))
            or output_edge_count(graph, node) != 1
            or len(node.inputs) > 3
        ):
            return "Pad version, output edges or axes input"
        if node_produces_graph_output(graph, node):
            return "Pad produces a graph output"
        mode = node.attr("mode")
        if mode is not None and mode != "constant":
            return "mode is not constant"
        assert node.since_version is not None
        if node.since_version >= 11:
            value_is_constant = len(node.inputs) <= 2 or is_constant(graph, node.inputs[2])
            if not is_constant(graph, node.inputs[1]) or not value_is_constant:
                return "pads or constant_value not constant"
            if len(node.inputs) > 2:
                value = _array(graph, node.inputs[2])
                if any(np.ascontiguousarray(value).tobytes()):
                    return "constant_value is not zero"
        elif node.attr_float("value", 0.0) != 0.0:
            return "value is not zero"
        child = output_nodes(graph, node)[0]
        if is_supported_op(child, "Cast", (1, 6, 9, 13, 19, 21, 23, 24, 25)):
            if output_edge_count(graph, child) != 1:
                return "Cast has several output edges"
            if node_produces_graph_output(graph, child):
                return "Cast produces a graph output"
            return _verify_pad_child(output_nodes(graph, child)[0])
        return _verify_pad_child(child)

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        assert node.since_version is not None
        if node.since_version >= 11:
            pads = [int(v) for v in _array(graph, node.inputs[1]).reshape(-1)]
        else:
            pads = node.attr_ints("pads") or []
        size = len(pads)
        if size < 4 or size % 2:
            return RuleEffect.NONE
        if pads[0] != 0 or pads[1] != 0 or pads[size // 2] != 0 or pads[size // 2 + 1] != 0:
            return RuleEffect.NONE
        if any(v < 0 for v in pads):
            return RuleEffect.NONE
        child = output_nodes(graph, node)[0]
        target = output_nodes(graph, child)[0] if child.op_type == "Cast" else child
        existing = target.attr_ints("pads")
        if existing and len(existing) != size - 4:
            return RuleEffect.NONE
        if not existing:
            graph.set_attribute(target, onnx.helper.make_attribute("pads", [0] * (size - 4)))
        attr = copy.deepcopy(target.attributes["pads"])
        child_pads = [int(v) for v in attr.ints]
        half = len(child_pads) // 2
        for pads_index in range(2, size // 2):
            child_index = pads_index - 2
            child_pads[child_index] += pads[pads_index]
            child_pads[child_index + half] += pads[pads_index + size // 2]
        del attr.ints[:]
        attr.ints.extend(child_pads)
        graph.set_attribute(target, attr)
        if target.op_type == "AveragePool":
            graph.set_attribute(target, onnx.helper.make_attribute("count_include_pad", 1))
        graph.set_input(child, 0, node.inputs[0])
        graph.remove_node(node)
        return RuleEffect.REMOVED_CURRENT_NODE


def _verify_pad_child(child: Node) -> str | None:
    """``VerifyNotCastChild``. ORT 1.32 fuses into Conv and AveragePool only: a MaxPool child never fuses (observed
    with constant values 0, -0.0, -inf and float lowest, with and without a Cast in between)."""
    if not (
        is_supported_op(child, "Conv", _CONV_VERSIONS) or is_supported_op(child, "AveragePool", (7, 10, 11, 19, 22))
    ):
        return "child is not Conv/AveragePool (ORT 1.32 no longer fuses into MaxPool)"
    if len(child.outputs) > 1:
        return "child has several outputs"
    auto_pad = child.attr("auto_pad")
    if auto_pad is not None and auto_pad != "NOTSET":
        return "child uses auto_pad"
    if child.op_type == "AveragePool":
        pads = child.attr_ints("pads") or []
        if any(v != 0 for v in pads) and child.attr_int("count_include_pad", 1) == 0:
            return "AveragePool already pads without count_include_pad"
    return None


_BN_IGNORABLE = (("Reshape", (1, 5, 13, 14, 19, 21, 23, 24, 25)), ("Transpose", _TRANSPOSE_VERSIONS))


def _bn_path(graph: Graph, root: Node) -> Node | None:
    """``MatchPath``: through single-edge Reshape/Transpose nodes to a BatchNormalization."""
    current = output_nodes(graph, root)[0]
    while (
        current.ep == root.ep
        and output_edge_count(graph, current) == 1
        and any(is_supported_op(current, op, versions) for op, versions in _BN_IGNORABLE)
    ):
        current = output_nodes(graph, current)[0]
    if current.op_type != "BatchNormalization":
        return None
    if current.ep == root.ep and is_supported_op(current, "BatchNormalization", (1, 6, 7, 9, 14, 15)):
        return current
    return None


class MatmulBNFusion(RewriteRule):
    """``MatmulBNFusion`` (rule ``MatMul_BatchNormalization_Fusion``, matmul_bn_fusion.cc): MatMul(const B)
    [-> Reshape/Transpose]* -> BatchNormalization becomes a Gemm with BN folded into B and C."""

    name = "MatMul_BatchNormalization_Fusion"
    op_types = ("MatMul",)

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "MatMul", (1, 9, 13)) or output_edge_count(graph, node) != 1:
            return "MatMul version or not one output edge"
        if node_produces_graph_output(graph, node):
            return "MatMul produces a graph output"
        bn = _bn_path(graph, node)
        if bn is None:
            return "no BatchNormalization path"
        if not is_constant(graph, node.inputs[1]) or any(not is_constant(graph, bn.inputs[i]) for i in range(1, 5)):
            return "B or BN parameters not constant"
        shape = graph.shape(node.inputs[0], view=View.DATA)
        if shape is None or len(shape) != 2:
            return "A is not known to be 2-D"
        return _reason(not any(o for o in bn.outputs[1:]), "BatchNormalization optional outputs exist")

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        child = output_nodes(graph, node)[0]
        bn = _bn_path(graph, node)
        assert bn is not None
        epsilon = bn.attr_float("epsilon")
        if epsilon is None:
            return RuleEffect.NONE
        scale_t, bias_t, mean_t, var_t = (_tensor(graph, bn.inputs[i]) for i in range(1, 5))
        b_t = _tensor(graph, node.inputs[1])
        assert scale_t is not None and bias_t is not None and mean_t is not None and var_t is not None
        assert b_t is not None
        params = (scale_t, bias_t, mean_t, var_t)
        if (
            any(t.data_type not in _FLOATING for t in (b_t, *params))
            or any(len(p.dims) != 1 for p in params)
            or len(b_t.dims) != 2
            or any(p.dims[0] != b_t.dims[1] for p in params)
        ):
            return RuleEffect.NONE
        scale, bias, mean, var = (_array(graph, bn.inputs[i]) for i in range(1, 5))
        factor = _bn_factor(scale, var, epsilon)
        new_b = _scale_by_axis(_array(graph, node.inputs[1]), factor, 1, column_major=True)
        new_bias = _elementwise(np.subtract, bias, _elementwise(np.multiply, mean, factor))
        b_name = graph.generate_value_name("MatMulBnFusion_GemmB_" + b_t.name)
        graph.add_initializer(_make_tensor(new_b, b_name, int(b_t.data_type)))
        bias_name = graph.generate_value_name("MatMulBnFusion_GemmBias")
        graph.add_initializer(_make_tensor(new_bias, bias_name, int(bias_t.data_type)))
        gemm = graph.add_node(
            graph.generate_value_name("MatMulBnFusion_Gemm"),
            "Gemm",
            [node.inputs[0], b_name, bias_name],
            list(node.outputs),
            doc_string="Generated from Matmul BatchNormalization fusion",
        )
        graph.remove_node(node)
        parent = gemm if child.op_type == "BatchNormalization" else graph.input_nodes(bn)[0]
        finalize_node_fusion(graph, parent, bn, n_outputs=1)
        return RuleEffect.REMOVED_CURRENT_NODE


class LabelEncoderFusion(RewriteRule):
    """``LabelEncoderFusion`` (label_encoder_fusion.cc): LabelEncoder -> LabelEncoder-4 becomes one LabelEncoder
    mapping keys straight to the second encoder's values."""

    name = "LabelEncoderFusion"
    op_types = ("LabelEncoder",)
    _TYPES: ClassVar[tuple[str, ...]] = ("string", "int64")

    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        if not is_supported_op(node, "LabelEncoder", (2, 4), "ai.onnx.ml") or output_edge_count(graph, node) != 1:
            return "LabelEncoder version or not one output edge"
        nxt = output_nodes(graph, node)[0]
        if not is_supported_op(nxt, "LabelEncoder", (4,), "ai.onnx.ml") or not _same_ep(nxt, node):
            return "next node is not LabelEncoder-4"
        if node_produces_graph_output(graph, node):
            return "first encoder produces a graph output"
        return _reason(self._types(node, nxt) is not None, "unsupported key/value types")

    def _types(self, node: Node, nxt: Node) -> tuple[str, str, str] | None:
        for t1 in self._TYPES:
            for t2 in self._TYPES:
                for t3 in self._TYPES:
                    if (
                        f"keys_{t1}s" in node.attributes
                        and f"values_{t2}s" in node.attributes
                        and f"keys_{t2}s" in nxt.attributes
                        and f"values_{t3}s" in nxt.attributes
                    ):
                        return t1, t2, t3
        return None

    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        nxt = output_nodes(graph, node)[0]
        found = self._types(node, nxt)
        if found is None:
            return RuleEffect.NONE
        _, t2, t3 = found
        values = _attr_list(node, f"values_{t2}s")
        default = node.attr(f"default_{t2}")
        mapping = dict(zip(_attr_list(nxt, f"keys_{t2}s"), _attr_list(nxt, f"values_{t3}s"), strict=False))
        next_default = nxt.attr(f"default_{t3}")
        new_default = mapping.get(default, next_default)
        new_values = [mapping.get(v, next_default) for v in values]
        graph.remove_attribute(node, f"values_{t2}s")
        graph.remove_attribute(node, f"default_{t2}")
        list_type = onnx.AttributeProto.STRINGS if t3 == "string" else onnx.AttributeProto.INTS
        graph.set_attribute(node, onnx.helper.make_attribute(f"values_{t3}s", new_values, attr_type=list_type))
        graph.set_attribute(node, onnx.helper.make_attribute(f"default_{t3}", new_default))
        finalize_node_fusion(graph, node, nxt)
        return RuleEffect.MODIFIED_REST_OF_GRAPH


def _attr_list(node: Node, name: str) -> list[object]:
    value = node.attr(name, [])
    assert isinstance(value, list)
    return [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in value]
