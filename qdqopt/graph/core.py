"""The graph core: an ORT-faithful ``Graph`` over a private ``networkx.MultiDiGraph``.

What it mirrors from ``onnxruntime/core/graph/graph.cc`` (spec §2):

* **Node indices.** Nodes loaded from a model get indices ``0..n-1`` in file order (``Constant`` nodes excluded: ORT
  turns them into initializers at load); every new node takes the next index; indices are never reused.
* **Edges.** One edge per (producer output slot, consumer input slot). An input that an outer-scope value feeds into
  a node's subgraph is an *implicit* input: its edge's destination slot is ``len(inputs) + k``, as in ORT, so a pass
  can tell it apart (EnsureUniqueDQ does).
* **Order.** :meth:`Graph.topological_order` is ORT's ``GraphViewer`` order, which every pass iterates and which is
  the saved order of a modified graph.
* **Names.** One counter per graph for :meth:`Graph.generate_node_name` and :meth:`Graph.generate_value_name`
  (``GenerateNodeName`` / ``GenerateNodeArgName``): the base name if free, else ``base_token_<counter++>``.
  A node name collides with live nodes' names and with every generated node name; a value name collides with every
  value the graph has ever known (ORT keeps typed NodeArgs of removed tensors) and every generated value name.
* **Initializers.** Kept in ORT's ``graph_proto_->initializer()`` order: appended when added, swap-with-last when
  removed.
* **NodeArgs.** ``node_args_`` is a ``std::unordered_map`` whose iteration order is emulated
  (:class:`~qdqopt.graph.stdhash.StdUnorderedMap`): filled as ORT's ``Graph`` constructor fills it (typed graph
  inputs, initializers without an input, typed graph outputs, then each node's inputs and outputs; ``""`` included),
  then each new name when first met (a new node's inputs, then its outputs). :meth:`Graph.resolve` removes the
  unused initializers (``name_to_initial_tensor_`` order), then the unused *untyped* NodeArgs (``node_args_`` order),
  the main graph first, then each node's subgraphs in its attribute-map order (``Node::Init`` creates them so), and
  reports each removal as an event (:mod:`qdqopt.events`) in ORT's words.
* **NodeArg types.** What a pass asks of a value goes through :meth:`Graph.shape`, :meth:`Graph.elem_type` and
  :meth:`Graph.type_proto` (``NodeArg::Shape()``, ``TypeAsProto()``): an initializer's tensor type, a graph input's
  declared type, else the type the last Resolve gave the NodeArg as one of three emulations of it reads it
  (:class:`View`). The graph holds the inferred types and decides when to infer again; the inference itself is
  :mod:`qdqopt.graph.inference`.

Passes see :class:`Node` records and value names; they change the graph only through :class:`Graph` methods, which
keep edges, producers and the *modified* flag consistent. networkx never leaves this module.
"""

from __future__ import annotations

import enum
import gc
import operator
import sys
import types
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, overload

import networkx as nx
import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.errors import ModelError
from qdqopt.events import Kind, say
from qdqopt.graph import inference
from qdqopt.graph.order import NodeIndex, ort_order_of_adjacency
from qdqopt.graph.schema import (
    OpSchema,
    Schema,
    known_type,
    lookup,
    node_schema,
    normalize_domain,
    tensor_type_proto,
    tensor_type_string,
)
from qdqopt.graph.stdhash import StdUnorderedMap

#: the contrib QLinear ops' formal input that holds their output's zero point
_OUTPUT_ZERO_POINTS = frozenset({"y_zero_point", "c_zero_point", "z_zero_point", "reduced_zero_point"})

__all__ = [
    "Changes",
    "Edge",
    "Graph",
    "Node",
    "ShapeDims",
    "View",
    "decode_str",
    "dim_values",
    "dims_equal",
    "element_count",
    "merge_declared",
    "tensor_array",
]

#: A NodeArg shape (``NodeArg::Shape()``): one entry per dim, an int for a ``dim_value``, a str for a ``dim_param``
#: the model or ORT gave (the ``unk__<n>`` names ONNX's inference invents stand for dims ORT leaves unknown), None for
#: an unknown dim.
ShapeDims = list[int | str | None]


#: how many producers back ``View.DATA`` follows schema type constraints for a value made since the last inference
_BOUND_DEPTH = 32


class View(enum.Enum):
    """Which of qdqopt's emulations of ORT's NodeArg types a query reads (:meth:`Graph.shape`,
    :meth:`Graph.elem_type`, :meth:`Graph.type_proto`).

    In ORT every NodeArg has the type the last ``Graph::Resolve`` inferred (after each pass that changed the graph),
    or the one the running pass gave it; a NodeArg the pass created without a type has none until the next Resolve.
    qdqopt infers lazily, and three emulations of that state coexist, each with the passes its answers were matched
    against ORT on (they differ in what the inference is given and in when it runs again):

    * ``PASS``: the types :func:`~qdqopt.graph.inference.infer_types` gave (the Resolve the partitioner runs: small
      constant initializers' data, no shape-value propagation; contrib outputs typed from their schema) plus the
      types passes set, as a pass application sees them: a value made since the pass began
      (:meth:`Graph.begin_pass`) is untyped; a value without a type or a shape makes the inference run again, once
      per pass application. What most passes read.
    * ``FILLED``: shapes only, as ConstantFolding (and WeightBiasQuantization) need them complete: a graph input's
      declared shape, an initializer's dims, else the ``PASS`` types with the dims value_info or the outputs declare
      filling those left unknown; while a dim is unknown the inference runs again, once per pass application. A value
      the pass made counts.
    * ``DATA``: the types ONNX's inference gives with the data of small constant initializers and with shape-value
      propagation (:func:`~qdqopt.graph.inference.infer_with_data`: ``InferenceContext::getInputData``, as the
      Level1 rules and the transpose optimizer see shapes computed from constants), kept per graph and run again only
      when a value without a type is asked for after nodes were added or removed; the element type of a value made
      since is inferred node by node from its producers. The run's first such inference, on the graph as loaded, is
      usually not run: the loader's types are the same there (:meth:`Graph.seed_data_types`).
    """

    PASS = "pass"
    FILLED = "filled"
    DATA = "data"


class CollectionPaused:
    """``with CollectionPaused():`` no cyclic garbage collection inside (the collector's state is restored on exit;
    nested uses leave it to the outermost). Loading, the passes and saving make no reference cycles to collect
    (``tests/test_compiled.py`` finds nothing unreachable after a run), and each collection on the way walked the
    objects of the model being built or rewritten (a young collection every few hundred allocations, an old one
    every few runs in a long-lived process). The garbage a run leaves is freed by reference counting."""

    def __init__(self) -> None:
        self.collecting = False

    def __enter__(self) -> None:
        self.collecting = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self.collecting:
            if not gc.get_freeze_count():
                # what was allocated inside (the model, mostly) would be walked by the next young collection, though
                # none of it is garbage: it joins the oldest generation at once (freeze then unfreeze, two list
                # splices that also reset the young count), where only a full collection looks at it. Nothing stays
                # frozen; with objects frozen by someone else, nothing is done.
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def decode_str(value: bytes) -> str:
    """An attribute's string as ORT compares it: UTF-8, and bytes that are not UTF-8 kept as lone surrogates
    (``surrogateescape``), so that such a value equals no valid name and is still the same bytes when encoded back
    the same way."""
    return value.decode("utf-8", "surrogateescape")


#: the element types whose raw data numpy reads as it is (``numpy_helper.to_array``'s ``frombuffer`` case)
_RAW_DTYPES: dict[int, np.dtype] = {
    elem: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    for elem in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.INT16,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.INT32,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.UINT64,
        onnx.TensorProto.BOOL,
    )
}


def element_count(dims: Iterable[int]) -> int:
    """The number of elements of a tensor of these dims (1 for none) as ORT counts it in int64, wrapping around
    (``np.prod(dims, dtype=np.int64)``, without making an array)."""
    count = 1
    for dim in dims:
        count *= dim
    if -_SMALL < count < _SMALL:  # (no wrapping to do: compiled, integers this small are native)
        return count
    return (count + _INT64_WRAP) % (2 * _INT64_WRAP) - _INT64_WRAP


_SMALL: Final = 1 << 60
_INT64_WRAP: Final = 1 << 63


def tensor_array(tensor: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array``, with a tensor whose data does not fill its dims (or holds part of an element)
    refused as ORT refuses it when it deserializes the initializer (:class:`ModelError`), not a ``ValueError``."""
    try:
        dtype = _RAW_DTYPES.get(tensor.data_type) if sys.byteorder == "little" else None
        if (
            dtype is not None
            and tensor.data_location != onnx.TensorProto.EXTERNAL
            and tensor.HasField("raw_data")
            and not tensor.HasField("segment")
        ):
            # to_array's own steps for little-endian raw data of a type numpy has, without its other checks
            return np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tensor.dims[:])
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:
        raise ModelError(
            f"Deserialize tensor {tensor.name} failed: its data does not match its type and dims {list(tensor.dims)} "
            f"({exc})"
        ) from exc


def dim_values(shape: ShapeDims | None) -> list[int | None] | None:
    """The dims of ``shape`` as values (``TensorShapeProto_Dimension::dim_value``): a symbolic dim is None too."""
    return None if shape is None else [d if isinstance(d, int) else None for d in shape]


def dims_equal(a: int | str | None, b: int | str | None) -> bool:
    """ORT's ``operator==`` on two dims of :data:`ShapeDims`: equal values, or equal non-empty symbols; an unknown dim
    equals nothing, and neither does a symbol ONNX's inference invented (in a shape read ``as_written``)."""
    return a is not None and a != "" and not (isinstance(a, str) and a.startswith("unk__")) and a == b


def _shape_incomplete(found: onnx.TypeProto) -> bool:
    """A tensor type without a shape, or with a dim that has neither a value nor a name."""
    if not found.HasField("tensor_type"):
        return False
    if not found.tensor_type.HasField("shape"):
        return True
    return any(not d.HasField("dim_value") and not d.dim_param for d in found.tensor_type.shape.dim[:])


#: what a TypeProto says, as :meth:`Graph.shape` and :meth:`Graph.elem_type` read it: the proto itself, its tensor
#: element type (None when 0 or not a tensor), its dims as read, then as written (None when not a tensor or without
#: a shape). A dim is its value, else its symbolic name, else None; as read, a name ONNX's inference invented
#: (``unk__<n>``) is None too (ORT leaves a dim it cannot infer empty).
_TypeFacts = tuple[onnx.TypeProto, int | None, tuple[int | str | None, ...] | None, tuple[int | str | None, ...] | None]


def _read_type_facts(found: onnx.TypeProto) -> _TypeFacts:
    """:data:`_TypeFacts` of ``found``, read through protobuf's API (once per object: :meth:`Graph._facts`)."""
    if found.WhichOneof("value") != "tensor_type":
        return (found, None, None, None)
    tensor = found.tensor_type
    elem = int(tensor.elem_type) or None
    if not tensor.HasField("shape"):
        return (found, elem, None, None)
    written: list[int | str | None] = []
    for dim in tensor.shape.dim[:]:  # (a slice: iterating a upb container ends in an IndexError, which costs)
        value = dim.dim_value  # (a value other than 0, the usual case, is set: no need to ask)
        if value or dim.HasField("dim_value"):
            written.append(int(value))
        elif dim.HasField("dim_param"):
            written.append(str(dim.dim_param))
        else:
            written.append(None)
    # as read, a dim_param ONNX's inference invented (unk__<n>) is an unknown dim
    read = tuple(None if isinstance(d, str) and d.startswith("unk__") else d for d in written)
    return (found, elem, read, tuple(written))


def _declared_input_type(graph: Graph, name: str) -> onnx.TypeProto | None:
    if name not in graph.input_index():
        return None
    for vi in graph.inputs:
        if vi.name == name and vi.HasField("type"):
            return vi.type
    return None


def _declared_shape(graph: Graph, name: str) -> list[int | None] | None:
    """The dims a graph input, output or value_info entry declares for ``name``, as values (None: none declared)."""
    for vi in (*graph.inputs, *graph.outputs, *graph.value_info):
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            return [int(d.dim_value) if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim[:]]
    return None


def merge_declared(graph: Graph, name: str, inferred: Sequence[int | None] | None) -> list[int | None] | None:
    """ORT merges an inferred shape into the NodeArg's existing (declared) one: known dims win (dims as values, see
    :func:`dim_values`)."""
    declared = _declared_shape(graph, name)
    if declared is None:
        return None if inferred is None else list(inferred)
    if inferred is None:
        return declared
    if len(declared) != len(inferred):
        return list(inferred)
    return [i if i is not None else d for i, d in zip(inferred, declared, strict=True)]


#: the adjacency of a MultiDiGraph: node -> neighbour -> edge key (source slot, input slot) -> edge data
_Adjacency = dict[NodeIndex, dict[NodeIndex, dict[tuple[int, int], dict[str, Any]]]]


class Edge(NamedTuple):
    """A data edge. Sorting edges gives ORT's ``EdgeEndCompare`` order for one node's output edges (a named tuple:
    cheap to make and compare, as passes ask for edges all the time)."""

    dst: NodeIndex
    src_slot: int
    dst_slot: int
    src: NodeIndex
    value: str


@dataclass(frozen=True, init=False)
class Changes:
    """What a stretch of edits did to a graph and its subgraphs (see :meth:`Graph.take_changes`): the nodes added,
    the nodes removed and the surviving older nodes whose inputs or outputs were pointed elsewhere, each as
    ``(index, name, op)`` with ``op`` as :attr:`Node.qualified_op`; a node added and removed in the stretch is in
    neither list."""

    added: tuple[tuple[NodeIndex, str, str], ...] = ()
    removed: tuple[tuple[NodeIndex, str, str], ...] = ()
    rewired: tuple[tuple[NodeIndex, str, str], ...] = ()

    def __init__(
        self,
        added: tuple[tuple[NodeIndex, str, str], ...] = (),
        removed: tuple[tuple[NodeIndex, str, str], ...] = (),
        rewired: tuple[tuple[NodeIndex, str, str], ...] = (),
    ) -> None:
        object.__setattr__(self, "added", added)
        object.__setattr__(self, "removed", removed)
        object.__setattr__(self, "rewired", rewired)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.rewired)


