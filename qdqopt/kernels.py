"""ORT's CPU kernel registry, as the partitioner and InsertCastTransformer consult it (spec insert_cast.md §2).

Both tables come from the installed onnxruntime, so they are this build's and this platform's (an x86-64 wheel has
fp16 CPU kernels for 80 ops; ARM builds register more):

* kernel defs from ``onnxruntime_pybind11_state.get_all_opkernel_def()``: op, domain, provider, version range and the
  allowed types of each type constraint;
* operator schemas from ``get_all_operator_schema()``: the formal inputs/outputs (type string, variadic or not) and the
  type constraints, which map a kernel's constraint names onto a node's actual arguments.

Two lookups, as in ``kernel_registry.cc``:

* :func:`node_has_cpu_kernel` is ``KernelRegistry::TryFindKernel(node)`` (what the CPU EP's ``GetCapability`` asks
  during partitioning). A kernel def matches when ``VerifyVersion`` accepts the node's since_version (its start equals
  it, or it has a closed range that contains it) and, for each of the *kernel's* type constraints, the first existing
  actual argument bound to it (inputs first, in formal order, then outputs) has an allowed type;
* :func:`cpu_kernel_for_types` is ``TryFindKernel(provider, op, domain, version, TypeConstraintMap)``: the same
  version rule, and every (constraint, type) pair of the map must be a constraint of the kernel def allowing that type.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import Formal, Schema, input_arg_counts, node_schema, normalize_domain, type_string

__all__ = [
    "CPU",
    "Formal",
    "KernelDef",
    "Schema",
    "can_be_inlined",
    "cpu_kernel_for_types",
    "cpu_kernels",
    "function_body",
    "input_arg_counts",
    "node_has_cpu_kernel",
    "node_schema",
    "type_string",
]

CPU = "CPUExecutionProvider"
INT_MAX = 2**31 - 1

#: (domain, op, since_version) of ORT's own schemas (not in onnx.defs) that carry a function body, from
#: ``contrib_ops/*_defs.cc``: an unassigned node of one of these is inlined by the partitioner.
_CONTRIB_FUNCTION_OPS = frozenset(
    {
        ("com.microsoft", "Gelu", 1),
        ("com.microsoft", "FastGelu", 1),
        ("com.microsoft", "QuickGelu", 1),
        ("", "LayerNormalization", 1),
    }
)


@dataclass(frozen=True)
class KernelDef:
    """One CPU kernel registration."""

    domain: str
    op_type: str
    start: int
    end: int
    #: constraint name -> allowed type strings, in the kernel def's order
    type_constraints: tuple[tuple[str, frozenset[str]], ...]

    def accepts_version(self, since_version: int) -> bool:
        """``VerifyVersion``: the exact start version, or a closed range containing it (an open end must match)."""
        return self.start == since_version or (self.end != INT_MAX and self.start <= since_version <= self.end)

    def allowed(self, constraint: str) -> frozenset[str] | None:
        for name, types in self.type_constraints:
            if name == constraint:
                return types
        return None


@functools.cache
def _cpu_kernels() -> dict[tuple[str, str], tuple[KernelDef, ...]]:
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    table: dict[tuple[str, str], list[KernelDef]] = {}
    for k in ort_c.get_all_opkernel_def():
        if k.provider != CPU:
            continue
        start, end = k.version_range
        constraints = tuple((str(name), frozenset(str(t) for t in types)) for name, types in k.type_constraints.items())
        kdef = KernelDef(normalize_domain(k.domain), k.op_name, int(start), int(end), constraints)
        table.setdefault((kdef.domain, kdef.op_type), []).append(kdef)
    return {key: tuple(defs) for key, defs in table.items()}


def cpu_kernels(domain: str, op_type: str) -> tuple[KernelDef, ...]:
    """The CPU kernel defs registered for an op, in registry order."""
    return _cpu_kernels().get((normalize_domain(domain), op_type), ())


#: per kernel def a node's version accepts, in registry order: per constraint of the def, its allowed types and the
#: slots (``"i"``/``"o"``, actual position; None: the formal has no actual argument) of the formals bound to it
_Plan = tuple[tuple[tuple[frozenset[str], tuple[tuple[str, int | None], ...]], ...], ...]

#: (id of the schema, domain, op type, input count) -> (the schema, its plan): what the lookup needs of a node besides
#: its arguments' types, the same for every node of that op, schema and input count
_PLANS: dict[tuple[int, str, str, int], tuple[Schema, _Plan]] = {}


def _plan(schema: Schema, node: Node) -> _Plan:
    key = (id(schema), node.domain, node.op_type, len(node.inputs))
    found = _PLANS.get(key)
    if found is not None and found[0] is schema:
        return found[1]
    counts = input_arg_counts(schema, len(node.inputs))
    resolver = schema.kernel_type_str_args
    plan = tuple(
        tuple(
            (allowed, tuple((kind, _actual_position(kind, index, counts)) for kind, index in resolver.get(name, ())))
            for name, allowed in kdef.type_constraints
        )
        for kdef in cpu_kernels(node.domain, node.op_type)
        if kdef.accepts_version(schema.since_version)
    )
    _PLANS[key] = (schema, plan)
    return plan


def _actual_position(kind: str, index: int, counts: list[int]) -> int | None:
    """The position of the argument a formal maps to (an output's index, an input formal's first input), None when
    the formal has no argument whatever the node's inputs are."""
    if kind == "o":
        return index
    if index >= len(counts) or counts[index] == 0:
        return None
    return sum(counts[:index])


