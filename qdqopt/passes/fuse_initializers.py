"""FuseFp16InitializerToFp32NodeTransformer: fp16 initializers cast to fp32 become fp32 initializers
(``fuse_initializers_transformer.cc``, class ``FuseInitializersTransformer``).

ORT registers it at Level4 only (ORT_ENABLE_ALL), for any EP, as ``FuseInitializersTransformer(
"FuseFp16InitializerToFp32NodeTransformer", MLFloat16, float)``. Level4 runs in the optimization loop right after
``InsertCastTransformer``, whose ``Cast(to=FLOAT)`` in front of an fp16 op left without a CPU kernel it undoes for
the op's constant inputs::

    w (fp16 init) ─> Cast "InsertedPrecisionFreeCast_w" ─> op     =>     "FusedBack_w" (fp32 init) ─> op
                     (to=FLOAT, output arg named like the node)            (w goes at Resolve if nobody reads it)

A change at Level4 makes the optimization loop run again (``session.graph_optimizations_loop_level`` 1, the default).

Rules (ORT 1.32):

* the main graph only: the pass does not recurse into subgraphs;
* over one topological snapshot, a node is *fused* when it is a ``Cast`` (any EP, any domain) with no input edge,
  exactly one output edge, no graph output, whose input 0 is a constant initializer (outer scopes included) with an
  fp16 tensor type and whose output NodeArg is an fp32 tensor;
* then, in node-index order (a ``std::set``), each fused Cast: the next node is its one output edge's consumer and
  the slot that edge's input index (so any Cast qualifies, whatever its name: the model's own Casts too when
  ConstantFolding did not fold them); the new initializer is ``GenerateNodeArgName("FusedBack_" + the Cast
  output's name with its first "InsertedPrecisionFreeCast_" removed)``: the fp16 data converted to float32, dims
  kept, written as ``raw_data`` (appended to the initializers); the node's input is replaced by it;
* an edge to an implicit input (the Cast's output read only inside a subgraph of the next node) has an index past
  the next node's explicit inputs, and 1.32 fails the session ("next_node_arg_index <
  next_node.InputDefs().size() was false. Could not find Cast output '<name>' in consumer node inputs.");
* then every fused Cast is removed; the unread fp16 initializers go at Resolve.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import input_edge_count, node_produces_graph_output

__all__ = ["FuseFp16InitializerToFp32NodeTransformer"]

TP = onnx.TensorProto
PATTERN = "InsertedPrecisionFreeCast_"
PREFIX = "FusedBack_"


def _candidates(graph: Graph) -> list[Node]:
    """The Casts ORT fuses, in node-index order."""
    found: list[Node] = []
    for node in graph.topological_order():
        if node.op_type != "Cast" or input_edge_count(graph, node) != 0:
            continue
        if graph.output_edge_count(node) != 1 or node_produces_graph_output(graph, node):
            continue
        if not node.inputs or graph.constant_initializer(node.inputs[0]) is None:
            continue
        if graph.elem_type(node.inputs[0]) != TP.FLOAT16 or graph.elem_type(node.outputs[0]) != TP.FLOAT:
            continue
        found.append(node)
    return sorted(found, key=lambda n: n.index)


def _target_slot(graph: Graph, cast: Node) -> tuple[Node, int]:
    """The next node and the input index of the Cast's one output edge; an implicit input fails the session."""
    edge = graph.output_edges(cast)[0]
    next_node = graph.node(edge.dst)
    assert next_node is not None
    if edge.dst_slot >= len(next_node.inputs):
        raise ModelError(
            "FuseInitializerWithNode: next_node_arg_index < next_node.InputDefs().size() was false. Could not find "
            f"Cast output '{cast.outputs[0]}' in consumer node inputs. (ORT 1.32 fails the session: the Cast's "
            f"output is read only inside a subgraph of {next_node.name!r})"
        )
    return next_node, edge.dst_slot


def _new_name(old: str) -> str:
    return PREFIX + old.replace(PATTERN, "", 1)


class FuseFp16InitializerToFp32NodeTransformer(GraphTransformer):
    """Replace ``fp16 initializer -> Cast(to=FLOAT)`` by an fp32 initializer."""

    name = "FuseFp16InitializerToFp32NodeTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        casts = _candidates(graph)
        for cast in casts:
            next_node, slot = _target_slot(graph, cast)
            tensor = graph.constant_initializer(cast.inputs[0])
            assert tensor is not None
            name = graph.generate_value_name(_new_name(next_node.inputs[slot]))
            source = graph.constant_array(cast.inputs[0])
            assert source is not None
            data = np.ascontiguousarray(source.astype(np.float32))
            new = onnx.TensorProto()
            new.dims.extend(tensor.dims)
            new.data_type = TP.FLOAT
            new.name = name
            new.raw_data = numpy_helper.from_array(data).raw_data
            graph.add_initializer(new)
            graph.set_input(next_node, slot, name)
        for cast in casts:
            graph.remove_node(cast)
        return bool(casts)
