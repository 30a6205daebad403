"""InsertCastTransformer ("CastFloat16Transformer") and RemoveDuplicateCastTransformer (spec insert_cast.md §3-§5).

ORT builds ``InsertCastTransformer`` directly in ``TransformGraph``: it runs in every optimization-loop iteration,
after Level3 and before Level4, at every level (ORT_DISABLE_ALL included), and ``disabled_optimizers`` cannot reach
it. On x86 most fp16 ops have no CPU kernel, so the partitioner leaves them unassigned; this pass runs them in fp32
on the CPU, between Casts, then lets the remover cancel the Cast pairs between neighbours::

    before (Add, Mul: no fp16 CPU kernel)      after
    x(fp16) ── Add ── a ── Mul ── y(fp16)      x ── Cast(to=1) ── Add ── Mul ── Cast(to=10) ── y
               w(fp16 init) ─┘                 w ── Cast(to=1) ───┘
                                               (the Cast(to=10)/Cast(to=1) pair on ``a`` was inserted, then removed)

InsertCastTransformer, per graph (the main graph at level 0, each subgraph when its node is reached), on the NodeArg
types the last Resolve left (a value an earlier pass created untyped, as QDQS8ToU8Transformer's uint8 Q output and
zero point, is typed first by the partitioner's inference, as ORT's Resolve after that pass typed it):

1. **Isolated fp16 nodes** (``ForceSingleNodeCPUFloat16ToFloat32``), in node-index order, each decision seeing the
   earlier ones: a CPU node is un-assigned (EP ``""``) when it has an input edge, no subgraph, no graph output, at
   least one fp16 input (only the first present arg of each formal is looked at) whose edges all come from nodes that
   need casts (EP ``""`` with an fp16 input), at least one fp16 output whose edges all go to such nodes, and an fp32
   CPU kernel for the types with fp16 replaced by float.
2. **Casts**, over a topological snapshot: a node with EP ``""``, no subgraph and an fp16 explicit input gets a
   ``Cast(to=FLOAT)`` per distinct fp16 arg (one per arg per graph, shared by all its consumers), goes to the CPU, has
   ``dtype=FLOAT16`` rewritten to FLOAT, and each fp16 output is renamed to a new fp32 arg read by a
   ``Cast(to=FLOAT16)`` that writes the original name. A Cast is named
   ``GenerateNodeName("InsertedPrecisionFreeCast_" + arg)``, its new arg takes that very name (an existing tensor of
   that name is ORT's "Duplicate definition" error), its doc_string is "cast node to cast from float16 to float32 on
   cpu" in both directions. Subgraphs are processed when their node is reached, with their own names and counter.
3. At level 0: Resolve if anything changed, then ``RemoveDuplicateCastTransformer::Apply`` with the *same* modified
   flag: its log line comes first and both lines print that shared flag.

RemoveDuplicateCastTransformer, over every ``Cast`` in node-index order (then each node's subgraphs): a Cast child
that casts back to the first Cast's input type (and is no graph output) is removed, its consumers reading the first
Cast's input; if all consumers were Casts and the first Cast is no graph output, it goes too (its kept children read
its input, the orphaned arg takes the input's type). ``UnsafeCast`` keeps precision-losing chains, except for Casts
named ``InsertedPrecisionFreeCast_*``, which count as lossless.
"""

from __future__ import annotations

import enum

import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.graph.inference import infer_types, root_of
from qdqopt.kernels import CPU, cpu_kernel_for_types, input_arg_counts, node_schema, type_string
from qdqopt.passes.base import GraphTransformer, PassContext

__all__ = ["InsertCastTransformer", "RemoveDuplicateCastTransformer"]

PREFIX = "InsertedPrecisionFreeCast_"
DOC = "cast node to cast from float16 to float32 on cpu"
FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16
FLOAT_TENSOR = "tensor(float)"
_FLOAT_TYPE = onnx.helper.make_tensor_type_proto(FLOAT, None)


def _is_fp16(graph: Graph, value: str) -> bool:
    """``IsMLFloat16Tensor``: a typed fp16 tensor (a missing optional arg has no type)."""
    if not value:
        return False
    found = graph.value_type(value)
    return found is not None and found.HasField("tensor_type") and found.tensor_type.elem_type == FLOAT16


