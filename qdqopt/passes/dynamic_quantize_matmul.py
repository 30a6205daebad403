"""DynamicQuantizeMatMulFusion: DynamicQuantizeLinear -> MatMulIntegerToFloat becomes DynamicQuantizeMatMul.

``dynamic_quantize_matmul_fusion.cc``, registered at Level2 for the CPU and ACL EPs, right after
MatMulIntegerToFloatFusion (so it sees the nodes that pass made)::

          x
          |
    DynamicQuantizeLinear
      |  A   | A_scale  | A_zp                                 x
      v      v          v                                      |
    MatMulIntegerToFloat <- B, B_scale, B_zp[, bias]   ->   DynamicQuantizeMatMul <- B, B_scale, B_zp[, bias]
          |                                                    |      (com.microsoft)
          y                                                    y

Rules (ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot; matched nodes are removed after the
  whole graph was visited;
* the anchor is a ``com.microsoft`` MatMulIntegerToFloat (version 1) on a compatible EP with at least 5 input
  defs (empty ones count); the producer of its input 0 (through an edge) is a DynamicQuantizeLinear (ONNX 11, any EP)
  with exactly 3 output edges and no graph output; the anchor's inputs 2 and 4 are that node's outputs 1 and 2;
* the new node is named as the anchor, no doc string, no attributes, domain ``com.microsoft``, the anchor's EP and
  outputs; inputs (x, B, B_scale, B_zp or "", bias or ""), B_zp from anchor input 5 and bias from input 6 when
  present;
* removed: the DynamicQuantizeLinear and the MatMulIntegerToFloat.
"""

from __future__ import annotations

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges, input_node, is_supported_op

__all__ = ["DynamicQuantizeMatMulFusion"]


class DynamicQuantizeMatMulFusion(GraphTransformer):
    """Fuse DynamicQuantizeLinear + MatMulIntegerToFloat into ``com.microsoft.DynamicQuantizeMatMul``."""

    name = "DynamicQuantizeMatMulFusion"
    compatible_eps = ("CPUExecutionProvider", "ACLExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_then_remove(
            graph, ctx, graph_level, lambda node, out: self._try_fuse(graph, node, out), ops=("MatMulIntegerToFloat",)
        )

    def _try_fuse(self, graph: Graph, mtf: Node, to_remove: list[Node]) -> None:
        if (
            not is_supported_op(mtf, "MatMulIntegerToFloat", (1,), "com.microsoft")
            or not self.node_is_compatible(mtf)
            or len(mtf.inputs) < 5
        ):
            return
        dql = input_node(graph, mtf, 0)
        if dql is None:
            return
        if not is_supported_op(dql, "DynamicQuantizeLinear", (11,)) or not check_output_edges(
            graph, dql, len(dql.outputs)
        ):
            return
        if len(dql.outputs) < 3 or dql.outputs[1] != mtf.inputs[2] or dql.outputs[2] != mtf.inputs[4]:
            return
        inputs = [dql.inputs[0], mtf.inputs[1], mtf.inputs[3], "", ""]
        if len(mtf.inputs) >= 6:
            inputs[3] = mtf.inputs[5]
            if len(mtf.inputs) >= 7:
                inputs[4] = mtf.inputs[6]
        graph.add_node(
            mtf.name,
            "DynamicQuantizeMatMul",
            inputs,
            list(mtf.outputs),
            domain="com.microsoft",
            ep=mtf.ep,
        )
        to_remove.extend([dql, mtf])
