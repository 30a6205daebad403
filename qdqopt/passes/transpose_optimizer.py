"""TransposeOptimizer: push Transposes through the ops that allow it until they cancel (``transpose_optimizer.cc``,
``transpose_optimization/onnx_transpose_optimization.cc``; see ``docs/notes/transpose_optimizer.md``).

::

    x ─> Transpose(0,3,1,2) ─> Relu ─> Transpose(0,2,3,1) ─> y        becomes        x ─> Relu ─> y

Registered twice: ``TransposeOptimizer`` at Level1 (no EP, default cost check) and
``TransposeOptimizer_CPUExecutionProvider`` at Level2 (CPU nodes, ORT's EP cost check, new nodes on the CPU EP).

For each node in a topological snapshot, the first input produced by a Transpose whose handler accepts it and whose
cost estimate decreases is pushed: the node's other inputs are transposed with the inverse perm (constant
initializers in place, cancelling Transposes removed, new Transposes added) and its outputs get a Transpose with
the perm. Then, if the graph has a DequantizeLinear, Transpose/Squeeze nodes on constants are folded and QDQ node
units the pushes broke are repaired.

qdqopt implements the handlers that QDQ models reach: the elementwise ops (simple and broadcasting), Clip, CastLike,
Q/DQ, Transpose, Unsqueeze, Concat, Split, Softmax/Hardmax/LogSoftmax, Shape, Reshape (as a Transpose), Reduce*,
ArgMin/ArgMax, Gather (scalar index) and Tile. :meth:`_TransposeOptimizerBase.
unsupported` runs the pass on a copy and names the first handler it would need that qdqopt lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import value_elem_type, value_shape

__all__ = ["TransposeOptimizer", "TransposeOptimizerCPU"]

_DOC = "Added in transpose optimizer"
_MIN_OPSET, _MAX_OPSET = 7, 27
_CPU = "CPUExecutionProvider"
_MS = "com.microsoft"


class _Unsupported(Exception):
    """Raised when the run needs a handler qdqopt does not implement."""


# ---------------------------------------------------------------------------------------------------- perms
def invert_perm(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def compose_perm(perm1: list[int], perm2: list[int]) -> list[int]:
    return [perm1[p] for p in perm2]


def _valid_perm(perm: list[int]) -> bool:
    return len(perm) > 0 and sorted(perm) == list(range(len(perm)))


def _normalize_axes(axes: list[int], rank: int) -> list[int] | None:
    out: list[int] = []
    for axis in axes:
        a = axis + rank if axis < 0 else axis
        if a < 0 or a >= rank or a in out:
            return None
        out.append(a)
    return out


def _normalize_axis(axis: int, rank: int) -> int | None:
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def _unsqueeze_shape(shape: list[int], axes: list[int]) -> list[int]:
    new_rank = len(shape) + len(axes)
    out = [0] * new_rank
    for a in axes:
        out[a] = 1
    j = 0
    for i in range(new_rank):
        if out[i] != 1:
            out[i] = shape[j]
            j += 1
    return out


def _squeeze_shape(shape: list[int], axes: list[int]) -> list[int]:
    pos = sorted({a + len(shape) if a < 0 else a for a in axes})
    out: list[int] = []
    for i, d in enumerate(shape):
        if not pos and d == 1:
            continue
        if i in pos:
            continue
        out.append(d)
    return out


def _unsqueeze_perm(axes: list[int], perm: list[int]) -> list[int]:
    new_rank = len(perm) + len(axes)
    added = [i in axes for i in range(new_rank)]
    axes_map = [i for i in range(new_rank) if not added[i]]
    out: list[int] = []
    j = 0
    for i in range(new_rank):
        if added[i]:
            out.append(i)
        else:
            out.append(axes_map[perm[j]])
            j += 1
    return out


def _squeeze_perm(axes: list[int], perm: list[int]) -> list[int]:
    removed = [i in axes for i in range(len(perm))]
    axes_map = [0] * len(perm)
    j = 0
    for i in range(len(perm)):
        if not removed[i]:
            axes_map[i] = j
            j += 1
    return [axes_map[p] for p in perm if not removed[p]]


def _unsqueeze_axis(axes: list[int], axis: int) -> int:
    for a in sorted(axes):
        if a <= axis:
            axis += 1
    return axis


def _sorted_axes_for_transposed_input(axes: list[int], perm: list[int]) -> list[int]:
    included = {perm[a] for a in axes}
    return [a for a in range(len(perm)) if a in included]


def _finalize_reshape_shape(input_shape: list[int], requested: list[int], allow_zero: bool) -> list[int] | None:
    """``FinalizeReshapeShape``: the Reshape's output shape for a concrete input shape of the same rank."""
    total = 1
    for d in input_shape:
        if d < 0:
            return None
        total *= d
    if len(input_shape) != len(requested):
        return None
    unknown = -1
    size = 1
    final = list(requested)
    for i, d in enumerate(requested):
        if d == -1:
            if unknown != -1:
                return None
            unknown = i
        else:
            if not allow_zero and d == 0:
                final[i] = input_shape[i]
            size *= final[i]
    if unknown != -1:
        if size == 0 or total % size != 0:
            return None
        final[unknown] = total // size
    elif size != total:
        return None
    return final


# ---------------------------------------------------------------------------------------------------- handlers
InputsFn = Callable[["_Run", Node], list[int]]


@dataclass(frozen=True)
class _Handler:
    inputs: str  # "first", "all", "nonscalar", "qlinear_concat", "qlinear_binary"
    kind: str  # handler implementation key; "" when qdqopt does not implement it
    transposes_outputs: bool = True


_SIMPLE_OPS = [
    "Cast",
    "Exp",
    "Gelu",
    "Identity",
    "LeakyRelu",
    "Log",
    "Reciprocal",
    "Relu",
    "Sigmoid",
    "Sqrt",
    "Tanh",
    "Abs",
    "Not",
    "Ceil",
    "Floor",
    "Neg",
    "Erf",
    "HardSigmoid",
    "Round",
    "IsInf",
    "IsNaN",
    "Selu",
    "Shrink",
    "Sign",
    "Softplus",
    "Softsign",
    "ThresholdedRelu",
    "Celu",
    "HardSwish",
    "Sin",
    "Cos",
    "Tan",
    "Sinh",
    "Cosh",
    "Asin",
    "Acos",
    "Atan",
    "Asinh",
    "Acosh",
    "Atanh",
]
_BROADCAST_OPS = [
    "Add",
    "Max",
    "Min",
    "Mul",
    "Sub",
    "Div",
    "And",
    "Or",
    "Xor",
    "Mod",
    "PRelu",
    "BitShift",
    "Equal",
    "Greater",
    "Less",
    "GreaterOrEqual",
    "LessOrEqual",
    "Mean",
    "Sum",
    "Pow",
    "Where",
]
_REDUCE_OPS = [
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
]

