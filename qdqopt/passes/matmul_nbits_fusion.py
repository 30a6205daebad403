"""MatMulNBitsFusion: an Add of a [N] bias after a MatMulNBits moves into its bias input (``matmul_nbits_fusion.cc``).

A ``SelectorActionTransformer`` with one rule, ``FuseBias``, registered at Level2 for the CPU and CUDA EPs::

    A ─> com.microsoft.MatMulNBits(B, scales[, zp, g_idx]) ─> Add(bias[N]) ─> y
        =>  A ─> com.microsoft.MatMulNBits(B, scales, zp or "", g_idx or "", bias) ─> y

Rules (ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot; the target is a com.microsoft
  MatMulNBits (any version) on a compatible EP (CPU/CUDA; an unassigned node is skipped);
* selector: the MatMulNBits has no bias yet (input 5 absent or empty); ``CheckOutputEdges(1)``: one output edge,
  not into a subgraph, no graph output; the consumer is an Add (ONNX 7, 13, 14) on the same EP; the Add's other
  input (slot 1 when the MatMulNBits feeds slot 0, else slot 0) has a known shape of rank 1 whose dim is the
  value ``N`` (the attribute). Neither the bias' type nor whether it is constant is checked;
* action (``MergeIntoTarget``): the bias moves to input 5 of the MatMulNBits itself (missing optional inputs 3 and
  4 become empty names), the Add's output moves to its output 0, and the Add goes. The node keeps its name, index,
  attributes and EP; its former output value is left unused.
"""

from __future__ import annotations

from qdqopt.events import emit_matched
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges
from qdqopt.passes.qdq_util import is_supported_op

__all__ = ["MatMulNBitsFusion"]

_BIAS_SLOT = 5


class MatMulNBitsFusion(GraphTransformer):
    """Fuse the [N] bias Add after a MatMulNBits into its bias input."""

    name = "MatMulNBitsFusion"
    compatible_eps = ("CPUExecutionProvider", "CUDAExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._match(graph, node), ops=("MatMulNBits",))

    def _match(self, graph: Graph, node: Node) -> bool:
        if not self.node_is_compatible(node):
            return False
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
            return False
        selected = _select_bias(graph, node)
        if selected is None:
            return False
        add, bias_slot = selected
        emit_matched(node.name, node.op_type)
        _merge_bias(graph, node, add, bias_slot)
        return True


def _select_bias(graph: Graph, node: Node) -> tuple[Node, int] | None:
    """``selectors::BiasFusion``: the Add and the slot of its bias input, or None."""
    if len(node.inputs) > _BIAS_SLOT and node.inputs[_BIAS_SLOT]:
        return None
    if not check_output_edges(graph, node, 1):
        return None
    edge = graph.output_edges(node)[0]
    add = graph.node(edge.dst)
    assert add is not None
    if not is_supported_op(add, "Add", (7, 13, 14)) or add.ep != node.ep:
        return None
    bias_slot = 1 if edge.dst_slot == 0 else 0
    shape = graph.shape(add.inputs[bias_slot])
    if shape is None:
        return None
    n = node.attr_int("N")
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] != n:
        return None
    return add, bias_slot


def _merge_bias(graph: Graph, node: Node, add: Node, bias_slot: int) -> None:
    """``actions::BiasFusion`` (``MergeIntoTarget``): move the bias and the Add's output; remove the Add."""
    graph.set_input(node, _BIAS_SLOT, add.inputs[bias_slot])
    graph.set_output(node, 0, add.outputs[0])
    graph.remove_node(add)
