"""QDQPropagationTransformer: copy Q backward and DQ forward across data-movement ops (spec §4.6).

ORT source: ``qdq_transformer/qdq_propagation.cc``.

A data-movement op between a Q/DQ and a real op leaves that op without its QDQ node unit; the pass puts a Q -> DQ
pair (with the same scale and zero point initializers) on each edge it walks through::

    Q backward (from the Q):
        op -> Reshape -> Q -> DQ            op -> Q -> DQ -> Reshape -> Q -> DQ
    DQ forward (from the DQ):
        Q -> DQ -> Transpose -+-> Sigmoid   Q -> DQ -> Transpose -> Q -+-> DQ -> Sigmoid
                              +-> out                                  +-> DQ -> out   (writes the name ``out``)

Rules (ORT 1.32):

* one topological snapshot per graph; every node's subgraphs are processed first, then **Q backward over all
  nodes of the snapshot, then DQ forward over all of them** (nodes inserted on the way are not visited);
* propagating ops (ONNX domain, ``since_version``): MaxPool {12, 22}, Reshape {5, 13, 14, 19, 21, 23, 24, 25},
  Transpose {1, 13, 21, 23, 24, 25}, Squeeze and Unsqueeze {1, 11, 13, 21, 23, 24, 25}, Slice {1, 10, 11, 13};
  only input 0 and output 0 are followed;
* **Q backward**, for each Q (``MatchQNode``) whose scale, and zp if present, are constant scalar initializers: take
  the edge into input 0 (from a node output used by exactly one edge and not a graph output, or from a value listed
  as a graph input), then walk back while the edge's source is a propagating op, taking that op's input-0 edge under
  the same rule; stop at a DQ source; insert a pair on each edge walked (one DQ). An edge from a listed graph input
  ends the walk after its pair; an initializer that is not listed as an input ends it before. The new Q has a copy
  of the Q's attributes, the new DQ only its ``axis`` and ``block_size``;
* **DQ forward**, for each DQ (``MatchDQNode``) with one output edge and no graph output, constant scalar scale and
  zp, and a data input that is not a constant initializer (ORT #28491): breadth-first from its consumer, while the
  consumer propagates, all edges of that op's output 0 (consumers in edge order, then the graph output) form one
  group that gets one Q and one DQ per edge; a group with a Q destination is skipped (and not followed). The new Q
  copies the DQ's attributes plus, if the DQ's ``since_version`` is 21 or more, ``output_dtype`` = the DQ input's
  element type; the new DQs copy the DQ's attributes;
* naming, base = the NodeArg of the edge: the source's output becomes ``GenerateNodeArgName(base_pre_q)`` (a graph
  input or initializer source is read directly), then ``base_q_to_dq`` (arg) and node ``base_q``; per edge k
  ``base_post_dq<k>`` (arg; a graph-output edge writes ``base`` itself) and node ``base_dq<k>`` (k = "" for the
  first edge); domain of the originating Q/DQ; doc string "Inserted by QDQPropagationTransformer"; the scale and
  zp inputs are the very same initializer NodeArgs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx

from qdqopt.graph import Graph, Node, NodeIndex
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import node_produces_graph_output
from qdqopt.passes.qdq_util import (
    SCALE_ID,
    ZERO_POINT_ID,
    constant_initializer,
    has_constant_scalar_scale_and_zp,
    is_dq,
    is_q,
    is_supported_op,
)

__all__ = ["PROPAGATING_OPS", "QDQPropagationTransformer"]

DOC = "Inserted by QDQPropagationTransformer"

#: ``CanNodePropagate``: op type -> ONNX-domain since_versions.
PROPAGATING_OPS: dict[str, frozenset[int]] = {
    "MaxPool": frozenset({12, 22}),
    "Reshape": frozenset({5, 13, 14, 19, 21, 23, 24, 25}),
    "Transpose": frozenset({1, 13, 21, 23, 24, 25}),
    "Squeeze": frozenset({1, 11, 13, 21, 23, 24, 25}),
    "Unsqueeze": frozenset({1, 11, 13, 21, 23, 24, 25}),
    "Slice": frozenset({1, 10, 11, 13}),
}


def can_propagate(node: Node) -> bool:
    versions = PROPAGATING_OPS.get(node.op_type)
    return versions is not None and is_supported_op(node, node.op_type, versions)


@dataclass(frozen=True, init=False)
class _Edge:
    """``ExtendedGraphEdge``: a node-to-node edge, or one from a graph input/initializer or to a graph output."""

    src: tuple[int, int] | None  # (node index, output slot); None: graph input or initializer
    dst: tuple[int, int] | None  # (node index, input slot); None: graph output
    arg_name: str

    def __init__(self, src: tuple[int, int] | None, dst: tuple[int, int] | None, arg_name: str) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "arg_name", arg_name)


class QDQPropagationTransformer(GraphTransformer):
    """Insert Q/DQ pairs so that data-movement ops sit inside QDQ node units."""

    name = "QDQPropagationTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        order = [node.index for node in graph.topological_order()]
        modified = False
        for index in order:
            node = graph.node(index)
            if node is not None and node.subgraphs and self.recurse(node, ctx, graph_level):
                modified = True
        if _propagate_q_backward(graph, order, self):
            modified = True
        if _propagate_dq_forward(graph, order, self):
            modified = True
        return modified


# ---------------------------------------------------------------------------------------------------- edges
def _node(graph: Graph, index: NodeIndex) -> Node:
    node = graph.node(index)
    assert node is not None
    return node


def _edge_from_input_or_initializer(graph: Graph, node: Node, slot: int) -> _Edge | None:
    """``TryCreateFromInputOrInitializerToNode``: only a value listed as a graph input qualifies (an initializer only
    when the model lists it as an input too, i.e. ``IsInputsIncludingInitializers``)."""
    value = node.inputs[slot] if slot < len(node.inputs) else ""
    if value and value in graph.input_index():
        return _Edge(None, (node.index, slot), value)
    return None


def _edge_to_output(graph: Graph, node: Node, slot: int) -> _Edge | None:
    """``TryCreateFromNodeToOutput``."""
    value = node.outputs[slot] if slot < len(node.outputs) else ""
    if value and graph.is_graph_output(value):
        return _Edge((node.index, slot), None, value)
    return None


def _previous_edge(graph: Graph, node: Node) -> _Edge | None:
    """``GetPreviousEdge``: the edge into input 0 if its source output has no other use."""
    into_0 = [e for e in graph.input_edges(node) if e.dst_slot == 0]
    if not into_0:
        return _edge_from_input_or_initializer(graph, node, 0)
    edge = into_0[0]
    src = _node(graph, edge.src)
    same_output = [e for e in graph.output_edges(src) if e.src_slot == edge.src_slot]
    if graph.is_graph_output(src.outputs[edge.src_slot]) or len(same_output) != 1:
        return None
    return _Edge((edge.src, edge.src_slot), (edge.dst, edge.dst_slot), edge.value)


def _previous_propagation_edge(graph: Graph, edge: _Edge) -> _Edge | None:
    if edge.src is None:
        return None
    src = _node(graph, edge.src[0])
    if not can_propagate(src):
        return None
    return _previous_edge(graph, src)


def _next_edges(graph: Graph, node: Node) -> list[_Edge]:
    """``GetNextEdges``: output-0 edges in edge order, then the graph-output edge."""
    edges = [_Edge((node.index, 0), (e.dst, e.dst_slot), e.value) for e in graph.output_edges(node) if e.src_slot == 0]
    to_output = _edge_to_output(graph, node, 0)
    if to_output is not None:
        edges.append(to_output)
    return edges


def _next_propagation_edges(graph: Graph, edge: _Edge) -> list[_Edge]:
    if edge.dst is None:
        return []
    dst = _node(graph, edge.dst[0])
    if not can_propagate(dst):
        return []
    return _next_edges(graph, dst)


# ---------------------------------------------------------------------------------------------------- insertion
@dataclass(init=False)
class _Attrs:
    """A ``NodeAttributes`` map to give a new node: the protos and the map's iteration state."""

    protos: dict[str, onnx.AttributeProto]
    order: StdUnorderedMap

    def __init__(self, protos: dict[str, onnx.AttributeProto], order: StdUnorderedMap) -> None:
        self.protos, self.order = protos, order

    def add_node(self, graph: Graph, name: str, op_type: str, inputs: list[str], output: str, domain: str) -> None:
        """Add an inserted Q or DQ node with these attributes."""
        graph.add_node(
            name, op_type, inputs, [output], domain=domain, attributes=self.protos, attr_map=self.order, doc_string=DOC
        )


