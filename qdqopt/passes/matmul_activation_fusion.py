"""MatMulActivationFusion: a com.microsoft FusedMatMul whose only consumer is a Softmax becomes one com.microsoft
FusedMatMulActivation (``matmul_activation_fusion.cc``, Level2)::

    before                                        after
    A, B -> FusedMatMul(alpha, trans*) -> Softmax(axis) -> y
                                                  A, B -> FusedMatMulActivation(alpha, trans*, activation="Softmax",
                                                                                activation_axis) -> y

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is a com.microsoft
  FusedMatMul (1) on a compatible EP with exactly one output edge;
* the compatible EPs are the DirectML EP's only (ORT registers the transformer for it alone): **in a CPU session the
  pass never changes a graph** and ORT logs ``MatMulActivationFusion modified: 0``, even where MatmulTransposeFusion
  or MatMulScaleFusion has just made a FusedMatMul feeding a Softmax; the rules below are for a Dml-assigned graph;
* the consumer is an ai.onnx Softmax (1, 11, 13), the one activation whose versions share a single implementation,
  on the FusedMatMul's EP; the FusedMatMul produces no graph output;
* the node: ``GenerateNodeName(<FusedMatMul's name> + "_FusedActivation")``, doc string ``<FusedMatMul's doc
  string> + " with activation Softmax"``, the FusedMatMul's inputs and attributes (its map copied), then
  ``activation`` = ``"Softmax"``, then each Softmax attribute renamed ``activation_<name>`` (in the Softmax's map
  order), domain com.microsoft, the FusedMatMul's EP; the Softmax's outputs move to it, both nodes go.
"""

from __future__ import annotations

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import fusable_activation, fuse_with_activation, is_supported_op

__all__ = ["MatMulActivationFusion"]

MS_DOMAIN = "com.microsoft"


def is_fusable_activation(node: Node) -> bool:
    """``IsFusableActivation``: a Softmax (1, 11, 13)."""
    return is_supported_op(node, "Softmax", (1, 11, 13))


class MatMulActivationFusion(GraphTransformer):
    """Fuse ``FusedMatMul -> Softmax`` into FusedMatMulActivation (DirectML-assigned nodes only)."""

    name = "MatMulActivationFusion"
    compatible_eps = ("DmlExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("FusedMatMul",))

    def _fuse(self, graph: Graph, matmul: Node) -> bool:
        if not is_supported_op(matmul, "FusedMatMul", (1,), MS_DOMAIN) or not self.node_is_compatible(matmul):
            return False
        act = fusable_activation(graph, matmul, is_fusable_activation)
        if act is None:
            return False
        fuse_with_activation(
            graph,
            matmul,
            act,
            name=graph.generate_node_name(matmul.name + "_FusedActivation"),
            op_type="FusedMatMulActivation",
            doc_string=matmul.doc_string + " with activation " + act.op_type,
        )
        return True
