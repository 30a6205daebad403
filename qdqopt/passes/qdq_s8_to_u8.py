"""``QDQS8ToU8Transformer`` (qdq_transformer/qdq_s8_to_u8.cc, spec §8.2 with REVIEW 24/25): on x86, where int8
activations are not allowed, a single-consumer int8 Q→DQ pair is switched to uint8 before QDQ fusion::

    x ─> Q(s, zp:int8 z) ─q─> DQ(s, zp:int8 z | none) ─> ...
      =>
    x ─> Q(s, qdq_s8_to_u8_zp_conversion) ─qdq_s8_to_u8_quant─> DQ(s, qdq_s8_to_u8_zp_conversion) ─> ...
         (qdq_s8_to_u8_zp_conversion: uint8 scalar z + 128, raw data)

Registered in Level2 only when int8 is not allowed (and QDQ is not disabled), for the CPU EP. For each node in
topological order on the CPU EP:

* **Q→DQ pair.** A Q (``MatchQNode``) with ``CheckOutputEdges(1)`` (one output edge, no graph output, no edge into a
  subgraph) whose consumer is a DQ (``MatchDQNode``; its EP is not checked). The Q has 3 inputs and its zp is a
  constant initializer of this graph with one element of type int8; the DQ has 2 or 3 inputs, and its zp, if
  present, is a constant int8 initializer with one element and the same value; a missing DQ zp counts as int8 0.
  The rewrite generates ``GenerateNodeArgName("qdq_s8_to_u8_zp_conversion")`` (initializer, dims ``[]``), then
  ``GenerateNodeArgName("qdq_s8_to_u8_quant")`` (the Q's new output and the DQ's new input), and sets both zps
  (a DQ without zp gains a third input). A matched Q is never also treated as a lone DQ.
* **Lone DQ** (only with ``session.x64quantprecision=1`` on a CPU whose U8S8 kernels may overflow):
  ``QDQ::ConvertS8WeightToU8(dq, 0, 2)``, shared with Avx2WeightS8ToU8Transformer (:mod:`qdqopt.passes.s8_to_u8`).
  The weight is a constant int8 initializer of this graph, the zp (if the DQ has a non-empty third input) a
  constant int8 one. The weight is converted only when some value lies outside [-64, 64]:
  ``<w>_s8_2_u8`` holds the bytes XOR 0x80 with the weight's dims; the zp becomes ``<zp>_s8_2_u8`` the same way,
  always (a missing zp gives ``GenerateNodeArgName("weight_zp_s8_2_u8")`` = 128).

Initializers that become unused are dropped by the Resolve that follows.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, element_count
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges, output_nodes
from qdqopt.passes.qdq_util import is_dq, is_q
from qdqopt.passes.s8_to_u8 import convert_s8_weight_to_u8, int8_tensor_to_uint8, local_constant, raw_uint8_tensor

__all__ = ["QDQS8ToU8Transformer", "int8_tensor_to_uint8"]

TP = onnx.TensorProto
_raw_tensor = raw_uint8_tensor  # looked up here at each call (a test shifts the generated zp through it)


class QDQS8ToU8Transformer(GraphTransformer):
    """``QDQS8ToU8Transformer``."""

    name = "QDQS8ToU8Transformer"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        weights_to_u8 = ctx.config.flag("session.x64quantprecision") and ctx.target.u8s8_overflow

        def visit(node: Node) -> bool:
            if not self.node_is_compatible(node):
                return False
            if is_q(node) and check_output_edges(graph, node, 1):
                dq = output_nodes(graph, node)[0]
                return is_dq(dq) and self._convert_pair(graph, node, dq)
            return weights_to_u8 and is_dq(node) and self._convert_weight(graph, node)

        return self.visit_in_order(graph, ctx, graph_level, visit, ops=("QuantizeLinear", "DequantizeLinear"))

    @staticmethod
    def _convert_pair(graph: Graph, q: Node, dq: Node) -> bool:
        if len(q.inputs) != 3 or len(dq.inputs) not in (2, 3):
            return False
        q_zp = local_constant(graph, q.inputs[2])
        if q_zp is None:
            return False
        dq_zp_name = dq.input(2)
        dq_zp: onnx.TensorProto | None = None
        if dq_zp_name:
            dq_zp = local_constant(graph, dq_zp_name)
            if dq_zp is None:
                return False
        if element_count(q_zp.dims[:]) != 1 or q_zp.data_type != TP.INT8:
            return False
        q_value = int(np.asarray(graph.array(q_zp.name)).reshape(-1)[0])
        dq_value = 0
        if dq_zp is not None:
            if element_count(dq_zp.dims[:]) != 1 or dq_zp.data_type != TP.INT8:
                return False
            dq_value = int(np.asarray(graph.array(dq_zp.name)).reshape(-1)[0])
        if q_value != dq_value:
            return False
        zp_name = graph.generate_value_name("qdq_s8_to_u8_zp_conversion")
        graph.add_initializer(_raw_tensor(zp_name, [], bytes([(q_value + 128) & 0xFF])))
        quant = graph.new_value("qdq_s8_to_u8_quant")
        graph.set_output(q, 0, quant)
        graph.set_input(dq, 0, quant)
        graph.set_input(q, 2, zp_name)
        graph.set_input(dq, 2, zp_name)
        return True

    @staticmethod
    def _convert_weight(graph: Graph, dq: Node) -> bool:
        """``QDQ::ConvertS8WeightToU8(graph, dq, 0, 2)`` (:mod:`qdqopt.passes.s8_to_u8`)."""
        return convert_s8_weight_to_u8(graph, dq, 0, 2)