def _needs_input_cast_to_fp32(graph: Graph, node: Node) -> bool:
    """``NodeNeedsInputCastToFp32``: unassigned, with an fp16 explicit input."""
    return not node.ep and any(_is_fp16(graph, value) for value in node.inputs)


def _produces_graph_output(graph: Graph, node: Node) -> bool:
    return any(value and graph.is_graph_output(value) for value in node.outputs)


def _bind(graph: Graph, value: str, type_str: str, types: dict[str, str], fp16_slots: set[int], slot: int) -> bool:
    """Bind a type constraint for the fp32 kernel lookup: an fp16 value binds float (and ``slot`` joins
    ``fp16_slots``), another value its own type; False when the value's type is unknown."""
    if _is_fp16(graph, value):
        types[type_str] = FLOAT_TENSOR
        fp16_slots.add(slot)
        return True
    known = type_string(graph.value_type(value))
    if known is None:
        return False
    types[type_str] = known
    return True


def _is_isolated_fp16_node_on_cpu(graph: Graph, node: Node) -> bool:
    """``IsIsolatedFp16NodeOnCpu``: a CPU fp16 node whose fp16 neighbours all need casts and that has an fp32 kernel."""
    if not graph.input_edge_count(node) or node.subgraphs or _produces_graph_output(graph, node) or node.ep != CPU:
        return False
    if not any(_is_fp16(graph, value) for value in node.inputs):
        return False  # (no fp16 input to bind below: the kernel lookup is not needed)
    schema = node_schema(node)
    if schema is None:
        return False
    types: dict[str, str] = {}
    fp16_inputs: set[int] = set()
    counts = input_arg_counts(schema, len(node.inputs))
    start = 0
    for formal, count in zip(schema.inputs, counts, strict=False):
        if formal.type_str in schema.constraint_names:
            for index in range(start, start + count):
                value = node.inputs[index]
                if not value:
                    continue
                if not _bind(graph, value, formal.type_str, types, fp16_inputs, index):
                    return False
                break  # only the first present arg of a formal
        start += count
    if not fp16_inputs:
        return False
    for edge in graph.input_edges(node):
        if edge.dst_slot in fp16_inputs and not _needs_input_cast_to_fp32(graph, _live(graph, edge.src)):
            return False
    fp16_outputs: set[int] = set()
    for slot, formal in enumerate(schema.outputs[: len(node.outputs)]):
        value = node.outputs[slot]
        if formal.type_str not in schema.constraint_names or not value:
            continue
        if not _bind(graph, value, formal.type_str, types, fp16_outputs, slot):
            return False
    if not fp16_outputs:
        return False
    for edge in graph.output_edges(node):
        if edge.src_slot in fp16_outputs and not _needs_input_cast_to_fp32(graph, _live(graph, edge.dst)):
            return False
    return cpu_kernel_for_types(node.domain, node.op_type, schema.since_version, types)


def _live(graph: Graph, index: int) -> Node:
    node = graph.node(index)
    assert node is not None
    return node


