"""ConvAddActivationFusion: a float Conv + Add (+ activation) becomes ``com.microsoft.FusedConv`` with a Sum input.

``conv_add_act_fusion.cc``, registered at Level3 (``ORT_ENABLE_LAYOUT``, hence also ``ORT_ENABLE_ALL``) for the CPU
EP only, after NchwcTransformer and NhwcTransformer (which take most float Convs first on x86). It is a
``SelectorActionTransformer`` with one registry entry, ``ConvAddAct``, keyed on ``Conv`` (1/11/22) and
``com.microsoft:NhwcFusedConv`` (same version list, so only version 1 matters)::

    X ─> Conv(W, B) ─> c ─┐                              X ─> FusedConv(X, W, B, Z) ─> y
                          Add(c, Z) ─> s ─> Relu ─> y          activation="Relu"
    Z ────────────────────┘                                   (name, doc and EP of the Conv)

    X ─> Conv(W, B) ─> c ─> Add(Z, c) ─> s ─> Abs       X ─> FusedConv(X, W, B, Z) ─> s ─> Abs
                                                              (no activation attribute)

Rules (ORT 1.32, CPU EP):

* every graph, subgraphs first (per node); the nodes of one topological snapshot, removed ones skipped; the visited
  node must be on the CPU EP, be ``Conv`` of version 1, 11 or 22 (ONNX domain) or ``NhwcFusedConv`` (MS domain),
  and its input 0 must be typed float (float16 too on an arm64 build other than Apple's);
* the visited node has exactly one output edge, not into a subgraph, and produces no graph output
  (``CheckOutputEdges``); its consumer is an ONNX ``Add`` of version 7, 13 or 14;
* ``SelectProducerConv`` on that Add: exactly 2 input defs; both NodeArgs have a 4-D shape; every dim of input 0
  is a value other than 0 or a symbol; input 1 has, dim by dim, the same value, or the same symbol as input 0 (so
  no broadcasting, and an unknown dim fails); then, over the Add's producers in input-edge order (producer index),
  the first that is a ``Conv`` (any domain) or ``NhwcFusedConv`` with fewer than 4 input defs, no ``activation``
  attribute and exactly one output edge, and that has 3 input defs (a Conv without bias slot is skipped; an empty
  bias slot counts), is the *target*. It need not be the visited node: when both Add inputs come from Convs, the
  first eligible one is fused, whichever was visited;
* the activation is the Add's lone consumer (``CheckOutputEdges(add, 1)`` again) if it is, in the ONNX domain,
  Relu 6/13/14, Sigmoid 6/13, Tanh 6/13, LeakyRelu 6/16, HardSigmoid 6/22 or Clip 6/11/12/13 with constant bounds
  (``GetClipConstantMinMax``); otherwise (another op, several consumers, the Add is a graph output) Conv + Add are
  fused alone. No EP is checked on the Add, the activation or the target;
* the fused node (``ReplaceWithNew``): op ``NhwcFusedConv`` if the target has a non-zero ``channels_last``
  attribute, ``FusedConv`` for a ``Conv``, else the target's op type; domain ``com.microsoft``; the target's name,
  doc string, EP and attributes, plus ``activation`` (the activation's op type) and ``activation_params``
  (LeakyRelu: [alpha]; Clip: [min, max]; HardSigmoid: [alpha, beta], 0.2/0.5 when absent), inserted in the
  iteration order of their own ``std::unordered_map``, exactly as ConvActivationFusion does; inputs: the target's 3
  input defs, then the Add's other input (``1 - dst slot`` of the target's output edge) as ``Z``; outputs: the
  activation's, or the Add's;
* ``SafelyRemoveNodes``: the target, the Add and the activation go (each has no output edge left outside the
  selection); the Clip bounds' initializers become unused and the Resolve after the pass drops them.

ORT does not check the target for graph outputs (only its edge count): when the target is not the visited Conv and
its output is also a graph output, ORT fuses anyway, the graph output loses its producer and session creation fails
("Failed to find node output or a constant initializer producing output"); qdqopt removes the target just the same.

The registry has no ``FusedConv`` key: a Conv that ConvActivationFusion (Level2) already fused with an activation
stays as it is, and a FusedConv is never a target (its op type is not ``Conv``).
"""

from __future__ import annotations

from dataclasses import dataclass

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import PassContext
from qdqopt.passes.conv_activation_fusion import (
    SingleSelectorTransformer,
    conv_type_ok,
    fused_conv_attributes,
    safely_remove_nodes,
)
from qdqopt.passes.graph_utils import add_replacement_node, is_supported_op, lone_consumer
from qdqopt.passes.rules_level2 import clip_constant_min_max

__all__ = ["ConvAddActivationFusion", "ConvAddActivationSelection", "select_conv_add_activation"]

CPU = "CPUExecutionProvider"
MS = "com.microsoft"

#: The ``ConvAddAct`` registry entry: (domain, op type) -> accepted ``SinceVersion``s.
_TARGETS: dict[tuple[str, str], tuple[int, ...]] = {
    ("", "Conv"): (1, 11, 22),
    (MS, "NhwcFusedConv"): (1, 11, 22),
}
_ADD_VERSIONS = (7, 13, 14)
#: Activations accepted whatever their parameters (Clip is checked separately: its bounds must be constant).
_ACTIVATIONS: dict[str, tuple[int, ...]] = {
    "Relu": (6, 13, 14),
    "Sigmoid": (6, 13),
    "Tanh": (6, 13),
    "LeakyRelu": (6, 16),
    "HardSigmoid": (6, 22),
}
_CLIP_VERSIONS = (6, 11, 12, 13)
#: ``kTensorDims``: the Add inputs must be NCHW tensors.
_RANK = 4
#: What ``SelectProducerConv`` takes as a producer (its other limit, on the number of formal inputs, 4 for Conv and 5
#: for NhwcFusedConv, always holds: they have 3 and 4).
_PRODUCERS = ("Conv", "NhwcFusedConv")


