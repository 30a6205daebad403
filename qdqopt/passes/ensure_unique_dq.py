"""EnsureUniqueDQForNodeUnit: give every consumer of a DequantizeLinear its own DQ (spec §3).

ORT fuses QDQ *node units* (DQs → op → Qs) and a unit must own its DQs, so a DQ that feeds several consumers is
duplicated per consumer. ORT runs it once before Level1 at every level (even ORT_DISABLE_ALL), and again inside
Level1; ``session.disable_quant_qdq=1`` switches off both::

    before                              after
    Q ── DQ ──┬── Conv (index 5)        Q ──┬── DQ ──────────────── Conv (lowest consumer index keeps the DQ)
              └── Add  (index 9)            └── DQ/duplicated ───── Add  ("Added by EnsureUniqueDQForNodeUnit")

Rules (``ensure_unique_dq_for_node_unit.cc``):

* nodes are visited in topological order; each node's subgraphs are processed first (with their own names);
* a DQ with no output edge, or one edge and no graph output, is left alone;
* output edges are taken in ``EdgeEndCompare`` order (consumer index, output slot, input slot); edges into a
  subgraph (implicit inputs) are dropped from that list but mark the DQ as having a subgraph consumer;
* if the DQ produces a graph output or has a subgraph consumer, every explicit edge gets a duplicate (the original
  stays for the graph output / subgraph); otherwise the first edge keeps the original;
* a duplicate reads the very same inputs, copies the attributes, domain and EP, and is named
  ``GenerateNodeName(<dq name>/duplicated)``; its output ``GenerateNodeArgName(<dq output>/duplicated)`` is
  generated first, so with the shared counter the node takes the odd token numbers.
"""

from __future__ import annotations

from qdqopt.graph import Edge, Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import node_produces_graph_output
from qdqopt.passes.qdq_util import is_dq

__all__ = ["EnsureUniqueDQForNodeUnit"]

DOC = "Added by EnsureUniqueDQForNodeUnit"


class EnsureUniqueDQForNodeUnit(GraphTransformer):
    """Duplicate shared DQs so that each QDQ node unit owns its DQs."""

    name = "EnsureUniqueDQForNodeUnit"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: is_dq(node) and self._ensure_unique(graph, node),
            ops=("DequantizeLinear",),
        )

    @staticmethod
    def _ensure_unique(graph: Graph, dq: Node) -> bool:
        count = graph.output_edge_count(dq)
        produces_graph_output = node_produces_graph_output(graph, dq)
        if not count or (count == 1 and not produces_graph_output):
            return False
        edges = graph.output_edges(dq)
        explicit = [e for e in edges if e.dst_slot < len(_node(graph, e.dst).inputs)]
        has_subgraph_consumer = len(explicit) < len(edges)
        keep_first = not produces_graph_output and not has_subgraph_consumer
        to_duplicate = explicit[1:] if keep_first else explicit
        for edge in to_duplicate:
            _duplicate_for_edge(graph, dq, edge)
        return bool(to_duplicate)


def _node(graph: Graph, index: int) -> Node:
    node = graph.node(index)
    assert node is not None
    return node


def _duplicate_for_edge(graph: Graph, dq: Node, edge: Edge) -> None:
    """``DuplicateDQForOutputEdge``: a new DQ on the same inputs, feeding only this edge's consumer slot."""
    new_output = graph.new_value(edge.value + "/duplicated")
    new_name = graph.generate_node_name(dq.name + "/duplicated")
    graph.add_node(
        new_name,
        dq.op_type,
        list(dq.inputs),
        [new_output],
        domain=dq.domain,
        attributes=dict(dq.attributes),
        attr_map=dq.attr_map,
        doc_string=DOC,
        ep=dq.ep,
    )
    graph.set_input(_node(graph, edge.dst), edge.dst_slot, new_output)
