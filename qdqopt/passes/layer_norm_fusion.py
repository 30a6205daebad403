"""LayerNormFusion and SimplifiedLayerNormFusion: a decomposed LayerNorm / RMSNorm becomes one node
(``layer_norm_fusion.cc``).

LayerNormFusion (two instances: ``LayerNormFusionL1`` at Level1, ``LayerNormFusionL2`` at Level2)::

    before                                                                     after
    X -> ReduceMean -> Sub(X, mean) -> Pow -> ReduceMean -> Add(eps) -> Sqrt     X, scale, bias -> LayerNormalization
                         |                                              |         (axis, epsilon) -> Y
                         +--------------------------------------> Div(sub, sqrt) -> Mul(scale) -> Add(bias) -> Y

Accepted variants (ORT 1.32): two Subs reading the mean (older PyTorch exports: Pow reads one, Div the other); a
Cast before the first ReduceMean read only by it and the Subs (removed: the fused node reads the Cast's input); a
Cast after the Sub (``Sub -> Cast -> Pow and Div``); a Cast as one of the Pow's inputs (removed); a Cast between
Div and Mul (Apex O2, removed); ReduceMean axes as the ``axes`` attribute or, from opset 18, a constant input.

Rules:

* the two instances split by the model's ai.onnx opset: LayerNormalization is an ONNX op from opset 17, so the
  Level1 instance fuses when the opset is >= 17 (into ``LayerNormalization``-17) and does nothing below; the
  Level2 instance (CPU EP only) fuses when the opset is < 17 (into ORT's own ``LayerNormalization``-1, ai.onnx
  domain too) and does nothing from 17 on. Level1 runs before partitioning, so its nodes have no EP yet;
* every node in one topological snapshot, subgraphs first; a candidate is a ReduceMean (1, 11, 13, 18) whose
  output is no graph output, with one or two output edges that all go to Subs; every node of the chain has the
  ReduceMean's EP and float16, float or bfloat16 inputs (the ReduceMeans: their data input only; ORT 1.32 never
  fuses a double chain) and the version sets of ORT's file (Sub/Div/Add/Mul 7, 13, 14; Sqrt 6, 13; Pow 7, 12,
  13, 15; Cast 9 .. 25);
* the Sub's (and the second Sub's) other input is the ReduceMean's input; the Sub has two output edges (one if a
  Cast follows it or there are two Subs); the Div is the Sub's (or Cast's, or second Sub's) first Div child, with
  one output edge; the Sqrt is the Div's first Sqrt parent, the Add its first parent, the second ReduceMean the
  Add's first ReduceMean parent, the Pow the second ReduceMean's first parent, each with one output edge and no
  graph output; the Pow's first Cast parent (one output edge) or else its first Sub parent (one of the Subs);
  the Div's first child (a Cast with one output edge is skipped) is the Mul (one output edge), the Mul's first
  child the last Add (not checked for other consumers: its outputs move to the fused node);
* the axes of both ReduceMeans (attribute, else a constant initializer input; none means all: refused) sorted,
  made negative with the input's rank when the largest is positive (unknown rank: refused), consecutive, ending
  at -1, equal for both and, in this inference build, a single axis;
* the scale is the last Mul input of rank 1 (known shape), the bias the last such Add input, and their
  ``dim_value`` agree (no constant check);
* on the CPU EP a float16 input is refused (no kernel);
* rewrite: ``GenerateNodeName(<Mul's name>/LayerNormFusion/)``, doc string ``"fused LayerNorm subgraphs "``,
  inputs (X, scale, bias), attributes ``epsilon`` (the first value of the Add's input 1 if that is a constant
  float initializer, else 1e-5: an epsilon given as the Add's input 0 is ignored) and ``axis`` (the normalised
  negative axis); EP of the ReduceMean; the chain's nodes go and the last Add's outputs move to the new node.
  A Cast that changed the type between X and the scale/bias (float16 X, Apex O2 tails) makes LayerNormalization-17's
  single type T inconsistent: ORT fuses anyway and then fails the session (qdqopt raises ``ModelError``).

SimplifiedLayerNormFusion (Level2, CPU EP), the RMSNorm form::

    X -> Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div(X, sqrt) -> Mul(scale) -> Y     X, scale ->
                                                                                    SimplifiedLayerNormalization -> Y

Rules: a Pow (7, 12, 13, 15) with one output edge and no graph output; its first ReduceMean child, that one's
first Add child, its first Sqrt child, its first Div child (each with one output edge, the Pow's EP and supported
types); the Div's input 0 is the Pow's input 0; a Cast between Div and Mul is refused on the CPU EP; the Mul (not
checked for other consumers) is the Div's first child; axes as above; the scale is the last Mul input of rank 1;
no float16 input on the CPU EP. The node is ``GenerateNodeName(<Mul's name>/SimplifiedLayerNormFusion/)``
(ai.onnx domain, ORT's own op), inputs (X, scale), attributes ``epsilon`` then ``axis``.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, LevelledTransformer, PassContext
from qdqopt.passes.graph_utils import (
    check_output_edges,
    constant_initializer,
    finalize_nodes_fusion,
    first_child_by_type,
    first_parent_by_type,
    input_edge_count,
    input_node,
    is_supported_op,
    node_produces_graph_output,
    output_nodes,
)
from qdqopt.passes.qdq_util import constant_array

__all__ = ["LayerNormFusion", "LayerNormFusionL1", "LayerNormFusionL2", "SimplifiedLayerNormFusion"]

_CPU = "CPUExecutionProvider"
_TP = onnx.TensorProto
#: the element types ``IsSupportedDataType`` accepts in ORT 1.32 (double chains are never fused: observed)
SUPPORTED_TYPES = (_TP.FLOAT16, _TP.FLOAT, _TP.BFLOAT16)
DEFAULT_EPSILON = 1e-5
REDUCE_MEAN = (1, 11, 13, 18)
BINARY = (7, 13, 14)
SQRT = (6, 13)
POW = (7, 12, 13, 15)
CAST = (9, 13, 19, 21, 23, 24, 25)


def supported_data_type(graph: Graph, node: Node, first_n_inputs: int = -1) -> bool:
    """``IsSupportedDataType``: every input (or the first ``first_n_inputs``) is a tensor of a supported type."""
    for i, name in enumerate(node.inputs):
        if first_n_inputs != -1 and i >= first_n_inputs:
            return True
        if graph.elem_type(name) not in SUPPORTED_TYPES:
            return False
    return True


def reduce_mean_axes(graph: Graph, node: Node) -> list[int]:
    """``GetAxesFromReduceMeanNode``: the ``axes`` attribute, else a constant initializer input; [] if neither."""
    axes = node.attr_ints("axes")
    if axes is not None:
        return list(axes)
    if len(node.inputs) == 2:
        found = constant_array(graph, node.inputs[1])
        if found is not None:
            return [int(v) for v in found.reshape(-1)]
    return []


def check_axes(axes: list[int], rank: int) -> list[int] | None:
    """``CheckAxesOnReduceMean``: the axes sorted and made negative (from the rank, when the largest is positive);
    None unless they are consecutive and end at the last dim."""
    values = sorted(axes)
    if values[-1] > 0:
        if rank == -1:
            return None
        values = sorted(v - rank if v >= 0 else v for v in values)
    if any(b != a + 1 for a, b in itertools.pairwise(values)) or values[-1] != -1:
        return None
    return values


def divides_pow_input(div: Node, pow_node: Node) -> bool:
    """SimplifiedLayerNormFusion: the Div's input 0 is the Pow's input 0 (the same NodeArg)."""
    return bool(div.inputs) and bool(pow_node.inputs) and div.inputs[0] == pow_node.inputs[0]


def _other_input(node: Node, value: str) -> str:
    """``GetOtherInput``: the input of a two-input node that is not ``value`` ("" if none)."""
    if len(node.inputs) != 2:
        return ""
    if node.inputs[0] == value:
        return node.inputs[1]
    return node.inputs[0] if node.inputs[1] == value else ""


def _fuse(
    graph: Graph,
    nodes: list[Node],
    op_type: str,
    name_base: str,
    inputs: list[str],
    eps_add: Node,
    variance: Node,
    axis: int,
    ep: str,
) -> str:
    """The fused node both fusions add (epsilon from the Add beside the variance, the normalised axis, ORT's doc
    string), then ``FinalizeNodeFusion`` over the matched nodes."""
    fused = graph.add_node(
        graph.generate_node_name(name_base),
        op_type,
        inputs,
        [""],
        attributes={
            "epsilon": _epsilon_attribute(graph, eps_add, variance.outputs[0]),
            "axis": onnx.helper.make_attribute("axis", axis),
        },
        doc_string="fused LayerNorm subgraphs ",
        ep=ep,
    )
    finalize_nodes_fusion(graph, nodes, fused)
    return fused.name


def _epsilon_attribute(graph: Graph, add: Node, variance: str) -> onnx.AttributeProto:
    """``epsilon``: the Add's other input (beside the variance) when it is a constant float, float16 or bfloat16
    initializer (its first value, as float), else the default."""
    value = DEFAULT_EPSILON
    name = _other_input(add, variance)
    found = constant_initializer(graph, name) if name else None
    if found is not None and found[1].data_type in SUPPORTED_TYPES:
        array = constant_array(graph, name)
        if array is not None and array.size:
            value = float(np.asarray(array.reshape(-1)[0], dtype=np.float32))
    return onnx.helper.make_attribute("epsilon", value)


def _last_rank1_input(graph: Graph, node: Node, rank: int) -> str | None:
    """The last input of ``node`` whose known shape has ``rank`` dims (ORT's scale/bias pick)."""
    found: str | None = None
    for name in node.inputs:
        shape = graph.shape(name)
        if shape is not None and len(shape) == rank:
            found = name
    return found


class LayerNormFusion(LevelledTransformer):
    """Fuse ``ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add`` into LayerNormalization
    (ORT registers it twice: :class:`LayerNormFusionL1` and :class:`LayerNormFusionL2`)."""

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        opset = graph.opset("")
        fuse_in_level_1 = opset is not None and opset >= 17
        if (self.level == 1) != fuse_in_level_1:  # L1 fuses at opset >= 17 only, L2 below 17 only
            return False
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("ReduceMean",))

    def _fuse(self, graph: Graph, rm1: Node) -> bool:
        if not is_supported_op(rm1, "ReduceMean", REDUCE_MEAN) or not self.node_is_compatible(rm1):
            return False
        if graph.output_edge_count(rm1) not in (1, 2) or node_produces_graph_output(graph, rm1):
            return False
        if not supported_data_type(graph, rm1, 1):
            return False
        children = output_nodes(graph, rm1)
        if any(c.op_type != "Sub" for c in children):
            return False
        found = self._match(graph, rm1, children)
        if isinstance(found, NoMatch):
            emit_no_match(found, rm1.name)
            return False
        nodes, x, scale, bias, add2, rm2, axis = found
        mul = next(n for n in nodes if n.op_type == "Mul")
        self._check_types(graph, mul, x, scale, bias)
        fused = _fuse(
            graph,
            nodes,
            "LayerNormalization",
            mul.name + "/LayerNormFusion/",
            [x, scale, bias],
            add2,
            rm2,
            axis,
            rm1.ep,
        )
        emit_fused(rm1.name, "LayerNormalization", fused)
        return True

    def _check_types(self, graph: Graph, mul: Node, x: str, scale: str, bias: str) -> None:
        """LayerNormalization-17 binds one type T to X, scale and bias (ORT's own LayerNormalization-1 does not):
        a chain whose Casts change the type between X and the scale fuses all the same, and ORT then fails the
        session when it resolves the graph."""
        opset = graph.opset("")
        if opset is None or opset < 17:
            return
        found = {graph.elem_type(v) for v in (x, scale, bias)}
        if len(found) > 1:
            name = mul.name + "/LayerNormFusion/"
            raise ModelError(
                f"LayerNormFusion: Type parameter (T) of Optype (LayerNormalization) bound to different types in "
                f"node ({name}) (ORT fails the session)"
            )

    def _match(
        self, graph: Graph, rm1: Node, subs: list[Node]
    ) -> tuple[list[Node], str, str, str, Node, Node, int] | NoMatch:
        ep = rm1.ep
        mean = rm1.outputs[0]

        def ok(node: Node, op_type: str, versions: tuple[int, ...], first_n: int = -1) -> bool:
            return (
                is_supported_op(node, op_type, versions) and node.ep == ep and supported_data_type(graph, node, first_n)
            )

        sub, dup = subs[0], (subs[1] if len(subs) == 2 else None)
        if not ok(sub, "Sub", BINARY):
            return NoMatch("Sub after ReduceMean not supported (version, EP or type)", (sub.name,))
        remove: list[Node] = [rm1, sub]
        x_in = rm1.inputs[0]
        for s in (sub, dup):
            if s is None:
                continue
            other = next((v for v in s.inputs if v != mean), None)
            if other is None or other != x_in:
                return NoMatch("the Sub does not read the ReduceMean's input", (s.name,))
        leading = input_node(graph, rm1, 0)
        has_leading_cast = False
        if (
            leading is not None
            and is_supported_op(leading, "Cast", CAST)
            and leading.ep == ep
            and check_output_edges(graph, leading, len(subs) + 1)
        ):
            remove.insert(0, leading)
            has_leading_cast = True
        cast1: Node | None = None
        if dup is None and graph.output_edge_count(sub) == 1:
            cand = output_nodes(graph, sub)[0]
            if (
                is_supported_op(cand, "Cast", CAST)
                and cand.ep == ep
                and check_output_edges(graph, cand, 2)
                and supported_data_type(graph, cand)
            ):
                cast1 = cand
                remove.append(cand)
        if not check_output_edges(graph, sub, 2 if dup is None and cast1 is None else 1):
            return NoMatch("the Sub's output edges are not the pattern's", (sub.name,))
        div = first_child_by_type(graph, cast1 or sub, "Div")
        if dup is not None:
            # ORT checks the first Sub's output edges again here, not the second Sub's
            if not ok(dup, "Sub", BINARY) or not check_output_edges(graph, sub, 1):
                return NoMatch("second Sub not supported", (dup.name,))
            remove.append(dup)
            if div is None:
                div = first_child_by_type(graph, dup, "Div")
        if div is None:
            return NoMatch("no Div after the Sub")
        if not ok(div, "Div", BINARY) or not check_output_edges(graph, div, 1):
            return NoMatch("Div not supported or used outside the pattern", (div.name,))
        remove.append(div)

        def parent_and_input(
            child: Node,
            op_type: str,
            versions: tuple[int, ...],
            feeding: str,
            feeding_versions: tuple[int, ...],
            first_n: int = -1,
        ) -> tuple[Node, Node] | NoMatch:
            """The first ``op_type`` parent of ``child`` (used by it alone), then the node its first input edge
            comes from, a ``feeding`` op (used by it alone); both appended to ``remove``."""
            parent = first_parent_by_type(graph, child, op_type)
            if parent is None:
                return NoMatch(f"no {op_type} before the {child.op_type}", (child.name,))
            if not ok(parent, op_type, versions, first_n) or not check_output_edges(graph, parent, 1):
                return NoMatch(f"{op_type} not supported or used outside the pattern", (parent.name,))
            if input_edge_count(graph, parent) == 0:
                return NoMatch(f"{op_type} has no input edge", (parent.name,))
            remove.append(parent)
            source = graph.node(graph.input_edges(parent)[0].src)
            assert source is not None
            if not ok(source, feeding, feeding_versions) or not check_output_edges(graph, source, 1):
                article = "an" if feeding[0] in "AEIOU" else "a"
                return NoMatch(f"the {op_type}'s input is not {article} {feeding} used by it alone", (source.name,))
            remove.append(source)
            return parent, source

        # Div <- Sqrt <- Add (epsilon) <- ReduceMean <- Pow
        found = parent_and_input(div, "Sqrt", SQRT, "Add", BINARY)
        if isinstance(found, NoMatch):
            return found
        add2 = found[1]
        found = parent_and_input(add2, "ReduceMean", REDUCE_MEAN, "Pow", POW, first_n=1)
        if isinstance(found, NoMatch):
            return found
        rm2, pow_node = found
        cast2 = first_parent_by_type(graph, pow_node, "Cast")
        if cast2 is not None and cast2 is not cast1:
            if not is_supported_op(cast2, "Cast", CAST) or cast2.ep != ep or not check_output_edges(graph, cast2, 1):
                return NoMatch("Cast before the Pow not supported", (cast2.name,))
            remove.append(cast2)
        elif cast2 is None:
            sub2 = first_parent_by_type(graph, pow_node, "Sub")
            if sub2 is None or (sub2 is not sub and sub2 is not dup):
                return NoMatch("the Pow does not read the Sub", (pow_node.name,))
        nxt = output_nodes(graph, div)[0]
        if is_supported_op(nxt, "Cast", CAST) and check_output_edges(graph, nxt, 1):
            remove.append(nxt)
            nxt = output_nodes(graph, nxt)[0]
        mul = nxt
        if not ok(mul, "Mul", BINARY) or not check_output_edges(graph, mul, 1):
            return NoMatch("Mul after the Div not supported or used outside the pattern", (mul.name,))
        remove.append(mul)
        last_add = output_nodes(graph, mul)[0]
        if not ok(last_add, "Add", BINARY):
            return NoMatch("the Mul's consumer is not a supported Add", (last_add.name,))
        remove.append(last_add)
        axes1, axes2 = reduce_mean_axes(graph, rm1), reduce_mean_axes(graph, rm2)
        if not axes1 or not axes2:
            return NoMatch("ReduceMean without axes (all axes) is not a LayerNorm")
        x_shape = graph.shape(rm1.inputs[0])
        rank = -1 if x_shape is None else len(x_shape)
        norm1, norm2 = check_axes(axes1, rank), check_axes(axes2, rank)
        if norm1 is None or norm2 is None or norm1 != norm2:
            return NoMatch("ReduceMean axes are not the same trailing axes", (rm2.name,))
        if len(norm1) != 1:
            return NoMatch("more than one axis: scale and bias would not be 1-D")
        scale = _last_rank1_input(graph, mul, 1)
        bias = _last_rank1_input(graph, last_add, 1)
        if scale is None or bias is None:
            return NoMatch("no 1-D scale or bias", (mul.name, last_add.name))
        scale_shape, bias_shape = graph.shape(scale), graph.shape(bias)
        assert scale_shape is not None and bias_shape is not None
        scale_dim, bias_dim = scale_shape[0], bias_shape[0]
        if (scale_dim if isinstance(scale_dim, int) else 0) != (bias_dim if isinstance(bias_dim, int) else 0):
            return NoMatch("scale and bias have different shapes", (mul.name, last_add.name))
        x = leading.inputs[0] if has_leading_cast and leading is not None else rm1.inputs[0]
        if ep == _CPU and graph.elem_type(x) == _TP.FLOAT16:
            return NoMatch("CPU has no float16 LayerNormalization")
        return remove, x, scale, bias, add2, rm2, norm1[0]


