"""What each pass application did, with the changed region of the graph before and after it.

The pipeline reports every application to the ``on_pass`` hook of :func:`qdqopt.api.run` with the graph as it left
it, and records what it changed as a ``changed`` event (:mod:`qdqopt.events`, ``Graph.take_changes``). The
collector keeps one light copy of the main graph's structure (:class:`Skeleton`: each node's name, op, inputs,
outputs and the few facts a drawing shows; no weights), the graph as the next application will find it. When an
application modified the graph, it cuts the changed region out of that copy (the graph before) and out of the live
graph (after): the touched nodes and one ring of neighbours. Only those regions are kept; the copy is then made
again from the live graph. Nothing on the live graph is asked that could change the run: no type is inferred on it
(the types on the drawings' edges come from ONNX's inference run here, on copies).

A pass that rewrites many places at once (the QDQ fusion of every node unit) touches one long chain of nodes; the
region is cut into pieces, one per place rewritten: the nodes a piece removes and adds are joined where they produce
the same tensor (a unit and the QLinear op that replaces it end in the same output), and pieces of the same shape
(same ops, same statuses, same edges) are drawn once, with the list of places they occur.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from qdqopt import events
from qdqopt.graph import Changes, Graph
from qdqopt.graph.inference import infer_shapes
from qdqopt.graph.schema import normalize_domain

__all__ = ["Application", "Collector", "Piece", "Region", "RegionEdge", "Skeleton"]

#: statuses of a drawn node
ADDED, REMOVED, REWIRED, CONTEXT = "added", "removed", "rewired", "context"

_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
_SHORT_TYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "f32",
    onnx.TensorProto.FLOAT16: "f16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.DOUBLE: "f64",
    onnx.TensorProto.UINT8: "u8",
    onnx.TensorProto.INT8: "i8",
    onnx.TensorProto.UINT16: "u16",
    onnx.TensorProto.INT16: "i16",
    onnx.TensorProto.INT32: "i32",
    onnx.TensorProto.INT64: "i64",
    onnx.TensorProto.UINT4: "u4",
    onnx.TensorProto.INT4: "i4",
    onnx.TensorProto.BOOL: "bool",
}


def type_text(type_proto: onnx.TypeProto | None) -> str:
    """``u8[1,16,56,56]``: a tensor type as an edge label (``?`` for an unknown dim, ``""`` when unknown)."""
    if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
        return ""
    tt = type_proto.tensor_type
    if not tt.elem_type:
        return ""
    elem = _SHORT_TYPES.get(int(tt.elem_type)) or str(onnx.TensorProto.DataType.Name(tt.elem_type)).lower()
    if not tt.HasField("shape"):
        return elem
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return f"{elem}[{','.join(dims)}]"


def _number(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def _values_text(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    if flat.size == 1:
        item = flat[0]
        return _number(float(item)) if np.issubdtype(flat.dtype, np.floating) else str(int(item))
    if np.issubdtype(flat.dtype, np.floating):
        return f"[{flat.size}] {_number(float(flat.min()))}..{_number(float(flat.max()))}"
    return f"[{flat.size}] {int(flat.min())}..{int(flat.max())}"


def _short_name(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else name[: limit // 2 - 1] + "\u2026" + name[-(limit // 2) :]


def _qdq_lines(graph: Graph, op: str, inputs: Sequence[str], attrs: Mapping[str, onnx.AttributeProto]) -> list[str]:
    """A Q or DQ node's scale and zero point (and axis when per channel), as its label shows them."""
    lines: list[str] = []
    scale = graph.constant_array(inputs[1]) if len(inputs) > 1 and inputs[1] else None
    zp_name = inputs[2] if len(inputs) > 2 else ""
    zero = graph.constant_array(zp_name) if zp_name else None
    lines.append(f"scale {_values_text(scale)}" if scale is not None else f"scale from {_short_name(inputs[1])}")
    if zero is not None:
        tensor = graph.constant_initializer(zp_name)
        elem = _SHORT_TYPES.get(int(tensor.data_type), "") if tensor is not None else ""
        lines.append(f"zp {_values_text(zero)} {elem}".rstrip())
    elif zp_name:
        lines.append(f"zp from {_short_name(zp_name)}")
    else:
        lines.append("zp absent (0)")
    if scale is not None and scale.size > 1:
        axis = attrs.get("axis")
        lines.append(f"axis {axis.i if axis is not None else 1}")
    return lines


