"""WhereDummyDq: give the constant branch of a quantized ``Where`` its own DequantizeLinear (spec §4.7).

The Where node unit (QLinearWhere) needs both data branches to come from DQs; a scalar float constant on one side
gets a dummy DQ whose output is (about) the constant::

    before                                  after
    cond ---------+                         cond ------------------------------+
    Q -> DQ ------+-> Where -> Q            Q -> DQ ---------------------------+-> Where -> Q
    c (scalar) ---+                         DQ(wh_dummy_xq, wh_dummy_scale, wh_dummy_zp) -+

Rules (``where_dummy_dq.cc``, ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot; ops matched by op type only;
* the Where output has exactly one consumer and it is a QuantizeLinear; input 1 is produced by a DequantizeLinear
  and input 2 is a constant initializer (outer scopes count), or input 1 is a constant initializer and input 2 comes
  from a DequantizeLinear; the constant's NodeArg has rank 0;
* skipped, without any name generated: the DQ has no zero point; the DQ input's element type differs from the Q
  output's; the DQ's scale or zero point is not an initializer of this graph;
* then the names are generated, in the order ``<where>_dummy_xq``, ``<where>_dummy_zp``, ``<where>_dummy_scale``
  (``GenerateNodeArgName``), and only then is it checked that the constant is an initializer *of this graph*, of
  the scale's element type, and float32 (anything else: skipped, the names stay taken);
* zero-point type (the DQ's): int8 -> zp 0, xq 127 / 0 / -128 for c > 0 / c == 0 / c < 0 (NaN counts as < 0);
  uint8 -> zp 127, xq 255 / 127 / 0; int16 -> zp 0, xq 32767 / 0 / -32768; uint16 -> zp 32767, xq 65535 / 32767 / 0;
  any other type: skipped; scale = c / (xq - zp) in float32, or 1 when c == 0;
* the three scalars are added as initializers (xq, scale, zp, in that order), then the DQ, whose output *and node
  name* both come from ``GenerateNodeArgName(<where>_dummy_dq)`` (so the node gets a ``_token_N``), in the first
  DQ's domain, doc string "DeQuantizeLinear from WhereDummyDq GraphTransformer"; the Where reads it instead of the
  constant (which Resolve drops if nothing else uses it).
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.qdq_util import constant_initializer, tensor_from_array

__all__ = ["WhereDummyDq"]

DOC = "DeQuantizeLinear from WhereDummyDq GraphTransformer"

# zero-point type -> (zp, xq for c > 0, xq for c < 0); c == 0 uses xq = zp
_DUMMY: dict[int, tuple[int, int, int]] = {
    onnx.TensorProto.INT8: (0, 127, -128),
    onnx.TensorProto.UINT8: (127, 255, 0),
    onnx.TensorProto.INT16: (0, 32767, -32768),
    onnx.TensorProto.UINT16: (32767, 65535, 0),
}


class WhereDummyDq(GraphTransformer):
    """Insert a dummy DQ on the scalar-constant branch of a DQ-fed, Q-consumed Where."""

    name = "WhereDummyDq"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: _satisfies(graph, node) and _insert_dummy_dq(graph, node),
            ops=("Where",),
        )


def _producer_op(graph: Graph, value: str) -> Node | None:
    return graph.producer(value) if value else None


def _is_rank0_constant(graph: Graph, value: str) -> bool:
    tensor = constant_initializer(graph, value)
    return tensor is not None and len(tensor.dims) == 0


def _satisfies(graph: Graph, node: Node) -> bool:
    """``SatisfyCondition``."""
    if node.op_type != "Where" or len(node.inputs) < 3 or not node.outputs:
        return False
    consumers = graph.consumers(node.outputs[0])
    if len(consumers) != 1 or consumers[0].op_type != "QuantizeLinear":
        return False
    p1, p2 = _producer_op(graph, node.inputs[1]), _producer_op(graph, node.inputs[2])
    p1_dq = p1 is not None and p1.op_type == "DequantizeLinear"
    p2_dq = p2 is not None and p2.op_type == "DequantizeLinear"
    if p1_dq and constant_initializer(graph, node.inputs[2]) is not None:
        return _is_rank0_constant(graph, node.inputs[2])
    if constant_initializer(graph, node.inputs[1]) is not None and p2_dq:
        return _is_rank0_constant(graph, node.inputs[1])
    return False


def _q_output_elem_type(graph: Graph, q: Node) -> int | None:
    return graph.elem_type(q.outputs[0])


def _insert_dummy_dq(graph: Graph, where: Node) -> bool:
    """``InsertDummyDQ``: True if the graph was changed."""
    p1 = _producer_op(graph, where.inputs[1])
    dq = p1 if p1 is not None else _producer_op(graph, where.inputs[2])
    assert dq is not None
    const_slot = 2 if p1 is not None else 1
    q = graph.consumers(where.outputs[0])[0]
    if len(dq.inputs) < 3 or not dq.inputs[2]:
        return False
    if graph.elem_type(dq.inputs[0]) != _q_output_elem_type(graph, q):
        return False
    scale_t = graph.initializer(dq.inputs[1])
    zp_t = graph.initializer(dq.inputs[2])
    if scale_t is None or zp_t is None:
        return False
    xq_name = graph.generate_value_name(where.name + "_dummy_xq")
    zp_name = graph.generate_value_name(where.name + "_dummy_zp")
    scale_name = graph.generate_value_name(where.name + "_dummy_scale")
    const_name = where.inputs[const_slot]
    const_t = graph.initializer(const_name)
    if const_t is None or const_t.data_type != scale_t.data_type or const_t.data_type != onnx.TensorProto.FLOAT:
        return False
    dummy = _DUMMY.get(zp_t.data_type)
    if dummy is None:
        return False
    c = np.float32(graph.array(const_name).reshape(-1)[0])
    zp, xq_pos, xq_neg = dummy
    xq = xq_pos if c > 0 else (zp if c == 0 else xq_neg)
    with np.errstate(all="ignore"):
        scale = np.float32(1.0) if c == 0 else np.float32(c / np.float32(xq - zp))
    zp_dtype = onnx.helper.tensor_dtype_to_np_dtype(zp_t.data_type)
    graph.add_initializer(tensor_from_array(np.array(xq, dtype=zp_dtype), xq_name, zp_t.data_type))
    graph.add_initializer(tensor_from_array(np.array(scale, dtype=np.float32), scale_name, scale_t.data_type))
    graph.add_initializer(tensor_from_array(np.array(zp, dtype=zp_dtype), zp_name, zp_t.data_type))
    out_name = graph.new_value(where.name + "_dummy_dq")
    node_name = graph.generate_value_name(where.name + "_dummy_dq")
    graph.add_node(
        node_name,
        "DequantizeLinear",
        [xq_name, scale_name, zp_name],
        [out_name],
        domain=dq.domain,
        doc_string=DOC,
    )
    graph.set_input(where, const_slot, out_name)
    return True
