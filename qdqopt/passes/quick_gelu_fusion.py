"""QuickGeluFusion: ``x * Sigmoid(alpha * x)`` and ``x * Sigmoid(x)`` (SiLU / Swish) become ``com.microsoft``
QuickGelu (``quick_gelu_fusion.cc``, Level2, CPU EP)::

    before                                            after
    x --> Mul(alpha) --> Sigmoid --> Mul --> y         x --> QuickGelu(alpha) --> y
    |                                 ^
    +---------------------------------+                (x --> Sigmoid --> Mul(x): alpha = 1)

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot;
* a node that is a Mul (7, 13, 14) on a compatible EP with exactly one output edge and an input (slot 0 first) that
  is a scalar (``IsScalar``) constant initializer of type float, double or float16 gives alpha (that value as a
  float) and x (its other input); its consumer must then be the Sigmoid. Any other node is itself the Sigmoid
  candidate, with alpha 1 and x its input;
* the Sigmoid (6, 13) is on a compatible EP with exactly one output edge, and its consumer is a Mul (7, 13, 14) on a
  compatible EP whose other input (the one not in the first slot reading the Sigmoid's output) is x;
* no graph-output checks and no type checks;
* the new node: ``GenerateNodeName(<last Mul's name> + "/QuickGeluFusion/")`` (observed on 1.32; older sources
  name it ``GenerateNodeName("QuickGelu")``), doc string "QuickGelu", input x, the last Mul's output, float
  attribute ``alpha``, domain ``com.microsoft``, the first node's EP; the matched nodes are removed.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import finalize_nodes_fusion, is_supported_op, output_edge_count, output_nodes
from qdqopt.passes.qdq_util import constant_array, constant_initializer, index_of_node_input, is_scalar_arg

__all__ = ["QuickGeluFusion"]

MS_DOMAIN = "com.microsoft"
_BINARY = (7, 13, 14)
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


class QuickGeluFusion(GraphTransformer):
    """Fuse ``x * Sigmoid(alpha * x)`` into one QuickGelu."""

    name = "QuickGeluFusion"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Mul", "Sigmoid")
        )

    def _alpha(self, graph: Graph, node: Node) -> tuple[int, np.float32] | None:
        """The slot and value of the Mul's scalar floating-point constant, if it has one."""
        if (
            not is_supported_op(node, "Mul", _BINARY)
            or not self.node_is_compatible(node)
            or output_edge_count(graph, node) != 1
        ):
            return None
        for slot, value in enumerate(node.inputs):
            if not is_scalar_arg(graph, value):
                continue
            tensor = constant_initializer(graph, value)
            if tensor is None or tensor.data_type not in _FLOATS:
                continue
            array = constant_array(graph, value)
            assert array is not None
            return slot, np.float32(array.reshape(-1)[0])
        return None

    def _fuse(self, graph: Graph, node: Node) -> bool:
        nodes: list[Node] = []
        alpha = np.float32(1.0)
        x = ""
        sigmoid = node
        found = self._alpha(graph, node)
        if found is not None:
            slot, alpha = found
            x = node.inputs[(slot + 1) % 2]
            nodes.append(node)
            sigmoid = output_nodes(graph, node)[0]
        if (
            not is_supported_op(sigmoid, "Sigmoid", (6, 13))
            or not self.node_is_compatible(sigmoid)
            or output_edge_count(graph, sigmoid) != 1
        ):
            if found is not None:
                emit_no_match(
                    NoMatch(
                        f"{sigmoid.op_type} {sigmoid.name!r} after the scaling Mul is not a Sigmoid with one "
                        "output edge",
                        (sigmoid.name,),
                    ),
                    node.name,
                )
            return False
        nodes.append(sigmoid)
        x = x or sigmoid.inputs[0]
        mul = output_nodes(graph, sigmoid)[0]
        other = mul.inputs[(index_of_node_input(mul, sigmoid.outputs[0]) + 1) % 2] if len(mul.inputs) >= 2 else ""
        if not is_supported_op(mul, "Mul", _BINARY) or not self.node_is_compatible(mul) or other != x:
            emit_no_match(
                NoMatch(f"{mul.op_type} {mul.name!r} is not a Mul of the Sigmoid and x", (mul.name,)), node.name
            )
            return False
        nodes.append(mul)
        quick = graph.add_node(
            graph.generate_node_name(mul.name + "/QuickGeluFusion/"),
            "QuickGelu",
            [x],
            [""],
            domain=MS_DOMAIN,
            attributes={"alpha": onnx.helper.make_attribute("alpha", float(alpha))},
            doc_string="QuickGelu",
            ep=node.ep,
        )
        finalize_nodes_fusion(graph, nodes, quick)
        emit_fused(node.name, "QuickGelu", quick.name, MS_DOMAIN)
        return True
