"""Loading a ModelProto into :class:`Graph` objects and saving it back the way ORT writes ``optimized_model_filepath``.

Load-time normalisation (ORT's ``Graph`` constructor and first ``Resolve``, spec §2.7 as corrected in §0.1):

* ``Constant`` nodes become initializers named after their output, appended after the file's initializers (for
  IR < 4 they also become graph inputs); they take no node index.
* Initializers stored in typed fields (``float_data``, ``int32_data``...) of 128 bytes or more are re-encoded as
  ``raw_data`` (ORT moves them into OrtValues and writes them back raw). Smaller ones, raw ones, strings and
  external-data references are kept as they are.
* Unused initializers are removed: in the order of ORT's ``name_to_initial_tensor_`` map, swap-with-last in the
  main graph's initializer list, keeping the order in a subgraph's.
* Schema-default attributes are filled in memory; they reach the saved file only if the graph was modified.

Saving (``Graph::ToGraphProto``). If no pass modified any graph of the model, every graph is written with its input's
nodes, in input order, with their attributes and metadata as they were. If any graph was modified, ORT regenerates
all of them: nodes in ORT's topological order with every schema default (attributes in ``NodeAttributes`` map
order), no metadata, inputs/outputs as NodeArgs (name and type, refined by inference), and value_info made of the
input's entries whose tensors still exist plus the node outputs that subgraphs read, sorted by name. The model
keeps its IR version and producer; its opset imports gain every domain of ORT's registry that it lacked; its
metadata comes out in the iteration order of ORT's ``std::unordered_map``.

Memory (issue #10): each weight is held once from load to save. A file of :data:`SPLIT_READ_BYTES` or more is read
an initializer at a time; the graph shares the loaded TensorProtos and AttributeProtos (passes replace such protos,
never edit them); ONNX shape inference gets the large weights' dims, not their data; :func:`write_model` writes the
saved model's bytes an initializer at a time, where :func:`save_model`'s ModelProto holds a copy of the weights.
"""

from __future__ import annotations

import copy
import functools
import io
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, TypeVar

import numpy as np
import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import numpy_helper

from qdqopt.errors import ModelError
from qdqopt.graph import inference
from qdqopt.graph.contrib._base import KnownAttributes, display_name
from qdqopt.graph.core import CollectionPaused, Graph, Node, element_count, node_proto_head, tensor_array
from qdqopt.graph.inference import (
    fill_unknown,
    has_dim,
    infer_model_types,
    lenient_merge,
    merge_type,
    shapes_conflict,
)
from qdqopt.graph.schema import elem_types, normalize_domain, subgraph_protos, tensor_type_proto, tensor_value_info
from qdqopt.graph.stdhash import StdUnorderedMap

__all__ = ["Model", "ModelSource", "load_model", "merge_type", "save_model", "write_atomic", "write_model"]

#: what :func:`load_model` takes: a path to an .onnx file, or a ModelProto
ModelSource = str | os.PathLike[str] | onnx.ModelProto

# Domains ORT 1.32 adds to the saved opset_import when the model lacks them, in the order it appends them [EXP].
REGISTRY_OPSETS: tuple[tuple[str, int], ...] = (
    ("ai.onnx.ml", 5),
    ("ai.onnx.training", 1),
    ("ai.onnx.preview", 1),
    ("com.microsoft", 1),
    ("ai.onnx.preview.training", 1),
    ("com.microsoft.experimental", 1),
    ("com.microsoft.nchwc", 1),
    ("org.pytorch.aten", 1),
)
RAW_THRESHOLD_BYTES = 128
#: model files from this size on are read an initializer at a time (:func:`_read_split`); smaller ones whole
SPLIT_READ_BYTES = 1 << 22

_P = TypeVar("_P", bound=Message)


@dataclass
class Model:
    """A loaded model: the main graph plus the model-level fields ORT carries over."""

    header: onnx.ModelProto
    graph: Graph
    opset_import: list[tuple[str, int]]
    base_dir: Path | None = None
    value_types: dict[str, onnx.TypeProto] = field(default_factory=dict)

    @property
    def ir_version(self) -> int:
        return int(self.header.ir_version)


# ---------------------------------------------------------------------------------------------------------- loading
#: the subgraphs of a GraphProto's nodes: (position, the node's graphs) of each node that has any, in node order
Nested = list[tuple[int, list[onnx.GraphProto]]]


def _nested_graphs(gp: onnx.GraphProto) -> Nested:
    """The nodes of ``gp`` that hold subgraphs (:func:`subgraph_protos`), found once for the load's checks."""
    out: Nested = []
    for position, node in enumerate(gp.node[:]):
        subs = subgraph_protos(node)
        if subs:
            out.append((position, subs))
    return out


def read_model_proto(source: ModelSource, *, initializers: bool = True) -> tuple[onnx.ModelProto, Path | None]:
    """Read a model file without following external data outside its folder. Raises :class:`ModelError`.

    Without ``initializers``, the main graph comes without them (for a summary of the model, such as its op counts:
    a large file is then read an initializer at a time, each checked and dropped, see :func:`_read_split`).
    """
    if isinstance(source, onnx.ModelProto):
        return source, None
    path = Path(source)
    if not initializers and path.is_file() and _splittable(path):
        base = path.resolve().parent
        try:
            header, gp, _, has_graph = _read_split(path, sink=lambda t: _check_external_location(t, base, path))
        except (_NotSplittable, DecodeError, ValueError, RuntimeError, OSError):
            pass  # parsed whole below, which says what is wrong with it
        else:
            if not has_graph:
                raise ModelError(f"{path}: not an ONNX model (no graph)")
            _check_external_locations(gp, base, path, [])
            header.graph.CopyFrom(gp)
            return header, base
    proto, base, _, _, _ = _read_whole(path)
    if not initializers:
        proto.graph.ClearField("initializer")
    return proto, base


def _splittable(path: Path) -> bool:
    """Whether a model file is read an initializer at a time (:data:`SPLIT_READ_BYTES`, binary protobuf)."""
    return path.stat().st_size >= SPLIT_READ_BYTES and onnx.serialization.registry.get_format_from_file_extension(
        path.suffix
    ) in (None, "protobuf")


def _read_whole(path: Path) -> tuple[onnx.ModelProto, Path, bool, Nested, bytes | None]:
    """The model file parsed whole (as ``onnx.load`` without external data), its folder, whether its strings are
    known to be valid UTF-8 (a protobuf file of less than :data:`SPLIT_READ_BYTES` whose bytes parse as the
    UTF-8-verifying twin of ModelProto, :func:`_utf8_verifying_types`: :func:`_check_utf8` then has nothing to
    find), the main graph's nodes that hold subgraphs (:func:`_nested_graphs`), and the file's bytes without the main
    graph's initializers where that check made them (:func:`_without_initializers`)."""
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if not path.is_file():
        raise ModelError(f"{path}: not a file")
    # onnx.load's steps: the format from the file's extension (protobuf by default), the bytes parsed
    fmt = onnx.serialization.registry.get_format_from_file_extension(os.path.splitext(os.path.abspath(path))[1])
    fmt = fmt or "protobuf"
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        proto = onnx.load_model_from_string(data, format=fmt)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{path}: not an ONNX model ({exc.__class__.__name__})") from exc
    if not proto.HasField("graph"):
        raise ModelError(f"{path}: not an ONNX model (no graph)")
    base = path.resolve().parent
    small = fmt == "protobuf" and len(data) < SPLIT_READ_BYTES  # (a file read whole, its UTF-8 checked on the wire)
    stripped = _without_initializers(data) if small else None
    nested = _nested_graphs(proto.graph)
    _check_external_locations(proto.graph, base, path, nested=nested)
    valid = small and _file_strings_valid(proto, data, stripped)
    return proto, base, valid, nested, stripped


def _file_strings_valid(proto: onnx.ModelProto, data: bytes, stripped: bytes | None) -> bool:
    """Whether every string of the model file ``data``, parsed as ``proto``, is valid UTF-8 (False: one may not be).

    The file's bytes but its main graph's initializers parse as the UTF-8-verifying twin (:func:`_utf8_bytes_valid`),
    and each initializer's strings are read from ``proto`` (:func:`_strings_valid`): parsed again, the weights would
    take longer than all the rest of the file (1.6 ms against 0.1 on MobileNetV3, mostly fresh memory to fill).
    ``stripped``: :func:`_without_initializers` of ``data``."""
    if stripped is None:
        return _utf8_bytes_valid(onnx.ModelProto, data)
    return _utf8_bytes_valid(onnx.ModelProto, stripped) and all(_strings_valid(t) for t in proto.graph.initializer)


def _without_initializers(data: bytes) -> bytes | None:
    """The serialised ModelProto ``data`` without its main graph's initializers (its graph's other fields last: the
    same message); None where :func:`_split_model` cannot take the bytes apart (they are then parsed whole)."""
    try:
        header, graph, has_graph = _split_model(_Window.over(data), _skip_initializer)
    except _NotSplittable:
        return None
    if not has_graph:
        return b"".join(header)
    graph_bytes = b"".join(graph)
    return b"".join((*header, _MODEL_GRAPH_TAG, _varint(len(graph_bytes)), graph_bytes))


def _skip_initializer(start: int, length: int) -> None:
    """An initializer :func:`_without_initializers` leaves out."""


