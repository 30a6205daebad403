"""ConstantFolding: compute nodes whose inputs are all constant and replace them by initializers (spec §4.4).

::

    before                                          after
    w(init) ── Transpose ── Q(s, z) ── DQ ── Mul    wq(init, named after the Q output) ── DQ ── Mul
    c1(init) ─┐                                     y(init, named after the Add output)
    c2(init) ─┴─ Add ── y
    x[2,3] ── Relu ── Shape ── s                    s(init int64 [2] = [2, 3]); the Relu, used only by
                                                    the Shape, is removed bottom-up
    If(cond=true init) {then: ...}                  the then-branch's nodes, inlined (names _if_then_branch_*)

Nodes are visited in ORT's topological order; each node's subgraphs are folded first. Once a node of the graph has
been folded (or an If inlined), every node visited after it, subgraph holders aside, is re-inferred before it is
looked at (``Graph::UpdateShapeInference``, :func:`update_shape_inference`): a Resize whose ``sizes`` a fold just
made constant gets its output shape, and a ``Shape`` of that output, further down, folds in the same pass. A node is
handled by kind:

* ``If`` whose condition is a constant initializer (outer scope allowed): the taken branch is inlined
  (``Graph::InlineIfSubgraph``): ``uid = GenerateNodeName("_if_then_branch"|"_if_else_branch")``; the branch's
  outputs take the If's output names; its initializers move over, renamed ``GenerateNodeArgName(uid_<name>)``;
  its nodes are re-created in the branch's topological order, each output renamed ``GenerateNodeArgName(uid_<out>)``
  and the node named ``GenerateNodeName(uid_<op_type>)``, attributes and doc string kept; the If is removed.
* ``Shape`` whose input shape is fully known: an int64 initializer of the (``start``/``end``-sliced) dims, whatever
  the input is; then ``RemoveNodesWithOneOutputBottomUp`` from the input's producer.
* anything else folds when: the op is deterministic (ONNX domain: not Random*, Multinomial, Dropout; com.microsoft:
  only QuantizeLinear/DequantizeLinear; any other domain: never), it has no subgraph, it has no input edge and every
  input is a constant initializer (one no graph input overrides; outer scope allowed), its output size can be
  estimated from ORT's inferred shapes and is within ``optimization.constant_folding_max_output_size_in_bytes``
  (default 1 GiB; 0 switches the estimate off), a CPU kernel exists for its types, the kernel runs, and every
  output is a tensor. Graph outputs do **not** block folding: the initializer then is the graph output.
* ``DequantizeLinear`` (any domain) additionally, unless ``session.disable_quant_qdq=1`` without
  ``session.disable_qdq_constant_folding=1``, only as the head of a whole foldable unit: its one output edge goes
  to a node X with exactly one input and one output (neither a graph output) whose one output edge goes to a
  ``QuantizeLinear``, and X and the Q pass the deterministic/no-subgraph checks. X and the Q then fold later in
  the same pass, as their inputs have become initializers. So ``DQ(w) -> Conv`` never folds, and neither does a
  unit whose DQ or X output is also a graph output.

Each output of a folded node becomes an initializer with the output's name (raw data, the kernel's type and
shape), appended to the initializer list; the node is removed (its input producers too, bottom-up, where they fed
only it: that matters for Shape).

The values are not recomputed in numpy: :mod:`qdqopt.evaluate` runs the node, with its constant inputs, through the
very CPU kernel of the installed onnxruntime (a one-node session at ORT_DISABLE_ALL, one thread, as ConstantFolding's
execution frame has none), which is what ConstantFolding itself does; so ``Round`` ties, IEEE single ``Div``,
MLAS ``QuantizeLinear``, NaN/inf/out-of-range ``Cast`` (INT32_MIN on x86) come out bit-identical. An output numpy has no
type for (an int4/uint4 ``QuantizeLinear``, packed two to a byte; float8, bfloat16) is stored as the kernel's buffer,
byte for byte, as ORT's ``TensorToTensorProto`` stores it; so int4 Qs and int4 DQ -> X -> Q units fold as in ORT.
The same session yields ORT's inferred output shapes for the size estimate and tells whether a CPU kernel exists for
the types.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.config import SessionConfig
from qdqopt.evaluate import NodeEvaluation, evaluate_node
from qdqopt.graph import Graph, Node, View
from qdqopt.graph.core import merge_declared, tensor_array
from qdqopt.graph.inference import update_shape_inference
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import add_node_like, check_output_edges, produces_graph_output

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "ConstantFolding", "is_deterministic", "update_shape_inference"]

DEFAULT_MAX_OUTPUT_BYTES = 1 << 30
_INT64_MAX = 2**63 - 1
_ONNX_NON_DETERMINISTIC = frozenset(
    {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Dropout"}
)
_MS_DETERMINISTIC = frozenset({"QuantizeLinear", "DequantizeLinear"})

_T = onnx.TensorProto
#: element sizes ORT's size estimate uses (std::string is 32 bytes in libstdc++); complex types are unknown
_ELEMENT_SIZE: dict[int, int] = {
    _T.FLOAT: 4,
    _T.UINT8: 1,
    _T.INT8: 1,
    _T.UINT16: 2,
    _T.INT16: 2,
    _T.INT32: 4,
    _T.INT64: 8,
    _T.STRING: 32,
    _T.BOOL: 1,
    _T.FLOAT16: 2,
    _T.DOUBLE: 8,
    _T.UINT32: 4,
    _T.UINT64: 8,
    _T.BFLOAT16: 2,
    _T.FLOAT8E4M3FN: 1,
    _T.FLOAT8E4M3FNUZ: 1,
    _T.FLOAT8E5M2: 1,
    _T.FLOAT8E5M2FNUZ: 1,
}
#: sub-byte types: elements per byte
_PACKED: dict[int, int] = {_T.INT4: 2, _T.UINT4: 2, _T.FLOAT4E2M1: 2}
for _name, _per_byte in (("FLOAT8E8M0", 0), ("INT2", 4), ("UINT2", 4)):
    if hasattr(_T, _name):
        if _per_byte:
            _PACKED[int(getattr(_T, _name))] = _per_byte
        else:
            _ELEMENT_SIZE[int(getattr(_T, _name))] = 1


def is_deterministic(domain: str, op_type: str) -> bool:
    """``optimizer_utils::IsOperationDeterministic``."""
    domain = normalize_domain(domain)
    if domain == "":
        return op_type not in _ONNX_NON_DETERMINISTIC
    if domain == "com.microsoft":
        return op_type in _MS_DETERMINISTIC
    return False


def max_output_size(config: SessionConfig) -> int:
    """``optimization.constant_folding_max_output_size_in_bytes``, parsed as ORT does (bad or negative: default)."""
    raw = config.get("optimization.constant_folding_max_output_size_in_bytes", str(DEFAULT_MAX_OUTPUT_BYTES))
    text = raw if raw is not None else ""
    if not re.fullmatch(r"\s*[+-]?\d+", text):
        return DEFAULT_MAX_OUTPUT_BYTES
    value = int(text)
    if value < 0 or value > _INT64_MAX:
        return DEFAULT_MAX_OUTPUT_BYTES
    return value


class ConstantFolding(GraphTransformer):
    """Fold constant nodes, constant-condition Ifs and statically known Shapes."""

    name = "ConstantFolding"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        skip_dq = not ctx.config.flag("session.disable_quant_qdq") or ctx.config.flag(
            "session.disable_qdq_constant_folding"
        )
        limit = max_output_size(ctx.config)
        modified = False
        # ``have_updated_nodes``: once this graph has a folded node, every node visited after it is re-inferred
        # first (``Graph::UpdateShapeInference``), so a Shape further down sees the shapes the folds made known
        have_updated_nodes = False
        for node in graph.topological_order():
            if graph.node(node.index) is None:
                continue
            if self.recurse(node, ctx, graph_level):
                modified = True
            if have_updated_nodes and not node.subgraphs:
                update_shape_inference(graph, node)
            converted = False
            if node.op_type == "If":
                if _fold_if(graph, node):
                    modified = True
                    have_updated_nodes = True
                continue
            if node.op_type == "Shape":
                converted = _fold_shape(graph, node)
            else:
                if not _can_fold(graph, node):
                    continue
                if skip_dq and node.op_type == "DequantizeLinear" and not _qdq_unit_foldable(graph, node):
                    continue
                converted = _fold(graph, node, limit)
            if converted:
                for producer in graph.input_nodes(node):
                    if graph.node(producer.index) is not None:
                        remove_nodes_with_one_output_bottom_up(graph, producer)
                graph.remove_node(node)
                modified = True
                have_updated_nodes = True
        return modified


# ------------------------------------------------------------------------------------------------ conditions
def constant_initializer(graph: Graph, name: str) -> onnx.TensorProto | None:
    """``Graph::GetConstantInitializer(name, check_outer_scope=true)``."""
    return graph.constant_initializer(name)


def _all_inputs_constant(graph: Graph, node: Node) -> bool:
    """``graph_utils::AllNodeInputsAreConstant``: no input edge, every present input a constant initializer."""
    if graph.input_edge_count(node):
        return False
    return all(not name or constant_initializer(graph, name) is not None for name in node.inputs)


def _can_fold(graph: Graph, node: Node, *, skip_inputs_constant_check: bool = False) -> bool:
    return (
        is_deterministic(node.domain, node.op_type)
        and not node.subgraphs
        and (skip_inputs_constant_check or _all_inputs_constant(graph, node))
    )


def _qdq_unit_foldable(graph: Graph, dq: Node) -> bool:
    """The DQ -> X -> Q unit condition under which a DequantizeLinear may fold."""
    if not check_output_edges(graph, dq, 1):
        return False
    x = graph.node(graph.output_edges(dq)[0].dst)
    if x is None or len(x.inputs) != 1 or len(x.outputs) != 1 or not check_output_edges(graph, x, 1):
        return False
    q = graph.node(graph.output_edges(x)[0].dst)
    if q is None or q.op_type != "QuantizeLinear":
        return False
    return _can_fold(graph, x, skip_inputs_constant_check=True) and _can_fold(graph, q, skip_inputs_constant_check=True)


# ------------------------------------------------------------------------------------------------ general fold
def _fold(graph: Graph, node: Node, limit: int) -> bool:
    inputs = [constant_initializer(graph, name) if name else None for name in node.inputs]
    present = [bool(name) for name in node.outputs]
    if not any(present):
        return False
    attributes = [node.attributes[name] for name in sorted(node.attributes)]
    opsets = {d: v for d, v in graph.opsets.items() if d in ("", normalize_domain(node.domain))}
    result = evaluate_node(node.op_type, node.domain, attributes, inputs, present, opsets)
    if limit > 0:
        estimate = _estimate_output_bytes(graph, node, result, inputs)
        if estimate is None or estimate < 0 or estimate > limit:
            return False
    if not result.ok:
        return False
    raw = result.raw or (None,) * len(result.values)
    if limit > 0 and sum(_actual_bytes(v, r) for v, r in zip(result.values, raw, strict=True)) > limit:
        return False
    if not all(t.startswith("tensor(") for t in result.types):
        return False
    names = [name for name in node.outputs if name]
    for name, value, data, type_str in zip(names, result.values, raw, result.types, strict=True):
        graph.add_initializer(_to_tensor(name, value, data, _elem_of(type_str)))
    return True


def _to_tensor(name: str, value: np.ndarray, raw: bytes | None = None, elem_type: int = 0) -> onnx.TensorProto:
    """``utils::TensorToTensorProto``: dims, the tensor's type and raw data (strings as string_data). A type numpy
    has none for (int4 packed two to a byte, float8, bfloat16...) keeps the kernel's buffer, byte for byte."""
    if raw is not None:
        return onnx.TensorProto(name=name, dims=list(value.shape), data_type=elem_type, raw_data=raw)
    return numpy_helper.from_array(value if value.flags.c_contiguous else value.copy(), name)