_NO_CHANGES = Changes()


class Node:
    """A node as ORT holds it. Mutate it only through :class:`Graph` methods (except ``doc_string``/``ep``).

    (A plain class with its own ``__init__``, not a dataclass: compiled with mypyc, a dataclass keeps the
    ``__init__`` the dataclasses module writes at run time, interpreted, and every node made, loaded or cloned
    goes through it.)"""

    index: NodeIndex
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, onnx.AttributeProto]
    doc_string: str
    ep: str
    subgraphs: dict[str, Graph]
    implicit_inputs: list[str]
    since_version: int | None
    original: onnx.NodeProto | None
    #: ORT's ``NodeAttributes`` is a ``std::unordered_map``: this mirrors its iteration (= saved) order.
    attr_map: StdUnorderedMap

    def __init__(
        self,
        index: NodeIndex,
        name: str,
        op_type: str,
        domain: str,
        inputs: list[str],
        outputs: list[str],
        attributes: dict[str, onnx.AttributeProto],
        doc_string: str = "",
        ep: str = "",
        subgraphs: dict[str, Graph] | None = None,
        implicit_inputs: list[str] | None = None,
        since_version: int | None = None,
        original: onnx.NodeProto | None = None,
        attr_map: StdUnorderedMap | None = None,
    ) -> None:
        self.index = index
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.inputs = inputs
        self.outputs = outputs
        self.attributes = attributes
        self.doc_string = doc_string
        self.ep = ep
        self.subgraphs = {} if subgraphs is None else subgraphs
        self.implicit_inputs = [] if implicit_inputs is None else implicit_inputs
        self.since_version = since_version
        self.original = original
        self.attr_map = StdUnorderedMap(memo=True) if attr_map is None else attr_map

    def input(self, slot: int) -> str:
        """The value input ``slot`` reads: "" for a slot past the inputs or an optional input left out."""
        return self.inputs[slot] if slot < len(self.inputs) else ""

    def attribute_order(self) -> list[str]:
        """Attribute names in the order ORT writes them."""
        return [k for k in self.attr_map if k in self.attributes]

    @property
    def qualified_op(self) -> str:
        """``op_type`` for ONNX, ``domain.op_type`` otherwise (the key ORT's op counts use)."""
        return self.op_type if not self.domain else f"{self.domain}.{self.op_type}"

    def attr(self, name: str, default: object = None) -> object:
        """The attribute's Python value (ints, floats, strings decoded), or ``default``.

        Untyped: prefer the typed accessors (:meth:`attr_int`, :meth:`attr_ints`, :meth:`attr_float`,
        :meth:`attr_floats`, :meth:`attr_str`, :meth:`attr_strs`, :meth:`attr_tensor`).
        """
        proto = self.attributes.get(name)
        if proto is None:
            return default
        value = onnx.helper.get_attribute_value(proto)
        return decode_str(value) if isinstance(value, bytes) else value

    # Typed accessors. Each returns the attribute's value when the node has it with that type (ONNX's
    # AttributeProto.type; ORT's loader has checked it against the schema), else ``default`` (None unless given):
    # ``graph_utils::GetNodeAttribute`` followed by ``attr->i()`` / ``ints()`` / ``f()`` / ``s()`` in ORT's passes.
    def _typed(self, name: str, kind: int) -> onnx.AttributeProto | None:
        """The attribute ``name`` when it has the AttributeProto type ``kind``, else None."""
        p = self.attributes.get(name)
        return p if p is not None and p.type == kind else None

    @overload
    def attr_int(self, name: str) -> int | None: ...
    @overload
    def attr_int(self, name: str, default: int) -> int: ...
    def attr_int(self, name: str, default: int | None = None) -> int | None:
        """An ``INT`` attribute (``attr->i()``), or ``default``."""
        p = self._typed(name, onnx.AttributeProto.INT)
        return default if p is None else int(p.i)

    @overload
    def attr_ints(self, name: str) -> list[int] | None: ...
    @overload
    def attr_ints(self, name: str, default: list[int]) -> list[int]: ...
    def attr_ints(self, name: str, default: list[int] | None = None) -> list[int] | None:
        """An ``INTS`` attribute as a new list (``GetRepeatedNodeAttributeValues``), or ``default``."""
        p = self._typed(name, onnx.AttributeProto.INTS)
        return default if p is None else [int(v) for v in p.ints[:]]

    @overload
    def attr_float(self, name: str) -> float | None: ...
    @overload
    def attr_float(self, name: str, default: float) -> float: ...
    def attr_float(self, name: str, default: float | None = None) -> float | None:
        """A ``FLOAT`` attribute (``attr->f()``, a float32 widened to a Python float), or ``default``."""
        p = self._typed(name, onnx.AttributeProto.FLOAT)
        return default if p is None else float(p.f)

    @overload
    def attr_floats(self, name: str) -> list[float] | None: ...
    @overload
    def attr_floats(self, name: str, default: list[float]) -> list[float]: ...
    def attr_floats(self, name: str, default: list[float] | None = None) -> list[float] | None:
        """A ``FLOATS`` attribute as a new list, or ``default``."""
        p = self._typed(name, onnx.AttributeProto.FLOATS)
        return default if p is None else [float(v) for v in p.floats[:]]

    @overload
    def attr_str(self, name: str) -> str | None: ...
    @overload
    def attr_str(self, name: str, default: str) -> str: ...
    def attr_str(self, name: str, default: str | None = None) -> str | None:
        """A ``STRING`` attribute decoded as UTF-8 (``attr->s()``; bytes that are not UTF-8 kept as surrogates, so
        that they equal no valid name, as in ORT's byte comparison: :func:`decode_str`), or ``default``."""
        p = self._typed(name, onnx.AttributeProto.STRING)
        return default if p is None else decode_str(p.s)

    @overload
    def attr_strs(self, name: str) -> list[str] | None: ...
    @overload
    def attr_strs(self, name: str, default: list[str]) -> list[str]: ...
    def attr_strs(self, name: str, default: list[str] | None = None) -> list[str] | None:
        """A ``STRINGS`` attribute, each decoded as UTF-8, or ``default``."""
        p = self._typed(name, onnx.AttributeProto.STRINGS)
        return default if p is None else [decode_str(v) for v in p.strings[:]]

    @overload
    def attr_tensor(self, name: str) -> onnx.TensorProto | None: ...
    @overload
    def attr_tensor(self, name: str, default: onnx.TensorProto) -> onnx.TensorProto: ...
    def attr_tensor(self, name: str, default: onnx.TensorProto | None = None) -> onnx.TensorProto | None:
        """A ``TENSOR`` attribute (the proto), or ``default``."""
        p = self._typed(name, onnx.AttributeProto.TENSOR)
        return default if p is None else p.t

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.qualified_op}, name={self.name!r})"


def node_proto_head(node: Node) -> onnx.NodeProto:
    """The start of ``Node::ToProto``: a NodeProto with the node's name, op type, domain and doc string (empty
    fields left unset); the caller adds attributes, inputs and outputs."""
    proto = onnx.NodeProto()
    proto.name = node.name
    proto.op_type = node.op_type
    if node.domain:
        proto.domain = node.domain
    if node.doc_string:
        proto.doc_string = node.doc_string
    return proto


