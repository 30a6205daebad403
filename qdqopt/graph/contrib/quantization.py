"""``quantization_defs.cc``: the contrib Q/DQ, the QLinear* element-wise ops, QGemm and the integer MatMuls.

What ORT 1.32 infers for each output (element type by ORT's binding rule, see :mod:`._base`):

=========================  ==============================================================================
QuantizeLinear             y_zero_point's type (uint8 without one); x's shape
DequantizeLinear           x_scale's type (T2 bound by the scale: float16 for a float16 scale, although the
                           function itself says float); x's shape
QLinearAdd / QLinearMul    A's type; the broadcast of A's and B's shapes when both have one
QLinearLeakyRelu/Sigmoid   X's type and shape
QLinearSoftmax             X's type and shape (axis checked against the rank)
QLinearReduceMean          data's type; ``axes`` (all when absent) reduced, kept as 1 with ``keepdims=1``
QLinearConcat              Y_zero_point's type; with every input shaped: the rank of the first tensor, the
                           other dims merged (``mergeInDimensionInfo``), the axis summed when all are known
QLinearWhere               X's type; the broadcast of condition, X and Y when all 9 inputs have shapes
QGemm                      y_zero_point's type (float without one); (M, N) from A and B with transA/transB
MatMulIntegerToFloat       a_scale's type; ONNX MatMul's shape of A and B
DynamicQuantizeMatMul      float; ONNX MatMul's shape of A and B
MatMulNBits                A's type; A's dims with the last one replaced by ``N``
=========================  ==============================================================================
"""

from __future__ import annotations

from onnx import TensorProto

from qdqopt.graph.contrib._base import (
    MS,
    Dim,
    InferenceError,
    Node,
    OpSpec,
    broadcast,
    dim_value,
    gemm_shape,
    matmul_shape,
    normalize_axis,
)

__all__ = ["SPECS"]


def _quantize_linear(node: Node) -> None:
    if node.num_inputs == 3 and node.input_type(2) is not None:
        node.propagate_elem(2, 0)
    else:
        node.set_elem(0, TensorProto.UINT8)
    node.propagate_shape(0, 0)


def _dequantize_linear(node: Node) -> None:
    node.set_elem(0, TensorProto.FLOAT)  # "only float is supported"; ORT's T2 binding (x_scale) overrides it
    node.propagate_shape(0, 0)


def _qlinear_math(node: Node) -> None:
    node.propagate_elem(0, 0)
    a, b = node.shape(0), node.shape(3)
    if a is not None and b is not None:
        dims = broadcast(a, b)
        node.set_shape_if_known(0, dims)


def _qlinear_softmax(node: Node) -> None:
    node.propagate_elem(0, 0)
    dims = node.shape(0)
    if dims is not None:
        rank, axis = len(dims), node.attr_int("axis", -1)
        normalize_axis(axis, rank, f"'axis' must be in [{-rank} , {rank - 1}]. Its actual value is: {axis}")
        node.set_shape(0, dims)


def _qlinear_reduce_mean(node: Node) -> None:
    node.propagate_elem(0, 0)
    dims = node.shape(0)
    if dims is None:
        return
    keep_dims = node.attr_int("keepdims", 1)
    rank = len(dims)
    axes = node.attr_ints("axes") or []
    for i, axis in enumerate(axes):
        axes[i] = normalize_axis(axis, rank, f"axis must be in [-rank, rank-1]. input rank was {rank}")
    out: list[Dim] = []
    for i in range(rank):
        if axes and i not in axes:
            out.append(dims[i])
        elif keep_dims == 1:
            out.append(dim_value(1))
    node.set_shape(0, out)


def _merge_dim(source: Dim, target: Dim, index: int) -> None:
    """ONNX's ``mergeInDimensionInfo``."""
    if source.HasField("dim_value"):
        if target.HasField("dim_value"):
            if target.dim_value != source.dim_value:
                raise InferenceError(
                    f"Can't merge shape info. Inferred={source.dim_value} Declared={target.dim_value} Dimension={index}"
                )
        else:
            target.dim_value = source.dim_value
    elif target.HasField("dim_value") or target.HasField("dim_param"):
        return
    elif source.HasField("dim_param"):
        target.dim_param = source.dim_param