@dataclass(frozen=True)
class ConvAddActivationSelection:
    """What the ``ConvAddAct`` selector picked: the target Conv, the Add, and the activation if any."""

    conv: Node
    add: Node
    activation: Node | None


def _param(dim: int | str | None) -> str | None:
    """The dim's symbol (:data:`~qdqopt.graph.ShapeDims` has none for ONNX inference's ``unk__<n>``)."""
    return dim if isinstance(dim, str) else None


def _value(dim: int | str | None) -> int:
    """``dim_value()``: 0 when the dim holds no value."""
    return dim if isinstance(dim, int) else 0


def _shapes_match(graph: Graph, add: Node) -> bool:
    """The shape test of ``SelectProducerConv``: two 4-D inputs, dim by dim equal (values, or symbols)."""
    first = graph.shape(add.inputs[0])
    if first is None or len(first) != _RANK:
        return False
    for dim in first:
        if _value(dim) == 0 and _param(dim) is None:
            return False
    for name in add.inputs[1:]:
        other = graph.shape(name)
        if other is None or len(other) != _RANK:
            return False
        for d0, dn in zip(first, other, strict=True):
            if not isinstance(dn, int) or _value(d0) != _value(dn):
                p0, pn = _param(d0), _param(dn)
                if p0 is None or pn is None or p0 != pn:
                    return False
    return True


def _producer_ok(graph: Graph, producer: Node) -> bool:
    """A Conv / NhwcFusedConv (any domain) with no Sum input, no fused activation yet, and one output edge."""
    return (
        producer.op_type in _PRODUCERS
        and len(producer.inputs) < 4
        and "activation" not in producer.attributes
        and graph.output_edge_count(producer) == 1
    )


def select_producer_conv(graph: Graph, add: Node) -> Node | None:
    """``ConvAddActivationSelector::SelectProducerConv``: the Conv whose output the Add may absorb, or None."""
    producers = graph.input_nodes(add)
    if len(add.inputs) != 2 or len(producers) > len(add.inputs):
        return None
    if not _shapes_match(graph, add):
        return None
    for producer in producers:
        if not _producer_ok(graph, producer):
            continue
        if len(producer.inputs) < 3:  # no bias slot: ORT has no empty argument to pass, try the next producer
            continue
        return producer
    return None


def _activation_ok(graph: Graph, node: Node) -> bool:
    """``ConvAddActivationSelector::SelectActivation`` (any EP)."""
    if any(is_supported_op(node, op, versions) for op, versions in _ACTIVATIONS.items()):
        return True
    return is_supported_op(node, "Clip", _CLIP_VERSIONS) and clip_constant_min_max(graph, node) is not None


def select_conv_add_activation(graph: Graph, node: Node, ctx: PassContext) -> ConvAddActivationSelection | None:
    """``ConvAddActivationSelector::Select`` (after the registry's op key and version test)."""
    if node.ep != CPU or not conv_type_ok(graph, node, ctx.target):
        return None
    add = lone_consumer(graph, node)
    if add is None or not is_supported_op(add, "Add", _ADD_VERSIONS):
        return None
    conv = select_producer_conv(graph, add)
    if conv is None:
        return None
    activation = lone_consumer(graph, add)
    if activation is not None and not _activation_ok(graph, activation):
        activation = None
    return ConvAddActivationSelection(conv, add, activation)


def _fused_op_type(conv: Node) -> str:
    """``FuseConvAddActivationAction::OpType`` (the domain is always ``com.microsoft``)."""
    channels_last = conv.attributes.get("channels_last")
    if channels_last is not None and channels_last.i != 0:
        return "NhwcFusedConv"
    return "FusedConv" if conv.op_type == "Conv" else conv.op_type


def fuse_conv_add_activation(graph: Graph, sel: ConvAddActivationSelection) -> Node:
    """``FuseConvAddActivationAction`` (a ``ReplaceWithNew``): add the fused node, then remove the selected nodes."""
    conv, add, activation = sel.conv, sel.add, sel.activation
    attributes, attr_map = fused_conv_attributes(graph, conv, activation)
    # ValueMoves: the Add input the Conv does not feed becomes the Sum input Z
    (edge,) = graph.output_edges(conv)
    z = add.inputs[1 - edge.dst_slot]
    last = activation if activation is not None else add
    fused = add_replacement_node(
        graph,
        conv,
        _fused_op_type(conv),
        [*conv.inputs, z],
        list(last.outputs),
        domain=MS,
        attributes=attributes,
        attr_map=attr_map,
    )
    safely_remove_nodes(graph, [conv, add] + ([activation] if activation is not None else []))
    return fused


class ConvAddActivationFusion(SingleSelectorTransformer[ConvAddActivationSelection]):
    """Fuse Conv + Add (+ Relu/Sigmoid/Tanh/LeakyRelu/HardSigmoid/constant Clip) into ``FusedConv`` with ``Z``."""

    name = "ConvAddActivationFusion"
    compatible_eps = (CPU,)

    targets = _TARGETS

    def select(self, graph: Graph, node: Node, ctx: PassContext) -> ConvAddActivationSelection | None:
        return select_conv_add_activation(graph, node, ctx)

    def act(self, graph: Graph, sel: ConvAddActivationSelection) -> None:
        fuse_conv_add_activation(graph, sel)