def node_has_cpu_kernel(graph: Graph, node: Node) -> bool:
    """``KernelRegistry::TryFindKernel(node)`` on the CPU registry: some kernel def matches the node's actual types.

    For each of the kernel's constraints only the first existing argument bound to it is checked. A value whose
    type is unknown (ORT always knows it; qdqopt's inference may not) is taken as compatible.
    """
    schema = node_schema(node)
    if schema is None:
        return False
    inputs, outputs = node.inputs, node.outputs
    actual_types: dict[str, str | None] = {}  # an argument's type string, asked once per node
    for constraints in _plan(schema, node):
        matches = True
        for allowed, slots in constraints:  # each of the def's constraints: its first existing argument decides
            # (ORT throws when a kernel constraint names no formal; the kernel tables of this build have none such)
            for kind, position in slots:
                if position is None:
                    continue
                args = outputs if kind == "o" else inputs
                arg = args[position] if position < len(args) else None
                if arg:  # NodeArg::Exists()
                    if arg in actual_types:
                        actual = actual_types[arg]
                    else:
                        actual = actual_types[arg] = type_string(graph.value_type(arg))
                    matches = actual is None or actual in allowed
                    break
            if not matches:
                break
        if matches:
            return True
    return False


def cpu_kernel_for_types(domain: str, op_type: str, since_version: int, types: Mapping[str, str]) -> bool:
    """``KernelRegistry::TryFindKernel(CPU, op, domain, version, type_constraint_map)``."""
    for kdef in cpu_kernels(domain, op_type):
        if not kdef.accepts_version(since_version):
            continue
        if all((allowed := kdef.allowed(name)) is not None and t in allowed for name, t in types.items()):
            return True
    return False


