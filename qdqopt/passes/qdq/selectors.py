"""Node-group selectors of ``QDQSelectorActionTransformer`` (ORT's ``qdq_selectors.cc``, notes selector_action §2-3).

A selector looks at one *target* node and the DequantizeLinear parents / QuantizeLinear children around it::

    DQ(x) ─┐
    DQ(w) ─┼─> Target ─> [Relu|Clip, redundant] ─> Q ─> ...
    DQ(b) ─┘

and returns either a :class:`Selection` (the DQs by input slot, the target, the Qs, an optional redundant clip) or
a :class:`~qdqopt.events.NoMatch`: the first check that failed, in ORT's check order, with the nodes it names (the
transformer records it as a ``no-match`` event: :mod:`qdqopt.events`). Before any selector's own checks, a unit
with a float8 (or float4) DQ input or Q output is refused: ORT 1.32's CPU selectors take none (measured for every
rule kind; a dropped pair or a QLinear op of those types would have no CPU kernel). The six ``CanCreateNodeGroup``
messages are ORT's own words (typos included); every other reason is ours (ORT's ``Check`` functions just return
false).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.events import NoMatch
from qdqopt.graph import Graph, Node, dim_values
from qdqopt.passes.qdq_util import (
    constant_array,
    constant_initializer,
    is_dq_supported,
    is_q_or_dq_scale_positive_constant_scalar,
    is_qdq_pair_supported,
    is_scalar_arg,
    produces_graph_output,
)
from qdqopt.passes.rules_level2 import clip_constant_min_max

__all__ = [
    "BinarySelector",
    "ConvSelector",
    "DQMatMulNBitsSelector",
    "DropDQSelector",
    "DropQDQSelector",
    "GemmSelector",
    "MatMulSelector",
    "NoMatch",
    "NodeGroupSelector",
    "Selection",
    "SplitSelector",
    "UnarySelector",
    "VariadicSelector",
    "WhereSelector",
]

TP = onnx.TensorProto
INT16 = (TP.INT16, TP.UINT16)
INT4 = (TP.INT4, TP.UINT4)
#: the float quantized types a Q/DQ can carry (ORT 1.32 CPU): no QDQ selector of the CPU EP takes a unit with one of
#: these as a DQ's input or a Q's output (measured: every rule refuses, per unit; docs/ORT_FINDINGS.md)
FLOAT_QUANT = (
    TP.FLOAT8E4M3FN,
    TP.FLOAT8E4M3FNUZ,
    TP.FLOAT8E5M2,
    TP.FLOAT8E5M2FNUZ,
    TP.FLOAT4E2M1,
)
_DTYPE_NAME = {v: k.lower() for k, v in TP.DataType.items()}


def dtype_name(dtype: int | None) -> str:
    return "unknown" if dtype is None else _DTYPE_NAME.get(dtype, str(dtype))


@dataclass(init=False)
class Selection:
    """A unit ORT would fuse: DQs by input slot (``None`` pads Conv/Gemm's bias slot), target, Qs, redundant clip."""

    dq_nodes: list[Node | None]
    target: Node
    q_nodes: list[Node]
    clip: Node | None = None

    def __init__(
        self, dq_nodes: list[Node | None], target: Node, q_nodes: list[Node], clip: Node | None = None
    ) -> None:
        self.dq_nodes, self.target, self.q_nodes, self.clip = dq_nodes, target, q_nodes, clip


class Ctx:
    """What the selectors read: the graph (its NodeArg types as the pass sees them, :meth:`Graph.elem_type`,
    :meth:`Graph.shape`) and whether int8 is allowed."""

    def __init__(self, graph: Graph, int8_allowed: bool) -> None:
        self.graph = graph
        self.int8_allowed = int8_allowed

    def dq_in_type(self, dq: Node) -> int | None:
        """The element type of a DQ's input: a Q's output has the Q's (:meth:`q_out_type`); without a type, the
        zero point's."""
        graph = self.graph
        producer = graph.producer(dq.inputs[0])
        if producer is not None and producer.op_type == "QuantizeLinear":
            found = self.q_out_type(producer)
        else:
            found = graph.elem_type(dq.inputs[0])
        if found is None and dq.input(2):
            found = graph.elem_type(dq.inputs[2])
        return found

    def q_out_type(self, q: Node) -> int | None:
        """The element type of a Q's output: its zero point's, else ``output_dtype``, else uint8."""
        zp = q.input(2)
        if zp:
            return self.graph.elem_type(zp)
        attr = q.attributes.get("output_dtype")
        return int(attr.i) if attr is not None and attr.i else TP.UINT8


# ------------------------------------------------------------------------------------------------ group finding
def find_parents_by_type(graph: Graph, node: Node, op_type: str) -> list[Node]:
    """``FindParentsByType``: producers of that op type (any domain), by destination input slot."""
    found: list[tuple[int, Node]] = []
    for edge in graph.input_edges(node):
        src = graph.node(edge.src)
        if src is not None and src.op_type == op_type:
            found.append((edge.dst_slot, src))
    if len(found) > 1:
        found.sort(key=_FIRST)  # (stable: one slot's producers keep their edge order)
    return [n for _, n in found]


def find_children_by_type(graph: Graph, node: Node, op_type: str) -> list[Node]:
    """``FindChildrenByType``: consumers of that op type, by source output slot then output-edge order."""
    edges = graph.output_edges(node)
    if len(edges) > 1:
        edges.sort(key=_SRC_SLOT)  # (stable: one output's edges keep their order)
    out: list[Node] = []
    for edge in edges:
        dst = graph.node(edge.dst)
        if dst is not None and dst.op_type == op_type:
            out.append(dst)
    return out


_FIRST = operator.itemgetter(0)
#: an :class:`~qdqopt.graph.Edge`'s source slot
_SRC_SLOT = operator.itemgetter(1)


def _rank0(graph: Graph, name: str) -> onnx.TensorProto | None:
    tensor = constant_initializer(graph, name)
    return tensor if tensor is not None and len(tensor.dims) == 0 else None


def clip_made_redundant_by_q(graph: Graph, clip: Node, q: Node) -> bool:
    """``QDQ::IsClipMadeRedundantByQ`` (rank-0 constant Q params; the ``rint`` criterion)."""
    scale_t = _rank0(graph, q.input(1))
    if scale_t is None or scale_t.data_type != TP.FLOAT:
        return False
    zp_name = q.input(2)
    if not zp_name:
        attr = q.attributes.get("output_dtype")
        dtype = int(attr.i) if attr is not None and attr.i else TP.UINT8
        zp = 0
    else:
        zp_t = _rank0(graph, zp_name)
        if zp_t is None or zp_t.data_type not in (TP.INT8, TP.UINT8, TP.INT16, TP.UINT16):
            return False
        dtype = int(zp_t.data_type)
        arr = constant_array(graph, zp_name)
        assert arr is not None
        zp = int(arr.reshape(-1)[0])
    limits: dict[int, tuple[int, int]] = {
        TP.INT8: (-128, 127),
        TP.UINT8: (0, 255),
        TP.INT16: (-32768, 32767),
        TP.UINT16: (0, 65535),
    }
    if dtype not in limits:
        return False
    lo, hi = limits[dtype]
    if clip.op_type == "Relu":
        return zp == lo
    bounds = clip_constant_min_max(graph, clip)
    if bounds is None:
        return False
    scale_arr = constant_array(graph, q.input(1))
    assert scale_arr is not None
    scale = np.float32(scale_arr.reshape(-1)[0])
    with np.errstate(all="ignore"):
        qmin = int(np.int32(np.rint(np.float32(bounds[0]) / scale))) + zp
        qmax = int(np.int32(np.rint(np.float32(bounds[1]) / scale))) + zp
    return qmin <= lo and qmax >= hi


def redundant_clip_candidate(graph: Graph, node: Node) -> Node | None:
    edges = graph.output_edges(node)
    if len(edges) != 1:
        return None
    consumer = graph.node(edges[0].dst)
    if consumer is None or consumer.op_type not in ("Relu", "Clip"):
        return None
    if graph.output_edge_count(consumer) != 1 or produces_graph_output(graph, consumer):
        return None
    return consumer


def can_create_node_group(
    graph: Graph, node: Node, clip: Node | None, dq_nodes: list[Node], q_nodes: list[Node]
) -> NoMatch | None:
    """``NodeGroup::CanCreateNodeGroup``: None, or ORT's own status message (verbatim) with the node it names."""
    for dq in dq_nodes:
        if produces_graph_output(graph, dq):
            return NoMatch(
                "QDQ node group cannot have DQ node that produces a graph output. "
                f"DQ node: {dq.name}, target node: {node.name}",
                (dq.name,),
            )
        edges = graph.output_edges(dq)
        if len(edges) != 1 or edges[0].dst != node.index:
            return NoMatch(
                "QDQ node group cannot have DQ that doesn't have a single output edge to the target node. "
                f"DQ node: {dq.name}, target node: {node.name}",
                (dq.name,),
            )
    if clip is not None:
        edges = graph.output_edges(node)
        if produces_graph_output(graph, node) or len(edges) != 1 or edges[0].dst != clip.index:
            return NoMatch(
                "QDQ node group cannot have target node with more than one output edge if there is redunant clip "
                f"node. target node: {node.name}",
                (clip.name,),
            )
        cedges = graph.output_edges(clip)
        if (
            produces_graph_output(graph, clip)
            or len(q_nodes) != 1
            or len(cedges) != 1
            or (cedges[0].dst != q_nodes[0].index)
        ):
            return NoMatch(
                "QDQ node group cannot have redudant clip node that doesn't have a single output edge to a Q node. "
                f"redundant clip node: {clip.name}",
                (clip.name,),
            )
        return None
    if q_nodes:
        by_output: dict[int, list[Node]] = {}
        for edge in graph.output_edges(node):
            dst = graph.node(edge.dst)
            if dst is not None:
                by_output.setdefault(edge.src_slot, []).append(dst)
        for idx, consumers in sorted(by_output.items()):
            is_q = [c.op_type == "QuantizeLinear" for c in consumers]
            if any(is_q) and not all(is_q):
                return NoMatch(
                    "QDQ node group cannot have an output from the target node being consumed by a Q node and a "
                    f"non-Q node. target node: {node.name}",
                    tuple(c.name for c in consumers),
                )
            if consumers and is_q[0] and idx < len(node.outputs) and graph.is_graph_output(node.outputs[idx]):
                return NoMatch(
                    "QDQ node group cannot have an output from the target node that is consumed by a Q node and a "
                    f"graph output. target node: {node.name} output idx:{idx}"
                )
    return None


# ------------------------------------------------------------------------------------------------ selectors
class NodeGroupSelector:
    """``BaseSelector`` + ``NodeGroupSelector``: find the group, then :meth:`check` it."""

    def select(self, ctx: Ctx, node: Node) -> Selection | NoMatch:
        graph = ctx.graph
        dq_nodes = find_parents_by_type(graph, node, "DequantizeLinear")
        clip = redundant_clip_candidate(graph, node)
        q_nodes = find_children_by_type(graph, clip or node, "QuantizeLinear")
        if clip is not None and (len(q_nodes) != 1 or not clip_made_redundant_by_q(graph, clip, q_nodes[0])):
            return NoMatch(
                f"{clip.op_type} {clip.name!r} after the target is not made redundant by its Q, so no rule can fuse",
                (clip.name,),
            )
        no_match = float_quant_reason(ctx, dq_nodes, q_nodes) or self.check(ctx, node, clip, dq_nodes, q_nodes)
        if no_match is not None:
            return no_match
        return Selection(self.layout(dq_nodes), node, q_nodes, clip)

    def layout(self, dq_nodes: list[Node]) -> list[Node | None]:
        return list(dq_nodes)

    def check(
        self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]
    ) -> NoMatch | None:  # pragma: no cover - abstract
        raise NotImplementedError

    # helpers --------------------------------------------------------------------------------------------------
    @staticmethod
    def check_qdq_nodes(
        ctx: Ctx,
        node: Node,
        clip: Node | None,
        dqs: list[Node],
        qs: list[Node],
        num_dq_inputs: int = -1,
        *,
        empty_q_allowed: bool = False,
    ) -> NoMatch | None:
        """``NodeGroupSelector::CheckQDQNodes``."""
        graph = ctx.graph
        if num_dq_inputs == -1:
            num_dq_inputs = sum(1 for v in node.inputs if v)
        if num_dq_inputs != len(dqs):
            missing = [i for i, v in enumerate(node.inputs) if v and not _from_dq(graph, v)]
            if len(dqs) < num_dq_inputs and missing:
                return NoMatch(
                    f"input {missing[0]} is not produced by a DequantizeLinear ({len(dqs)} of {num_dq_inputs} DQ)"
                )
            return NoMatch(f"expected {num_dq_inputs} DequantizeLinear input(s), found {len(dqs)}")
        no_match = can_create_node_group(graph, node, clip, dqs, qs)
        if no_match is not None:
            return no_match
        if not qs:
            return None if empty_q_allowed else NoMatch("the output is not consumed by a QuantizeLinear")
        n_out = sum(1 for v in node.outputs if v)
        if n_out != len(qs) or len(qs) != graph.output_edge_count(node):
            edges = graph.output_edge_count(node)
            return NoMatch(f"{len(qs)} QuantizeLinear consumer(s) for {n_out} output(s) and {edges} output edge(s)")
        if produces_graph_output(graph, node):
            return NoMatch("the target produces a graph output")
        return None


