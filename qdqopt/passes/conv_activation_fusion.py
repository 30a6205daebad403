"""ConvActivationFusion: a float Conv followed by an activation becomes ``com.microsoft.FusedConv``.

``conv_activation_fusion.cc``, registered at Level2 for the CPU, ACL, JS and WebGPU EPs. It is a
``SelectorActionTransformer`` with one registry entry, ``ConvAct``; on a QDQ model it fuses the Convs that stay float
(the QDQ fusion left them, e.g. a Clip or Relu between Conv and Q that no rule could drop)::

    X ─> Conv(W, B) ─> c ─> Relu ─> y               X ─> FusedConv(W, B) ─> y          (name and doc of the Conv,
                                                          activation="Relu"            domain com.microsoft)

    X ─> Conv ─> c ─> Clip(c, lo, hi) ─> y          X ─> FusedConv ─> y
                                                          activation="Clip", activation_params=[lo, hi]

Rules (ORT 1.32, CPU EP):

* every graph, subgraphs first (per node); the nodes of one topological snapshot, removed ones skipped; only nodes
  on a compatible EP (an unassigned node is not);
* the target is an ONNX ``Conv`` of version 1, 11 or 22 (also ``com.ms.internal.nhwc:Conv`` 1/11/22, kept as
  ``Conv``, and ``com.microsoft:NhwcConv`` 1, made ``NhwcFusedConv``); with the CPU EP its input 0 must be typed
  float (float16 too on an arm64 build other than Apple's, where MLAS has fp16 vector intrinsics);
* the Conv has exactly one output edge, not into a subgraph, and produces no graph output (``CheckOutputEdges``); the
  consumer is on the same EP and is, in the ONNX domain: Relu 6/13/14, Sigmoid 6/13, Tanh 6/13, LeakyRelu 6/16,
  HardSigmoid 6/22 (CPU/JS/WebGPU/unassigned only), or Clip 6/11/12/13 whose bounds are constant
  (``GetClipConstantMinMax``: attributes before opset 11; then absent, a 1-element fp32/fp16 constant initializer,
  or a DQ of constant scalars);
* the fused node (``ReplaceWithNew``) gets the Conv's name, doc string, EP and attributes, plus ``activation`` (the
  activation's op type) and ``activation_params`` (LeakyRelu: [alpha]; Clip: [min, max]; HardSigmoid: [alpha,
  beta], 0.2/0.5 when absent; none for the others), inserted into the Conv's ``NodeAttributes`` in the iteration
  order of their own ``std::unordered_map``; inputs: all the Conv's input defs (empty ones too), outputs: all the
  activation's (which may be graph outputs);
* the Conv and the activation are then removed; a Clip's bound initializers become unused and the Resolve after
  the pass drops them.

The registry has no ``FusedConv`` key: a FusedConv followed by another activation stays as it is.
"""

from __future__ import annotations

import sys
from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import onnx

from qdqopt.events import emit_matched
from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import add_replacement_node, is_supported_op, lone_consumer
from qdqopt.passes.rules_level2 import clip_constant_min_max
from qdqopt.target import Target

__all__ = [
    "ConvActivationFusion",
    "ConvActivationSelection",
    "activation_params",
    "conv_type_ok",
    "fused_conv_attributes",
    "safely_remove_nodes",
    "select_conv_activation",
]

CPU = "CPUExecutionProvider"
ACL = "ACLExecutionProvider"
JS = "JsExecutionProvider"
WEBGPU = "WebGpuExecutionProvider"
CUDA = "CUDAExecutionProvider"
MS = "com.microsoft"
NHWC_INTERNAL = "com.ms.internal.nhwc"