class InsertCastTransformer(GraphTransformer):
    """Run fp16 nodes that have no CPU kernel in fp32 on the CPU, between Casts."""

    name = "CastFloat16Transformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        """``InsertCastTransformer::ApplyImpl``: casts, then (at level 0) the remover, with one shared flag."""
        modified = self._apply_graph(graph, graph_level)
        if graph_level == 0:
            if modified:
                graph.resolve()
            modified = RemoveDuplicateCastTransformer().apply_shared(graph, ctx, modified)
        return modified

    def insert_casts(self, graph: Graph, ctx: PassContext) -> bool:
        """The main-graph part of ``ApplyImpl`` before the remover runs: casts everywhere, then Resolve if changed."""
        modified = self._apply_graph(graph, 0)
        if modified:
            graph.resolve()
        return modified

    def _apply_graph(self, graph: Graph, graph_level: int) -> bool:
        if graph_level == 0 and _has_untyped_value(graph):
            # every pass that modified the graph was followed by a Resolve, which typed the NodeArgs it created
            # (QDQS8ToU8Transformer's uint8 Q output and zero point, ...): InsertCast reads those types
            infer_types(root_of(graph))
        # force_cpu_fp32_ is true: the session passes its CPU kernel registry.
        for node in graph.nodes():
            if _is_isolated_fp16_node_on_cpu(graph, node):
                node.ep = ""
        modified = False
        input_def_updates: dict[str, str] = {}  # original fp16 arg -> output of its Cast(to=FLOAT)
        for node in graph.topological_order():
            replacement: dict[str, str] = {}
            casted = False
            for value in list(node.inputs):
                if not node.ep and not node.subgraphs and _is_fp16(graph, value):  # NeedInsertCast
                    if value not in input_def_updates:
                        input_def_updates[value] = _add_cast_node(graph, value, new_on_input=False, to=FLOAT)
                    replacement[value] = input_def_updates[value]
                    casted = True
            if casted:
                node.ep = CPU
                _rewrite_dtype(graph, node)
                for value in list(node.outputs):
                    if _is_fp16(graph, value):
                        replacement[value] = _add_cast_node(graph, value, new_on_input=True, to=FLOAT16)
                _replace_defs(graph, node, replacement)
                modified = True
            for sub in node.subgraphs.values():
                if self._apply_graph(sub, graph_level + 1):
                    modified = True
        return modified


def _has_untyped_value(graph: Graph) -> bool:
    """A value some node reads or writes (here or in a subgraph) that has no type yet: one a pass created since the
    partitioner's Resolve, which ORT's next Resolve typed."""
    for node in graph.nodes():
        if any(value and graph.value_type(value) is None for value in (*node.inputs, *node.outputs)):
            return True
        if any(_has_untyped_value(sub) for sub in node.subgraphs.values()):
            return True
    return False


def _add_cast_node(graph: Graph, old: str, *, new_on_input: bool, to: int) -> str:
    """``AddCastNode``: a CPU Cast between ``old`` and a new fp32 arg named like the node; returns the new arg."""
    name = graph.generate_node_name(PREFIX + old)
    if graph.producer(name) is not None or graph.is_initializer(name) or name in graph.input_index():
        raise ModelError(
            f"Duplicate definition of name ({name}): InsertCastTransformer names a new tensor after its Cast node, "
            "and the model already has a tensor of that name"
        )
    if not graph.has_value(name):  # GetOrCreateNodeArg keeps an existing arg's type
        graph.set_value_type(name, _FLOAT_TYPE)
    inputs, outputs = ([name], [old]) if new_on_input else ([old], [name])
    graph.add_node(
        name,
        "Cast",
        inputs,
        outputs,
        attributes={"to": onnx.helper.make_attribute("to", to)},
        doc_string=DOC,
        ep=CPU,
    )
    return name


def _rewrite_dtype(graph: Graph, node: Node) -> None:
    """A ``dtype`` attribute (EyeLike, RandomNormalLike...) of FLOAT16 becomes FLOAT."""
    attr = node.attributes.get("dtype")
    if attr is None:
        return
    if not attr.HasField("i"):
        raise ModelError(
            f"node {node.name!r} ({node.op_type}): InsertCastTransformer works on the assumption that `dtype` "
            "attribute holds an integer"
        )
    if attr.i == FLOAT16:
        updated = onnx.AttributeProto()
        updated.CopyFrom(attr)
        updated.i = FLOAT
        graph.set_attribute(node, updated)


def _replace_defs(graph: Graph, node: Node, replacement: dict[str, str]) -> None:
    """``Node::ReplaceDefs``: explicit inputs, then outputs."""
    for slot, value in enumerate(list(node.inputs)):
        if value in replacement:
            graph.set_input(node, slot, replacement[value])
    for slot, value in enumerate(list(node.outputs)):
        if value in replacement:
            graph.set_output(node, slot, replacement[value])


# -------------------------------------------------------------------------------------- RemoveDuplicateCastTransformer
class _Group(enum.IntEnum):
    UNKNOWN = -1
    BOOL = 0
    INTEGER = 1
    UNSIGNED = 2
    FLOAT = 3


_GROUPS = {
    "tensor(bool)": _Group.BOOL,
    "tensor(int8)": _Group.INTEGER,
    "tensor(int16)": _Group.INTEGER,
    "tensor(int32)": _Group.INTEGER,
    "tensor(int64)": _Group.INTEGER,
    "tensor(uint8)": _Group.UNSIGNED,
    "tensor(uint16)": _Group.UNSIGNED,
    "tensor(uint32)": _Group.UNSIGNED,
    "tensor(uint64)": _Group.UNSIGNED,
    "tensor(bfloat16)": _Group.FLOAT,
    "tensor(float16)": _Group.FLOAT,
    "tensor(float)": _Group.FLOAT,
    "tensor(double)": _Group.FLOAT,
}
_BITS = {
    "tensor(bool)": 1,
    "tensor(uint8)": 8,
    "tensor(int8)": 8,
    "tensor(int16)": 16,
    "tensor(uint16)": 16,
    "tensor(bfloat16)": 16,
    "tensor(float16)": 16,
    "tensor(int32)": 32,
    "tensor(uint32)": 32,
    "tensor(float)": 32,
    "tensor(int64)": 64,
    "tensor(uint64)": 64,
    "tensor(double)": 64,
}


def _group(type_str: str | None) -> _Group:
    return _GROUPS.get(type_str or "", _Group.UNKNOWN)


def _unsafe_cast(src: str | None, dst: str | None, cast_name: str) -> bool:
    """``UnsafeCast``: whether a Cast from ``src`` to ``dst`` may lose information."""
    src_group, dst_group = _group(src), _group(dst)
    if _Group.UNKNOWN in (src_group, dst_group):
        return True
    if src_group not in (_Group.BOOL, _Group.UNSIGNED) and dst_group == _Group.UNSIGNED:
        return True  # signed -> unsigned
    if src_group == _Group.FLOAT and dst_group != _Group.FLOAT:
        return True  # floating point -> non floating point
    src_bits, dst_bits = _BITS[src or ""], _BITS[dst or ""]
    if src_group == _Group.UNSIGNED and dst_group == _Group.INTEGER:
        return dst_bits <= src_bits
    if src_group in (_Group.INTEGER, _Group.UNSIGNED) and dst_group == _Group.FLOAT:
        return dst_bits <= src_bits
    if {src, dst} == {"tensor(float16)", "tensor(bfloat16)"}:
        return True
    return src_bits > dst_bits and not cast_name.startswith(PREFIX)


def _type_of(graph: Graph, value: str) -> str | None:
    return type_string(graph.value_type(value)) if value else None


class RemoveDuplicateCastTransformer(GraphTransformer):
    """Remove Cast pairs that cancel out (ORT runs it from inside InsertCastTransformer)."""

    name = "RemoveDuplicateCastTransformer"

    def apply_shared(self, graph: Graph, ctx: PassContext, modified: bool) -> bool:
        """``Apply(graph, modified)`` with InsertCastTransformer's flag: the result is shared, Resolve if set."""
        modified = self.apply_impl(graph, ctx, 0) or modified
        if modified:
            graph.resolve()
        return modified

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        graph_outputs = set(graph.graph_output_names())
        for index in range(graph.max_node_index()):  # graph.Nodes(): index order, removed slots skipped
            node = graph.node(index)
            if node is None:
                continue
            removed = False
            if node.op_type == "Cast":
                changed, removed = self._visit_cast(graph, node, graph_outputs)
                modified = modified or changed
            if not removed:
                for sub in node.subgraphs.values():
                    if self.apply_impl(sub, ctx, graph_level + 1):
                        modified = True
        return modified

    @staticmethod
    def _visit_cast(graph: Graph, node: Node, graph_outputs: set[str]) -> tuple[bool, bool]:
        """One Cast: returns (modified, removed this very node)."""
        src, dst = _type_of(graph, node.inputs[0]), _type_of(graph, node.outputs[0])
        lossy = _unsafe_cast(src, dst, node.name)
        edges = graph.output_edges(node)
        to_remove: list[Node] = []
        to_keep: list[Node] = []
        for edge in edges:  # OutputNodes, in EdgeEndCompare order
            child = _live(graph, edge.dst)
            if child.op_type != "Cast":
                continue
            child_src, child_dst = _type_of(graph, child.inputs[0]), _type_of(graph, child.outputs[0])
            if lossy and _unsafe_cast(child_dst, child_src, child.name):
                return False, False  # inconsistent casts: leave this Cast and its children alone
            if child.outputs[0] not in graph_outputs and src == child_dst and child_src == dst:
                to_remove.append(child)
            else:
                to_keep.append(child)
        modified = False
        if to_remove:
            in_edges = graph.input_edges(node)
            if not in_edges:  # the Cast reads a graph input, an initializer or an outer-scope value
                for child in to_remove:
                    for edge in graph.output_edges(child):
                        consumer = _live(graph, edge.dst)
                        if edge.dst_slot >= len(consumer.inputs):
                            raise ModelError(
                                f"Cast {child.name!r} feeds the subgraph of {consumer.name!r}: removing it there "
                                "(graph_utils::ReplaceNodeInput on an implicit input) is not implemented"
                            )
                        graph.set_input(consumer, edge.dst_slot, node.inputs[0])
                    graph.remove_node(child)
            else:
                source = _live(graph, in_edges[0].src).outputs[in_edges[0].src_slot]
                for child in to_remove:
                    _replace_downstream_input(graph, child, 0, source)
                    graph.remove_node(child)
            modified = True
        if (
            edges
            and len(to_remove) + len(to_keep) == len(edges)
            and node.outputs[0] not in graph_outputs
            and not any(node.ep and kept.ep and kept.ep != node.ep for kept in to_keep)
            and not (lossy and any(_group(_type_of(graph, kept.outputs[0])) == _Group.BOOL for kept in to_keep))
        ):
            source_type = graph.value_type(node.inputs[0])
            for kept in to_keep:  # Graph::SetNodeArgType on the arg the kept Cast reads (orphaned next)
                if source_type is not None:
                    graph.set_value_type(kept.inputs[0], source_type)
            _remove_node(graph, node)
            return True, True
        return modified, False


