"""GemmActivationFusion: a float Gemm followed by an activation becomes ``com.microsoft.FusedGemm``.

``gemm_activation_fusion.cc``, registered at Level2 for the CPU EP only. On a QDQ model it meets the Gemms that stay
float (a DQ-fed Gemm becomes QGemm first, in QDQSelectorActionTransformer)::

    A ─> Gemm(B, C) ─> g ─> LeakyRelu(alpha) ─> y       A ─> FusedGemm(B, C) ─> y
                                                             name  GenerateNodeName("fused <gemm>")
                                                             doc   "fused Gemm <gemm>with activation LeakyRelu"
                                                             attrs the Gemm's, activation="LeakyRelu",
                                                                   activation_alpha=alpha

Rules (ORT 1.32):

* every graph, subgraphs first (per node); the nodes of one topological snapshot, removed ones skipped;
* the Gemm is an ONNX Gemm of version 7, 9, 11 or 13 on the CPU EP with exactly one output edge (an edge into a
  subgraph counts: its consumer is then the If/Loop, never an activation); its output 0 is typed float;
* the consumer is on the Gemm's EP and is, in the ONNX domain (deprecation not checked): Elu 6/22, HardSigmoid
  6/22, LeakyRelu 6/16, Relu 6/13/14, Selu 6/22, Sigmoid 6/13, Softplus 1/22, Softsign 1/22, Tanh 6/13, ScaledTanh
  1, ParametricSoftplus 1 or ThresholdedRelu 1/10/22; then the Gemm must produce no graph output;
* the fused node starts from a copy of the Gemm's ``NodeAttributes``, then ``activation`` (the activation's op type)
  is added, then every attribute of the activation, in its ``NodeAttributes`` order, renamed
  ``activation_<name>``; inputs: all the Gemm's input defs; outputs: the activation's; EP: the Gemm's;
* the Gemm and the activation are removed (``FinalizeNodeFusion``).
"""

from __future__ import annotations

import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import fusable_activation, fuse_with_activation

__all__ = ["GemmActivationFusion", "is_fusable_activation"]

CPU = "CPUExecutionProvider"

_GEMM_VERSIONS = (7, 9, 11, 13)
#: ``IsFusableActivation``: op type -> accepted ``SinceVersion``s (ONNX domain).
_ACTIVATIONS: dict[str, tuple[int, ...]] = {
    "Elu": (6, 22),
    "HardSigmoid": (6, 22),
    "LeakyRelu": (6, 16),
    "Relu": (6, 13, 14),
    "Selu": (6, 22),
    "Sigmoid": (6, 13),
    "Softplus": (1, 22),
    "Softsign": (1, 22),
    "Tanh": (6, 13),
    "ScaledTanh": (1,),
    "ParametricSoftplus": (1,),
    "ThresholdedRelu": (1, 10, 22),
}


def _onnx_domain(node: Node) -> bool:
    return node.domain in ("", "ai.onnx")


def is_fusable_activation(node: Node) -> bool:
    """``IsFusableActivation``: op type, ``SinceVersion`` and ONNX domain (a deprecated schema is not refused)."""
    versions = _ACTIVATIONS.get(node.op_type)
    return versions is not None and _onnx_domain(node) and node.since_version in versions


class GemmActivationFusion(GraphTransformer):
    """Fuse Gemm + activation into ``com.microsoft.FusedGemm``."""

    name = "GemmActivationFusion"
    compatible_eps = (CPU,)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._try_fuse(graph, node), ops=("Gemm",))

    def _try_fuse(self, graph: Graph, gemm: Node) -> bool:
        if (
            gemm.op_type != "Gemm"
            or not _onnx_domain(gemm)
            or gemm.since_version not in _GEMM_VERSIONS
            or not self.node_is_compatible(gemm)
        ):
            return False
        if graph.elem_type(gemm.outputs[0]) != onnx.TensorProto.FLOAT:
            return False  # FusedGemm has a float kernel only
        act = fusable_activation(graph, gemm, is_fusable_activation)
        if act is None:
            return False
        fuse_with_activation(
            graph,
            gemm,
            act,
            name=graph.generate_node_name("fused " + gemm.name),
            op_type="FusedGemm",
            doc_string=f"fused Gemm {gemm.name}with activation {act.op_type}",
        )
        return True