def _utf8_bytes_valid(message_type: type[Message], data: bytes) -> bool:
    """Whether ``data``, the bytes of a ``message_type``, parse as its UTF-8-verifying twin
    (:func:`_utf8_verifying_types`; False: a string may not be UTF-8)."""
    twin = _utf8_verifying_types().get(message_type.DESCRIPTOR.full_name)
    if twin is None:
        return False
    try:
        twin.FromString(data)
    except (DecodeError, ValueError):
        return False
    return True


def _check_external_locations(
    graph: onnx.GraphProto,
    base: Path,
    path: Path,
    initializers: Iterable[onnx.TensorProto] | None = None,
    nested: Nested | None = None,
) -> None:
    for tensor in graph.initializer if initializers is None else initializers:
        _check_external_location(tensor, base, path)
    for _, subs in _nested_graphs(graph) if nested is None else nested:
        for sub in subs:
            _check_external_locations(sub, base, path)


def _check_external_location(tensor: onnx.TensorProto, base: Path, path: Path) -> None:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or not target.is_relative_to(base):
            raise ModelError(f"{path}: initializer {tensor.name!r} has external data outside the model's folder")
        if not target.is_file():
            raise ModelError(f"{path}: initializer {tensor.name!r}: external data file {location!r} is missing")


def load_model(source: ModelSource, *, inline_local_functions: bool = True) -> Model:
    """Load a model as ORT does before any transformer runs.

    A model with model-local functions (``ModelProto.functions``, checked not to be recursive) then goes through ORT's
    ahead-of-time function inlining, the first step of a session (:func:`qdqopt.partition.inline_functions_aot`),
    unless ``inline_local_functions`` is False (``session.disable_aot_function_inlining=1``): the partitioner then
    inlines the calls.

    The loaded graph shares the file's initializers and attributes (passes replace such protos, never edit them):
    each weight is held once, from load to save. A ModelProto given as ``source`` is shared the same way, so it must
    not be edited while the model is in use.
    """
    with CollectionPaused():
        return _load_model(source, inline_local_functions)


def _load_model(source: ModelSource, inline_local_functions: bool) -> Model:
    header, gp, initializers, base, nested, stripped = _read_parts(source)
    # ORT's check that every input is defined (before ONNX's inference sees the graph) reads the built graph where
    # no node holds a subgraph: the file's nodes are then read once; an invalid model still reports its first
    # undefined input before anything else the loader finds wrong with it
    if nested:
        _check_inputs_defined(gp, frozenset(), initializers, nested=nested)
    opset_import = [(normalize_domain(o.domain), int(o.version)) for o in header.opset_import]
    opsets = dict(opset_import)
    # ORT's Model knows every domain of its registry (which is why they appear in the saved opset_import)
    for domain, version in missing_opsets(set(opsets)):
        opsets.setdefault(domain, version)
    try:
        _check_declared_types(gp, nested)
        graph = _build_graph(gp, opsets, int(header.ir_version), None, None, initializers=initializers)
    except Exception:
        if not nested:
            _check_inputs_defined(gp, frozenset(), initializers)
        raise
    if not nested and not graph.reads_only_defined_values():
        _check_inputs_defined(gp, frozenset(), initializers)  # raises, naming the first undefined input
    model = Model(header=header, graph=graph, opset_import=opset_import, base_dir=base)
    model.value_types = _infer_types(
        _inference_model(header, gp, initializers, stripped), owned=True, subgraphs=_has_subgraphs(graph), graph=graph
    )
    _load_time_resolve(graph)
    if not header.functions and _data_types_as_loaded(graph, model.value_types):
        graph.seed_data_types(model.value_types)
        if _pass_types_as_loaded(graph, model.value_types):
            graph.seed_pass_types(model.value_types)
    if header.functions:
        from qdqopt.graph.function_inlining import check_not_recursive, set_local_functions
        from qdqopt.partition import inline_functions_aot

        functions = [_copy(f) for f in header.functions]  # the partitioner edits header.functions
        check_not_recursive(functions)
        set_local_functions(graph, functions)
        if inline_local_functions:
            inline_functions_aot(model)
    return model


def _data_types_as_loaded(graph: Graph, types: dict[str, onnx.TypeProto]) -> bool:
    """Whether the load-time types are those the run's first inference with data gives the graph as loaded
    (:meth:`Graph.seed_data_types`). Both run ONNX's inference with the small initializers' data and keep ORT's
    shape-value propagation, but the loader lets the inferred type of a graph output win over its declared shape
    where the inference with data merges it into the declared one (as ONNX does): so only when every output's
    declared type is the loaded one, and the graph has no subgraphs (their values are typed per graph) and lists its
    nodes in topological order (the loader's inference types them in the file's order, and leaves untyped a value
    whose producer comes after a node that feeds it), and the model names no dim ``unk__<n>``."""
    if _has_subgraphs(graph):
        return False
    for node in graph.nodes():  # (in index order: the file's)
        for value in node.inputs:
            producer = graph.producer(value) if value else None
            if producer is not None and producer.index > node.index:
                return False
    for output in graph.outputs:
        found = types.get(output.name)
        if found is None or found != output.type:
            return False
    for vi in (*graph.inputs, *graph.outputs, *graph.value_info):
        # a dim the model names unk__<n> is one ONNX's inference may invent too, and which value keeps it depends on
        # what each inference was given
        if vi.type.HasField("tensor_type") and any(
            d.dim_param.startswith("unk__") for d in vi.type.tensor_type.shape.dim[:]
        ):
            return False
    return True


def _pass_types_as_loaded(graph: Graph, types: dict[str, onnx.TypeProto]) -> bool:
    """Whether the load-time types are those the run's first Resolve inference (``View.PASS``) gives the graph as
    loaded (:meth:`Graph.seed_pass_types`), where they are already those of the first inference with data
    (:func:`_data_types_as_loaded`). That Resolve's inference propagates no shape value and is given the data of
    the small constant initializers only: so only when no node makes a shape value (Shape, Size), every
    initializer's data is given to both inferences or to neither, and every node output has a load-time type (the
    loader's inference gave up on none; the Resolve's keeps what the schemas tell)."""
    if any(graph.has_node_of(op) for op in inference.SHAPE_VALUE_SOURCES):  # (_reads_shape_values, on the graph)
        return False
    for node in graph.nodes():
        for value in node.outputs:
            if value and value not in types:
                return False
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        # (inference.data_given through its module: the one definition, which a mutation test replaces)
        if tensor is not None and _data_for_inference(tensor) != inference.data_given(graph, name, tensor):
            return False
    return True


def _check_inputs_defined(
    gp: onnx.GraphProto,
    outer: frozenset[str],
    initializers: Iterable[onnx.TensorProto] | None = None,
    parent: onnx.NodeProto | None = None,
    nested: Nested | None = None,
) -> None:
    """ORT's ``Graph::Resolve`` (BuildConnections): every input a node reads is a graph input, an initializer, a
    node's output or, in a subgraph, a value of an enclosing graph; else the model is invalid. Checked before ONNX's
    shape inference sees the graph: some of its C++ inference functions (LabelEncoder's) read the missing input's
    type without checking it, and crash the process.

    A body of an ONNX-domain node (``parent``: If, Loop, Scan) must also list its nodes in topological order: ORT
    runs ONNX's inference on it at load, which wants each input produced by a node before (or a value of the
    enclosing graphs, the body's inputs and initializers). ORT sorts the main graph itself: it may come in any
    order."""
    nodes = gp.node[:]  # (a slice: iterating a upb container ends in an IndexError, which costs)
    known = set(outer)
    known.update(v.name for v in gp.input)
    known.update(t.name for t in (gp.initializer if initializers is None else initializers))
    known.update(s.values.name for s in gp.sparse_initializer)
    before_nodes = set(known) if parent is not None else set()  # (only a body's order is checked)
    reads: set[str] = set()
    for node in nodes:  # (slices again: cheaper than iterating the containers)
        known.update(node.output[:])
        reads.update(node.input[:])
    reads.discard("")
    # the usual case: every input defined, and only the subgraphs are left to look into; else the first undefined
    # input, node by node, is the one reported
    all_defined = reads <= known
    subgraphs = dict(_nested_graphs(gp) if nested is None else nested)
    for position in range(len(nodes)) if not all_defined else sorted(subgraphs):
        node = nodes[position]
        if not all_defined:
            for name in node.input:
                if name and name not in known:
                    raise ModelError(
                        f"node {node.name!r} ({node.op_type}): input {name!r} is not a graph input, initializer, or "
                        "output of a previous node (ORT: Invalid model)"
                    )
        for sub in subgraphs.get(position, ()):
            onnx_node = normalize_domain(node.domain) == ""
            _check_inputs_defined(sub, frozenset(known), parent=node if onnx_node else None)
    if parent is not None:
        for node in nodes:
            for name in node.input:
                if name and name not in before_nodes:
                    raise ModelError(
                        f"node {node.name!r} ({node.op_type}) in a subgraph of {parent.op_type} {parent.name!r}: "
                        f"input {name!r} is not output of any previous node (ORT: Nodes in a graph must be "
                        "topologically sorted)"
                    )
            before_nodes.update(node.output)


