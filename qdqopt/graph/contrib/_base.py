"""The machinery shared by the contrib-op inference functions: ORT's schemas, the output element-type rule of
``Graph::InferAndVerifyTypeMatch``, and ONNX's shape helpers (``convPoolShapeInference``, broadcasting, MatMul).

An inference function here computes what ORT's ``TypeAndShapeInferenceFunction`` computes, as an :class:`Inferred`
per output (element type, shape), from a :class:`Node` view of ONNX's ``InferenceContext``. :func:`schema` wraps it
in an ``onnx.defs.OpSchema`` whose formal parameters, type constraints and attributes are read from the installed
onnxruntime's own registry, and whose registered function then applies ORT's element-type rule on top:

* an output whose formal parameter is homogeneous and whose type string an input already bound (``T`` of a typed
  input, or a literal such as ``tensor(float)``) takes that input's type, whatever the inference function said;
* else an output whose formal parameter allows a single type takes it;
* else the inference function's element type, if it set one.

The shape is the inference function's. ORT fails ``Resolve`` where an inference function fails; such models never
reach a saved file, so the functions here raise :class:`onnx.shape_inference.InferenceError` only where ORT's do and
the result would otherwise be wrong, and skip ORT's validation of quantization parameters: a value qdqopt has not
typed (ORT would have) then costs nothing but the outputs that really depend on it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx.defs
import onnx.shape_inference

from qdqopt.graph.schema import tensor_type_string

__all__ = [
    "MS",
    "Dim",
    "InferenceError",
    "Inferred",
    "KnownAttributes",
    "Node",
    "OpSpec",
    "broadcast",
    "conv_pool_shape",
    "dim_value",
    "display_name",
    "gemm_shape",
    "global_pool_shape",
    "matmul_shape",
    "normalize_axis",
    "register_specs",
    "unknown_dim",
]

#: ORT's contrib-op domain
MS = "com.microsoft"

Dim = onnx.TensorShapeProto.Dimension
InferenceError = onnx.shape_inference.InferenceError


def dim_value(value: int) -> Dim:
    out = Dim()
    out.dim_value = value
    return out


def unknown_dim() -> Dim:
    return Dim()


_known = threading.local()


class KnownAttributes:
    """``with KnownAttributes(nodes):`` the inference functions read the attributes of the nodes ``nodes`` holds
    (the protos of each NodeProto, by the node's display name: :func:`display_name`) from there, not from the
    ``InferenceContext``, where each attribute asked crosses from C++ as a new proto (about 3 µs; a QLinearConv asks
    five or six). A node whose display name ``nodes`` lacks asks the context as before, so ``nodes`` must hold only
    display names one node has. Per thread, restored on exit."""

    def __init__(self, nodes: Mapping[str, Mapping[str, onnx.AttributeProto]]) -> None:
        self.nodes = nodes
        self.previous: Mapping[str, Mapping[str, onnx.AttributeProto]] | None = None

    def __enter__(self) -> None:
        self.previous = getattr(_known, "nodes", None)
        _known.nodes = self.nodes

    def __exit__(self, *exc_info: object) -> None:
        _known.nodes = self.previous


def display_name(op_type: str, domain: str, name: str) -> str:
    """ONNX's ``InferenceContext::getDisplayName`` for a node with a name: ``node <op>[<domain>] (<name>)``, without
    the brackets for the empty domain."""
    return f"node {op_type}[{domain}] ({name})" if domain else f"node {op_type} ({name})"


def _known_attributes(ctx: onnx.shape_inference.InferenceContext) -> Mapping[str, onnx.AttributeProto] | None:
    """The attributes :class:`KnownAttributes` holds for the node ``ctx`` infers, or None."""
    nodes: Mapping[str, Mapping[str, onnx.AttributeProto]] | None = getattr(_known, "nodes", None)
    return nodes.get(str(ctx.get_display_name())) if nodes else None


@dataclass(init=False)
class Inferred:
    """What an inference function says of one output: element type (0: none) and shape (None: none)."""

    elem: int = 0
    dims: list[Dim] | None = None

    def __init__(self, elem: int = 0, dims: list[Dim] | None = None) -> None:
        self.elem, self.dims = elem, dims


class Node:
    """A typed view of ``InferenceContext``, with ONNX's ``shape_inference.h`` helpers as methods.

    ``outputs`` collects what the inference function infers (ORT's ``ctx.getOutputType(i)``).

    The dims lists the helpers pass around hold the input types' own Dim protos (copied once, into the output type
    :func:`_run` makes): an inference function never edits a Dim it did not create (``Dim()``, :func:`dim_value`).
    """

    def __init__(
        self, ctx: onnx.shape_inference.InferenceContext, attributes: Mapping[str, onnx.AttributeProto] | None = None
    ) -> None:
        self.ctx = ctx
        self.outputs: dict[int, Inferred] = {}
        # what the context answered (each answer crosses from C++ as a new proto; the inputs do not change while
        # an inference function runs): input types by index, attributes by name, unless ``attributes`` gives the
        # node's attributes, all of them (:class:`KnownAttributes`: never edited here)
        self._input_types: dict[int, onnx.TypeProto | None] = {}
        self._input_facts: dict[int, tuple[int, list[Dim] | None]] = {}
        self._attributes: dict[str, onnx.AttributeProto | None] = {}
        self._given = attributes
        self.num_inputs = int(ctx.get_num_inputs())
        self.num_outputs = int(ctx.get_num_outputs())

    # --------------------------------------------------------------------------------------------- inputs
    def input_type(self, index: int) -> onnx.TypeProto | None:
        """``ctx.getInputType(index)``: None for an index past the inputs, an absent optional input, or no type."""
        if index in self._input_types:
            return self._input_types[index]
        found: onnx.TypeProto | None = None
        if index < self.num_inputs and self.ctx.has_input(index):
            found = self.ctx.get_input_type(index)
            if found is not None and found.WhichOneof("value") is None:
                found = None
        self._input_types[index] = found
        return found

    def _facts(self, index: int) -> tuple[int, list[Dim] | None]:
        """The input's element type (0: unknown, or not a tensor) and its dims (the input type's own Dims; None
        without a shape), read from its type once (each field read through protobuf's API costs hundreds of
        instructions, and the functions ask an input's type, shape and rank in turn)."""
        facts = self._input_facts.get(index)
        if facts is None:
            found = self.input_type(index)
            if found is None or found.WhichOneof("value") != "tensor_type":
                facts = (0, None)
            else:
                tensor = found.tensor_type
                facts = (int(tensor.elem_type), tensor.shape.dim[:] if tensor.HasField("shape") else None)
            self._input_facts[index] = facts
        return facts

    def elem(self, index: int) -> int:
        """The input's element type, 0 when unknown (ORT's ``propagateElemTypeFromInputToOutput`` would fail)."""
        return self._facts(index)[0]

    def has_shape(self, index: int) -> bool:
        """``hasInputShape``."""
        return self._facts(index)[1] is not None

    def has_shapes(self, count: int) -> bool:
        """``hasNInputShapes``: the first ``count`` inputs (all present) have shapes."""
        return self.num_inputs >= count and all(self.has_shape(i) for i in range(count))

    def shape(self, index: int) -> list[Dim] | None:
        """The input's dims (a new list of the input type's own Dims), or None without a shape."""
        dims = self._facts(index)[1]
        return None if dims is None else list(dims)

    # ----------------------------------------------------------------------------------------- attributes
    def attr(self, name: str) -> onnx.AttributeProto | None:
        if self._given is not None:
            return self._given.get(name)
        if name in self._attributes:
            return self._attributes[name]
        found: onnx.AttributeProto | None = self.ctx.get_attribute(name)
        self._attributes[name] = found
        return found

    def attr_int(self, name: str, default: int) -> int:
        """``getAttribute(ctx, name, default)``."""
        found = self.attr(name)
        return int(found.i) if found is not None else default

    def attr_ints(self, name: str) -> list[int] | None:
        """``getRepeatedAttribute``: None when absent."""
        found = self.attr(name)
        return [int(v) for v in found.ints[:]] if found is not None else None

    def attr_str(self, name: str) -> str | None:
        found = self.attr(name)
        return found.s.decode("utf-8", "surrogateescape") if found is not None else None

    # -------------------------------------------------------------------------------------------- outputs
    def out(self, index: int) -> Inferred:
        """``ctx.getOutputType(index)``, created on first use."""
        return self.outputs.setdefault(index, Inferred())

    def set_elem(self, index: int, elem: int) -> None:
        """``updateOutputElemType`` / ``propagateElemTypeFromInputToOutput`` (nothing when ``elem`` is unknown)."""
        if elem:
            self.out(index).elem = elem

    def propagate_elem(self, source: int, index: int) -> None:
        self.set_elem(index, self.elem(source))

    def set_shape(self, index: int, dims: Sequence[Dim]) -> None:
        """``updateOutputShape`` / ``propagateShapeFromInputToOutput``."""
        self.out(index).dims = list(dims)

    def set_shape_if_known(self, index: int, dims: Sequence[Dim] | None) -> None:
        """:meth:`set_shape` when ``dims`` is known (not None)."""
        if dims is not None:
            self.set_shape(index, dims)

    def propagate_shape(self, source: int, index: int) -> None:
        self.set_shape_if_known(index, self.shape(source))

    def propagate_shape_and_type_from_first_input(self) -> None:
        """ONNX's ``propagateShapeAndTypeFromFirstInput``."""
        self.propagate_elem(0, 0)
        if self.has_shapes(1):
            self.propagate_shape(0, 0)


# ------------------------------------------------------------------------------------------------ shape helpers
def _trunc_div(a: int, b: int) -> int:
    """C++ integer division (towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def to_nchw(dims: list[Dim] | None) -> list[Dim] | None:
    """``NhwcInferenceContext``'s view of input 0: N, C, spatial... from N, spatial..., C (rank 3 at least)."""
    if dims is None:
        return None
    if len(dims) < 3:
        raise InferenceError("Tensor must have at least 3 dimensions to convert between channels first and last.")
    return [dims[0], dims[-1], *dims[1:-1]]


def to_nhwc(dims: list[Dim] | None) -> list[Dim] | None:
    """``NhwcInferenceContext::PropagateOutputShape``: N, spatial..., C from N, C, spatial..."""
    if dims is None:
        return None
    if len(dims) < 3:
        raise InferenceError("Output tensor must have at least 3 dimensions")
    return [dims[0], *dims[2:], dims[1]]


def normalize_axis(axis: int, rank: int, message: str) -> int:
    """ONNX's axis check: ``axis`` in [-rank, rank) or :class:`InferenceError` with ``message`` (each op's own
    words, as its schema words it), made non-negative."""
    if axis < -rank or axis >= rank:
        raise InferenceError(message)
    return axis + rank if axis < 0 else axis


def conv_pool_shape(
    node: Node,
    x: list[Dim] | None,
    w: list[Dim] | None,
    *,
    use_dilation: bool,
    require_kernel_shape: bool,
    channels_last: bool = False,
) -> list[Dim] | None:
    """ONNX's ``convPoolShapeInference`` on an NCHW input shape ``x`` (and the weight's ``w`` for a Conv).

    The output keeps N (and C for a pool, W's M for a Conv); a spatial dim is computed where the input's has a
    value and left unknown otherwise. None: no shape (an input shape is missing, or a weight dim has no value).
    ``channels_last``: ``convPoolShapeInferenceNhwc``, the same on the NCHW view of an NHWC ``x`` (:func:`to_nchw`),
    the result transposed back (:func:`to_nhwc`).
    """
    if channels_last:
        x = to_nchw(x)
    if x is None:
        return None
    if not require_kernel_shape and w is None:
        return None
    if len(x) < 2:
        raise InferenceError("Input tensor must have at least 2 dimensions")
    n = len(x) - 2
    dilations = node.attr_ints("dilations") if use_dilation else None
    if dilations is not None and len(dilations) != n:
        raise InferenceError("Attribute dilations has incorrect size")
    dilations = dilations if dilations is not None else [1] * n
    strides = node.attr_ints("strides")
    if strides is not None and len(strides) != n:
        raise InferenceError("Attribute strides has incorrect size")
    strides = strides if strides is not None else [1] * n
    kernel = node.attr_ints("kernel_shape")
    if kernel is not None:
        if len(kernel) != n:
            raise InferenceError("Attribute kernel_shape has incorrect size")
    elif require_kernel_shape:
        raise InferenceError("Attribute kernel_shape must be specified")
    else:
        assert w is not None
        kernel = []
        for d in w[2:]:
            if not d.HasField("dim_value"):
                return None
            kernel.append(int(d.dim_value))
    effective = [(k - 1) * dilations[i] + 1 for i, k in enumerate(kernel)]
    pads = node.attr_ints("pads")
    if pads is not None:
        if len(pads) != 2 * n:
            raise InferenceError("Attribute pads has incorrect size")
    else:
        pads = [0] * (2 * n)
        auto_pad = node.attr_str("auto_pad")
        if auto_pad is not None and auto_pad != "VALID":
            for i in range(n):
                residual = 0
                stride = strides[i]
                if stride > 1:
                    if not x[2 + i].HasField("dim_value"):
                        continue
                    residual = int(x[2 + i].dim_value) % stride
                if i >= len(effective):
                    raise InferenceError(f"kernel shape should have {n} values")
                total = effective[i] - stride if residual == 0 else effective[i] - residual
                total = max(total, 0)
                small, big = total >> 1, total - (total >> 1)
                if auto_pad == "SAME_UPPER":
                    pads[i], pads[i + n] = small, big
                elif auto_pad == "SAME_LOWER":
                    pads[i], pads[i + n] = big, small
    if require_kernel_shape:
        out = x[:2]
    else:
        assert w is not None
        if len(w) < 1:
            raise InferenceError("Second input tensor has wrong dimension")
        out = [x[0], w[0]]
    ceil_mode = node.attr_int("ceil_mode", 0)
    k = len(kernel)
    for i in range(k):
        if 2 + i >= len(x):
            raise InferenceError("kernel has more spatial dims than the input")
        if not x[2 + i].HasField("dim_value"):
            out.append(unknown_dim())
            continue
        size = int(x[2 + i].dim_value)
        padded = size + pads[i] + pads[i + k]
        extra = strides[i] - 1 if ceil_mode else 0
        value = _trunc_div(padded - effective[i] + extra, strides[i]) + 1
        if ceil_mode == 1 and (value - 1) * strides[i] >= size + pads[i]:
            value -= 1  # a window starting in the end padding is dropped (PyTorch's rule)
        out.append(dim_value(value))
    return to_nhwc(out) if channels_last else out


def global_pool_shape(x: list[Dim] | None) -> list[Dim] | None:
    """ONNX's ``globalPoolTypeShapeInference``: N, C, then 1 for every spatial dim (rank 2 at least)."""
    if x is None or len(x) < 2:
        return None
    return [*x[:2], *(dim_value(1) for _ in x[2:])]


def _shape_type(dims: Sequence[Dim]) -> onnx.TypeProto:
    out = onnx.TypeProto()
    out.tensor_type.elem_type = onnx.TensorProto.FLOAT
    out.tensor_type.shape.dim.extend(dims)
    return out


@functools.cache
def _inference_call(op_type: str, opset: int, arity: int) -> tuple[onnx.defs.OpSchema, bytes]:
    """The schema and the serialised node (inputs ``i0``..., output ``o``) :func:`_onnx_infer` hands ONNX, made
    once."""
    node = onnx.NodeProto(op_type=op_type, input=[f"i{i}" for i in range(arity)], output=["o"])
    return onnx.defs.get_schema(op_type, opset), node.SerializeToString()


def _onnx_infer(op_type: str, opset: int, shapes: Sequence[Sequence[Dim]]) -> list[Dim] | None:
    """The output shape ONNX's own ``op_type`` inference gives float operands of these shapes (``Where``: a bool
    condition first): ``onnx.shape_inference.infer_node_outputs`` without its wrapper, which serialises the node
    and looks the schema up at each call (a QLinearAdd's inference spent three quarters of its time there)."""
    schema, node = _inference_call(op_type, opset, len(shapes))
    types: dict[str, bytes] = {}
    for i, dims in enumerate(shapes):
        type_proto = _shape_type(dims)
        if op_type == "Where" and i == 0:
            type_proto.tensor_type.elem_type = onnx.TensorProto.BOOL
        types[f"i{i}"] = type_proto.SerializeToString()
    # (opset imports and IR version: the binding takes them, its stub does not say so)
    found = schema._infer_node_outputs(node, types, {}, {}, {}, onnx.IR_VERSION).get("o")  # type: ignore[call-arg]
    if found is None:
        return None
    result = onnx.TypeProto.FromString(found)
    if not result.tensor_type.HasField("shape"):
        return None
    return result.tensor_type.shape.dim[:]  # type: ignore[no-any-return]


def broadcast(*shapes: Sequence[Dim]) -> list[Dim] | None:
    """ONNX's ``multidirectionalBroadcastShapeInference`` (``bidirectionalBroadcastShapeInference`` for two)."""
    if len(shapes) == 2:
        return _onnx_infer("Add", 14, shapes)
    if len(shapes) == 3:
        return _onnx_infer("Where", 16, shapes)
    raise ValueError("broadcast takes two or three shapes")


def matmul_shape(a: Sequence[Dim], b: Sequence[Dim]) -> list[Dim] | None:
    """ONNX's ``matmulShapeInference``, a rank-0 operand refused as it (and ORT's ``FusedMatMulShapeInference``)
    refuses one."""
    if not a or not b:
        raise InferenceError("Input tensors of wrong rank (0).")
    return _onnx_infer("MatMul", 13, [a, b])


def gemm_shape(node: Node, a: Sequence[Dim], b: Sequence[Dim]) -> list[Dim]:
    """The Gemm shape of ORT's FusedGemm and QGemm: (M, N) from the rank-2 A and B, as ``transA`` and ``transB``
    read them."""
    if len(a) != 2:
        raise InferenceError("First input does not have rank 2")
    if len(b) != 2:
        raise InferenceError("Second input does not have rank 2")
    trans_a, trans_b = node.attr_int("transA", 0) != 0, node.attr_int("transB", 0) != 0
    return [a[1 if trans_a else 0], b[0 if trans_b else 1]]


# ------------------------------------------------------------------------------------------------ schemas
InferFn = Callable[[Node], None]


@dataclass(frozen=True)
class OpSpec:
    """One contrib op to register: ORT's schema (domain, name, since_version) and its inference function."""

    domain: str
    name: str
    infer: InferFn
    since_version: int = 1
    notes: tuple[str, ...] = field(default=())

    @staticmethod
    def like_first_input(domain: str, *names: str) -> list[OpSpec]:
        """Specs of ops whose output has the shape and type of their first input
        (``propagateShapeAndTypeFromFirstInput`` in ORT's schemas)."""
        return [OpSpec(domain, name, Node.propagate_shape_and_type_from_first_input) for name in names]


@functools.cache
def _ort_schemas() -> dict[tuple[str, str, int], Any]:
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    return {(s.domain, s.name, int(s.since_version)): s for s in ort_c.get_all_operator_schema()}


def _option(ort_option: Any) -> onnx.defs.OpSchema.FormalParameterOption:
    options = onnx.defs.OpSchema.FormalParameterOption
    return {"Single": options.Single, "Optional": options.Optional, "Variadic": options.Variadic}[
        str(ort_option).rsplit(".", 1)[-1]
    ]


def _attribute(ort_attr: Any) -> onnx.defs.OpSchema.Attribute:
    cls = onnx.defs.OpSchema.Attribute
    raw: bytes = ort_attr._default_value
    if raw:
        default = onnx.AttributeProto()
        default.ParseFromString(raw)
        if default.type != onnx.AttributeProto.UNDEFINED:
            return cls(ort_attr.name, default, "")
    attr_type = getattr(onnx.defs.OpSchema.AttrType, str(ort_attr.type).rsplit(".", 1)[-1])
    return cls(ort_attr.name, attr_type, "", required=bool(ort_attr.required))


@dataclass(frozen=True)
class _Formal:
    type_str: str
    homogeneous: bool
    allowed: frozenset[str]
    variadic: bool


def _elem_of(type_str: str) -> int:
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return 0
    try:
        return int(onnx.TensorProto.DataType.Value(type_str[len("tensor(") : -1].upper()))
    except ValueError:
        return 0


class _Rule:
    """ORT's output element-type rule for one schema (``Graph::InferAndVerifyTypeMatch``)."""

    def __init__(self, ort_schema: Any) -> None:
        def formal(p: Any) -> _Formal:
            return _Formal(
                str(p.typeStr), bool(p.isHomogeneous), frozenset(str(t) for t in p.types), "Variadic" in str(p.option)
            )

        self.inputs = [formal(p) for p in ort_schema.inputs]
        self.outputs = [formal(p) for p in ort_schema.outputs]

    def _input_formal(self, index: int) -> _Formal | None:
        if index < len(self.inputs):
            return self.inputs[index]
        if self.inputs and self.inputs[-1].variadic:
            return self.inputs[-1]
        return None

    def binding(self, node: Node, type_str: str) -> int | None:
        """The element type ``type_str`` is bound to: the first typed input of a homogeneous formal parameter of
        that type string whose type it allows binds it (None: no input does). Only the inputs of that type string
        are asked for their types (each answer crosses from C++ as a new proto)."""
        for index in range(node.num_inputs):
            formal = self._input_formal(index)
            if formal is None or not formal.homogeneous or formal.type_str != type_str:
                continue
            elem = node.elem(index)
            if elem and tensor_type_string(elem) in formal.allowed:
                return elem
        return None

    def output_elem(self, node: Node, index: int, bound: dict[str, int | None], inferred: int) -> int:
        """Output ``index``'s element type by the rule (``bound``: the bindings found so far, by type string)."""
        formal = self.outputs[min(index, len(self.outputs) - 1)] if self.outputs else None
        if formal is None:
            return inferred
        if formal.homogeneous:
            if formal.type_str not in bound:
                bound[formal.type_str] = self.binding(node, formal.type_str)
            found = bound[formal.type_str]
            if found is not None:
                return found
        if len(formal.allowed) == 1:
            return _elem_of(next(iter(formal.allowed)))
        return inferred


def _run(spec: OpSpec, rule: _Rule, ctx: onnx.shape_inference.InferenceContext) -> None:
    node = Node(ctx, _known_attributes(ctx))
    spec.infer(node)
    bound: dict[str, int | None] = {}
    for index in range(node.num_outputs):
        if not ctx.has_output(index):
            continue
        inferred = node.outputs.get(index, Inferred())
        elem = rule.output_elem(node, index, bound, inferred.elem)
        if not elem:
            continue
        out = onnx.TypeProto()
        out.tensor_type.elem_type = elem
        if inferred.dims is not None:
            out.tensor_type.shape.dim.extend(inferred.dims)
            if not inferred.dims:
                out.tensor_type.shape.SetInParent()  # a known rank 0
        ctx.set_output_type(index, out)


def _build(spec: OpSpec) -> onnx.defs.OpSchema | None:
    ort_schema = _ort_schemas().get((spec.domain, spec.name, spec.since_version))
    if ort_schema is None:
        return None
    cls = onnx.defs.OpSchema

    def formal(p: Any) -> onnx.defs.OpSchema.FormalParameter:
        return cls.FormalParameter(
            str(p.name), str(p.typeStr), param_option=_option(p.option), is_homogeneous=bool(p.isHomogeneous)
        )

    schema = cls(
        spec.name,
        spec.domain,
        spec.since_version,
        inputs=[formal(p) for p in ort_schema.inputs],
        outputs=[formal(p) for p in ort_schema.outputs],
        type_constraints=[
            (str(t.type_param_str), [str(a) for a in t.allowed_type_strs], "") for t in ort_schema.type_constraints
        ],
        attributes=[_attribute(a) for a in ort_schema.attributes.values()],
    )
    rule = _Rule(ort_schema)
    schema.set_type_and_shape_inference_function(functools.partial(_run, spec, rule))
    return schema


def _onnx_has(spec: OpSpec) -> bool:
    try:
        found = onnx.defs.get_schema(spec.name, spec.since_version, spec.domain)
    except onnx.defs.SchemaError:
        return False
    return int(found.since_version) == spec.since_version


def register_specs(specs: Sequence[OpSpec]) -> list[str]:
    """Register each op ONNX does not already have (at that version); the names registered."""
    done = []
    for spec in specs:
        if _onnx_has(spec):
            continue
        schema = _build(spec)
        if schema is None:
            continue
        onnx.defs.register_schema(schema)
        done.append(f"{spec.domain or 'ai.onnx'}::{spec.name}-{spec.since_version}")
    return done
