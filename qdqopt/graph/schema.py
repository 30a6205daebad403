"""ONNX Runtime's own operator-schema registry, as the graph core needs it.

ORT resolves every node against its schema registry (ONNX, ai.onnx.ml and its contrib domains) during
``Graph::Resolve``: it picks the schema whose ``since_version`` is the greatest one not above the model's opset for
the node's domain, and fills every attribute that has a schema default and is missing on the node
(``VerifyNodeAndOpMatch``). We read the very same registry from the installed onnxruntime through
``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``, so defaults can never drift from the
runtime we compare against.

The same registry gives each schema's formal inputs and outputs and its type constraints (:class:`Schema`,
:func:`node_schema`): what the kernel lookups bind a node's actual types with, and what Resolve types a contrib op's
outputs from (:mod:`qdqopt.graph.inference`). ORT's type strings (``tensor(float16)``...) are read and written here
(:func:`type_string`, :func:`parse_type_string`), and so are a model's own functions (:func:`local_functions`):
ops the model defines, which inference types through their bodies and the partitioner inlines.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import onnx

if TYPE_CHECKING:
    from qdqopt.graph.core import Graph, Node

__all__ = [
    "ONNX_DOMAIN",
    "Formal",
    "FunctionKey",
    "OpSchema",
    "Schema",
    "elem_types",
    "function_key",
    "input_arg_counts",
    "known_type",
    "local_functions",
    "lookup",
    "node_schema",
    "normalize_domain",
    "parse_type_string",
    "registry_domains",
    "set_local_functions",
    "subgraph_protos",
    "tensor_type_proto",
    "tensor_type_string",
    "tensor_value_info",
    "type_string",
]

ONNX_DOMAIN: Final = ""
_ONNX_ALIASES: Final = frozenset({"", "ai.onnx"})


def normalize_domain(domain: str) -> str:
    """ORT treats ``ai.onnx`` as the default ONNX domain ``""``."""
    return ONNX_DOMAIN if domain in _ONNX_ALIASES else domain


def subgraph_protos(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a NodeProto's attributes hold (``g``, then ``graphs``), attribute by attribute."""
    out: list[onnx.GraphProto] = []
    for attr in node.attribute[:]:
        if attr.HasField("g"):
            out.append(attr.g)
        out.extend(attr.graphs[:])
    return out


@dataclass(frozen=True)
class OpSchema:
    """One schema version: where it starts, and its attributes with their defaults (None: no default)."""

    domain: str
    op_type: str
    since_version: int
    deprecated: bool
    attribute_defaults: tuple[tuple[str, onnx.AttributeProto | None], ...]
    #: attribute name -> the ``AttributeProto`` type the schema declares for it
    attribute_types: tuple[tuple[str, int], ...] = ()

    def defaults(self) -> list[tuple[str, onnx.AttributeProto]]:
        """Attributes that have a default value, in the order ORT's Resolve adds them (its schema map's order)."""
        return list(self.default_list)

    @functools.cached_property
    def type_of(self) -> dict[str, int]:
        """:attr:`attribute_types` as a mapping."""
        return dict(self.attribute_types)

    @functools.cached_property
    def default_list(self) -> tuple[tuple[str, onnx.AttributeProto], ...]:
        """:meth:`defaults`, made once (never edit the protos)."""
        return tuple((name, proto) for name, proto in self.attribute_defaults if proto is not None)


def _parse_default(raw: bytes) -> onnx.AttributeProto | None:
    if not raw:
        return None
    proto = onnx.AttributeProto()
    proto.ParseFromString(raw)
    if proto.type == onnx.AttributeProto.UNDEFINED:
        return None
    return proto


@functools.cache
def _registry() -> dict[tuple[str, str], list[OpSchema]]:
    table: dict[tuple[str, str], list[OpSchema]] = {}
    for schema in _all_schemas():
        table.setdefault((schema.domain, schema.op_type), []).append(schema)
    for versions in table.values():
        versions.sort(key=lambda x: x.since_version)
    return table


@functools.cache
def registry_domains() -> dict[str, int]:
    """The highest opset version the registry knows per domain."""
    out: dict[str, int] = {}
    for (domain, _), versions in _registry().items():
        out[domain] = max(out.get(domain, 0), versions[-1].since_version)
    return out


def lookup(domain: str, op_type: str, opset: int | None) -> OpSchema | None:
    """The schema ORT resolves a node to, or None when the registry has none for that opset."""
    if opset is None:
        return None
    key = (domain, op_type, opset)
    found = _LOOKUPS.get(key, _MISSING)
    if found is _MISSING:
        found = _LOOKUPS[key] = _lookup(domain, op_type, opset)
    return found  # type: ignore[return-value]


_MISSING = object()
_LOOKUPS: dict[tuple[str, str, int], OpSchema | object | None] = {}