def can_be_inlined(graph: Graph, node: Node) -> bool:
    """``Node::CanBeInlined`` for a schema op: ``Node::TryGetFunctionProto`` yields a body for it.

    ``TryGetFunctionProto`` asks an ONNX-domain schema for the body at the model's ONNX opset (a context-dependent body
    builds from the highest builder version not above it; a plain body must also pass
    ``ValidateReferencedOpsInFuncton``: no op it uses may have a newer version at the model's opset than at the
    body's), any other domain's schema at the node's since_version. ORT's own contrib schemas with a C++ body
    (``com.microsoft`` Gelu, FastGelu, QuickGelu...) count too, though qdqopt cannot build those bodies
    (:func:`function_body` says so). Model-local functions are :mod:`qdqopt.graph.function_inlining`'s business.
    """
    if node.since_version is None:
        return False
    if (normalize_domain(node.domain), node.op_type, node.since_version) in _CONTRIB_FUNCTION_OPS:
        return True
    return _onnx_function_body(graph, node) is not None


def function_body(graph: Graph, node: Node) -> onnx.FunctionProto:
    """The body ``Node::TryGetFunctionProto`` gives a schema op that :func:`can_be_inlined` accepts.

    Raises :class:`~qdqopt.errors.ModelError` for ORT's own contrib function ops, whose bodies are C++ builders that
    the onnx package does not have.
    """
    body = _onnx_function_body(graph, node)
    if body is None:
        raise ModelError(
            f"node {node.name!r} ({node.qualified_op}-{node.since_version}) has no CPU kernel for its types and ORT "
            "would inline the function body its own schema defines; qdqopt does not have that body"
        )
    return body


def _onnx_function_body(graph: Graph, node: Node) -> onnx.FunctionProto | None:
    """``TryGetFunctionProto`` for a schema of onnx's registry (ONNX, ai.onnx.ml, ai.onnx.preview.training)."""
    domain = normalize_domain(node.domain)
    if node.since_version is None or domain not in ("", "ai.onnx.ml", "ai.onnx.preview.training"):
        return None
    try:
        # Any: onnx's stubs lack the function accessors of OpSchema
        schema: Any = onnx.defs.get_schema(node.op_type, max_inclusive_version=node.since_version, domain=domain)
    except onnx.defs.SchemaError:
        return None
    requested = (graph.opset("") or node.since_version) if domain == "" else node.since_version
    if schema.has_context_dependent_function:
        builders = [v for v in schema.context_dependent_function_opset_versions if v <= requested]
        return _build_context_dependent(graph, node, schema, max(builders)) if builders else None
    if not schema.has_function:
        return None
    versions = [v for v in schema.function_opset_versions if v <= requested]
    if not versions:
        return None
    body_version = max(versions)
    body: onnx.FunctionProto = onnx.FunctionProto.FromString(schema.get_function_with_opset_version(body_version))
    if body_version == requested or domain != "":
        return body
    valid = all(
        _onnx_since(n.op_type, requested) == _onnx_since(n.op_type, body_version)
        for n in body.node
        if normalize_domain(n.domain) == ""
    )
    return body if valid else None


def _build_context_dependent(graph: Graph, node: Node, schema: Any, version: int) -> onnx.FunctionProto | None:
    """``OpSchema::BuildContextDependentFunction`` with the builder of that version (ORT takes the highest one not
    above the model's opset; only the body's opset_import would tell the difference), the node as ``Node::ToProto``
    writes it and its input types (an empty TypeProto for a missing input); None when the builder declines."""
    proto = onnx.NodeProto(name=node.name, op_type=node.op_type, domain=node.domain)
    proto.input.extend(node.inputs)
    proto.output.extend(node.outputs)
    proto.attribute.extend(node.attributes[name] for name in node.attribute_order())
    types: list[bytes] = []
    for value in node.inputs:
        known = graph.value_type(value) if value else None
        types.append((known or onnx.TypeProto()).SerializeToString())
    try:
        built: bytes = schema.get_context_dependent_function_with_opset_version(
            version, proto.SerializeToString(), types
        )
    except Exception:  # the builder refused (the onnx package raises where ORT's returns false)
        return None
    return onnx.FunctionProto.FromString(built) if built else None


def _onnx_since(op_type: str, opset: int) -> int | None:
    try:
        return int(onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain="").since_version)
    except onnx.defs.SchemaError:
        return None