def _copy_attrs(node: Node) -> _Attrs:
    return _Attrs(dict(node.attributes), node.attr_map.copy())


def _dq_attrs_from_q(q: Node) -> _Attrs:
    """``MakeDQAttrsFromQ``: a fresh map with the Q's ``axis`` then ``block_size``."""
    protos: dict[str, onnx.AttributeProto] = {k: q.attributes[k] for k in ("axis", "block_size") if k in q.attributes}
    order = StdUnorderedMap()
    order.update(protos)
    return _Attrs(protos, order)


def _q_attrs_from_dq(graph: Graph, dq: Node) -> _Attrs:
    """``MakeQAttrsFromDQ``: a copy of the DQ's attributes, plus ``output_dtype`` from opset 21 on."""
    attrs = _copy_attrs(dq)
    if dq.domain in ("", "ai.onnx") and dq.since_version is not None and dq.since_version >= 21:
        elem = graph.elem_type(dq.inputs[0])
        if elem is not None:
            attrs.protos["output_dtype"] = onnx.helper.make_attribute("output_dtype", elem)
            attrs.order.insert("output_dtype")
    return attrs


def _insert_qdq_pairs(
    graph: Graph,
    edges: list[_Edge],
    scale: str,
    zero_point: str | None,
    domain: str,
    q_attrs: _Attrs,
    dq_attrs: _Attrs,
) -> None:
    """``InsertQDQPairs``: src -> Q -+-> DQ -> dst_0 ... on edges that all carry the same NodeArg."""
    first = edges[0]
    base = first.arg_name
    src = _node(graph, first.src[0]) if first.src is not None else None
    pre_q = base if first.src is None else graph.new_value(base + "_pre_q")
    q_to_dq = graph.new_value(base + "_q_to_dq")
    q_name = graph.generate_node_name(base + "_q")
    params = [scale] if zero_point is None else [scale, zero_point]
    q_attrs.add_node(graph, q_name, "QuantizeLinear", [pre_q, *params], q_to_dq, domain)
    if src is not None and first.src is not None:
        graph.set_output(src, first.src[1], pre_q)
    for k, edge in enumerate(edges):
        suffix = "" if k == 0 else str(k)
        post_dq = base if edge.dst is None else graph.new_value(base + "_post_dq" + suffix)
        dq_name = graph.generate_node_name(base + "_dq" + suffix)
        dq_attrs.add_node(graph, dq_name, "DequantizeLinear", [q_to_dq, *params], post_dq, domain)
        if edge.dst is not None:
            graph.set_input(_node(graph, edge.dst[0]), edge.dst[1], post_dq)


