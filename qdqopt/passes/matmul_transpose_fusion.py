"""MatmulTransposeFusion: Transposes of MatMul inputs become FusedMatMul ``trans*`` (``matmul_transpose_fusion.cc``).

ORT registers it at Level2 for the CPU, CUDA and DML EPs::

    a ─> Transpose(perm=[0,2,1]) ─┐                        a ─┐
                                  MatMul ─> y      =>          com.microsoft.FusedMatMul(transA=1, transB=0,
    b ────────────────────────────┘                        b ─┘   transBatchA=0, transBatchB=0, alpha=1) ─> y
                                                                  ("<matmul>/MatmulTransposeFusion/")

    a ─> Transpose ─> Cast ─> MatMul     =>     a ─> Cast ─> Transpose ─> MatMul     (then fused as above)

Rules (ORT 1.32):

* every graph, each node's subgraphs first; nodes in one topological snapshot; the node is a MatMul (ONNX 9, 13) or
  a com.microsoft FusedMatMul (1) on a compatible EP whose two input NodeArgs are float or double tensors (CPU) and
  are not the same NodeArg;
* ORT's producer/consumer lookups are those of the last Resolve: a node the pass adds is never found as a producer,
  a node it removes is found as none; qdqopt snapshots them when the pass starts on a graph;
* per side (A, then B; a FusedMatMul side with ``transBatch*`` = 1 is skipped): the input's producer is a Transpose
  producing no graph output, whose perm (the ``perm`` attribute, else the input's dims reversed, else no fusion) has
  rank >= 2 and keeps the input's last axis within its last two dims; for rank >= 3, ``perm[0]`` is 0 or 1 and
  ``perm[0..rank-3]`` count up by one. ``trans`` = the last axis lands in dim rank-2, ``transBatch`` = rank >= 3 and
  ``perm[0] == 1``;
* otherwise, if the producer is a Cast producing no graph output (``ReorderCastAndTranspose``; the graph-output
  check is ORT 1.32's, observed, not in the 1.30 source): if the Cast's input comes from such a
  Transpose, a new Cast ``GenerateNodeName(<cast> + "/MatmulTransposeFusion/")`` (the Cast's attributes and EP, doc
  "Created a new Cast node to interchange Cast and Transpose nodes") reads the Transpose's input and writes
  ``<cast output> + "/MatmulTransposeFusion/"`` (the Transpose input's type with the Cast output's element type);
  a new Transpose ``GenerateNodeName(<transpose> + "_transformed")`` (the Transpose's attributes and EP, doc
  "Created a new Transpose node to interchange Cast and Transpose nodes") reads it and writes the Cast's output; the
  Cast goes; the old Transpose is counted as one consumer fewer; the new Transpose is the side's Transpose;
* if a side has ``transBatch``, both inputs need known shapes of the same rank, else each ``transBatch`` side is
  dropped; a Cast/Transpose swap already made stays, and the pass reports no change (so no Resolve) unless it fuses
  elsewhere: qdqopt does the same (the saved model and the log agree with ORT's; a later pass that would read
  ORT's stale lookups for the swapped values is not modelled);
* for each fused side, ``UpdateConsumerCount``: the first time a NodeArg is counted its consumers at the last
  Resolve minus one, then one less each time; at 0 its Transpose is queued for removal (after the loop, last queued
  first); the fused node reads the Transpose's input;
* the new node: ``GenerateNodeName(<name> + "/MatmulTransposeFusion/")``, com.microsoft FusedMatMul, doc "fused MatMul
  and Transpose " (sic), the node's EP, attributes ``transA, transB, transBatchA, transBatchB, alpha`` in that
  order: the found flags, XORed with the FusedMatMul's own, and its ``alpha`` (else 1.0); it takes the node's output,
  the node goes.

The fused node's output shape comes from ORT's ``FusedMatMulShapeInference`` (:mod:`qdqopt.graph.contrib`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import add_node_like, is_supported_op, node_produces_graph_output

__all__ = ["MatmulTransposeFusion"]

TP = onnx.TensorProto
_CPU_TYPES = (TP.FLOAT, TP.DOUBLE)
_OTHER_TYPES = (TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BFLOAT16)
SUFFIX = "/MatmulTransposeFusion/"


@dataclass
class _State:
    """One ``ApplyImpl`` call on one graph: the lookups of the last Resolve and the pass's own bookkeeping."""

    graph: Graph
    producers: dict[str, int]
    consumers: dict[str, int]
    consumer_count: dict[str, int] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)  # a deque filled with push_front

    def producer(self, value: str) -> Node | None:
        """``GetMutableProducerNode``: from the last Resolve's lookup; a node removed since is none."""
        index = self.producers.get(value)
        return None if index is None else self.graph.node(index)

    def update_consumer_count(self, value: str) -> int:
        """``UpdateConsumerCount``."""
        if value not in self.consumer_count:
            total = self.consumers.get(value, 0)
            assert total > 0, f"MatmulTransposeFusion: {value!r} has no consumer"
            self.consumer_count[value] = total - 1
        else:
            self.consumer_count[value] -= 1
        return self.consumer_count[value]