def float_quant_reason(ctx: Ctx, dq_nodes: list[Node], q_nodes: list[Node]) -> NoMatch | None:
    """A DQ whose input, or a Q whose output, is float8 (or float4): ORT 1.32's CPU selectors take no such unit
    (there is no QLinear kernel, nor an integer one for a dropped pair, of those types)."""
    for dq in dq_nodes:
        t = ctx.dq_in_type(dq)
        if t in FLOAT_QUANT:
            return NoMatch(f"DQ {dq.name!r} input is {dtype_name(t)}: float8 Q/DQ units are not fused", (dq.name,))
    for q in q_nodes:
        t = ctx.q_out_type(q)
        if t in FLOAT_QUANT:
            return NoMatch(f"Q {q.name!r} output is {dtype_name(t)}: float8 Q/DQ units are not fused", (q.name,))
    return None


def _from_dq(graph: Graph, value: str) -> bool:
    producer = graph.producer(value)
    return producer is not None and producer.op_type == "DequantizeLinear"


def _mismatch(what: str, a: int | None, b: int | None) -> str:
    return f"{what} types differ ({dtype_name(a)} vs {dtype_name(b)})"


def _bits_reason(types: list[int | None], allow_16bit: bool, allow_4bit: bool) -> str | None:
    if not allow_16bit and any(t in INT16 for t in types):
        return "16-bit quantization not allowed by this rule"
    if not allow_4bit and any(t in INT4 for t in types):
        return "4-bit quantization not allowed by this rule"
    return None