class Graph:
    """One ORT ``Graph`` (the main graph or a subgraph)."""

    def __init__(
        self,
        *,
        name: str,
        opsets: dict[str, int],
        parent: Graph | None = None,
        parent_node: Node | None = None,
    ) -> None:
        self.name = name
        self.doc_string = ""
        self.doc_string_present = False
        self.ir_version = 10
        self.opsets = opsets
        # the schema of each (domain, op type) at this graph's opsets (see schema())
        self._schemas: dict[tuple[str, str], OpSchema | object | None] = {}
        self.parent = parent
        self.parent_node = parent_node
        self._nx: nx.MultiDiGraph = nx.MultiDiGraph()
        # the MultiDiGraph's own adjacency (node -> neighbour -> edge key -> edge data), reached directly
        self._succ: _Adjacency = self._nx._succ
        self._pred: _Adjacency = self._nx._pred
        self._order: list[NodeIndex] | None = None  # topological order of the current structure (None: to compute)
        # the last node whose output (input) edges were asked for, and its edges, until the structure changes (a pass
        # asks a node's edges several times before it edits: CanRemoveNode, then RemoveNode, ...)
        self._out_edges: tuple[NodeIndex, list[Edge]] | None = None
        self._in_edges: tuple[NodeIndex, list[Edge]] | None = None
        self._position: dict[NodeIndex, int] | None = None  # node index -> its place in _order (None: to compute)
        # op type -> the indices of the live nodes of that op type (any domain)
        self._by_op: dict[str, set[NodeIndex]] = {}
        # the nodes that may miss a schema-default attribute (added, or lost one, since fill_default_attributes)
        self._unfilled: set[NodeIndex] = set()
        self._nodes: dict[NodeIndex, Node] = {}
        self._next_index = 0
        self._producer: dict[str, tuple[NodeIndex, int]] = {}
        self._consumers: dict[str, set[NodeIndex]] = {}
        self._consumed: dict[NodeIndex, set[str]] = {}
        # the live nodes that have subgraphs (kept by add_node, remove_node and refresh_implicit_inputs, which every
        # attaching of a subgraph is followed by), so that what recurses into subgraphs skips the other nodes
        self._sub_nodes: set[NodeIndex] = set()
        # the model-local functions by (domain, name, overload), on the main graph (schema.set_local_functions)
        self.local_functions: dict[tuple[str, str, str], onnx.FunctionProto] = {}
        # live node names (with multiplicity) and op counts, kept as nodes come and go
        self._live_names: dict[str, int] = {}
        self._op_count: dict[str, int] = {}
        # the edits since the last take_changes (kept by the main graph for every graph of the model): id of the
        # graph and node index -> "+" (added), "-" (removed), "~" (rewired), with the node's name and op
        self._journal: dict[tuple[int, NodeIndex], tuple[str, str, str]] = {}
        # graph interface
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        # the inputs and outputs by name, with the list and length they were made for (see input_index)
        self._input_index: _NameIndex | None = None
        self._output_index: _NameIndex | None = None
        #: names of the value_info entries ORT keeps (their tensor had a NodeArg after load)
        self.value_info_names: set[str] = set()
        # initializers, in ORT's graph_proto_->initializer() order
        self._init_order: list[str] = []  # graph_proto_->initializer(), swap-with-last on removal
        self._init_pos: dict[str, int] = {}  # name -> its index in _init_order
        self._verbatim_order: dict[str, None] = {}  # a subgraph saved verbatim keeps its file order (stable removal)
        self._inits: dict[str, onnx.TensorProto] = {}
        # ``name_to_initial_tensor_``: a std::unordered_map whose iteration order decides removal order.
        self._init_map = StdUnorderedMap()
        self._arrays: dict[str, np.ndarray] = {}
        self.sparse_initializers: list[onnx.SparseTensorProto] = []
        self.metadata_props: list[onnx.StringStringEntryProto] = []
        # names
        self._known_values: set[str] = set()
        self._untyped_values: set[str] = set()
        # ``node_args_``: a std::unordered_map whose iteration order decides the order Resolve removes NodeArgs in
        # (keys only; "" included, as ORT makes a NodeArg for an absent optional input or output)
        self._arg_map = StdUnorderedMap()
        self._generated_values: set[str] = set()
        self._generated_nodes: set[str] = set()
        self._counter = 0
        # edits made through the main graph's edit methods, this graph's and its subgraphs' (see :meth:`state_stamp`)
        self._edits = 0
        # state
        self.modified = False
        self.original_nodes: list[onnx.NodeProto] = []
        # NodeArg types, as Resolve infers them (filled by qdqopt.graph.inference.infer_types and the passes that type
        # the values they create)
        self._types: dict[str, onnx.TypeProto] = {}
        # what each TypeProto read through _facts says, by the object's id (the object kept: its id stays its own)
        self._type_facts: dict[int, _TypeFacts] = {}
        # NodeArg types a pass set outright (ORT's NodeArg::SetShape / SetType): what the saver writes for the value,
        # refined only by what the Resolves after that pass infer (see :meth:`pin_value_type`)
        self._pinned: dict[str, onnx.TypeProto] = {}
        # the types values had when a pass removed or replaced their producer (see :meth:`keep_value_type`)
        self._kept: dict[str, onnx.TypeProto] = {}
        # the types saved values (value_info) had at the last Resolve before a pass removed their producer (see
        # :meth:`died_types`)
        self._died: dict[str, onnx.TypeProto] = {}
        #: how many times ``resolve`` ran on this graph (a pass that changed the model is followed by one)
        self.resolves = 0
        # value -> ``resolves`` when a pass last gave the value a producer (what decides how ORT's lenient
        # shape merge ends for it, see :meth:`production_generation`)
        self._produced_at: dict[str, int] = {}
        # the pass application under way (see :meth:`begin_pass`): the values first known since it began (None: no
        # pass began), and whether it had the types inferred again (``View.PASS``/``View.FILLED``)
        self._pass_new: set[str] | None = None
        self._pass_refreshed = False
        # ... and whether the application removed or rewired a node yet
        self._pass_rewired = False
        # ``View.DATA``: the types the last inference with data gave this graph's values (None: none ran), the
        # structure it ran on (kept by the main graph), and the types inferred node by node since, by value and
        # producer index
        self._data_types: dict[str, onnx.TypeProto] | None = None
        self._data_typed_at: tuple[int, ...] | None = None
        # the load-time types, when they are what the run's first inference with data would give as long as the
        # graph is as loaded (see seed_data_types), with the graph's state they hold for
        self._load_data_types: tuple[dict[str, onnx.TypeProto], tuple[object, ...]] | None = None
        # the load-time types, when they are what the run's first Resolve inference (View.PASS) gives as long as
        # every node types as it did at load (see seed_pass_types), with what the graph was at load
        self._load_pass_types: _PassSeed | None = None
        # the structure when the pass application under way began (the main graph's; None: no pass began)
        self._pass_began_at: tuple[int, ...] | None = None
        self._node_types: dict[tuple[str, int], onnx.TypeProto | None] = {}
        # node index -> what node_proto made of the node, with the node's fields it was made from
        self._node_protos: dict[NodeIndex, tuple[Any, ...]] = {}

    def clone(self, parent: Graph | None = None, parent_node: Node | None = None) -> Graph:
        """An independent copy (nodes, edges, values, initializers, names, counters, the types inferred so far;
        subgraphs cloned too), for a pass that tries a rewrite before deciding. Initializer tensors and attribute
        protos are shared: passes replace them, never edit them in place."""
        new = Graph(name=self.name, opsets=self.opsets)  # (mypyc's Graph.__new__ would call __init__ too)
        for name in _CLONED_FIELDS:  # immutable ones by reference; the others are copied below
            setattr(new, name, getattr(self, name))
        new.parent = parent if parent is not None else self.parent
        new.parent_node = parent_node if parent_node is not None else self.parent_node
        new.opsets = parent.opsets if parent is not None else dict(self.opsets)
        new._schemas = dict(self._schemas)
        new._nx = self._nx.copy()
        new._succ, new._pred = new._nx._succ, new._nx._pred
        new._order = None if self._order is None else list(self._order)
        new._out_edges = new._in_edges = None
        new._position = None
        new._by_op = {k: set(v) for k, v in self._by_op.items()}
        new._unfilled = set(self._unfilled)
        new._producer = dict(self._producer)
        new._consumers = {k: set(v) for k, v in self._consumers.items()}
        new._consumed = {k: set(v) for k, v in self._consumed.items()}
        new._sub_nodes = set(self._sub_nodes)
        new.inputs = [_copy_proto(v) for v in self.inputs]
        new.outputs = [_copy_proto(v) for v in self.outputs]
        new.value_info = [_copy_proto(v) for v in self.value_info]
        new.value_info_names = set(self.value_info_names)
        new._init_order = list(self._init_order)
        new._init_pos = dict(self._init_pos)
        new._verbatim_order = dict(self._verbatim_order)
        new._live_names = dict(self._live_names)
        new._op_count = dict(self._op_count)
        new._journal = {}  # a copy's edits are its own
        new._inits = dict(self._inits)
        new._init_map = self._init_map.copy()
        new._arrays = dict(self._arrays)
        new.sparse_initializers = list(self.sparse_initializers)
        new.metadata_props = list(self.metadata_props)
        new._known_values = set(self._known_values)
        new._untyped_values = set(self._untyped_values)
        new._arg_map = self._arg_map.copy()
        new._generated_values = set(self._generated_values)
        new._generated_nodes = set(self._generated_nodes)
        new.original_nodes = list(self.original_nodes)
        new._types = dict(self._types)
        new._type_facts = {}
        new._pinned = dict(self._pinned)
        new._kept = dict(self._kept)
        new._died = dict(self._died)
        new._produced_at = dict(self._produced_at)
        new._pass_new = None if self._pass_new is None else set(self._pass_new)
        new._data_types = None if self._data_types is None else dict(self._data_types)
        new._node_types = {}  # the copy infers node by node on its own
        new._node_protos = {}
        new._nodes = {}
        for index, node in self._nodes.items():
            copied = Node(
                index=node.index,
                name=node.name,
                op_type=node.op_type,
                domain=node.domain,
                inputs=list(node.inputs),
                outputs=list(node.outputs),
                attributes=dict(node.attributes),
                doc_string=node.doc_string,
                ep=node.ep,
                implicit_inputs=list(node.implicit_inputs),
                since_version=node.since_version,
                original=node.original,
                attr_map=node.attr_map.copy(),
            )
            copied.subgraphs = {k: sub.clone(new, copied) for k, sub in node.subgraphs.items()}
            new._nodes[index] = copied
        # (compiled with mypyc, a Graph has no __dict__: its fields are fixed at compile time)
        unknown = set(getattr(self, "__dict__", ())) - _CLONED_FIELDS
        assert not unknown, f"Graph.clone does not know the fields {sorted(unknown)}"
        return new

    # ------------------------------------------------------------------ nodes
    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, index: NodeIndex) -> Node | None:
        """The live node with that index, or None if it was removed."""
        return self._nodes.get(index)

    def live(self) -> Mapping[NodeIndex, Node]:
        """The live nodes by index, as a read-only view kept current (``index in graph.live()`` asks what
        :meth:`node` asks, without a call: a visit loop asks it of every node)."""
        return types.MappingProxyType(self._nodes)

    def nodes(self) -> list[Node]:
        """Live nodes in index order (the dict's insertion order: indices only grow and are never reused)."""
        return list(self._nodes.values())

    def op_types(self) -> frozenset[str]:
        """The op types of this graph's live nodes (its subgraphs aside, any domain), from the op type index."""
        return frozenset(self._by_op)

    def has_node_of(self, op_type: str, domain: str = "") -> bool:
        """Whether a live node of this graph (its subgraphs aside) is ``domain``'s ``op_type`` (through the op type
        index: the nodes are not walked)."""
        wanted, nodes = normalize_domain(domain), self._nodes
        return any(normalize_domain(nodes[index].domain) == wanted for index in self._by_op.get(op_type, ()))

    def op_counts(self) -> dict[str, int]:
        """Op counts of this graph and its subgraphs, keyed ``op`` or ``domain.op`` (kept as nodes come and go); an
        op no node has is absent. (A dict, not a ``Counter``: the manager asks twice per pass application, and
        ``Counter``'s methods are interpreted Python.)"""
        counts = dict(self._op_count)
        for _, _, sub in self.subgraphs():
            for op, count in sub.op_counts().items():
                counts[op] = counts.get(op, 0) + count
        return counts

    def topological_order(self) -> list[Node]:
        """Live nodes in ORT's topological order (a snapshot: later removals do not affect it)."""
        nodes = self._nodes
        return [nodes[i] for i in self._current_order()]

    def candidates_in_order(self, op_types: Collection[str]) -> list[Node]:
        """The live nodes whose op type is one of ``op_types``, and those with subgraphs, in ORT's topological order
        (a snapshot, as :meth:`topological_order`): what a pass that looks only at these op types visits (the op
        type to nodes index spares it the others)."""
        order = self._current_order()
        wanted = set(self._sub_nodes)
        for op_type in op_types:
            found = self._by_op.get(op_type)
            if found:
                wanted |= found
        nodes = self._nodes
        if 8 * len(wanted) > len(order):  # many: a pass over the order costs less than sorting them
            return [nodes[i] for i in order if i in wanted]
        position = self._position
        assert position is not None
        return [nodes[i] for i in sorted(wanted, key=position.__getitem__)]

    def _current_order(self) -> list[NodeIndex]:
        order = self._order
        if order is None:  # computed once per structure: every node or edge change resets it
            order = self._order = ort_order_of_adjacency(self._nodes, self._pred, self._succ)
            self._position = None
        if self._position is None:
            self._position = {index: n for n, index in enumerate(order)}
        return order

    def max_node_index(self) -> int:
        return self._next_index

    def add_node(
        self,
        name: str,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        *,
        domain: str = "",
        attributes: dict[str, onnx.AttributeProto] | None = None,
        doc_string: str = "",
        ep: str = "",
        subgraphs: dict[str, Graph] | None = None,
        original: onnx.NodeProto | None = None,
        attr_map: StdUnorderedMap | None = None,
        mark_modified: bool = True,
    ) -> Node:
        """``Graph::AddNode``: append a node with the next index and wire its edges.

        ``attr_map`` is the attribute map to copy (for a node made from another node's attributes); without it the
        attributes are inserted into a fresh map in the order given, as a pass filling a ``NodeAttributes`` does.
        """
        self._before_edit()
        node = Node(
            index=self._next_index,
            name=name,
            op_type=op_type,
            domain=domain,
            inputs=list(inputs),
            outputs=list(outputs),
            attributes=dict(attributes or {}),
            doc_string=doc_string,
            ep=ep,
            subgraphs=dict(subgraphs or {}),
            original=original,
            attr_map=attr_map.copy() if attr_map is not None else StdUnorderedMap(memo=True),
        )
        if attr_map is None:
            node.attr_map.update(node.attributes)
        self._next_index += 1
        self._nodes[node.index] = node
        if node.subgraphs:
            self._sub_nodes.add(node.index)
        self._nx_add(node.index)
        _count_up(self._live_names, name)
        _count_up(self._op_count, node.qualified_op)
        self._index_op(node)
        self._unfilled.add(node.index)
        self._note("+", node)
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        node.since_version = self._since_version(node)
        for value in (*node.inputs, *node.outputs):  # GetOrCreateNodeArg: inputs, then outputs
            self._known(value)
        for slot, value in enumerate(node.outputs):
            if value:
                self._producer[value] = (node.index, slot)
                self._produced_at[value] = self.resolves
                self._connect_consumers_of(value)
        self._rewire_inputs(node)
        if mark_modified:
            self.modified = True
        return node

    def load_node(
        self,
        name: str,
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        domain: str,
        attributes: dict[str, onnx.AttributeProto],
        doc_string: str,
        original: onnx.NodeProto,
        attr_map: StdUnorderedMap,
    ) -> Node:
        """:meth:`add_node` for the loader, which builds a graph from scratch: the node (taking ``inputs``,
        ``outputs``, ``attributes`` and ``attr_map`` as they are) is registered, but its edges wait for
        :meth:`finish_load`, and the NodeArg map for :meth:`forget_production` (ORT's constructor fills it in its own
        order); the graph is not marked modified."""
        index = self._next_index
        self._next_index = index + 1
        # every field given, in order (cheaper than the dataclass's keywords and default factories)
        node = Node(
            index, name, op_type, domain, inputs, outputs, attributes, doc_string, "", {}, [], None, original, attr_map
        )
        self._nodes[index] = node
        self._nx_add(index)
        _count_up(self._live_names, name)
        _count_up(self._op_count, node.qualified_op)
        self._index_op(node)
        self._unfilled.add(index)
        node.since_version = self._since_version(node)
        known, producer = self._known_values, self._producer
        for slot, value in enumerate(outputs):
            if value:
                producer[value] = (index, slot)
                known.add(value)
        for value in inputs:
            if value:
                known.add(value)
        return node

    def finish_load(self) -> None:
        """Wire every node's input edges (after :meth:`load_node` of every node): :meth:`_rewire_inputs` of each,
        on a graph without edges yet but those of nodes with subgraphs."""
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        succ, pred = self._succ, self._pred
        consumed = self._consumed
        for index, node in self._nodes.items():
            if node.implicit_inputs or pred[index]:  # wired already (a node with subgraphs): as any rewiring
                self._rewire_inputs(node)
                continue
            consumed[index] = {v for v in node.inputs if v}
            self._wire_reads(index, node.inputs, succ, pred[index])

    def _index_op(self, node: Node) -> None:
        found = self._by_op.get(node.op_type)
        if found is None:
            self._by_op[node.op_type] = {node.index}
        else:
            found.add(node.index)

    def _nx_add(self, index: NodeIndex) -> None:
        # networkx's MultiDiGraph.add_node, its adjacency reached directly (as _rewire_inputs does for edges)
        self._succ[index] = {}
        self._pred[index] = {}
        self._nx._node[index] = {}

    def remove_node(self, node: Node) -> None:
        """``Graph::RemoveNode``: the node and all its edges go; its output values stay known (ORT keeps NodeArgs)."""
        self._before_edit()
        self._record_died(node)
        index = node.index
        producer = self._producer
        for slot, value in enumerate(node.outputs):
            if value and producer.get(value) == (index, slot):
                del producer[value]
        consumers = self._consumers
        for value in self._consumed.pop(index, ()):
            readers = consumers.get(value)
            if readers is not None:
                readers.discard(index)
        # networkx's MultiDiGraph.remove_node, its adjacency reached directly
        succ, pred = self._succ, self._pred
        for dst in succ[index]:
            del pred[dst][index]
        for src in pred[index]:
            del succ[src][index]
        del succ[index], pred[index], self._nx._node[index]
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        del self._nodes[index]
        self._sub_nodes.discard(index)
        _count_down(self._live_names, node.name)
        _count_down(self._op_count, node.qualified_op)
        same_op = self._by_op[node.op_type]
        same_op.discard(index)
        if not same_op:
            del self._by_op[node.op_type]
        self._note("-", node)
        self.modified = True

    def set_attribute(self, node: Node, attr: onnx.AttributeProto) -> None:
        """Add or replace an attribute (``node.AddAttributeProto``)."""
        self._before_edit()
        node.attributes[attr.name] = attr
        node.attr_map.insert(attr.name)
        self.modified = True

    def remove_attribute(self, node: Node, name: str) -> None:
        """``node.ClearAttribute``."""
        self._before_edit()
        if node.attributes.pop(name, None) is not None:
            node.attr_map.erase(name)
            self._unfilled.add(node.index)
            self.modified = True

    def set_input(self, node: Node, slot: int, value: str) -> None:
        """Point input ``slot`` of ``node`` at ``value`` (extending the input list if needed)."""
        self._before_edit()
        inputs = node.inputs
        old = inputs[slot] if slot < len(inputs) else None
        while len(inputs) <= slot:
            inputs.append("")
        inputs[slot] = value
        self._known(value)
        if old is None or node.implicit_inputs:  # the slots of implicit inputs follow the explicit ones
            self._rewire_inputs(node)
        else:
            self._rewire_slot(node, slot, old)
        self._note("~", node)
        self.modified = True

    def set_inputs(self, node: Node, values: Sequence[str]) -> None:
        """Replace the node's whole input list, shorter or longer (``node.MutableInputDefs().assign(...)``)."""
        self._before_edit()
        node.inputs = list(values)
        for value in node.inputs:
            self._known(value)
        self._rewire_inputs(node)
        self._note("~", node)
        self.modified = True

    def set_output(self, node: Node, slot: int, value: str) -> None:
        """Make ``node`` produce ``value`` at ``slot``; consumers of ``value`` get connected to it."""
        self._before_edit()
        while len(node.outputs) <= slot:
            node.outputs.append("")
        old = node.outputs[slot]
        if old and self._producer.get(old) == (node.index, slot):
            self._record_died(node, only=old)
            del self._producer[old]
            self._disconnect_consumers_of(old)
        node.outputs[slot] = value
        self._known(value)
        self._note("~", node)
        if value:
            self._producer[value] = (node.index, slot)
            self._produced_at[value] = self.resolves
            self._connect_consumers_of(value)
        self.modified = True

    def _before_edit(self) -> None:
        """Called before a pass edits the graph: the run's first inference with data (``View.DATA``), if none ran
        yet, types the graph as the Resolve before this pass application left it, not as the application's first
        rewrites make it (a Reshape whose Concat ReshapeFusion folds at this step is unshaped until the next)."""
        root = self
        while root.parent is not None:  # (inference.root_of, without the call: every edit asks)
            root = root.parent
        root._edits += 1
        if root._data_types is None and root._pass_began_at is not None:
            root._infer_data_types()

    def _note(self, kind: str, node: Node) -> None:
        if kind != "+":
            self._pass_rewired = True
        root = self
        while root.parent is not None:
            root = root.parent
        journal = root._journal
        key = (id(self), node.index)
        before = journal.get(key)
        if before is not None:
            if kind == "~":
                return  # added or already rewired in this stretch
            if kind == "-" and before[0] == "+":
                del journal[key]  # added and removed in this stretch: neither
                return
        journal[key] = (kind, node.name, node.qualified_op)

    def node_proto(self, node: Node) -> onnx.NodeProto:
        """``Node::ToProto`` of a node without subgraphs: name, op, domain and doc string (when not empty),
        attributes in ``NodeAttributes`` order, inputs, outputs. Kept while the node stays as it is (the inference
        runs and the saver each write every node), so the caller must not edit it (a repeated field's ``append``
        copies it)."""
        assert not node.subgraphs, "node_proto: a node with subgraphs is written with its subgraphs"
        attributes = node.attributes
        head = (node.name, node.op_type, node.domain, node.doc_string)
        names, protos = tuple(attributes), tuple(attributes.values())  # the protos themselves: never edited in place
        order_state = node.attr_map.snapshot()  # the map's key order, when the map is a shared snapshot
        cached = self._node_protos.get(node.index)
        if (
            cached is not None
            and cached[0] == head
            and cached[1] == node.inputs
            and cached[2] == node.outputs
            and cached[3] == names
            and all(map(operator.is_, cached[4], protos))
            and order_state is not None
            and cached[5] is order_state
        ):
            found: onnx.NodeProto = cached[6]
            return found
        proto = node_proto_head(node)
        proto.attribute.extend(attributes[name] for name in node.attr_map if name in attributes)
        proto.input.extend(node.inputs)
        proto.output.extend(node.outputs)
        self._node_protos[node.index] = (head, list(node.inputs), list(node.outputs), names, protos, order_state, proto)
        return proto

    def take_changes(self) -> Changes:
        """The nodes added, removed and rewired in this graph and its subgraphs since the last call (or the load), in
        the order first touched; the record starts again empty. Call it on the main graph."""
        journal, self._journal = self._journal, {}
        if not journal:
            return _NO_CHANGES  # (most pass applications change nothing; the record is immutable)
        out: dict[str, list[tuple[NodeIndex, str, str]]] = {"+": [], "-": [], "~": []}
        for (_, index), (kind, name, op) in journal.items():
            out[kind].append((index, name, op))
        return Changes(tuple(out["+"]), tuple(out["-"]), tuple(out["~"]))

    # ------------------------------------------------------------------ edges and values
    def production_generation(self, value: str) -> int | None:
        """``resolves`` at the time a pass last made a node produce ``value`` (None: produced as loaded).

        The Resolve right after that pass is the first to infer the value's type from its new producer; where the
        inferred shape conflicts with the NodeArg's, ORT's lenient merge clears the shape (or the conflicting dims),
        and any later Resolve fills the cleared shape in again from inference.
        """
        return self._produced_at.get(value)

    def forget_production(self) -> None:
        """Mark every current producer as loaded (called once the model is built).

        The NodeArg map is then made again in the order ORT's ``Graph`` constructor fills ``node_args_`` (see
        :meth:`_seed_node_args`).
        """
        self._produced_at.clear()
        self._seed_node_args()

    def _seed_node_args(self) -> None:
        """``node_args_`` as ORT's ``Graph`` constructor fills it: typed graph inputs (every input, in a subgraph),
        then (IR 4 and later) each initializer no input names, in ``initializer()`` order (Constant nodes' tensors
        last), then typed graph outputs, then each node in file order, its inputs then its outputs."""
        names = [  # the names in insertion order, inserted at once
            value.name
            for value in self.inputs
            if value.name and (self.parent is not None or value.type.WhichOneof("value") is not None)
        ]
        if self.ir_version >= 4:
            names += self._init_order
        names += (value.name for value in self.outputs if value.name and value.type.WhichOneof("value") is not None)
        for node in self._nodes.values():
            names += node.inputs
            names += node.outputs
        arg_map = StdUnorderedMap()
        arg_map.update(names)
        self._arg_map = arg_map

    def producer(self, value: str) -> Node | None:
        """The node producing ``value`` in this graph, or None (graph input, initializer, outer scope, missing)."""
        found = self._producer.get(value)
        return self._nodes[found[0]] if found else None

    def producer_slot(self, value: str) -> int | None:
        found = self._producer.get(value)
        return found[1] if found else None

    def consumers(self, value: str) -> list[Node]:
        """Nodes that read ``value`` explicitly or through a subgraph, in index order."""
        return [self._nodes[i] for i in sorted(self._consumers.get(value, ()))]

    def output_edges(self, node: Node) -> list[Edge]:
        """Output edges in ORT's ``EdgeEndCompare`` order: consumer index, then source slot, then input slot (a new
        list each call)."""
        src = node.index
        last = self._out_edges
        if last is not None and last[0] == src:
            return list(last[1])
        edges: list[Edge] = []
        # (plain loops: a node has one or two edges, for which a comprehension's own frame costs more; each edge's
        # data holds its Edge, made when the edge was)
        for keys in self._succ[src].values():
            for data in keys.values():
                edges.append(data["edge"])
        if len(edges) > 1:
            edges.sort()
        self._out_edges = (src, edges)
        return list(edges)

    def input_edges(self, node: Node) -> list[Edge]:
        """Input edges (implicit-input edges included) by source node, then source slot, then input slot (a new list
        each call)."""
        dst = node.index
        last = self._in_edges
        if last is not None and last[0] == dst:
            return list(last[1])
        edges: list[Edge] = []
        for keys in self._pred[dst].values():
            for data in keys.values():
                edges.append(data["edge"])
        if len(edges) > 1:
            edges.sort(key=_INPUT_EDGE_KEY)
        self._in_edges = (dst, edges)
        return list(edges)

    def output_edge_count(self, node: Node) -> int:
        """``Node::GetOutputEdgesCount``: ``len(output_edges(node))`` without making the edges."""
        count = 0
        for keys in self._succ[node.index].values():  # (a loop: cheaper than sum(map(len, ...)) compiled)
            count += len(keys)
        return count

    def input_edge_count(self, node: Node) -> int:
        """``Node::GetInputEdgesCount`` (implicit-input edges included), without making the edges."""
        count = 0
        for keys in self._pred[node.index].values():
            count += len(keys)
        return count

    def input_nodes(self, node: Node) -> list[Node]:
        """Producers of the node's inputs, one per input edge, in ascending index order."""
        return [self._nodes[src] for src in sorted(s for s, keys in self._pred[node.index].items() for _ in keys)]

    def graph_output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def is_graph_output(self, value: str) -> bool:
        return value in self.output_index()

    def input_index(self) -> dict[str, onnx.ValueInfoProto]:
        """The graph inputs by name (the first of a repeated name), kept until ``inputs`` is replaced or grows."""
        cached, values = self._input_index, self.inputs
        if cached is None or cached[0] is not values or cached[1] != len(values):  # (asked all the time: no call)
            cached = self._input_index = _by_name(values)
        return cached[2]

    def output_index(self) -> dict[str, onnx.ValueInfoProto]:
        """The graph outputs by name (the first of a repeated name), as :meth:`input_index`."""
        cached, values = self._output_index, self.outputs
        if cached is None or cached[0] is not values or cached[1] != len(values):
            cached = self._output_index = _by_name(values)
        return cached[2]

    def graph_input_names(self) -> list[str]:
        """Graph inputs as listed in the model (for IR < 4 they include initializers)."""
        return [i.name for i in self.inputs]

    def value_names(self) -> set[str]:
        """Every value name this graph knows (ORT's NodeArg map)."""
        return set(self._known_values)

    def reads_only_defined_values(self) -> bool:
        """Whether every value a node of this graph reads (explicitly or through a subgraph) is a graph input, an
        initializer (sparse ones included) or a node's output here: ORT's ``BuildConnections`` check, without the
        enclosing graphs' values (the loader's fast path, on a graph as built; see ``model._check_inputs_defined``)."""
        producer, inits = self._producer, self._inits
        inputs = {v.name for v in self.inputs}
        inputs.update(s.values.name for s in self.sparse_initializers)
        return all(v in producer or v in inits or v in inputs for v in self._consumers)

    def has_value(self, name: str) -> bool:
        """Whether this graph knows a value of that name (``GetNodeArg(name) != nullptr``)."""
        return name in self._known_values

    # ------------------------------------------------------------------ value types
    def value_type(self, name: str) -> onnx.TypeProto | None:
        """The type the graph holds for the value's NodeArg, or None: what the last
        :func:`~qdqopt.graph.inference.infer_types` gave it (the Resolve partitioning runs), or a pass set since
        (:meth:`set_value_type`); nothing is inferred here.

        A value this graph reads from an enclosing scope has the enclosing graph's type. What a pass asks of a value
        goes through :meth:`shape`, :meth:`elem_type` and :meth:`type_proto`, which also know initializers and
        declared inputs; kernel matching and InsertCast read this directly.
        """
        found = self._types.get(name)
        if found is None and self.parent is not None and not self.defines(name):
            return self.parent.value_type(name)
        return found

    def set_value_type(self, name: str, type_proto: onnx.TypeProto) -> None:
        """Give the value's NodeArg a type (``GetOrCreateNodeArg(name, type)``, ``Graph::SetNodeArgType``)."""
        copied = onnx.TypeProto()
        copied.CopyFrom(type_proto)
        self._types[name] = copied

    def adopt_value_type(self, name: str, type_proto: onnx.TypeProto) -> None:
        """:meth:`set_value_type` with a TypeProto the caller gives up (kept as it is, not copied; never edit it)."""
        self._types[name] = type_proto

    def pin_value_type(self, name: str, type_proto: onnx.TypeProto) -> None:
        """Set the type of the value's NodeArg outright, as a pass editing NodeArgs does (``NodeArg::SetShape``,
        ``Graph::SetNodeArgType``).

        The saver then starts from this type instead of the one inferred at load: a declared value (value_info, a
        graph output) is written with it, refined only where a later Resolve's inference fills a dim it leaves
        unknown, and a value no node produces any more keeps it as it is.
        """
        copied = onnx.TypeProto()
        copied.CopyFrom(type_proto)
        self._pinned[name] = copied

    def keep_value_type(self, name: str, type_proto: onnx.TypeProto) -> None:
        """Record the type the value's NodeArg had when a pass removed or replaced its producer.

        ORT keeps the NodeArg, with the type the Resolves so far gave it (which can know more than the load-time
        inference); a value no node produces any more is never inferred again. The saver writes this type for the
        value if, when saving, no node produces it (it then stands for the type the value had when it died).
        """
        copied = onnx.TypeProto()
        copied.CopyFrom(type_proto)
        self._kept[name] = copied

    def _record_died(self, node: Node, only: str | None = None) -> None:
        """Keep the type a saved value (value_info) had at the last Resolve before its producer goes.

        ORT's NodeArg keeps the type the Resolves gave it while a node produced it, which can know more than the
        load-time inference (a Reshape whose shape ReshapeFusion made constant, say); it is never inferred again.
        The types the pass application sees (``View.PASS``, inferred again here once per application when the
        value's shape is incomplete) stand for that Resolve's, also when inferred after the application's first
        rewrites (a QDQ node unit fused before the value's own: what it removed does not type the value). A value a
        pass re-produces (:meth:`set_output`, the DQ -> Reshape -> Q drop) dies here too; ``only`` names it."""
        saved = [
            v
            for v in node.outputs
            if v and v in self.value_info_names and self._producer.get(v) is not None and only in (None, v)
        ]
        if not saved or self._pass_new is None:
            return
        if (
            not self._pass_refreshed
            and not self._pass_rewired
            and not all(_complete(self._types.get(v)) for v in saved)
        ):
            self._refresh_pass_types()
        for value in saved:
            found = self._types.get(value)
            if found is not None and value not in self._pass_new:
                self._died[value] = found
                kept = self._kept.get(value)
                if kept is not None:  # a type kept earlier, refined by the Resolves since
                    self._kept[value] = inference.fill_unknown(kept, found)

    def _refresh_pass_types(self) -> None:
        """Infer the types ``View.PASS`` reads again (once per pass application)."""
        self._pass_refreshed = True
        inference.infer_types(inference.root_of(self))

    def died_types(self) -> dict[str, onnx.TypeProto]:
        """The types saved values had when their producer was removed, for those no node produces now: the saver
        fills what the load-time types leave unknown with them (as a Resolve merges an inferred type)."""
        return {n: t for n, t in self._died.items() if n not in self._producer}

    def pinned_types(self) -> dict[str, onnx.TypeProto]:
        """The types the saver must start from for this graph's values, by name: those passes pinned
        (:meth:`pin_value_type`), and those kept (:meth:`keep_value_type`) for values no node produces now."""
        kept = {n: t for n, t in self._kept.items() if n not in self._producer}
        return {**kept, **self._pinned}

    # ------------------------------------------------------------------ what passes ask of a value
    def begin_pass(self) -> None:
        """A pass application on this graph begins (``GraphTransformer::ApplyImpl`` after a Resolve): what
        ``View.PASS`` calls untyped, and when ``View.PASS``/``View.FILLED`` may infer again, count from here.
        :class:`~qdqopt.passes.base.GraphTransformer` calls it before ``unsupported`` and each ``apply_impl``."""
        self._pass_new = set()
        self._pass_refreshed = False
        self._pass_rewired = False
        if self.parent is None:
            self._pass_began_at = self._structure_stamp()

    def shape(self, value: str, *, view: View = View.PASS, as_written: bool = False) -> ShapeDims | None:
        """``NodeArg::Shape()``: the value's dims (see :data:`ShapeDims`), or None when its shape is unknown.

        An initializer's NodeArg has the tensor's dims, a graph input's its declared shape; any other value's is the
        type the last Resolve gave it, as ``view`` emulates it (:class:`View`). ``as_written`` keeps the dim_param
        names ONNX's inference invents (``unk__<n>``), which otherwise read as unknown dims (ORT invents none), for
        the passes that compare or copy names as the type holds them.
        """
        if view is View.DATA:
            return self._data_shape(value, as_written)
        if view is View.FILLED:
            filled = self._filled_shape(value)
            return None if filled is None else [*filled]
        owner = self.initializer_owner(value) if value else None
        if owner is not None and _declared_input_type(owner, value) is None:  # type_proto's first case, made short
            return [int(d) for d in owner._inits[value].dims]
        found = self.type_proto(value)
        if found is None:
            return None
        facts = self._facts(found)
        dims = facts[3] if as_written else facts[2]
        return None if dims is None else [*dims]

    def elem_type(self, value: str, *, view: View = View.PASS) -> int | None:
        """``TypeAsProto()->tensor_type().elem_type()``: the value's element type (``TensorProto.DataType``), None
        when unknown or not a tensor. An initializer's is its tensor's; any other value's as ``view`` emulates the
        NodeArg's type (``View.PASS`` or ``View.DATA``; ``View.FILLED`` is for shapes only)."""
        if view is View.DATA:
            return self._data_elem_type(value)
        if view is View.FILLED:
            raise ValueError("View.FILLED answers shapes only")
        owner = self.initializer_owner(value) if value else None
        if owner is not None and _declared_input_type(owner, value) is None:  # type_proto's first case, made short
            return int(owner._inits[value].data_type) or None
        found = self.type_proto(value)
        return None if found is None else self._elem(found)

    def type_proto(self, value: str) -> onnx.TypeProto | None:
        """``NodeArg::TypeAsProto()`` as a pass application sees it (``View.PASS``), or None.

        An initializer's NodeArg (of this graph or, unless a local value shadows it, an enclosing one) has the
        tensor's type and dims, unless a graph input of that name declares it; a graph input of this graph has its
        declared type; a value made since the pass began is untyped; any other value has the type :meth:`value_type`
        holds. When that is none, or has no shape, the whole model's types are inferred again (once per pass
        application, :func:`~qdqopt.graph.inference.infer_types`): ORT would have typed it at the last Resolve.
        """
        if not value:
            return None
        owner = self.initializer_owner(value)
        if owner is not None:
            declared = _declared_input_type(owner, value)
            if declared is not None:
                return declared
            tensor = owner.initializer(value)
            assert tensor is not None
            return tensor_type_proto(tensor.data_type, list(tensor.dims))
        declared = _declared_input_type(self, value)
        if declared is not None:
            return declared
        if value not in self._known_values or (self._pass_new is not None and value in self._pass_new):
            return None  # created by this pass: untyped until Resolve
        found = self.value_type(value)
        shapeless = found is not None and found.HasField("tensor_type") and not found.tensor_type.HasField("shape")
        if (found is None or shapeless) and not self._pass_refreshed:
            # a value a pass typed without a shape (InsertCast's Casts) has the shape the last Resolve inferred
            self._refresh_pass_types()
            found = self.value_type(value)
        return found

    def _filled_shape(self, value: str) -> list[int | None] | None:
        """``View.FILLED``: see :class:`View`."""
        scope: Graph | None = self
        while scope is not None:
            if value in scope.input_index():
                return _declared_shape(scope, value)
            tensor = scope.initializer(value)
            if tensor is not None:
                return [int(d) for d in tensor.dims[:]]
            if scope.defines(value):
                break
            scope = scope.parent
        found = merge_declared(self, value, self._typed_dims(value))
        if found is not None and all(d is not None for d in found):
            return found
        if not self._pass_refreshed:
            self._refresh_pass_types()
            found = merge_declared(self, value, self._typed_dims(value))
        return found

    def _facts(self, found: onnx.TypeProto) -> _TypeFacts:
        """What the type ``found`` says (:data:`_TypeFacts`), read once per TypeProto object: the types the graph
        holds are replaced, never edited in place, and reading a upb message's fields costs hundreds of
        instructions each. Kept by the object's id with the object itself; forgotten in bulk when they outnumber
        the graph's values four times over (old types, replaced since, are not kept alive for long)."""
        memo = self._type_facts
        key = id(found)
        facts = memo.get(key)
        if facts is not None and facts[0] is found:
            return facts
        if len(memo) >= 4 * (len(self._known_values) + 64):
            memo.clear()
        facts = memo[key] = _read_type_facts(found)
        return facts

    def _elem(self, found: onnx.TypeProto) -> int | None:
        """``_facts(found)[1]``, the element type alone: from the facts already read, else from the type itself
        without reading its shape (a type freshly inferred, asked for its element type only, costs two field reads
        instead of every dim's)."""
        facts = self._type_facts.get(id(found))
        if facts is not None and facts[0] is found:
            return facts[1]
        return int(found.tensor_type.elem_type) or None  # (an unset oneof member reads as empty: not a tensor, 0)

    def _typed_dims(self, value: str) -> list[int | None] | None:
        found = self.value_type(value)
        dims = None if found is None else self._facts(found)[2]
        return None if dims is None else [d if isinstance(d, int) else None for d in dims]

    def _data_elem_type(self, value: str, _depth: int = 0) -> int | None:
        """``View.DATA``'s element type: see :class:`View`. A value made since the last inference gets the type its
        schema's constraints bind from its inputs' (``_depth`` bounds that walk), else its node-by-node inference's."""
        if not value:
            return None
        tensor = self.constant_initializer(value)
        if tensor is None and value in self._inits:
            tensor = self._inits[value]
        if tensor is not None:
            return int(tensor.data_type)
        known = self._data_types
        if known is not None and value not in known:  # a value made since the last inference
            node = self.producer(value)
            if node is not None and not node.subgraphs and _depth < _BOUND_DEPTH:
                bound = inference.bound_elem_type(node, value, lambda v: self._data_elem_type(v, _depth + 1))
                if bound is not None:
                    return bound
            local = self._node_type(value)
            if local is not None and local.HasField("tensor_type") and local.tensor_type.elem_type:
                return int(local.tensor_type.elem_type)
        found = self._data_type(value)
        return None if found is None else self._elem(found)

    def _data_shape(self, value: str, as_written: bool = False) -> ShapeDims | None:
        """``View.DATA``'s shape: an initializer's dims (unless a graph input of that name declares the type), a graph
        input's declared shape, the inferred one; a value read from an enclosing scope has that scope's."""
        if not value:
            return None
        declared = self.input_index().get(value)
        tensor = self._inits.get(value)
        if tensor is not None and declared is None:
            return [int(d) for d in tensor.dims[:]]
        found = declared.type if declared is not None else self._data_type(value)
        if found is None:
            if self.parent is not None and not self.defines(value):
                return self.parent._data_shape(value, as_written)
            return None
        facts = self._facts(found)
        dims = facts[3] if as_written else facts[2]
        return None if dims is None else [*dims]

    def _data_type(self, value: str) -> onnx.TypeProto | None:
        """The type the last inference with data gave the value; the inference runs (again) when the value has none
        and nodes were added or removed since (ORT infers at each Resolve, so a NodeArg's type is stable between
        passes)."""
        known = self._data_types
        root = inference.root_of(self)
        if known is not None and value in known:
            found = known[value]
            if not (root._data_stale_at_pass_start() and _shape_incomplete(found)):
                return found
        elif known is not None and root._data_typed_at == root._structure_stamp():
            return None
        root._infer_data_types()
        return (self._data_types or {}).get(value)

    def seed_data_types(self, types: dict[str, onnx.TypeProto]) -> None:
        """Give the main graph, as loaded, the types of its values that the run's first inference with data
        (``View.DATA``) would give while the graph stays as loaded: the loader's, when it knows they are the same
        (:func:`qdqopt.graph.model.load_model`). Used instead of that inference if nothing changed before it ran."""
        self._load_data_types = (types, self._load_state())

    def seed_pass_types(self, types: dict[str, onnx.TypeProto]) -> None:
        """Give the main graph, as loaded, the types of its values that the run's first Resolve inference
        (``View.PASS``, :func:`~qdqopt.graph.inference.infer_types`) would give: the loader's, when it knows they
        are the same on the graph as loaded (:func:`qdqopt.graph.model.load_model`). Used instead of that inference
        if every node still types as at load then (:meth:`seeded_pass_types`)."""
        if self.max_node_index() != len(self._nodes):
            return  # (the loader numbers the nodes from 0: the snapshot below is by index)
        # the nodes as loaded, in flat lists (a container per node would cost the collector's time at load)
        loaded = _LoadedNodes()
        for node in self._nodes.values():
            loaded.ops.append(node.op_type)
            loaded.domains.append(node.domain)
            loaded.starts.append(len(loaded.values))
            loaded.values.extend(node.inputs)
            loaded.starts.append(len(loaded.values))
            loaded.values.extend(node.outputs)
            loaded.attr_starts.append(len(loaded.attr_names))
            loaded.attr_names.extend(node.attributes)
            loaded.attrs.extend(node.attributes.values())
        loaded.starts.append(len(loaded.values))
        loaded.attr_starts.append(len(loaded.attr_names))
        self._load_pass_types = _PassSeed(
            types,
            self.max_node_index(),
            dict(self._inits),
            list(self.inputs),
            list(self.outputs),
            list(self.value_info),
            loaded,
        )

    def seeded_pass_types(self) -> dict[str, onnx.TypeProto] | None:
        """The types the run's first :func:`~qdqopt.graph.inference.infer_types` gives this main graph, from the
        seeded load-time types (:meth:`seed_pass_types`), or None: infer them. The seed is asked once.

        They are the load-time types if no type was set since the load and every node reads values typed as those it
        read at load: no node was added; no initializer was added or replaced (removed ones are unused, which the
        inference does not see); the graph's inputs, outputs and value_info are the loaded ones; and each node has its
        op, outputs and attributes as loaded (plus the schema defaults Resolve filled in), and inputs renamed only to
        values of the same load-time type (Level1's EliminateIdentity and Cast removals rename a consumer's input
        to the removed node's), where neither value is an initializer whose data the inference reads (unless the node
        is a QuantizeLinear or DequantizeLinear, whose inference reads no input's data). Each value keeps the type the
        inference's storage would give it: a node output, graph input, output or value_info entry its load-time type,
        an initializer its element type."""
        seed, self._load_pass_types = self._load_pass_types, None
        if seed is None or self._types or self.max_node_index() != seed.next_index:
            return None
        for now, then in ((self.inputs, seed.inputs), (self.outputs, seed.outputs), (self.value_info, seed.value_info)):
            if len(now) != len(then) or any(a is not b for a, b in zip(now, then, strict=True)):
                return None
        for name, tensor in self._inits.items():
            if seed.inits.get(name) is not tensor:
                return None
        defaults: dict[tuple[str, str], dict[str, onnx.AttributeProto]] = {}
        made: dict[str, onnx.TypeProto | None] = {}  # the type an initializer is read as, by name
        for index, node in self._nodes.items():
            if not self._typed_as_loaded(node, index, seed, defaults, made):
                return None
        types = seed.types
        out: dict[str, onnx.TypeProto] = {}
        for vi in self.inputs:
            found = types.get(vi.name, vi.type if vi.HasField("type") else None)
            if found is not None and known_type(found):
                out[vi.name] = found
        for node in self._nodes.values():
            for value in node.outputs:
                found = types.get(value) if value else None
                if found is not None and known_type(found):
                    out[value] = found
        for vi in (*self.outputs, *self.value_info):
            found = types.get(vi.name)
            if found is not None and known_type(found):
                out[vi.name] = found
        for name, tensor in self._inits.items():
            out[name] = inference.elem_only(tensor.data_type)
        return out

    def _typed_as_loaded(
        self,
        node: Node,
        index: NodeIndex,
        seed: _PassSeed,
        defaults: dict[tuple[str, str], dict[str, onnx.AttributeProto]],
        made: dict[str, onnx.TypeProto | None],
    ) -> bool:
        """Whether ``node`` types as node ``index`` did when loaded (:meth:`seeded_pass_types`)."""
        at: int = index  # (a node index is a Python object, for dicts and sets; here it indexes typed lists)
        loaded = seed.nodes
        op_type, domain = loaded.ops[at], loaded.domains[at]
        if node.op_type != op_type or node.domain != domain:
            return False
        values, starts = loaded.values, loaded.starts
        first_input, first_output, end = starts[2 * at], starts[2 * at + 1], starts[2 * at + 2]
        outputs, inputs = node.outputs, node.inputs
        if len(outputs) != end - first_output or len(inputs) != first_output - first_input:
            return False
        for slot, value in enumerate(outputs):
            if values[first_output + slot] != value:
                return False
        now = node.attributes
        first_attr, end_attr = loaded.attr_starts[at], loaded.attr_starts[at + 1]
        for position in range(first_attr, end_attr):
            if now.get(loaded.attr_names[position]) is not loaded.attrs[position]:
                return False
        if len(now) != end_attr - first_attr:  # the others must be the schema defaults Resolve filled in
            key = (domain, op_type)
            found = defaults.get(key)
            if found is None:
                schema = self.schema(node)
                found = defaults[key] = dict(schema.default_list) if schema is not None else {}
            names = set(loaded.attr_names[first_attr:end_attr])
            if any(attr is not found.get(name) for name, attr in now.items() if name not in names):
                return False
        reads_no_data = normalize_domain(domain) == "" and op_type in _TYPED_WITHOUT_DATA
        for slot, value in enumerate(inputs):
            then = values[first_input + slot]
            if then == value:
                continue
            if not then or not value:
                return False
            before = self._loaded_input_type(then, seed.inits, seed.types, reads_no_data, made)
            after = self._loaded_input_type(value, self._inits, seed.types, reads_no_data, made)
            if before is None or after is None or before != after:
                return False
        return True

    def _loaded_input_type(
        self,
        value: str,
        inits: dict[str, onnx.TensorProto],
        types: dict[str, onnx.TypeProto],
        reads_no_data: bool,
        made: dict[str, onnx.TypeProto | None],
    ) -> onnx.TypeProto | None:
        """The type a node reading ``value`` is given by the inference, from the load-time types; None where an
        initializer's data would be given too (unless the node reads none)."""
        tensor = inits.get(value)
        if tensor is None:
            return types.get(value)
        if not reads_no_data and inference.data_given(self, value, tensor):
            return None
        if value not in made:
            made[value] = tensor_type_proto(tensor.data_type, list(tensor.dims))
        return made[value]

    def _load_state(self) -> tuple[object, ...]:
        """What the seeded types depend on besides the nodes' and initializers' edits, which all go through
        :meth:`_before_edit`: the structure, the initializers (one may be removed without an edit) and the outputs."""
        return (self._structure_stamp(), len(self._inits), tuple(self.graph_output_names()))

    def _infer_data_types(self) -> None:
        """Run the inference with data over this main graph and keep its types (``View.DATA``); the first time, the
        seeded load-time types stand for it if the graph is as loaded."""
        seeded, self._load_data_types = self._load_data_types, None
        if seeded is not None and self._data_types is None and seeded[1] == self._load_state():
            inits, inputs = self._inits, self.input_index()
            declared = {vi.name for vi in (*self.outputs, *self.value_info)}
            # an initializer is typed as infer_with_data types it: as a graph output or by its value_info entry,
            # else by its dims when not given its data, else not at all (a Constant node's output, typed at load, is
            # an initializer since)
            types = {
                name: found
                for name, found in seeded[0].items()
                if name not in inits or name in inputs or name in declared
            }
            for name, tensor in inits.items():
                if name not in inputs and not inference.data_given(self, name, tensor):
                    types[name] = tensor_type_proto(tensor.data_type, tensor.dims)
            self._data_types = types
        else:
            self._keep_data_types(inference.infer_with_data(self))
        self._data_typed_at = self._structure_stamp()

    def _data_stale_at_pass_start(self) -> bool:
        """Whether nodes were added or removed between the last inference with data and the start of the pass
        application under way, which has not changed the graph yet: an inference now gives the types the Resolve
        before this pass gave ORT's NodeArgs (a shape that a fold or fusion of an earlier pass made inferable)."""
        began = self._pass_began_at
        return began is not None and self._data_typed_at != began and self._structure_stamp() == began

    def _keep_data_types(self, inferred: onnx.GraphProto) -> None:
        types = self._data_types
        if types is None:
            types = self._data_types = {}
        for vi in (*inferred.input[:], *inferred.output[:], *inferred.value_info[:]):
            if vi.HasField("type"):
                name, found = vi.name, vi.type
                previous = types.get(name)
                # what this inference leaves unknown the NodeArg keeps from before (ORT merges, never clears a dim
                # for want of information: a DQ duplicated from a Loop's output, whose declared dims ONNX cannot
                # infer, feeds values that keep theirs; knownx/fz_loop_output_nhwc)
                types[name] = found if previous is None else inference.fill_unknown(found, previous)
        if not self._sub_nodes:
            return
        order = self.topological_order()
        if len(order) != len(inferred.node):
            return
        for position, node in enumerate(order):
            if not node.subgraphs:
                continue
            for attr in inferred.node[position].attribute[:]:
                sub = node.subgraphs.get(attr.name)
                if sub is not None and attr.HasField("g"):
                    sub._keep_data_types(attr.g)

    def state_stamp(self) -> tuple[int, ...]:
        """Changes whenever this graph or a nested one changes as a pass can change it: a node edited, added or
        removed, a name generated, an initializer or a NodeArg's type added or removed, the graph's inputs, outputs or
        value_info grown or shrunk, a Resolve run. Two equal stamps of one graph, taken with nothing but pass
        applications that reported no change between them, mean the graph is the same (the manager's
        ``_Run.apply`` replays a pass that found nothing on it)."""
        out = [self._edits]
        self._stamp_into(out)
        return tuple(out)

    def _stamp_into(self, out: list[int]) -> None:
        out += (
            self._next_index,
            len(self._nodes),
            self._counter,
            len(self._generated_values),
            len(self._generated_nodes),
            len(self._inits),
            len(self._pinned),
            len(self._kept),
            len(self._died),
            len(self._types),
            self.resolves,
            len(self.inputs),
            len(self.outputs),
            len(self.value_info),
        )
        for _, _, sub in self.subgraphs():
            sub._stamp_into(out)

    def _structure_stamp(self) -> tuple[int, ...]:
        """Changes whenever a node is added to or removed from the graph or a nested one."""
        out = [self.max_node_index(), len(self)]
        for _, _, sub in self.subgraphs():
            out.extend(sub._structure_stamp())
        return tuple(out)

    def _node_type(self, value: str) -> onnx.TypeProto | None:
        """The type ONNX's inference gives a value made since the last inference with data, node by node from the
        values that inference typed (``InferAndVerifyTypeMatch`` of each producer in turn, as Resolve runs it); None
        where that is not enough (an op ONNX has no schema for, a subgraph, a graph input of unknown type)."""
        known = self._data_types or {}
        memo = self._node_types
        pending = [value]
        while pending:  # depth first, each producer after the producers of its inputs
            current = pending[-1]
            node = self.producer(current)
            if node is None or node.subgraphs:
                return None
            key = (current, node.index)
            if key in memo:
                pending.pop()
                continue
            missing = [
                v
                for v in node.inputs
                if v and v not in known and v not in self._inits and (v, inference.producer_index(self, v)) not in memo
            ]
            if missing:
                if len(pending) > len(self):
                    return None
                pending.extend(missing)
                continue
            pending.pop()
            memo[key] = inference.infer_node_output(self, node, current, known, memo)
        node = self.producer(value)
        return memo.get((value, node.index)) if node is not None else None

    def refine_data_type(self, value: str, inferred: onnx.TypeProto) -> None:
        """Merge a type a pass re-inferred for a value (``Graph::UpdateShapeInference``) into the types ``View.DATA``
        reads, as the NodeArg's type is updated in ORT (nothing to do while none are held: they are inferred from
        the graph as it is when first asked for)."""
        if self._data_types is not None:
            self._data_types[value] = inference.merge_type(self._data_types.get(value), inferred)

    # ------------------------------------------------------------------ initializers
    def initializer_names(self, *, verbatim: bool = False) -> list[str]:
        """Initializer names in ORT's saved order.

        Removal swaps with the last entry (``RemoveInitializedTensor``), except that a subgraph saved verbatim (no
        graph of the model modified) shows its file order minus the removed entries (both observed on 1.32.0).
        """
        if verbatim and self.parent is not None:
            return list(self._verbatim_order)
        return list(self._init_order)

    def initializer_map_order(self) -> list[str]:
        """Initializer names in ``GetAllInitializedTensors()`` (``name_to_initial_tensor_``) iteration order."""
        return self._init_map.keys()

    def can_override_initializers(self) -> bool:
        """``Graph::CanOverrideInitializer``: from IR 4 on, an initializer listed as a graph input is overridable."""
        return self.ir_version >= 4

    def initializer(self, name: str) -> onnx.TensorProto | None:
        return self._inits.get(name)

    def is_initializer(self, name: str) -> bool:
        return name in self._inits

    def is_constant_initializer(self, name: str, *, check_outer_scope: bool = True) -> bool:
        """An initializer that no graph input can override (``graph_utils::IsConstantInitializer``)."""
        if name in self._inits:
            return not (self.ir_version >= 4 and name in self.input_index())
        if check_outer_scope and self.parent is not None and not self.defines(name):
            return self.parent.is_constant_initializer(name)
        return False

    def array(self, name: str) -> np.ndarray:
        """An initializer's value as numpy (converted once, then cached)."""
        if name not in self._arrays:
            proto = self._inits[name]
            self._arrays[name] = tensor_array(proto)
        return self._arrays[name]

    def add_initializer(self, tensor: onnx.TensorProto) -> None:
        """``Graph::AddInitializedTensor``: appended at the end."""
        self._before_edit()
        name = tensor.name
        if name in self._inits:
            raise ModelError(f"initializer {name!r} is defined twice (ORT fails the session)")
        declared = next((v for v in self.inputs if v.name == name and v.type.HasField("tensor_type")), None)
        if declared is not None and declared.type.tensor_type.elem_type not in (0, tensor.data_type):
            kind = onnx.TensorProto.DataType.Name
            raise ModelError(  # Resolve's type check, in ORT's words
                f"Type Error: Data in initializer {name!r} has element type tensor({kind(tensor.data_type).lower()}) "
                f"but usage of initializer in graph expects "
                f"tensor({kind(declared.type.tensor_type.elem_type).lower()})"
            )
        self._inits[name] = tensor
        self._init_pos[name] = len(self._init_order)
        self._init_order.append(name)
        self._verbatim_order[name] = None
        self._init_map.insert(name)
        self._known(name)
        self.modified = True

    def remove_initializer(self, name: str) -> None:
        """``Graph::RemoveInitializedTensor``: the entry is swapped with the last one and the last is dropped."""
        index = self._init_pos.pop(name)
        moved = self._init_order.pop()
        if moved != name:
            self._init_order[index] = moved
            self._init_pos[moved] = index
        del self._verbatim_order[name]
        del self._inits[name]
        self._init_map.erase(name)
        self._arrays.pop(name, None)

    # ------------------------------------------------------------------ names
    def generate_value_name(self, base: str) -> str:
        """``Graph::GenerateNodeArgName``."""
        name = base
        while name in self._known_values or name in self._generated_values:
            name = f"{base}_token_{self._counter}"
            self._counter += 1
        self._generated_values.add(name)
        return name

    def generate_node_name(self, base: str) -> str:
        """``Graph::GenerateNodeName``."""
        live = self._live_names
        name = base
        while name in live or name in self._generated_nodes:
            name = f"{base}_token_{self._counter}"
            self._counter += 1
        self._generated_nodes.add(name)
        return name

    def new_value(self, base: str) -> str:
        """Generate a value name and register it as a (not yet typed) NodeArg."""
        name = self.generate_value_name(base)
        self._known(name)
        self._untyped_values.add(name)
        return name

    # ------------------------------------------------------------------ schema and resolve
    def opset(self, domain: str) -> int | None:
        return self.opsets.get(normalize_domain(domain))

    def schema(self, node: Node) -> OpSchema | None:
        key = (node.domain, node.op_type)
        found = self._schemas.get(key, _NO_SCHEMA)
        if found is _NO_SCHEMA:  # the opsets never change once loaded
            found = self._schemas[key] = lookup(node.domain, node.op_type, self.opset(node.domain))
        return found  # type: ignore[return-value]

    def fill_default_attributes(self) -> None:
        """Add every schema-default attribute missing on a node (part of ``Resolve``; recursive).

        Only the nodes that can miss one are looked at: those added, or that lost an attribute, since the last fill
        (the others have all theirs already)."""
        nodes = self._nodes
        for index in sorted(self._unfilled):
            node = nodes.get(index)
            if node is None:
                continue
            schema = self.schema(node)
            if schema is not None:
                for attr_name, default in schema.default_list:
                    if attr_name not in node.attributes:
                        node.attributes[attr_name] = default
                        node.attr_map.insert(attr_name)
        self._unfilled.clear()
        for _, _, sub in self.subgraphs():
            sub.fill_default_attributes()

    def check_attribute_types(self) -> None:
        """Resolve's schema check (ONNX's ``OpSchema::Verify``, run by ORT on every node at load, recursive): an
        attribute the schema declares must have the declared type (a ``perm`` given as a FLOAT, a Constant's ``value``
        aside, fails ORT's session: "Mismatched attribute type")."""
        for node in self._nodes.values():
            schema = self.schema(node)
            if schema is None or not schema.attribute_types:
                continue
            expected_types = schema.type_of
            for attr_name, proto in node.attributes.items():
                expected = expected_types.get(attr_name)
                if expected is not None and proto.type != expected and not proto.ref_attr_name:
                    kinds = onnx.AttributeProto.AttributeType
                    raise ModelError(
                        f"node '{node.name}' ({node.op_type}): attribute {attr_name!r} is {kinds.Name(proto.type)}, "
                        f"its schema wants {kinds.Name(expected)} (ORT: Mismatched attribute type in "
                        f"'{node.name} : {attr_name}')"
                    )
        for _, _, sub in self.subgraphs():
            sub.check_attribute_types()

    def record_subgraph_reads(self) -> None:
        """Resolve adds to ``value_info_`` every node output that a subgraph reads; entries are never dropped."""
        for index in self._sub_nodes:
            node = self._nodes[index]
            self.value_info_names.update(v for v in node.implicit_inputs if v in self._producer)

    def unused_initializers(self) -> list[str]:
        """Initializers no node, subgraph or graph output uses and no graph input overrides (ORT's erase list).

        In ``name_to_initial_tensor_`` iteration order, which is the order ORT removes them in.
        """
        consumers, outputs, inputs = self._consumers, self.output_index(), self.input_index()
        # (the readers of a value, explicit and implicit, are kept as edges are made)
        return [
            name for name in self._init_map if not consumers.get(name) and name not in outputs and name not in inputs
        ]

    def mark_untyped(self, name: str) -> None:
        """The value's NodeArg has no type (a pass created it with none, as the transpose optimizer's API does, and
        nothing typed it since): the next Resolve removes it if nothing uses it, and types it otherwise."""
        if name in self._known_values:
            self._untyped_values.add(name)

    def unused_untyped_values(self) -> set[str]:
        """Untyped NodeArgs nothing uses (no node input, output or subgraph read, no graph input or output): what
        Resolve removes after the unused initializers."""
        if not self._untyped_values:
            return set()
        used = {v for n in self._nodes.values() for v in (*n.inputs, *n.implicit_inputs, *n.outputs)}
        used |= {o.name for o in self.outputs} | {i.name for i in self.inputs}
        return {name for name in self._untyped_values if name not in used}

    def has_unused(self) -> bool:
        """Whether a Resolve would remove something from this graph (not looking into subgraphs)."""
        return bool(self.unused_initializers() or self.unused_untyped_values())

    def resolve(self) -> list[str]:
        """The parts of ``Graph::Resolve`` that change what is saved: defaults, unused initializers and untyped values.

        Returns the names of the initializers removed.
        """
        self.resolves += 1
        self._refresh_subgraph_reads()
        self.fill_default_attributes()
        self._check_quantize_types()
        self.record_subgraph_reads()
        removed = self.unused_initializers()
        for name in removed:
            say(Kind.REMOVE_INITIALIZER, (name,), name=name)
            self.remove_initializer(name)
        unused = self.unused_untyped_values()
        self._untyped_values.clear()
        for name in [name for name in self._arg_map if name in unused] if unused else ():  # node_args_ order
            say(Kind.REMOVE_NODEARG, (name,), name=name)
            self._arg_map.erase(name)
        for name in unused:
            self._known_values.discard(name)
            self._arg_map.erase(name)  # (a value the map never held: nothing to log)
        for index in sorted(self._sub_nodes):
            for sub in _subgraphs_in_map_order(self._nodes[index]):
                removed += sub.resolve()
        return removed

    # ------------------------------------------------------------------ subgraphs
    def subgraphs(self) -> Iterator[tuple[Node, str, Graph]]:
        """Each node's subgraphs (node index order, then the node's attribute order)."""
        nodes = self._nodes
        for index in sorted(self._sub_nodes):
            node = nodes[index]
            for attr_name, sub in node.subgraphs.items():
                yield node, attr_name, sub

    def outer_scope_values(self) -> list[str]:
        """Values this graph's nodes (or nested subgraphs) read from an enclosing scope, in first-use order."""
        seen: dict[str, None] = {}
        for node in self.nodes():
            for value in (*node.inputs, *node.implicit_inputs):
                if value and not self.defines(value):
                    seen.setdefault(value, None)
        return list(seen)

    def defines(self, value: str) -> bool:
        """Whether ``value`` is produced, initialized or a graph input in this graph (not an outer-scope value)."""
        return value in self._producer or value in self._inits or value in self.input_index()

    def initializer_owner(self, name: str, *, check_outer_scope: bool = True) -> Graph | None:
        """The graph whose initializer ``name`` refers to: this one, or (for a value this graph does not define)
        the nearest enclosing one that does; None when the name is no initializer there."""
        scope: Graph | None = self
        while scope is not None and name:
            if name in scope._inits:
                return scope
            if not check_outer_scope or scope.defines(name):
                return None
            scope = scope.parent
        return None

    def constant_initializer(self, name: str, *, check_outer_scope: bool = True) -> onnx.TensorProto | None:
        """``Graph::GetConstantInitializer``: the tensor, unless a graph input can override it."""
        tensor = self._inits.get(name)
        if tensor is not None and name:  # this graph's own (the usual case, answered here)
            return None if self.ir_version >= 4 and name in self.input_index() else tensor
        owner = self.initializer_owner(name, check_outer_scope=check_outer_scope)
        if owner is None or not owner.is_constant_initializer(name, check_outer_scope=False):
            return None
        return owner.initializer(name)

    def constant_array(self, name: str, *, check_outer_scope: bool = True) -> np.ndarray | None:
        """A constant initializer's value (see :meth:`constant_initializer`) as numpy, cached by its owner."""
        owner = self.initializer_owner(name, check_outer_scope=check_outer_scope)
        if owner is None or not owner.is_constant_initializer(name, check_outer_scope=False):
            return None
        return owner.array(name)

    def _check_quantize_types(self) -> None:
        """The part of Resolve's type inference that passes can break: a QuantizeLinear whose ``output_dtype``
        disagrees with its zero point's type (a zero point rewritten to another type, the attribute left as it
        was) fails ONNX's inference, and ORT's session with it."""
        nodes = self._nodes
        for index in sorted(self._by_op.get("QuantizeLinear", ())):  # (index order, as the node dict's)
            node = nodes[index]
            if normalize_domain(node.domain) != "" or len(node.inputs) < 3:
                continue
            attr = node.attributes.get("output_dtype")
            zp = node.inputs[2]
            if attr is None or not attr.i or not zp:
                continue
            owner = self.initializer_owner(zp)
            tensor = owner.initializer(zp) if owner is not None else None
            if tensor is not None and tensor.data_type != attr.i:
                names = onnx.TensorProto.DataType.Name
                raise ModelError(
                    f"Node ({node.name}) Op (QuantizeLinear) [TypeInferenceError] output_dtype "
                    f"{names(attr.i)} does not match y_zero_point type {names(tensor.data_type)}."
                )
        self._check_qlinear_input_types()
        for index in sorted(self._by_op.get("QLinearAveragePool", ())):
            # QLinearAveragePool's schema inference wants rank-0 quantization parameters; the QDQ fusion makes one
            # from a unit whose DQ/Q parameters have shape [1] or are per axis (ORT 1.32 then fails the session)
            node = nodes[index]
            if normalize_domain(node.domain) != "com.microsoft":
                continue
            for name in node.inputs[1:5]:
                owner = self.initializer_owner(name) if name else None
                tensor = owner.initializer(name) if owner is not None else None
                if tensor is not None and len(tensor.dims) != 0:
                    raise ModelError(
                        f"Node ({node.name}) Op (QLinearAveragePool) [TypeInferenceError] Scale and Zero-point "
                        "must be a scalar"
                    )

    def _check_qlinear_input_types(self) -> None:
        """Resolve's ``InferAndVerifyTypeMatch`` for the contrib QLinear ops the QDQ fusion makes, in ORT's words:

        * an input whose type (an initializer's, or a graph input's as declared) the schema does not allow: ORT 1.32
          fuses an fp16 QDQ Concat into a QLinearConcat, whose scales must be float (``knownx/fz_qlinearconcat_fp16``),
          and WeightBiasQuantization gives an fp16 Conv's bias an fp16-scale DQ of the ONNX domain, which before
          opset 19 wants a float scale (``knownx/fz_wbq_fp16_bias_opset15``);
        * an output zero point left out: the contrib op's inference types the output uint8, so an int8 input bound
          to the same type parameter, or an int8 output NodeArg, fails (a Q with ``output_dtype=INT8`` and no zero
          point fused with int8 allowed: ``knownx/fz_output_dtype_int8_*``).

        Values other than initializers and graph inputs are read as typed by the last inference, none inferred."""
        declared = {v.name: v.type.tensor_type.elem_type for v in self.inputs if v.type.HasField("tensor_type")}
        text = tensor_type_string
        # the nodes to check, in index order (the node map's), found through the op type index
        ops = [op for op in self._by_op if op.startswith("QLinear") or op in ("QuantizeLinear", "DequantizeLinear")]
        candidates = sorted(index for op in ops for index in self._by_op[op])
        nodes = self._nodes
        for index in candidates:
            node = nodes[index]
            qlinear = node.op_type.startswith("QLinear") and normalize_domain(node.domain) == "com.microsoft"
            if not qlinear and node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                continue
            schema = node_schema(node)
            if schema is None or not schema.inputs:
                continue
            facts = _qlinear_facts(schema)
            formals, out_zp = facts[0], facts[1] if qlinear else None  # QLinearWhere's z_zero_point is its output's
            last = len(formals) - 1
            bound: dict[str, int] = {}
            for slot, name in enumerate(node.inputs):
                if not name or slot == out_zp:
                    continue  # the output's zero point is checked with the output below
                type_str, allowed_elems, variadic = formals[slot if slot < last else last]
                if slot > last and not variadic:
                    continue
                elem = self._known_elem(name, declared)
                if not elem:
                    continue
                bound.setdefault(type_str, elem)
                if elem not in allowed_elems:
                    raise ModelError(
                        f"This is an invalid model. Type Error: Type '{text(elem)}' of input parameter ({name}) of "
                        f"operator ({node.op_type}) in node ({node.name}) is invalid."
                    )
            if out_zp is None or not schema.outputs or not node.outputs:
                continue
            param = schema.outputs[0].type_str
            zp_value = node.inputs[out_zp] if out_zp < len(node.inputs) else ""
            inferred = self._known_elem(zp_value, declared) if zp_value else 0
            inferred = inferred or onnx.TensorProto.UINT8  # the contrib inference's default without a zero point
            if param in bound and bound[param] != inferred:
                raise ModelError(
                    f"Type Error: Type parameter ({param}) of Optype ({node.op_type}) bound to different types "
                    f"({text(bound[param])} and {text(inferred)} in node ({node.name})."
                )
            current = self._known_elem(node.outputs[0], declared)
            if current and current != inferred:
                raise ModelError(
                    f"Type Error: Type ({text(current)}) of output arg ({node.outputs[0]}) of node ({node.name}) "
                    f"does not match expected type ({text(inferred)})."
                )

    def _known_elem(self, name: str, declared: dict[str, int]) -> int:
        """The element type :meth:`_check_qlinear_input_types` reads for ``name`` (0: none): an initializer's, a
        graph input's as ``declared``, else the last inference's (``initializer_owner`` and ``value_type``, answered
        here for a value of this graph, the usual case)."""
        tensor = self._inits.get(name) if name else None
        nested = self.parent is not None
        if tensor is None and nested:
            owner = self.initializer_owner(name)
            tensor = owner.initializer(name) if owner is not None else None
        if tensor is not None:
            return int(tensor.data_type)
        if name in declared:
            return int(declared[name])
        found = self.value_type(name) if nested else self._types.get(name)
        return (self._elem(found) or 0) if found is not None else 0

    def _refresh_subgraph_reads(self) -> None:
        """Resolve's ``BuildConnections``: innermost graphs first, every node with subgraphs gets its implicit inputs
        (the outer-scope values its subgraphs read) recomputed, so a pass that changed a subgraph need not."""
        for index in sorted(self._sub_nodes):
            node = self._nodes[index]
            for sub in node.subgraphs.values():
                sub._refresh_subgraph_reads()
            self.refresh_implicit_inputs(node)

    def refresh_implicit_inputs(self, node: Node) -> None:
        """Recompute ``node.implicit_inputs`` from its subgraphs and rewire the implicit edges (called whenever
        subgraphs are attached to a node)."""
        if node.subgraphs and self._nodes.get(node.index) is node:
            self._sub_nodes.add(node.index)
        implicit: dict[str, None] = {}
        for sub in node.subgraphs.values():
            for value in sub.outer_scope_values():
                implicit.setdefault(value, None)
        node.implicit_inputs = list(implicit)
        self._rewire_inputs(node)

    # ------------------------------------------------------------------ internals
    def _known(self, value: str) -> None:
        """``GetOrCreateNodeArg``: ``value`` goes into the NodeArg map (the empty name too, as ORT's) and, when it has
        a name, the graph knows it (a new one counts as made by the pass under way)."""
        self._arg_map.insert(value)
        if value:
            known = self._known_values
            if value not in known:
                known.add(value)
                if self._pass_new is not None:
                    self._pass_new.add(value)

    def _since_version(self, node: Node) -> int | None:
        schema = self.schema(node)
        return schema.since_version if schema else None

    def _rewire_inputs(self, node: Node) -> None:
        """Rebuild every input edge of ``node`` from its explicit and implicit inputs."""
        # networkx's adjacency is reached directly: {src: {dst: {key: data}}} and its mirror share the key dicts
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        index = node.index
        succ, pred = self._succ, self._pred
        preds = pred[index]
        for src in preds:
            del succ[src][index]
        preds.clear()
        all_inputs = node.inputs + node.implicit_inputs if node.implicit_inputs else node.inputs
        consumed = {v for v in all_inputs if v}
        old = self._consumed.get(index)
        if old:
            for value in old - consumed:
                self._consumers.get(value, set()).discard(index)
        self._consumed[index] = consumed
        self._wire_reads(index, all_inputs, succ, preds)

    def _rewire_slot(self, node: Node, slot: int, old: str) -> None:
        """:meth:`_rewire_inputs` after input ``slot`` of ``node`` (which has no implicit inputs) changed from
        ``old``: only that slot's edge and readers change, as the other edges already follow the producers."""
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        index = node.index
        succ, preds = self._succ, self._pred[index]
        if old:
            found = self._producer.get(old)
            if found is not None:
                src = found[0]
                keys = preds.get(src)
                if keys is not None:
                    keys.pop((found[1], slot), None)
                    if not keys:  # the key dict is shared by succ[src][index] and pred[index][src]
                        del preds[src], succ[src][index]
            if old not in node.inputs:  # no longer read
                self._consumed[index].discard(old)
                readers = self._consumers.get(old)
                if readers is not None:
                    readers.discard(index)
        value = node.inputs[slot]
        if value:
            self._consumed[index].add(value)
            self._wire_reads(index, [value], succ, preds, slot)

    def _wire_reads(
        self,
        index: NodeIndex,
        inputs: list[str],
        succ: dict[NodeIndex, dict[NodeIndex, Any]],
        preds: dict[NodeIndex, Any],
        first: int = 0,
    ) -> None:
        """Node ``index`` reads ``inputs`` (explicit, then implicit, by slot from ``first``): it joins each value's
        readers, and an edge per (producer slot, reader slot) goes into networkx's adjacency, reached directly
        (``succ`` and the node's ``preds`` share the key dicts)."""
        consumers, producer = self._consumers, self._producer
        for slot, value in enumerate(inputs, first):
            if not value:
                continue
            readers = consumers.get(value)
            if readers is None:
                consumers[value] = {index}
            else:
                readers.add(index)
            found = producer.get(value)
            if found is not None:
                src = found[0]
                keys = succ[src].get(index)
                if keys is None:
                    keys = succ[src][index] = preds[src] = {}
                keys[(found[1], slot)] = _edge_data(index, found[1], slot, src, value)

    def _connect_consumers_of(self, value: str) -> None:
        """The edges carrying ``value`` made again (its producer changed): the readers' edges for other values stay
        as they are (what :meth:`_rewire_inputs` of each reader would give, without redoing those)."""
        readers = self._consumers.get(value)
        if not readers:
            return
        self._order = self._out_edges = self._in_edges = None  # (the structure changed)
        succ, pred = self._succ, self._pred
        found = self._producer.get(value)
        nodes = self._nodes
        for index in list(readers):
            consumer = nodes.get(index)
            if consumer is None:
                continue
            preds = pred[index]
            stale = [(src, key) for src, keys in preds.items() for key, data in keys.items() if data["value"] == value]
            for src, key in stale:
                keys = preds[src]
                del keys[key]
                if not keys:  # the key dict is shared by succ[src][index] and pred[index][src]
                    del preds[src], succ[src][index]
            if found is None:
                continue
            src, src_slot = found
            all_inputs = consumer.inputs + consumer.implicit_inputs if consumer.implicit_inputs else consumer.inputs
            for slot, read in enumerate(all_inputs):
                if read == value:
                    shared = succ[src].get(index)
                    if shared is None:
                        shared = succ[src][index] = preds[src] = {}
                    shared[(src_slot, slot)] = _edge_data(index, src_slot, slot, src, value)

    def _disconnect_consumers_of(self, value: str) -> None:
        self._connect_consumers_of(value)


