"""BiasGeluFusion: an Add of a 1-D bias followed by ``com.microsoft`` Gelu or FastGelu becomes one node
(``bias_gelu_fusion.cc``, Level2, CPU EP)::

    before                                   after
    X[.., N] --> Add <-- B[N]                X, B --> BiasGelu            (from Gelu)
                  |                          X, B --> FastGelu(X, B)      (from a one-input FastGelu)
                  v
         com.microsoft.Gelu / FastGelu

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot;
* the Add (7, 13, 14) is on a compatible EP with exactly one output edge, not into a subgraph, and no graph output
  (``CheckOutputEdges``); both inputs have a known shape of rank 1 or more and equal last dims (equal values, or
  equal symbols); the input of rank 1 is the bias (input 0 first: when both are 1-D, input 0 is the bias), the
  other goes first; neither of rank 1: no fusion;
* the Add's consumer is a ``com.microsoft`` Gelu or FastGelu (version 1), or ONNX's Gelu (20), on the Add's EP; an
  ONNX Gelu with ``approximate="tanh"`` counts as a FastGelu, any other as a Gelu (observed on 1.32: the source
  this was read from names the contrib ops only); a FastGelu that already has a bias input is left alone; no check
  on types;
* the new node: ``GenerateNodeName("BiasGelu")`` (op BiasGelu) or ``GenerateNodeName("FastGelu")`` (op FastGelu),
  doc string "fused Add and Gelu", inputs (X, B), the Gelu's outputs, the Gelu's EP, domain ``com.microsoft``, no
  attributes; the Add and the Gelu are removed.
"""

from __future__ import annotations

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node, dims_equal
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges, finalize_nodes_fusion, is_supported_op, output_nodes

__all__ = ["BiasGeluFusion"]

MS_DOMAIN = "com.microsoft"


class BiasGeluFusion(GraphTransformer):
    """Fuse ``Add(X, B) -> Gelu`` into BiasGelu and ``Add(X, B) -> FastGelu`` into a FastGelu with bias."""

    name = "BiasGeluFusion"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Add",))

    def _fuse(self, graph: Graph, add: Node) -> bool:
        if (
            not is_supported_op(add, "Add", (7, 13, 14))
            or not self.node_is_compatible(add)
            or not check_output_edges(graph, add, 1)
        ):
            return False
        shape0, shape1 = graph.shape(add.inputs[0]), graph.shape(add.inputs[1])
        if not shape0 or not shape1:
            emit_no_match(NoMatch("an input of the Add has no known shape of rank 1 or more"), add.name)
            return False
        if not dims_equal(shape0[-1], shape1[-1]):
            emit_no_match(NoMatch("the Add's inputs differ in their last dim"), add.name)
            return False
        if len(shape0) == 1:
            inputs = [add.inputs[1], add.inputs[0]]
        elif len(shape1) == 1:
            inputs = [add.inputs[0], add.inputs[1]]
        else:
            emit_no_match(NoMatch("neither input of the Add is 1-D (a bias)"), add.name)
            return False
        gelu = output_nodes(graph, add)[0]
        onnx_gelu = is_supported_op(gelu, "Gelu", (20,))
        is_gelu = is_supported_op(gelu, "Gelu", (1,), MS_DOMAIN) or onnx_gelu
        is_fast = is_supported_op(gelu, "FastGelu", (1,), MS_DOMAIN) or (
            onnx_gelu and gelu.attr_str("approximate", "none") == "tanh"
        )
        if not (is_gelu or is_fast) or gelu.ep != add.ep:
            emit_no_match(
                NoMatch(
                    f"{gelu.op_type} {gelu.name!r} is not a com.microsoft Gelu or FastGelu on the Add's EP",
                    (gelu.name,),
                ),
                add.name,
            )
            return False
        if is_fast and len(gelu.inputs) > 1:
            emit_no_match(NoMatch(f"FastGelu {gelu.name!r} has a bias already", (gelu.name,)), add.name)
            return False
        op_type = "FastGelu" if is_fast else "BiasGelu"
        fused = graph.add_node(
            graph.generate_node_name(op_type),
            op_type,
            inputs,
            [""] * len(gelu.outputs),
            domain=MS_DOMAIN,
            doc_string="fused Add and Gelu",
            ep=gelu.ep,
        )
        finalize_nodes_fusion(graph, [add, gelu], fused)
        emit_fused(add.name, op_type, fused.name, MS_DOMAIN)
        return True