def _qdq_pair_reason(graph: Graph, q: Node, dq: Node) -> str | None:
    if is_qdq_pair_supported(graph, q, dq, check_op_type=False):
        return None
    if len(q.inputs) != 3 or len(dq.inputs) != 3 or not q.inputs[2] or not dq.inputs[2]:
        return "Q and DQ parameters differ (a zero point is missing)"
    names = (q.inputs[1], q.inputs[2], dq.inputs[1], dq.inputs[2])
    for n in names:
        if constant_initializer(graph, n) is None:
            return f"Q and DQ parameters differ ({n!r} is not a constant initializer)"
        if not is_scalar_arg(graph, n):
            return f"Q and DQ parameters differ ({n!r} is not a scalar)"
    qs, dqs = constant_array(graph, names[0]), constant_array(graph, names[2])
    qz, dqz = constant_array(graph, names[1]), constant_array(graph, names[3])
    assert qs is not None and dqs is not None and qz is not None and dqz is not None
    if qz.dtype != dqz.dtype or qz.tobytes() != dqz.tobytes():
        return f"Q and DQ parameters differ (zero point {qz.reshape(-1)[0]!s} vs {dqz.reshape(-1)[0]!s})"
    return f"Q and DQ parameters differ (scale {qs.reshape(-1)[0]!s} vs {dqs.reshape(-1)[0]!s})"