def _actual_bytes(value: np.ndarray, raw: bytes | None = None) -> int:
    """``Tensor::SizeInBytes``."""
    if raw is not None:
        return len(raw)
    if value.dtype == object:
        return 32 * int(value.size)
    return int(value.nbytes)


# ------------------------------------------------------------------------------------------------ size estimate
def _storage_bytes(elem_type: int, count: int) -> int:
    """``ComputeTensorSizeInBytesForConstantFolding``: -1 for an unknown element type."""
    if elem_type in _PACKED:
        per = _PACKED[elem_type]
        return (count + per - 1) // per
    size = _ELEMENT_SIZE.get(elem_type, 0)
    return count * size if size else -1


def _count(shape: Sequence[int | None] | None) -> int:
    if shape is None or any(d is None or d < 0 for d in shape):
        return -1
    total = 1
    for d in shape:
        assert d is not None
        total *= d
    return total


def _elem_of(type_str: str) -> int:
    if type_str.startswith("tensor(") and type_str.endswith(")"):
        try:
            return int(_T.DataType.Value(type_str[len("tensor(") : -1].upper()))
        except ValueError:
            return 0
    return 0


def _estimate_output_bytes(
    graph: Graph, node: Node, result: NodeEvaluation, inputs: list[onnx.TensorProto | None]
) -> int | None:
    """``EstimateNodeOutputSizeInBytes``: -1 when unknown, None when the arithmetic would overflow int64."""
    domain = normalize_domain(node.domain)
    first = inputs[0] if inputs else None
    if domain == "" and node.op_type == "Identity":
        if first is None:
            return -1
        return _checked(_storage_bytes(first.data_type, _count(tuple(first.dims))))
    if domain == "" and node.op_type == "Unique":
        if first is None:
            return -1
        count = _count(tuple(first.dims))
        out0 = _storage_bytes(first.data_type, count)
        if count < 0 or out0 < 0:
            return -1
        sizes = [out0 if i == 0 else 8 * count for i, name in enumerate(node.outputs) if name]
        return _checked(sum(sizes))
    if domain == "" and node.op_type == "ConstantOfShape" and first is not None:
        size = _constant_of_shape_bytes(node, first)
        if size is not None and size >= 0:
            return _checked(size)
    total = 0
    present = [name for name in node.outputs if name]
    if len(result.types) != len(present):
        return -1
    for name, type_str, shape in zip(present, result.types, result.shapes, strict=True):
        elem = _elem_of(type_str)
        if not elem:
            return -1
        merged = merge_declared(graph, name, shape)
        count = _count(merged)
        if count < 0:
            return -1
        size = _storage_bytes(elem, count)
        if size < 0:
            return -1
        total += size
    return _checked(total)


