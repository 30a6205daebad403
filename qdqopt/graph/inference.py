"""Type and shape inference, in one place: every run of ONNX's inference qdqopt makes, and how its results merge
into a NodeArg's type.

ORT types every NodeArg in ``Graph::Resolve`` (ONNX's inference functions, ORT's own for its contrib ops, registered
by :mod:`qdqopt.graph.contrib`). qdqopt runs that inference at a few moments, each for what reads it; the graph
core (:meth:`qdqopt.graph.Graph.shape`, :meth:`~qdqopt.graph.Graph.elem_type`, :class:`~qdqopt.graph.View`) keeps
the results and decides when to run it again:

* **load and save** (:func:`infer_model_types`): the types of a model proto, as ORT's Resolve gives them at load
  and after the rewrites; the saver writes them;
* **Resolve, as partitioning sees it** (:func:`infer_types`): the graph as it stands, the types already known
  given as value_info, small constant initializers with their data, plus schema-driven typing of the outputs ONNX
  leaves untyped (contrib ops); the kernel lookups, InsertCast and the passes' ``View.PASS``/``View.FILLED``
  queries read these (:meth:`Graph.value_type`);
* **Resolve with shape data** (:func:`infer_with_data`): the graph as it stands, with the data of small constant
  initializers and the shape values ORT's propagation keeps (:func:`_ort_shape_values`: fully known ones, never a
  symbol, also at load and save); the Level1 rules and the transpose optimizer read these
  (``View.DATA``), and a value made since is typed node by node (:func:`infer_node_output`);
* **``Graph::UpdateShapeInference``** (:func:`update_shape_inference`): one node again, its outputs' types merged
  (:func:`merge_type`), as ConstantFolding runs it after a fold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Final

import onnx
from onnx import onnx_cpp2py_export

from qdqopt.graph.schema import (
    Schema,
    input_arg_counts,
    known_type,
    local_functions,
    node_schema,
    normalize_domain,
    parse_type_string,
    subgraph_protos,
    tensor_type_proto,
    tensor_value_info,
    type_string,
)

if TYPE_CHECKING:
    from qdqopt.graph.core import Graph, Node

_onnx_inference = onnx_cpp2py_export.shape_inference

__all__ = [
    "bound_elem_type",
    "data_given",
    "fill_unknown",
    "has_dim",
    "infer_model_types",
    "infer_node_output",
    "infer_types",
    "infer_with_data",
    "lenient_merge",
    "merge_type",
    "producer_index",
    "root_of",
    "shapes_conflict",
    "update_shape_inference",
]


# ------------------------------------------------------------------------------------------ ONNX's inference, guarded
def _clear_negative_dims(type_proto: onnx.TypeProto) -> bool:
    """Make every negative dim of ``type_proto`` unknown (in place); whether there was one."""
    which = type_proto.WhichOneof("value")
    if which in {"tensor_type", "sparse_tensor_type"}:
        changed = False
        for dim in getattr(type_proto, which).shape.dim[:]:
            if dim.dim_value < 0:  # (0 when not set)
                dim.ClearField("dim_value")
                changed = True
        return changed
    if which == "sequence_type":
        return _clear_negative_dims(type_proto.sequence_type.elem_type)
    if which == "optional_type":
        return _clear_negative_dims(type_proto.optional_type.elem_type)
    if which == "map_type":
        return _clear_negative_dims(type_proto.map_type.value_type)
    return False


def _without_negative_dims(gp: onnx.GraphProto, subgraphs: bool = True) -> bool:
    """A graph ONNX's inference can be given: a negative dim declared on a value (invalid ONNX, which ORT keeps as a
    value) becomes unknown, since ONNX's inference functions assume dims are not negative (the ``onnx`` wheel is
    built with assertions: Slice's ``std::clamp`` aborts the whole process on one). ``subgraphs``: False when no
    node has one. Returns whether a dim was made unknown."""
    changed = False
    for vi in (*gp.input[:], *gp.output[:], *gp.value_info[:]):
        changed = _clear_negative_dims(vi.type) or changed
    if not subgraphs:
        return changed
    for node in gp.node[:]:
        for attr in node.attribute[:]:
            if attr.type == onnx.AttributeProto.GRAPH:
                changed = _without_negative_dims(attr.g) or changed
            for sub in attr.graphs:
                changed = _without_negative_dims(sub) or changed
    return changed


#: a negative int64 in protobuf's wire format (ten bytes, the last one 0x01) as field 1, which a dim's ``dim_value``
#: is: without a match, no dim anywhere is negative (a match elsewhere, in a tensor's dims say, only costs a walk)
_NEGATIVE_VARINT = re.compile(rb"\x08[\x80-\xff]{9}\x01")


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = False) -> onnx.ModelProto:
    """ONNX's shape inference as qdqopt runs it everywhere (the report's drawings and the fuzzer's shrinker too): on
    a copy whose negative dims are made unknown first, so that the assertions of ONNX's C++ cannot abort the process
    (:func:`_infer_shapes`); ``model`` is not changed."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return _infer_shapes(copy, data_prop=data_prop)[0]


def _infer_shapes(
    model: onnx.ModelProto, *, data_prop: bool = False, subgraphs: bool = True
) -> tuple[onnx.ModelProto, bool]:
    """``onnx.shape_inference.infer_shapes`` on ``model`` (edited: negative dims made unknown first), and whether
    the result names a dim ``unk__...`` (when it does not, no dim needs :func:`_clear_invented_dims`).

    ONNX's own wrapper serialises, infers and parses; this does the same, looking at the bytes on the way: the
    graph is only walked for negative dims when its bytes hold a negative varint (its nodes only if it has
    ``subgraphs``), and the result for invented dim names when its bytes hold ``unk__``."""
    return _infer_bytes(_inference_bytes(model, subgraphs), data_prop=data_prop)


def _inference_bytes(model: onnx.ModelProto, subgraphs: bool = True) -> bytes:
    """The bytes of ``model`` for ONNX's inference (:func:`_infer_shapes`: its negative dims made unknown first)."""
    data: bytes = model.SerializeToString()
    if _NEGATIVE_VARINT.search(data) and _without_negative_dims(model.graph, subgraphs):
        data = model.SerializeToString()  # (a match in a weight's bytes changes nothing: no need)
    return data


def _infer_bytes(data: bytes, *, data_prop: bool = False) -> tuple[onnx.ModelProto, bool]:
    """:func:`_infer_shapes` of a model's bytes (:func:`_inference_bytes`)."""
    inferred = _onnx_inference.infer_shapes(data, False, False, data_prop)
    out = onnx.ModelProto()
    out.ParseFromString(inferred)
    return out, b"unk__" in inferred


