"""SkipLayerNormFusion: ``Add (+ bias Add) -> LayerNormalization`` becomes com.microsoft SkipLayerNormalization
(``skip_layer_norm_fusion.cc``, Level2, CPU EP)::

    format 1: Add(Add(a, bias), b) -> LN       format 2: Add(a, Add(b, bias)) -> LN       format 3: Add(a, b) -> LN
    after:    a, b, gamma, beta[, bias] -> SkipLayerNormalization (epsilon) -> the LN's outputs

Rules (ORT 1.32):

* every node in one topological snapshot, subgraphs first; a candidate is a LayerNormalization (1 or 17, ai.onnx
  domain) on a compatible EP whose inputs are all float16, float or bfloat16;
* formats tried in order 1, 2, 3 by the LN's input 0 edge (``FindPath``); the first Add (7, 13, 14) has the LN's
  EP, supported types, one output edge, no graph output, and two 3-D inputs whose dims agree one by one (equal
  ``dim_value``, or both the same ``dim_param``); the bias Add (formats 1 and 2) likewise one output edge and no
  graph output, input 1 a constant of shape ``[C]`` and input 0 of rank 3 whose last dim is ``C``;
* the LN's ``axis`` is not looked at (an LN over axis 1 is fused all the same: an ORT bug);
* rewrite: inputs (a, b, gamma, beta or "", bias for formats 1 and 2), a Cast to float inserted before each input
  whose type differs when the LN's output is float (``GenerateNodeName(<input>_Cast)`` writing
  ``GenerateNodeArgName(<input>_Float)``); the node ``GenerateNodeName(SkipLayerNormalization)``, doc string
  ``"fused SkipLayerNorm subgraphs "``, the LN's outputs, attribute ``epsilon`` (the LN's attribute as it is, else
  1e-12), the LN's EP; the Adds and the LN go.
"""

from __future__ import annotations

import onnx

from qdqopt.events import emit_fused
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    EdgeToMatch,
    add_cast,
    edge_path,
    find_path,
    is_constant,
    is_supported_op,
    node_produces_graph_output,
)

__all__ = ["SkipLayerNormFusion"]

_TP = onnx.TensorProto
SUPPORTED_TYPES = (_TP.FLOAT16, _TP.FLOAT, _TP.BFLOAT16)
#: ``contrib::kDefaultSkipLayerNormEpsilon``
DEFAULT_EPSILON = 1e-12
MS_DOMAIN = "com.microsoft"
_ADD = (7, 13, 14)
FORMATS: tuple[tuple[EdgeToMatch, ...], ...] = (
    edge_path(("Add", _ADD), ("Add", _ADD)),
    edge_path(("Add", _ADD), ("Add@1", _ADD)),
    edge_path(("Add", _ADD)),
)


def epsilon_attribute(node: Node) -> onnx.AttributeProto:
    """The node's ``epsilon``, or SkipLayerNormalization's default 1e-12 when it has none."""
    epsilon = node.attributes.get("epsilon")
    return epsilon if epsilon is not None else onnx.helper.make_attribute("epsilon", DEFAULT_EPSILON)


def replace_with_skip_layer_norm(
    graph: Graph,
    candidate: Node,
    remove: list[Node],
    inputs: list[str],
    attributes: dict[str, onnx.AttributeProto],
    doc_string: str,
) -> None:
    """The rewrite SkipLayerNormFusion and BiasSkipLayerNormFusion end with: ``remove`` goes (``candidate``, the
    LayerNormalization or SkipLayerNormalization, among them), a com.microsoft SkipLayerNormalization
    ``GenerateNodeName("SkipLayerNormalization")`` takes ``candidate``'s outputs and EP."""
    outputs, ep = list(candidate.outputs), candidate.ep
    for node in remove:
        graph.remove_node(node)
    fused = graph.add_node(
        graph.generate_node_name("SkipLayerNormalization"),
        "SkipLayerNormalization",
        inputs,
        outputs,
        domain=MS_DOMAIN,
        attributes=attributes,
        doc_string=doc_string,
        ep=ep,
    )
    emit_fused(candidate.name, "SkipLayerNormalization", fused.name, MS_DOMAIN)