def _attr_text(attr: onnx.AttributeProto) -> str | None:
    kind = attr.type
    if kind == onnx.AttributeProto.INT:
        return str(attr.i)
    if kind == onnx.AttributeProto.FLOAT:
        return _number(attr.f)
    if kind == onnx.AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == onnx.AttributeProto.INTS:
        return "[" + ",".join(str(i) for i in attr.ints) + "]"
    if kind == onnx.AttributeProto.FLOATS:
        return "[" + ",".join(_number(f) for f in attr.floats) + "]"
    return None


#: attributes a label shows when a node has them (the rest are in the node's tooltip)
_SHOWN_ATTRS = ("activation", "perm", "axis", "channels_last", "to", "alpha", "transA", "transB", "group")


def _label_lines(
    graph: Graph, op_type: str, inputs: Sequence[str], attrs: Mapping[str, onnx.AttributeProto]
) -> tuple[list[str], list[str]]:
    """The lines a node's box shows under its op and name, and the attributes its tooltip lists."""
    tip: list[str] = []
    for name, attr in attrs.items():
        text = _attr_text(attr)
        if text is not None:
            tip.append(f"{name}={text if len(text) <= 60 else text[:57] + '...'}")
    if op_type in _QDQ_OPS:
        return _qdq_lines(graph, op_type, inputs, attrs), tip
    shown = []
    for name in _SHOWN_ATTRS:
        found = attrs.get(name)
        text = _attr_text(found) if found is not None else None
        if text is not None and len(text) <= 24:
            shown.append(f"{name}={text}")
    return shown[:2], tip


@dataclass(frozen=True)
class NodeRecord:
    """One node of the main graph as a drawing shows it."""

    index: int
    name: str
    op: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    lines: tuple[str, ...]
    tip: tuple[str, ...]
    attributes: tuple[onnx.AttributeProto, ...]
    has_subgraph: bool
    #: the initializer protos a Q/DQ label reads (passes replace an initializer, never edit it)
    params: tuple[int, ...] = ()


def _params(graph: Graph, op_type: str, inputs: Sequence[str]) -> tuple[int, ...]:
    if op_type not in _QDQ_OPS:
        return ()
    return tuple(id(graph.constant_initializer(v)) if v else 0 for v in inputs[1:3])


@dataclass
class Skeleton:
    """The main graph's structure at one moment (no weights): nodes by index, who produces and who reads each
    value, the graph's inputs and outputs."""

    nodes: dict[int, NodeRecord]
    producer: dict[str, int]
    consumers: dict[str, list[int]]
    order: list[int]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]

    @classmethod
    def of(cls, graph: Graph, cache: dict[tuple[int, str], NodeRecord] | None = None) -> Skeleton:
        nodes: dict[int, NodeRecord] = {}
        producer: dict[str, int] = {}
        consumers: dict[str, list[int]] = collections.defaultdict(list)
        for node in graph.nodes():
            key = (node.index, node.name)
            record = cache.get(key) if cache is not None else None
            params = _params(graph, node.op_type, node.inputs)
            if (
                record is None
                or record.inputs != tuple(node.inputs)
                or record.outputs != tuple(node.outputs)
                or record.attributes != tuple(node.attributes.values())
                or record.params != params
            ):
                lines, tip = _label_lines(graph, node.op_type, node.inputs, node.attributes)
                record = NodeRecord(
                    node.index,
                    node.name,
                    node.qualified_op,
                    normalize_domain(node.domain),
                    tuple(node.inputs),
                    tuple(node.outputs),
                    tuple(lines),
                    tuple(tip),
                    tuple(node.attributes.values()),
                    bool(node.subgraphs),
                    params,
                )
                if cache is not None:
                    cache[key] = record
            nodes[node.index] = record
            for value in record.outputs:
                if value:
                    producer[value] = node.index
            for value in record.inputs:
                if value:
                    consumers[value].append(node.index)
        order = [n.index for n in graph.topological_order()]
        return cls(
            nodes, producer, dict(consumers), order, tuple(graph.graph_input_names()), tuple(graph.graph_output_names())
        )

    def ring(self, indices: Iterable[int]) -> set[int]:
        """The nodes one edge away from ``indices`` (producers of their inputs, readers of their outputs)."""
        out: set[int] = set()
        for index in indices:
            record = self.nodes.get(index)
            if record is None:
                continue
            for value in record.inputs:
                if value in self.producer:
                    out.add(self.producer[value])
            for value in record.outputs:
                out.update(self.consumers.get(value, ()))
        return out

    def values(self) -> set[str]:
        return set(self.producer) | set(self.consumers)


