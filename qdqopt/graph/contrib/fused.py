"""``contrib_defs.cc`` / ``bert_defs.cc``: the float fusions ORT's Level2 passes produce.

=================================  ======================================================================
FusedMatMul                        A's type; ONNX MatMul's shape of the operands as transA/transB and
                                   transBatchA/transBatchB rearrange them (``FusedMatMulShapeInference``)
FusedConv                          X's type; ``convPoolShapeInference`` (as Conv)
FusedGemm                          A's type; (M, N) when A and B both have a shape (rank 2 each)
Gelu / FastGelu / BiasGelu /       X's type and shape (``propagateShapeAndTypeFromFirstInput``)
QuickGelu
SkipLayerNormalization,            output: input's type and shape; mean, inv_std_var: float, the input's
SkipSimplifiedLayerNormalization   shape with the last dim 1; input_skip_bias_sum: as input
LayerNormalization-1 (ai.onnx,     ORT's own schema below ONNX's opset 17: Y of Scale's type (V), X's shape;
opset < 17)                        Mean, InvStdDev of ``stash_type`` with X's shape, 1 from ``axis`` on
Attention                          input's type; input's shape [B, S, *] with the last dim the v hidden size
                                   (``qkv_hidden_sizes[2]``, else the weights' dim 1 / 3, when known)
SimplifiedLayerNormalization-1     Y as LayerNormalization; inv_std_var of ``stash_type``, X's shape with the
(ai.onnx)                          ``axis`` dim alone set to 1 (not the dims after it)
=================================  ======================================================================
"""

from __future__ import annotations

from onnx import TensorProto

from qdqopt.graph.contrib._base import (
    MS,
    Dim,
    Node,
    OpSpec,
    conv_pool_shape,
    dim_value,
    gemm_shape,
    matmul_shape,
    normalize_axis,
)

__all__ = ["SPECS"]


def _transposed(dims: list[Dim], trans: bool, trans_batch: bool) -> list[Dim]:
    """The operand's dims as the MatMul sees them; a vector is left as it is."""
    rank = len(dims)
    if rank == 1:
        return dims
    batch = dims[1 : rank - 1] if trans_batch else dims[: rank - 2]
    row = rank - 1 if trans else (0 if trans_batch else rank - 2)
    col = (0 if trans_batch else rank - 2) if trans else rank - 1
    return [*batch, dims[row], dims[col]]


def _fused_matmul(node: Node) -> None:
    node.propagate_elem(0, 0)
    a, b = node.shape(0), node.shape(1)
    if a is None or b is None:
        return
    dims = matmul_shape(
        _transposed(a, node.attr_int("transA", 0) != 0, node.attr_int("transBatchA", 0) != 0),
        _transposed(b, node.attr_int("transB", 0) != 0, node.attr_int("transBatchB", 0) != 0),
    )
    node.set_shape_if_known(0, dims)


def _fused_conv(node: Node) -> None:
    node.propagate_elem(0, 0)
    dims = conv_pool_shape(node, node.shape(0), node.shape(1), use_dilation=True, require_kernel_shape=False)
    node.set_shape_if_known(0, dims)


def _fused_gemm(node: Node) -> None:
    node.propagate_elem(0, 0)
    if not node.has_shapes(2):
        return
    a, b = node.shape(0), node.shape(1)
    assert a is not None and b is not None
    node.set_shape(0, gemm_shape(node, a, b))


def _normalized(dims: list[Dim], axis: int) -> list[Dim]:
    """The statistics' shape: ``dims`` with every dim from ``axis`` on set to 1."""
    return [d if i < axis else dim_value(1) for i, d in enumerate(dims)]


def _layer_norm(node: Node, stats: tuple[int, ...], *, only_axis: bool = False) -> None:
    """ORT's LayerNormalization-1 / SimplifiedLayerNormalization-1: Y as X (its type then rebound to Scale's by ORT's
    rule), the statistics outputs ``stats`` of type ``stash_type`` and X's shape with every dim from ``axis`` on set
    to 1 (``only_axis``: SimplifiedLayerNormalization sets the ``axis`` dim alone, observed on 1.32)."""
    node.propagate_shape_and_type_from_first_input()
    stash = node.attr_int("stash_type", TensorProto.FLOAT)
    for index in stats:
        if index < node.num_outputs:
            node.set_elem(index, stash)
    dims = node.shape(0)
    if dims is None:
        return
    rank = len(dims)
    axis = normalize_axis(node.attr_int("axis", -1), rank, f"axis must be in [-rank, rank-1]. input rank was {rank}")
    reduced = [dim_value(1) if i == axis else d for i, d in enumerate(dims)] if only_axis else _normalized(dims, axis)
    for index in stats:
        if index < node.num_outputs:
            node.set_shape(index, reduced)


def _layer_normalization(node: Node) -> None:
    _layer_norm(node, (1, 2))


def _simplified_layer_normalization(node: Node) -> None:
    _layer_norm(node, (1,), only_axis=True)


def _skip_layer_normalization(node: Node) -> None:
    """``SkipLayerNormalizationShapeInference``: output as input, mean and inv_std_var float with the last dim 1,
    input_skip_bias_sum as input."""
    node.propagate_shape_and_type_from_first_input()
    for index in (1, 2):
        if index < node.num_outputs:
            node.set_elem(index, TensorProto.FLOAT)
    if node.num_outputs > 3:
        node.propagate_elem(0, 3)
    dims = node.shape(0)
    if dims is None:
        return
    for index in (1, 2):
        if index < node.num_outputs and dims:
            node.set_shape(index, _normalized(dims, len(dims) - 1))
    if node.num_outputs > 3:
        node.set_shape(3, dims)


def _attention(node: Node) -> None:
    """``AttentionTypeAndShapeInference`` (no past): output 0 of the input's type and its shape ``[B, S, W]`` with
    ``W`` the v hidden size when it is known (``qkv_hidden_sizes[2]``, else the weights' dim 1 divided by 3)."""
    node.propagate_elem(0, 0)
    dims = node.shape(0)
    if dims is None or len(dims) != 3:
        return
    v_hidden = -1
    sizes = node.attr_ints("qkv_hidden_sizes")
    if sizes:
        v_hidden = sizes[2] if len(sizes) == 3 else -1
    else:
        weights = node.shape(1)
        if weights is not None and len(weights) == 2 and weights[1].HasField("dim_value"):
            v_hidden = weights[1].dim_value // 3
    out = list(dims)
    if v_hidden > 0:
        out[2] = dim_value(v_hidden)
    node.set_shape(0, out)


SPECS = [
    OpSpec(MS, "Attention", _attention),
    OpSpec(MS, "FusedMatMul", _fused_matmul),
    OpSpec(MS, "FusedConv", _fused_conv),
    OpSpec(MS, "FusedGemm", _fused_gemm),
    *OpSpec.like_first_input(MS, "Gelu", "FastGelu", "BiasGelu", "QuickGelu"),
    OpSpec(MS, "SkipLayerNormalization", _skip_layer_normalization),
    OpSpec(MS, "SkipSimplifiedLayerNormalization", _skip_layer_normalization),
    OpSpec("", "LayerNormalization", _layer_normalization),
    OpSpec("", "SimplifiedLayerNormalization", _simplified_layer_normalization),
]