def _check_declared_types(gp: onnx.GraphProto, nested: Nested | None = None) -> None:
    """ORT's loader: a graph input, output or value_info whose element type the TensorProto enum lacks fails the
    load ("Invalid tensor data type 67."); subgraphs too."""
    for vi in (*gp.input, *gp.output, *gp.value_info):
        bad = next((elem for elem in elem_types(vi.type) if elem not in _DATA_TYPES), None)
        if bad is not None:
            raise ModelError(f"Failed to load model with error: Invalid tensor data type {bad}. (value {vi.name!r})")
    for _, subs in _nested_graphs(gp) if nested is None else nested:
        for sub in subs:
            _check_declared_types(sub)


def _check_utf8(message: Message, where: str) -> None:
    """Raise :class:`ModelError` on a string field (a name, an op type, a doc_string ...) that is not valid UTF-8.

    ONNX's strings are UTF-8; ORT's C++ keeps such a name as bytes, but protobuf's Python binding hands it over as
    ``bytes`` where every other name is a ``str``, so qdqopt cannot take the model (an attribute's string is
    ``bytes`` by type, and read with :meth:`qdqopt.graph.core.Node.attr_str`, which keeps undecodable bytes).

    The usual model has none, which :func:`_strings_valid` tells at C speed; only then is every message walked in
    Python, for the first such field (:func:`_find_non_utf8`)."""
    if _strings_valid(message):
        return
    found = _find_non_utf8(message)
    if found is None:
        return
    steps, item = found
    label = ".".join(reversed(steps))
    raise ModelError(f"{where}: {label} is not valid UTF-8 ({item[:40]!r}); ONNX strings are UTF-8")


#: per field descriptor: whether it is a string field, a message field, repeated
_FIELD_KINDS: dict[FieldDescriptor, tuple[bool, bool, bool]] = {}
#: the string and message fields of a TensorProto, in field-number order (its data fields are never read: reading
#: ``raw_data`` would copy the weight)
_TENSOR_FIELDS = tuple(
    d
    for d in sorted(onnx.TensorProto.DESCRIPTOR.fields, key=lambda d: d.number)
    if d.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE)
)


#: per message type, the field whose messages :func:`_strings_valid` looks at one by one rather than copy them: a
#: model's graph, a graph's initializers (the weights)
_BULKY_FIELDS = {onnx.ModelProto.DESCRIPTOR.full_name: "graph", onnx.GraphProto.DESCRIPTOR.full_name: "initializer"}


def _strings_valid(message: Message) -> bool:
    """True when every string field of ``message`` (nested messages included) is valid UTF-8; False when one may
    not be (:func:`_find_non_utf8` then says which).

    The message is serialised and parsed back as its twin in :func:`_utf8_verifying_types`, whose parser verifies
    each string in C; a model's graph and a graph's initializers are left out of that copy and looked at on their
    own (a TensorProto's strings read directly, so that its data is never copied).
    """
    if isinstance(message, onnx.TensorProto):  # set fields: strings read as str, no message (external data ...)
        return all(type(getattr(message, name)) is str for name in _TENSOR_STRINGS) and not any(
            len(getattr(message, name)) if repeated else message.HasField(name) for name, repeated in _TENSOR_MESSAGES
        )
    bulky = _BULKY_FIELDS.get(message.DESCRIPTOR.full_name, "")
    parts = _field_messages(message, message.DESCRIPTOR.fields_by_name[bulky]) if bulky else []
    probe = message
    if parts:
        probe = type(message)()
        try:
            _copy_fields(probe, message, skip=bulky)
        except ValueError:  # a string field read as bytes is refused
            return False
    return _utf8_bytes_valid(type(message), probe.SerializeToString()) and all(_strings_valid(p) for p in parts)


def _field_messages(message: Message, descriptor: FieldDescriptor) -> list[Message]:
    """The messages a message field holds: none, one, or a repeated field's."""
    if _is_repeated(descriptor):
        return getattr(message, descriptor.name)[:]  # type: ignore[no-any-return]
    return [getattr(message, descriptor.name)] if message.HasField(descriptor.name) else []


@functools.cache
def _utf8_verifying_types() -> dict[str, type[Message]]:
    """ONNX's message types, by full name, as twins whose parser rejects a string field that is not valid UTF-8.

    ``onnx.proto`` is proto2, whose strings protobuf does not verify; the same file declared proto3 (nothing else
    changed: the wire format, and so what parses, is the same) has upb verify each one as it parses. Empty if the
    installed ``onnx`` declares its messages in a way proto3 does not allow (every model is then walked)."""
    file_descriptor = onnx.ModelProto.DESCRIPTOR.file
    file_proto = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(file_proto)
    file_proto.syntax = "proto3"
    pool = descriptor_pool.DescriptorPool()
    try:
        pool.Add(file_proto)
    except (TypeError, ValueError):
        return {}
    return {
        d.full_name: message_factory.GetMessageClass(pool.FindMessageTypeByName(d.full_name))
        for d in file_descriptor.message_types_by_name.values()
    }


def _field_kind(descriptor: FieldDescriptor) -> tuple[bool, bool, bool]:
    kind = _FIELD_KINDS.get(descriptor)
    if kind is None:
        kind = _FIELD_KINDS[descriptor] = (
            descriptor.type == FieldDescriptor.TYPE_STRING,
            descriptor.type == FieldDescriptor.TYPE_MESSAGE,
            _is_repeated(descriptor),
        )
    return kind


def _set_fields(message: Message) -> list[tuple[FieldDescriptor, object]]:
    if isinstance(message, onnx.TensorProto):
        out = []
        for descriptor in _TENSOR_FIELDS:
            if _is_repeated(descriptor):
                value = getattr(message, descriptor.name)
                if len(value):
                    out.append((descriptor, value))
            elif message.HasField(descriptor.name):
                out.append((descriptor, getattr(message, descriptor.name)))
        return out
    return message.ListFields()  # type: ignore[no-any-return]


def _find_non_utf8(message: Message) -> tuple[list[str], bytes] | None:
    """The first string field of ``message`` (depth first, in field-number order) that is not valid UTF-8: the steps
    to it, innermost first, and its bytes; None if there is none."""
    for descriptor, value in _set_fields(message):
        is_string, is_message, repeated = _field_kind(descriptor)
        if is_string:
            for item in value[:] if repeated else (value,):  # type: ignore[index]
                if isinstance(item, bytes):
                    return [descriptor.name], item
        elif is_message:
            for i, item in enumerate(value[:] if repeated else (value,)):  # type: ignore[index]
                found = _find_non_utf8(item)
                if found is None:
                    continue
                name = getattr(item, "name", "") if descriptor.name in ("node", "initializer", "attribute") else ""
                step = f"{descriptor.name}[{i}]" if repeated else descriptor.name
                if isinstance(name, str) and name:
                    step += f" {name!r}"
                found[0].append(step)
                return found
    return None


class _NotSplittable(Exception):
    """The file is not plain protobuf wire data :func:`_read_split` can take apart (it is parsed whole instead)."""


def _read_parts(
    source: ModelSource,
) -> tuple[onnx.ModelProto, onnx.GraphProto, list[onnx.TensorProto], Path | None, Nested, bytes | None]:
    """The model's fields but its graph (``header``), its main graph but the initializers, the initializers, the
    model's folder, the main graph's nodes that hold subgraphs (:func:`_nested_graphs`), and the file's bytes without
    the main graph's initializers if the load made them (:func:`_read_whole`). Raises :class:`ModelError` as
    :func:`read_model_proto` does.

    A file of :data:`SPLIT_READ_BYTES` or more is read field by field (:func:`_read_split`): each initializer is
    parsed from its own bytes, so loading takes the file's size once, not twice (the file's bytes and the parsed
    model). A smaller one is parsed whole, which is faster.
    """
    if isinstance(source, onnx.ModelProto):
        _check_utf8(source, "the model")
        header = onnx.ModelProto()
        _copy_except(header, source, "graph")
        return header, source.graph, list(source.graph.initializer), None, _nested_graphs(source.graph), None
    path = Path(source)
    if path.is_file() and _splittable(path):
        try:
            header, gp, initializers, has_graph = _read_split(path)
        except (_NotSplittable, DecodeError, ValueError, RuntimeError, OSError):
            pass  # parsed whole below, which says what is wrong with it
        else:
            if not has_graph:
                raise ModelError(f"{path}: not an ONNX model (no graph)")
            base = path.resolve().parent
            nested = _nested_graphs(gp)
            _check_external_locations(gp, base, path, initializers, nested)
            for part in (header, gp, *initializers):
                _check_utf8(part, str(path))
            return header, gp, initializers, base, nested, None
    whole, whole_base, utf8_valid, nested, stripped = _read_whole(path)
    if not utf8_valid:
        _check_utf8(whole, str(path))
    header = onnx.ModelProto()
    _copy_except(header, whole, "graph")
    return header, whole.graph, list(whole.graph.initializer), whole_base, nested, stripped


def _copy_except(target: Message, source: Message, name: str) -> None:
    """Copy ``source`` but its field ``name`` into the empty message ``target``, the fields it did not know when it
    was parsed included (:func:`_copy_fields` if it has none; otherwise a whole copy, then ``name`` cleared)."""
    if _has_unknown_fields(source):
        target.CopyFrom(source)
        target.ClearField(name)
    else:
        _copy_fields(target, source, skip=name)


