"""SwiGluFusion: a ``com.microsoft`` QuickGelu whose only consumer is a Mul by an ``up`` value of the same shape
becomes one ``com.microsoft`` SwiGLU (``swiglu_fusion.cc``, Level2; new in 1.32)::

    before                                              after
    gate --> QuickGelu(alpha) --> Mul --> y              gate --+
                                   ^                            +--> SwiGLU(activation_alpha=alpha) --> y
    up ----------------------------+                     up ----+

SiLU ``gate * Sigmoid(gate)`` reaches it as ``QuickGelu(alpha=1)``, which QuickGeluFusion makes earlier in the
same step.

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is the Mul (7, 13, 14)
  on a compatible EP;
* the compatible EPs are the CUDA EP's only: a node the CPU EP owns is never fused. ORT's own test
  (``SwiGluFusionSkipsCpuAssignedNodes``) says so, the CPU EP has no SwiGLU kernel, and a CPU session of 1.32 logs
  ``SwiGluFusion modified: 0`` on every fixture of ``swiglu/`` (QuickGelu written in the model or fused from SiLU,
  either input order, symbolic dims). **In a CPU session the pass therefore never changes a graph**; the rules below
  are those of the source, kept for the reader and for a CUDA-assigned graph;
* the gate is the Mul's first input (slot 0, then 1) made by a ``com.microsoft`` QuickGelu (1) on the Mul's EP with
  exactly one output edge and no graph output (``CheckOutputEdges``); up is the Mul's other input;
* the QuickGelu's input (gate) is float, float16 or bfloat16, and gate and up have the same shape: the same rank
  (not 0) and, dim by dim, equal values or equal symbols (Mul broadcasts, SwiGLU does not);
* the new node: ``GenerateNodeName(<Mul's name> + "/SwiGluFusion/")``, doc string "fused QuickGelu and Mul",
  inputs (gate, up), the Mul's output, float attribute ``activation_alpha`` (the QuickGelu's ``alpha``, 1.702 when
  absent) and, in 1.32's build, ``round_activation`` (the schema's words: it keeps the fused node bit-identical to
  QuickGelu + Mul; the value is not observable from a CPU session, 1 is the one that keeps that promise), domain
  ``com.microsoft``, the Mul's EP; QuickGelu and Mul are removed.
"""

from __future__ import annotations

import onnx

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node, dims_equal
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges, finalize_nodes_fusion, input_node, is_supported_op

__all__ = ["SwiGluFusion"]

MS_DOMAIN = "com.microsoft"
_BINARY = (7, 13, 14)
_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
#: QuickGelu's schema default for ``alpha``
QUICK_GELU_DEFAULT_ALPHA = 1.702


def same_shape(graph: Graph, a: str, b: str) -> bool:
    """Both values have a known shape of the same rank (not 0) whose dims are equal values or equal symbols."""
    shape_a, shape_b = graph.shape(a), graph.shape(b)
    if shape_a is None or shape_b is None or not shape_a or len(shape_a) != len(shape_b):
        return False
    for dim_a, dim_b in zip(shape_a, shape_b, strict=True):
        if isinstance(dim_a, int) and isinstance(dim_b, int):
            if dim_a != dim_b:
                return False
        elif not (isinstance(dim_a, str) and isinstance(dim_b, str) and dims_equal(dim_a, dim_b)):
            return False
    return True


class SwiGluFusion(GraphTransformer):
    """Fuse ``QuickGelu(gate) * up`` into one SwiGLU (CUDA-assigned nodes only)."""

    name = "SwiGluFusion"
    compatible_eps = ("CUDAExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Mul",))

    def _gate(self, graph: Graph, mul: Node) -> tuple[int, Node] | None:
        for slot in (0, 1):
            producer = input_node(graph, mul, slot)
            if (
                producer is not None
                and is_supported_op(producer, "QuickGelu", (1,), MS_DOMAIN)
                and producer.ep == mul.ep
                and check_output_edges(graph, producer, 1)
            ):
                return slot, producer
        return None

    def _fuse(self, graph: Graph, mul: Node) -> bool:
        if not is_supported_op(mul, "Mul", _BINARY):
            return False
        if not self.node_is_compatible(mul):
            if any(p.op_type == "QuickGelu" for p in graph.input_nodes(mul)):
                emit_no_match(NoMatch(f"Mul {mul.name!r} is on {mul.ep or '(no EP)'}, not the CUDA EP"), mul.name)
            return False
        found = self._gate(graph, mul)
        if found is None:
            return False
        slot, quick = found
        gate, up = quick.inputs[0], mul.inputs[1 - slot]
        if graph.elem_type(gate) not in _TYPES:
            emit_no_match(NoMatch(f"gate {gate!r} is not float, float16 or bfloat16", (quick.name,)), mul.name)
            return False
        if not same_shape(graph, gate, up):
            emit_no_match(NoMatch(f"gate {gate!r} and up {up!r} do not provably have one shape"), mul.name)
            return False
        alpha = quick.attr_float("alpha", QUICK_GELU_DEFAULT_ALPHA)
        swiglu = graph.add_node(
            graph.generate_node_name(mul.name + "/SwiGluFusion/"),
            "SwiGLU",
            [gate, up],
            [""],
            domain=MS_DOMAIN,
            attributes={
                "activation_alpha": onnx.helper.make_attribute("activation_alpha", float(alpha)),
                "round_activation": onnx.helper.make_attribute("round_activation", 1),
            },
            doc_string="fused QuickGelu and Mul",
            ep=mul.ep,
        )
        finalize_nodes_fusion(graph, [quick, mul], swiglu)
        emit_fused(mul.name, "SwiGLU", swiglu.name, MS_DOMAIN)
        return True