def _checked(value: int) -> int | None:
    return None if value > _INT64_MAX else value


def _constant_of_shape_bytes(node: Node, shape_tensor: onnx.TensorProto) -> int | None:
    if shape_tensor.data_type != _T.INT64:
        return None
    dims = tensor_array(shape_tensor).reshape(-1)
    total = 1
    for d in dims.tolist():
        if d < 0:
            return None
        total *= int(d)
    elem: int = _T.FLOAT
    value = node.attributes.get("value")
    if value is not None and value.type == onnx.AttributeProto.TENSOR:
        candidate = value.t.data_type
        if candidate in _ELEMENT_SIZE or candidate in _PACKED:
            elem = candidate
    return _storage_bytes(elem, total)


# ------------------------------------------------------------------------------------------------ Shape


def _fold_shape(graph: Graph, node: Node) -> bool:
    """``ConstantFoldShapeNode``: the input's NodeArg shape, as complete as ORT's (``View.FILLED``)."""
    if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
        return False
    dims = graph.shape(node.inputs[0], view=View.FILLED)
    if dims is None or any(d is None for d in dims):
        return False
    rank = len(dims)
    start = node.attr_int("start", 0)
    end = node.attr_int("end", _INT64_MAX)
    start = start + rank if start < 0 else start
    start = 0 if start < 0 else min(start, rank)
    end = end + rank if end < 0 else end
    end = 0 if end < 0 else min(end, rank)
    length = max(end - start, 0)
    values = np.array(list(dims[start : start + length]), dtype=np.int64)
    tensor = onnx.TensorProto(name=node.outputs[0], data_type=_T.INT64, dims=[length])
    tensor.raw_data = values.tobytes()
    graph.add_initializer(tensor)
    return True