def _infer_node_outputs(
    schema: onnx.defs.OpSchema,
    proto: onnx.NodeProto,
    input_types: dict[str, onnx.TypeProto],
    input_data: dict[str, onnx.TensorProto],
    opset_imports: list[onnx.OperatorSetIdProto],
) -> dict[str, onnx.TypeProto]:
    """``onnx.shape_inference.infer_node_outputs``, negative dims of the input types made unknown first (on copies);
    an input tensor with a negative dim is not handed over as data."""
    safe: dict[str, onnx.TypeProto] = {}
    for name, found in input_types.items():
        copy = onnx.TypeProto()
        copy.CopyFrom(found)
        safe[name] = copy if _clear_negative_dims(copy) else found
    data = {name: t for name, t in input_data.items() if all(d >= 0 for d in t.dims)}
    return onnx.shape_inference.infer_node_outputs(schema, proto, safe, data, opset_imports=opset_imports)


def root_of(graph: Graph) -> Graph:
    """The main graph of the model ``graph`` belongs to."""
    while graph.parent is not None:
        graph = graph.parent
    return graph


def producer_index(graph: Graph, value: str) -> int:
    """The index of the node producing ``value`` in ``graph``, -1 if none does."""
    node = graph.producer(value)
    return node.index if node is not None else -1


# -------------------------------------------------------------------------------------------------------- load and save
def infer_model_types(
    proto: onnx.ModelProto, *, subgraphs: bool = True, op_types: Collection[str] | None = None
) -> dict[str, onnx.TypeProto]:
    """Types of every tensor of the main graph as ORT's Resolve infers them (best effort: ops ONNX does not know keep
    their declared types).

    ONNX shape inference with the data of the initializers ``proto`` carries, and shape values propagated as far as
    ORT 1.32 propagates them, which is less far than ONNX's ``data_prop`` (:func:`_mask_value_propagation`): the types
    inference gives without propagation, their unknown dims filled from an inference with ONNX's propagation on a copy
    of the model where the propagation ORT does not do cannot happen. ``proto`` is edited: give a copy made for it,
    without the weights' data (:mod:`qdqopt.graph.model` makes one, ``_inference_model``). ``subgraphs``: False
    when the model has none (nothing to look for in its nodes' attributes). ``op_types``: the op types of the main
    graph's nodes, when the caller knows them (its graph's op type index), so that the steps only some ops need are
    skipped without reading every node of ``proto`` (each read through protobuf's Python API costs).
    """
    declared_outputs: dict[str, onnx.TypeProto] = {}
    for output in proto.graph.output[:]:  # a declared output shape must not block inference: the inferred one wins
        if output.type.HasField("tensor_type"):
            if output.type.tensor_type.HasField("shape"):
                kept = declared_outputs[output.name] = onnx.TypeProto()
                kept.CopyFrom(output.type)
                for dim in kept.tensor_type.shape.dim:
                    if dim.HasField("dim_value") and dim.dim_value < 0:  # saved as an unknown dim
                        dim.ClearField("dim_value")
            output.type.tensor_type.ClearField("shape")
    data = _inference_bytes(proto, subgraphs)
    # the names the model gives dims: only those ONNX could have invented too matter (see _clear_invented_dims); the
    # bytes inference gets show whether there is one, but for the outputs' shapes, cleared above and kept aside
    declared: set[str] = set()
    if b"unk__" in data or any(b"unk__" in t.SerializeToString() for t in declared_outputs.values()):
        declared = _dim_params(proto.graph)
        for kept in declared_outputs.values():
            declared.update(d.dim_param for d in kept.tensor_type.shape.dim[:] if d.HasField("dim_param"))
    try:
        inferred, invented = _infer_bytes(data)
    except Exception:
        return {}
    types = _types_of(inferred.graph, declared, invented=invented, subgraphs=subgraphs)
    pinned: dict[str, onnx.TypeProto] = {}
    for _ in range(4):
        # what ORT's NodeArgs know that this inference does not: a graph output's declared dims where inference
        # leaves them unknown, and a Concat's dim that ONNX's invented names kept from unifying (below); ORT's nodes
        # downstream infer from the merged NodeArgs, so infer again with them declared (fuzz seed 4 case 613: Split
        # after a Loop's output, read by an If branch; seed 5 case 179: Concat of a Resize's output and a value
        # of a declared batch dim)
        changed = _fill_declared_outputs(types, declared_outputs)
        if op_types is None or "Concat" in op_types:
            changed |= _unify_concat_dims(proto.graph, types)
        if not changed:
            break
        pinned.update((name, types[name]) for name in changed)
        _declare(proto.graph, pinned)
        try:
            inferred, invented = _infer_shapes(proto, subgraphs=subgraphs)
        except Exception:
            return types
        types = _types_of(inferred.graph, declared, invented=invented, subgraphs=subgraphs)
    _fill_declared_outputs(types, declared_outputs)
    return _propagated_as_ort(proto, types, declared, subgraphs=subgraphs, op_types=op_types)


#: rounds of :func:`_propagated_as_ort` (a shape a propagated value gave lets a later ``Shape`` keep a value)
_PROPAGATION_ROUNDS = 4


def _propagated_as_ort(
    proto: onnx.ModelProto,
    base: dict[str, onnx.TypeProto],
    declared: set[str],
    *,
    subgraphs: bool = True,
    op_types: Collection[str] | None = None,
) -> dict[str, onnx.TypeProto]:
    """``base`` (the main graph's types as inference without propagation gives them) with the unknown dims that ORT
    1.32's shape-value propagation fills (:func:`_ort_shape_values`) filled: ONNX's ``data_prop`` on a copy of
    ``proto`` where it can use only the values ORT keeps (:func:`_mask_value_propagation`), again while the values
    kept grow (``subgraphs``: False when the model has none; ``op_types``: as :func:`infer_model_types`)."""
    types = base
    if not _reads_shape_values(proto.graph, op_types):
        return types  # no shape value to keep (every kept value starts at a Shape or Size): nothing to propagate
    kept_before: dict[str, _Value] = {}
    for _ in range(_PROPAGATION_ROUNDS):
        kept = _ort_shape_values(proto.graph, types)
        if kept == kept_before:
            break
        kept_before = kept
        masked = onnx.ModelProto()
        masked.CopyFrom(proto)
        _mask_value_propagation(masked.graph, types, kept)
        try:
            propagated, invented = _infer_shapes(masked, data_prop=True, subgraphs=subgraphs)
        except Exception:
            break
        types = dict(base)
        for name, found in _types_of(propagated.graph, declared, invented=invented, subgraphs=subgraphs).items():
            known = types.get(name)
            if known is not None:
                types[name] = fill_unknown(known, found)
    return types