# ------------------------------------------------------------------------------------------------------ types
class TypeMap:
    """The type of every value of the main graph, as ONNX's inference gives it on a copy (never on the live
    graph); updated for the values each application makes."""

    def __init__(self, graph: Graph) -> None:
        self.types: dict[str, str] = {}
        self._opsets = dict(graph.opsets)
        for vi in (*graph.inputs, *graph.outputs, *graph.value_info):
            text = type_text(vi.type)
            if text:
                self.types[vi.name] = text

    def update(self, graph: Graph, skeleton: Skeleton, indices: Iterable[int]) -> None:
        """Type the outputs of the nodes ``indices`` (in the graph's order) from their inputs' known types."""
        wanted = set(indices)
        order = [i for i in skeleton.order if i in wanted and not skeleton.nodes[i].has_subgraph]
        if not order:
            return
        gp = onnx.GraphProto(name="region")
        made = {v for i in order for v in skeleton.nodes[i].outputs if v}
        declared: set[str] = set()
        for i in order:
            record = skeleton.nodes[i]
            for value in record.inputs:
                if not value or value in made or value in declared:
                    continue
                declared.add(value)
                tensor = graph.initializer(value)
                if tensor is not None:
                    gp.input.append(onnx.helper.make_tensor_value_info(value, tensor.data_type, list(tensor.dims)))
                    continue
                known = self.types.get(value)
                parsed = _parse_type_text(known) if known else None
                if parsed is not None:
                    gp.input.append(onnx.helper.make_value_info(value, parsed))
            node = onnx.NodeProto(name=record.name, op_type=record.op.split(".")[-1], domain=record.domain)
            node.input.extend(record.inputs)
            node.output.extend(record.outputs)
            node.attribute.extend(record.attributes)
            gp.node.append(node)
        model = onnx.helper.make_model(
            gp, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in sorted(self._opsets.items())]
        )
        try:
            inferred = infer_shapes(model)
        except Exception:  # ONNX gave up on the region: its values stay untyped on the drawings
            return
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            text = type_text(vi.type)
            if text and vi.name in made:
                self.types[vi.name] = text

    def __getitem__(self, value: str) -> str:
        return self.types.get(value, "")


def _parse_type_text(text: str) -> onnx.TypeProto | None:
    """The inverse of :func:`type_text` (for giving a region's inputs their known types)."""
    elem_text, _, rest = text.partition("[")
    by_short: dict[str, int] = {v: k for k, v in _SHORT_TYPES.items()}
    elem = by_short.get(elem_text)
    if elem is None:
        return None
    if not rest:
        return onnx.helper.make_tensor_type_proto(elem, None)
    dims: list[int | str | None] = []
    for part in rest.rstrip("]").split(",") if rest.rstrip("]") else []:
        dims.append(int(part) if part.isdigit() else None if part == "?" else part)
    return onnx.helper.make_tensor_type_proto(elem, dims)


# ------------------------------------------------------------------------------------------------------ regions
@dataclass(frozen=True)
class RegionEdge:
    src: int
    dst: int
    value: str
    type: str


@dataclass(frozen=True)
class Region:
    """One side (before or after) of a piece: its nodes and the edges between them."""

    nodes: tuple[NodeRecord, ...]
    edges: tuple[RegionEdge, ...]
    #: each drawn node's status on this side (added, removed, rewired, context, ...), by node index
    status: Mapping[int, str]
    #: graph inputs and outputs the drawn nodes read or write (drawn as small ovals)
    graph_inputs: tuple[tuple[str, int, str], ...] = ()
    graph_outputs: tuple[tuple[str, int, str], ...] = ()
    #: how many nodes the region had when it was cut to :data:`MAX_DRAWN` (0: not cut)
    cut_from: int = 0

    def ops(self, *statuses: str) -> set[str]:
        return {n.op for n in self.nodes if not statuses or self.status[n.index] in statuses}


