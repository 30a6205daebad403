"""Evaluate one node exactly as ONNX Runtime's CPU kernel computes it (for ConstantFolding).

ORT's ConstantFolding does not compute anything itself: for a node whose inputs are all constant it creates the CPU
kernel of that node and runs it once (``OptimizerExecutionFrame``), and the outputs become initializers. To produce
the very same bytes, qdqopt does the same thing through the public API: it builds a one-node model

    initializers in0, in1, ... (the node's constant inputs, missing optional inputs stay "")
    node  <op_type>(in0, in1, ...) -> out0, out1, ...   (same domain, attributes, opset imports)
    graph outputs out0, out1, ... (untyped: ORT infers their types and shapes)

creates an ``onnxruntime.InferenceSession`` on the CPU EP at ``ORT_DISABLE_ALL`` (so nothing rewrites or folds the
node), with one intra-op thread (ConstantFolding's execution frame has no thread pool), and runs it. The node is
then executed by the very CPU kernel ConstantFolding would create, from the same ORT build, on the same machine.
That is why the result is bit-identical where a numpy re-implementation would not be:

* ``Round`` is Eigen's ``rint`` (half to even), ``QuantizeLinear`` is MLAS's vectorised ``MlasQuantizeLinear``
  (float32 division, saturation, its own rounding), ``Div`` is IEEE single division done with SIMD;
* ``Cast`` of NaN, inf or an out-of-range float to int32 yields whatever ``cvttps2dq`` gives on x86
  (INT32_MIN), which numpy leaves undefined or warns about; float8 and saturating casts follow ORT's tables;
* reductions and other multi-element kernels keep ORT's order of accumulation.

The outputs are read as the kernel left them. Where onnxruntime's Python binding has no numpy type for an output
(int4/uint4 and int2/uint2, packed two or four to a byte, float8, bfloat16: ``OrtValue.numpy()`` refuses them, or
hands float8e4m3fn over as uint8), the tensor's buffer is copied byte for byte (``OrtValue.data_ptr`` and
``tensor_size_in_bytes``, what ``utils::TensorToTensorProto`` stores as ``raw_data``) into
:attr:`NodeEvaluation.raw`, and the value is decoded from it by onnx (ml_dtypes arrays, unpacked).

What the session also tells, and ConstantFolding needs before it runs a kernel:

* the output types and shapes ORT's own shape inference gives the node (``InferenceSession.get_outputs()``), for
  the output-size estimate (``optimization.constant_folding_max_output_size_in_bytes``): a node whose output size
  ORT cannot estimate is not folded;
* whether the CPU kernel registry has a kernel for the node's actual types. ORT's session would otherwise insert
  Casts around an fp16 node with no fp16 kernel and compute it in float32 (InsertCastTransformer), while
  ConstantFolding simply finds no kernel and leaves the node alone; :func:`qdqopt.kernels.node_has_cpu_kernel` is
  consulted with the input and inferred output types.

Results are cached per node signature (the serialized one-node model), so a model with many identical folds (the
bias chains WeightBiasQuantization builds, say) creates each session once.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from qdqopt.graph.schema import parse_type_string

__all__ = ["NodeEvaluation", "clear_cache", "evaluate_node"]

_CACHE: OrderedDict[str, NodeEvaluation] = OrderedDict()
_CACHE_ENTRIES = 1024
_CACHE_MAX_RESULT_BYTES = 4 << 20


@dataclass(frozen=True)
class NodeEvaluation:
    """The outcome of running one node: per present output, ORT's inferred type and shape and the value.

    ``error`` is empty on success. A failure (no CPU kernel for the types, a session ORT refuses, a kernel that
    fails) means ConstantFolding would not fold the node either.
    """

    error: str = ""
    #: ORT type strings (``tensor(float)``...) of the present outputs, as ORT's inference gives them
    types: tuple[str, ...] = ()
    #: inferred shapes of the present outputs: None for an unknown rank, None entries for unknown dims
    shapes: tuple[tuple[int | None, ...] | None, ...] = ()
    values: tuple[np.ndarray, ...] = field(default=())
    #: per present output: the tensor's buffer as the kernel wrote it, for an output numpy has no type for (int4,
    #: uint4, int2, uint2, float8, bfloat16: packed where sub-byte), else None (``values`` holds it exactly)
    raw: tuple[bytes | None, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.error


def clear_cache() -> None:
    """Forget every cached evaluation."""
    _CACHE.clear()


def evaluate_node(
    op_type: str,
    domain: str,
    attributes: Sequence[onnx.AttributeProto],
    inputs: Sequence[onnx.TensorProto | None],
    outputs_present: Sequence[bool],
    opsets: Mapping[str, int],
) -> NodeEvaluation:
    """Run the node on ORT's CPU EP: the one-node model described in the module docstring (canonical names, so that
    equal nodes share it), cached per signature."""
    initializers: list[onnx.TensorProto] = []
    input_names: list[str] = []
    for i, tensor in enumerate(inputs):
        if tensor is None:
            input_names.append("")
            continue
        copied = onnx.TensorProto()
        copied.CopyFrom(tensor)
        copied.name = f"in{i}"
        initializers.append(copied)
        input_names.append(copied.name)
    output_names = [f"out{i}" if present else "" for i, present in enumerate(outputs_present)]
    node = onnx.NodeProto(op_type=op_type, name="node")
    if domain:
        node.domain = domain
    node.input.extend(input_names)
    node.output.extend(output_names)
    node.attribute.extend(attributes)
    graph = onnx.GraphProto(name="fold")
    graph.node.append(node)
    graph.initializer.extend(initializers)
    graph.output.extend(onnx.ValueInfoProto(name=name) for name in output_names if name)
    model = onnx.ModelProto()
    model.graph.CopyFrom(graph)
    opset_ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    model.opset_import.extend(opset_ids)
    model.ir_version = max(helper.find_min_ir_version_for(opset_ids, ignore_unknown=True), 4)
    return _evaluate_cached(model)


def _evaluate_cached(model: onnx.ModelProto) -> NodeEvaluation:
    """:func:`_evaluate`, cached per serialized model (the most recent :data:`_CACHE_ENTRIES`; a result over
    :data:`_CACHE_MAX_RESULT_BYTES` is not kept)."""
    data = model.SerializeToString()
    key = hashlib.sha256(data).hexdigest()
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    result = _evaluate(model, data)
    if sum(v.nbytes for v in result.values) <= _CACHE_MAX_RESULT_BYTES:
        _CACHE[key] = result
        while len(_CACHE) > _CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return result


def _evaluate(model: onnx.ModelProto, data: bytes) -> NodeEvaluation:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    try:
        session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT refuses the node: no kernel, bad types...
        return NodeEvaluation(error=f"session: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    metas = session.get_outputs()
    types = tuple(str(m.type) for m in metas)
    shapes = tuple(_shape_of(m.shape) for m in metas)
    if not _has_cpu_kernel(model, types):
        return NodeEvaluation(error="no CPU kernel for the node's types", types=types, shapes=shapes)
    try:
        outputs = session.run_with_ort_values(None, {})
        fetched = [_fetch(value, type_str) for value, type_str in zip(outputs, types, strict=True)]
    except Exception as exc:
        return NodeEvaluation(error=f"compute: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    arrays = tuple(array for array, _ in fetched)
    raw = tuple(data for _, data in fetched)
    # an unknown rank comes back from ORT as [] as well: only a 0-d result makes [] a known (scalar) shape
    shapes = tuple(None if s == () and a.ndim != 0 else s for s, a in zip(shapes, arrays, strict=True))
    return NodeEvaluation(types=types, shapes=shapes, values=arrays, raw=raw)


def _fetch(value: Any, type_str: str) -> tuple[np.ndarray, bytes | None]:
    """An output (an ``OrtValue``) as a numpy array and, where numpy has no type for it, the tensor's buffer (see the
    module docstring)."""
    elem = _type_string_elem(type_str)
    if elem not in _RAW_ONLY:
        return np.asarray(value.numpy()), None
    size = int(value.tensor_size_in_bytes())
    data = ctypes.string_at(value.data_ptr(), size) if size else b""
    dims = [int(d) for d in value.shape()]
    tensor = onnx.TensorProto(data_type=elem, dims=dims, raw_data=data)
    return onnx.numpy_helper.to_array(tensor), data


#: element types whose outputs are read from the tensor's buffer: those numpy (and ORT's binding) has no type for
_RAW_ONLY = frozenset(
    int(getattr(onnx.TensorProto, name))
    for name in (
        "INT4",
        "UINT4",
        "INT2",
        "UINT2",
        "FLOAT4E2M1",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "FLOAT8E8M0",
        "BFLOAT16",
    )
    if hasattr(onnx.TensorProto, name)
)


def _shape_of(shape: object) -> tuple[int | None, ...] | None:
    if not isinstance(shape, list | tuple):
        return None
    return tuple(d if isinstance(d, int) and d >= 0 else None for d in shape)


def _type_string_elem(type_str: str) -> int:
    """The element type of an ORT tensor type string (``tensor(float)``), 0 for any other."""
    found = parse_type_string(type_str) if type_str.startswith("tensor(") else None
    return int(found.tensor_type.elem_type) if found is not None else 0


def _has_cpu_kernel(model: onnx.ModelProto, output_types: Sequence[str]) -> bool:
    """``KernelRegistry::TryFindKernel`` for the node with its actual input and inferred output types."""
    from qdqopt.graph import Graph
    from qdqopt.kernels import node_has_cpu_kernel

    proto = model.graph.node[0]
    graph = Graph(name="fold", opsets={d.domain: int(d.version) for d in model.opset_import})
    for tensor in model.graph.initializer:
        graph.set_value_type(tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    node = graph.add_node(proto.name, proto.op_type, list(proto.input), list(proto.output), domain=proto.domain)
    present = [o for o in proto.output if o]
    for name, type_str in zip(present, output_types, strict=True):
        elem = _type_string_elem(type_str)
        if elem:
            graph.set_value_type(name, helper.make_tensor_type_proto(elem, None))
    return bool(node_has_cpu_kernel(graph, node))
