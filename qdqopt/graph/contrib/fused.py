"""``contrib_defs.cc`` / ``bert_defs.cc``: the float fusions ORT's Level2 passes produce.

=========================  ==============================================================================
FusedMatMul                A's type; ONNX MatMul's shape of the operands as transA/transB and
                           transBatchA/transBatchB rearrange them (``FusedMatMulShapeInference``)
=========================  ==============================================================================
"""

from __future__ import annotations

from qdqopt.graph.contrib._base import Dim, InferenceError, Node, OpSpec, matmul_shape

__all__ = ["SPECS"]

MS = "com.microsoft"


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
    if not a or not b:
        raise InferenceError("Input tensors of wrong rank (0).")
    dims = matmul_shape(
        _transposed(a, node.attr_int("transA", 0) != 0, node.attr_int("transBatchA", 0) != 0),
        _transposed(b, node.attr_int("transB", 0) != 0, node.attr_int("transBatchB", 0) != 0),
    )
    if dims is not None:
        node.set_shape(0, dims)


SPECS = [
    OpSpec(MS, "FusedMatMul", _fused_matmul),
]