_NO_SCHEMA = object()


#: per schema (by id, the schema kept alive beside): each input formal's type string, the element types it allows
#: as a tensor and whether it is variadic, and the input that is the output's zero point (None: none)
_QLINEAR_FACTS: Final[dict[int, tuple[Schema, list[tuple[str, frozenset[int], bool]], int | None]]] = {}


def _qlinear_facts(schema: Schema) -> tuple[list[tuple[str, frozenset[int], bool]], int | None]:
    """What :meth:`Graph._check_qlinear_input_types` reads of a schema, worked out once per schema."""
    found = _QLINEAR_FACTS.get(id(schema))
    if found is None or found[0] is not schema:
        zps = [k for k, f in enumerate(schema.inputs) if f.name.lower() in _OUTPUT_ZERO_POINTS]
        allowed = dict(schema.type_constraints)
        formals = [
            (f.type_str, _tensor_elems(allowed.get(f.type_str, frozenset({f.type_str}))), f.variadic)
            for f in schema.inputs
        ]
        found = _QLINEAR_FACTS[id(schema)] = (schema, formals, zps[-1] if zps else None)
    return found[1], found[2]


def _tensor_elems(type_strings: frozenset[str]) -> frozenset[int]:
    """The element types of the ``tensor(...)`` types among ``type_strings``: an element type ``e`` is among them iff
    ``tensor_type_string(e)`` is one of the strings."""
    return frozenset(elem for elem in _DATA_TYPE_VALUES if tensor_type_string(elem) in type_strings)