HANDLERS: dict[str, _Handler] = {
    **{op: _Handler("all", "simple") for op in _SIMPLE_OPS},
    **{op: _Handler("nonscalar", "broadcast") for op in _BROADCAST_OPS},
    "Clip": _Handler("first", "simple"),
    "CastLike": _Handler("first", "simple"),
    "Transpose": _Handler("first", "transpose", transposes_outputs=False),
    "Concat": _Handler("all", "concat"),
    "Split": _Handler("first", "split"),
    "Shape": _Handler("first", "shape", transposes_outputs=False),
    "Pad": _Handler("first", ""),
    **{op: _Handler("first", "reduce") for op in _REDUCE_OPS},
    "ArgMin": _Handler("first", "argminmax"),
    "ArgMax": _Handler("first", "argminmax"),
    # ORT 1.32 did not push where the mirror's HandleSqueeze does (transpose/squeeze_unsqueeze_*): refused
    "Squeeze": _Handler("first", ""),
    "Unsqueeze": _Handler("first", "unsqueeze"),
    "Slice": _Handler("first", ""),
    "Gather": _Handler("first", "gather"),
    "Tile": _Handler("first", "tile"),
    "Softmax": _Handler("first", "softmax"),
    "Hardmax": _Handler("first", "softmax"),
    "LogSoftmax": _Handler("first", "softmax"),
    "QuantizeLinear": _Handler("first", "qdq"),
    "DequantizeLinear": _Handler("first", "qdq"),
    # ORT's extended handlers (higher priority)
    "MaxPool": _Handler("first", ""),
    "Resize": _Handler("first", ""),
    "Reshape": _Handler("first", "reshape", transposes_outputs=False),
    f"{_MS}.QuantizeLinear": _Handler("first", ""),
    f"{_MS}.DequantizeLinear": _Handler("first", ""),
    f"{_MS}.QLinearAdd": _Handler("qlinear_binary", ""),
    f"{_MS}.QLinearAveragePool": _Handler("first", ""),
    f"{_MS}.QLinearConcat": _Handler("qlinear_concat", ""),
    f"{_MS}.QLinearGlobalAveragePool": _Handler("first", ""),
    f"{_MS}.QLinearLeakyRelu": _Handler("first", ""),
    f"{_MS}.QLinearMul": _Handler("qlinear_binary", ""),
    f"{_MS}.QLinearReduceMean": _Handler("first", ""),
    f"{_MS}.QLinearSigmoid": _Handler("first", ""),
    f"{_MS}.QLinearSoftmax": _Handler("first", ""),
}


def handler_for(node: Node) -> _Handler | None:
    domain = normalize_domain(node.domain)
    key = node.op_type if domain == "" else f"{domain}.{node.op_type}"
    return HANDLERS.get(key)


# ---------------------------------------------------------------------------------------------------- one run
Shape = list[int] | None


@dataclass
class _Quant:
    per_axis: bool
    axis: int