def remove_nodes_with_one_output_bottom_up(graph: Graph, start: Node) -> bool:
    """``graph_utils::RemoveNodesWithOneOutputBottomUp``: remove ``start`` and the producers that then feed nothing."""
    queue = [start.index]
    removed: set[int] = set()
    while queue:
        index = queue.pop(0)
        if index in removed:
            continue
        current = graph.node(index)
        if current is None:
            continue
        edge_count = graph.output_edge_count(current)
        if edge_count > 1 or produces_graph_output(graph, current):
            continue
        for name in current.inputs:
            if not name or _is_initializer_any_scope(graph, name) or name in graph.input_index():
                continue
            parent = graph.producer(name)
            if parent is not None:
                queue.append(parent.index)
        if index == start.index or edge_count == 0:
            graph.remove_node(current)
            removed.add(index)
    return bool(removed)


def _is_initializer_any_scope(graph: Graph, name: str) -> bool:
    """``graph_utils::IsInitializer(graph, name, check_outer_scope=true)``."""
    scope: Graph | None = graph
    while scope is not None:
        if scope.is_initializer(name):
            return True
        if scope.defines(name):
            return False
        scope = scope.parent
    return False


# ------------------------------------------------------------------------------------------------ If
def _fold_if(graph: Graph, if_node: Node) -> bool:
    """``ConstantFoldIfNode``: inline the branch a constant condition selects, then remove the If."""
    if not if_node.inputs or not if_node.inputs[0]:
        return False
    condition = constant_initializer(graph, if_node.inputs[0])
    if condition is None:
        return False
    values = tensor_array(condition).reshape(-1)
    if values.size != 1:
        return False
    taken = "then_branch" if bool(values[0]) else "else_branch"
    branch = if_node.subgraphs.get(taken)
    if branch is None:
        return False
    inline_if_subgraph(graph, if_node, taken, branch)
    graph.remove_node(if_node)
    return True