#: The ``ConvAct`` registry entry: (domain, op type) -> accepted ``SinceVersion``s.
_TARGETS: dict[tuple[str, str], tuple[int, ...]] = {
    ("", "Conv"): (1, 11, 22),
    (NHWC_INTERNAL, "Conv"): (1, 11, 22),
    (MS, "NhwcConv"): (1,),
}
#: Activations every EP but CUDA accepts (Clip is checked separately: its bounds must be constant).
_ACTIVATIONS: dict[str, tuple[int, ...]] = {
    "Relu": (6, 13, 14),
    "Sigmoid": (6, 13),
    "Tanh": (6, 13),
    "LeakyRelu": (6, 16),
}
_CLIP_VERSIONS = (6, 11, 12, 13)
#: HardSigmoid is accepted on these EPs only ("" is an unassigned node).
_HARD_SIGMOID_EPS = ("", CPU, JS, WEBGPU)
_HARD_SIGMOID_VERSIONS = (6, 22)


@dataclass(frozen=True)
class ConvActivationSelection:
    """What the ``ConvAct`` selector picked: the target Conv and its lone activation consumer."""

    conv: Node
    activation: Node


def _f16_vector_intrinsics(target: Target) -> bool:
    """``MLAS_F16VEC_INTRINSICS_SUPPORTED``: ARM64 builds, except Apple's."""
    return target.machine in ("arm64", "aarch64") and sys.platform != "darwin"


def conv_type_ok(graph: Graph, conv: Node, target: Target) -> bool:
    """``ConvFusionDataTypeCheck``: with the CPU EP, input 0 is float (or float16 with fp16 MLAS intrinsics)."""
    if conv.ep != CPU:
        return True
    allowed = [onnx.TensorProto.FLOAT]
    if _f16_vector_intrinsics(target):
        allowed.append(onnx.TensorProto.FLOAT16)
    return bool(conv.inputs) and graph.elem_type(conv.inputs[0]) in allowed


def _activation_ok(graph: Graph, activation: Node, ep: str) -> bool:
    """The activation test of ``ConvActivationSelector`` for the Conv's EP (never CUDA)."""
    if ep == CUDA:
        return False
    if any(is_supported_op(activation, op, versions) for op, versions in _ACTIVATIONS.items()):
        return True
    if is_supported_op(activation, "Clip", _CLIP_VERSIONS):
        return clip_constant_min_max(graph, activation) is not None
    return ep in _HARD_SIGMOID_EPS and is_supported_op(activation, "HardSigmoid", _HARD_SIGMOID_VERSIONS)


def select_conv_activation(graph: Graph, conv: Node, target: Target) -> ConvActivationSelection | None:
    """``ConvActivationSelector::Select`` (after the registry's op key and version test): the pair, or None."""
    activation = lone_consumer(graph, conv)
    if activation is None or activation.ep != conv.ep:
        return None
    if not conv_type_ok(graph, conv, target):
        return None
    if not _activation_ok(graph, activation, conv.ep):
        return None
    return ConvActivationSelection(conv, activation)


def _fused_op(conv: Node) -> tuple[str, str]:
    """``FuseConvActivationAction::OpType`` / ``Domain``."""
    domain = normalize_domain(conv.domain)
    if domain == "":
        return "FusedConv", MS
    if domain == MS:
        return "NhwcFusedConv" if conv.op_type in ("NhwcConv", "NhwcFusedConv") else "FusedConv", MS
    return "Conv", domain


def activation_params(graph: Graph, activation: Node) -> list[float]:
    """``activation_params`` of ``FuseConvActivationAction::ExtraAttributes`` (empty: no attribute)."""
    if activation.op_type == "LeakyRelu":
        return [activation.attr_float("alpha", 0.01)]
    if activation.op_type == "Clip":
        bounds = clip_constant_min_max(graph, activation)
        assert bounds is not None, "the selector checked that the Clip bounds are constant"
        return [bounds[0], bounds[1]]
    if activation.op_type == "HardSigmoid":
        return [activation.attr_float("alpha", 0.2), activation.attr_float("beta", 0.5)]
    return []