def _unify_concat_dims(gp: onnx.GraphProto, types: dict[str, onnx.TypeProto]) -> set[str]:
    """A Concat's dims off its axis as ORT's inference unifies them (``unifyDim`` over the inputs in order: the first
    value, else the first name), where ONNX's did not: ONNX names an unknown dim ``unk__<n>`` while it infers, and
    a named dim does not unify with another name, so ``Concat(x: [unk__0, 4], y: [N, 4])`` keeps ``unk__0``
    (cleared afterwards: unknown) where ORT, whose unknown dim has no name, gives ``N``. Returns the values changed."""
    changed: set[str] = set()
    for node in gp.node:
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or not node.output:
            continue
        out = types.get(node.output[0])
        if out is None or not out.tensor_type.HasField("shape"):
            continue
        dims = out.tensor_type.shape.dim
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        axis = axis + len(dims) if axis < 0 else axis
        ins = [types.get(name) for name in node.input if name]
        shapes = [t.tensor_type.shape.dim for t in ins if t is not None and t.tensor_type.HasField("shape")]
        if len(shapes) != len(ins) or any(len(s) != len(dims) for s in shapes):
            continue
        for i, dim in enumerate(dims):
            if i == axis or dim.HasField("dim_value") or dim.HasField("dim_param"):
                continue
            value = next((s[i].dim_value for s in shapes if s[i].HasField("dim_value")), None)
            name = next((s[i].dim_param for s in shapes if s[i].HasField("dim_param")), None)
            if value is not None:
                dim.dim_value = value
            elif name:
                dim.dim_param = name
            else:
                continue
            changed.add(node.output[0])
    return changed


def _declare(gp: onnx.GraphProto, pinned: dict[str, onnx.TypeProto]) -> None:
    """Give the graph the types ``pinned`` as declared: a graph output's type, another value's value_info entry."""
    outputs = {o.name for o in gp.output}
    for output in gp.output:
        if output.name in pinned:
            output.type.CopyFrom(pinned[output.name])
    entries = {vi.name: vi for vi in gp.value_info}
    for name, found in pinned.items():
        if name in outputs:
            continue
        if name in entries:
            entries[name].type.CopyFrom(found)
        else:
            gp.value_info.append(onnx.helper.make_value_info(name, found))


def _fill_declared_outputs(types: dict[str, onnx.TypeProto], declared_outputs: dict[str, onnx.TypeProto]) -> set[str]:
    """What inference leaves unknown in a graph output's type keeps the declared dims, as ORT's NodeArg merges them
    (a graph output after a Loop, whose loop-carried shapes ONNX does not infer: fuzz seed 2 case 51). Returns the
    outputs whose type changed."""
    changed: set[str] = set()
    for name, declared_type in declared_outputs.items():
        if name in types:
            merged = fill_unknown(types[name], declared_type)
            if merged != types[name]:
                types[name] = merged
                changed.add(name)
    return changed


def _types_of(
    g: onnx.GraphProto, declared: set[str], *, invented: bool = True, subgraphs: bool = True
) -> dict[str, onnx.TypeProto]:
    """The value types an inferred graph holds, subgraphs included (ONNX's invented dim names cleared, if it
    ``invented`` any)."""
    if invented:
        _clear_invented_dims(g, declared)
    types = dict(_typed_values(g))  # inferred value_info last: it knows most
    if subgraphs:
        _subgraph_types(g, types, invented)
    return types


#: the ONNX ops that make a shape value (every value ORT's shape-value propagation keeps starts at one of them)
SHAPE_VALUE_SOURCES = ("Shape", "Size")


def _reads_shape_values(gp: onnx.GraphProto, op_types: Collection[str] | None = None) -> bool:
    """Whether a node of ``gp`` makes a shape value (:data:`SHAPE_VALUE_SOURCES`): without one,
    :func:`_ort_shape_values` keeps none and there is nothing to propagate. ``op_types``: the op types of ``gp``'s
    nodes (any domain), if known: where none is a source, the nodes are not read."""
    if op_types is not None and not any(op in op_types for op in SHAPE_VALUE_SOURCES):
        return False
    return any(node.op_type in SHAPE_VALUE_SOURCES and node.domain in ("", "ai.onnx") for node in gp.node)


#: ops whose outputs carry shape values: those with an ONNX propagation function (``Slice`` included, which keeps
#: nothing in ORT: its bounds are initializers, never values kept) and ORT's own (``core/graph/data_propagation/``)
_VALUE_OPS = frozenset(
    {"Shape", "Size", "Gather", "Slice", "Unsqueeze", "Squeeze", "Concat", "Cast", "Add", "Sub", "Mul", "Div"}
)
_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})

#: a shape value as ORT's NodeArg keeps it: a scalar, or a 1-D list of dim values
_Value = int | tuple[int, ...]


def _attribute(node: onnx.NodeProto, name: str) -> object | None:
    for attr in node.attribute:
        if attr.name == name:
            found: object = onnx.helper.get_attribute_value(attr)
            return found
    return None


def _constant_ints(gp: onnx.GraphProto) -> dict[str, list[int]]:
    """The values of the graph's small constant integer tensors (initializers no graph input overrides, Constant
    nodes), flattened: what ORT's own propagation reads (``GetConstantInitializer``) for a Gather's indices and a
    Squeeze's or Unsqueeze's axes."""
    inputs = {i.name for i in gp.input}
    out: dict[str, list[int]] = {}
    tensors = [t for t in gp.initializer if t.name not in inputs]
    for node in gp.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = _attribute(node, "value")
            if isinstance(value, onnx.TensorProto):
                copied = onnx.TensorProto()
                copied.CopyFrom(value)
                copied.name = node.output[0]
                tensors.append(copied)
            for key in ("value_int", "value_ints"):
                found = _attribute(node, key)
                if isinstance(found, int):
                    out[node.output[0]] = [found]
                elif isinstance(found, list):
                    out[node.output[0]] = [int(v) for v in found]
    for tensor in tensors:
        if tensor.data_type in _INT_TYPES and len(tensor.dims) <= 1 and _shape_relevant(tensor):
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                continue
            try:
                out[tensor.name] = [int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1)]
            except Exception:  # data shorter than its dims: no value
                continue
    return out


def _known_dims(type_proto: onnx.TypeProto | None) -> list[int | None] | None:
    if type_proto is None or not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else None for d in type_proto.tensor_type.shape.dim[:]]