def _remove_node(graph: Graph, node: Node) -> None:
    """``graph_utils::RemoveNode`` for a single-input node whose one used output feeds only nodes."""
    in_edges = graph.input_edges(node)
    if len(in_edges) == 1:  # RemoveNodeWithSingleNodeInSingleUsedOutput
        edges = graph.output_edges(node)
        if edges:
            source = _live(graph, in_edges[0].src).outputs[in_edges[0].src_slot]
            _replace_downstream_input(graph, node, edges[0].src_slot, source)
        graph.remove_node(node)
        return
    if len(node.inputs) == 1:  # ReplaceNodeWithInitializer
        replacement = node.inputs[0]
        edges = graph.output_edges(node)
        graph.remove_node(node)
        for edge in edges:
            _reconnect(graph, _live(graph, edge.dst), edge.dst_slot, edge.value, replacement)
        return
    raise ModelError(f"node {node.name!r}: graph_utils::RemoveNode cannot remove a node with several inputs")


def _replace_downstream_input(graph: Graph, node: Node, output_slot: int, replacement: str) -> None:
    """``graph_utils::ReplaceDownstreamNodeInput``: consumers of that output read ``replacement`` instead."""
    edges = [edge for edge in graph.output_edges(node) if edge.src_slot == output_slot]
    for edge in edges:
        _reconnect(graph, _live(graph, edge.dst), edge.dst_slot, edge.value, replacement)


def _reconnect(graph: Graph, consumer: Node, slot: int, old: str, replacement: str) -> None:
    if slot < len(consumer.inputs):
        graph.set_input(consumer, slot, replacement)
        return
    _rename_outer_value(consumer, old, replacement)  # UpdateImplicitInputNameInSubgraph
    graph.refresh_implicit_inputs(consumer)


def _rename_outer_value(node: Node, old: str, new: str) -> None:
    """``UpdateImplicitInputNameInSubgraph``: subgraph nodes reading outer ``old`` read ``new`` (nested too)."""
    for sub in node.subgraphs.values():
        for sub_node in sub.nodes():
            if old in sub_node.implicit_inputs:
                _rename_outer_value(sub_node, old, new)
                sub.refresh_implicit_inputs(sub_node)
            for slot, value in enumerate(list(sub_node.inputs)):
                if value == old:
                    sub.set_input(sub_node, slot, new)