@dataclass
class Piece:
    """One place a pass application rewrote (or several of the same shape): the region before and after, and the
    names of the places (their first touched node) where the same rewrite happened."""

    before: Region
    after: Region
    places: list[str] = field(default_factory=list)
    signature: tuple[object, ...] = ()


@dataclass
class Application:
    """One transformer application, as the report shows it."""

    number: int
    name: str
    changes: Changes | None = None
    pieces: list[Piece] = field(default_factory=list)
    #: touched nodes the drawings leave out (inside subgraphs)
    not_drawn: int = 0


#: the most nodes one drawing shows (a larger region, such as a layout pass rewriting a whole long chain at once, is
#: cut to its first nodes in the graph's order, and says so): the layout's time and the page's size stay bounded
MAX_DRAWN = 250


def _region(
    skeleton: Skeleton,
    drawn: set[int],
    status: Mapping[int, str],
    types: TypeMap,
) -> Region:
    ordered = [i for i in skeleton.order if i in drawn]
    cut_from = len(ordered) if len(ordered) > MAX_DRAWN else 0
    drawn = set(ordered[:MAX_DRAWN])
    nodes = [skeleton.nodes[i] for i in ordered if i in drawn]
    edges = []
    inputs = []
    outputs = []
    for node in nodes:
        for value in node.inputs:
            src = skeleton.producer.get(value)
            if src is not None and src in drawn:
                edges.append(RegionEdge(src, node.index, value, types[value]))
            elif value in skeleton.graph_inputs:
                inputs.append((value, node.index, types[value]))
        for value in node.outputs:
            if value and value in skeleton.graph_outputs:
                outputs.append((value, node.index, types[value]))
    statuses = {node.index: status.get(node.index, CONTEXT) for node in nodes}
    return Region(tuple(nodes), tuple(edges), statuses, tuple(inputs), tuple(outputs), cut_from)