def _arith(op: str, a: int, b: int) -> int | None:
    if op == "Add":
        return a + b
    if op == "Sub":
        return a - b
    if op == "Mul":
        return a * b
    if b == 0:
        return None
    quotient = abs(a) // abs(b)  # C++ integer division truncates toward zero
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _ort_shape_values(gp: onnx.GraphProto, types: dict[str, onnx.TypeProto]) -> dict[str, _Value]:
    """The shape values ORT 1.32's Resolve keeps on the NodeArgs of ``gp`` (``NodeArg::GetInferredShapeValues`` and
    its scalar twin), node by node in graph order, from the value types ``types`` gives.

    A value is kept only when *every* element is a known number (probed: ``Reshape(z, Shape(y))`` with a symbolic
    dim in ``y``, a ``Gather`` of the static dim of a partly symbolic shape, a ``Concat`` with such a part, all leave
    the consumer's shape unknown): ONNX's propagation functions see the values kept so far, never an initializer
    (a ``Slice`` with constant bounds, a ``Concat``, ``Add`` or ``Mul`` with a constant keep nothing), and ORT's own
    ``Gather`` (one index), ``Squeeze``/``Unsqueeze`` (scalar <-> one element), ``Size`` and scalar
    ``Add``/``Sub``/``Mul``/``Div`` propagation read the indices and axes from constant initializers."""
    constants = _constant_ints(gp)
    initializer_dims = {t.name: list(t.dims) for t in gp.initializer}
    values: dict[str, _Value] = {}

    def dims_of(name: str) -> list[int | None] | None:
        if name in initializer_dims and name not in types:
            return [int(d) for d in initializer_dims[name]]
        return _known_dims(types.get(name))

    for node in gp.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _VALUE_OPS or not node.output:
            continue
        found = _shape_value(node, values, constants, dims_of)
        if found is not None:
            values[node.output[0]] = found
    return values


def _shape_value(
    node: onnx.NodeProto,
    values: dict[str, _Value],
    constants: dict[str, list[int]],
    dims_of: Callable[[str], list[int | None] | None],
) -> _Value | None:
    """The shape value ORT keeps for the node's first output (see :func:`_ort_shape_values`), or None."""
    op, inputs = node.op_type, list(node.input)
    first = values.get(inputs[0]) if inputs and inputs[0] else None
    if op in ("Shape", "Size"):
        dims = dims_of(inputs[0]) if inputs else None
        if dims is None:
            return None
        if op == "Shape":
            rank = len(dims)
            start, end = _attribute(node, "start"), _attribute(node, "end")
            lo = 0 if not isinstance(start, int) else min(max(start + rank if start < 0 else start, 0), rank)
            hi = rank if not isinstance(end, int) else min(max(end + rank if end < 0 else end, 0), rank)
            dims = dims[lo:hi]
        if any(d is None for d in dims):
            return None
        known = [int(d) for d in dims if d is not None]
        if op == "Shape":
            return tuple(known)
        size = 1
        for d in known:
            size *= d
        return size
    if op == "Cast":
        return first
    if op == "Slice":
        return None
    if op == "Gather":
        if not isinstance(first, tuple) or len(inputs) < 2:
            return None
        index = values.get(inputs[1])
        picks = list(index) if isinstance(index, tuple) else constants.get(inputs[1])
        if picks is None or (isinstance(index, tuple) and not picks):
            return None
        rank = len(first)
        if any(not -rank <= i < rank for i in picks):
            return None
        if isinstance(index, tuple):  # ONNX's own propagation: indices kept as a value themselves
            return tuple(first[i] for i in picks)
        if len(picks) != 1:
            return None
        return first[picks[0]]
    if op == "Unsqueeze":
        axes = _attribute(node, "axes")
        picks = list(axes) if isinstance(axes, list) else (constants.get(inputs[1]) if len(inputs) > 1 else None)
        if isinstance(first, int) and picks is not None and len(picks) == 1 and picks[0] in (0, -1):
            return (first,)
        return None
    if op == "Squeeze":
        if isinstance(first, tuple) and len(first) == 1:
            return first[0]
        return None
    if op == "Concat":
        parts = [values.get(v) for v in inputs]
        if not parts or any(not isinstance(p, tuple) for p in parts):
            return None
        return tuple(d for p in parts if isinstance(p, tuple) for d in p)
    # Add, Sub, Mul, Div: both operands kept; ONNX's propagation element-wise on 1-D values, ORT's on scalars
    second = values.get(inputs[1]) if len(inputs) > 1 else None
    if first is None or second is None:
        return None
    if isinstance(first, int) and isinstance(second, int):
        return _arith(op, first, second)
    if op == "Div" or not isinstance(first, tuple) or not isinstance(second, tuple):
        return None
    if len(first) != len(second) and 1 not in (len(first), len(second)):
        return None
    width = max(len(first), len(second))
    out = []
    for i in range(width):
        result = _arith(op, first[i % len(first)], second[i % len(second)])
        if result is None:
            return None
        out.append(result)
    return tuple(out)


def _mask_value_propagation(gp: onnx.GraphProto, types: dict[str, onnx.TypeProto], kept: dict[str, _Value]) -> bool:
    """Make the shape-value propagation ORT 1.32 does not do impossible in ``gp`` (edited in place); True if it
    changed anything.

    ONNX's ``data_prop`` carries partial values (a symbolic dim, an unknown element for an input it has no value
    for) and reads initializers; ORT keeps only the values :func:`_ort_shape_values` finds. So every integer value a
    propagating op writes that ORT keeps no value for is read, by each node, from a graph input of the same type
    instead, which neither propagation nor inference can see into (``types``, the inference without propagation,
    gives the rest; ``kept`` is what :func:`_ort_shape_values` found). Subgraphs are left as they are.
    """
    carriers: set[str] = set()
    for node in gp.node[:]:
        if node.domain in ("", "ai.onnx") and node.op_type in _VALUE_OPS:
            carriers.update(v for v in node.output if v and v not in kept)
    hidden: dict[str, str] = {}
    for node in gp.node[:]:
        for slot, name in enumerate(node.input):
            if name not in carriers:
                continue
            known = types.get(name)
            if known is None or not known.HasField("tensor_type"):
                continue
            if known.tensor_type.elem_type not in _INT_TYPES:
                continue
            if name not in hidden:
                hidden[name] = f"{name}/qdqopt_hidden"
                gp.input.append(onnx.helper.make_value_info(hidden[name], known))
            node.input[slot] = hidden[name]
    return bool(hidden)


