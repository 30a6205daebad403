"""``QDQFinalCleanupTransformer`` (qdq_transformer/qdq_final_cleanup.cc, spec §9, REVIEW 27): the last Level2
pass removes back-to-back DQ→Q pairs that cancel, and, with ``session.enable_quant_qdq_cleanup=1``, Q→DQ pairs::

    P ─a─> DQ(s, zp) ─> Q(s, zp) ─b─> C        =>   P ─a─> C
    P ─a─> DQ ─> Q ─> graph output y           =>   P ─y─> ...     (P's output renamed to y)
    input a ─> DQ ─> Q ─> graph output y        =>   a ─> Identity "QDQFinalCleanupTransformer" ─> y

Rules (no EP filtering; registered even with ``session.disable_quant_qdq=1``). For each node F in topological order,
first as DQ→Q, then (flag set) as Q→DQ:

* F matches the first type (``MatchDQNode`` / ``MatchQNode``), produces no graph output and has at least one
  output edge (none into a subgraph). Every consumer S matches the second type.
* ``IsQDQPairSupported`` for each (F, S) pair, in both directions: both with 3 inputs, constant scalar scales and
  zero points of equal types, equal zero-point bytes and equal scale values (a DQ without zp blocks it).
* Each S either has exactly one output edge and produces no graph output, or produces a graph output and has no
  output edges (an S whose output feeds two consumers blocks the pair).
* Each consumer of S then reads F's input; if S produced a graph output, F's source node (F has one input edge)
  writes that graph output instead, or, when F reads a graph input or initializer, or a value that is also a graph
  output or read elsewhere (ORT 1.32 behaviour, observed), an Identity named
  ``GenerateNodeName("QDQFinalCleanupTransformer")`` on S's EP copies it. F and S are removed.
"""

from __future__ import annotations

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import node_produces_graph_output
from qdqopt.passes.qdq_util import is_dq, is_q, is_qdq_pair_supported

__all__ = ["QDQFinalCleanupTransformer", "second_is_removable"]


def second_is_removable(graph: Graph, second: Node) -> bool:
    """S feeds exactly one consumer and no graph output, or only a graph output: a Q whose output is read twice (a
    kept Relu's Q, once the Relu is gone, read by a graph output's DQ and the next unit's DQ) keeps its pair."""
    return graph.output_edge_count(second) == (0 if node_produces_graph_output(graph, second) else 1)


def _clean_up(graph: Graph, first: Node, *, dq_q: bool) -> bool:
    """``CleanUpNodeSequence``."""
    match_first, match_second = (is_dq, is_q) if dq_q else (is_q, is_dq)
    if not match_first(first) or node_produces_graph_output(graph, first):
        return False
    edges = graph.output_edges(first)
    if not edges:
        return False
    seconds: list[Node] = []
    for edge in edges:
        second = graph.node(edge.dst)
        assert second is not None
        if edge.dst_slot >= len(second.inputs) or not match_second(second):
            return False
        q, dq = (second, first) if dq_q else (first, second)
        if not is_qdq_pair_supported(graph, q, dq, check_op_type=False):
            return False
        if not second_is_removable(graph, second):
            return False
        seconds.append(second)
    in_edges = graph.input_edges(first)
    src = graph.node(in_edges[0].src) if len(in_edges) == 1 else None
    src_slot = in_edges[0].src_slot if len(in_edges) == 1 else -1
    source_value = first.inputs[0]
    for k, second in enumerate(seconds):
        if not node_produces_graph_output(graph, second):
            for edge in graph.output_edges(second):
                consumer = graph.node(edge.dst)
                assert consumer is not None
                if edge.dst_slot >= len(consumer.inputs):
                    # an implicit input (a subgraph of the consumer reads S's output): ReplaceDownstreamNodeInput
                    # indexes the explicit inputs with the edge's slot, past their end (fuzz seed 7 case 1098)
                    raise ModelError(
                        f"ORT 1.32's QDQFinalCleanupTransformer aborts the process (std::vector index out of range) "
                        f"removing '{first.name}' and '{second.name}': node '{consumer.name}' ({consumer.op_type}) "
                        f"reads {second.outputs[0]!r} in a subgraph"
                    )
                graph.set_input(consumer, edge.dst_slot, source_value)
            graph.remove_node(second)
        else:
            output_value = second.outputs[0]
            exclusive = src is not None and not graph.is_graph_output(source_value)
            if src is not None and exclusive:
                exclusive = len([e for e in graph.output_edges(src) if e.src_slot == src_slot]) == 1
            if src is not None and len(seconds) == 1 and exclusive:
                graph.remove_node(first)
                graph.remove_node(second)
                graph.set_output(src, src_slot, output_value)
                return True
            graph.add_node(
                graph.generate_node_name("QDQFinalCleanupTransformer"),
                "Identity",
                [source_value],
                [output_value],
                ep=second.ep,
            )
            graph.remove_node(second)
        if k == len(seconds) - 1:
            graph.remove_node(first)
    return True


class QDQFinalCleanupTransformer(GraphTransformer):
    """``QDQFinalCleanupTransformer``."""

    name = "QDQFinalCleanupTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        q_dq = ctx.config.flag("session.enable_quant_qdq_cleanup")

        def visit(node: Node) -> bool:
            changed = _clean_up(graph, node, dq_q=True)
            live = graph.node(node.index)
            if q_dq and live is not None and _clean_up(graph, live, dq_q=False):
                changed = True
            return changed

        return self.visit_in_order(graph, ctx, graph_level, visit, ops=("DequantizeLinear", "QuantizeLinear"))