#: every ``TensorProto.DataType`` but UNDEFINED
_DATA_TYPE_VALUES = tuple(v for v in onnx.TensorProto.DataType.values() if v)


def _count_up(counts: dict[str, int], key: str) -> None:
    """One ``key`` more in a count of live things."""
    counts[key] = counts.get(key, 0) + 1


def _count_down(counts: dict[str, int], key: str) -> None:
    """One ``key`` fewer in a count of live things (a key whose count drops to 0 goes)."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


#: ``Edge(*fields)`` without the named tuple's Python-level ``__new__``
_new_edge = tuple.__new__


def _edge_data(dst: NodeIndex, src_slot: int, dst_slot: int, src: NodeIndex, value: str) -> dict[str, Any]:
    """The data of an edge in networkx's adjacency: the value it carries, and the :class:`Edge` the edge queries
    hand out (made once, with the edge: an edge's ends, slots and value never change while it exists)."""
    return {"value": value, "edge": _new_edge(Edge, (dst, src_slot, dst_slot, src, value))}


#: the order of one node's input edges: source node, source slot, input slot
_INPUT_EDGE_KEY = operator.itemgetter(3, 1, 2)


def _complete(found: onnx.TypeProto | None) -> bool:
    """Whether a tensor type knows its shape, each dim a value."""
    if found is None or not found.HasField("tensor_type") or not found.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in found.tensor_type.shape.dim)


