"""CommonSubexpressionElimination: merge nodes that always compute the same value (value numbering).

::

    before                                      after
    xs ──┬── Mul(xs, ws) ── a_bias_scale ──     xs ──── Mul(xs, ws) ── a_bias_scale ──┬── (a's consumers)
    ws ──┤                                      ws ──┘                                └── (b's consumers)
         └── Mul(xs, ws) ── b_bias_scale ──
    (two identical Mul nodes; the first in topological order survives, the other loses its consumers and goes)

Rules (``common_subexpression_elimination.cc``):

* Every graph input, initializer and outer-scope value is its own value class: two initializers are never equal,
  whatever their content (ConstantSharing, which runs first, is what merges equal small initializers). All missing
  optional inputs form one class.
* A node output's class is (op type, domain, explicit inputs' classes grouped per formal parameter with trailing
  missing optional inputs dropped, attributes, output index). Attributes are compared in ``NodeAttributes``
  iteration order (an ``unordered_map``, so the same set inserted differently does not match); ints, floats,
  strings and their lists by value; a TENSOR only if both are one-element ``[1]`` tensors of one type and equal
  bytes; graphs and other kinds never match.
* Nodes that are never merged get a unique class: nodes with subgraphs, non-deterministic ops (Random*,
  Multinomial, Dropout, any com.microsoft op but Q/DQ, any other domain), **DequantizeLinear** of the ONNX and
  com.microsoft domains (each QDQ node unit must own its DQ), and ``EPContext`` nodes are skipped altogether.
  QuantizeLinear nodes do merge.
* Classes are numbered in ORT's topological order; the first value of a class is its representative. Then, again
  in topological order, every output that is not its class's representative and not a graph output has its
  consumers moved to the representative (an implicit input inside a subgraph is renamed there); a node left with
  no output edge and no graph output is removed. Each graph's subgraphs are processed first.
"""

from __future__ import annotations

import math

import onnx

from qdqopt.graph import Graph, Node
from qdqopt.graph.core import tensor_array
from qdqopt.graph.schema import input_arg_counts, node_schema, normalize_domain
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.constant_folding import is_deterministic
from qdqopt.passes.graph_utils import check_output_edges

__all__ = ["CommonSubexpressionElimination"]

_MISSING = ""  # all missing values (inputs or outputs) share ORT's one empty-named NodeArg


class _Representative:
    """A value class's first value: its name and producing output. (A plain class: a ``NamedTuple``'s ``__new__``
    is interpreted Python even in the compiled build, and CSE makes one per value.)"""

    __slots__ = ("node_index", "output_index", "value")

    def __init__(self, value: str, node_index: int, output_index: int) -> None:
        self.value, self.node_index, self.output_index = value, node_index, output_index


class _Never:
    """An attribute value that equals nothing but itself (graph, sparse tensor, non-scalar tensor...)."""

    __slots__ = ()


class CommonSubexpressionElimination(GraphTransformer):
    """Value-number the graph and route every duplicate value's consumers to its class's first value."""

    name = "CommonSubexpressionElimination"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        order = graph.topological_order()
        live = graph.live()
        class_ids: dict[object, int] = {}
        representatives: dict[int, _Representative] = {}
        value_class: dict[str, int] = {}
        by_short_key: dict[tuple[object, ...], list[_Keyed]] = {}
        discriminator = 1

        def class_of(key: object, value: str, node_index: int, output_index: int) -> int:
            found = class_ids.get(key)
            if found is None:  # a new class: this value represents it
                found = len(class_ids)
                class_ids[key] = found
                representatives[found] = _Representative(value, node_index, output_index)
            return found

        for node in order:
            if node.index not in live or node.op_type == "EPContext":
                continue
            if node.subgraphs and self.recurse(node, ctx, graph_level):
                modified = True
            inputs: list[int] = []
            for name in node.inputs:
                found = value_class.get(name)
                if found is None:
                    key = ("value", name)
                    found = class_of(key, name, 0, -1)
                    value_class[name] = found
                inputs.append(found)
            op_key: tuple[object, ...]
            if _supported(node):
                op_key = _op_key(graph, node, inputs, class_ids, by_short_key)
            else:  # a class of its own: nothing else in the key matters
                discriminator += 1
                op_key = (discriminator,)
            for index, output in enumerate(node.outputs):
                found = class_of(("op", op_key, index), output, node.index, index)
                value_class[output] = found

        outputs = set(graph.graph_output_names())
        for node in order:
            if node.index not in live or node.op_type == "EPContext":
                continue
            replaced = False
            for index, output in enumerate(node.outputs):
                rep = representatives[value_class[output]]
                if rep.value == output:
                    continue
                if output in outputs:
                    continue
                replacement = graph.node(rep.node_index)
                assert replacement is not None and rep.output_index >= 0
                _replace_downstream(graph, node, index, replacement.outputs[rep.output_index])
                replaced = True
            if replaced:
                modified = True
                if check_output_edges(graph, node, 0):
                    graph.remove_node(node)
        return modified


class _Keyed:
    """A supported node already numbered, the key its outputs' classes were made with, and its full key (made when
    a node of the same short key asks: see :func:`_op_key`)."""

    __slots__ = ("full", "inputs", "node", "op_key")

    def __init__(self, node: Node, inputs: list[int], op_key: tuple[object, ...], full: tuple[object, ...] | None):
        self.node, self.inputs, self.op_key, self.full = node, inputs, op_key, full