def inline_if_subgraph(graph: Graph, if_node: Node, taken: str, branch: Graph) -> None:
    """``Graph::InlineIfSubgraph`` (the If node itself is left for the caller to remove)."""
    uid = graph.generate_node_name("_if_" + taken)

    def unique(name: str) -> str:
        return f"{uid}_{name}"

    outer = set(if_node.implicit_inputs)
    renamed: dict[str, str] = {}
    for out_vi, if_out in zip(branch.outputs, if_node.outputs, strict=False):
        renamed[out_vi.name] = if_out
    for name in branch.initializer_names():
        source = branch.initializer(name)
        assert source is not None
        tensor = onnx.TensorProto()
        tensor.CopyFrom(source)
        if name in renamed:
            tensor.name = renamed[name]
        else:
            tensor.name = graph.generate_value_name(unique(name))
            _copy_type(branch, name, graph, tensor.name)
            renamed[name] = tensor.name
        graph.add_initializer(tensor)
    for node in branch.topological_order():
        inputs = _trim(node.inputs)
        new_inputs: list[str] = []
        for name in inputs:
            if not name:
                new_inputs.append("")
            elif name in outer:
                new_inputs.append(name)
            elif name in renamed:
                new_inputs.append(renamed[name])
            else:
                raise ValueError(
                    f"If node {if_node.name!r}: input {name!r} of {node.name!r} is neither an If input nor an "
                    "earlier output of the branch"
                )
        new_outputs: list[str] = []
        for name in _trim(node.outputs):
            if not name:
                new_outputs.append("")
            elif name in renamed:
                new_outputs.append(renamed[name])
            else:
                fresh = graph.new_value(unique(name))
                _copy_type(branch, name, graph, fresh)
                renamed[name] = fresh
                new_outputs.append(fresh)
        new_name = graph.generate_node_name(unique(node.op_type))
        new_node = add_node_like(graph, node, new_name, new_inputs, new_outputs, doc_string=node.doc_string)
        if node.subgraphs:
            for sub in node.subgraphs.values():
                _rename_outer_values(sub, renamed)
                sub.parent = graph
                sub.parent_node = new_node
            new_node.subgraphs = dict(node.subgraphs)
            graph.refresh_implicit_inputs(new_node)


def _copy_type(source: Graph, name: str, target: Graph, new_name: str) -> None:
    """``GetOrCreateNodeArg(new_name, old_arg->TypeAsProto())``: the new NodeArg takes the old one's type."""
    found = source.value_type(name)
    if found is not None:
        target.set_value_type(new_name, found)


def _trim(names: list[str]) -> list[str]:
    out = list(names)
    while out and not out[-1]:
        out.pop()
    return out


def _rename_outer_values(graph: Graph, renamed: dict[str, str]) -> None:
    """``ReassignSubgraphDependentNodeArgs``: outer-scope names a subgraph reads follow the renaming."""
    for node in graph.nodes():
        for slot, name in enumerate(list(node.inputs)):
            if name in renamed and not graph.defines(name):
                graph.set_input(node, slot, renamed[name])
        for sub in node.subgraphs.values():
            _rename_outer_values(sub, renamed)
        if node.subgraphs:
            graph.refresh_implicit_inputs(node)