class _Union:
    def __init__(self) -> None:
        self.parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(self, item: tuple[str, int]) -> tuple[str, int]:
        self.parent.setdefault(item, item)
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def join(self, a: tuple[str, int], b: tuple[str, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def cut_pieces(
    before: Skeleton, after: Skeleton, changes: Changes, types_before: TypeMap, types_after: TypeMap
) -> tuple[list[Piece], int]:
    """The pieces of one application's change (see the module doc), grouped by shape; and how many touched nodes
    are not in the main graph (not drawn)."""
    removed = {i for i, name, _ in changes.removed if i in before.nodes and before.nodes[i].name == name}
    added = {i for i, name, _ in changes.added if i in after.nodes and after.nodes[i].name == name}
    rewired = {
        i
        for i, name, _ in changes.rewired
        if i in before.nodes and i in after.nodes and before.nodes[i].name == name == after.nodes[i].name
    }
    touched_total = len(changes.added) + len(changes.removed) + len(changes.rewired)
    not_drawn = touched_total - len(removed) - len(added) - len(rewired)
    touched = {"b": removed | rewired, "a": added | rewired}
    sides = {"b": before, "a": after}
    union = _Union()
    for index in rewired:
        union.join(("b", index), ("a", index))
    for side, skeleton in sides.items():
        other = sides["a" if side == "b" else "b"].values()
        for index in touched[side]:
            union.find((side, index))
            for value in skeleton.nodes[index].outputs:
                if not value or value in other:
                    continue  # a tensor both graphs have is where pieces are cut
                for reader in skeleton.consumers.get(value, ()):
                    if reader in touched[side]:
                        union.join((side, index), (side, reader))
    # a piece removed and the piece added in its place end in the same tensor
    matched: set[tuple[str, int]] = set()
    for value, src in after.producer.items():
        old = before.producer.get(value)
        if src in added and old is not None and old in touched["b"]:
            union.join(("a", src), ("b", old))
            matched.update({union.find(("a", src))})
    for value, readers in after.consumers.items():  # ... or, failing that, start from the same tensor
        for reader in readers:
            if reader not in added or union.find(("a", reader)) in matched:
                continue
            old = next((r for r in before.consumers.get(value, ()) if r in touched["b"]), None)
            if old is not None and union.find(("b", old)) not in matched:
                union.join(("a", reader), ("b", old))
                matched.add(union.find(("a", reader)))
    groups: dict[tuple[str, int], dict[str, set[int]]] = {}
    for side in sides:
        for index in touched[side]:
            groups.setdefault(union.find((side, index)), {"b": set(), "a": set()})[side].add(index)
    status_b = {i: (REWIRED if i in rewired else REMOVED) for i in touched["b"]}
    status_a = {i: (REWIRED if i in rewired else ADDED) for i in touched["a"]}
    by_shape: dict[tuple[object, ...], Piece] = {}
    pieces: list[Piece] = []
    ordered = sorted(groups.values(), key=lambda g: min([*g["a"], *g["b"]]))
    for group in ordered:
        context = before.ring(group["b"]) | after.ring(group["a"])
        drawn_b = group["b"] | {i for i in context if i in before.nodes}
        drawn_a = group["a"] | {i for i in context if i in after.nodes}
        region_b = _region(before, drawn_b, _statuses(status_b, group["b"]), types_before)
        region_a = _region(after, drawn_a, _statuses(status_a, group["a"]), types_after)
        signature = _signature(region_b, region_a, group)
        first = [after.nodes[i].name for i in sorted(group["a"])] or [before.nodes[i].name for i in sorted(group["b"])]
        place = first[0] if first else "?"
        if signature in by_shape:
            by_shape[signature].places.append(place)
            continue
        piece = Piece(region_b, region_a, [place], signature)
        by_shape[signature] = piece
        pieces.append(piece)
    return pieces, not_drawn


def _statuses(status: Mapping[int, str], group: set[int]) -> dict[int, str]:
    """The piece's own nodes with their status; nodes other pieces of the same application touched as ``also-``
    that status (drawn as neighbours, lightly marked)."""
    return {i: (s if i in group else f"{CONTEXT} also-{s}") for i, s in status.items()}


def _signature(before: Region, after: Region, group: Mapping[str, set[int]]) -> tuple[object, ...]:
    """The shape of a piece: its touched nodes' ops and statuses and the edges among them, on both sides."""

    def side(region: Region, touched: set[int]) -> tuple[object, ...]:
        ops = {n.index: n.op for n in region.nodes}
        nodes = sorted((n.op, region.status[n.index]) for n in region.nodes if n.index in touched)
        edges = sorted((ops[e.src], ops[e.dst]) for e in region.edges if e.src in touched or e.dst in touched)
        return (tuple(nodes), tuple(edges))

    return (side(before, group["b"]), side(after, group["a"]))


# ------------------------------------------------------------------------------------------------------ collector
class Collector:
    """The ``on_pass`` hook of a run: one :class:`Application` per transformer application, in trace order, with
    its pieces when it modified the graph. ``start`` is the graph as loaded (before any pass): a run that starts
    again (a pass declined the model) starts from it again."""

    def __init__(self, start: Graph) -> None:
        self._cache: dict[tuple[int, str], NodeRecord] = {}
        self._start = Skeleton.of(start, self._cache)
        self._start_types = TypeMap(start)
        self._start_types.update(start, self._start, self._start.order)
        self.applications: list[Application] = []
        self._log: events.EventLog | None = None
        self._seen = 0
        self._pending: list[events.Event] = []
        self._skeleton = self._start
        self._types = self._start_types

    def __call__(self, name: str, graph: Graph) -> None:
        log = events.active()
        if log is not self._log:  # a new run (the first, or one started again without a declining pass)
            self._log, self._seen, self._pending = log, 0, []
            self.applications = []
            self._skeleton = self._start
            self._types = _copy_types(self._start_types)
        if log is not None:
            self._pending.extend(e for e in log.events[self._seen :] if e.kind is events.Kind.CHANGED)
            self._seen = len(log.events)
        found = next((e for e in self._pending if e.pass_name == name), None)
        application = Application(len(self.applications), name)
        self.applications.append(application)
        if found is None:
            return
        self._pending.remove(found)
        changes = found.data
        if not isinstance(changes, Changes) or not changes:
            return
        application.changes = changes
        after = Skeleton.of(graph, self._cache)
        types_after = _copy_types(self._types)
        touched = [i for i, _, _ in (*changes.added, *changes.rewired) if i in after.nodes]
        types_after.update(graph, after, touched)
        application.pieces, application.not_drawn = cut_pieces(self._skeleton, after, changes, self._types, types_after)
        self._skeleton, self._types = after, types_after


def _copy_types(types: TypeMap) -> TypeMap:
    out = TypeMap.__new__(TypeMap)
    out.types = dict(types.types)
    out._opsets = dict(types._opsets)
    return out