class DropQDQSelector(NodeGroupSelector):
    def __init__(self, allow_16bit: bool, allow_4bit: bool, allow_nonpositive_scale: bool) -> None:
        self.allow_16bit = allow_16bit
        self.allow_4bit = allow_4bit
        self.allow_nonpositive_scale = allow_nonpositive_scale

    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        graph = ctx.graph
        if clip is not None:
            return NoMatch(f"a redundant {clip.op_type} follows the target (drop rules never absorb one)", (clip.name,))
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs, 1)
        if no_match is not None:
            return no_match
        dq, q = dqs[0], qs[0]
        dt_in, dt_out = ctx.dq_in_type(dq), ctx.q_out_type(q)
        if dt_in != dt_out:
            return NoMatch(_mismatch("DQ input and Q output", dt_in, dt_out))
        bits = _bits_reason([dt_in], self.allow_16bit, self.allow_4bit)
        if bits:
            return NoMatch(bits)
        if node.op_type == "Resize":
            mode = node.attr("mode")
            if mode is not None and mode != "nearest":
                return NoMatch(f"Resize mode {mode!r} is not 'nearest'")
            if node.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
                return NoMatch("Resize coordinate_transformation_mode is 'tf_crop_and_resize'")
        if not self.allow_nonpositive_scale and not is_q_or_dq_scale_positive_constant_scalar(graph, q):
            return NoMatch("the Q scale is not a positive constant scalar")
        pair = _qdq_pair_reason(graph, q, dq)
        return NoMatch(pair) if pair else None


class DropDQSelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        if clip is not None:
            return NoMatch(f"a redundant {clip.op_type} follows the target", (clip.name,))
        if len(dqs) != 1:
            return NoMatch(f"expected 1 DequantizeLinear input, found {len(dqs)}")
        no_match = can_create_node_group(ctx.graph, node, clip, dqs, qs)
        if no_match is not None:
            return no_match
        bits = _bits_reason([ctx.dq_in_type(dqs[0])], False, False)
        if bits:
            return NoMatch(bits)
        if not is_dq_supported(ctx.graph, dqs[0]):
            return NoMatch("the DQ scale/zero point is not a constant scalar (or the zero point is missing)")
        return None


class SplitSelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        if clip is not None:
            return NoMatch(f"a redundant {clip.op_type} follows the target", (clip.name,))
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs, 1)
        if no_match is not None:
            return no_match
        dt_in = ctx.dq_in_type(dqs[0])
        if dt_in in INT4:
            return NoMatch("4-bit quantization not allowed by this rule")
        for q in qs:
            dt_out = ctx.q_out_type(q)
            if dt_out != dt_in:
                return NoMatch(_mismatch("DQ input and Q output", dt_in, dt_out))
            pair = _qdq_pair_reason(ctx.graph, q, dqs[0])
            if pair:
                return NoMatch(pair)
        return None


class UnarySelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs, 1)
        if no_match is not None:
            return no_match
        dt_in, dt_out = ctx.dq_in_type(dqs[0]), ctx.q_out_type(qs[0])
        if dt_in != dt_out:
            return NoMatch(_mismatch("DQ input and Q output", dt_in, dt_out))
        bits = _bits_reason([dt_in], False, False)
        if bits:
            return NoMatch(bits)
        if node.op_type == "Softmax":
            # measured on 1.32 (knownx/fz_softmax_*): QLinearSoftmax's lookup table needs the input scale as a
            # constant scalar or one-element 1-D initializer; LeakyRelu and Sigmoid take any
            scale = constant_initializer(ctx.graph, dqs[0].input(1))
            if scale is None or not (len(scale.dims) == 0 or list(scale.dims) == [1]):
                return NoMatch("the input scale is not a constant scalar initializer (QLinearSoftmax)", (dqs[0].name,))
            # ... and a positive one (measured, knownx/fz_softmax_scale_*: 0, negative and NaN scales keep the
            # unit; +inf and a denormal fuse), which a DoubleQDQPairsRemover merge of disjoint ranges can make 0
            if not float(ctx.graph.array(dqs[0].input(1)).reshape(-1)[0]) > 0:
                return NoMatch("the input scale is not positive (QLinearSoftmax)", (dqs[0].name,))
        return None


class BinarySelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs)
        if no_match is not None:
            return no_match
        a, b, y = ctx.dq_in_type(dqs[0]), ctx.dq_in_type(dqs[1]), ctx.q_out_type(qs[0])
        if a != b:
            return NoMatch(f"mixed input types ({dtype_name(a)} and {dtype_name(b)})")
        if a != y:
            return NoMatch(_mismatch("input and output", a, y))
        bits = _bits_reason([a], False, False)
        if bits:
            return NoMatch(bits)
        return _params_shape_reason(ctx, [*dqs, *qs], allow_one_element=False, op=f"QLinear{node.op_type}")


def _params_shape_reason(ctx: Ctx, nodes: list[Node], *, allow_one_element: bool, op: str) -> NoMatch | None:
    """Every scale and zero point of the unit's DQs and Qs has a known shape of rank 0 (or ``[1]`` when
    ``allow_one_element``): measured on 1.32 (``knownx/fz_params_*``): a per-axis, a ``[1]`` (for QLinearAdd/Mul)
    or an unshaped parameter keeps the unit as it is, a graph input of rank 0 does not."""
    for n in nodes:
        for name in (n.input(1), n.input(2)):
            if not name:
                continue
            shape = dim_values(ctx.graph.shape(name))
            if shape is None or not (len(shape) == 0 or (allow_one_element and shape == [1])):
                what = "a scalar or [1]" if allow_one_element else "a scalar"
                return NoMatch(f"{n.op_type} {n.name!r} parameter {name!r} is not {what} ({op})", (n.name,))
    return None


class VariadicSelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs)
        if no_match is not None:
            return no_match
        ins = [ctx.dq_in_type(d) for d in dqs]
        outs = [ctx.q_out_type(q) for q in qs]
        if any(t != ins[0] for t in ins):
            return NoMatch("mixed input types (" + ", ".join(dtype_name(t) for t in ins) + ")")
        if any(t != outs[0] for t in outs):
            return NoMatch("mixed output types")
        if ins[0] != outs[0]:
            return NoMatch(_mismatch("input and output", ins[0], outs[0]))
        bits = _bits_reason([ins[0]], False, False)
        if bits:
            return NoMatch(bits)
        return _params_shape_reason(ctx, [*dqs, *qs], allow_one_element=True, op=f"QLinear{node.op_type}")


class WhereSelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs, 2)
        if no_match is not None:
            return no_match
        x, y, out = ctx.dq_in_type(dqs[0]), ctx.dq_in_type(dqs[1]), ctx.q_out_type(qs[0])
        if x != y or x != out:
            return NoMatch(f"mixed types (x {dtype_name(x)}, y {dtype_name(y)}, output {dtype_name(out)})")
        bits = _bits_reason([x], False, False)
        return NoMatch(bits) if bits else None


def _int8_reason(ctx: Ctx, a: int | None, b: int | None) -> str | None:
    if a == TP.INT8 and not ctx.int8_allowed:
        return "int8 activations not allowed (session.qdqisint8allowed=0)"
    if a == TP.INT8 and b != TP.INT8:
        return f"int8 activation with a {dtype_name(b)} weight"
    return None


class ConvSelector(NodeGroupSelector):
    def layout(self, dq_nodes: list[Node]) -> list[Node | None]:
        out: list[Node | None] = list(dq_nodes)
        return out + [None] * (3 - len(out))

    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        graph = ctx.graph
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs)
        if no_match is not None:
            return no_match
        x, w, y = ctx.dq_in_type(dqs[0]), ctx.dq_in_type(dqs[1]), ctx.q_out_type(qs[0])
        # the type checks are reported together (the first one listed is the one ORT stops at)
        type_reasons = [
            r
            for r in (
                _mismatch("input and output", x, y) if x != y else None,
                "4-bit weight not allowed" if w in INT4 else None,
                _int8_reason(ctx, x, w),
            )
            if r
        ]
        if type_reasons:
            return NoMatch(type_reasons[0], also=tuple(type_reasons[1:]))
        if len(dqs) == 3:
            if ctx.dq_in_type(dqs[2]) != TP.INT32:
                return NoMatch("the bias is not int32")
            r = _conv_bias_reason(graph, dqs)
            if r:
                return NoMatch(r)
        bits = _bits_reason([x, w], False, True)
        return NoMatch(bits) if bits else None