def _supported(graph: Graph, node: Node) -> bool:
    return all(graph.elem_type(name) in SUPPORTED_TYPES for name in node.inputs)


def _first_add_ok(graph: Graph, add: Node, ep: str) -> bool:
    """``CheckFirstAdd``: two 3-D inputs with matching dims."""
    if add.ep != ep or not _supported(graph, add) or graph.output_edge_count(add) != 1:
        return False
    # dim_param names compared as written (ONNX's unk__<n> names included)
    a, b = graph.shape(add.inputs[0], as_written=True), graph.shape(add.inputs[1], as_written=True)
    if a is None or b is None or len(a) != 3 or len(b) != 3:
        return False
    for da, db in zip(a, b, strict=True):
        if isinstance(da, int) and isinstance(db, int) and da == db:
            continue
        if not (isinstance(da, str) and isinstance(db, str) and da == db):
            return False
    return True


def _bias_add_ok(graph: Graph, add: Node, ep: str) -> bool:
    """``CheckSecondAdd``: input 1 a constant ``[C]``, input 0 of rank 3 ending in ``C``."""
    if add.ep != ep or not _supported(graph, add) or graph.output_edge_count(add) != 1:
        return False
    if not is_constant(graph, add.inputs[1]):
        return False
    a, b = graph.shape(add.inputs[0]), graph.shape(add.inputs[1])
    if a is None or b is None or len(a) != 3 or len(b) != 1:
        return False
    return isinstance(a[2], int) and isinstance(b[0], int) and a[2] == b[0]


class SkipLayerNormFusion(GraphTransformer):
    """Fuse the residual Add (and a bias Add) in front of a LayerNormalization into SkipLayerNormalization."""

    name = "SkipLayerNormFusion"
    compatible_eps = ("CPUExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("LayerNormalization",)
        )

    def _match(self, graph: Graph, ln: Node) -> tuple[int, Node, Node | None] | None:
        for fmt, path in enumerate(FORMATS, start=1):
            found = find_path(graph, ln, True, path)
            if found is None:
                continue
            add1 = found[0]
            add2 = found[1] if len(found) > 1 else None
            if not _first_add_ok(graph, add1, ln.ep) or node_produces_graph_output(graph, add1):
                continue
            if add2 is not None and (not _bias_add_ok(graph, add2, ln.ep) or node_produces_graph_output(graph, add2)):
                continue
            return fmt, add1, add2
        return None

    def _fuse(self, graph: Graph, ln: Node) -> bool:
        if not is_supported_op(ln, "LayerNormalization", (1, 17)) or not self.node_is_compatible(ln):
            return False
        if not _supported(graph, ln):
            return False
        found = self._match(graph, ln)
        if found is None:
            return False
        fmt, add1, add2 = found
        inputs = [add1.inputs[0], add1.inputs[1], ln.inputs[1], ln.inputs[2] if len(ln.inputs) > 2 else ""]
        remove = [add1, ln]
        if add2 is not None:
            inputs[0 if fmt == 1 else 1] = add2.inputs[0]
            inputs.append(add2.inputs[1])
            remove.insert(0, add2)
        out_type = graph.elem_type(ln.outputs[0])
        inputs = [self._cast_to_float(graph, name, out_type, ln.ep) for name in inputs]
        attributes = {"epsilon": epsilon_attribute(ln)}
        replace_with_skip_layer_norm(graph, ln, remove, inputs, attributes, "fused SkipLayerNorm subgraphs ")
        return True

    def _cast_to_float(self, graph: Graph, name: str, out_type: int | None, ep: str) -> str:
        """``CastToFloat``: a Cast to float before an input whose type is not the (float) output type."""
        if not name:
            return name
        elem = graph.elem_type(name)
        if elem is None or elem == out_type or out_type != _TP.FLOAT:
            return name
        dims = graph.shape(name, as_written=True) or []
        return add_cast(graph, name, _TP.FLOAT, dims, name + "_Float", name + "_Cast", "Cast Input to float", ep)
