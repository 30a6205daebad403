"""What layout transformations add to the optimizer (``layout_transformation.cc`` and ``SwapNodeImpl`` in
``ort_transpose_optimization.cc``): wrapping a node in Transposes and swapping its op for a channels-last one.

::

    x ─> QLinearConv ─> y
        becomes    x ─> Transpose(0,2,3,1) ─> com.microsoft.QLinearConv(channels_last=1) ─> Transpose(0,3,1,2) ─> y

The wrap leaves the graph's values as they were (``x`` and ``y`` still NCHW); the optimizer's main loop then pushes
the new Transposes until they cancel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdqopt.graph import Node
from qdqopt.passes.transpose_optimization.perms import invert_perm

if TYPE_CHECKING:
    from qdqopt.passes.transpose_optimization.context import OptimizerCtx

__all__ = ["copy_node_name", "swap_node_op_type_domain_and_since_version", "wrap_transposes_around_node"]


def wrap_transposes_around_node(
    ctx: OptimizerCtx, node: Node, input_perms: list[list[int] | None], output_perms: list[list[int] | None]
) -> None:
    """``WrapTransposesAroundNode``: input ``i`` gets a ``Transpose(input_perms[i])`` in front (constants transposed
    in place, cancelling Transposes removed), output ``i`` a ``Transpose(output_perms[i])`` behind."""
    for i, perm in enumerate(input_perms):
        if perm is not None:
            ctx.transpose_input(node, i, perm, invert_perm(perm))
    for i, perm in enumerate(output_perms):
        if perm is not None:
            ctx.transpose_output(node, i, perm, invert_perm(perm))


def copy_node_name(source: Node, op_type: str) -> str:
    """The base ``CopyNode`` gives ``GenerateNodeName``: in ORT 1.32 (checked live) the source node's name, so a
    swapped ``conv1`` becomes ``conv1_token_N``; the ``ort_optimizer_api_impl.cc`` read for this passes the op type."""
    return source.name


def swap_node_op_type_domain_and_since_version(ctx: OptimizerCtx, node: Node, op_type: str, domain: str) -> Node:
    """``SwapNodeOpTypeDomainAndSinceVersion``: :func:`copy_node`, then each named output moved to the copy
    (``MoveOutput``: the old node's output renamed ``GenerateNodeArgName(<old name>)``), then the old node removed."""
    new = ctx.copy_node(node, op_type, domain, copy_node_name(node, op_type))
    for j, value in enumerate(list(node.outputs)):
        if value:
            ctx.move_output(node, j, new, j)
    ctx.remove_node(node)
    return new