def _has_unknown_fields(message: Message) -> bool:
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet
    except ImportError:  # pragma: no cover - protobuf before 4.22: assume there are some
        return True
    return len(UnknownFieldSet(message)) > 0


def _copy_fields(target: Message, source: Message, *, skip: str) -> None:
    """Copy every known field of ``source`` but ``skip`` into the empty message ``target`` (without copying
    ``skip``)."""
    for descriptor, value in source.ListFields():
        if descriptor.name != skip:
            _copy_field(target, descriptor, value)


def _copy_field(target: Message, descriptor: FieldDescriptor, value: object) -> None:
    if _is_repeated(descriptor):
        getattr(target, descriptor.name).extend(value)
    elif descriptor.message_type is not None:
        getattr(target, descriptor.name).CopyFrom(value)
    else:
        setattr(target, descriptor.name, value)


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    if hasattr(descriptor, "is_repeated"):  # protobuf 6.31 and later (``label`` is gone from upb's descriptors)
        return bool(descriptor.is_repeated)
    return bool(descriptor.label == descriptor.LABEL_REPEATED)


#: a TensorProto's singular string fields (an unset one reads as ""), and its message fields and repeated string
#: fields (whether repeated), by name: :func:`_strings_valid` reads the first and wants the others unset
_TENSOR_STRINGS = tuple(d.name for d in _TENSOR_FIELDS if d.type == FieldDescriptor.TYPE_STRING and not _is_repeated(d))
_TENSOR_MESSAGES = tuple(
    (d.name, _is_repeated(d)) for d in _TENSOR_FIELDS if d.type == FieldDescriptor.TYPE_MESSAGE or _is_repeated(d)
)


def _copy(proto: _P) -> _P:
    out: _P = type(proto)()
    out.CopyFrom(proto)
    return out


_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_LENGTH_DELIMITED: Final = 2


def _read_split(
    path: Path, *, sink: Callable[[onnx.TensorProto], None] | None = None
) -> tuple[onnx.ModelProto, onnx.GraphProto, list[onnx.TensorProto], bool]:
    """Parse a protobuf model file as :func:`onnx.load` does, but in parts: the ModelProto's fields but its graph,
    the graph's fields but its initializers, then each initializer from its own bytes, in file order (handed to
    ``sink`` instead of being returned, if given).

    (A message parsed from its fields in any grouping is the same message: protobuf merges a message's fields in
    order, and a repeated field's elements come in file order.) Raises :class:`_NotSplittable` where the wire data is
    not a single length-delimited graph of length-delimited initializers (groups, a graph given twice, truncation).
    """
    initializers: list[onnx.TensorProto] = []
    take = initializers.append if sink is None else sink
    with open(path, "rb", buffering=0) as handle:
        data = _Window(handle, os.fstat(handle.fileno()).st_size)
        header_parts, graph_parts, has_graph = _split_model(
            data, lambda start, length: take(_parse(onnx.TensorProto(), data.read(start, length)))
        )
    header = _parse(onnx.ModelProto(), b"".join(header_parts))
    graph = _parse(onnx.GraphProto(), b"".join(graph_parts))
    return header, graph, initializers, has_graph


def _split_model(data: _Window, initializer: Callable[[int, int], None]) -> tuple[list[bytes], list[bytes], bool]:
    """The wire data of a ModelProto taken apart: the bytes of its fields but its graph, of its graph's fields but
    its initializers, and whether it has a graph; each initializer's place (start, length) is handed to
    ``initializer`` in file order. Raises :class:`_NotSplittable` (see :func:`_read_split`)."""
    header_parts: list[bytes] = []
    graph_parts: list[bytes] = []
    has_graph = False
    pos = 0
    while pos < data.size:
        field_number, wire_type, start = data.tag(pos)
        if field_number == _MODEL_GRAPH:
            if has_graph or wire_type != _LENGTH_DELIMITED:
                raise _NotSplittable("graph")
            has_graph = True
            length, start = data.varint(start)
            end = start + length
            if end > data.size:
                raise _NotSplittable("truncated")
            _split_graph(data, start, end, graph_parts, initializer)
        else:
            end = data.field_end(start, wire_type, data.size)
            header_parts.append(data.read(pos, end - pos))
        pos = end
    return header_parts, graph_parts, has_graph


def _split_graph(
    data: _Window, pos: int, end: int, parts: list[bytes], initializer: Callable[[int, int], None]
) -> None:
    run = pos  # where the current run of fields other than initializers starts
    while pos < end:
        field_number, wire_type, start = data.tag(pos)
        if field_number == _GRAPH_INITIALIZER:
            if wire_type != _LENGTH_DELIMITED:
                raise _NotSplittable("initializer")
            length, start = data.varint(start)
            stop = start + length
            if stop > end:
                raise _NotSplittable("truncated")
            if run < pos:
                parts.append(data.read(run, pos - run))
            initializer(start, length)
            run = stop
        else:
            stop = data.field_end(start, wire_type, end)
        pos = stop
    if run < end:
        parts.append(data.read(run, end - run))


def _parse(proto: _P, data: bytes) -> _P:
    decoded = proto.ParseFromString(data)
    if decoded is not None and decoded != len(data):
        raise _NotSplittable("partly decoded")
    return proto


class _Window:
    """Protobuf wire data read from a file through a window of :attr:`CHUNK` bytes (larger fields are read
    directly, so the file is never held whole)."""

    CHUNK = 1 << 16

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle = handle
        self.size = size
        self.buffer = b""
        self.offset = 0  # the file position of buffer[0]

    @classmethod
    def over(cls, data: bytes) -> _Window:
        """A window over wire data held whole in memory (never read again: every field is in :attr:`buffer`)."""
        window = cls(io.BytesIO(data), len(data))
        window.buffer = data
        return window

    def _load(self, pos: int, count: int) -> None:
        self.handle.seek(pos)
        self.buffer = _read_exactly(self.handle, min(max(count, self.CHUNK), self.size - pos))
        self.offset = pos

    def read(self, pos: int, count: int) -> bytes:
        """The ``count`` bytes at ``pos`` (the caller checked they are in the file)."""
        at = pos - self.offset
        if at >= 0 and at + count <= len(self.buffer):
            return self.buffer[at : at + count]
        if count >= self.CHUNK:
            self.handle.seek(pos)
            return _read_exactly(self.handle, count)
        self._load(pos, count)
        return self.buffer[:count]

    def varint(self, pos: int) -> tuple[int, int]:
        """The varint at ``pos`` and the position after it."""
        at = pos - self.offset
        buffer = self.buffer
        if 0 <= at < len(buffer) and buffer[at] < 0x80:  # most tags and lengths of small fields: one byte
            return buffer[at], pos + 1
        if at < 0 or (at + 10 > len(buffer) and self.offset + len(buffer) < self.size):
            self._load(pos, 10)
            at = 0
            buffer = self.buffer
        value = shift = 0
        for i in range(at, min(at + 10, len(buffer))):
            byte = buffer[i]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos + i - at + 1
            shift += 7
        raise _NotSplittable("bad varint")

    def tag(self, pos: int) -> tuple[int, int, int]:
        """The field number and wire type of the field at ``pos``, and where its value starts."""
        tag, after = self.varint(pos)
        if tag >> 3 == 0 or tag >= 1 << 32:
            raise _NotSplittable("bad tag")
        return tag >> 3, tag & 7, after

    def field_end(self, pos: int, wire_type: int, limit: int) -> int:
        """The end of the field whose value starts at ``pos``."""
        if wire_type == 0:
            end = self.varint(pos)[1]
        elif wire_type == 1:
            end = pos + 8
        elif wire_type == _LENGTH_DELIMITED:
            length, start = self.varint(pos)
            end = start + length
        elif wire_type == 5:
            end = pos + 4
        else:  # groups (deprecated) and invalid wire types
            raise _NotSplittable("wire type")
        if end > limit:
            raise _NotSplittable("truncated")
        return end


def _read_exactly(handle: BinaryIO, count: int) -> bytes:
    data = handle.read(count)
    if len(data) != count:  # an unbuffered read may return less: read the rest
        parts = [data]
        while count > sum(len(p) for p in parts):
            more = handle.read(count - sum(len(p) for p in parts))
            if not more:
                raise _NotSplittable("truncated")
            parts.append(more)
        data = b"".join(parts)
    return data


#: (attribute count, names in proto order) -> the node attribute map ORT makes of them
_ATTRIBUTE_MAPS: Final[dict[tuple[object, ...], StdUnorderedMap]] = {}


def _add_proto_node(
    graph: Graph, proto: onnx.NodeProto, domain: str, *, original: onnx.NodeProto | None = None
) -> Node:
    """Add the node ``proto`` describes (its attribute protos shared: they are never edited in place), under
    ``domain``; its subgraphs are the caller's. (The loader, which builds a graph from scratch, calls
    :meth:`Graph.load_node` instead: see :func:`_build_graph`.)"""
    attrs, attr_map = _attribute_map(proto.attribute[:])
    return graph.add_node(
        proto.name,
        proto.op_type,
        list(proto.input),
        list(proto.output),
        domain=domain,
        attributes=attrs,
        doc_string=proto.doc_string,
        original=original,
        attr_map=attr_map,
    )


