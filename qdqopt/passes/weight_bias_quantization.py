"""WeightBiasQuantization: give a QDQ Conv/ConvTranspose/Gemm a quantized fp32 weight and an int32 bias (spec §5).

::

    before                                   after (this pass)                         after the next Level1 step
    x ── Q ── DQ(xs) ──┐                     DQ(xs) ───────────────────┐               (CSE, then ConstantFolding)
    W (fp32 init) ─────┼── Conv ── Q         W ── Q(N_weight_scale,    │                N_weight_q (int8 init)
    B (fp32 init) ─────┘   (Relu/Clip)           N_weight_zp) ── DQ ───┼── Conv ── Q      ── DQ ──┐
                                             xs, w_scale ── Mul ── N_bias_scale        N_bias_int32, N_bias_scale
                                             B / N_bias_scale ── Round ── Cast(int32)    ── DQ ── Conv
                                               ── DQ(N_bias_int32, N_bias_scale) ─┘     (B unused: removed)

A weight that already comes from a DQ keeps it; then only the bias is rewritten (and a target with neither an fp32
weight nor a bias is left alone). The Mul/Div/Round/Cast chain is folded by ConstantFolding in the next Level1 step
(after CommonSubexpressionElimination, which merges identical chains of targets sharing the scale and bias
NodeArgs, so a bias DQ may end up reading another target's ``<M>_bias_scale``/``<M>_bias_int32``).

Matching (``weight_bias_quantization.cc``), for nodes in topological order, each node's subgraphs first:

* op type Conv, ConvTranspose or Gemm (any domain; the new nodes take the target's domain);
* input 0 comes from a DequantizeLinear (any domain) whose scale has a scalar shape (rank 0, or ``[1]``);
* the output path is a no-branch chain to a QuantizeLinear: the node and every Relu/Clip on the way have exactly
  one output with exactly one consumer, and the chain ends at a QuantizeLinear (graph outputs are not checked);
* the weight (input 1) comes from a DequantizeLinear (any domain), or is an fp32 initializer **of this graph**
  (not an outer-scope one), else skip;
* a bias (input 2, if present) must be an initializer (outer scope allowed) of rank 1; its size is its dim
  (0 when symbolic);
* with a weight DQ: nothing to do without a bias; a non-scalar weight scale must be ``[bias size]``, the DQ's
  ``block_size`` absent or 0, and its axis (default 1; a negative axis normalised with the weight rank) must be
  0 for Conv, 1 for ConvTranspose, and for Gemm 1 if ``transB == 0`` else 0.

Rewrite, with ``N`` the target's name, names generated in this order:

* fp32 weight: ``GetQuantizationParameter<int8>`` (asymmetric, float32): ``mn = min(min W, 0)``,
  ``mx = max(max W, 0)``, ``scale = 1 if mx == mn else (mx - mn) / 255``,
  ``zp = rint_half_even(clamp(-128 - mn / scale, -128, 127))``; initializers
  ``GenerateNodeArgName(N_weight_scale)`` (float32, rank 0) and ``GenerateNodeArgName(N_weight_zp)`` (int8,
  rank 0), both saved as raw data (ORT builds them with typed fields, but they are written back from their
  OrtValues); the Q's output ``GenerateNodeArgName(N_weight_q)`` and its node name from the
  *arg* generator again (so ``N_weight_q_token_k``), doc "Weight Q node"; the same for the DQ
  (``N_weight_dq`` / ``N_weight_dq_token_k``, "Weight DQ node"). Input 1 becomes the DQ's output.
* bias: ``Mul(dq0.scale, w_scale)`` -> ``N_bias_scale`` (node ``N_scale``), ``Div(B, ·)`` -> ``N_bias_div``,
  ``Round`` -> ``N_bias_div_round``, ``Cast(to=INT32)`` -> ``N_bias_int32``, and ``DequantizeLinear(N_bias_int32,
  N_bias_scale)`` (no zero point) -> ``N_bias_dq`` with ``axis=0`` only for a per-channel weight scale, doc
  "Bias DQ node". Each arg name is generated before its node name. Input 2 becomes the bias DQ's output.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, ShapeDims, View
from qdqopt.graph.core import tensor_array
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.base import GraphTransformer, PassContext

__all__ = ["WeightBiasQuantization", "weight_quantization_parameters"]

TARGETS = frozenset({"Conv", "ConvTranspose", "Gemm"})


class WeightBiasQuantization(GraphTransformer):
    """Quantize fp32 weights to int8 Q/DQ and fp32 biases to int32 + DQ for QDQ Conv/ConvTranspose/Gemm."""

    name = "WeightBiasQuantization"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: node.op_type in TARGETS and _rewrite(graph, node),
            ops=TARGETS,
        )


# ------------------------------------------------------------------------------------------------ helpers
def _initializer_any_scope(graph: Graph, name: str) -> onnx.TensorProto | None:
    """``graph_utils::IsInitializer(graph, name, check_outer_scope=true)``, returning the tensor."""
    owner = graph.initializer_owner(name)
    if owner is None:
        return None
    return owner.initializer(name)


def _is_scalar(shape: ShapeDims | None) -> bool:
    """``optimizer_utils::IsScalar``: rank 0, or rank 1 with a known dim of 1."""
    return shape is not None and (len(shape) == 0 or (len(shape) == 1 and shape[0] == 1))


def _no_branch_path_to_q(graph: Graph, node: Node) -> bool:
    """``IsNoBranchPathToQuantizeLinear``: one output, one consumer, through Relu/Clip, ending at a Q."""
    current = node
    while True:
        if len(current.outputs) != 1:
            return False
        consumers = graph.consumers(current.outputs[0])
        if len(consumers) != 1:
            return False
        consumer = consumers[0]
        if consumer.op_type == "QuantizeLinear":
            return True
        if consumer.op_type not in ("Relu", "Clip"):
            return False
        current = consumer


def weight_quantization_parameters(weights: np.ndarray) -> tuple[np.float32, np.int8]:
    """``GetQuantizationParameter<int8_t>`` (ReduceRange=false, Symmetric=false), in float32 like qmath.h."""
    data = np.asarray(weights, dtype=np.float32).reshape(-1)
    lo = np.float32(data.min()) if data.size else np.float32(np.finfo(np.float32).max)
    hi = np.float32(data.max()) if data.size else np.float32(np.finfo(np.float32).min)
    lo = min(lo, np.float32(0.0))
    hi = max(hi, np.float32(0.0))
    qmin, qmax = np.float32(-128.0), np.float32(127.0)
    scale = np.float32(1.0) if hi == lo else np.float32(np.float32(hi - lo) / np.float32(255.0))
    initial = np.float32(qmin - np.float32(lo / scale))
    clamped = max(qmin, min(qmax, initial))
    return scale, np.int8(np.rint(clamped))


# ------------------------------------------------------------------------------------------------ rewrite
def _rewrite(graph: Graph, node: Node) -> bool:
    if len(node.inputs) < 2:
        return False
    input_name, weight_name = node.inputs[0], node.inputs[1]
    bias_name = node.inputs[2] if len(node.inputs) >= 3 and node.inputs[2] else None
    dq0 = graph.producer(input_name) if input_name else None
    if dq0 is None or dq0.op_type != "DequantizeLinear" or len(dq0.inputs) < 2:
        return False
    if not _is_scalar(graph.shape(dq0.inputs[1], view=View.FILLED)):
        return False
    if not _no_branch_path_to_q(graph, node):
        return False
    parent1 = graph.producer(weight_name) if weight_name else None
    dq1: Node | None = None
    weight: onnx.TensorProto | None = None
    if parent1 is not None and parent1.op_type == "DequantizeLinear":
        dq1 = parent1
    else:
        # IsInitializer looks into outer scopes, GetInitializedTensor only into this graph.
        weight = graph.initializer(weight_name) if weight_name else None
        if weight is None or weight.data_type != onnx.TensorProto.FLOAT:
            return False
    bias_size = -1
    if bias_name is not None:
        if _initializer_any_scope(graph, bias_name) is None:  # asked first: it spares a shape inference
            return False
        bias_shape = graph.shape(bias_name, view=View.FILLED)
        if bias_shape is None or len(bias_shape) != 1:
            return False
        bias_size = bias_shape[0] if isinstance(bias_shape[0], int) else 0
    if dq1 is not None and bias_size == -1:
        return False
    per_tensor = True
    if dq1 is not None:
        scale_shape = graph.shape(dq1.inputs[1], view=View.FILLED) if len(dq1.inputs) > 1 else None
        if not _is_scalar(scale_shape):
            per_tensor = False
            if scale_shape is None or len(scale_shape) != 1 or scale_shape[0] is None or scale_shape[0] != bias_size:
                return False
            block_size = dq1.attr_int("block_size")
            if block_size is not None and block_size != 0:
                return False
            axis = 1
            explicit_axis = dq1.attr_int("axis")
            if explicit_axis is not None:
                axis = explicit_axis
                if axis < 0:
                    # only the rank matters, and a DQ output has its input's shape: ask the (usually initializer)
                    # input first, which spares a shape inference of the whole graph
                    weight_shape = graph.shape(dq1.inputs[0], view=View.FILLED) if dq1.inputs[0] else None
                    if weight_shape is None:
                        weight_shape = graph.shape(weight_name, view=View.FILLED)
                    if weight_shape is None:
                        return False
                    axis += len(weight_shape)
            expected = 0
            if node.op_type == "Gemm":
                expected = 1 if node.attr_int("transB", 0) == 0 else 0
            elif node.op_type == "ConvTranspose":
                expected = 1
            if axis != expected:
                return False
    if weight is not None:
        weight_scale = _quantize_weight(graph, node, weight)
    else:
        assert dq1 is not None
        weight_scale = dq1.inputs[1]
    if bias_name is not None:
        _quantize_bias(graph, node, dq0.inputs[1], weight_scale, bias_name, per_tensor)
    return True


def _quantize_weight(graph: Graph, node: Node, weight: onnx.TensorProto) -> str:
    """Insert ``W -> Q -> DQ`` with per-tensor asymmetric int8 parameters; return the scale's name."""
    base = node.name
    values = tensor_array(weight)
    scale, zp = weight_quantization_parameters(values)
    scale_name = graph.generate_value_name(base + "_weight_scale")
    graph.add_initializer(onnx.numpy_helper.from_array(np.array(scale, dtype=np.float32), scale_name))
    zp_name = graph.generate_value_name(base + "_weight_zp")
    graph.add_initializer(onnx.numpy_helper.from_array(np.array(zp, dtype=np.int8), zp_name))
    domain = normalize_domain(node.domain)
    name_node = graph.generate_value_name  # ORT names these two nodes with GenerateNodeArgName
    inputs = [node.inputs[1], scale_name, zp_name]
    q_out = _add_step(graph, "QuantizeLinear", inputs, base + "_weight_q", name_node, domain, "Weight Q node")
    inputs = [q_out, scale_name, zp_name]
    dq_out = _add_step(graph, "DequantizeLinear", inputs, base + "_weight_dq", name_node, domain, "Weight DQ node")
    graph.set_input(node, 1, dq_out)
    return scale_name