#: the tolerances of the bias scale check (``|b - x*w| <= atol + rtol*|x*w|``, in float32)
_BIAS_ATOL = np.float32(1e-6)
_BIAS_RTOL = np.float32(1e-2)


def _conv_bias_reason(graph: Graph, dqs: list[Node]) -> str | None:
    xs_t, ws_t, bs_t = (constant_initializer(graph, d.input(1)) for d in dqs)
    if xs_t is None or ws_t is None or bs_t is None or any(t.data_type != TP.FLOAT for t in (xs_t, ws_t, bs_t)):
        return "bias scale check: x, w and bias scales must be constant float initializers"
    xs, ws, bs = (constant_array(graph, d.input(1)) for d in dqs)
    assert xs is not None and ws is not None and bs is not None
    if xs.ndim > 1 or (xs.ndim == 1 and xs.size != 1) or 0 in (xs.size, ws.size, bs.size):
        return "bias scale check: bad scale shapes"
    wn, bn = ws.size, bs.size
    if not (wn == 1 or bn in (1, wn)):
        return "bias scale check: scale lengths differ"
    if wn == 1 and bn == 1:
        # per-tensor scales, the usual case: the same float32 arithmetic on numpy's float32 scalars (the ufuncs'
        # own loops) without the array calls
        x, w, b = xs.flat[0], ws.flat[0], bs.flat[0]
        if not (math.isfinite(x) and math.isfinite(w) and math.isfinite(b)):
            return "bias scale check: non-finite scale"
        product = x * w
        if abs(b - product) > _BIAS_ATOL + _BIAS_RTOL * abs(product):
            return "bias scale is not x_scale * w_scale"
    else:
        if not (np.isfinite(xs).all() and np.isfinite(ws).all() and np.isfinite(bs).all()):
            return "bias scale check: non-finite scale"
        # (wn,) and (bn,) broadcast to (max(wn, bn),): one of them is 1 or they are equal
        wv = ws.reshape(-1)
        bv = bs.reshape(-1)
        xw = np.float32(xs.reshape(-1)[0]) * wv.astype(np.float32)
        if (np.abs(bv - xw) > _BIAS_ATOL + _BIAS_RTOL * np.abs(xw)).any():
            return "bias scale is not x_scale * w_scale"
    zp = dqs[2].input(2)
    if zp:
        zt = constant_initializer(graph, zp)
        za = constant_array(graph, zp)
        if zt is None or za is None or zt.data_type != TP.INT32 or za.size == 0 or (za != 0).any():
            return "bias zero point is not a constant int32 zero"
    return None


class MatMulSelector(NodeGroupSelector):
    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        if len(dqs) != 2:
            return NoMatch(f"expected 2 DequantizeLinear inputs, found {len(dqs)}")
        a, b = ctx.dq_in_type(dqs[0]), ctx.dq_in_type(dqs[1])
        r = _int8_reason(ctx, a, b) or _bits_reason([a, b], False, False)
        if r:
            return NoMatch(r)
        if qs:
            no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs)
            if no_match is not None:
                return no_match
            y = ctx.q_out_type(qs[0])
            if a != y:
                return NoMatch(_mismatch("input and output", a, y))
            r = _qlinear_matmul_params_reason(ctx, dqs[0], dqs[1], qs[0])
            if r:
                return NoMatch(r)
        elif clip is not None:
            return NoMatch("a redundant clip without a Q")
        return None


def _per_tensor_shape(shape: list[int | None] | None) -> bool:
    """A scale's or zero point's shape that quantizes per tensor: a scalar, or one element in one dimension."""
    return shape is not None and (len(shape) == 0 or shape == [1])


def _qlinear_matmul_params_reason(ctx: Ctx, dqa: Node, dqb: Node, q: Node) -> str | None:
    """QLinearMatMul's quantization parameters, as ORT 1.32 takes them (measured, ``knownx/fz_qlinearmatmul_*``):
    A and Y per tensor; B per tensor, or per column of a 2-D weight (a 1-D ``[N]`` on axis 1). A blocked B, a
    per-axis B on another axis (even when K == N) or of another rank, a per-axis A or Y: the MatMul stays (the
    MatMulIntegerToFloat path, without a Q, takes them all)."""
    graph = ctx.graph
    for what, n in (("A", dqa), ("Y", q)):
        for name in (n.input(1), n.input(2)):
            if name and not _per_tensor_shape(dim_values(graph.shape(name))):
                return f"{what} scale/zero point is not per tensor (QLinearMatMul)"
    if dqb.attr_int("block_size", 0) > 0:
        return "the weight DQ is blocked (QLinearMatMul)"
    wshape = dim_values(graph.shape(dqb.inputs[0]))
    axis = dqb.attr_int("axis", 1)
    for name in (dqb.input(1), dqb.input(2)):
        if not name:
            continue
        shape = dim_values(graph.shape(name))
        if _per_tensor_shape(shape):
            continue
        per_column = (
            shape is not None
            and wshape is not None
            and len(wshape) == 2
            and len(shape) == 1
            and shape[0] is not None
            and shape[0] == wshape[1]
            and axis in (1, -1)
        )
        if not per_column:
            return "B scale/zero point is neither per tensor nor per column of a 2-D weight (QLinearMatMul)"
    return None