def _full_key(graph: Graph, node: Node, inputs: list[int], class_ids: dict[object, int]) -> tuple[object, ...]:
    """The output classes' key: op, domain, inputs per formal parameter and attributes (``EquivalenceClass``)."""
    grouped = _group_inputs(graph, node, inputs, class_ids)
    return (node.op_type, normalize_domain(node.domain), grouped, _attribute_key(node), 0)


def _op_key(
    graph: Graph,
    node: Node,
    inputs: list[int],
    class_ids: dict[object, int],
    by_short_key: dict[tuple[object, ...], list[_Keyed]],
) -> tuple[object, ...]:
    """The key of a supported node's output classes: that of the first node before it with the same full key
    (:func:`_full_key`), else a key of its own.

    Two nodes with the same full key have the same op, domain and input classes once the missing ones are left out
    (the short key); most nodes share their short key with none before them, and their full key is only made if a
    later node shares it."""
    missing = class_ids.get(("value", _MISSING))
    short = (node.op_type, normalize_domain(node.domain), tuple(c for c in inputs if c != missing))
    before = by_short_key.get(short)
    if before is None:
        op_key: tuple[object, ...] = ("short", short)
        by_short_key[short] = [_Keyed(node, inputs, op_key, None)]
        return op_key
    full = _full_key(graph, node, inputs, class_ids)
    for keyed in before:
        if keyed.full is None:
            keyed.full = _full_key(graph, keyed.node, keyed.inputs, class_ids)
        if keyed.full == full:
            return keyed.op_key
    op_key = ("full", full)
    before.append(_Keyed(node, inputs, op_key, full))
    return op_key


def _supported(node: Node) -> bool:
    domain = normalize_domain(node.domain)
    return (
        not node.subgraphs
        and is_deterministic(node.domain, node.op_type)
        and not (domain in ("", "com.microsoft") and node.op_type == "DequantizeLinear")
    )


def _group_inputs(graph: Graph, node: Node, inputs: list[int], class_ids: dict[object, int]) -> tuple[object, ...]:
    """Inputs per formal parameter (``Node::InputArgCount``), trailing missing optional inputs dropped."""
    counts = _input_arg_counts(node)
    missing = class_ids.get(("value", _MISSING))
    grouped: list[tuple[int, ...]] = []
    position = 0
    for count in counts:
        arg = list(inputs[position : position + count])
        position += count
        while arg and arg[-1] == missing:
            arg.pop()
        grouped.append(tuple(arg))
    return tuple(grouped)


def _input_arg_counts(node: Node) -> list[int]:
    schema = node_schema(node)
    if schema is None:
        return [1] * len(node.inputs)
    return input_arg_counts(schema, len(node.inputs))


def _attribute_key(node: Node) -> tuple[object, ...]:
    """Attributes in ``NodeAttributes`` iteration order, each as a value that compares like ORT's ``AreEqual``."""
    return tuple((name, _attribute_value(node.attributes[name])) for name in node.attribute_order())


def _attribute_value(attr: onnx.AttributeProto) -> object:
    kind = attr.type
    A = onnx.AttributeProto  # noqa: N806
    if kind == A.FLOAT:
        return ("f", _float_key(attr.f))
    if kind == A.INT:
        return ("i", int(attr.i))
    if kind == A.STRING:
        return ("s", bytes(attr.s))
    if kind == A.FLOATS:
        return ("fs", tuple(_float_key(f) for f in attr.floats[:]))
    if kind == A.INTS:
        return ("is", tuple(attr.ints[:]))
    if kind == A.STRINGS:
        return ("ss", tuple(bytes(s) for s in attr.strings))
    if kind == A.TENSOR:
        tensor = attr.t
        if tensor.data_type != onnx.TensorProto.UNDEFINED and list(tensor.dims) == [1]:
            if tensor.data_type == onnx.TensorProto.STRING:
                return ("t", tensor.data_type, tuple(bytes(s) for s in tensor.string_data))
            try:
                data = tensor_array(tensor).tobytes()
            except Exception:
                return _Never()
            return ("t", tensor.data_type, data)
    return _Never()


def _float_key(value: float) -> object:
    """Floats compare with ``==``: NaN equals nothing, +0 equals -0."""
    if math.isnan(value):  # (not np.isnan: a numpy call per float)
        return _Never()
    return value + 0.0


def _replace_downstream(graph: Graph, node: Node, output_index: int, replacement: str) -> None:
    """``graph_utils::ReplaceDownstreamNodeInput`` for one output slot (implicit inputs renamed in subgraphs)."""
    for edge in graph.output_edges(node):
        if edge.src_slot != output_index:
            continue
        consumer = graph.node(edge.dst)
        assert consumer is not None
        if edge.dst_slot < len(consumer.inputs):
            graph.set_input(consumer, edge.dst_slot, replacement)
        else:
            old = edge.value
            for sub in consumer.subgraphs.values():
                _rename_in_subgraph(sub, old, replacement)
            graph.refresh_implicit_inputs(consumer)


def _rename_in_subgraph(graph: Graph, old: str, new: str) -> None:
    """``UpdateImplicitInputNameInSubgraph``: an outer-scope name read by a subgraph (and its own subgraphs)."""
    if graph.producer(old) is not None or graph.is_initializer(old) or old in graph.input_index():
        return
    for node in graph.nodes():
        for slot, name in enumerate(list(node.inputs)):
            if name == old:
                graph.set_input(node, slot, new)
        for sub in node.subgraphs.values():
            _rename_in_subgraph(sub, old, new)
        if node.subgraphs:
            graph.refresh_implicit_inputs(node)
