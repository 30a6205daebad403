"""GeluFusion: the erf form of Gelu becomes one Gelu node (``gelu_fusion.cc``; registered twice, as
``GeluFusionL1`` at Level1 for any EP and ``GeluFusionL2`` at Level2 for the CPU EP)::

    pattern 1                                             pattern 2
       +------------- Mul(0.5) -----------+                  +----------------------------+
       |                                  v                  |                            v
    [x] -> Div(sqrt 2) -> Erf -> Add(1) -> Mul -> y       [x] -> Div(sqrt 2) -> Erf -> Add(1) -> Mul -> Mul(0.5) -> y

    after:  [x] -> Gelu -> y      (com.microsoft.Gelu below ONNX opset 20, ONNX Gelu from opset 20 on)

Rules (ORT 1.32):

* which instance works: from ONNX opset 20 on (the graph's ai.onnx import) the Level1 instance fuses into the ONNX
  domain's Gelu and the Level2 instance does nothing; below opset 20 the Level1 instance does nothing and the Level2
  instance fuses into ``com.microsoft`` Gelu (the Level1 instance's contrib-op switch is off in a session);
* every graph, each node's subgraphs first, nodes in one topological snapshot;
* the Div (7, 13, 14) is on a compatible EP, has exactly one output edge, not into a subgraph, and no graph output
  (``CheckOutputEdges``), and the type of each of its inputs is float16, float or double; its input 1 is a constant
  scalar initializer equal (within FLT_EPSILON) to sqrt(2) as a float or to 1.4142099618911743 (a BERT export's
  approximation);
* the Div's consumer is an Erf (9, 13), then an Add (7, 13, 14), each on the Div's EP, with one output edge and no
  graph output, of those input types; the Add's other input (the one that is not the Erf's output) is a constant
  scalar 1;
* the Add's consumer is a Mul (7, 13, 14) on the Div's EP with those input types (its output edges do not matter);
* pattern 1 when that Mul has a producer that is a Mul (its first, input edges in ``EdgeEndCompare`` order): that
  Mul (7, 13, 14, the Div's EP, one output edge, no graph output, the input types) reads the Div's input 0 and a
  constant scalar 0.5 (the input that is not the first slot reading x). If x itself is made by a Mul that comes
  first, that Mul is taken, fails the checks, and nothing is fused;
* pattern 2 otherwise: the Mul has one output edge and no graph output, reads x, and its consumer is a Mul (7, 13,
  14; ORT checks the first Mul's EP and types again instead of this one's) whose other input is a constant scalar
  0.5;
* the new node: ``GenerateNodeName("Gelu")``, doc string "fused Gelu subgraphs ", input x, the last Mul's outputs,
  no attributes, the Div's EP; the five nodes are removed (``FinalizeNodeFusion``).
"""

from __future__ import annotations

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import LevelledTransformer, PassContext
from qdqopt.passes.graph_utils import (
    check_output_edges,
    finalize_nodes_fusion,
    first_parent_by_type,
    is_supported_op,
    output_nodes,
)
from qdqopt.passes.qdq_util import (
    index_of_node_input,
    is_initializer_with_expected_value,
    is_supported_data_type,
)

__all__ = ["GeluFusion", "GeluFusionL1", "GeluFusionL2"]

MS_DOMAIN = "com.microsoft"
_BINARY = (7, 13, 14)
_TYPES = ("tensor(float16)", "tensor(float)", "tensor(double)")
_SQRT2 = 1.4142135623730951
_SQRT2_APPROX = 1.4142099618911743
#: the first ai.onnx opset with a Gelu of its own
ONNX_GELU_OPSET = 20