def _snapshot(graph: Graph) -> tuple[dict[str, int], dict[str, int]]:
    producers: dict[str, int] = {}
    consumers: dict[str, int] = {}
    for node in graph.nodes():
        for value in node.outputs:
            if value:
                producers.setdefault(value, node.index)
        if node.op_type in ("Transpose", "Cast"):
            for value in node.outputs:
                if value:
                    consumers[value] = len(graph.consumers(value))
    return producers, consumers


def _perms(graph: Graph, node: Node) -> list[int] | None:
    """``GetTransposePerms``."""
    if "perm" in node.attributes:
        return [int(p) for p in node.attributes["perm"].ints]
    shape = graph.shape(node.inputs[0])
    if shape is None:
        return None
    return list(range(len(shape)))[::-1]


@dataclass(frozen=True)
class _Side:
    transpose: Node
    trans: bool
    trans_batch: bool


def _transpose_from_output(state: _State, value: str) -> _Side | None:
    """``GetTransposeNodeFromOutput``."""
    node = state.producer(value)
    if node is None or node.op_type != "Transpose" or node_produces_graph_output(state.graph, node):
        return None
    perms = _perms(state.graph, node)
    if perms is None:
        return None
    rank = len(perms)
    if rank < 2:
        return None
    last_axis = rank - 1
    if perms[rank - 1] == last_axis:
        last_index = rank - 1
    elif perms[rank - 2] == last_axis:
        last_index = rank - 2
    else:
        return None
    if rank >= 3:
        if perms[0] not in (0, 1):
            return None
        for i in range(rank - 3):
            if perms[i] + 1 != perms[i + 1]:
                return None
    return _Side(node, last_index == rank - 2, rank >= 3 and perms[0] == 1)


def _reorder_cast_and_transpose(state: _State, cast: Node) -> _Side | None:
    """``ReorderCastAndTranspose``: swap Transpose -> Cast into Cast -> Transpose; the new Transpose's side."""
    graph = state.graph
    if node_produces_graph_output(graph, cast):  # 1.32 (not in the 1.30 source): such a Cast stays
        return None
    found = _transpose_from_output(state, cast.inputs[0])
    if found is None:
        return None
    transpose = found.transpose
    cast_output = cast.outputs[0]
    transpose_input = transpose.inputs[0]

    new_output = cast_output + SUFFIX
    if not graph.has_value(new_output):  # GetOrCreateNodeArg keeps an existing arg's type
        base = graph.type_proto(transpose_input)
        new_type = onnx.TypeProto()
        if base is not None:
            new_type.CopyFrom(base)
        out_type = graph.type_proto(cast_output)
        assert out_type is not None
        new_type.tensor_type.elem_type = out_type.tensor_type.elem_type
        graph.set_value_type(new_output, new_type)

    _add_copy(graph, cast, cast.name + SUFFIX, [transpose_input], [new_output], "Cast")
    new_name = transpose.name + "_transformed"
    new_transpose = _add_copy(graph, transpose, new_name, [new_output], [cast_output], "Transpose")
    consumers = state.update_consumer_count(transpose.outputs[0])
    graph.remove_node(cast)
    if consumers == 0:
        state.removed.insert(0, transpose.index)
    return _Side(new_transpose, found.trans, found.trans_batch)


def _add_copy(graph: Graph, node: Node, name_base: str, inputs: list[str], outputs: list[str], what: str) -> Node:
    """A new node doing what ``node`` does (op, domain, attributes, EP) between other values, named after
    ``name_base`` (``GenerateNodeName``)."""
    return add_node_like(
        graph,
        node,
        graph.generate_node_name(name_base),
        inputs,
        outputs,
        doc_string=f"Created a new {what} node to interchange Cast and Transpose nodes",
        ep=node.ep,
    )