class LayerNormFusionL1(LayerNormFusion, level=1):
    """The Level1 instance: any EP (none is assigned yet); fuses only at ai.onnx opset >= 17."""


class LayerNormFusionL2(
    LayerNormFusion, level=2, eps=(_CPU, "ACLExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")
):
    """The Level2 instance: CPU EP; fuses only below ai.onnx opset 17 (into ORT's LayerNormalization-1)."""


class SimplifiedLayerNormFusion(GraphTransformer):
    """Fuse ``Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul`` into SimplifiedLayerNormalization."""

    name = "SimplifiedLayerNormFusion"
    compatible_eps = (_CPU, "CUDAExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Pow",))

    def _fuse(self, graph: Graph, pow_node: Node) -> bool:
        if not is_supported_op(pow_node, "Pow", POW) or not self.node_is_compatible(pow_node):
            return False
        if not check_output_edges(graph, pow_node, 1) or not supported_data_type(graph, pow_node):
            return False
        found = self._match(graph, pow_node)
        if found is None:
            return False
        if isinstance(found, NoMatch):
            emit_no_match(found, pow_node.name)
            return False
        nodes, scale, add, rm, axis = found
        mul = nodes[-1]
        base = mul.name + "/SimplifiedLayerNormFusion/"
        fused = _fuse(
            graph, nodes, "SimplifiedLayerNormalization", base, [pow_node.inputs[0], scale], add, rm, axis, rm.ep
        )
        emit_fused(pow_node.name, "SimplifiedLayerNormalization", fused)
        return True

    def _match(self, graph: Graph, pow_node: Node) -> tuple[list[Node], str, Node, Node, int] | NoMatch | None:
        ep = pow_node.ep

        def ok(node: Node, op_type: str, versions: tuple[int, ...], first_n: int = -1) -> bool:
            return (
                is_supported_op(node, op_type, versions)
                and node.ep == ep
                and check_output_edges(graph, node, 1)
                and supported_data_type(graph, node, first_n)
            )

        rm = first_child_by_type(graph, pow_node, "ReduceMean")
        if rm is None:
            return None
        if not ok(rm, "ReduceMean", REDUCE_MEAN, 1) or input_edge_count(graph, rm) == 0:
            return NoMatch("ReduceMean not supported or used outside the pattern", (rm.name,))
        add = first_child_by_type(graph, rm, "Add")
        if add is None or not ok(add, "Add", BINARY):
            return NoMatch("no supported epsilon Add after the ReduceMean", (rm.name,))
        sqrt = first_child_by_type(graph, add, "Sqrt")
        if sqrt is None or not ok(sqrt, "Sqrt", SQRT) or input_edge_count(graph, sqrt) == 0:
            return NoMatch("no supported Sqrt after the epsilon Add", (add.name,))
        div = first_child_by_type(graph, sqrt, "Div")
        if div is None or not ok(div, "Div", BINARY):
            return NoMatch("no supported Div after the Sqrt", (sqrt.name,))
        if not divides_pow_input(div, pow_node):
            return NoMatch("the Div does not divide the Pow's input", (div.name,))
        nxt = output_nodes(graph, div)[0]
        if is_supported_op(nxt, "Cast", CAST) and check_output_edges(graph, nxt, 1):
            return NoMatch("a Cast between Div and Mul (GPU only)", (nxt.name,))
        mul = nxt
        if not is_supported_op(mul, "Mul", BINARY) or mul.ep != ep or not supported_data_type(graph, mul):
            return NoMatch("the Div's consumer is not a supported Mul", (mul.name,))
        axes = reduce_mean_axes(graph, rm)
        if not axes:
            return NoMatch("ReduceMean without axes (all axes) is not a LayerNorm", (rm.name,))
        x_shape = graph.shape(rm.inputs[0])
        norm = check_axes(axes, -1 if x_shape is None else len(x_shape))
        if norm is None or len(norm) != 1:
            return NoMatch("ReduceMean axes are not the last axis alone", (rm.name,))
        scale = _last_rank1_input(graph, mul, 1)
        if scale is None:
            return NoMatch("no 1-D scale", (mul.name,))
        if rm.ep == _CPU and graph.elem_type(pow_node.inputs[0]) == _TP.FLOAT16:
            return NoMatch("CPU has no float16 SimplifiedLayerNormalization")
        return [pow_node, rm, add, sqrt, div, mul], scale, add, rm, norm[0]