def _subgraphs_in_map_order(node: Node) -> list[Graph]:
    """The node's subgraphs in ``Node::MutableSubgraphs()`` order: ``Node::Init`` creates them while iterating its
    attribute map (so an If's ``then_branch`` and ``else_branch`` come in that map's order, not the file's)."""
    order = [node.subgraphs[name] for name in node.attribute_order() if name in node.subgraphs]
    return order + [sub for sub in node.subgraphs.values() if all(sub is not o for o in order)]


def _copy_proto(proto: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(proto)
    return out


#: every attribute of a Graph that :meth:`Graph.clone` copies (immutable ones by reference); a new attribute must be
#: added there and here
_CLONED_FIELDS = {
    "name",
    "doc_string",
    "doc_string_present",
    "ir_version",
    "opsets",
    "_schemas",
    "parent",
    "parent_node",
    "_nx",
    "_succ",
    "_pred",
    "_order",
    "_out_edges",
    "_in_edges",
    "_position",
    "_by_op",
    "_unfilled",
    "_nodes",
    "_next_index",
    "_producer",
    "_consumers",
    "_consumed",
    "_sub_nodes",
    "local_functions",
    "_live_names",
    "_op_count",
    "_journal",
    "_init_pos",
    "inputs",
    "outputs",
    "value_info",
    "_input_index",
    "_output_index",
    "value_info_names",
    "_init_order",
    "_verbatim_order",
    "_inits",
    "_init_map",
    "_arrays",
    "sparse_initializers",
    "metadata_props",
    "_known_values",
    "_untyped_values",
    "_arg_map",
    "_generated_values",
    "_generated_nodes",
    "_counter",
    "_edits",
    "modified",
    "original_nodes",
    "_types",
    "_type_facts",
    "_pinned",
    "_kept",
    "_died",
    "resolves",
    "_produced_at",
    "_pass_new",
    "_pass_refreshed",
    "_pass_rewired",
    "_data_types",
    "_data_typed_at",
    "_load_data_types",
    "_load_pass_types",
    "_pass_began_at",
    "_node_types",
    "_node_protos",
}


class _LoadedNodes:
    """The nodes as loaded, by index: op type, domain, and in flat lists, node after node, their inputs then outputs
    (``starts``: where a node's inputs begin, where its outputs begin, then the next node's inputs) and attributes
    (``attr_starts``: where a node's begin). (A plain class, as :class:`_PassSeed`: compiled, a ``NamedTuple``'s
    fields read as untyped objects, and the seed's check reads them for every node.)"""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.domains: list[str] = []
        self.values: list[str] = []
        self.starts: list[int] = []
        self.attr_names: list[str] = []
        self.attrs: list[onnx.AttributeProto] = []
        self.attr_starts: list[int] = []


class _PassSeed:
    """What :meth:`Graph.seed_pass_types` keeps: the load-time types and the graph they hold for."""

    def __init__(
        self,
        types: dict[str, onnx.TypeProto],
        next_index: int,
        inits: dict[str, onnx.TensorProto],
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        value_info: list[onnx.ValueInfoProto],
        nodes: _LoadedNodes,
    ) -> None:
        self.types, self.next_index, self.inits, self.nodes = types, next_index, inits, nodes
        self.inputs, self.outputs, self.value_info = inputs, outputs, value_info


#: the ONNX ops whose shape inference reads no input's data (getInputData): a consumer renamed to an initializer of
#: the same type still types as at load (Level1 removes the Identity nodes between them and their scales)
_TYPED_WITHOUT_DATA = frozenset({"QuantizeLinear", "DequantizeLinear"})


_NameIndex = tuple[list[onnx.ValueInfoProto], int, dict[str, onnx.ValueInfoProto]]


def _by_name(values: list[onnx.ValueInfoProto]) -> _NameIndex:
    """``values`` by name (the first of a repeated name), with the list and the length it was made for (made again
    when the list was replaced or has grown)."""
    index: dict[str, onnx.ValueInfoProto] = {}
    for vi in values:
        index.setdefault(vi.name, vi)
    return values, len(values), index