def _lookup(domain: str, op_type: str, opset: int) -> OpSchema | None:
    versions = _registry().get((normalize_domain(domain), op_type))
    if not versions:
        return None
    found = None
    for schema in versions:
        if schema.since_version <= opset:
            found = schema
        else:
            break
    if found is None or found.deprecated:
        return None
    return found


# ----------------------------------------------------------------------------------------- formals and type constraints
@dataclass(frozen=True)
class Formal:
    """One formal input or output of a schema."""

    name: str
    type_str: str
    variadic: bool


@dataclass(frozen=True, kw_only=True)
class Schema(OpSchema):
    """A schema version with what the kernel lookups need besides its attributes: its formal inputs and outputs and
    its type constraints."""

    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    #: type constraint name -> allowed type strings, in schema order
    type_constraints: tuple[tuple[str, frozenset[str]], ...]

    @functools.cached_property
    def constraint_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.type_constraints)

    @functools.cached_property
    def kernel_type_str_args(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """``KernelTypeStrResolver::RegisterOpSchema``: kernel type string -> formal args (``"i"``/``"o"``, index).

        A formal whose type string is a constraint name is listed under that name, any other (a concrete type such as
        ``tensor(int64)``) under the formal's own name. Inputs come before outputs.
        """
        table: dict[str, list[tuple[str, int]]] = {}
        for kind, formals in (("i", self.inputs), ("o", self.outputs)):
            for index, formal in enumerate(formals):
                key = formal.type_str if formal.type_str in self.constraint_names else formal.name
                table.setdefault(key, []).append((kind, index))
        return {key: tuple(args) for key, args in table.items()}


@functools.cache
def _all_schemas() -> tuple[Schema, ...]:
    """Every schema version of the registry, in its order (:func:`lookup` and :func:`node_schema` index them)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    def formals(params: list[object]) -> tuple[Formal, ...]:
        return tuple(
            Formal(str(p.name), str(p.typeStr), "Variadic" in str(p.option))  # type: ignore[attr-defined]
            for p in params
        )

    out: list[Schema] = []
    for s in ort_c.get_all_operator_schema():
        # The pybind dict keeps the C++ schema map's iteration order, which is the order Resolve fills defaults in.
        attrs = tuple((name, _parse_default(attr._default_value)) for name, attr in s.attributes.items())
        types = tuple((name, int(attr.type)) for name, attr in s.attributes.items())
        constraints = tuple(
            (str(tc.type_param_str), frozenset(str(t) for t in tc.allowed_type_strs)) for tc in s.type_constraints
        )
        out.append(
            Schema(
                normalize_domain(s.domain),
                s.name,
                int(s.since_version),
                bool(s.deprecated),
                attrs,
                types,
                inputs=formals(s.inputs),
                outputs=formals(s.outputs),
                type_constraints=constraints,
            )
        )
    return tuple(out)


@functools.cache
def _schemas() -> dict[tuple[str, str, int], Schema]:
    return {(schema.domain, schema.op_type, schema.since_version): schema for schema in _all_schemas()}


def node_schema(node: Node) -> Schema | None:
    """The schema the node resolved to (``node.Op()``), or None."""
    if node.since_version is None:
        return None
    return _schemas().get((normalize_domain(node.domain), node.op_type, node.since_version))


def input_arg_counts(schema: Schema, num_inputs: int) -> list[int]:
    """``Node::InputArgCount`` after Resolve (``Graph::InferAndVerifyTypeMatch``).

    One count per actual input while the node has as many inputs as the schema has formals; otherwise one per formal:
    1 for each formal but the last while inputs remain (0 after), and the rest for the last formal.
    """
    formal_count = len(schema.inputs)
    if formal_count == num_inputs:
        return [1] * num_inputs
    counts: list[int] = []
    remaining = num_inputs
    for _ in range(formal_count - 1):
        if remaining > 0:
            counts.append(1)
            remaining -= 1
        else:
            counts.append(0)
    if formal_count > 0:
        counts.append(remaining)
    return counts


#: ``tensor(<elem>)`` by element type, made once each (kernel matching asks for every node's values)
_TENSOR_TYPE_STRINGS: Final[dict[int, str]] = {}


def tensor_type_string(elem: int) -> str:
    """ORT's type string of a tensor of element type ``elem``, not 0 (``tensor(float)``), made once per type (an
    element type that is no ``TensorProto.DataType`` raises ``ValueError``)."""
    found = _TENSOR_TYPE_STRINGS.get(elem)
    if found is None:
        found = _TENSOR_TYPE_STRINGS[elem] = f"tensor({_elem_name(elem)})"
    return found


def type_string(type_proto: onnx.TypeProto | None) -> str | None:
    """ORT's ``DataTypeImpl`` string of a type (``tensor(float16)``, ``seq(tensor(int64))``...), None if unknown."""
    if type_proto is None:
        return None
    elem = type_proto.tensor_type.elem_type  # (a tensor's, the usual case, first: an unset member reads as 0)
    if elem:
        return tensor_type_string(elem)
    kind = type_proto.WhichOneof("value")  # (a tensor without an element type is unknown: None, at the end)
    if kind == "sparse_tensor_type":
        elem = type_proto.sparse_tensor_type.elem_type
        return f"sparse_tensor({_elem_name(elem)})" if elem else None
    if kind == "sequence_type":
        inner = type_string(type_proto.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = type_string(type_proto.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    if kind == "map_type":
        value = type_string(type_proto.map_type.value_type)
        key = type_proto.map_type.key_type
        return f"map({_elem_name(key)},{value})" if key and value else None
    return None


def known_type(type_proto: onnx.TypeProto) -> bool:
    """``type_string(type_proto) is not None``, without making the string (an element type that is no
    ``TensorProto.DataType`` raises ``ValueError`` as there)."""
    # a tensor's element type, the usual case, first (an unset member of the oneof reads as 0: any other type, or a
    # tensor of none, goes through elem_types); its name is made once per element type
    elem = type_proto.tensor_type.elem_type
    if elem:
        return bool(tensor_type_string(elem))
    return all(elem and _elem_name(elem) for elem in elem_types(type_proto))


def elem_types(type_proto: onnx.TypeProto) -> Iterator[int]:
    """Every element type a TypeProto names, outside in: a tensor's, a sequence's or an optional's element's, a
    map's key's then its value's; 0 (``UNDEFINED``) for a type that names none (unset, opaque)."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(type_proto, kind).elem_type
    elif kind == "sequence_type":
        yield from elem_types(type_proto.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from elem_types(type_proto.optional_type.elem_type)
    elif kind == "map_type":
        yield type_proto.map_type.key_type
        yield from elem_types(type_proto.map_type.value_type)
    else:
        yield onnx.TensorProto.UNDEFINED


@functools.cache
def _elem_name(elem: int) -> str:
    return str(onnx.TensorProto.DataType.Name(elem)).lower()


def tensor_type_proto(elem: int, shape: Sequence[int | str | None] | None) -> onnx.TypeProto:
    """``onnx.helper.make_tensor_type_proto(elem, shape)``, the same TypeProto made by compiled code (the helper is
    interpreted Python, and passes and inference make many): a dim per item of ``shape`` (a value, a name, or unknown
    for None), an empty shape present for ``[]``, none for None."""
    out = onnx.TypeProto()
    tensor = out.tensor_type
    tensor.elem_type = elem
    if shape is not None:
        dims = tensor.shape.dim
        dims.extend([])  # (as the helper does: an empty list still marks the shape present)
        for value in shape:
            dim = dims.add()
            if value is None:
                continue
            if isinstance(value, int):
                dim.dim_value = value
            elif isinstance(value, str):
                dim.dim_param = value
            else:
                raise ValueError(f"Invalid item in shape: {value}. Needs to be of int or str.")
    return out


def tensor_value_info(name: str, elem: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    """``onnx.helper.make_tensor_value_info(name, elem, shape)`` (see :func:`tensor_type_proto`)."""
    out = onnx.ValueInfoProto()
    out.name = name
    out.type.CopyFrom(tensor_type_proto(elem, shape))
    return out


def parse_type_string(text: str) -> onnx.TypeProto | None:
    """The TypeProto of an ORT type string (``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``)."""
    if text.startswith("tensor(") and text.endswith(")"):
        elem = _data_type_by_name(text[len("tensor(") : -1])
        return tensor_type_proto(elem, None) if elem else None
    if text.startswith("seq(") and text.endswith(")"):
        inner = parse_type_string(text[len("seq(") : -1])
        return onnx.helper.make_sequence_type_proto(inner) if inner else None
    if text.startswith("optional(") and text.endswith(")"):
        inner = parse_type_string(text[len("optional(") : -1])
        return onnx.helper.make_optional_type_proto(inner) if inner else None
    return None


def _data_type_by_name(name: str) -> int:
    try:
        return int(onnx.TensorProto.DataType.Value(name.upper()))
    except ValueError:
        return 0


# ------------------------------------------------------------------------------------------------ model-local functions
#: (domain, name, overload) of a function, ``function_utils::GetFunctionIdentifier``'s parts
FunctionKey = tuple[str, str, str]


def function_key(domain: str, name: str, overload: str = "") -> FunctionKey:
    """The key ORT finds a model-local function by (its domain, name and overload)."""
    return (domain, name, overload)


def set_local_functions(graph: Graph, functions: Iterable[onnx.FunctionProto]) -> None:
    """Record the model-local functions of the model whose main graph is ``graph`` (its ``local_functions``, which
    load_model fills and the partitioner reads)."""
    table: dict[FunctionKey, onnx.FunctionProto] = {}
    for function in functions:
        table[function_key(function.domain, function.name, function.overload)] = function
    if table:
        graph.local_functions = table


def local_functions(graph: Graph) -> dict[FunctionKey, onnx.FunctionProto]:
    """The model-local functions of the model ``graph`` belongs to (empty when it has none)."""
    root = graph
    while root.parent is not None:
        root = root.parent
    return root.local_functions