def _subgraph_types(gp: onnx.GraphProto, types: dict[str, onnx.TypeProto], invented: bool = True) -> None:
    """Add what inference found inside subgraphs (If/Loop/Scan bodies) to ``types``; ONNX names are unique across
    scopes, and the enclosing graph's entry wins should one repeat."""
    for node in gp.node[:]:
        for attr in node.attribute[:]:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            sub = attr.g
            if invented:
                _clear_invented_dims(sub, _dim_params(sub))
            for name, found in _typed_values(sub):
                types.setdefault(name, found)
            _subgraph_types(sub, types, invented)


def _typed_values(gp: onnx.GraphProto) -> list[tuple[str, onnx.TypeProto]]:
    """The name and type of each graph input, output and value_info entry (in that order) that has a type, and an
    element type if it is a tensor's."""
    out = []
    for v in (*gp.input[:], *gp.output[:], *gp.value_info[:]):
        # (the element type first: a tensor's, the usual case, answers without asking which fields are set; an unset
        # type or tensor_type reads as elem_type 0 without being set)
        found = v.type
        if found.tensor_type.elem_type or (v.HasField("type") and not found.HasField("tensor_type")):
            out.append((v.name, found))
    return out


def _dim_params(gp: onnx.GraphProto) -> set[str]:
    """Every dim_param the model itself names (graph inputs, outputs, value_info)."""
    names: set[str] = set()
    for v in (*gp.input[:], *gp.output[:], *gp.value_info[:]):
        if v.type.HasField("tensor_type"):
            names.update(d.dim_param for d in v.type.tensor_type.shape.dim[:] if d.HasField("dim_param"))
    return names


def _clear_invented_dims(gp: onnx.GraphProto, declared: set[str]) -> None:
    """ONNX shape inference names unknown dims ``unk__<n>``; ORT's inference leaves them unnamed."""
    for v in (*gp.input[:], *gp.output[:], *gp.value_info[:]):
        if v.type.HasField("tensor_type"):
            for d in v.type.tensor_type.shape.dim[:]:
                if d.HasField("dim_param") and d.dim_param.startswith("unk__") and d.dim_param not in declared:
                    d.ClearField("dim_param")


def _shapes(existing: onnx.TypeProto, inferred: onnx.TypeProto) -> tuple[onnx.TensorShapeProto, onnx.TensorShapeProto]:
    return existing.tensor_type.shape, inferred.tensor_type.shape


def shapes_conflict(existing: onnx.TypeProto, inferred: onnx.TypeProto) -> bool:
    """Whether ONNX's ``mergeInShapeInfo`` of the inferred shape into the NodeArg's fails (rank or a value)."""
    if inferred == existing:  # the usual case, in one comparison (each field read below crosses into protobuf)
        return False
    if not (existing.HasField("tensor_type") and inferred.HasField("tensor_type")):
        return False
    if not (existing.tensor_type.HasField("shape") and inferred.tensor_type.HasField("shape")):
        return False
    target, source = _shapes(existing, inferred)
    target_dims, source_dims = target.dim[:], source.dim[:]
    if len(target_dims) != len(source_dims):
        return True
    return any(
        s.HasField("dim_value") and t.HasField("dim_value") and s.dim_value != t.dim_value
        for t, s in zip(target_dims, source_dims, strict=True)
    )


def lenient_merge(existing: onnx.TypeProto, inferred: onnx.TypeProto) -> onnx.TypeProto:
    """ORT's ``MergeShapeInfo`` after a failed merge: the dims merged before the failing one stay merged, then
    ``UnionShapeInfo`` clears the shape (other rank) or every dim that differs from the inferred one."""
    out = onnx.TypeProto()
    out.CopyFrom(existing)
    target_type = out.tensor_type
    source = inferred.tensor_type.shape
    if len(target_type.shape.dim) != len(source.dim):
        target_type.ClearField("shape")
        return out
    for t, s in zip(target_type.shape.dim, source.dim, strict=True):  # mergeInShapeInfo, up to the failure
        if s.HasField("dim_value"):
            if t.HasField("dim_value") and t.dim_value != s.dim_value:
                break
            t.dim_value = s.dim_value
        elif s.HasField("dim_param") and not t.HasField("dim_value") and not t.HasField("dim_param"):
            t.dim_param = s.dim_param
    for t, s in zip(target_type.shape.dim, source.dim, strict=True):  # UnionShapeInfo
        if s.HasField("dim_value"):
            same = t.HasField("dim_value") and t.dim_value == s.dim_value
        elif s.HasField("dim_param"):
            same = t.HasField("dim_param") and t.dim_param == s.dim_param
        else:
            same = not (t.HasField("dim_value") or t.HasField("dim_param"))
        if not same:
            t.ClearField("dim_value")
            t.ClearField("dim_param")
    return out


def merge_type(existing: onnx.TypeProto | None, inferred: onnx.TypeProto) -> onnx.TypeProto:
    """``NodeArg::UpdateTypeAndShape`` of an inferred tensor type into a NodeArg's type, as a Resolve does.

    No type yet: the inferred one. Otherwise the element type stays and the shapes merge as ONNX's
    ``mergeInShapeInfo`` does: an inferred value fills an unknown or symbolic dim, an inferred symbol only an
    unknown one, a known value stays; where they conflict (another rank, another value) ORT's lenient
    ``UnionShapeInfo`` takes over (:func:`lenient_merge`).
    """
    out = onnx.TypeProto()
    if existing is None or not existing.HasField("tensor_type") or not inferred.HasField("tensor_type"):
        out.CopyFrom(existing if existing is not None else inferred)
        return out
    if not inferred.tensor_type.HasField("shape"):
        out.CopyFrom(existing)
        return out
    if not existing.tensor_type.HasField("shape"):
        out.CopyFrom(existing)
        out.tensor_type.shape.CopyFrom(inferred.tensor_type.shape)
        return out
    if shapes_conflict(existing, inferred):
        return lenient_merge(existing, inferred)
    return fill_unknown(existing, inferred)