def _quantize_bias(graph: Graph, node: Node, input_scale: str, weight_scale: str, bias: str, per_tensor: bool) -> None:
    """Insert ``Mul -> Div -> Round -> Cast(int32) -> DQ`` for the bias (folded in the next step)."""
    base = node.name
    domain = normalize_domain(node.domain)
    name_node = graph.generate_node_name
    scale_out = _add_step(
        graph,
        "Mul",
        [input_scale, weight_scale],
        base + "_bias_scale",
        name_node,
        domain,
        "Bias scale node",
        node_base=base + "_scale",
    )
    div_out = _add_step(graph, "Div", [bias, scale_out], base + "_bias_div", name_node, domain, "Bias div node")
    round_out = _add_step(graph, "Round", [div_out], base + "_bias_div_round", name_node, domain, "Bias div round node")
    to_int32 = {"to": onnx.helper.make_attribute("to", onnx.TensorProto.INT32)}
    int32_out = _add_step(
        graph, "Cast", [round_out], base + "_bias_int32", name_node, domain, "Bias INT32 node", attributes=to_int32
    )
    attributes = {} if per_tensor else {"axis": onnx.helper.make_attribute("axis", 0)}
    dq_out = _add_step(
        graph,
        "DequantizeLinear",
        [int32_out, scale_out],
        base + "_bias_dq",
        name_node,
        domain,
        "Bias DQ node",
        attributes=attributes,
    )
    graph.set_input(node, 2, dq_out)


def _add_step(
    graph: Graph,
    op_type: str,
    inputs: list[str],
    value_base: str,
    name_node: Callable[[str], str],
    domain: str,
    doc_string: str,
    *,
    node_base: str | None = None,
    attributes: dict[str, onnx.AttributeProto] | None = None,
) -> str:
    """Add one node of an inserted chain: its output value named first (from ``value_base``), then the node
    (``name_node(node_base)``, ``node_base`` defaulting to ``value_base``); return the output's name."""
    out = graph.new_value(value_base)
    graph.add_node(
        name_node(value_base if node_base is None else node_base),
        op_type,
        inputs,
        [out],
        domain=domain,
        attributes=attributes,
        doc_string=doc_string,
    )
    return out
