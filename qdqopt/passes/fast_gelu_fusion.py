"""FastGeluFusion: the tanh approximation of Gelu becomes ``com.microsoft.FastGelu`` (``fast_gelu_fusion.cc``,
Level2, CPU EP)::

    formula 1:  x -> Mul(0.044715) -> Mul(x) -> Add(1) -> Mul <- Mul(0.7978845834732056, x)
    formula 2:  x -> Pow(3) -> Mul(0.044714998453855515) -> Add(x) -> Mul(0.7978845834732056)
    then:       -> Tanh -> Add(1) -> Mul <- Mul(0.5, x) -> y

    after:      x -> FastGelu -> y

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; each node is tried as the start of
  formula 1, then of formula 2;
* "checked" below: on the start node's EP, every input of type float when that EP is the CPU's (float16, float or
  bfloat16 elsewhere), no graph output, and (where said) exactly one output edge;
* formula 1 starts at a Mul (7, 13, 14) on a compatible EP with one output edge (a graph output is not checked) and
  float inputs, reading a constant scalar 0.044715 (input 0 tried first) and x; then a checked Mul reading x, a
  checked Add whose other input is a constant scalar 1, a checked Mul; that Mul's other producer (through an edge) is
  a checked Mul (7, 13, 14; some ORT sources check the previous Mul's op type twice here, 1.32 does not) reading a
  constant scalar 0.7978845834732056 and x;
* formula 2 starts at a Pow (7, 12, 13, 15) on a compatible EP with one output edge and float inputs whose exponent
  is a constant scalar 3; then a checked Mul by a constant scalar 0.044714998453855515, a checked Add reading x
  (the Pow's input 0), a checked Mul by a constant scalar 0.7978845834732056. If the Pow's first producer is a Cast,
  that Cast (9, 13, 19, as read; not observable on the CPU EP, see below; checked, any number of edges) must have
  exactly two output edges, its first Pow child the Pow and its first Add child the Add; the final Mul's first Cast
  producer (checked) is then fused too, and the half Mul is that Cast's first Mul producer, reading the first Cast's
  input. On the CPU EP this branch never fuses: a float-to-float Cast is gone after Level1's CastElimination, and
  from any other type the half Mul reads a non-float x, so it fails the float-only type check (or is not on the CPU
  EP at all);
* then a checked Tanh (6, 13), a checked Add whose other input is a constant scalar 1, and the final Mul (7, 13, 14,
  checked but with any number of output edges: the graph output check makes a pattern whose result is a graph
  output unfusable); its other input comes from a Mul (checked, any edges) reading a constant scalar 0.5 and x;
* the new node: a NodeArg ``GenerateNodeArgName("fast_gelu_output")`` is made and left unused, the node is
  ``GenerateNodeName("GPT2Gelu")``, doc string "fused GPT2Gelu subgraphs ", input x, the final Mul's outputs, the
  start node's EP; every matched node is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    finalize_nodes_fusion,
    first_child_by_type,
    first_parent_by_type,
    input_node,
    is_supported_op,
    node_produces_graph_output,
    output_edge_count,
    output_nodes,
)
from qdqopt.passes.qdq_util import (
    index_of_node_input,
    is_initializer_with_expected_value,
    is_supported_data_type,
)

__all__ = ["FastGeluFusion"]

MS_DOMAIN = "com.microsoft"
CPU = "CPUExecutionProvider"
_BINARY = (7, 13, 14)
_CAST = (9, 13, 19)
_CPU_TYPES = ("tensor(float)",)
_OTHER_TYPES = ("tensor(float16)", "tensor(float)", "tensor(bfloat16)")


@dataclass
class _Match:
    nodes: list[Node]
    x: str
    tanh_input: Node


class FastGeluFusion(GraphTransformer):
    """Fuse ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` into one FastGelu."""

    name = "FastGeluFusion"
    compatible_eps = (CPU,)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Mul", "Pow"))

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _types_ok(graph: Graph, node: Node) -> bool:
        return is_supported_data_type(graph, node, _CPU_TYPES if node.ep == CPU else _OTHER_TYPES)

    def _check(self, graph: Graph, node: Node, ep: str, single: bool) -> bool:
        """``CheckNode``."""
        return (
            node.ep == ep
            and self._types_ok(graph, node)
            and (not single or output_edge_count(graph, node) == 1)
            and not node_produces_graph_output(graph, node)
        )

    def _start(self, graph: Graph, node: Node, op: str, versions: tuple[int, ...]) -> bool:
        return (
            is_supported_op(node, op, versions)
            and self.node_is_compatible(node)
            and output_edge_count(graph, node) == 1
            and self._types_ok(graph, node)
        )

    @staticmethod
    def _constant_slot(graph: Graph, node: Node, value: float) -> int:
        for slot in range(2):
            if is_initializer_with_expected_value(graph, node.inputs[slot], value):
                return slot
        return -1

    @staticmethod
    def _other(node: Node, value: str) -> str:
        """The input of a binary node that is not the first slot reading ``value``."""
        return node.inputs[(index_of_node_input(node, value) + 1) % 2]

    def _first_formula(self, graph: Graph, mul1: Node) -> _Match | NoMatch | None:
        if not self._start(graph, mul1, "Mul", _BINARY):
            return None
        slot = self._constant_slot(graph, mul1, 0.044715)
        if slot < 0:
            return None
        x = mul1.inputs[(slot + 1) % 2]
        ep = mul1.ep
        mul2 = output_nodes(graph, mul1)[0]
        if not (is_supported_op(mul2, "Mul", _BINARY) and self._check(graph, mul2, ep, True)) or (
            self._other(mul2, mul1.outputs[0]) != x
        ):
            return NoMatch(f"{mul2.op_type} {mul2.name!r} is not a Mul by x with one output edge", (mul2.name,))
        add1 = output_nodes(graph, mul2)[0]
        if not (is_supported_op(add1, "Add", _BINARY) and self._check(graph, add1, ep, True)) or (
            not is_initializer_with_expected_value(graph, self._other(add1, mul2.outputs[0]), 1.0)
        ):
            return NoMatch(f"{add1.op_type} {add1.name!r} is not an Add of a constant scalar 1", (add1.name,))
        mul3 = output_nodes(graph, add1)[0]
        if not (is_supported_op(mul3, "Mul", _BINARY) and self._check(graph, mul3, ep, True)):
            return NoMatch(
                f"{mul3.op_type} {mul3.name!r} after the Add is not a Mul with one output edge", (mul3.name,)
            )
        mul4 = input_node(graph, mul3, (index_of_node_input(mul3, add1.outputs[0]) + 1) % 2)
        if mul4 is None:
            return NoMatch(f"the other input of Mul {mul3.name!r} has no producer", (mul3.name,))
        if not (is_supported_op(mul4, "Mul", _BINARY) and self._check(graph, mul4, ep, True)):
            return NoMatch(f"{mul4.op_type} {mul4.name!r} is not a Mul with one output edge", (mul4.name,))
        slot = self._constant_slot(graph, mul4, 0.7978845834732056)
        if slot < 0 or mul4.inputs[(slot + 1) % 2] != x:
            return NoMatch(f"{mul4.op_type} {mul4.name!r} does not read 0.7978845834732056 and x", (mul4.name,))
        return _Match([mul1, mul2, add1, mul3, mul4], x, mul3)

    def _second_formula(self, graph: Graph, pow1: Node) -> _Match | NoMatch | None:
        if not self._start(graph, pow1, "Pow", (7, 12, 13, 15)):
            return None
        if not is_initializer_with_expected_value(graph, pow1.inputs[1], 3.0):
            return None
        x = pow1.inputs[0]
        ep = pow1.ep
        mul1 = output_nodes(graph, pow1)[0]
        if not (is_supported_op(mul1, "Mul", _BINARY) and self._check(graph, mul1, ep, True)) or (
            not is_initializer_with_expected_value(graph, self._other(mul1, pow1.outputs[0]), 0.044714998453855515)
        ):
            return NoMatch(f"{mul1.op_type} {mul1.name!r} is not a Mul by a constant scalar 0.044715", (mul1.name,))
        add1 = output_nodes(graph, mul1)[0]
        if not (is_supported_op(add1, "Add", _BINARY) and self._check(graph, add1, ep, True)) or (
            self._other(add1, mul1.outputs[0]) != x
        ):
            return NoMatch(f"{add1.op_type} {add1.name!r} is not an Add of x", (add1.name,))
        cast1 = first_parent_by_type(graph, pow1, "Cast")
        if cast1 is not None:
            if (
                not (is_supported_op(cast1, "Cast", _CAST) and self._check(graph, cast1, ep, False))
                or output_edge_count(graph, cast1) != 2
            ):
                return NoMatch(f"Cast {cast1.name!r} before the Pow fails the checks", (cast1.name,))
            pow_child = first_child_by_type(graph, cast1, "Pow")
            add_child = first_child_by_type(graph, cast1, "Add")
            if pow_child is None or pow_child.index != pow1.index or add_child is None or add_child.index != add1.index:
                return NoMatch(f"Cast {cast1.name!r} does not feed the Pow and the Add", (cast1.name,))
        mul2 = output_nodes(graph, add1)[0]
        if not (is_supported_op(mul2, "Mul", _BINARY) and self._check(graph, mul2, ep, True)) or (
            not is_initializer_with_expected_value(graph, self._other(mul2, add1.outputs[0]), 0.7978845834732056)
        ):
            return NoMatch(
                f"{mul2.op_type} {mul2.name!r} is not a Mul by a constant scalar 0.7978845834732056", (mul2.name,)
            )
        return _Match([pow1, mul1, add1, mul2], x, mul2)

    # ------------------------------------------------------------------ the rest and the rewrite
    def _fuse(self, graph: Graph, node: Node) -> bool:
        second = False
        found = self._first_formula(graph, node)
        if not isinstance(found, _Match):
            other = self._second_formula(graph, node)
            if other is not None:
                found, second = other, True
        if found is None:
            return False
        if isinstance(found, _Match):
            found = self._finish(graph, node, found, second)
        if isinstance(found, NoMatch):
            emit_no_match(found, node.name)
            return False
        graph.generate_value_name("fast_gelu_output")  # made (typed as the start node's output) and left unused
        fast_gelu = graph.add_node(
            graph.generate_node_name("GPT2Gelu"),
            "FastGelu",
            [found.x],
            [""],
            domain=MS_DOMAIN,
            doc_string="fused GPT2Gelu subgraphs ",
            ep=node.ep,
        )
        finalize_nodes_fusion(graph, found.nodes, fast_gelu)
        emit_fused(node.name, "FastGelu", fast_gelu.name, MS_DOMAIN)
        return True

    def _finish(self, graph: Graph, node: Node, found: _Match, second: bool) -> _Match | NoMatch:
        ep = node.ep
        tanh = output_nodes(graph, found.tanh_input)[0]
        if not (is_supported_op(tanh, "Tanh", (6, 13)) and self._check(graph, tanh, ep, True)):
            return NoMatch(f"{tanh.op_type} {tanh.name!r} is not a Tanh with one output edge", (tanh.name,))
        add2 = output_nodes(graph, tanh)[0]
        if not (is_supported_op(add2, "Add", _BINARY) and self._check(graph, add2, ep, True)):
            return NoMatch(f"{add2.op_type} {add2.name!r} after the Tanh is not an Add", (add2.name,))
        if not is_initializer_with_expected_value(graph, self._other(add2, tanh.outputs[0]), 1.0):
            return NoMatch(f"the other input of Add {add2.name!r} is not a constant scalar 1", (add2.name,))
        mul5 = output_nodes(graph, add2)[0]
        if not (is_supported_op(mul5, "Mul", _BINARY) and self._check(graph, mul5, ep, False)):
            return NoMatch(f"{mul5.op_type} {mul5.name!r} is not a Mul without graph output", (mul5.name,))
        mul6 = input_node(graph, mul5, (index_of_node_input(mul5, add2.outputs[0]) + 1) % 2)
        if mul6 is None:
            return NoMatch(f"the other input of Mul {mul5.name!r} has no producer", (mul5.name,))
        nodes = list(found.nodes)
        cast_input = ""
        if second:
            cast1 = first_parent_by_type(graph, node, "Cast")
            if cast1 is not None:
                cast_input = cast1.inputs[0]
                cast3 = first_parent_by_type(graph, mul5, "Cast")
                if cast3 is None:
                    return NoMatch(f"Mul {mul5.name!r} has no Cast producer", (mul5.name,))
                if not (is_supported_op(cast3, "Cast", _CAST) and self._check(graph, cast3, ep, True)):
                    return NoMatch(f"Cast {cast3.name!r} fails the checks", (cast3.name,))
                mul6 = first_parent_by_type(graph, cast3, "Mul")
                nodes.append(cast3)
                if mul6 is None:
                    return NoMatch(f"Cast {cast3.name!r} has no Mul producer", (cast3.name,))
        if not (is_supported_op(mul6, "Mul", _BINARY) and self._check(graph, mul6, ep, False)):
            return NoMatch(f"{mul6.op_type} {mul6.name!r} is not the Mul by 0.5", (mul6.name,))
        slot = self._constant_slot(graph, mul6, 0.5)
        if slot < 0 or mul6.inputs[(slot + 1) % 2] != (cast_input or found.x):
            return NoMatch(f"Mul {mul6.name!r} does not read a constant scalar 0.5 and x", (mul6.name,))
        nodes += [tanh, add2, mul6, mul5]
        return _Match(nodes, found.x, found.tanh_input)