def has_dim(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether the dim is known: a value or a symbolic name."""
    return bool(dim.HasField("dim_value") or dim.HasField("dim_param"))


def fill_unknown(existing: onnx.TypeProto, inferred: onnx.TypeProto | None) -> onnx.TypeProto:
    """A Resolve after a rewrite: inference fills what the NodeArg's type leaves unknown, never overrides it.

    (At load the inferred type wins; afterwards a conflicting re-inference keeps the existing type: observed on
    1.32.0, e.g. a graph output whose producer a rewrite replaced by a scalar keeps its declared shape.)
    """
    if inferred is None or inferred == existing:  # (equal: nothing to fill, the usual case)
        return existing
    if not existing.HasField("tensor_type") or not inferred.HasField("tensor_type"):
        return existing
    if not inferred.tensor_type.HasField("shape"):
        return existing
    if not existing.tensor_type.HasField("shape"):
        merged = onnx.TypeProto()
        merged.CopyFrom(existing)
        merged.tensor_type.shape.CopyFrom(inferred.tensor_type.shape)
        return merged
    target_dims, source_dims = existing.tensor_type.shape.dim[:], inferred.tensor_type.shape.dim[:]
    if len(target_dims) != len(source_dims):
        return existing
    if not any(_fills(t, s) for t, s in zip(target_dims, source_dims, strict=True)):
        return existing  # nothing to fill (the usual case: every dim a value already)
    merged = onnx.TypeProto()
    merged.CopyFrom(existing)
    for target, source in zip(merged.tensor_type.shape.dim, inferred.tensor_type.shape.dim, strict=True):
        if target.HasField("dim_value"):
            continue
        if source.HasField("dim_value"):  # ONNX's mergeInDimensionInfo: a value replaces a symbolic dim
            target.dim_value = source.dim_value
        elif source.HasField("dim_param") and not target.HasField("dim_param"):
            target.dim_param = source.dim_param
    return merged


def _fills(target: onnx.TensorShapeProto.Dimension, source: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether :func:`fill_unknown` changes ``target`` from ``source``."""
    if target.HasField("dim_value"):
        return False
    return bool(source.HasField("dim_value") or (source.HasField("dim_param") and not target.HasField("dim_param")))


# ------------------------------------------------------------------------------------- Resolve, as partitioning sees it
_MAX_ROUNDS = 8


def infer_types(graph: Graph) -> None:
    """Give the values of ``graph`` and its subgraphs the types ``Graph::Resolve`` would infer (set on the graph,
    :meth:`Graph.set_value_type`), as the partitioner's kernel lookups need them.

    ONNX shape inference over the current graph (nodes in ORT's topological order, declared value_info kept, the
    types already known given, small constant initializers with their data as ``getInputData`` gives them, the
    dims ONNX names ``unk__<n>`` and the model does not left unnamed), plus a schema-driven propagation
    for what ONNX cannot infer (contrib ops): an output whose formal type is a constraint takes the type of the first
    typed input bound to the same constraint, or the constraint's only allowed type; repeated while that types
    something new.
    """
    seeded = graph.seeded_pass_types() if graph.parent is None else None
    if seeded is not None:  # the load-time types, which this inference would give (Graph.seed_pass_types)
        for name, found in seeded.items():
            graph.adopt_value_type(name, found)
        return
    for _ in range(_MAX_ROUNDS):
        model = onnx.ModelProto(ir_version=onnx.IR_VERSION)
        for domain, version in sorted(root_of(graph).opsets.items()):
            model.opset_import.append(onnx.helper.make_opsetid(domain, version))
        model.functions.extend(local_functions(graph).values())  # calls of them are typed through their bodies
        _fill_resolve_graph(model.graph, graph)
        try:
            inferred, invented = _infer_shapes(model, subgraphs=next(graph.subgraphs(), None) is not None)
        except Exception:  # onnx gave up on the whole model: keep what the schemas can tell
            inferred, invented = model, True
        if invented:  # a dim ORT cannot infer stays unnamed
            _clear_invented_dims_deep(inferred.graph, _all_dim_params(model.graph))
        _store(graph, inferred.graph)
        if not _propagate_by_schema(graph):
            return


def _fill_resolve_graph(gp: onnx.GraphProto, graph: Graph) -> None:
    """Fill the empty ``gp`` with the graph for ONNX shape inference: initializers as typed value_info (no data), the
    known types given."""
    gp.name = graph.name or "g"
    gp.input.extend(graph.inputs)
    gp.output.extend(graph.outputs)
    declared = {v.name for v in (*graph.inputs, *graph.outputs)}
    for vi in graph.value_info:
        if vi.name not in declared:
            gp.value_info.append(vi)
            declared.add(vi.name)
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        if tensor is None:
            continue
        if data_given(graph, name, tensor):  # a value_info entry may name it too (a Concat ReshapeFusion folded)
            gp.initializer.append(tensor)
        elif name not in declared:
            gp.value_info.append(tensor_value_info(name, tensor.data_type, list(tensor.dims)))
        declared.add(name)
    order = graph.topological_order()
    for node in order:
        for value in (*node.inputs, *node.outputs):
            if value and value not in declared:
                known = graph.value_type(value) if graph.defines(value) else None
                if known is not None:
                    entry = gp.value_info.add()  # make_value_info, without a copy on the way
                    entry.name = value
                    entry.type.CopyFrom(known)
                declared.add(value)
    gp.node.extend(_node_protos(graph, order, _fill_resolve_graph))


def _node_protos(
    graph: Graph, order: list[Node], fill: Callable[[onnx.GraphProto, Graph], None]
) -> list[onnx.NodeProto]:
    """The nodes as inference gets them (:meth:`Graph.node_proto`: their doc strings do not matter to it), a
    node's subgraphs filled in by ``fill``, as the graph itself."""
    out = []
    for node in order:
        if not node.subgraphs:
            out.append(graph.node_proto(node))
            continue
        proto = onnx.NodeProto(name=node.name, op_type=node.op_type, domain=node.domain)
        proto.input.extend(node.inputs)
        proto.output.extend(node.outputs)
        for attr_name in node.attribute_order():
            sub = node.subgraphs.get(attr_name)
            if sub is None:
                proto.attribute.append(node.attributes[attr_name])
            else:
                body = onnx.GraphProto()
                fill(body, sub)
                proto.attribute.append(onnx.helper.make_attribute(attr_name, body))
        out.append(proto)
    return out


def data_given(graph: Graph, name: str, tensor: onnx.TensorProto) -> bool:
    """Whether Resolve's inference functions see ``name``'s data (``InferenceContextImpl::getInputData``: a constant
    initializer's, e.g. the shape of a Reshape whose Concat ReshapeFusion folded), as far as inference can use it."""
    return (
        tensor.data_location != onnx.TensorProto.EXTERNAL
        and graph.is_constant_initializer(name)
        and _shape_relevant(tensor)
    )


def _store(graph: Graph, inferred: onnx.GraphProto) -> None:
    """Give the graph's values the types ``inferred`` (a proto of the caller's own, given up: its types are kept
    without a copy) holds, an initializer its tensor's element type, and each subgraph's values theirs."""
    for vi in (*inferred.input[:], *inferred.output[:], *inferred.value_info[:]):
        if vi.HasField("type") and known_type(vi.type):
            graph.adopt_value_type(vi.name, vi.type)
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        if tensor is not None:
            graph.adopt_value_type(name, elem_only(tensor.data_type))
    if next(graph.subgraphs(), None) is None:
        return
    order = graph.topological_order()
    if len(inferred.node) != len(order):
        return
    for position, node in enumerate(order):
        if not node.subgraphs:
            continue
        for attr in inferred.node[position].attribute:
            sub = node.subgraphs.get(attr.name)
            if sub is not None and attr.HasField("g"):
                _store(sub, attr.g)


#: an element type's TypeProto without a shape, made once (shared: the graph's types are replaced, never edited)
_ELEM_ONLY: Final[dict[int, onnx.TypeProto]] = {}


def elem_only(elem: int) -> onnx.TypeProto:
    """The TypeProto of a tensor of element type ``elem`` without a shape, as Resolve types an initializer's value
    (one per element type, shared: never edit it)."""
    found = _ELEM_ONLY.get(elem)
    if found is None:
        found = _ELEM_ONLY[elem] = tensor_type_proto(elem, None)
    return found


def _propagate_by_schema(graph: Graph) -> bool:
    """Type outputs ONNX inference left unknown from their schema; True if any new type was found."""
    found = False
    for node in graph.topological_order():
        for sub in node.subgraphs.values():
            found = _propagate_by_schema(sub) or found
        if all(not value or graph.value_type(value) is not None for value in node.outputs):
            continue  # every output typed: nothing for the schema to tell
        schema = node_schema(node)
        if schema is None or not schema.outputs:
            continue
        counts = input_arg_counts(schema, len(node.inputs))
        for slot, value in enumerate(node.outputs):
            if not value or graph.value_type(value) is not None:
                continue
            formal = schema.outputs[min(slot, len(schema.outputs) - 1)]
            guessed = _type_for_formal(node, schema, formal.type_str, counts, graph.value_type)
            if guessed is not None:
                graph.set_value_type(value, guessed)
                found = True
    return found


def _type_for_formal(
    node: Node, schema: Schema, type_str: str, counts: list[int], type_of: Callable[[str], onnx.TypeProto | None]
) -> onnx.TypeProto | None:
    """The type a formal of type string ``type_str`` has by the schema alone: a concrete type string's, or the type the
    constraint is bound to by the first typed input of the same constraint (``type_of`` types an input), or the one
    type the constraint allows; None when nothing binds it (an attribute such as Cast's ``to`` decides). The type
    returned is shared: never edit it."""
    if type_str not in schema.constraint_names:
        return _parsed_type(type_str)
    start = 0
    for index, formal in enumerate(schema.inputs[: len(counts)]):
        if formal.type_str == type_str:
            for value in node.inputs[start : start + counts[index]]:
                known = type_of(value) if value else None
                if known is not None:  # the type the parameter binds, without the input's shape
                    return _parsed_type(type_string(known) or "") or known
        start += counts[index]
    allowed = dict(schema.type_constraints)[type_str]
    if len(allowed) == 1:
        return _parsed_type(next(iter(allowed)))
    return None


#: :func:`parse_type_string` by type string, made once each (shared: never edited)
_PARSED_TYPES: dict[str, onnx.TypeProto | None] = {}


def _parsed_type(text: str) -> onnx.TypeProto | None:
    if text in _PARSED_TYPES:
        return _PARSED_TYPES[text]
    found = _PARSED_TYPES[text] = parse_type_string(text)
    return found


def bound_elem_type(node: Node, value: str, elem_of: Callable[[str], int | None]) -> int | None:
    """The element type output ``value`` of ``node`` has by the type constraints of the node's schema, from its
    inputs' element types (``elem_of``), as Resolve's ``InferAndVerifyTypeMatch`` binds them before any inference
    function runs; None when no input binds it or the schema does not say (then inference decides)."""
    schema = node_schema(node)
    if schema is None or not schema.outputs or value not in node.outputs:
        return None
    slot = node.outputs.index(value)
    formal = schema.outputs[min(slot, len(schema.outputs) - 1)]

    def type_of(name: str) -> onnx.TypeProto | None:
        elem = elem_of(name)
        return elem_only(elem) if elem else None

    found = _type_for_formal(node, schema, formal.type_str, input_arg_counts(schema, len(node.inputs)), type_of)
    if found is None or found.WhichOneof("value") != "tensor_type":
        return None
    return int(found.tensor_type.elem_type) or None


# ---------------------------------------------------------------------------------------------- Resolve with shape data
def infer_with_data(root: Graph) -> onnx.GraphProto:
    """ONNX shape inference over the current graph, with the data of constant initializers and with data
    propagation (ORT's ``InferenceContextImpl::getInputData`` hands constant initializers to the inference functions
    and 1.32 propagates the shape values it keeps, :func:`_propagated_as_ort`): the inferred graph (the graph as
    given when ONNX gives up), for :class:`~qdqopt.graph.core.Graph` to keep per graph (``View.DATA``)."""
    model = onnx.ModelProto(ir_version=onnx.IR_VERSION)
    for domain, version in sorted(root.opsets.items()):
        model.opset_import.append(onnx.helper.make_opsetid(domain, version))
    _fill_data_graph(model.graph, root)
    subgraphs = next(root.subgraphs(), None) is not None
    declared = _all_dim_params(model.graph, subgraphs)
    given = onnx.ModelProto()
    given.CopyFrom(model)
    try:
        inferred, invented = _infer_shapes(given, subgraphs=subgraphs)
    except Exception:  # onnx gave up: keep the declared types
        return model.graph
    # the dim names the model declares (an unk__<n> of its value_info included) are the NodeArgs' dim_params in ORT;
    # those ONNX's inference invents here are dims ORT leaves unnamed
    if invented:
        _clear_invented_dims_deep(inferred.graph, declared)
    base = {v.name: v.type for v in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info)}
    merged = _propagated_as_ort(model, base, declared)
    for vi in (*inferred.graph.output, *inferred.graph.value_info):
        found = merged.get(vi.name)
        if found is not None and found is not vi.type:
            vi.type.CopyFrom(found)
    return inferred.graph