def _rank_dims(graph: Graph, name: str) -> list[int] | None:
    tensor = constant_initializer(graph, name)
    if tensor is not None:
        return list(tensor.dims)
    return None


class GemmSelector(NodeGroupSelector):
    def layout(self, dq_nodes: list[Node]) -> list[Node | None]:
        out: list[Node | None] = list(dq_nodes)
        return out + [None] * (3 - len(out))

    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        no_match = self.check_qdq_nodes(ctx, node, clip, dqs, qs, empty_q_allowed=True)
        if no_match is not None:
            return no_match
        if clip is not None and not qs:
            return NoMatch("a redundant clip without a Q")
        dqa, dqb = dqs[0], dqs[1]
        if not dqa.input(2):
            return NoMatch("DQ of input A has no zero point")
        for n in (dqa.input(1), dqa.input(2)):
            s = dim_values(ctx.graph.shape(n))
            if s is None or not (len(s) == 0 or s == [1]):
                return NoMatch("A scale/zero point is not a scalar")
        if not dqb.input(2):
            return NoMatch("DQ of input B has no zero point")
        wshape = dim_values(ctx.graph.shape(dqb.inputs[0]))
        trans_b = node.attr_int("transB", 0)
        n_dim = wshape[0 if trans_b else 1] if wshape is not None and len(wshape) == 2 else None
        shapes = []
        for n in (dqb.input(1), dqb.input(2)):
            s = dim_values(ctx.graph.shape(n))
            ok = s is not None and (len(s) == 0 or s == [1] or (n_dim is not None and s == [n_dim]))
            if not ok:
                return NoMatch("B scale/zero point shape is neither scalar nor [N]")
            shapes.append(s)
        if shapes[0] != shapes[1]:
            return NoMatch("B scale and zero point shapes differ")
        a, b = ctx.dq_in_type(dqa), ctx.dq_in_type(dqb)
        if a == TP.INT8 and b != TP.INT8:
            return NoMatch(f"int8 activation with a {dtype_name(b)} weight")
        if qs:
            y = ctx.q_out_type(qs[0])
            if a != y:
                return NoMatch(_mismatch("input and output", a, y))
            for n in (qs[0].input(1), qs[0].input(2)):
                if not n:
                    continue
                s = dim_values(ctx.graph.shape(n))
                if s is None or not (len(s) == 0 or s == [1]):
                    return NoMatch("Y scale/zero point is not a scalar")
        bits = _bits_reason([a, b], False, False)
        if bits:
            return NoMatch(bits)
        if len(dqs) == 3:
            if abs(node.attr_float("alpha", 1.0) - 1.0) > 1e-6:
                return NoMatch("alpha is not 1 with a quantized bias")
            if abs(node.attr_float("beta", 1.0) - 1.0) > 1e-6:
                return NoMatch("beta is not 1 with a quantized bias")
            if ctx.dq_in_type(dqs[2]) != TP.INT32:
                return NoMatch("the bias is not int32")
        return None


NBITS_TYPES: dict[int, int] = {TP.INT2: 2, TP.UINT2: 2, TP.INT4: 4, TP.UINT4: 4, TP.INT8: 8, TP.UINT8: 8}