def _allowed(elem: int | None, ep: str) -> bool:
    """``IsAllowedFusedMatMulDataType``."""
    return elem in (_CPU_TYPES if ep == "CPUExecutionProvider" else _OTHER_TYPES)


def _is_candidate(graph: Graph, node: Node, compatible: tuple[str, ...]) -> bool:
    if not (
        is_supported_op(node, "MatMul", (9, 13)) or is_supported_op(node, "FusedMatMul", (1,), "com.microsoft")
    ) or (node.ep not in compatible):
        return False
    if len(node.inputs) < 2:
        return False
    if not all(_allowed(graph.elem_type(v), node.ep) for v in node.inputs[:2]):
        return False
    return node.inputs[0] != node.inputs[1]


def _side_skipped(node: Node, attr: str) -> bool:
    return node.op_type == "FusedMatMul" and node.attr_int(attr, 0) != 0


def _same_rank(graph: Graph, a: str, b: str) -> bool:
    sa, sb = graph.shape(a), graph.shape(b)
    return sa is not None and sb is not None and len(sa) == len(sb)


class MatmulTransposeFusion(GraphTransformer):
    """Fold Transposes of the last two (or the batch) dims into a FusedMatMul."""

    name = "MatmulTransposeFusion"
    compatible_eps = ("CPUExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        producers, consumers = _snapshot(graph)
        state = _State(graph, producers, consumers)
        modified = self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._process(state, node), ops=("MatMul", "FusedMatMul")
        )
        for index in state.removed:
            dead = graph.node(index)
            if dead is not None:
                assert not graph.output_edges(dead), f"MatmulTransposeFusion: {dead.name!r} still has output edges"
                graph.remove_node(dead)
        return modified

    def _side(self, state: _State, node: Node, slot: int, attr: str) -> _Side | None:
        if _side_skipped(node, attr):
            return None
        value = node.inputs[slot]
        found = _transpose_from_output(state, value)
        if found is None:
            producer = state.producer(value)
            if producer is not None and producer.op_type == "Cast":
                found = _reorder_cast_and_transpose(state, producer)
        return found

    def _process(self, state: _State, node: Node) -> bool:
        graph = state.graph
        if not _is_candidate(graph, node, self.compatible_eps):
            return False
        left_input, right_input = node.inputs[0], node.inputs[1]
        left = self._side(state, node, 0, "transBatchA")
        right = self._side(state, node, 1, "transBatchB")
        if ((left is not None and left.trans_batch) or (right is not None and right.trans_batch)) and not _same_rank(
            graph, left_input, right_input
        ):
            if left is not None and left.trans_batch:
                left = None
            if right is not None and right.trans_batch:
                right = None
        if left is None and right is None:
            return False

        trans_a = trans_batch_a = trans_b = trans_batch_b = False
        if left is not None:
            if state.update_consumer_count(left_input) == 0:
                state.removed.insert(0, left.transpose.index)
            left_input = left.transpose.inputs[0]
            trans_a, trans_batch_a = left.trans, left.trans_batch
        if right is not None:
            if state.update_consumer_count(right_input) == 0:
                state.removed.insert(0, right.transpose.index)
            right_input = right.transpose.inputs[0]
            trans_b, trans_batch_b = right.trans, right.trans_batch

        alpha = 1.0
        if node.op_type == "FusedMatMul":
            trans_a ^= bool(node.attr_int("transA", 0))
            trans_b ^= bool(node.attr_int("transB", 0))
            trans_batch_a ^= bool(node.attr_int("transBatchA", 0))
            trans_batch_b ^= bool(node.attr_int("transBatchB", 0))
            alpha = node.attr_float("alpha", 1.0)
        make = onnx.helper.make_attribute
        attributes = {
            "transA": make("transA", int(trans_a)),
            "transB": make("transB", int(trans_b)),
            "transBatchA": make("transBatchA", int(trans_batch_a)),
            "transBatchB": make("transBatchB", int(trans_batch_b)),
            "alpha": make("alpha", alpha),
        }
        fused = graph.add_node(
            graph.generate_node_name(node.name + SUFFIX),
            "FusedMatMul",
            [left_input, right_input],
            [node.outputs[0]],
            domain="com.microsoft",
            attributes=attributes,
            doc_string="fused MatMul and Transpose ",
            ep=node.ep,
        )
        assert fused.outputs == node.outputs[:1]
        graph.remove_node(node)  # FinalizeNodeFusion: the output (and its edges) moved to the new node
        return True