def _attribute_map(attributes: list[onnx.AttributeProto]) -> tuple[dict[str, onnx.AttributeProto], StdUnorderedMap]:
    """A node's attributes by name, and the node attribute map ORT makes of the NodeProto's ``attributes``."""
    attrs = {a.name: a for a in attributes}
    # ORT fills a reserved map in proto order, then copies it into the node (same iteration order): one map per
    # list of names, copied (a copy of a small map is free)
    key = (len(attributes), *attrs)
    template = _ATTRIBUTE_MAPS.get(key)
    if template is None:
        template = StdUnorderedMap(memo=True)
        template.reserve(len(attributes))
        template.update(attrs)
        if len(_ATTRIBUTE_MAPS) < 4096:
            _ATTRIBUTE_MAPS[key] = template
    return attrs, template.copy()


def _build_graph(
    gp: onnx.GraphProto,
    opsets: dict[str, int],
    ir_version: int,
    parent: Graph | None,
    parent_node: Node | None,
    *,
    initializers: Iterable[onnx.TensorProto] | None = None,
) -> Graph:
    """The Graph ``gp`` describes, with ``initializers`` in place of ``gp.initializer`` if given."""
    graph = Graph(name=gp.name, opsets=opsets, parent=parent, parent_node=parent_node)
    graph.ir_version = ir_version
    graph.doc_string = gp.doc_string
    graph.doc_string_present = gp.HasField("doc_string")
    # shared with the file's proto, as the nodes and initializers are (the graph never edits them in place)
    graph.inputs = gp.input[:]
    graph.outputs = gp.output[:]
    graph.value_info = gp.value_info[:]
    graph.sparse_initializers = gp.sparse_initializer[:]
    graph.metadata_props = gp.metadata_props[:]
    for tensor in gp.initializer if initializers is None else initializers:
        if graph.is_initializer(tensor.name):
            raise ModelError(
                f"initializer {tensor.name!r} is defined twice in graph {gp.name!r}: not valid ONNX; ORT keeps both "
                "entries with the last one's data, which qdqopt does not model"
            )
        graph.add_initializer(_normalise_initializer(tensor))
    node_protos = gp.node[:]  # (a slice: iterating a upb container ends in an IndexError, which costs)
    others = []  # the nodes but Constants
    for node_proto in node_protos:
        if _is_constant(node_proto):
            tensor = _constant_to_tensor(node_proto)
            graph.add_initializer(_normalise_initializer(tensor))
            if ir_version < 4:
                graph.inputs.append(tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
        else:
            others.append(node_proto)
    made: set[str] = set()
    original_nodes = graph.original_nodes
    for node_proto in others:
        outputs = node_proto.output[:]
        for out in outputs:  # ORT's loader: a value is defined once, by an initializer or by one node
            if out and (out in made or graph.is_initializer(out)):
                raise ModelError(f"This is an invalid model. Error: Duplicate definition of name ({out}).")
            made.add(out)
        original_nodes.append(node_proto)
        attributes = node_proto.attribute[:]
        attrs, attr_map = _attribute_map(attributes)
        node = graph.load_node(
            node_proto.name,
            node_proto.op_type,
            node_proto.input[:],
            outputs,
            node_proto.domain,
            attrs,
            node_proto.doc_string,
            node_proto,
            attr_map,
        )
        for attr in attributes:
            if attr.type == onnx.AttributeProto.GRAPH:
                node.subgraphs[attr.name] = _build_graph(attr.g, opsets, ir_version, graph, node)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                raise ModelError(
                    f"node {node_proto.name!r} ({node_proto.op_type}): GRAPHS attributes are not supported"
                )
        if node.subgraphs:
            graph.refresh_implicit_inputs(node)
    graph.finish_load()
    graph.modified = False
    graph.forget_production()
    return graph


def _load_time_resolve(graph: Graph) -> None:
    graph.check_attribute_types()
    graph.fill_default_attributes()
    # every initializer (a Constant node's output included) has a NodeArg before the first Resolve drops the unused
    # ones, and the NodeArg, typed, stays: its value_info entry is saved (observed on 1.32.0)
    _record_value_info(graph)
    _remove_unused_initializers(graph)


def _record_value_info(graph: Graph) -> None:
    """ORT keeps a value_info entry iff its tensor has a NodeArg at load (a node reads or writes it, it is a graph
    input or output, or an initializer, unused ones included); passes never drop it again.

    (``CleanUnusedInitializersAndNodeArgs`` only removes *untyped* NodeArgs, so a tensor a pass orphans, or an unused
    initializer it removes, keeps its typed entry; an entry naming no tensor at all is dropped.)
    """
    graph.value_info_names = {v.name for v in graph.value_info if _still_used(graph, v.name)}
    graph.record_subgraph_reads()
    for _, _, sub in graph.subgraphs():
        _record_value_info(sub)


def _remove_unused_initializers(graph: Graph) -> None:
    for name in graph.unused_initializers():
        graph.remove_initializer(name)
    for _, _, sub in graph.subgraphs():
        _remove_unused_initializers(sub)


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and normalize_domain(node.domain) == ""


def _constant_to_tensor(node: onnx.NodeProto) -> onnx.TensorProto:
    """``utils::ConstantNodeProtoToTensorProto``: the tensor follows the attribute's *type*, whatever its name (a
    ``value`` attribute holding INTS is a 1-D int64 tensor, as in ORT 1.32: mutant campaign seed 1202 #1119)."""
    name = node.output[0]
    if len(node.attribute) != 1:
        raise ModelError(f"Constant node {node.name!r} must have exactly one value attribute")
    attr = node.attribute[0]
    kind = onnx.AttributeProto
    tensor: onnx.TensorProto
    if attr.type == kind.TENSOR:
        tensor = copy.deepcopy(attr.t)
    elif attr.type == kind.FLOAT:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.FLOAT, float_data=[attr.f])
    elif attr.type == kind.FLOATS:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.FLOAT, dims=[len(attr.floats)], float_data=attr.floats)
    elif attr.type == kind.INT:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.INT64, int64_data=[attr.i])
    elif attr.type == kind.INTS:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.INT64, dims=[len(attr.ints)], int64_data=attr.ints)
    elif attr.type == kind.STRING:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.STRING, string_data=[attr.s])
    elif attr.type == kind.STRINGS:
        tensor = onnx.TensorProto(data_type=onnx.TensorProto.STRING, dims=[len(attr.strings)], string_data=attr.strings)
    elif attr.type == kind.SPARSE_TENSOR:
        dense = onnx.numpy_helper.to_array(attr.sparse_tensor.values)
        shape = tuple(attr.sparse_tensor.dims)
        full = np.zeros(shape, dtype=dense.dtype).reshape(-1)
        idx = onnx.numpy_helper.to_array(attr.sparse_tensor.indices)
        flat = idx if idx.ndim == 1 else np.ravel_multi_index(idx.T, shape)
        full[flat] = dense
        tensor = numpy_helper.from_array(full.reshape(shape))
    else:
        raise ModelError(f"Unsupported attribute value type of {attr.type} in 'Constant' node '{node.name}'")
    tensor.name = name
    return tensor


def _byte_size(tensor: onnx.TensorProto) -> int:
    count = element_count(tensor.dims[:])
    data_type = tensor.data_type
    item = _RAW_ITEM_SIZES.get(data_type)
    if item is not None:
        return count * item
    if data_type in _FOUR_BIT:
        return (count * 4 + 7) // 8
    return count * _item_size(data_type)


@functools.cache
def _item_size(data_type: int) -> int:
    return int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)


_FOUR_BIT = frozenset({onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.FLOAT4E2M1})


#: the fields of an initializer ORT writes back from the OrtValue it keeps for a large one
_REWRITTEN_FIELDS = frozenset({"name", "data_type", "dims", "raw_data"})
#: the TensorProto fields that may be set besides those, singular and repeated (a field descriptor of a recent
#: protobuf says ``is_repeated``, an older one only ``label``)
_OTHER_FIELDS = [
    (f.name, bool(getattr(f, "is_repeated", False) or getattr(f, "label", None) == f.LABEL_REPEATED))
    for f in onnx.TensorProto.DESCRIPTOR.fields
    if f.name not in _REWRITTEN_FIELDS
]
_OTHER_SINGULAR = tuple(name for name, repeated in _OTHER_FIELDS if not repeated)
_OTHER_REPEATED = tuple(name for name, repeated in _OTHER_FIELDS if repeated)


def _has_other_fields(tensor: onnx.TensorProto) -> bool:
    """Whether a field other than name, type, dims and raw data is set (``ListFields`` would say so, but it also
    makes a copy of the raw data)."""
    return any(tensor.HasField(name) for name in _OTHER_SINGULAR) or any(
        len(getattr(tensor, name)) for name in _OTHER_REPEATED
    )


#: the values of ``TensorProto.DataType`` (UNDEFINED included: ORT takes it)
_DATA_TYPES = frozenset(onnx.TensorProto.DataType.values())


