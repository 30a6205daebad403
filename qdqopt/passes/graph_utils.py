"""ORT's ``graph_utils`` helpers that the rewrite rules share (``onnxruntime/core/graph/graph_utils.cc``).

Node removal, the heart of the Level1 elimination rules::

    before                                   after RemoveNode(n)
    P ──x──> n ──y──┬──> C1 (slot 0)          P ──x──┬──> C1 (slot 0)
                    └──> If (y used inside)          └──> If (the branch now reads x)

Rules (each function names its ORT counterpart):

* :func:`can_remove_node` (``CanRemoveNode``): only one output of the node is used (by edges, and at most one graph
  output which must be that same output), the node produces no graph output, and it has exactly one input *edge*
  or, without edges, a single input def (an initializer or graph input); the subgraphs that read the removed output
  as an implicit input must not already know the new name.
* :func:`remove_node` (``RemoveNode``): with one input edge, the consumers of the used output are rewired to the
  producer's output (``RemoveNodeWithSingleNodeInSingleUsedOutput``); otherwise the node is replaced by its single
  input (``ReplaceNodeWithInitializer``). Values read inside subgraphs are renamed there
  (``UpdateImplicitInputNameInSubgraph``).
* :func:`finalize_node_fusion` (``FinalizeNodeFusion``): the second node's outputs move to the first node (or to a
  replacement), the fused nodes go.
* Lookups: :func:`constant_initializer` (``GetConstantInitializer``, outer scopes included),
  :func:`is_supported_op` (``IsSupportedOptypeVersionAndDomain``: op, ``since_version`` and domain),
  :func:`input_node` (``GetInputNode``), :func:`first_parent_by_type` / :func:`first_child_by_type`
  (``FirstParentByType`` / ``FirstChildByType``), :func:`output_nodes` (``OutputNodesBegin..End``, one per output
  edge, in ``EdgeEndCompare`` order).

Edges in qdqopt follow the value names, so the ORT helpers' explicit ``AddEdge``/``RemoveEdge`` calls need no
counterpart here: rewiring an input rewires its edge.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.graph import Edge, Graph, Node
from qdqopt.graph.schema import normalize_domain, tensor_type_proto
from qdqopt.graph.stdhash import StdUnorderedMap

__all__ = [
    "EdgeToMatch",
    "add_cast",
    "append_tensor_from_initializer",
    "can_remove_node",
    "can_replace_node_with_initializer",
    "constant_array",
    "constant_initializer",
    "edge_path",
    "finalize_node_fusion",
    "finalize_nodes_fusion",
    "find_path",
    "first_child_by_type",
    "first_parent_by_type",
    "fusable_activation",
    "initializer_map_order",
    "input_edge_count",
    "input_node",
    "is_constant",
    "is_initializer",
    "is_only_one_output_used",
    "is_output_used",
    "is_supported_op",
    "lone_consumer",
    "node_outputs_in_graph_outputs",
    "node_produces_graph_output",
    "output_edge_count",
    "output_nodes",
    "remove_node",
    "remove_node_with_single_node_in_single_used_output",
    "remove_nodes_with_one_output_bottom_up",
    "replace_downstream_node_input",
    "replace_node_with_initializer",
]


# ---------------------------------------------------------------------------------------------------- lookups
def is_supported_op(node: Node, op_type: str, versions: Iterable[int], domain: str = "") -> bool:
    """``IsSupportedOptypeVersionAndDomain``: op type, a resolved (non-deprecated) ``since_version`` in ``versions``
    and the domain."""
    return (
        node.op_type == op_type
        and node.since_version is not None
        and node.since_version in tuple(versions)
        and normalize_domain(node.domain) == normalize_domain(domain)
    )


def add_replacement_node(
    graph: Graph,
    target: Node,
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    domain: str,
    attributes: dict[str, onnx.AttributeProto],
    attr_map: StdUnorderedMap,
) -> Node:
    """The node a ``ReplaceWithNew`` action adds in place of ``target``: its name, doc string and EP."""
    return graph.add_node(
        target.name,
        op_type,
        inputs,
        outputs,
        domain=domain,
        attributes=attributes,
        attr_map=attr_map,
        doc_string=target.doc_string,
        ep=target.ep,
    )


def constant_initializer(
    graph: Graph, name: str, *, check_outer_scope: bool = True
) -> tuple[Graph, onnx.TensorProto] | None:
    """``Graph::GetConstantInitializer``: the owning graph and the tensor, or None (not one, or overridable)."""
    owner = graph.initializer_owner(name, check_outer_scope=check_outer_scope)
    tensor = graph.constant_initializer(name, check_outer_scope=check_outer_scope)
    return None if owner is None or tensor is None else (owner, tensor)


def is_constant(graph: Graph, name: str) -> bool:
    """``graph_utils::NodeArgIsConstant`` / ``IsConstantInitializer`` (outer scopes included)."""
    return constant_initializer(graph, name) is not None


def constant_array(graph: Graph, name: str) -> np.ndarray | None:
    """The value of a constant initializer (``Initializer``), or None."""
    return graph.constant_array(name)


def initializer_map_order(graph: Graph) -> list[str]:
    """Initializer names in ``name_to_initial_tensor_`` iteration order (``GetAllInitializedTensors()``)."""
    return graph.initializer_map_order()


# ------------------------------------------------------------------------------------------------------ edges
def input_edge_count(graph: Graph, node: Node) -> int:
    """``Node::GetInputEdgesCount`` (implicit-input edges included)."""
    return graph.input_edge_count(node)


def output_edge_count(graph: Graph, node: Node) -> int:
    """``Node::GetOutputEdgesCount``."""
    return graph.output_edge_count(node)


def output_nodes(graph: Graph, node: Node) -> list[Node]:
    """``Node::OutputNodesBegin()..End()``: the consumer of each output edge, in ``EdgeEndCompare`` order."""
    out: list[Node] = []
    for edge in graph.output_edges(node):
        consumer = graph.node(edge.dst)
        assert consumer is not None
        out.append(consumer)
    return out


def first_parent_by_type(graph: Graph, node: Node, op_type: str) -> Node | None:
    """``graph_utils::FirstParentByType``: the first producer over the input edges (``EdgeEndCompare`` order)."""
    for edge in graph.input_edges(node):
        parent = graph.node(edge.src)
        if parent is not None and parent.op_type == op_type:
            return parent
    return None


def first_child_by_type(graph: Graph, node: Node, op_type: str) -> Node | None:
    """``graph_utils::FirstChildByType``: the first consumer over the output edges (``EdgeEndCompare`` order)."""
    for edge in graph.output_edges(node):
        child = graph.node(edge.dst)
        if child is not None and child.op_type == op_type:
            return child
    return None


def input_node(graph: Graph, node: Node, arg_index: int) -> Node | None:
    """``graph_utils::GetInputNode``: the producer feeding input ``arg_index`` through an edge, or None."""
    for edge in graph.input_edges(node):
        if edge.dst_slot == arg_index:
            return graph.node(edge.src)
    return None


def is_output_used(graph: Graph, node: Node, index: int) -> bool:
    """``graph_utils::IsOutputUsed``: some output edge leaves output ``index``."""
    return any(edge.src_slot == index for edge in graph.output_edges(node))


def node_produces_graph_output(graph: Graph, node: Node) -> bool:
    """``Graph::NodeProducesGraphOutput``."""
    outputs = graph.output_index()
    for value in node.outputs:  # noqa: SIM110 (a loop: asked of most nodes, and any() over a generator costs more)
        if value and value in outputs:
            return True
    return False


produces_graph_output = node_produces_graph_output


def check_output_edges(graph: Graph, node: Node, expected: int) -> bool:
    """``optimizer_utils::CheckOutputEdges``: no graph output, exactly ``expected`` output edges, and none into a
    subgraph (an edge to an implicit input: ORT will not fuse part of a subgraph's reads)."""
    return _checked_consumers(graph, node, expected) is not None


def _checked_consumers(graph: Graph, node: Node, expected: int) -> list[Node] | None:
    """The consumers of :func:`check_output_edges`'s edges (in ``EdgeEndCompare`` order) when it holds, else None."""
    if node_produces_graph_output(graph, node) or graph.output_edge_count(node) != expected:
        return None
    consumers = []
    for edge in graph.output_edges(node):
        consumer = graph.node(edge.dst)
        if consumer is None or _is_implicit(edge, consumer):
            return None
        consumers.append(consumer)
    return consumers


def lone_consumer(graph: Graph, node: Node) -> Node | None:
    """``GetLoneConsumerNode``: the node that reads ``node`` when :func:`check_output_edges` allows it one output
    edge (``*OutputNodesBegin()``), else None."""
    consumers = _checked_consumers(graph, node, 1)
    return consumers[0] if consumers is not None else None


def node_outputs_in_graph_outputs(graph: Graph, node: Node) -> list[int]:
    """``Graph::GetNodeOutputsInGraphOutputs``: indices of the node's outputs that are graph outputs."""
    return [i for i, value in enumerate(node.outputs) if value and graph.is_graph_output(value)]


def _is_implicit(edge: Edge, consumer: Node) -> bool:
    """``OutputEdgeProvidesImplicitInput``: the edge's slot lies past its consumer's explicit inputs."""
    return edge.dst_slot >= len(consumer.inputs)


# ------------------------------------------------------------------------------------------- node removal
def is_only_one_output_used(graph: Graph, node: Node) -> tuple[bool, str | None]:
    """``IsOnlyOneOutputUsed``: (whether only one output is used, its name)."""
    return _only_one_output_used(graph, node, graph.output_edges(node))


def _only_one_output_used(graph: Graph, node: Node, edges: Sequence[Edge]) -> tuple[bool, str | None]:
    """:func:`is_only_one_output_used` given the node's output edges (which the caller needs too)."""
    first: int | None = None
    name: str | None = None
    for edge in edges:
        if first is None:
            first = edge.src_slot
        elif first != edge.src_slot:
            return False, None
    if first is not None:
        name = node.outputs[first]
    in_outputs = node_outputs_in_graph_outputs(graph, node)
    if len(in_outputs) > 1:
        return False, name
    if len(in_outputs) == 1:
        if first is not None:
            return in_outputs[0] == first, name
        name = node.outputs[in_outputs[0]]
    return True, name


def _can_update_implicit_name(node: Node, removed: str, new: str) -> bool:
    """``CanUpdateImplicitInputNameInSubgraph``."""
    for sub in node.subgraphs.values():
        if sub.has_value(new):
            return False
        for sub_node in sub.nodes():
            if removed in sub_node.implicit_inputs and not _can_update_implicit_name(sub_node, removed, new):
                return False
    return True


def _can_update_implicit_names(graph: Graph, edges: Sequence[Edge], new: str) -> bool:
    """``CanUpdateImplicitInputNameInSubgraphs``."""
    for edge in edges:
        consumer = graph.node(edge.dst)
        assert consumer is not None
        if _is_implicit(edge, consumer) and not _can_update_implicit_name(consumer, edge.value, new):
            return False
    return True


def _update_implicit_name(graph: Graph, node: Node, removed: str, new: str) -> None:
    """``UpdateImplicitInputNameInSubgraph``: rename ``removed`` to ``new`` wherever ``node``'s subgraphs read it."""
    for sub in node.subgraphs.values():
        for sub_node in sub.nodes():
            if removed in sub_node.implicit_inputs:
                _update_implicit_name(sub, sub_node, removed, new)
            for slot, value in enumerate(list(sub_node.inputs)):
                if value and value == removed:
                    sub.set_input(sub_node, slot, new)
        sub.modified = True
    graph.refresh_implicit_inputs(node)


def can_remove_node(graph: Graph, node: Node) -> bool:
    """``graph_utils::CanRemoveNode``."""
    edges = graph.output_edges(node)
    only_one, _ = _only_one_output_used(graph, node, edges)
    if not only_one or node_produces_graph_output(graph, node):
        return False
    in_edges = graph.input_edges(node)
    new_name: str | None = None
    if len(in_edges) == 1:
        slot = in_edges[0].dst_slot
        new_name = node.inputs[slot] if slot < len(node.inputs) else in_edges[0].value
    elif len(node.inputs) == 1:
        new_name = node.inputs[0]
    if new_name is None:
        return False
    return _can_update_implicit_names(graph, edges, new_name)


def remove_node(graph: Graph, node: Node) -> bool:
    """``graph_utils::RemoveNode`` (call only when :func:`can_remove_node` holds)."""
    if input_edge_count(graph, node) == 1:
        return remove_node_with_single_node_in_single_used_output(graph, node)
    if len(node.inputs) == 1:
        return replace_node_with_initializer(graph, node, node.inputs[0])
    raise AssertionError(f"RemoveNode: node {node.name!r} cannot be removed (CanRemoveNode out of sync)")


def remove_node_with_single_node_in_single_used_output(graph: Graph, node: Node) -> bool:
    """``RemoveNodeWithSingleNodeInSingleUsedOutput``: consumers of the used output read the single input edge's
    source instead; the node goes."""
    edges = graph.output_edges(node)
    if edges:
        in_edge = graph.input_edges(node)[0]
        incoming = graph.node(in_edge.src)
        assert incoming is not None
        src_idx = edges[0].src_slot
        if any(e.src_slot != src_idx for e in edges):
            raise AssertionError("Node must only have one used output")
        replace_downstream_node_input(graph, node, src_idx, incoming, in_edge.src_slot)
    graph.remove_node(node)
    return True


def _redirect_consumer(graph: Graph, edge: Edge, new_name: str) -> None:
    """The consumer at the end of ``edge`` reads ``new_name`` instead (an implicit input of a subgraph renamed)."""
    consumer = graph.node(edge.dst)
    assert consumer is not None
    if _is_implicit(edge, consumer):
        _update_implicit_name(graph, consumer, edge.value, new_name)
    else:
        graph.set_input(consumer, edge.dst_slot, new_name)


def replace_downstream_node_input(
    graph: Graph, node: Node, output_idx: int, replacement: Node, replacement_output_idx: int
) -> None:
    """``ReplaceDownstreamNodeInput``: every consumer of ``node``'s output ``output_idx`` reads ``replacement``'s
    output ``replacement_output_idx`` instead (inside subgraphs too)."""
    new_name = replacement.outputs[replacement_output_idx]
    for edge in [e for e in graph.output_edges(node) if e.src_slot == output_idx]:
        _redirect_consumer(graph, edge, new_name)


def can_replace_node_with_initializer(graph: Graph, node: Node, initializer_name: str) -> bool:
    """``graph_utils::CanReplaceNodeWithInitializer``."""
    edges = graph.output_edges(node)
    only_one, output_name = _only_one_output_used(graph, node, edges)
    if not only_one or output_name is None:
        return False
    changing = output_name != initializer_name
    n_graph_outputs = len(node_outputs_in_graph_outputs(graph, node))
    if n_graph_outputs > 0 and (n_graph_outputs > 1 or changing):
        return False
    if changing:
        return _can_update_implicit_names(graph, edges, initializer_name)
    return True


def replace_node_with_initializer(graph: Graph, node: Node, replacement: str) -> bool:
    """``graph_utils::ReplaceNodeWithInitializer``: the node goes, its consumers read ``replacement``."""
    edges = graph.output_edges(node)
    graph.remove_node(node)
    for edge in edges:
        _redirect_consumer(graph, edge, replacement)
    return True


def remove_nodes_with_one_output_bottom_up(graph: Graph, start: Node) -> bool:
    """``RemoveNodesWithOneOutputBottomUp``: remove ``start`` (if it has at most one output edge and no graph
    output), then, breadth first, every ancestor left with no output edge; initializers and graph inputs stop it."""
    queue: collections.deque[int] = collections.deque([start.index])
    removed: set[int] = set()
    graph_inputs = set(graph.graph_input_names())
    while queue:
        index = queue.popleft()
        if index in removed:
            continue
        current = graph.node(index)
        assert current is not None
        if output_edge_count(graph, current) > 1 or node_produces_graph_output(graph, current):
            continue
        for slot, name in enumerate(current.inputs):
            if _is_initializer(graph, name) or name in graph_inputs:
                continue
            parent = input_node(graph, current, slot)
            if parent is not None:
                queue.append(parent.index)
        if index == start.index or output_edge_count(graph, current) == 0:
            graph.remove_node(current)
            removed.add(index)
    return bool(removed)


def _is_initializer(graph: Graph, name: str) -> bool:
    """``graph_utils::IsInitializer(graph, name, check_outer_scope=true)``."""
    if not name:
        return False
    if graph.is_initializer(name):
        return True
    return graph.parent is not None and not graph.defines(name) and _is_initializer(graph.parent, name)


def is_initializer(graph: Graph, name: str) -> bool:
    """``graph_utils::IsInitializer(graph, name, check_outer_scope=true)`` (constant or not)."""
    return _is_initializer(graph, name)


def append_tensor_from_initializer(graph: Graph, name: str, data: list[int]) -> bool:
    """``optimizer_utils::AppendTensorFromInitializer(require_constant=true)``: append the values of an int64 or
    int32 constant initializer of this graph to ``data``; False (nothing appended) otherwise."""
    if constant_initializer(graph, name) is None or not graph.is_initializer(name):
        return False
    tensor = graph.initializer(name)
    assert tensor is not None
    if tensor.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
        return False
    data.extend(int(v) for v in graph.array(name).reshape(-1))
    return True


@dataclass(frozen=True, init=False)
class EdgeToMatch:
    """``graph_utils::EdgeEndToMatch``: an edge's slots and the op at its other end."""

    src_arg_index: int
    dst_arg_index: int
    op_type: str
    versions: tuple[int, ...]
    domain: str = ""

    def __init__(
        self, src_arg_index: int, dst_arg_index: int, op_type: str, versions: tuple[int, ...], domain: str = ""
    ) -> None:
        object.__setattr__(self, "src_arg_index", src_arg_index)
        object.__setattr__(self, "dst_arg_index", dst_arg_index)
        object.__setattr__(self, "op_type", op_type)
        object.__setattr__(self, "versions", versions)
        object.__setattr__(self, "domain", domain)


def edge_path(*steps: tuple[str, tuple[int, ...]]) -> tuple[EdgeToMatch, ...]:
    """The :class:`EdgeToMatch` chain of a :func:`find_path`, written one ``(op, versions)`` step after the other.

    ``op`` is ``Type[:o][@i]``: the ONNX op type at the edge's other end, then ``:o`` when the edge leaves output
    ``o`` of its producer (``src_arg_index``) and ``@i`` when it enters input ``i`` of its consumer
    (``dst_arg_index``), each 0 when left out:
    ``edge_path(("Transpose@1", (1, 13)), ("Reshape", (5, 13)), ("Split:2", (2, 11, 13)))``.
    """
    edges: list[EdgeToMatch] = []
    for step, versions in steps:
        op, _, dst = step.partition("@")
        op_type, _, src = op.partition(":")
        edges.append(EdgeToMatch(int(src or 0), int(dst or 0), op_type, versions))
    return tuple(edges)


def find_path(graph: Graph, node: Node, is_input_edge: bool, edges: Sequence[EdgeToMatch]) -> list[Node] | None:
    """``graph_utils::FindPath``: follow input (or output) edges matching ``edges`` one after the other; the nodes
    met, or None. More than one matching output edge at a step is a failure."""
    current = node
    found_nodes: list[Node] = []
    for want in edges:
        found: Node | None = None
        candidates = graph.input_edges(current) if is_input_edge else graph.output_edges(current)
        for edge in candidates:
            other = graph.node(edge.src if is_input_edge else edge.dst)
            assert other is not None
            if (
                want.dst_arg_index == edge.dst_slot
                and want.src_arg_index == edge.src_slot
                and want.op_type == other.op_type
                and other.since_version in want.versions
                and normalize_domain(other.domain) == normalize_domain(want.domain)
            ):
                if found is not None:
                    return None
                found = other
                if is_input_edge:
                    break
        if found is None:
            return None
        found_nodes.append(found)
        current = found
    return found_nodes


# ------------------------------------------------------------------------------------------------- fusions
def _move_outputs(graph: Graph, target: Node, outputs: Sequence[str]) -> None:
    if len(outputs) != len(target.outputs):
        raise NotImplementedError(
            f"moving {len(outputs)} outputs onto node {target.name!r} with {len(target.outputs)} output slots"
        )
    for slot, value in enumerate(outputs):
        graph.set_output(target, slot, value)


def finalize_node_fusion(graph: Graph, first: Node, second: Node, *, n_outputs: int | None = None) -> None:
    """``FinalizeNodeFusion(graph, first, second)``: ``second``'s outputs move to ``first``; ``second`` goes.

    ``n_outputs`` keeps only that many of ``second``'s outputs (ORT's ``MutableOutputDefs().resize(n)`` before the
    fusion, for a BatchNormalization whose optional outputs are absent).
    """
    outputs = list(second.outputs)[:n_outputs] if n_outputs is not None else list(second.outputs)
    graph.remove_node(second)
    _move_outputs(graph, first, outputs)


def finalize_nodes_fusion(graph: Graph, nodes: Sequence[Node], replacement: Node) -> None:
    """``FinalizeNodeFusion(graph, nodes, replacement)``: the last node's outputs move to ``replacement`` (which
    must already have that many output slots); every node of ``nodes`` goes."""
    outputs = list(nodes[-1].outputs)
    for node in nodes:
        if graph.node(node.index) is not None:
            graph.remove_node(node)
    _move_outputs(graph, replacement, outputs)


def fusable_activation(graph: Graph, node: Node, is_fusable: Callable[[Node], bool]) -> Node | None:
    """The activation a ``node -> activation`` fusion (GemmActivationFusion, MatMulActivationFusion) takes: the
    consumer of ``node``'s one output edge, if ``is_fusable`` (the pass's ``IsFusableActivation``) accepts it, it is
    on ``node``'s EP and ``node`` produces no graph output; else None."""
    if graph.output_edge_count(node) != 1:
        return None
    act = output_nodes(graph, node)[0]
    if not is_fusable(act) or act.ep != node.ep or node_produces_graph_output(graph, node):
        return None
    return act


def fuse_with_activation(graph: Graph, node: Node, act: Node, *, name: str, op_type: str, doc_string: str) -> Node:
    """``node`` followed by activation ``act`` become one com.microsoft ``op_type`` (FusedGemm,
    FusedMatMulActivation): ``node``'s inputs, attributes (map order kept) and EP, ``act``'s outputs, an
    ``activation`` attribute naming the activation's op and each of its attributes again as ``activation_<name>``."""
    fused = graph.add_node(
        name,
        op_type,
        list(node.inputs),
        list(act.outputs),
        domain="com.microsoft",
        attributes=dict(node.attributes),
        attr_map=node.attr_map,
        doc_string=doc_string,
        ep=node.ep,
    )
    graph.set_attribute(fused, onnx.helper.make_attribute("activation", act.op_type))
    for key in act.attribute_order():
        renamed = copy.deepcopy(act.attributes[key])
        renamed.name = "activation_" + key
        graph.set_attribute(fused, renamed)
    for old in (node, act):
        graph.remove_node(old)
    return fused


def add_node_like(
    graph: Graph, node: Node, name: str, inputs: list[str], outputs: list[str], *, doc_string: str, ep: str = ""
) -> Node:
    """A new node doing what ``node`` does (op, domain, attributes in their map order) between other values."""
    return graph.add_node(
        name,
        node.op_type,
        inputs,
        outputs,
        domain=node.domain,
        attributes=dict(node.attributes),
        attr_map=node.attr_map,
        doc_string=doc_string,
        ep=ep,
    )


def add_cast(
    graph: Graph,
    value: str,
    to: int,
    dims: Sequence[int | str | None],
    output_base: str,
    node_base: str,
    doc_string: str,
    ep: str,
) -> str:
    """A new Cast of ``value`` to element type ``to``, as the transformer fusions add one before a fused node's
    input (``CastMaskToInt32``, EmbedLayerNormFusion's ``CastToInt32``, SkipLayerNormFusion's ``CastToFloat``):
    the output ``GenerateNodeArgName(output_base)`` typed ``to`` with ``dims``, the node
    ``GenerateNodeName(node_base)`` with attribute ``to`` on ``ep``. Returns the new value."""
    out = graph.generate_value_name(output_base)
    graph.set_value_type(out, tensor_type_proto(to, list(dims)))
    graph.add_node(
        graph.generate_node_name(node_base),
        "Cast",
        [value],
        [out],
        attributes={"to": onnx.helper.make_attribute("to", to)},
        doc_string=doc_string,
        ep=ep,
    )
    return out