# ---------------------------------------------------------------------------------------------------- directions
def _scale_and_zero_point(graph: Graph, node: Node) -> tuple[str, str | None] | None:
    ok, zp_exists = has_constant_scalar_scale_and_zp(graph, node)
    if not ok:
        return None
    return node.inputs[SCALE_ID], node.inputs[ZERO_POINT_ID] if zp_exists else None


def _live_candidates(
    graph: Graph, order: list[int], kind: Callable[[Node], bool], transformer: GraphTransformer
) -> Iterator[Node]:
    """The nodes of ``order`` of that kind on a compatible EP, each looked up when reached (an earlier propagation
    may have removed it)."""
    live = graph.live()
    for index in order:
        node = live.get(index)
        if node is not None and kind(node) and transformer.node_is_compatible(node):
            yield node


def _propagate_q_backward(graph: Graph, order: list[int], transformer: GraphTransformer) -> bool:
    modified = False
    for q in _live_candidates(graph, order, is_q, transformer):
        params = _scale_and_zero_point(graph, q)
        if params is None:
            continue
        edge_before_q = _previous_edge(graph, q)
        if edge_before_q is None:
            continue
        current = _previous_propagation_edge(graph, edge_before_q)
        while current is not None:
            if current.src is not None and is_dq(_node(graph, current.src[0])):
                break
            _insert_qdq_pairs(graph, [current], params[0], params[1], q.domain, _copy_attrs(q), _dq_attrs_from_q(q))
            modified = True
            current = _previous_propagation_edge(graph, current)
    return modified


def _has_constant_data_input(graph: Graph, dq: Node) -> bool:
    """ORT #28491: a DQ of a constant initializer (or of a ``Constant`` node's output) is not propagated."""
    data = dq.inputs[0]
    if constant_initializer(graph, data) is not None:
        return True
    producer = graph.producer(data)
    return producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx")


def _propagate_dq_forward(graph: Graph, order: list[int], transformer: GraphTransformer) -> bool:
    modified = False
    for dq in _live_candidates(graph, order, is_dq, transformer):
        if graph.output_edge_count(dq) != 1 or node_produces_graph_output(graph, dq):
            continue
        params = _scale_and_zero_point(graph, dq)
        if params is None or _has_constant_data_input(graph, dq):
            continue
        edges_after_dq = _next_edges(graph, dq)
        if len(edges_after_dq) != 1:
            continue
        groups: deque[list[_Edge]] = deque([_next_propagation_edges(graph, edges_after_dq[0])])
        while groups:
            group = groups.popleft()
            if not group or any(e.dst is not None and is_q(_node(graph, e.dst[0])) for e in group):
                continue
            q_attrs = _q_attrs_from_dq(graph, dq)
            _insert_qdq_pairs(graph, group, params[0], params[1], dq.domain, q_attrs, _copy_attrs(dq))
            modified = True
            for edge in group:
                groups.append(_next_propagation_edges(graph, edge))
    return modified