def fused_conv_attributes(
    graph: Graph, conv: Node, activation: Node | None
) -> tuple[dict[str, onnx.AttributeProto], StdUnorderedMap]:
    """The fused node's attributes: the Conv's, then ``activation`` and ``activation_params`` (when there is an
    activation), inserted into a copy of the Conv's map in the iteration order of their own ``unordered_map``."""
    extras: dict[str, onnx.AttributeProto] = {}
    if activation is not None:
        extras["activation"] = onnx.helper.make_attribute("activation", activation.op_type)
        params = activation_params(graph, activation)
        if params:
            extras["activation_params"] = onnx.helper.make_attribute("activation_params", params)
    extra_order = StdUnorderedMap()
    extra_order.update(extras)
    attr_map = conv.attr_map.copy()
    attributes = dict(conv.attributes)
    for name in extra_order:
        attr_map.insert(name)
        attributes[name] = extras[name]
    return attributes, attr_map


_Sel = TypeVar("_Sel")


class SingleSelectorTransformer(GraphTransformer, Generic[_Sel]):
    """``SelectorActionTransformer`` with a single selector/action pair: every node of a compatible EP whose
    (domain, op type) entry in :attr:`targets` lists its ``SinceVersion`` goes to :meth:`select`; a selection is
    logged ``Matched`` (``MatchAndProcess``) and handed to :meth:`act`."""

    #: (domain, op type) -> accepted ``SinceVersion``s
    targets: ClassVar[dict[tuple[str, str], tuple[int, ...]]] = {}

    @abstractmethod
    def select(self, graph: Graph, node: Node, ctx: PassContext) -> _Sel | None:
        """The selection rooted at ``node``, or None."""

    @abstractmethod
    def act(self, graph: Graph, sel: _Sel) -> None:
        """Rewrite the selection."""

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        def visit(node: Node) -> bool:
            if not self.node_is_compatible(node):
                return False
            versions = self.targets.get((normalize_domain(node.domain), node.op_type))
            if versions is None or node.since_version not in versions:
                return False
            sel = self.select(graph, node, ctx)
            if sel is None:
                return False
            emit_matched(node.name, node.op_type)
            self.act(graph, sel)
            return True

        return self.visit_in_order(graph, ctx, graph_level, visit, ops={op for _, op in self.targets})


def safely_remove_nodes(graph: Graph, selected: list[Node]) -> None:
    """``SafelyRemoveNodes``: a selected node goes when all its output edges stay inside the selection (the last
    node's edges have moved to the fused node)."""
    members = {n.index for n in selected}
    for member in selected:
        if graph.node(member.index) is not None and all(e.dst in members for e in graph.output_edges(member)):
            graph.remove_node(member)


def fuse_conv_activation(graph: Graph, sel: ConvActivationSelection) -> Node:
    """``FuseConvActivationAction`` (a ``ReplaceWithNew``): add the fused node, then remove the Conv and activation."""
    conv, activation = sel.conv, sel.activation
    attributes, attr_map = fused_conv_attributes(graph, conv, activation)
    op_type, domain = _fused_op(conv)
    fused = add_replacement_node(
        graph,
        conv,
        op_type,
        list(conv.inputs),
        list(activation.outputs),
        domain=domain,
        attributes=attributes,
        attr_map=attr_map,
    )
    safely_remove_nodes(graph, [conv, activation])
    return fused


class ConvActivationFusion(SingleSelectorTransformer[ConvActivationSelection]):
    """Fuse Conv + Relu/Sigmoid/Tanh/LeakyRelu/HardSigmoid/constant Clip into ``com.microsoft.FusedConv``."""

    name = "ConvActivationFusion"
    compatible_eps = (CPU, ACL, JS, WEBGPU)

    targets = _TARGETS

    def select(self, graph: Graph, node: Node, ctx: PassContext) -> ConvActivationSelection | None:
        return select_conv_activation(graph, node, ctx.target)

    def act(self, graph: Graph, sel: ConvActivationSelection) -> None:
        fuse_conv_activation(graph, sel)