class GeluFusion(LevelledTransformer):
    """Fuse ``x * 0.5 * (1 + erf(x / sqrt(2)))`` into one Gelu (the level-dependent instances below)."""

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        opset = graph.opset("")
        onnx_gelu = opset is not None and opset >= ONNX_GELU_OPSET
        if (self.level == 1) != onnx_gelu:  # L1 fuses only into ONNX's Gelu, L2 only below opset 20
            return False
        domain = "" if onnx_gelu else MS_DOMAIN
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node, domain), ops=("Div",))

    def _fuse(self, graph: Graph, div: Node, domain: str) -> bool:
        if (
            not is_supported_op(div, "Div", _BINARY)
            or not self.node_is_compatible(div)
            or not check_output_edges(graph, div, 1)
            or not is_supported_data_type(graph, div, _TYPES)
        ):
            return False
        divisor = div.inputs[1]
        if not is_initializer_with_expected_value(
            graph, divisor, _SQRT2_APPROX
        ) and not is_initializer_with_expected_value(graph, divisor, _SQRT2):
            return False
        found = self._match(graph, div)
        if isinstance(found, NoMatch):
            emit_no_match(found, div.name)
            return False
        gelu = graph.add_node(
            graph.generate_node_name("Gelu"),
            "Gelu",
            [div.inputs[0]],
            [""],
            domain=domain,
            doc_string="fused Gelu subgraphs ",
            ep=div.ep,
        )
        finalize_nodes_fusion(graph, found, gelu)
        emit_fused(div.name, "Gelu", gelu.name, domain)
        return True

    def _step(self, graph: Graph, node: Node, div: Node, op: str, versions: tuple[int, ...]) -> str:
        """Why ``node`` is not the next node of the chain (an ``op`` with one output edge), or ''."""
        if not is_supported_op(node, op, versions):
            return f"{node.op_type} {node.name!r} is not {op} {list(versions)}"
        if node.ep != div.ep:
            return f"{op} {node.name!r} is not on the Div's EP"
        if not check_output_edges(graph, node, 1):
            return f"{op} {node.name!r} has a graph output or more than one output edge"
        if not is_supported_data_type(graph, node, _TYPES):
            return f"{op} {node.name!r} has an input that is not float16, float or double"
        return ""

    def _match(self, graph: Graph, div: Node) -> list[Node] | NoMatch:
        erf = output_nodes(graph, div)[0]
        why = self._step(graph, erf, div, "Erf", (9, 13))
        if why:
            return NoMatch(why, (erf.name,))
        add = output_nodes(graph, erf)[0]
        why = self._step(graph, add, div, "Add", _BINARY)
        if why:
            return NoMatch(why, (add.name,))
        one = add.inputs[1 if add.inputs[0] == erf.outputs[0] else 0]
        if not is_initializer_with_expected_value(graph, one, 1.0):
            return NoMatch(f"the other input of Add {add.name!r} is not a constant scalar 1", (add.name,))
        mul = output_nodes(graph, add)[0]
        if not is_supported_op(mul, "Mul", _BINARY) or mul.ep != div.ep:
            return NoMatch(f"{mul.op_type} {mul.name!r} after the Add is not a Mul on the Div's EP", (mul.name,))
        if not is_supported_data_type(graph, mul, _TYPES):
            return NoMatch(f"Mul {mul.name!r} has an input that is not float16, float or double", (mul.name,))
        root = div.inputs[0]
        mul2 = first_parent_by_type(graph, mul, "Mul")
        if mul2 is not None:  # pattern 1: x * 0.5 computed first
            why = self._step(graph, mul2, div, "Mul", _BINARY)
            if why:
                return NoMatch(why + " (the first Mul producing an input of the last Mul)", (mul2.name,))
            root_index = index_of_node_input(mul2, root)
            if root_index < 0:
                return NoMatch(f"Mul {mul2.name!r} does not read the Div's input 0", (mul2.name,))
            half = mul2.inputs[1 if root_index == 0 else 0]
            if not is_initializer_with_expected_value(graph, half, 0.5):
                return NoMatch(f"the other input of Mul {mul2.name!r} is not a constant scalar 0.5", (mul2.name,))
            return [div, erf, add, mul2, mul]
        # pattern 2: (x * (1 + erf)) * 0.5
        if not check_output_edges(graph, mul, 1):
            return NoMatch(f"Mul {mul.name!r} has a graph output or more than one output edge", (mul.name,))
        if index_of_node_input(mul, root) < 0:
            return NoMatch(f"Mul {mul.name!r} does not read the Div's input 0", (mul.name,))
        mul2 = output_nodes(graph, mul)[0]
        if not is_supported_op(mul2, "Mul", _BINARY):
            return NoMatch(f"{mul2.op_type} {mul2.name!r} after the Mul is not a Mul {list(_BINARY)}", (mul2.name,))
        half = mul2.inputs[1 if mul2.inputs[0] == mul.outputs[0] else 0]
        if not is_initializer_with_expected_value(graph, half, 0.5):
            return NoMatch(f"the other input of Mul {mul2.name!r} is not a constant scalar 0.5", (mul2.name,))
        return [div, erf, add, mul, mul2]


class GeluFusionL1(GeluFusion, level=1):
    """The Level1 instance (any EP): fuses only when the graph imports ai.onnx 20 or later, into ONNX's Gelu."""


class GeluFusionL2(GeluFusion, level=2, eps=("CPUExecutionProvider",)):
    """The Level2 instance (CPU EP): fuses only below ai.onnx 20, into ``com.microsoft`` Gelu."""