def _all_dim_params(gp: onnx.GraphProto, subgraphs: bool = True) -> set[str]:
    """Every dim_param a graph and its subgraphs declare (``subgraphs``: False when no node has one: the nodes are
    not looked at)."""
    names = _dim_params(gp)
    if not subgraphs:
        return names
    for node in gp.node[:]:
        for sub in subgraph_protos(node):
            names |= _all_dim_params(sub)
    return names


def _clear_invented_dims_deep(gp: onnx.GraphProto, declared: set[str]) -> None:
    _clear_invented_dims(gp, declared)
    for node in gp.node[:]:
        for sub in subgraph_protos(node):
            _clear_invented_dims_deep(sub, declared)


def _fill_data_graph(gp: onnx.GraphProto, graph: Graph) -> None:
    """Fill the empty ``gp`` with the graph for :func:`infer_with_data`: the data of its constant initializers that
    inference can use (the others as typed value_info)."""
    gp.name = graph.name or "g"
    gp.input.extend(graph.inputs)
    gp.output.extend(graph.outputs)
    gp.value_info.extend(graph.value_info)
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        assert tensor is not None
        if not data_given(graph, name, tensor):
            if name not in graph.input_index():
                gp.value_info.append(tensor_value_info(name, tensor.data_type, list(tensor.dims)))
            continue
        gp.initializer.append(tensor)
    gp.node.extend(_node_protos(graph, graph.topological_order(), _fill_data_graph))


