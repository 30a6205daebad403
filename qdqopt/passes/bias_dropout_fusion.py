"""BiasDropoutFusion: ``Add(x, bias) -> Dropout [-> Add(., residual)]`` becomes one com.microsoft BiasDropout
(``bias_dropout_fusion.cc``, Level2)::

    before                                                    after
    x, bias -> Add -> Dropout(ratio, training_mode) -> d       x, bias, residual|"", ratio, training_mode
                                |-> mask                           -> BiasDropout -> (d or r, mask)
                      d, residual -> Add -> r   (optional)

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is an Add (7, 13, 14)
  on a compatible EP, with one output edge and no graph output;
* the compatible EPs are the CUDA EP's only (ORT registers the transformer for it alone): **in a CPU session the
  pass never changes a graph** and ORT logs ``BiasDropoutFusion modified: 0``; the rules below are for a
  CUDA-assigned graph;
* both Add inputs have a known shape of rank >= 1; the same shape dim by dim (``operator==``): inputs (in0, in1);
  otherwise their last dims are the same known value or the same symbol, and one input is 1-D: that one is the bias
  (second), the other the data (first); else no fusion;
* the Add's consumer is a Dropout (12, 13) or com.microsoft BitmaskDropout (1) on the Add's EP;
* a Dropout (not Bitmask) whose second output (the mask) is not a graph output and is read by exactly one
  com.microsoft DropoutGrad (1) on the Add's EP: the fused node writes a new ``GenerateNodeArgName(
  "dropout_bitmask_output")`` (uint32) in place of the mask, and the DropoutGrad becomes a com.microsoft
  BitmaskDropoutGrad (``GenerateNodeName("BitmaskDropoutGrad")``, doc ``"BitmaskDropoutGrad replace for <name>"``,
  inputs (dy, the bitmask, the DropoutGrad's inputs from 2 on), its outputs, attributes and EP); otherwise a
  second Dropout output stays as it is. DropoutGrad is a training op: the inference build of 1.32 has no schema
  for it (nor for BitmaskDropoutGrad), so a model holding one does not load and this branch is unreachable there;
  it is kept as the source has it;
* residual Add: when at most one edge leaves the Dropout's output 0 and the Dropout produces no graph output, the
  first consumer (edge order) that is an Add (7, 13, 14) on the Dropout's EP with both input shapes known, of
  rank >= 1 and equal: its other input is the residual (third input) and its output replaces the Dropout's
  output 0; without one the third input is empty. "Produces a graph output" covers the mask too: a Dropout whose
  mask is a graph output never takes its residual Add along;
* then the Dropout's ratio and training_mode inputs (as many as it has);
* the node: ``BiasDropout`` (``BitmaskBiasDropout`` for a BitmaskDropout or a DropoutGrad),
  ``GenerateNodeName(op)``, doc ``"fused Add-Dropout-(Add) for <Dropout's name>"``, the Dropout's attributes,
  domain com.microsoft, the Dropout's EP; the Add, the Dropout, the DropoutGrad and the residual Add go.
"""

from __future__ import annotations

import onnx

from qdqopt.graph import Graph, Node, ShapeDims, dims_equal
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import is_supported_op, lone_consumer, node_produces_graph_output, output_nodes

__all__ = ["BiasDropoutFusion"]

MS_DOMAIN = "com.microsoft"
_ADD = (7, 13, 14)


def same_shape(a: ShapeDims, b: ShapeDims) -> bool:
    """``IsSameShape``: the same rank and every dim equal (ORT's ``operator==`` on dims)."""
    return len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b, strict=True))


def _same_last_dim(a: int | str | None, b: int | str | None) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return isinstance(a, str) and isinstance(b, str) and a == b


def _shapes(graph: Graph, node: Node) -> tuple[ShapeDims, ShapeDims] | None:
    """Both input shapes, each known and of rank >= 1 (dim_param names as written: ONNX's unk__<n> too)."""
    a, b = graph.shape(node.inputs[0], as_written=True), graph.shape(node.inputs[1], as_written=True)
    if not a or not b:
        return None
    return a, b


