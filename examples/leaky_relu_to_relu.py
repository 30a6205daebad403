"""An example pass of one's own: ``LeakyRelu`` with ``alpha == 0`` is a ``Relu``.

ORT has no such pass. Placed at Level2 right before ``ReluQuantRewrite`` (so before the rule-based transformer
that holds that rule), it turns such a LeakyRelu into a Relu, which ORT's own passes then treat as any Relu:
between a DequantizeLinear and a QuantizeLinear whose zero point is the type's minimum, ``ReluQuantRewrite`` drops it::

    DQ -> LeakyRelu(alpha=0) -> Q      ==>      DQ -> Relu -> Q      ==(ReluQuantRewrite)==>      DQ -> Q

Use it with ``qdqopt trace model.onnx --level extended --plugin examples/leaky_relu_to_relu.py:LeakyReluZeroToRelu``
(or ``--plugin leaky_relu_to_relu:LeakyReluZeroToRelu`` with ``examples/`` on ``PYTHONPATH``), and switch it off
with ``--disable LeakyReluZeroToRelu``. ``docs/adding_a_pass.md`` walks through it.
"""

from __future__ import annotations

from qdqopt.graph import Graph, Node
from qdqopt.passes import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import is_supported_op

__all__ = ["LeakyReluZeroToRelu"]


class LeakyReluZeroToRelu(GraphTransformer):
    """``LeakyRelu(x, alpha=0)`` -> ``Relu(x)``, same name, inputs, outputs and execution provider."""

    #: the name in the trace and for ``--disable``: it must not be one of ORT's
    name = "LeakyReluZeroToRelu"
    #: where it goes: right before this ORT pass or rule (or ``after = ...``, or ``level = "extended"`` alone)
    before = "ReluQuantRewrite"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._rewrite(graph, node))

    def _rewrite(self, graph: Graph, node: Node) -> bool:
        if not is_supported_op(node, "LeakyRelu", (6, 16)) or not self.node_is_compatible(node):
            return False
        if node.attr_float("alpha", 0.01) != 0.0:  # ONNX's default alpha is 0.01
            return False
        name, inputs, outputs, ep = node.name, list(node.inputs), list(node.outputs), node.ep
        graph.remove_node(node)
        graph.add_node(name, "Relu", inputs, outputs, ep=ep)
        return True