def _normalise_initializer(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """An initializer of 128 bytes or more as ORT's save writes it, from the OrtValue it keeps for it: typed-field
    data re-encoded as raw_data, and nothing but name, type, dims and data (an explicit ``data_location`` DEFAULT or
    a ``doc_string`` is gone, from DISABLE_ALL on: observed on 1.32.0); any other is returned itself (initializer
    protos are never edited in place: passes replace them).

    A data type the TensorProto enum does not have is refused as ORT's Graph constructor refuses it."""
    if tensor.data_type not in _DATA_TYPES:
        raise ModelError(f"This is an invalid model. Tensor '{tensor.name}' does not have valid data type.")
    if (
        tensor.data_location == onnx.TensorProto.EXTERNAL
        or tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED)
        or _byte_size(tensor) < RAW_THRESHOLD_BYTES
    ):
        return tensor
    if tensor.HasField("raw_data"):
        if not _has_other_fields(tensor):
            return tensor
        return onnx.TensorProto(
            name=tensor.name, data_type=tensor.data_type, dims=tensor.dims, raw_data=tensor.raw_data
        )
    array = tensor_array(tensor)
    raw = numpy_helper.from_array(array, tensor.name)
    out = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    out.raw_data = raw.raw_data
    return out


#: the largest initializer (in elements) whose data shape inference is given beyond int32/int64 ones (which a shape,
#: axes, pads, k or indices are, and which ONNX's data propagation reads): scales, a Range's bounds, a OneHot depth
#: are small; weights are not, and only their type and dims matter to inference
_INFERENCE_DATA_MAX = 4096
_INFERENCE_DATA_TYPES = frozenset({onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UNDEFINED})


def _inference_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The initializer as shape inference gets it: dims and type only for external data and large weights."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        out = _copy(tensor)
        out.ClearField("external_data")
        out.data_location = onnx.TensorProto.DEFAULT
        return out
    dims = _dims_without_data(tensor)
    if dims is None:
        return tensor
    out = onnx.TensorProto()  # (its fields set one by one: cheaper than the constructor's keywords)
    out.name = tensor.name
    out.data_type = tensor.data_type
    out.dims.extend(dims)
    return out


def _data_for_inference(tensor: onnx.TensorProto) -> bool:
    """Whether the load-time inference is given the initializer's data (:func:`_inference_tensor`)."""
    return tensor.data_location != onnx.TensorProto.EXTERNAL and _dims_without_data(tensor) is None


def _dims_without_data(tensor: onnx.TensorProto) -> list[int] | None:
    """The dims of an initializer (not external) whose data inference is not given: a weight, more than
    :data:`_INFERENCE_DATA_MAX` elements of a type other than int32 or int64; None when it is given."""
    if tensor.data_type in _INFERENCE_DATA_TYPES:
        return None
    dims: list[int] = tensor.dims[:]
    count = 1
    for dim in dims:
        count *= dim
    return dims if count > _INFERENCE_DATA_MAX else None


def _inference_model(
    header: onnx.ModelProto,
    gp: onnx.GraphProto,
    initializers: Iterable[onnx.TensorProto],
    stripped: bytes | None = None,
) -> onnx.ModelProto:
    """A ModelProto for :func:`_infer_types`: ``header``'s fields, ``gp``'s with ``initializers`` in place of its own,
    the large weights without their data (:func:`_inference_tensor`), so no weight is copied. ``stripped``: the bytes
    of ``header`` with ``gp`` but its initializers (the file's, :func:`_without_initializers`), parsed instead of
    copying each field (a tenth of the time: a copy is an encoding and a parse, field by field)."""
    out = onnx.ModelProto()
    if stripped is not None:
        out.ParseFromString(stripped)
    else:
        _copy_fields(out, header, skip="graph")
        _copy_fields(out.graph, gp, skip="initializer")
    out.graph.initializer.extend(_inference_tensor(t) for t in initializers)
    return out


def _infer_types(
    proto: onnx.ModelProto, *, owned: bool = False, subgraphs: bool = True, graph: Graph | None = None
) -> dict[str, onnx.TypeProto]:
    """:func:`qdqopt.graph.inference.infer_model_types` of ``proto``, with the data of the initializers it may read
    (:func:`_inference_tensor`): no weight is copied (``owned``: ``proto`` is such a copy already, made by
    :func:`_inference_model`, and is edited; ``subgraphs``: False when the model has none; ``graph``: the main graph
    ``proto`` holds, whose op type index answers which ops it has)."""
    return infer_model_types(
        proto if owned else _inference_model(proto, proto.graph, proto.graph.initializer),
        subgraphs=subgraphs,
        op_types=None if graph is None else graph.op_types(),
    )


def _has_subgraphs(graph: Graph) -> bool:
    return next(graph.subgraphs(), None) is not None


# ----------------------------------------------------------------------------------------------------------- saving
def save_model(model: Model) -> onnx.ModelProto:
    """The ModelProto ORT would write for this model's current state (its weights copied into it: see
    :func:`write_model` for a file written without that copy)."""
    with CollectionPaused():
        out, initializers = _save_parts(model)
        out.graph.initializer.extend(initializers)
    return out


def write_model(model: Model, target: str | os.PathLike[str] | BinaryIO) -> int:
    """Write ``save_model(model).SerializeToString()`` to a file (a path or a binary file object), one initializer
    at a time, without making the saved model's copy of the weights, nor its bytes; returns the number of bytes.

    Protobuf writes a message's known fields in field-number order, then the fields it did not know when it parsed
    the message (``upb``'s encoder, which ``onnx`` uses), so the model's bytes are those of its fields before the
    graph, the graph (its nodes and name, its initializers, its other fields), then its fields after the graph.
    """
    if isinstance(target, (str, os.PathLike)):
        with open(target, "wb") as handle:
            return write_model(model, handle)
    with CollectionPaused():
        return _write_model(model, target)


def _write_model(model: Model, target: BinaryIO) -> int:
    """:func:`write_model` into a binary file object.

    The graph's length comes before its initializers, so each initializer's size is known before any is written.
    ``ByteSize`` counts by encoding (upb's), a copy of the weight's bytes: into a file that can be sought, a large
    weight's size is computed from its fields instead (:func:`_predicted_size`), and checked against the bytes
    written; should one be wrong (raw data of another length than its dims say), the file is written again from
    where it started, each size counted."""
    out, initializers = _save_parts(model)
    graph_head, graph_tail = _split_serialized(out.graph, "initializer")
    out.ClearField("graph")
    model_head, model_tail = _split_serialized(out, "graph")
    parts = (model_head, graph_head, graph_tail, model_tail)
    start = target.tell() if target.seekable() else None
    if start is not None:
        sizes = [_predicted_size(t) or t.ByteSize() for t in initializers]  # (a predicted size is never 0)
        written = _write_parts(target, parts, initializers, sizes)
        if written is not None:
            return written
        target.seek(start)
        target.truncate()
    written = _write_parts(target, parts, initializers, [t.ByteSize() for t in initializers])
    if written is None:
        raise AssertionError("an initializer's bytes are not as long as its ByteSize")
    return written


def _write_parts(
    target: BinaryIO, parts: tuple[bytes, bytes, bytes, bytes], initializers: list[onnx.TensorProto], sizes: list[int]
) -> int | None:
    """Write the model's bytes: the parts around its graph and its graph's initializers (``parts``: the model's
    fields before the graph and after it, the graph's before its initializers and after them), the initializers of
    the sizes ``sizes``; the number of bytes, or None when an initializer's bytes are not of its size (what was
    written is then not a model)."""
    model_head, graph_head, graph_tail, model_tail = parts
    heads = [_GRAPH_INITIALIZER_TAG + _varint(size) for size in sizes]
    graph_size = len(graph_head) + len(graph_tail) + sum(len(head) for head in heads) + sum(sizes)
    # the small pieces are joined and written together, up to _WRITE_CHUNK bytes at a time (a write call costs
    # more than copying a few kilobytes); a weight as large is written on its own, never copied
    pending: list[bytes] = [model_head, _MODEL_GRAPH_TAG, _varint(graph_size), graph_head]
    held = sum(len(part) for part in pending)
    written = 0
    for tensor, size, head in zip(initializers, sizes, heads, strict=True):
        data = tensor.SerializeToString()
        if len(data) != size:
            return None
        pending.append(head)
        if size >= _WRITE_CHUNK:  # what is held (this weight's header last), then the weight on its own
            written += target.write(b"".join(pending)) + target.write(data)
            pending.clear()
            held = 0
            continue
        pending.append(data)
        held += len(head) + size
        if held >= _WRITE_CHUNK:
            written += target.write(b"".join(pending))
            pending.clear()
            held = 0
    pending += (graph_tail, model_tail)
    written += target.write(b"".join(pending))
    return written


#: the most bytes :func:`_write_parts` holds before writing them (and the size from which a weight is written alone)
_WRITE_CHUNK: Final = 1 << 16


def _predicted_size(tensor: onnx.TensorProto) -> int | None:
    """``tensor.ByteSize()`` computed from its fields, for a weight of :data:`RAW_THRESHOLD_BYTES` or more in raw
    data, as the loader leaves one (:func:`_normalise_initializer`: name, type, dims and raw data only), its raw data
    as long as its dims and type say; None for any other tensor. Not checked here: :func:`_write_model` compares it
    with the bytes it writes (another field set, or raw data of another length, makes it wrong)."""
    data_type = tensor.data_type
    item = _RAW_ITEM_SIZES.get(data_type)  # (not 0: a type that is not 0 is a type present)
    if item is None:
        return None
    dims = tensor.dims[:]
    length = element_count(dims) * item
    if length < RAW_THRESHOLD_BYTES or not tensor.HasField("raw_data"):
        return None
    size = 1 + _varint_length(length) + length  # raw_data (field 9: one byte of tag)
    size += 1 + _varint_length(data_type)
    for dim in dims:  # (proto2: each dim a field of its own, not packed)
        size += 1 + _varint_length(dim)
    name = tensor.name
    if name:
        encoded = len(name.encode("utf-8"))
        size += 1 + _varint_length(encoded) + encoded
    elif tensor.HasField("name"):
        size += 2
    return size