class BiasDropoutFusion(GraphTransformer):
    """Fuse a bias Add, the Dropout after it and an optional residual Add into BiasDropout (CUDA-assigned only)."""

    name = "BiasDropoutFusion"
    compatible_eps = ("CUDAExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Add",))

    def _fuse(self, graph: Graph, add: Node) -> bool:
        if not is_supported_op(add, "Add", _ADD) or not self.node_is_compatible(add):
            return False
        dropout = lone_consumer(graph, add)
        shapes = _shapes(graph, add)
        if dropout is None or shapes is None:
            return False
        a, b = shapes
        if same_shape(a, b):
            inputs = [add.inputs[0], add.inputs[1]]
        elif not _same_last_dim(a[-1], b[-1]):
            return False
        elif len(a) == 1:
            inputs = [add.inputs[1], add.inputs[0]]
        elif len(b) == 1:
            inputs = [add.inputs[0], add.inputs[1]]
        else:
            return False
        is_bitmask = is_supported_op(dropout, "BitmaskDropout", (1,), MS_DOMAIN)
        if not (is_supported_op(dropout, "Dropout", (12, 13)) or is_bitmask) or dropout.ep != add.ep:
            return False
        fused = [add, dropout]
        grad = None if is_bitmask else self._dropout_grad(graph, dropout, add.ep)
        outputs = [dropout.outputs[0]]
        if grad is not None:
            bitmask = graph.generate_value_name("dropout_bitmask_output")
            graph.set_value_type(bitmask, onnx.helper.make_tensor_type_proto(onnx.TensorProto.UINT32, None))
            outputs.append(bitmask)
            fused.append(grad)
        elif len(dropout.outputs) > 1:
            outputs.append(dropout.outputs[1])
        residual = self._residual_add(graph, dropout)
        if residual is None:
            inputs.append("")
        else:
            out0 = dropout.outputs[0]
            if residual.inputs[0] == out0:
                inputs.append(residual.inputs[1])
            elif residual.inputs[1] == out0:
                inputs.append(residual.inputs[0])
            outputs[0] = residual.outputs[0]
            fused.append(residual)
        inputs += dropout.inputs[1:3]
        op_type = "BiasDropout" if not is_bitmask and grad is None else "BitmaskBiasDropout"
        graph.add_node(
            graph.generate_node_name(op_type),
            op_type,
            inputs,
            outputs,
            domain=MS_DOMAIN,
            attributes=dropout.attributes,
            attr_map=dropout.attr_map,
            doc_string="fused Add-Dropout-(Add) for " + dropout.name,
            ep=dropout.ep,
        )
        if grad is not None:
            graph.add_node(
                graph.generate_node_name("BitmaskDropoutGrad"),
                "BitmaskDropoutGrad",
                [grad.inputs[0], outputs[1], *grad.inputs[2:]],
                list(grad.outputs),
                domain=MS_DOMAIN,
                attributes=grad.attributes,
                attr_map=grad.attr_map,
                doc_string="BitmaskDropoutGrad replace for " + grad.name,
                ep=grad.ep,
            )
        for node in fused:
            graph.remove_node(node)
        return True

    @staticmethod
    def _dropout_grad(graph: Graph, dropout: Node, ep: str) -> Node | None:
        """The one com.microsoft DropoutGrad reading the Dropout's mask, if the mask is not a graph output."""
        if len(dropout.outputs) < 2 or graph.is_graph_output(dropout.outputs[1]):
            return None
        readers = graph.consumers(dropout.outputs[1])
        if len(readers) == 1 and is_supported_op(readers[0], "DropoutGrad", (1,), MS_DOMAIN) and readers[0].ep == ep:
            return readers[0]
        return None

    @staticmethod
    def _residual_add(graph: Graph, dropout: Node) -> Node | None:
        """``FuseResidualAddIfAny``: the residual Add reading the Dropout's output, if it can go too."""
        reads = sum(1 for edge in graph.output_edges(dropout) if edge.src_slot == 0)
        if reads >= 2 or node_produces_graph_output(graph, dropout):
            return None
        for consumer in output_nodes(graph, dropout):
            if not is_supported_op(consumer, "Add", _ADD) or consumer.ep != dropout.ep:
                continue
            shapes = _shapes(graph, consumer)
            if shapes is not None and same_shape(*shapes):
                return consumer
        return None