class DQMatMulNBitsSelector(NodeGroupSelector):
    """``DQMatMulNodeGroupSelector``: a constant 2/4/8-bit weight behind its own DQ feeding input B.

    Observed on 1.32 (beyond the source snapshot of the notes): the rest of the unit may be a 16-bit QDQ unit (an
    int16/uint16 activation DQ on A, int16/uint16 Qs on the output), which no QLinear op could take, in fp32 only
    (an fp16 unit with an activation DQ or a Q stays); an 8-bit activation DQ or an 8-bit Q blocks the rule. Only
    the weight DQ is selected (and removed).
    """

    def select(self, ctx: Ctx, node: Node) -> Selection | NoMatch:
        result = super().select(ctx, node)
        if isinstance(result, Selection):
            weight = next(d for d in result.dq_nodes if d is not None and d.outputs[0] == node.input(1))
            result.dq_nodes = [weight]
        return result

    def check(self, ctx: Ctx, node: Node, clip: Node | None, dqs: list[Node], qs: list[Node]) -> NoMatch | None:
        graph = ctx.graph
        if clip is not None:
            return NoMatch(f"a redundant {clip.op_type} follows the target", (clip.name,))
        q_types = [ctx.q_out_type(q) for q in qs]
        if any(t not in INT16 for t in q_types):
            return NoMatch("the output is consumed by an 8-bit QuantizeLinear (QLinear rules own that unit)")
        is_gemm = node.op_type == "Gemm"
        weight = next((d for d in dqs if d.outputs[0] == node.input(1)), None)
        if weight is None:
            return NoMatch("the weight (input 1) is not produced by a DequantizeLinear")
        others = [d for d in dqs if d is not weight]
        bias_dq = [d for d in others if is_gemm and d.outputs[0] == node.input(2)]
        act = [d for d in others if d not in bias_dq]
        if any(d.outputs[0] != node.input(0) for d in act) or len(act) > 1:
            return NoMatch(f"unexpected DequantizeLinear inputs ({len(dqs)})")
        if act and ctx.dq_in_type(act[0]) not in INT16:
            return NoMatch(
                f"the activation DQ is {dtype_name(ctx.dq_in_type(act[0]))} (8-bit QDQ units belong to MatMul/Gemm)",
                (act[0].name,),
            )
        if qs:
            # CanCreateNodeGroup's checks of the Q side (measured: the target's output read by a Q and by another
            # node, or by a Q and as a graph output, keeps the MatMul; knownx/fz_nbits_q_and_*)
            no_match = can_create_node_group(graph, node, None, [], qs)
            if no_match is not None:
                return no_match
        if fp16_nbits_unit(ctx, weight, bool(act or qs)):
            return NoMatch(
                "an fp16 16-bit QDQ unit (an activation DQ or a Q with the weight's DQ): ORT 1.32 leaves it "
                "(measured, knownx/fz_nbits_fp16_*)",
                (weight.name,),
            )
        if graph.output_edge_count(weight) != 1 or produces_graph_output(graph, weight):
            return NoMatch(
                "the weight DQ does not have exactly one output edge (or produces a graph output)", (weight.name,)
            )
        if len(graph.consumers(weight.inputs[0])) > 1 or len(graph.consumers(weight.input(1))) > 1:
            return NoMatch("the weight or scale initializer is shared with another node")
        w_dims = _rank_dims(graph, weight.inputs[0])
        if is_gemm:
            alpha = node.attr_float("alpha", 1.0)
            beta = node.attr_float("beta", 1.0)
            if abs(alpha - 1.0) > 1e-6 or node.attr_int("transA", 0) or node.attr_int("transB", 0):
                return NoMatch("Gemm alpha != 1 or transposed inputs")
            if node.input(2):
                if abs(beta - 1.0) > 1e-6:
                    return NoMatch("Gemm beta != 1 with a bias")
                n_dim = w_dims[1] if w_dims is not None and len(w_dims) == 2 else None
                b_shape = dim_values(ctx.graph.shape(node.input(2)))
                if n_dim is None or b_shape != [n_dim]:
                    return NoMatch("the Gemm bias is not [N]")
        reason = validate_dq_for_nbits(ctx, weight)
        return NoMatch(reason) if reason else None


def fp16_nbits_unit(ctx: Ctx, weight: Node, in_unit: bool) -> bool:
    """An fp16 weight DQ (its scale's type) in a 16-bit QDQ unit (``in_unit``: an activation DQ or a Q)."""
    return in_unit and ctx.graph.elem_type(weight.input(1)) == TP.FLOAT16


def validate_dq_for_nbits(ctx: Ctx, dq: Node) -> str | None:
    """``ValidateDQForMatMulNBits``."""
    graph = ctx.graph
    scale_t = constant_initializer(graph, dq.input(1))
    w_t = constant_initializer(graph, dq.inputs[0])
    if scale_t is not None and scale_t.data_type not in (TP.FLOAT, TP.FLOAT16):
        return f"scale type {dtype_name(scale_t.data_type)} is not float/float16"
    dtype = ctx.dq_in_type(dq)
    if dtype not in NBITS_TYPES:
        return f"weight type {dtype_name(dtype)} is not 2/4/8-bit"
    if w_t is None or scale_t is None:
        return "the weight or scale is not a constant initializer"
    zp = dq.input(2)
    zp_t = constant_initializer(graph, zp) if zp else None
    if zp and zp_t is None:
        return "the zero point is not a constant initializer"
    if len(w_t.dims) != 2:
        return "the weight is not 2-D"
    k, n = w_t.dims
    block = dq.attr_int("block_size", 0)
    axis = dq.attr_int("axis")
    if block > 0:
        if axis not in (None, 0) and axis != 0:
            return "blockwise DQ axis is not 0"
        if block < 16 or block > 256 or block & (block - 1):
            return "block_size is not a power of two in [16, 256]"
        if len(scale_t.dims) != 2 or (zp_t is not None and len(zp_t.dims) != 2):
            return "blockwise scale/zero point is not 2-D"
        if list(scale_t.dims) != [(k + block - 1) // block, n] or (zp_t is not None and zp_t.dims != scale_t.dims):
            return "blockwise scale/zero point dims do not match the weight"
        return None
    if len(scale_t.dims) == 0:
        if zp_t is not None and len(zp_t.dims) != 0:
            return "per-tensor scale with a non-scalar zero point"
        return None
    if list(scale_t.dims) == [n]:
        if axis is not None and axis != 1:
            return "per-channel DQ axis is not 1"
        if zp_t is not None and list(zp_t.dims) != [n]:
            return "per-channel zero point is not [N]"
        return None
    return "unsupported quantization granularity"