class _Run:
    """One ``Optimize`` call on one graph: ORT's ``OptimizerCtx`` plus its ``ApiGraph``."""

    def __init__(self, graph: Graph, opset: int, provider: str, new_node_ep: str) -> None:
        self.graph = graph
        self.opset = opset
        self.provider = provider
        self.new_node_ep = new_node_ep
        # NodeArg types this run changed: value -> (elem type, shape or None)
        self.types: dict[str, tuple[int | None, Shape]] = {}
        # values in ``types`` whose shape ORT would hold with symbolic dims (copied or permuted from one that has them)
        self.symbolic: set[str] = set()
        self.outputs_leading: set[str] = set()

    # -------------------------------------------------------------- ApiGraph
    def shape(self, name: str) -> Shape:
        if not name:
            return None
        tensor = self.graph.initializer(name)
        if tensor is not None and not any(i.name == name for i in self.graph.inputs):
            return [int(d) for d in tensor.dims]
        if name in self.types:
            return self.types[name][1]
        dims = value_shape(self.graph, name)
        if dims is None:
            return None
        return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]

    def dtype(self, name: str) -> int | None:
        if name in self.types and not self.graph.is_initializer(name):
            return self.types[name][0]
        return value_elem_type(self.graph, name)

    def has_symbolic_dims(self, name: str) -> bool:
        if name in self.types:
            return name in self.symbolic
        dims = value_shape(self.graph, name) if name else None
        return dims is not None and any(isinstance(d, str) for d in dims)

    def set_shape(self, name: str, shape: Shape, *, symbolic: bool = False) -> None:
        """``SetShape`` (drops symbolic dims; ``symbolic``: the dim-copying ``PermuteDims``/``UnsqueezeDims``)."""
        self.types[name] = (self.dtype(name), None if shape is None else list(shape))
        if symbolic:
            self.symbolic.add(name)
        else:
            self.symbolic.discard(name)

    def copy_value_info(self, src: str, dst: str) -> None:
        elem = self.dtype(src)
        shape = self.shape(src)
        if elem is None and shape is None:
            return
        symbolic = self.has_symbolic_dims(src)
        self.types[dst] = (elem, shape)
        if symbolic:
            self.symbolic.add(dst)
        else:
            self.symbolic.discard(dst)

    def permute_dims(self, name: str, perm: list[int]) -> None:
        shape = self.shape(name)
        if shape is not None:
            self.set_shape(name, [shape[p] for p in perm], symbolic=self.has_symbolic_dims(name))

    def unsqueeze_dims(self, name: str, axes: list[int]) -> None:
        shape = self.shape(name)
        if shape is None:
            return
        out: list[int] = []
        j = 0
        i = 0
        while True:
            if i in axes:
                out.append(1)
            elif j < len(shape):
                out.append(shape[j])
                j += 1
            else:
                break
            i += 1
        self.set_shape(name, out, symbolic=self.has_symbolic_dims(name))

    def producer(self, name: str) -> Node | None:
        return self.graph.producer(name) if name else None

    def consumers(self, name: str) -> tuple[list[Node], bool]:
        """``GetValueConsumers``: the nodes reading ``name`` explicitly, and whether that list is comprehensive."""
        nodes: list[Node] = []
        comprehensive = not self.graph.is_graph_output(name)
        for node in self.graph.consumers(name):
            if name in node.implicit_inputs:
                comprehensive = False
            if name in node.inputs:
                nodes.append(node)
        return nodes, comprehensive

    def has_consumers(self, name: str) -> bool:
        return bool(self.graph.consumers(name)) or self.graph.is_graph_output(name)

    def constant(self, name: str, *, local: bool = False) -> onnx.TensorProto | None:
        if not name:
            return None
        return self.graph.constant_initializer(name, check_outer_scope=not local)

    def constant_array(self, name: str, *, local: bool = False) -> np.ndarray | None:
        if not name:
            return None
        return self.graph.constant_array(name, check_outer_scope=not local)

    def generate_value_name(self, base: str) -> str:
        name = self.graph.generate_value_name(base)
        if not name:  # the empty NodeArg exists by then in ORT
            name = self.graph.generate_value_name(base)
        return name

    def add_node(self, op_type: str, inputs: list[str], domain: str = "") -> Node:
        name = self.graph.generate_node_name(op_type)
        out = self.generate_value_name(name + "_out0")
        return self.graph.add_node(name, op_type, inputs, [out], domain=domain, doc_string=_DOC, ep=self.new_node_ep)

    def set_attr(self, node: Node, name: str, value: int | list[int]) -> None:
        self.graph.set_attribute(node, onnx.helper.make_attribute(name, value))

    def set_input(self, node: Node, slot: int, value: str) -> None:
        self.graph.set_input(node, slot, value)

    def move_output(self, src: Node, src_slot: int, dst: Node, dst_slot: int) -> None:
        name = src.outputs[src_slot]
        new = self.generate_value_name(src.name)
        self.graph.set_output(src, src_slot, new)
        self.graph.set_output(dst, dst_slot, name)
        self.types.pop(new, None)
        self.symbolic.discard(new)

    def remove_node(self, node: Node) -> None:
        self.graph.remove_node(node)

    def add_initializer(self, dtype: int, shape: list[int], data: bytes) -> str:
        name = self.generate_value_name("const_transpose_optimizer")
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=shape, raw_data=data)
        self.graph.add_initializer(tensor)
        return name

    def add_int64(self, values: list[int]) -> str:
        return self.add_initializer(onnx.TensorProto.INT64, [len(values)], np.array(values, dtype=np.int64).tobytes())

    def _replace_initializer(self, name: str, array: np.ndarray, dtype: int) -> None:
        self.graph.remove_initializer(name)
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=list(array.shape))
        tensor.raw_data = np.ascontiguousarray(array).tobytes()
        self.graph.add_initializer(tensor)

    def transpose_initializer(self, name: str, perm: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, np.transpose(self.graph.array(name), perm), tensor.data_type)

    def reshape_initializer(self, name: str, shape: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, self.graph.array(name).reshape(shape), tensor.data_type)

    # -------------------------------------------------------------- helpers
    def perm_of(self, node: Node) -> list[int] | None:
        attr = node.attributes.get("perm")
        if attr is None or attr.type != onnx.AttributeProto.INTS:
            return None
        perm = [int(p) for p in attr.ints]
        return perm if _valid_perm(perm) else None

    def int_attr(self, node: Node, name: str, default: int) -> int:
        attr = node.attributes.get(name)
        if attr is None or attr.type != onnx.AttributeProto.INT:
            return default
        return int(attr.i)

    def read_attr_or_input(self, node: Node, attr: str, slot: int, opset_with_input: int) -> list[int] | None:
        if self.opset < opset_with_input:
            proto = node.attributes.get(attr)
            if proto is None or proto.type != onnx.AttributeProto.INTS:
                return None
            return [int(v) for v in proto.ints]
        if slot >= len(node.inputs) or not node.inputs[slot]:
            return None
        array = self.constant_array(node.inputs[slot])
        if array is None:
            return None
        return [int(v) for v in array.reshape(-1).astype(np.int64)]

    def quant_info(self, node: Node) -> _Quant | None:
        """``GetQuantizationInfo``; None also for blocked quantization (unsupported)."""
        if len(node.inputs) < 2:
            return None
        scale_shape = self.shape(node.inputs[1])
        if scale_shape is None:
            return None
        if len(scale_shape) == 0 or (len(scale_shape) == 1 and scale_shape[0] == 1):
            return _Quant(False, 1)
        rank = self.shape(node.inputs[0])
        if rank is None:
            return None
        axis = _normalize_axis(self.int_attr(node, "axis", 1), len(rank))
        if axis is None:
            return None
        if self.int_attr(node, "block_size", 0) != 0:
            return None
        return _Quant(True, axis)

    def single_consumer(self, value: str) -> Node | None:
        nodes, comprehensive = self.consumers(value)
        return nodes[0] if comprehensive and len(nodes) == 1 else None

    def dq_to_look_past(self, value: str) -> tuple[Node, _Quant] | None:
        """``GetDQWithConstInitializerInputAndSingleConsumer``."""
        dq = self.producer(value)
        if dq is None or dq.op_type != "DequantizeLinear":
            return None
        if self.constant(dq.inputs[0]) is None:
            return None
        quant = self.quant_info(dq)
        if quant is None:
            return None
        if not self.consumers(dq.inputs[0])[1]:
            return None
        if self.single_consumer(dq.outputs[0]) is None:
            return None
        return dq, quant

    def dq_set_input(self, dq: Node, quant: _Quant, new_input: str) -> None:
        """``DQToLookPast::SetUpdatedInput``."""
        self.set_input(dq, 0, new_input)
        self.set_attr(dq, "axis", quant.axis)
        self.set_shape(dq.outputs[0], self.shape(new_input))

    # -------------------------------------------------------------- node makers
    def make_transpose(self, value: str, perm: list[int]) -> Node:
        node = self.add_node("Transpose", [value])
        self.set_attr(node, "perm", perm)
        return node

    def make_squeeze_or_unsqueeze(self, op_type: str, value: str, axes: list[int]) -> Node:
        if self.opset < 13:
            node = self.add_node(op_type, [value])
            self.set_attr(node, "axes", axes)
            return node
        axes_name = self.add_int64(axes)
        return self.add_node(op_type, [value, axes_name])

    def _set_if_not_default(self, node: Node, name: str, value: int | None, default: int) -> None:
        if value is not None and value != default:
            self.set_attr(node, name, value)

    def make_q(
        self, domain: str, inputs: list[str], axis: int, block: int | None, out_dtype: int | None, sat: int | None
    ) -> Node:
        node = self.add_node("QuantizeLinear", inputs, domain)
        self._set_if_not_default(node, "axis", axis, 1)
        opset = self.graph.opset(domain)
        if opset is not None:
            onnx_domain = normalize_domain(domain) == ""
            if opset >= (19 if onnx_domain else 1):
                self._set_if_not_default(node, "saturate", sat, 1)
            if opset >= (21 if onnx_domain else 1):
                self._set_if_not_default(node, "block_size", block, 0)
                self._set_if_not_default(node, "output_dtype", out_dtype, 0)
        return node

    def make_dq(self, domain: str, inputs: list[str], axis: int, block: int | None) -> Node:
        node = self.add_node("DequantizeLinear", inputs, domain)
        self._set_if_not_default(node, "axis", axis, 1)
        opset = self.graph.opset(domain)
        if opset is not None and opset >= (21 if normalize_domain(domain) == "" else 1):
            self._set_if_not_default(node, "block_size", block, 0)
        return node

    def opt_int(self, node: Node, name: str) -> int | None:
        attr = node.attributes.get(name)
        return int(attr.i) if attr is not None and attr.type == onnx.AttributeProto.INT else None

    def make_qdq_node_unit(self, dq: Node) -> bool:
        """``MakeQDQNodeUnit``: DQ -> next (Transpose/Unsqueeze) becomes DQ -> next -> Q -> DQ."""
        nxt = self.single_consumer(dq.outputs[0])
        if nxt is None:
            return False
        domain = dq.domain
        scale = dq.inputs[1]
        zp = dq.inputs[2] if len(dq.inputs) > 2 else None
        quant = self.quant_info(dq)
        if quant is None:
            return False
        axis = quant.axis
        if quant.per_axis:
            if nxt.op_type == "Transpose":
                perm = self.perm_of(nxt)
                assert perm is not None
                axis = invert_perm(perm)[axis]
            elif nxt.op_type == "Unsqueeze":
                axes = self.read_attr_or_input_graph(nxt, "axes", 1, 13)
                assert axes is not None
                rank = self.shape(dq.outputs[0])
                if rank is None:
                    return False
                norm = _normalize_axes(axes, len(rank) + len(axes))
                if norm is None:
                    return False
                axis = _unsqueeze_axis(norm, axis)
        nxt_out = nxt.outputs[0]
        nxt_shape = self.shape(nxt_out)
        inputs = ["", scale] + ([zp] if zp is not None else [])
        out_dtype: int | None = None
        if zp is None:
            in_dtype = self.dtype(dq.inputs[0])
            if in_dtype is not None and in_dtype != onnx.TensorProto.UINT8:
                dq_opset = self.graph.opset(domain)
                if normalize_domain(domain) != "" or dq_opset is None or dq_opset < 21:
                    return False
                if in_dtype not in (2, 3, 4, 5, 17, 18, 19, 20):
                    return False
                out_dtype = in_dtype
        q = self.make_q(domain, inputs, axis, self.opt_int(dq, "block_size"), out_dtype, self.opt_int(dq, "saturate"))
        self.copy_value_info(dq.inputs[0], q.outputs[0])
        self.set_shape(q.outputs[0], nxt_shape)
        inputs[0] = q.outputs[0]
        new_dq = self.make_dq(domain, inputs, axis, self.opt_int(dq, "block_size"))
        self.copy_value_info(nxt_out, new_dq.outputs[0])
        self.move_output(nxt, 0, new_dq, 0)
        self.set_input(q, 0, nxt.outputs[0])
        self.copy_value_info(new_dq.outputs[0], nxt.outputs[0])
        return True

    def read_attr_or_input_graph(self, node: Node, attr: str, slot: int, opset_with_input: int) -> list[int] | None:
        """The graph-opset variant of ``ReadFromAttrOrInput`` (the node's own domain's opset)."""
        return self.read_attr_or_input(node, attr, slot, opset_with_input)

    # -------------------------------------------------------------- inputs and outputs
    def redirect(self, consumers: list[Node], old: str, new: str) -> None:
        """Point every input of ``consumers`` that reads ``old`` at ``new``."""
        for consumer in consumers:
            for k, inp in enumerate(consumer.inputs):
                if inp == old:
                    self.set_input(consumer, k, new)

    def detach_input(
        self, node: Node, i: int
    ) -> tuple[str, onnx.TensorProto | None, tuple[Node, _Quant] | None, str, str, list[Node], bool]:
        """The start shared by ``TransposeInputImpl`` and ``UnsqueezeInput``: the input's value, its constant
        (looking past a DQ of a constant, whose input is then detached too), the DQ looked past and its input, the
        value to modify in place, and that value's other consumers (and whether they are all known); input ``i``
        of ``node`` is detached, so those consumers exclude it."""
        value = node.inputs[i]
        constant = self.constant(value, local=True)
        look: tuple[Node, _Quant] | None = None
        dq_input = ""
        if constant is None:
            look = self.dq_to_look_past(value)
            if look is not None:
                dq_input = look[0].inputs[0]
                constant = self.constant(dq_input, local=True)
                self.set_input(look[0], 0, "")
        self.set_input(node, i, "")
        to_modify = dq_input if look is not None else value
        consumers, comprehensive = self.consumers(to_modify)
        return value, constant, look, dq_input, to_modify, consumers, comprehensive

    def producer_past_dq(
        self, value: str, consumers: list[Node], comprehensive: bool
    ) -> tuple[Node | None, tuple[Node, _Quant] | None, list[Node], bool]:
        """The node producing ``value``, looking past a DQ with known quantization params (then also returned, with
        the consumers of the DQ's input in place of the given ``consumers``)."""
        producer = self.producer(value)
        if producer is not None and producer.op_type == "DequantizeLinear":
            found = self.quant_info(producer)
            if found is not None:
                consumers, comprehensive = self.consumers(producer.inputs[0])
                return self.producer(producer.inputs[0]), (producer, found), consumers, comprehensive
        return producer, None, consumers, comprehensive

    def transpose_input(self, node: Node, i: int, perm: list[int], perm_inv: list[int]) -> None:
        """``TransposeInputImpl``."""
        value, constant, look, dq_input, to_modify, consumers, comprehensive = self.detach_input(node, i)
        if constant is not None and comprehensive:
            restore_input = True
            restore_dq = look is not None
            try:
                dims = [int(d) for d in constant.dims]
                if int(np.prod(dims)) == 1:
                    return
                if len(dims) == 1 and dims[0] == len(perm):
                    raise _Unsupported("Permute1DConstant (a 1-D constant of length rank)")
                if consumers:
                    inv = self.make_transpose(to_modify, perm_inv)
                    self.copy_value_info(to_modify, inv.outputs[0])
                    self.redirect(consumers, to_modify, inv.outputs[0])
                self.transpose_initializer(to_modify, perm)
                if look is not None:
                    quant = look[1]
                    if quant.per_axis:
                        quant.axis = perm_inv[quant.axis]
                    self.dq_set_input(look[0], quant, to_modify)
                    restore_dq = False
            finally:
                if restore_input:
                    self.set_input(node, i, value)
                if restore_dq and look is not None:
                    self.set_input(look[0], 0, dq_input)
            return
        # Case 2: a Transpose, possibly through a DQ
        inp_node, look2, consumers, comprehensive = self.producer_past_dq(value, consumers, comprehensive)
        if inp_node is not None and inp_node.op_type == "Transpose":
            perm2 = self.perm_of(inp_node)
            if perm2 is not None and len(perm2) == len(perm):
                if perm2 == perm_inv:
                    pre = inp_node.inputs[0]
                    if look2 is not None:
                        q = look2[1]
                        if q.per_axis:
                            q.axis = perm_inv[q.axis]
                        self.dq_set_input(look2[0], q, pre)
                        self.set_input(node, i, look2[0].outputs[0])
                    else:
                        self.set_input(node, i, pre)
                    if comprehensive and len(consumers) == (1 if look2 is not None else 0):
                        self.remove_node(inp_node)
                    return
                if look2 is None:
                    combined = compose_perm(perm2, perm)
                    tr = self.make_transpose(inp_node.inputs[0], combined)
                    self.copy_value_info(value, tr.outputs[0])
                    self.permute_dims(tr.outputs[0], perm)
                    if comprehensive and not consumers:
                        self.remove_node(inp_node)
                    self.set_input(node, i, tr.outputs[0])
                    return
        if look2 is not None:
            inp_node = look2[0]
            consumers, comprehensive = self.consumers(value)
        # Case 3: an existing Transpose with the same perm
        for consumer in consumers:
            if consumer.op_type == "Transpose" and self.perm_of(consumer) == perm:
                self.set_input(node, i, consumer.outputs[0])
                return
        # Case 4: a new Transpose
        tr = self.make_transpose(value, perm)
        self.copy_value_info(value, tr.outputs[0])
        self.permute_dims(tr.outputs[0], perm)
        self.set_input(node, i, tr.outputs[0])
        if inp_node is not None and inp_node.op_type == "DequantizeLinear":
            self.make_qdq_node_unit(inp_node)

    def unsqueeze_input(self, node: Node, i: int, axes: list[int]) -> None:
        """``UnsqueezeInput``."""
        value, constant, look, _, to_modify, consumers, comprehensive = self.detach_input(node, i)
        if constant is not None and comprehensive:
            if consumers:
                sq = self.make_squeeze_or_unsqueeze("Squeeze", to_modify, axes)
                self.copy_value_info(to_modify, sq.outputs[0])
                self.redirect(consumers, to_modify, sq.outputs[0])
            self.reshape_initializer(to_modify, _unsqueeze_shape([int(d) for d in constant.dims], axes))
            if look is not None:
                quant = look[1]
                if quant.per_axis:
                    quant.axis = _unsqueeze_axis(axes, quant.axis)
                self.dq_set_input(look[0], quant, to_modify)
            self.set_input(node, i, value)
            return
        inp_node, look2, consumers, comprehensive = self.producer_past_dq(value, consumers, comprehensive)
        if inp_node is not None and inp_node.op_type == "Squeeze":
            sq_axes = self.read_attr_or_input(inp_node, "axes", 1, 13)
            if sq_axes is not None and sq_axes == axes:
                pre = inp_node.inputs[0]
                if look2 is not None:
                    q = look2[1]
                    if q.per_axis:
                        q.axis = _unsqueeze_axis(axes, q.axis)
                    self.dq_set_input(look2[0], q, pre)
                    self.set_input(node, i, look2[0].outputs[0])
                else:
                    self.set_input(node, i, pre)
                if comprehensive and len(consumers) == (1 if look2 is not None else 0):
                    axes_input = inp_node.inputs[1] if len(inp_node.inputs) > 1 else ""
                    self.remove_node(inp_node)
                    if self.opset >= 13 and not self.has_consumers(axes_input):
                        self.graph.remove_initializer(axes_input)
                return
        if look2 is not None:
            inp_node = look2[0]
        unsq = self.make_squeeze_or_unsqueeze("Unsqueeze", value, axes)
        out = unsq.outputs[0]
        self.copy_value_info(value, out)
        self.unsqueeze_dims(out, axes)
        if inp_node is not None and inp_node.op_type == "Transpose":
            perm = self.perm_of(inp_node)
            if perm is not None:
                new_input = self.help_handle_unsqueeze(unsq, perm, invert_perm(perm), axes)
                self.set_input(node, i, new_input)
                return
        self.set_input(node, i, out)
        if inp_node is not None and inp_node.op_type == "DequantizeLinear":
            self.make_qdq_node_unit(inp_node)

    def transpose_output(self, node: Node, i: int, perm: list[int], perm_inv: list[int]) -> str:
        tr = self.make_transpose("", perm)
        self.move_output(node, i, tr, 0)
        new_output = node.outputs[i]
        self.set_input(tr, 0, new_output)
        old = tr.outputs[0]
        self.copy_value_info(old, new_output)
        self.permute_dims(new_output, perm_inv)
        return old

    def transpose_outputs(self, node: Node, perm: list[int]) -> None:
        if perm == list(range(len(perm))):
            return
        perm_inv = invert_perm(perm)
        for j in range(len(node.outputs)):
            self.transpose_output(node, j, perm, perm_inv)

    def transpose_inputs(self, node: Node, perm: list[int], indices: list[int]) -> None:
        perm_inv = invert_perm(perm)
        for j in indices:
            self.transpose_input(node, j, perm, perm_inv)

    def normalize_input_ranks(self, node: Node, rank: int, indices: list[int]) -> bool:
        ranks: list[int] = []
        for j in indices:
            shape = self.shape(node.inputs[j])
            if shape is None or len(shape) > rank:
                return False
            ranks.append(len(shape))
        for j, r in zip(indices, ranks, strict=True):
            if rank - r > 0:
                self.unsqueeze_input(node, j, list(range(rank - r)))
        return True

    def help_handle_unsqueeze(self, node: Node, perm: list[int], perm_inv: list[int], axes: list[int]) -> str:
        self.transpose_input(node, 0, perm_inv, invert_perm(perm_inv))
        new_perm = _unsqueeze_perm(axes, perm)
        return self.transpose_output(node, 0, new_perm, invert_perm(new_perm))

    # -------------------------------------------------------------- cost
    def transposible_inputs(self, info: _Handler, node: Node) -> list[int]:
        if info.inputs == "first":
            return [0]
        if info.inputs == "all":
            return list(range(len(node.inputs)))
        if info.inputs == "qlinear_binary":
            return [0, 3]
        if info.inputs == "qlinear_concat":
            return list(range(2, len(node.inputs), 3))
        out: list[int] = []
        for k, value in enumerate(node.inputs):
            shape = self.shape(value)
            if shape is None or len(shape) != 0:
                out.append(k)
        return out

    def estimate_rank(self, value: str) -> int:
        shape = self.shape(value)
        if shape is None:
            return 5
        return sum(1 for d in shape if d != 1)

    def can_likely_remove(self, transpose: Node) -> bool:
        consumers, comprehensive = self.consumers(transpose.outputs[0])
        return comprehensive and all(handler_for(c) is not None for c in consumers)

    def is_constant(self, value: str) -> bool:
        producer = self.producer(value)
        if producer is None:
            return self.constant(value) is not None
        if producer.op_type == "DequantizeLinear":
            return self.dq_to_look_past(value) is not None
        return False

    def value_cost(self, value: str, perm_inv: list[int]) -> int:
        if self.is_constant(value):
            return 0
        producer = self.producer(value)
        if producer is not None:
            if producer.op_type == "DequantizeLinear":
                dq_in = self.producer(producer.inputs[0])
                if dq_in is not None:
                    if dq_in.op_type == "Squeeze":
                        sq_in = self.producer(dq_in.inputs[0])
                        if sq_in is not None and sq_in.op_type == "Transpose":
                            producer = sq_in
                    else:
                        producer = dq_in
            if producer.op_type == "Transpose" and normalize_domain(producer.domain) == "":
                perm2 = self.perm_of(producer)
                if perm2 is not None:
                    if perm2 == perm_inv and self.can_likely_remove(producer):
                        return -self.estimate_rank(value)
                    return 0
        return self.estimate_rank(value)

    def push_is_beneficial(self, node: Node, perm: list[int], info: _Handler, indices: list[int]) -> bool:
        if self.provider == _CPU and node.ep == _CPU:
            if node.op_type == "MaxPool" and normalize_domain(node.domain) == "":
                return True
            if node.op_type == "Resize" and normalize_domain(node.domain) == "":
                shape = self.shape(node.inputs[0])
                mode = node.attr("mode")
                if (
                    shape is not None
                    and len(shape) == 4
                    and self.dtype(node.inputs[0]) in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
                    and mode == "linear"
                ):
                    return True
        if node.op_type == "Transpose" and normalize_domain(node.domain) == "":
            return True
        # ORT passes the Transpose's own perm where EstimateTransposeValueCost expects "perm_inv": an input
        # produced by a Transpose with that perm cancels when the node's inputs get the inverse.
        cost = sum(self.value_cost(node.inputs[j], perm) for j in indices)
        if cost < 0 and info.transposes_outputs:
            out_cost = 0
            leading = False
            for out in node.outputs:
                out_cost = max(out_cost, self.estimate_rank(out))
                if out in self.outputs_leading:
                    leading = True
            if not leading:
                cost += out_cost
        return cost < 0

    # -------------------------------------------------------------- handlers
    def process_transpose(self, transpose: Node, node: Node, perm: list[int], j: int) -> bool:
        info = handler_for(node)
        if info is None:
            return False
        indices = self.transposible_inputs(info, node)
        if j not in indices:
            return False
        if not self.push_is_beneficial(node, perm, info, indices):
            return False
        if not info.kind:
            raise _Unsupported(f"pushing a Transpose through {node.qualified_op} (handler not implemented)")
        return self.handle(info.kind, transpose, node, perm, invert_perm(perm), indices)

    def handle(
        self, kind: str, transpose: Node, node: Node, perm: list[int], perm_inv: list[int], indices: list[int]
    ) -> bool:
        rank = len(perm)
        if kind in ("simple", "broadcast"):
            if kind == "broadcast" and not self.normalize_input_ranks(node, rank, indices):
                return False
            self.transpose_inputs(node, perm_inv, indices)
            self.transpose_outputs(node, perm)
            return True
        if kind in ("concat", "split", "softmax"):
            default: int | None = {"concat": None, "split": 0, "softmax": -1}[kind]
            if kind == "softmax" and self.opset < 13:
                axis = _normalize_axis(self.int_attr(node, "axis", 1), rank)
                if axis is None:
                    return False
                if any((i < axis) != (perm[i] < axis) for i in range(rank)):
                    return False
                self.transpose_inputs(node, perm_inv, indices)
                self.transpose_outputs(node, perm)
                return True
            attr = node.attributes.get("axis")
            raw = int(attr.i) if attr is not None and attr.type == onnx.AttributeProto.INT else default
            if raw is None:
                return False
            axis = _normalize_axis(raw, rank)
            if axis is None:
                return False
            self.transpose_inputs(node, perm_inv, indices)
            self.transpose_outputs(node, perm)
            self.set_attr(node, "axis", perm[axis])
            return True
        if kind == "qdq":
            if self.opset >= 13:
                scale_shape = self.shape(node.inputs[1])
                if not (scale_shape is not None and len(scale_shape) == 0):
                    axis = _normalize_axis(self.int_attr(node, "axis", 1), rank)
                    if axis is None:
                        return False
                    self.set_attr(node, "axis", perm[axis])
            self.transpose_input(node, 0, perm_inv, perm)
            self.transpose_outputs(node, perm)
            return True
        if kind == "squeeze":
            axes = self.read_attr_or_input(node, "axes", 1, 13)
            norm = None if axes is None else _normalize_axes(axes, rank)
            if norm is None:
                return False
            new_axes = _sorted_axes_for_transposed_input(norm, perm)
            if self.opset < 13:
                self.set_attr(node, "axes", new_axes)
            else:
                old = node.inputs[1]
                self.set_input(node, 1, self.add_int64(new_axes))
                if not self.has_consumers(old):
                    self.graph.remove_initializer(old)
            self.transpose_input(node, 0, perm_inv, perm)
            self.transpose_outputs(node, _squeeze_perm(new_axes, perm))
            return True
        if kind == "unsqueeze":
            axes = self.read_attr_or_input(node, "axes", 1, 13)
            norm = None if axes is None else _normalize_axes(axes, rank + len(axes))
            if axes is None or norm is None:
                return False
            self.help_handle_unsqueeze(node, perm, perm_inv, norm)
            return True
        if kind == "reduce":
            return self.handle_reduce(node, perm, perm_inv)
        if kind == "gather":
            # HandleGather: scalar constant indices only (a Squeeze along perm[axis])
            axis = _normalize_axis(self.int_attr(node, "axis", 0), rank)
            if axis is None or len(node.inputs) < 2:
                return False
            index = self.constant(node.inputs[1])
            if index is None or len(index.dims) != 0:
                return False
            self.set_attr(node, "axis", perm[axis])
            self.transpose_input(node, 0, perm_inv, perm)
            self.transpose_outputs(node, _squeeze_perm([perm[axis]], perm))
            return True
        if kind == "tile":
            return self.handle_tile(node, perm, perm_inv)
        if kind == "argminmax":
            axis = _normalize_axis(self.int_attr(node, "axis", 0), rank)
            if axis is None:
                return False
            self.set_attr(node, "axis", perm[axis])
            self.transpose_inputs(node, perm_inv, indices)
            keep = self.int_attr(node, "keepdims", 1) != 0
            self.transpose_outputs(node, perm if keep else _squeeze_perm([perm[axis]], perm))
            return True
        if kind == "shape":
            self.handle_shape(node, perm, perm_inv, indices)
            return True
        if kind == "reshape":
            return self.handle_reshape(transpose, node, perm, perm_inv)
        if kind == "transpose":
            node_perm = self.perm_of(node)
            if node_perm is None or len(node_perm) != rank:
                return False
            self.handle_transpose(transpose, node, perm, perm_inv, node_perm)
            return True
        raise AssertionError(kind)

    def handle_reduce(self, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
        """``HandleReduceOps`` (axes attribute before ReduceSum-13 / Reduce*-18, else a constant axes input)."""
        keepdims = self.int_attr(node, "keepdims", 1) != 0
        if (node.op_type == "ReduceSum" and self.opset < 13) or (node.op_type != "ReduceSum" and self.opset < 18):
            attr = node.attributes.get("axes")
            if attr is None or attr.type != onnx.AttributeProto.INTS:
                out_perm = perm if keepdims else []
            else:
                axes = _normalize_axes([int(a) for a in attr.ints], len(perm))
                if axes is None:
                    return False
                new_axes = _sorted_axes_for_transposed_input(axes, perm)
                self.set_attr(node, "axes", new_axes)
                out_perm = perm if keepdims else _squeeze_perm(new_axes, perm)
            self.transpose_input(node, 0, perm_inv, perm)
            self.transpose_outputs(node, out_perm)
            return True
        axes_input = node.inputs[1] if len(node.inputs) > 1 else ""
        array = self.constant_array(axes_input) if axes_input else None
        if not axes_input or (array is not None and array.size == 0):
            self.transpose_input(node, 0, perm_inv, perm)
            if self.int_attr(node, "noop_with_empty_axes", 0) != 0 or keepdims:
                self.transpose_outputs(node, perm)
            return True
        if array is None:
            return False
        axes = _normalize_axes([int(a) for a in array.reshape(-1).astype(np.int64)], len(perm))
        if axes is None:
            return False
        new_axes = _sorted_axes_for_transposed_input(axes, perm)
        self.set_input(node, 1, self.add_int64(new_axes))
        if not self.has_consumers(axes_input):
            self.graph.remove_initializer(axes_input)
        self.transpose_input(node, 0, perm_inv, perm)
        self.transpose_outputs(node, perm if keepdims else _squeeze_perm(new_axes, perm))
        return True

    def handle_tile(self, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
        """``HandleTile``: constant repeats are permuted into a new initializer, else a Gather(perm_inv) is added."""
        if len(node.inputs) < 2:
            return False
        repeats_input = node.inputs[1]
        repeats = self.constant_array(repeats_input)
        if repeats is not None:
            values = [int(v) for v in repeats.reshape(-1)]
            if len(values) != len(perm):
                return False
            self.set_input(node, 1, self.add_int64([values[p] for p in perm_inv]))
            if not self.has_consumers(repeats_input):
                self.graph.remove_initializer(repeats_input)
        else:
            perm_inv_const = self.add_int64(perm_inv)
            gather = self.add_node("Gather", [repeats_input, perm_inv_const])
            self.copy_value_info(repeats_input, gather.outputs[0])  # no axis attribute (unlike HandleShape's)
            self.set_input(node, 1, gather.outputs[0])
        self.transpose_input(node, 0, perm_inv, perm)
        self.transpose_outputs(node, perm)
        return True

    def handle_shape(self, node: Node, perm: list[int], perm_inv: list[int], indices: list[int]) -> None:
        """``HandleShape``: Shape(Transpose(x, perm)) becomes Gather(Shape(x), perm[start:end])."""
        self.transpose_inputs(node, perm_inv, indices)
        rank = len(perm)
        if self.opset >= 15:
            start = self.int_attr(node, "start", 0)
            end = self.int_attr(node, "end", rank)
            start = start + rank if start < 0 else start
            end = end + rank if end < 0 else end
            new_perm = perm[min(max(start, 0), rank) : min(max(end, 0), rank)]
            self.graph.remove_attribute(node, "start")
            self.graph.remove_attribute(node, "end")
        else:
            new_perm = list(perm)
        perm_const = self.add_int64(new_perm)
        gather = self.add_node("Gather", ["", perm_const])
        self.set_attr(gather, "axis", 0)
        self.move_output(node, 0, gather, 0)
        new_output = node.outputs[0]
        self.set_input(gather, 0, new_output)
        self.copy_value_info(gather.outputs[0], new_output)
        if len(new_perm) != rank:
            self.set_shape(new_output, [rank])

    def handle_reshape(self, transpose: Node, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
        """``EPAwareHandleReshape`` (CPU: ``HandleReshape`` = ``HandleReshapeAsTranspose``, then the split case)."""
        shape_input = node.inputs[1] if len(node.inputs) > 1 else ""
        requested = self.constant_array(shape_input)
        if requested is None or not requested.size:
            return False  # both ORT handlers need a constant, non-empty shape
        perms = self.reshape_as_transpose_perm(transpose, node, [int(v) for v in requested.reshape(-1)])
        if perms is not None:
            self.handle_transpose(transpose, node, perm, perm_inv, perms)
            return True
        return self.handle_reshape_split(transpose, node, perm, perm_inv)

    def reshape_as_transpose_perm(self, transpose: Node, node: Node, requested: list[int]) -> list[int] | None:
        """``HandleReshapeAsTranspose`` up to its call of ``HandleTransposeImpl``: the equivalent perm, if any."""
        in_shape = self.shape(transpose.inputs[0])
        out_shape = self.shape(transpose.outputs[0])
        if in_shape is None or out_shape is None or len(in_shape) != len(requested):
            return None
        allow_zero = self.int_attr(node, "allowzero", 0) if self.opset >= 14 else 0
        final = _finalize_reshape_shape(out_shape, requested, allow_zero != 0)
        if final is None:
            return None
        dims = list(out_shape)
        perms: list[int] = []
        for target in final:
            cur = 0
            while dims[cur] != target:
                if dims[cur] != -1 and dims[cur] != 1 and target != 1:
                    return None
                cur += 1
                if cur == len(dims):
                    return None
            perms.append(cur)
            dims[cur] = -1
        return perms

    def handle_reshape_split(self, transpose: Node, node: Node, perm: list[int], perm_inv: list[int]) -> bool:
        """``HandleReshapeSplit``: the Reshape splits post-transpose axes into contiguous groups of output axes."""
        in_shape = self.shape(transpose.inputs[0])
        rank = len(perm)
        if in_shape is None or any(d < 0 for d in in_shape) or len(in_shape) != rank:
            return False
        transposed = [in_shape[p] for p in perm]
        requested = self.shape(node.outputs[0])
        if requested is None or any(d <= 0 for d in requested) or len(requested) <= rank:
            return False
        groups: list[tuple[int, int]] = []
        cursor = 0
        for target in transposed:
            start = cursor
            prod = 1
            while True:
                if cursor >= len(requested):
                    return False
                dim = requested[cursor]
                if target > 0 and prod > target // dim:
                    return False
                prod *= dim
                cursor += 1
                if prod >= target:
                    break
            if prod != target:
                return False
            groups.append((start, cursor))
        if cursor != len(requested):
            return False
        raise _Unsupported("pushing a Transpose through Reshape (HandleReshapeSplit not implemented)")

    def handle_transpose(
        self, transpose: Node, node: Node, perm: list[int], perm_inv: list[int], node_perm: list[int]
    ) -> None:
        if perm_inv == node_perm:
            first_input = transpose.inputs[0]
            out = node.outputs[0]
            consumers, comprehensive = self.consumers(out)
            if comprehensive:
                self.redirect(consumers, out, first_input)
            else:
                in_consumers, in_comprehensive = self.consumers(first_input)
                parent = self.producer(first_input)
                if parent is not None and in_comprehensive:
                    self.set_input(node, 0, "")
                    self.redirect(in_consumers, first_input, out)
                    slot = parent.outputs.index(first_input)
                    self.move_output(node, 0, parent, slot)
                else:
                    identity = self.add_node("Identity", [""])
                    self.move_output(node, 0, identity, 0)
                    self.set_input(identity, 0, first_input)
            self.remove_node(node)
            if not self.has_consumers(transpose.outputs[0]):
                self.remove_node(transpose)
            return
        new_perm = compose_perm(perm, node_perm)
        if node.op_type == "Reshape":
            # ORT replaces the Reshape with a Transpose reading the 1st Transpose's input
            target = self.add_node("Transpose", [transpose.inputs[0]])
            self.move_output(node, 0, target, 0)
            self.remove_node(node)
        else:
            target = node
            self.set_input(node, 0, transpose.inputs[0])
        self.set_attr(target, "perm", new_perm)
        if not self.has_consumers(transpose.outputs[0]):
            self.remove_node(transpose)

    # -------------------------------------------------------------- driver
    def can_modify(self, node: Node) -> bool:
        return not node.ep or node.ep == self.provider

    def optimize(self) -> bool:
        graph = self.graph
        nodes = graph.topological_order()
        for node in reversed(nodes):
            if node.op_type == "Transpose" and normalize_domain(node.domain) == "":
                self.outputs_leading.add(node.inputs[0])
                continue
            for out in node.outputs:
                if out in self.outputs_leading:
                    info = handler_for(node)
                    if info is not None and info.transposes_outputs:
                        for j in self.transposible_inputs(info, node):
                            self.outputs_leading.add(node.inputs[j])
        changed = False
        have_dq = False
        for node in nodes:
            if node.op_type == "DequantizeLinear":
                have_dq = True
            if graph.node(node.index) is None:
                # ORT never deletes a node before reaching it; a removed node keeps its inputs
                continue
            if not self.can_modify(node):
                continue
            for j, value in enumerate(list(node.inputs)):
                if not value:
                    continue
                transpose = self.producer(value)
                if (
                    transpose is not None
                    and transpose.op_type == "Transpose"
                    and normalize_domain(transpose.domain) == ""
                ):
                    perm = self.perm_of(transpose)
                    if perm is not None and self.process_transpose(transpose, node, perm, j):
                        changed = True
                        break
        if not have_dq:
            return changed
        for node in graph.topological_order():
            if graph.node(node.index) is None or not self.can_modify(node):
                continue
            if self.try_constant_fold(node):
                changed = True
        if self.fix_qdq_node_units():
            changed = True
        return changed

    def try_constant_fold(self, node: Node) -> bool:
        if node.op_type not in ("Transpose", "Squeeze"):
            return False
        value = node.inputs[0]
        tensor = self.constant(value, local=True)
        if tensor is None:
            return False
        out = node.outputs[0]
        consumers, _ = self.consumers(out)
        if not consumers:
            return False
        array = self.graph.array(value)
        if node.op_type == "Transpose":
            perm = self.perm_of(node)
            if perm is None:
                return False
            name = self.add_initializer(tensor.data_type, [int(d) for d in tensor.dims], array.tobytes())
            self.transpose_initializer(name, perm)
        else:
            axes = self.read_attr_or_input(node, "axes", 1, 13)
            if axes is None:
                return False
            name = self.add_initializer(tensor.data_type, [int(d) for d in tensor.dims], array.tobytes())
            self.reshape_initializer(name, _squeeze_shape([int(d) for d in tensor.dims], axes))
        self.redirect(consumers, out, name)
        if not self.has_consumers(out):
            self.remove_node(node)
        if not self.has_consumers(value):
            self.graph.remove_initializer(value)
        return True

    # -------------------------------------------------------------- QDQ fix-ups
    def fix_qdq_node_units(self) -> bool:
        changed = False
        for node in self.graph.topological_order():
            if self.graph.node(node.index) is None or not self.can_modify(node):
                continue
            if (node.op_type == "QuantizeLinear" and self.try_remove_empty_dq_q(node)) or (
                node.op_type == "Transpose" and (self.try_fix_missing_q(node) or self.try_fix_missing_dq(node))
            ):
                changed = True
        return changed

    def _bytes(self, name: str) -> bytes | None:
        array = self.constant_array(name)
        return None if array is None else array.tobytes()

    def qdq_pair_match(self, dq: Node, q: Node) -> bool:
        if dq.domain != q.domain:
            return False
        t1, t2 = self.dtype(dq.inputs[0]), self.dtype(q.outputs[0])
        if t1 is None or t2 is None or t1 != t2:
            return False
        if dq.inputs[1] != q.inputs[1]:
            a, b = self._bytes(dq.inputs[1]), self._bytes(q.inputs[1])
            if a is None or b is None or a != b:
                return False
        dq_zp = dq.inputs[2] if len(dq.inputs) > 2 else ""
        q_zp = q.inputs[2] if len(q.inputs) > 2 else ""
        if dq_zp != q_zp:
            a = self._bytes(dq_zp) if dq_zp else None
            b = self._bytes(q_zp) if q_zp else None
            if (dq_zp and a is None) or (q_zp and b is None):
                return False
            if a is not None and b is not None:
                return a == b
            only = a if a is not None else b
            return only is not None and not any(only)
        return True

    def try_remove_empty_dq_q(self, q: Node) -> bool:
        dq = self.producer(q.inputs[0])
        if dq is None or dq.op_type != "DequantizeLinear":
            return False
        if self.single_consumer(dq.outputs[0]) is None:
            return False
        if not self.qdq_pair_match(dq, q):
            return False
        q_out = q.outputs[0]
        q_consumers, comprehensive = self.consumers(q_out)
        if comprehensive and len(q_consumers) == 1:
            consumer = q_consumers[0]
            for k, inp in enumerate(list(consumer.inputs)):
                if inp == q_out:
                    self.set_input(consumer, k, dq.inputs[0])
            self.set_input(dq, 0, "")
            self.set_input(q, 0, "")
            self.remove_node(dq)
            self.remove_node(q)
            return True
        if not q_consumers and self.graph.is_graph_output(q_out):
            dq_input = dq.inputs[0]
            parent = self.producer(dq_input)
            if parent is None:
                return False
            slot = parent.outputs.index(dq_input)
            if self.single_consumer(parent.outputs[slot]) is None:
                return False
            self.set_input(dq, 0, "")
            self.move_output(q, 0, parent, slot)
            self.set_input(q, 0, "")
            self.remove_node(dq)
            self.remove_node(q)
            return True
        return False

    def try_fix_missing_q(self, transpose: Node) -> bool:
        dq = self.producer(transpose.inputs[0])
        if dq is None or dq.op_type != "DequantizeLinear":
            return False
        consumers, _ = self.consumers(transpose.outputs[0])
        if consumers and (len(consumers) > 1 or consumers[0].op_type == "QuantizeLinear"):
            return False
        return self.make_qdq_node_unit(dq)

    def try_fix_missing_dq(self, transpose: Node) -> bool:
        t_in, t_out = transpose.inputs[0], transpose.outputs[0]
        q = self.single_consumer(t_out)
        if q is None or q.op_type != "QuantizeLinear":
            return False
        prev = self.producer(t_in)
        if prev is None or prev.op_type == "DequantizeLinear":
            return False
        if len(self.consumers(t_in)[0]) != 1:
            return False
        quant = self.quant_info(q)
        if quant is None:
            return False
        axis = quant.axis
        if quant.per_axis:
            perm = self.perm_of(transpose)
            assert perm is not None
            axis = perm[axis]  # not inverted
        in_shape = self.shape(t_in)
        inputs = ["", q.inputs[1]] + ([q.inputs[2]] if len(q.inputs) > 2 else [])
        new_q = self.make_q(
            q.domain,
            inputs,
            axis,
            self.opt_int(q, "block_size"),
            self.opt_int(q, "output_dtype"),
            self.opt_int(q, "saturate"),
        )
        self.copy_value_info(q.outputs[0], new_q.outputs[0])
        self.set_shape(new_q.outputs[0], in_shape)
        inputs[0] = new_q.outputs[0]
        new_dq = self.make_dq(q.domain, inputs, axis, self.opt_int(q, "block_size"))
        self.copy_value_info(t_in, new_dq.outputs[0])
        slot = prev.outputs.index(t_in)
        self.move_output(prev, slot, new_dq, 0)
        self.set_input(new_q, 0, prev.outputs[slot])
        self.copy_value_info(new_dq.outputs[0], prev.outputs[slot])
        return True


# ---------------------------------------------------------------------------------------------------- passes
class _TransposeOptimizerBase(GraphTransformer):
    provider = ""

    def _opset(self, graph: Graph) -> int | None:
        return graph.opset("")

    def _run(self, graph: Graph) -> bool:
        opset = self._opset(graph)
        if opset is None or not _MIN_OPSET <= opset <= _MAX_OPSET:
            return False
        run = _Run(graph, opset, self.provider, self.provider)
        changed = run.optimize()
        for name, (elem, shape) in run.types.items():
            if not graph.has_value(name) or graph.is_initializer(name):
                continue
            dims: list[int | str | None] | None = None if shape is None else [d if d >= 0 else None for d in shape]
            graph.set_value_type(name, onnx.helper.make_tensor_type_proto(elem or 0, dims))
        return changed

    def unsupported(self, graph: Graph, ctx: PassContext) -> str | None:
        """Why qdqopt cannot reproduce this pass exactly on ``graph`` (None: it can)."""
        if any(True for _ in graph.subgraphs()):
            return "the model has subgraphs (the transpose optimizer recursing into them is not implemented)"
        opset = self._opset(graph)
        if opset is None or not _MIN_OPSET <= opset <= _MAX_OPSET:
            return None
        declared = [v.name for v in (*graph.value_info, *graph.outputs) if graph.has_value(v.name)]
        before = _Run(graph, opset, self.provider, self.provider)
        shapes = {name: before.shape(name) for name in declared}
        trial = graph.clone()
        run = _Run(trial, opset, self.provider, self.provider)
        try:
            run.optimize()
        except _Unsupported as exc:
            return str(exc)
        for name in run.types:
            if name in run.symbolic and trial.has_value(name):
                # ORT copies and permutes NodeArg shapes dim by dim, symbolic names included; qdqopt keeps ints
                return f"it would copy a shape with symbolic dims to {name!r} (not reproduced)"
        for name in declared:
            if name in run.types and trial.has_value(name) and run.types[name][1] != shapes[name]:
                # ORT sets the NodeArg's shape; qdqopt's saver keeps the type a value had at load
                return f"it would change the shape of the declared value {name!r} (the core cannot save that)"
        return None

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self._run(graph)  # apply() has checked unsupported() first


class TransposeOptimizer(_TransposeOptimizerBase):
    """Level1: no EP assigned yet, the default cost check."""

    name = "TransposeOptimizer"
    provider = ""


class TransposeOptimizerCPU(_TransposeOptimizerBase):
    """Level2: CPU-EP nodes, ORT's EP cost check first, new nodes on the CPU EP."""

    name = "TransposeOptimizer_CPUExecutionProvider"
    provider = _CPU