#: the largest initializer (in elements) whose data shape inference is given: a shape, axes, scales, pads, a k, a
#: Range's bounds are never bigger; the weights are, and only their type and dims matter to inference
_SHAPE_DATA_MAX = 4096


def _shape_relevant(tensor: onnx.TensorProto) -> bool:
    """Whether the inference with data is given the initializer's data (no more than :data:`_SHAPE_DATA_MAX`
    elements)."""
    count = 1
    for dim in tensor.dims[:]:
        count *= dim
    return count <= _SHAPE_DATA_MAX


def infer_node_output(
    graph: Graph,
    node: Node,
    name: str,
    known: dict[str, onnx.TypeProto],
    memo: dict[tuple[str, int], onnx.TypeProto | None],
) -> onnx.TypeProto | None:
    """The type ONNX's inference gives output ``name`` of ``node`` from its inputs' types alone: an initializer's from
    its tensor (with the data of a small constant one), any other input's from ``known`` (the graph's last inference)
    or ``memo`` (values typed node by node before, by value and producer index); None when an input is untyped, the
    op has no ONNX schema or its inference function gives up."""
    opset = graph.opset(node.domain)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset or 0, node.domain)
    except onnx.defs.SchemaError:
        return None
    input_types: dict[str, onnx.TypeProto] = {}
    input_data: dict[str, onnx.TensorProto] = {}
    for value in node.inputs:
        if not value or value in input_types:
            continue
        tensor = graph.initializer(value)
        if tensor is not None:
            input_types[value] = tensor_type_proto(tensor.data_type, list(tensor.dims))
            if graph.is_constant_initializer(value) and _shape_relevant(tensor):
                input_data[value] = tensor
            continue
        found = known.get(value) or memo.get((value, producer_index(graph, value)))
        if found is None:
            return None
        input_types[value] = found
    proto = onnx.NodeProto(op_type=node.op_type, domain=node.domain, input=node.inputs, output=node.outputs)
    proto.attribute.extend(node.attributes[a] for a in node.attribute_order())
    try:
        outputs = _infer_node_outputs(
            schema, proto, input_types, input_data, [onnx.helper.make_opsetid(node.domain, opset or 0)]
        )
    except Exception:  # onnx's inference function gave up: the whole graph's inference decides
        return None
    return outputs.get(name)


# ------------------------------------------------------------------------------------------ UpdateShapeInference
def update_shape_inference(graph: Graph, node: Node) -> None:
    """``Graph::UpdateShapeInference``: run the node's type and shape inference again and merge the result into its
    outputs' types (``InferAndVerifyTypeMatch``, ``NodeArg::UpdateTypeAndShape``).

    The inference sees each input's current type (an initializer's from its dims, a graph input's as declared, any
    other value's as typed so far) and the data of the constant initializers it reads (``getInputData``), so a node
    whose shape input a fold just made constant (a Resize's ``sizes``, a Slice's ``ends``) gets its output shape,
    which the nodes after it then see in turn. A value's known dims stay; inferred values fill unknown or symbolic
    dims (ONNX's ``mergeInShapeInfo``; on a conflict, ORT's lenient ``UnionShapeInfo``). An op ONNX has no schema
    for, or whose inference fails, keeps its types. The merged type is also recorded as the type the value had if
    a later pass takes its producer (:meth:`Graph.keep_value_type`): ORT's NodeArg keeps it.
    """
    schema = _onnx_schema(graph, node)
    if schema is None:
        return
    input_types: dict[str, onnx.TypeProto] = {}
    input_data: dict[str, onnx.TensorProto] = {}
    for name in node.inputs:
        if not name or name in input_types:
            continue
        found = _input_type(graph, name)
        if found is None:
            return  # an untyped input: ORT's inference fails the same way and types nothing new
        input_types[name] = found
        tensor = graph.constant_initializer(name)
        if tensor is not None and tensor.data_location != onnx.TensorProto.EXTERNAL:
            input_data[name] = tensor
    proto = onnx.NodeProto(name=node.name, op_type=node.op_type, domain=node.domain)
    proto.input.extend(node.inputs)
    proto.output.extend(node.outputs)
    proto.attribute.extend(node.attributes[a] for a in node.attribute_order())
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in sorted(graph.opsets.items())]
    try:
        inferred = _infer_node_outputs(schema, proto, input_types, input_data, opsets)
    except Exception:  # ONNX's inference rejected the node: its outputs keep their types
        return
    for name in node.outputs:
        found = inferred.get(name)
        if not name or found is None or not found.HasField("tensor_type"):
            continue
        merged = merge_type(graph.value_type(name), found)
        graph.set_value_type(name, merged)
        graph.keep_value_type(name, merged)
        graph.refine_data_type(name, found)


def _onnx_schema(graph: Graph, node: Node) -> onnx.defs.OpSchema | None:
    domain = normalize_domain(node.domain)
    version = graph.opsets.get(domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def _input_type(graph: Graph, name: str) -> onnx.TypeProto | None:
    """The input's NodeArg type: an initializer's from its tensor (unless a graph input declares it), a graph input's
    as declared, any other value's as the graph core has it."""
    scope: Graph | None = graph
    while scope is not None:
        for vi in scope.inputs:
            if vi.name == name:
                return vi.type if vi.HasField("type") else None
        tensor = scope.initializer(name)
        if tensor is not None:
            return tensor_type_proto(tensor.data_type, list(tensor.dims))
        if scope.defines(name):
            break
        scope = scope.parent
    return graph.value_type(name)