#: the element types whose raw data is whole bytes an element (none packs several in a byte), by their size in bytes
_RAW_ITEM_SIZES: dict[int, int] = {
    int(getattr(onnx.TensorProto, name)): _item_size(int(getattr(onnx.TensorProto, name)))
    for name in (
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
        "BFLOAT16",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
    )
    if hasattr(onnx.TensorProto, name)
}


def _varint_length(value: int) -> int:
    """The bytes of ``value`` as a protobuf varint (a negative one is written in 10, as a 64-bit two's complement)."""
    if value < 0:
        return 10
    length = 1
    while value >= 0x80:
        value >>= 7
        length += 1
    return length


_MODEL_GRAPH_TAG = bytes([_MODEL_GRAPH << 3 | _LENGTH_DELIMITED])
_GRAPH_INITIALIZER_TAG: Final = bytes([_GRAPH_INITIALIZER << 3 | _LENGTH_DELIMITED])


def write_atomic(model: onnx.ModelProto | Model, path: Path) -> None:
    """Write the model to a temporary file beside ``path``, then rename it over ``path`` (readers never see half a
    file), with the mode a new file gets under the umask (``mkstemp`` makes it 0600). A :class:`Model` is written
    without making its ModelProto (:func:`write_model`: one initializer at a time)."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            if isinstance(model, Model):
                write_model(model, handle)
            else:
                handle.write(model.SerializeToString())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _varint(value: int) -> bytes:
    if value < 0x80:  # (the usual lengths, one or two bytes, without the loop)
        return _ONE_BYTE_VARINTS[value] if value >= 0 else _long_varint(value)
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    return _long_varint(value)


_ONE_BYTE_VARINTS: Final = [bytes((value,)) for value in range(0x80)]


def _long_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _split_serialized(message: Message, name: str) -> tuple[bytes, bytes]:
    """The bytes of ``message``, which lacks its field ``name``, split where that field's bytes would go: its known
    fields with lower numbers, then its known fields with higher numbers and its unknown ones.

    The split is found in the serialised bytes themselves (protobuf writes the known fields in field-number order,
    then the unknown ones): the first field past ``name``'s number, or the first unknown one, starts the tail."""
    field_descriptor = message.DESCRIPTOR.fields_by_name[name]
    number = field_descriptor.number
    assert not (getattr(message, name) if _is_repeated(field_descriptor) else message.HasField(name)), name
    known = message.DESCRIPTOR.fields_by_number
    whole = message.SerializeToString()
    data = _Window.over(whole)
    pos = 0
    while pos < data.size:
        field_number, wire_type, start = data.tag(pos)
        if field_number > number or field_number not in known:
            break
        pos = data.field_end(start, wire_type, data.size)
    return whole[:pos], whole[pos:]


def _save_parts(model: Model) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """The ModelProto ORT would write for this model's current state without its main graph's initializers, and
    those initializers in their saved order."""
    out = onnx.ModelProto()
    out.CopyFrom(model.header)
    present = {normalize_domain(o.domain) for o in out.opset_import}
    for domain, version in missing_opsets(present):
        out.opset_import.append(onnx.helper.make_opsetid(domain, version))
    out.ClearField("metadata_props")
    for key, value in saved_metadata(model.header):
        entry = out.metadata_props.add()
        entry.key, entry.value = key, value
    regenerate = any_modified(model.graph)
    if not regenerate:
        _fill_graph(out.graph, model.graph, model.value_types, regenerate=False, initializers=False)
        return out, _saved_initializers(model.graph, regenerate=False)
    # types a pass set on NodeArgs replace the load-time ones (and the declared types merged into those)
    pinned = pinned_types(model.graph)
    known_types = dict(model.value_types)
    for name, died in died_types(model.graph).items():  # what a Resolve gave a value before its producer went
        known = known_types.get(name)
        known_types[name] = died if known is None else fill_unknown(known, died)
    known_types.update(pinned)
    # ORT's Resolve re-infers every type after the rewrites: infer on the rewritten graph (with its weights' dims,
    # not their data), then save it with those types
    subgraphs = _has_subgraphs(model.graph)
    inference_model = _current_inference_model(out, model.graph, known_types, set(pinned))
    with KnownAttributes({} if subgraphs else _contrib_attributes(model.graph)):
        fresh = _infer_types(inference_model, owned=True, subgraphs=subgraphs, graph=model.graph)
    types = dict(fresh)
    exact: set[str] = set(pinned)
    g = model.graph
    declared = {v.name: v.type for v in (*g.outputs, *g.value_info) if v.HasField("type")}
    for name, known in known_types.items():
        inferred = fresh.get(name)
        # a pinned type is the NodeArg's type as a pass set it: the declared type no longer refines it
        refines = name in declared and name not in pinned
        existing = _merge_type(declared[name], known) if refines else known
        gen = g.production_generation(name)
        if gen is not None and existing is not None and inferred is not None and shapes_conflict(existing, inferred):
            # the Resolve after the pass that re-produced the value merged leniently; a later one refills
            types[name] = inferred if gen + 1 < g.resolves else lenient_merge(existing, inferred)
            exact.add(name)
        else:
            types[name] = fill_unknown(known, inferred)
    if subgraphs or _has_unknown_fields(out):
        _fill_graph(out.graph, model.graph, types, regenerate=True, exact=exact, initializers=False)
        return out, _saved_initializers(model.graph, regenerate=True)
    # the inference model holds out's fields and the nodes to save (inference edits none without subgraphs): its
    # graph is filled again around them, and saved (each node is then copied once, not twice)
    gp = inference_model.graph
    for name in ("input", "output", "value_info", "initializer", "sparse_initializer"):
        gp.ClearField(name)
    _fill_graph(gp, model.graph, types, regenerate=True, exact=exact, initializers=False, nodes=False)
    return inference_model, _saved_initializers(model.graph, regenerate=True)


def _contrib_attributes(graph: Graph) -> dict[str, Mapping[str, onnx.AttributeProto]]:
    """The attributes of ``graph``'s named nodes outside the ONNX domain, by display name, for
    :class:`KnownAttributes` (the contrib ops' inference functions read them there); a display name two nodes share
    is left out."""
    found: dict[str, Mapping[str, onnx.AttributeProto]] = {}
    shared: set[str] = set()
    for node in graph.nodes():
        if node.name and normalize_domain(node.domain):
            key = display_name(node.op_type, node.domain, node.name)
            if key in found:
                shared.add(key)
            found[key] = node.attributes
    for key in shared:
        del found[key]
    return found


def _current_inference_model(
    header: onnx.ModelProto, graph: Graph, types: dict[str, onnx.TypeProto], exact: Collection[str] = ()
) -> onnx.ModelProto:
    """The ModelProto :func:`_infer_types` is given for the model whose main graph is ``graph`` as it stands:
    ``header``'s fields, the graph regenerated with ``types``, its initializers as :func:`_inference_tensor` gives
    them."""
    out = onnx.ModelProto()
    _copy_fields(out, header, skip="graph")
    _fill_graph(out.graph, graph, types, regenerate=True, exact=exact, initializers=False)
    out.graph.initializer.extend(_inference_tensor(t) for t in _saved_initializers(graph, regenerate=True))
    return out


def infer_current_types(graph: Graph) -> dict[str, onnx.TypeProto]:
    """The types ONNX shape inference gives the values of the model ``graph`` belongs to, as it stands now (as the
    saver's re-inference after the rewrites; subgraph values included, by name)."""
    root = graph
    while root.parent is not None:
        root = root.parent
    header = onnx.ModelProto(ir_version=root.ir_version)
    for domain, version in sorted(root.opsets.items()):
        header.opset_import.append(onnx.helper.make_opsetid(domain, version))
    inference_model = _current_inference_model(header, root, {})
    return _infer_types(inference_model, owned=True, subgraphs=_has_subgraphs(root), graph=root)


def pinned_types(graph: Graph) -> dict[str, onnx.TypeProto]:
    """The NodeArg types passes pinned (:meth:`Graph.pin_value_type`) in ``graph`` and its subgraphs; an enclosing
    graph's entry wins should a name repeat (as in :func:`qdqopt.graph.inference.infer_model_types`)."""
    out = graph.pinned_types()
    for _, _, sub in graph.subgraphs():
        for name, type_proto in pinned_types(sub).items():
            out.setdefault(name, type_proto)
    return out


def died_types(graph: Graph) -> dict[str, onnx.TypeProto]:
    """:meth:`Graph.died_types` of ``graph`` and its subgraphs (an enclosing graph's entry wins)."""
    out = graph.died_types()
    for _, _, sub in graph.subgraphs():
        for name, type_proto in died_types(sub).items():
            out.setdefault(name, type_proto)
    return out


