"""QDQ helper predicates shared by the QDQ passes (ORT's ``qdq_transformer/qdq_util.cc``, spec §7.6).

Besides ``MatchQNode``/``MatchDQNode`` this module holds what several passes ask of a Q/DQ node or of a NodeArg:

* **constant initializers** as ``Graph::GetConstantInitializer`` finds them: an initializer of this graph that no
  graph input overrides, else (``check_outer_scope``) one of an enclosing graph, unless a local value shadows it;
* ``optimizer_utils::IsScalar`` (rank 0, or rank 1 with the one dim equal to 1),
  ``IsInitializerWithExpectedValue`` (float form), ``IndexOfNodeInput`` and ``IsSupportedDataType``;
* ``QOrDQNodeHasConstantScalarScaleAndZeroPoint``, ``IsDQSupported``, ``IsQDQPairSupported`` (both nodes have all
  3 inputs; scales and zero points are constant scalars of equal types; the zero points have equal bytes and the
  scales equal values; different initializer names with equal values pass) and
  ``IsQOrDQScalePositiveConstantScalar``;
* ``GetQNodeZeroPointType`` of DoubleQDQPairsRemover (zp initializer type, else the ``output_dtype`` attribute,
  else uint8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.graph import Graph, Node
from qdqopt.passes.graph_utils import is_supported_op, produces_graph_output

__all__ = [
    "QDQ_OPSETS",
    "SCALE_ID",
    "ZERO_POINT_ID",
    "constant_array",
    "constant_initializer",
    "has_constant_scalar_scale_and_zp",
    "index_of_node_input",
    "is_dq",
    "is_dq_supported",
    "is_initializer_with_expected_value",
    "is_q",
    "is_q_or_dq_scale_positive_constant_scalar",
    "is_qdq_pair_supported",
    "is_scalar_arg",
    "is_supported_data_type",
    "is_supported_op",
    "produces_graph_output",
    "q_zero_point_type",
]

#: ONNX-domain Q/DQ versions ``MatchQNode``/``MatchDQNode`` accept; ``com.microsoft`` accepts version 1.
QDQ_OPSETS: frozenset[int] = frozenset({10, 13, 19, 21, 23, 24, 25})

#: ``QDQ::InputIndex``.
SCALE_ID = 1
ZERO_POINT_ID: Final = 2
TOTAL_COUNT = 3

_ONNX_DOMAINS = ("", "ai.onnx")
_FLOAT_SCALES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _match(node: Node, op_type: str) -> bool:
    if node.op_type != op_type:
        return False
    if node.domain in _ONNX_DOMAINS:
        return node.since_version in QDQ_OPSETS
    if node.domain == "com.microsoft":
        return node.since_version == 1
    return False


def is_q(node: Node) -> bool:
    """``QDQ::MatchQNode``."""
    return _match(node, "QuantizeLinear")


def is_dq(node: Node) -> bool:
    """``QDQ::MatchDQNode``."""
    return _match(node, "DequantizeLinear")


# ---------------------------------------------------------------------------------------------- initializers
def constant_initializer(graph: Graph, name: str, *, check_outer_scope: bool = True) -> onnx.TensorProto | None:
    """``Graph::GetConstantInitializer``: the initializer if no graph input can override it, else None."""
    return graph.constant_initializer(name, check_outer_scope=check_outer_scope)


def constant_array(graph: Graph, name: str, *, check_outer_scope: bool = True) -> np.ndarray | None:
    """The value of a constant initializer (see :func:`constant_initializer`) as numpy."""
    return graph.constant_array(name, check_outer_scope=check_outer_scope)


# ---------------------------------------------------------------------------------------------- scalars
def is_scalar_arg(graph: Graph, name: str) -> bool:
    """``optimizer_utils::IsScalar``: rank 0, or rank 1 with a dim of value 1 (unknown shape: False).

    An initializer's NodeArg has the tensor's dims (unless a graph input of this graph declares the name); any
    other value's shape is the one the pass sees (:meth:`Graph.shape`).
    """
    owner = graph.initializer_owner(name)
    tensor = owner.initializer(name) if owner is not None else None
    if tensor is not None and (
        name not in graph.input_index() or not any(vi.name == name and vi.HasField("type") for vi in graph.inputs)
    ):
        return _scalar_dims(tensor.dims)
    shape = graph.shape(name)
    return shape is not None and _scalar_dims(shape)


def _scalar_dims(dims: Sequence[object]) -> bool:
    """Rank 0, or rank 1 with a dim of 1."""
    return len(dims) == 0 or (len(dims) == 1 and dims[0] == 1)


_ATOL = np.float32(1e-8)
_RTOL = np.float32(1e-5)


def is_initializer_with_expected_value(graph: Graph, name: str, expected: float, *, is_constant: bool = True) -> bool:
    """``optimizer_utils::IsInitializerWithExpectedValue`` (float ``expected``): a scalar NodeArg (``IsScalar``)
    that is a constant initializer (outer scopes included; any initializer of this graph when not ``is_constant``)
    of type float, double or float16 whose first value is within ``1e-8 + 1e-5 * |expected|`` of ``expected``:
    in float arithmetic (an infinity equals an infinity of the same sign; NaN nothing); for double in double
    arithmetic (NaN and infinities never); for float16 against ``expected`` rounded to float16 (NaN and infinities
    never). Other types never match."""
    if not name or not is_scalar_arg(graph, name):
        return False
    tensor = constant_initializer(graph, name) if is_constant else graph.initializer(name)
    if tensor is None:
        return False
    array = constant_array(graph, name) if is_constant else graph.array(name)
    if array is None:
        return False
    value = array.reshape(-1)[0]
    want = np.float32(expected)
    with np.errstate(over="ignore", invalid="ignore"):
        tol = _ATOL + _RTOL * np.abs(want)
        if tensor.data_type == onnx.TensorProto.FLOAT:
            got = np.float32(value)
            if np.isnan(got) or np.isinf(got):
                return bool(np.isinf(got) and np.isinf(want) and np.signbit(got) == np.signbit(want))
            return not bool(np.abs(got - want) > tol)
        if tensor.data_type == onnx.TensorProto.DOUBLE:
            got64 = float(value)
            if not np.isfinite(got64):
                return False
            return not abs(got64 - float(want)) > float(_ATOL) + float(_RTOL) * float(np.abs(want))
        if tensor.data_type == onnx.TensorProto.FLOAT16:
            half = np.float32(np.float16(value))
            if not np.isfinite(half):
                return False
            return not bool(np.abs(half - np.float32(np.float16(want))) > tol)
    return False


def index_of_node_input(node: Node, name: str) -> int:
    """``optimizer_utils::IndexOfNodeInput``: the first input slot reading ``name``, or -1."""
    for slot, value in enumerate(node.inputs):
        if value == name:
            return slot
    return -1


#: ``DataTypeImpl::ToString`` names of tensor element types, for :func:`is_supported_data_type`
TENSOR_TYPE_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "tensor(float)",
    onnx.TensorProto.FLOAT16: "tensor(float16)",
    onnx.TensorProto.DOUBLE: "tensor(double)",
    onnx.TensorProto.BFLOAT16: "tensor(bfloat16)",
}


def is_supported_data_type(graph: Graph, node: Node, supported: tuple[str, ...]) -> bool:
    """``optimizer_utils::IsSupportedDataType``: the type of every input def of ``node`` (:meth:`Graph.elem_type`) is
    one of ``supported`` (``tensor(float)``, ...); an input of unknown type is not."""
    for value in node.inputs:
        elem = graph.elem_type(value)
        if elem is None or TENSOR_TYPE_NAMES.get(elem) not in supported:
            return False
    return True


# ---------------------------------------------------------------------------------------------- QDQ predicates
def _constant_scalar(graph: Graph, name: str) -> bool:
    """A constant initializer whose NodeArg is a scalar (the order of the two checks does not matter: both must
    hold, and only a constant initializer needs no type inference)."""
    return _constant_scalar_tensor(graph, name) is not None


def _constant_scalar_tensor(graph: Graph, name: str) -> onnx.TensorProto | None:
    """The tensor of a constant initializer whose NodeArg is a scalar (see :func:`_constant_scalar`), else None."""
    tensor = graph.constant_initializer(name)
    if tensor is None:
        return None
    if name not in graph.input_index():  # (the usual case: is_scalar_arg would look at this tensor's dims)
        return tensor if _scalar_dims(tensor.dims) else None
    return tensor if is_scalar_arg(graph, name) else None


def has_constant_scalar_scale_and_zp(graph: Graph, node: Node) -> tuple[bool, bool]:
    """``QOrDQNodeHasConstantScalarScaleAndZeroPoint``: (scale and zp, if present, are constant scalars; zp exists)."""
    zp_exists = bool(node.input(ZERO_POINT_ID))
    if not _constant_scalar(graph, node.input(SCALE_ID)):
        return False, zp_exists
    if zp_exists and not _constant_scalar(graph, node.input(ZERO_POINT_ID)):
        return False, zp_exists
    return True, zp_exists


def is_dq_supported(graph: Graph, dq: Node) -> bool:
    """``QDQ::IsDQSupported``: constant scalar scale and an existing constant scalar zero point."""
    ok, zp_exists = has_constant_scalar_scale_and_zp(graph, dq)
    return ok and zp_exists


def is_qdq_pair_supported(graph: Graph, q: Node, dq: Node, *, check_op_type: bool = True) -> bool:
    """``QDQ::IsQDQPairSupported``: Q and DQ with all 3 inputs and the same constant scalar scale and zero point."""
    if check_op_type and not (is_q(q) and is_dq(dq)):
        return False
    if len(q.inputs) != TOTAL_COUNT or len(dq.inputs) != TOTAL_COUNT:
        return False
    names = (q.inputs[SCALE_ID], q.inputs[ZERO_POINT_ID], dq.inputs[SCALE_ID], dq.inputs[ZERO_POINT_ID])
    tensors: list[onnx.TensorProto] = []
    for name in names:  # in order, up to the first that is not a constant scalar
        tensor = _constant_scalar_tensor(graph, name)
        if tensor is None:
            return False
        tensors.append(tensor)
    q_scale_t, q_zp_t, dq_scale_t, dq_zp_t = tensors
    if q_zp_t.data_type != dq_zp_t.data_type or q_scale_t.data_type != dq_scale_t.data_type:
        return False
    q_scale, q_zp, dq_scale, dq_zp = (constant_array(graph, n) for n in names)
    assert q_scale is not None and q_zp is not None and dq_scale is not None and dq_zp is not None
    if q_zp.tobytes() != dq_zp.tobytes():
        return False
    if q_scale_t.data_type not in _FLOAT_SCALES:
        return False
    return bool(q_scale.reshape(-1)[0] == dq_scale.reshape(-1)[0])


def is_q_or_dq_scale_positive_constant_scalar(graph: Graph, node: Node) -> bool:
    """``QDQ::IsQOrDQScalePositiveConstantScalar``."""
    name = node.input(SCALE_ID)
    if not _constant_scalar(graph, name):
        return False
    scale = constant_array(graph, name)
    assert scale is not None
    return bool(scale.reshape(-1)[0] > 0)


def q_zero_point_type(graph: Graph, q: Node) -> int | None:
    """``GetQNodeZeroPointType`` (double_qdq_pairs_remover.cc): the zp initializer's type; without a zp input the
    ``output_dtype`` attribute (a schema default counts), else uint8; None if the zp is not a constant initializer."""
    zp = q.input(ZERO_POINT_ID)
    if not zp:
        attr = q.attributes.get("output_dtype")
        return int(attr.i) if attr is not None else onnx.TensorProto.UINT8
    tensor = constant_initializer(graph, zp)
    return None if tensor is None else int(tensor.data_type)


def raw_tensor(name: str, dtype: int, dims: list[int], data: bytes) -> onnx.TensorProto:
    """A TensorProto of ``dtype`` and ``dims`` holding ``data`` (already packed) as raw bytes."""
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = dtype
    tensor.dims.extend(dims)
    tensor.raw_data = data
    return tensor


def tensor_from_array(array: np.ndarray, name: str, dtype: int) -> onnx.TensorProto:
    """A raw-data TensorProto of ``dtype`` (as ``utils::TensorToTensorProto`` writes one)."""
    tensor = numpy_helper.from_array(array, name)
    tensor.data_type = dtype
    return tensor