def _qlinear_concat(node: Node) -> None:
    # ORT's function propagates Y_scale's float, which its T8 binding (Y_zero_point) always overrides: left out
    count = node.num_inputs
    if count < 5 or (count - 2) % 3 != 0 or not node.has_shapes(count):
        return
    first = node.shape(2)
    assert first is not None
    rank = len(first)
    if node.attr("axis") is None:
        raise InferenceError("Required attribute axis is missing")
    axis = normalize_axis(node.attr_int("axis", 0), rank, "axis must be in [-rank, rank)")
    out = [Dim() for _ in range(rank)]
    total, all_known = 0, True
    for i in range(2, count, 3):
        dims = node.shape(i)
        assert dims is not None
        if len(dims) != rank:
            raise InferenceError("All inputs to Concat must have same rank")
        for j in range(rank):
            if j == axis:
                if dims[j].HasField("dim_value"):
                    total += int(dims[j].dim_value)
                else:
                    all_known = False
            else:
                _merge_dim(dims[j], out[j], j)
    if all_known:
        out[axis].dim_value = total
    node.set_shape(0, out)


def _qlinear_where(node: Node) -> None:
    node.propagate_elem(1, 0)
    if node.has_shapes(9):
        cond, x, y = node.shape(0), node.shape(1), node.shape(4)
        assert cond is not None and x is not None and y is not None
        dims = broadcast(cond, x, y)
        node.set_shape_if_known(0, dims)


def _qgemm(node: Node) -> None:
    if node.num_inputs == 9 and node.input_type(8) is not None:
        node.propagate_elem(8, 0)
    else:
        node.set_elem(0, TensorProto.FLOAT)
    a, b = node.shape(0), node.shape(3)
    if a is None or b is None:
        return
    node.set_shape(0, gemm_shape(node, a, b))


def _matmul(node: Node) -> None:
    a, b = node.shape(0), node.shape(1)
    if a is None or b is None:
        return
    dims = matmul_shape(a, b)
    node.set_shape_if_known(0, dims)


def _matmul_integer_to_float(node: Node) -> None:
    node.propagate_elem(2, 0)
    _matmul(node)


def _dynamic_quantize_matmul(node: Node) -> None:
    node.propagate_elem(0, 0)
    _matmul(node)


def _matmul_nbits(node: Node) -> None:
    """``MatmulWithQuantWeightShapeInference`` with K and N from the attributes (B is transposed)."""
    node.propagate_elem(0, 0)
    a = node.shape(0)
    if a is None:
        return
    if not a:
        raise InferenceError("Input tensors of wrong rank (0).")
    k, n = node.attr_int("K", -1), node.attr_int("N", -1)
    last = a[-1]
    if last.HasField("dim_value") and last.dim_value != k:
        raise InferenceError("Incompatible dimensions for matrix multiplication")
    node.set_shape(0, [*a[:-1], dim_value(n)])


SPECS = [
    OpSpec(MS, "QuantizeLinear", _quantize_linear),
    OpSpec(MS, "DequantizeLinear", _dequantize_linear),
    OpSpec(MS, "QLinearAdd", _qlinear_math),
    OpSpec(MS, "QLinearMul", _qlinear_math),
    *OpSpec.like_first_input(MS, "QLinearLeakyRelu", "QLinearSigmoid"),
    OpSpec(MS, "QLinearSoftmax", _qlinear_softmax),
    OpSpec(MS, "QLinearReduceMean", _qlinear_reduce_mean),
    OpSpec(MS, "QLinearConcat", _qlinear_concat),
    OpSpec(MS, "QLinearWhere", _qlinear_where),
    OpSpec(MS, "QGemm", _qgemm),
    OpSpec(MS, "MatMulIntegerToFloat", _matmul_integer_to_float),
    OpSpec(MS, "DynamicQuantizeMatMul", _dynamic_quantize_matmul),
    OpSpec(MS, "MatMulNBits", _matmul_nbits),
]