def any_modified(graph: Graph) -> bool:
    """Whether a pass modified this graph or any graph nested in it.

    ORT then regenerates every graph of the model when saving (observed on 1.32.0: a change inside an If branch
    re-serialises the main graph with schema defaults, and a change in the main graph re-serialises the branches).
    """
    return graph.modified or any(any_modified(sub) for _, _, sub in graph.subgraphs())


def missing_opsets(present: set[str]) -> list[tuple[str, int]]:
    """Registry domains ORT appends to the input's opset imports (which it keeps verbatim), in its order."""
    out: list[tuple[str, int]] = []
    if "" not in present:
        out.append(("", _latest_onnx_opset()))
    out.extend((domain, version) for domain, version in REGISTRY_OPSETS if domain not in present)
    return out


def _latest_onnx_opset() -> int:
    from qdqopt.graph.schema import registry_domains

    return registry_domains().get("", 21)


def saved_metadata(header: onnx.ModelProto) -> list[tuple[str, str]]:
    """Metadata in the iteration order of ORT's ``std::unordered_map<std::string, std::string>``."""
    entries: dict[str, str] = {}
    for prop in header.metadata_props:
        entries[prop.key] = prop.value
    try:
        from qdqopt.graph.stdhash import iteration_order
    except ImportError:  # pragma: no cover - the emulator ships with the package
        return list(entries.items())
    return [(k, entries[k]) for k in iteration_order(list(entries))]


def save_graph(
    graph: Graph,
    value_types: dict[str, onnx.TypeProto] | None = None,
    *,
    regenerate: bool | None = None,
    exact: Collection[str] = (),
) -> onnx.GraphProto:
    """``Graph::ToGraphProto`` for one graph (recursing into subgraphs with the same ``regenerate`` decision).

    ``exact`` names values whose type in ``value_types`` is final (a declared type no longer refines it).
    """
    gp = onnx.GraphProto()
    _fill_graph(gp, graph, value_types, regenerate=regenerate, exact=exact)
    return gp


def _fill_graph(
    gp: onnx.GraphProto,
    graph: Graph,
    value_types: dict[str, onnx.TypeProto] | None = None,
    *,
    regenerate: bool | None = None,
    exact: Collection[str] = (),
    initializers: bool = True,
    nodes: bool = True,
) -> None:
    """:func:`save_graph` into the empty ``gp`` (each initializer is copied once, into its place in the saved model);
    without ``initializers``, the graph's own are left out (its subgraphs' are not); without ``nodes`` (``gp`` holds
    them already, regenerated), the nodes are left out."""
    types = value_types or {}
    regen = any_modified(graph) if regenerate is None else regenerate
    gp.name = graph.name
    if regen or graph.doc_string_present:
        gp.doc_string = graph.doc_string
    if not regen:
        gp.metadata_props.extend(graph.metadata_props)
        gp.input.extend(graph.inputs)
        gp.output.extend(graph.outputs)
        gp.value_info.extend(graph.value_info)
        for node in graph.nodes() if nodes else ():
            gp.node.append(_original_node_proto(node, types))
    else:
        gp.input.extend(_bare_value_info(v, types, exact) for v in graph.inputs)
        gp.output.extend(_bare_value_info(v, types, exact) for v in graph.outputs)
        live = graph.value_names()
        declared = {v.name: v for v in graph.value_info}
        for name in sorted(graph.value_info_names & live):
            if name in declared:
                gp.value_info.append(_bare_value_info(declared[name], types, exact))
            else:
                gp.value_info.append(_outer_value_info(graph, name, types))
        if nodes:
            gp.node.extend(
                node_to_proto(node, types, regenerate=True, exact=exact) if node.subgraphs else graph.node_proto(node)
                for node in graph.topological_order()
            )
    if initializers:
        gp.initializer.extend(_saved_initializers(graph, regenerate=regen))
    gp.sparse_initializer.extend(graph.sparse_initializers)


def _saved_initializers(graph: Graph, *, regenerate: bool) -> list[onnx.TensorProto]:
    out = []
    for name in graph.initializer_names(verbatim=not regenerate):
        tensor = graph.initializer(name)
        assert tensor is not None
        out.append(tensor)
    return out


def _still_used(graph: Graph, name: str) -> bool:
    if graph.is_initializer(name) or graph.producer(name) is not None or graph.is_graph_output(name):
        return True
    return any(i.name == name for i in graph.inputs) or bool(graph.consumers(name))


def _outer_value_info(parent: Graph, name: str, types: dict[str, onnx.TypeProto]) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto(name=name)
    declared = _declared_type(parent, name)
    chosen = types.get(name) or declared
    if chosen is not None:
        vi.type.CopyFrom(chosen)
    return vi


def _declared_type(graph: Graph | None, name: str) -> onnx.TypeProto | None:
    while graph is not None:
        for vi in (*graph.inputs, *graph.outputs, *graph.value_info):
            if vi.name == name and vi.HasField("type"):
                return vi.type
        tensor = graph.initializer(name)
        if tensor is not None:
            return tensor_type_proto(tensor.data_type, list(tensor.dims))
        graph = graph.parent
    return None


def _bare_value_info(
    vi: onnx.ValueInfoProto, types: dict[str, onnx.TypeProto], exact: Collection[str] = ()
) -> onnx.ValueInfoProto:
    """``NodeArg::ToProto``: name and type only; the type refined by inference where it knows more."""
    out = onnx.ValueInfoProto(name=vi.name)
    if vi.name in exact:
        out.type.CopyFrom(_without_negative_dims(types[vi.name]))
        return out
    merged = _merge_type(vi.type if vi.HasField("type") else None, types.get(vi.name))
    if merged is not None:
        out.type.CopyFrom(merged)
    return out


def _merge_type(declared: onnx.TypeProto | None, inferred: onnx.TypeProto | None) -> onnx.TypeProto | None:
    """ORT's ``MergeShapeInfo`` with its lenient fallback, as observed on 1.32.0.

    Inferred values win (a conflicting rank or value included); an inferred symbolic dim fills only a declared dim
    that is unknown (a declared value or name stays, as in ONNX's ``mergeInDimensionInfo``: observed on 1.32.0, a
    declared ``[1,8]`` or ``[M,8]`` output inferred ``[N,8]`` is saved as declared); a dim inference leaves unknown
    keeps the declared one; a negative declared value is written as an unknown dim.
    """
    if declared is None:
        merged = inferred
    elif (
        inferred is None
        or not declared.HasField("tensor_type")
        or not inferred.HasField("tensor_type")
        or not inferred.tensor_type.HasField("shape")
    ):
        merged = declared
    else:
        merged = onnx.TypeProto()
        merged.CopyFrom(declared)
        dt, it = declared.tensor_type, inferred.tensor_type
        if not dt.HasField("shape") or len(dt.shape.dim) != len(it.shape.dim):
            merged.tensor_type.shape.CopyFrom(it.shape)
        else:
            for target, source in zip(merged.tensor_type.shape.dim, it.shape.dim, strict=True):
                if source.HasField("dim_value"):
                    target.dim_value = source.dim_value
                elif source.HasField("dim_param") and not has_dim(target):
                    target.dim_param = source.dim_param
    if merged is None:
        return None
    return _without_negative_dims(merged)


def _without_negative_dims(type_proto: onnx.TypeProto) -> onnx.TypeProto:
    if not type_proto.HasField("tensor_type") or not any(
        d.HasField("dim_value") and d.dim_value < 0 for d in type_proto.tensor_type.shape.dim[:]
    ):
        return type_proto
    out = onnx.TypeProto()
    out.CopyFrom(type_proto)
    for d in out.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            d.ClearField("dim_value")
    return out


def _with_subgraphs(
    node: Node,
    attrs: list[onnx.AttributeProto],
    types: dict[str, onnx.TypeProto],
    regenerate: bool,
    exact: Collection[str] = (),
) -> list[onnx.AttributeProto]:
    out = []
    for attr in attrs:
        if attr.type == onnx.AttributeProto.GRAPH and attr.name in node.subgraphs:
            fresh = onnx.AttributeProto()
            _copy_except(fresh, attr, "g")
            _fill_graph(fresh.g, node.subgraphs[attr.name], types, regenerate=regenerate, exact=exact)
            out.append(fresh)
        else:
            out.append(attr)
    return out


def _original_node_proto(node: Node, types: dict[str, onnx.TypeProto]) -> onnx.NodeProto:
    assert node.original is not None, f"node {node.name!r} has no original proto in an unmodified graph"
    if not node.subgraphs:
        return node.original
    proto = onnx.NodeProto()
    proto.CopyFrom(node.original)
    attrs = _with_subgraphs(node, list(proto.attribute), types, False)
    proto.ClearField("attribute")
    proto.attribute.extend(attrs)
    return proto


def node_to_proto(
    node: Node,
    types: dict[str, onnx.TypeProto] | None = None,
    *,
    regenerate: bool = True,
    exact: Collection[str] = (),
) -> onnx.NodeProto:
    """``Node::ToProto``: name, op, domain, doc string, attributes (with updated subgraphs), inputs, outputs."""
    proto = node_proto_head(node)
    ordered = [node.attributes[name] for name in node.attribute_order()]
    proto.attribute.extend(_with_subgraphs(node, ordered, types or {}, regenerate, exact))
    proto.input.extend(node.inputs)
    proto.output.extend(node.outputs)
    return proto
