"""ReshapeFusion: a Reshape whose shape is computed by a Shape/Gather/Concat subgraph gets a constant shape
(ORT ``reshape_fusion.cc``); chains of Reshape/Squeeze/Unsqueeze with known output shapes become one Reshape::

    before                                              after
    root ─────────────────────────────────┐             root ──────────┐
    root ─> Shape ─> Gather(0) ─> Unsqueeze ─┐                         Reshape(root, <concat output> = [0, 0, 12, -1])
    root ─> Shape ─> Gather(1) ─> Unsqueeze ─┼─> Concat ─> Reshape
                                   [12] ─────┤
    root ─> Shape ─> Slice ─> Squeeze ─> Div ─> Unsqueeze ─┘

    X ─> Reshape ─> Squeeze ─> Unsqueeze ─> Y     =>     X ─> Reshape(<first>_new_shape) ─> Y   (<first>_new_reshape)

Rules (``Fuse_Subgraph``, then ``FuseContiguousReshapes`` if that did not fire), nodes in topological order,
subgraphs first:

* Only Reshape-5/13/14/19/21/23/24/25 with ``allowzero`` 0 or absent. The shape input must come from a Concat
  (1/4/11/13, or ``com.microsoft`` ConcatTraining) with one output edge (not a graph output, not into a subgraph).
* Each Concat input, in order, is either a constant int64/int32 initializer (its values), or
  ``Shape -> Gather(i) -> Unsqueeze(axes [0])`` taking dim ``i`` = the number of values so far of a tensor matching
  the root (same name, a GlobalAveragePool's input for dim 0, equal known or symbolic shapes, an equal gathered dim,
  or the Add(MatMul) linear pattern) - value 0 (copy); or a path producing one element (an input whose inferred
  shape has one element, a Gather of one index, ``Unsqueeze(axes [0])`` of a one-element value, of a
  Shape -> Slice -> Squeeze, or of a Div/Mul whose *first* input is such (``InputArgCount().front()`` is 1 for a
  binary op)) - value -1. At most one -1.
* The Concat output becomes an int64 initializer of the same name; the producers of the Concat inputs are removed
  bottom-up (``RemoveNodesWithOneOutputBottomUp``) and the Concat is replaced by the initializer.
* Contiguous fusion: the chain goes on while the current node has one output edge, no graph output, and the next
  node is a Reshape (not ``allowzero`` != 0), Squeeze or Unsqueeze whose inferred output shape is fully known; no
  dim may be 0. The new shape initializer is named ``GenerateNodeName(<first>_new_shape)``, the Reshape
  ``GenerateNodeName(<first>_new_reshape)`` with doc string ``Reshape for <first>`` and the first node's EP.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, ShapeDims, View
from qdqopt.kernels import input_arg_counts, node_schema
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    append_tensor_from_initializer,
    can_replace_node_with_initializer,
    check_output_edges,
    edge_path,
    finalize_nodes_fusion,
    find_path,
    input_node,
    is_supported_op,
    node_produces_graph_output,
    output_edge_count,
    output_nodes,
    remove_nodes_with_one_output_bottom_up,
    replace_node_with_initializer,
)

__all__ = ["ReshapeFusion"]

MS_DOMAIN = "com.microsoft"
INT64_MAX = int(np.iinfo(np.int64).max)
INT_MAX = int(np.iinfo(np.int32).max)
_UNSQUEEZE = (1, 11, 13, 21, 23, 24, 25)
_SHAPE = (1, 13, 15, 19, 21, 23, 24, 25)


# ------------------------------------------------------------------------------------------- optimizer_utils
#: ``AppendTensorFromInitializer(require_constant=true)``
_append_initializer = append_tensor_from_initializer


def _is_scalar(shape: ShapeDims | None) -> bool:
    """``optimizer_utils::IsScalar``: rank 0, or rank 1 with a known dim 1."""
    return shape is not None and (len(shape) == 0 or (len(shape) == 1 and shape[0] == 1))


def _initializer_has_value(graph: Graph, name: str, expected: int) -> bool:
    """``IsInitializerWithExpectedValue(..., is_constant=false)`` for an int64/int32 scalar of this graph."""
    if not _is_scalar(graph.shape(name, view=View.DATA)) or not graph.is_initializer(name):
        return False
    tensor = graph.initializer(name)
    assert tensor is not None
    if tensor.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
        return False
    return int(graph.array(name).reshape(-1)[0]) == expected


def _element_count(shape: ShapeDims | None) -> int | None:
    """``TensorShape::Size()`` of an inferred shape: None (-1) when a dim is not a known value."""
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return int(np.prod([int(d) for d in shape if isinstance(d, int)], dtype=np.int64))


def _first_arg_count(graph: Graph, node: Node) -> int:
    """``Node::InputArgCount().front()``."""
    schema = node_schema(node)
    if schema is None or not schema.inputs:
        return len(node.inputs)
    counts = input_arg_counts(schema, len(node.inputs))
    return counts[0] if counts else 0


def _unsqueeze_axes(graph: Graph, node: Node) -> list[int] | None:
    """``GetAxesFromUnsqueezeNode``."""
    if node.since_version in (1, 11):
        return node.attr_ints("axes")
    if len(node.inputs) > 1:
        axes: list[int] = []
        return axes if _append_initializer(graph, node.inputs[1], axes) else None
    return None


def _is_full_shape(node: Node) -> bool:
    """``graph_utils::IsFullShapeNode``: no ``start``/``end`` slicing."""
    return node.attr_int("start", 0) == 0 and node.attr_int("end", INT64_MAX) == INT64_MAX


# ----------------------------------------------------------------------------------------------- the pass
class ReshapeFusion(GraphTransformer):
    """Fold a Reshape's computed shape into a constant; merge Reshape/Squeeze/Unsqueeze chains."""

    name = "ReshapeFusion"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._visit(graph, node), ops=("Reshape",))

    def _visit(self, graph: Graph, node: Node) -> bool:
        if not is_supported_op(node, "Reshape", (5, 13, 14, 19, 21, 23, 24, 25)):
            return False
        if not self.node_is_compatible(node):
            return False
        if node.attr_int("allowzero", 0) != 0:
            return False
        return self._fuse_subgraph(graph, node) or self._fuse_contiguous(graph, node)

    # ------------------------------------------------------------------------------------- Fuse_Subgraph
    def _fuse_subgraph(self, graph: Graph, reshape: Node) -> bool:
        root = reshape.inputs[0]
        concat = input_node(graph, reshape, 1)
        if concat is None:
            return False
        if not (
            is_supported_op(concat, "Concat", (1, 4, 11, 13))
            or is_supported_op(concat, "ConcatTraining", (1,), MS_DOMAIN)
        ):
            return False
        count = _first_arg_count(graph, concat)
        if not check_output_edges(graph, concat, 1):
            return False
        shape_value: list[int] = []
        for i in range(count):
            if _append_initializer(graph, concat.inputs[i], shape_value):
                continue
            if self._match_one_element_1(graph, root, concat, i, shape_value, check_one_element_only=False):
                shape_value.append(0)
                continue
            if self._is_one_element_output_subgraph(graph, root, concat, i, shape_value):
                shape_value.append(-1)
                continue
            return False
        if shape_value.count(-1) > 1:
            return False
        name = concat.outputs[0]
        if not can_replace_node_with_initializer(graph, concat, name):
            return False
        tensor = onnx.TensorProto(name=name, dims=[len(shape_value)], data_type=onnx.TensorProto.INT64)
        tensor.raw_data = np.asarray(shape_value, dtype="<i8").tobytes()
        graph.add_initializer(tensor)
        for i in range(count):
            parent = input_node(graph, concat, i)
            if parent is not None:
                remove_nodes_with_one_output_bottom_up(graph, parent)
        current = graph.node(concat.index)
        assert current is not None
        return replace_node_with_initializer(graph, current, name)

    def _match_one_element_1(
        self,
        graph: Graph,
        root: str,
        concat: Node,
        index: int,
        shape_value: list[int],
        *,
        check_one_element_only: bool,
    ) -> bool:
        """``Match_One_Element_Output_Subgraph_1``: Shape -> Gather -> Unsqueeze(axes [0]) -> Concat input."""
        path = find_path(
            graph,
            concat,
            True,
            edge_path((f"Unsqueeze@{index}", _UNSQUEEZE), ("Gather", (1, 11, 13)), ("Shape", _SHAPE)),
        )
        if path is None:
            return False
        unsqueeze, gather, shape = path
        if not _is_full_shape(shape):
            return False
        if _unsqueeze_axes(graph, unsqueeze) != [0]:
            return False
        if check_one_element_only and _is_one_element_input(graph, gather, 1):
            return True
        expected = len(shape_value)
        if len(gather.inputs) < 2 or not _initializer_has_value(graph, gather.inputs[1], expected):
            return False
        return self._match_shape(graph, concat, shape, root, expected)

    def _match_shape(self, graph: Graph, concat: Node, shape: Node, root: str, expected: int) -> bool:
        """``Match_Shape``: does the Shape read a tensor whose gathered dim is the root's?"""
        shape_input = shape.inputs[0]
        if shape_input == root:
            return True
        producer = graph.producer(root)
        if (
            producer is not None
            and producer.op_type == "GlobalAveragePool"
            and producer.inputs
            and producer.inputs[0] == shape_input
            and expected == 0
        ):
            return True
        # dim_param names as the NodeArgs hold them: a model's value_info may declare unk__<n> names (as
        # onnx.shape_inference writes them), which ORT keeps and compares like any other
        a = graph.shape(shape_input, view=View.DATA, as_written=True)
        b = graph.shape(root, view=View.DATA, as_written=True)
        if a is not None and b is not None:
            same_rank = len(a) == len(b) and len(a) > 0
            if same_rank and all(isinstance(x, int) and x == y for x, y in zip(a, b, strict=True)):
                return True  # optimizer_utils::CompareShape
            if same_rank and all(_same_dim(x, y) for x, y in zip(a, b, strict=True)):
                return True
            if expected < len(a) and expected < len(b) and _same_dim(a[expected], b[expected]):
                return True
        before_shape = input_node(graph, shape, 0)
        if before_shape is None:
            return False
        return self._match_linear_subgraph_1(graph, concat, before_shape)

    def _match_linear_subgraph_1(self, graph: Graph, concat: Node, root: Node) -> bool:
        """``Match_Linear_Subgraph_1``: the Reshape's input is Add(MatMul(root, W[h, h]), b[h])."""
        if not check_output_edges(graph, concat, 1):
            return False
        reshape = output_nodes(graph, concat)[0]
        if reshape.op_type != "Reshape":
            return False
        path = find_path(graph, reshape, True, edge_path(("Add", (7, 13, 14)), ("MatMul", (1, 9, 13))))
        if path is None:
            return False
        add, matmul = path
        before = input_node(graph, matmul, 0)
        if before is not None and before.index != root.index:
            return False
        if len(add.inputs) < 2 or not _is_initializer_any_scope(graph, add.inputs[1]):
            return False
        bias = graph.shape(add.inputs[1], view=View.DATA)
        if bias is None or len(bias) != 1 or not isinstance(bias[0], int):
            return False
        hidden = bias[0]
        weight = graph.shape(matmul.inputs[1], view=View.DATA)
        return (
            weight is not None
            and len(weight) == 2
            and all(
                not (expected > 0) or (isinstance(d, int) and d == expected)
                for d, expected in zip(weight, (hidden, hidden), strict=True)
            )
        )

    def _is_one_element_output_subgraph(
        self, graph: Graph, root: str, concat: Node, index: int, shape_value: list[int]
    ) -> bool:
        """``Is_One_Element_Output_Subgraph``."""
        if _is_one_element_input(graph, concat, index) or self._match_one_element_1(
            graph, root, concat, index, shape_value, check_one_element_only=True
        ):
            return True
        unsqueeze_step = (f"Unsqueeze@{index}", _UNSQUEEZE)
        path = (
            find_path(graph, concat, True, edge_path(unsqueeze_step, ("Div", (7, 13, 14))))
            or find_path(graph, concat, True, edge_path(unsqueeze_step, ("Mul", (7, 13, 14))))
            or find_path(graph, concat, True, edge_path(unsqueeze_step))
        )
        if path is None:
            return False
        unsqueeze = path[0]
        if _unsqueeze_axes(graph, unsqueeze) != [0]:
            return False
        if len(path) == 1:
            return _is_one_element_input(graph, unsqueeze, 0) or self._match_one_element_2(graph, root, unsqueeze, 0)
        binary = path[1]
        for i in range(_first_arg_count(graph, binary)):
            if not _is_one_element_input(graph, binary, i) and not self._match_one_element_2(graph, root, binary, i):
                return False
        return True

    def _match_one_element_2(self, graph: Graph, root: str, node: Node, index: int) -> bool:
        """``Match_One_Element_Output_Subgraph_2``: root -> Shape -> Slice (one element) -> Squeeze -> input."""
        path = find_path(
            graph,
            node,
            True,
            edge_path((f"Squeeze@{index}", (1, 11, 13, 21, 23, 24, 25)), ("Slice", (1, 11, 13)), ("Shape", _SHAPE)),
        )
        if path is None:
            return False
        _, slice_node, shape = path
        if shape.inputs[0] != root:
            return False
        starts: list[int] = []
        ends: list[int] = []
        if graph.input_edge_count(slice_node) >= 3:
            _append_initializer(graph, slice_node.inputs[1], starts)
            _append_initializer(graph, slice_node.inputs[2], ends)
        else:  # ORT reads the Slice-1 attributes here, whatever the Slice version
            starts = slice_node.attr_ints("starts") or []
            ends = slice_node.attr_ints("ends") or []
        if len(starts) != 1 or len(ends) != 1:
            return False
        start, end = starts[0], ends[0]
        return (end >= INT_MAX and start == -1) or abs(end - start) == 1

    # ---------------------------------------------------------------------------- FuseContiguousReshapes
    def _fuse_contiguous(self, graph: Graph, reshape: Node) -> bool:
        chain = [reshape]
        shape_value: list[int] = []
        while True:
            current = chain[-1]
            if node_produces_graph_output(graph, current) or output_edge_count(graph, current) != 1:
                break
            nxt = output_nodes(graph, current)[0]
            if nxt.op_type not in ("Reshape", "Squeeze", "Unsqueeze"):
                break
            if nxt.op_type == "Reshape" and nxt.attr_int("allowzero", 0) != 0:
                break
            out_shape = graph.shape(nxt.outputs[0], view=View.DATA)
            if out_shape is None or _element_count(out_shape) is None:
                break
            shape_value = [int(d) for d in out_shape if isinstance(d, int)]
            chain.append(nxt)
        if len(chain) < 2 or any(d == 0 for d in shape_value):
            return False
        first = chain[0]
        shape_name = graph.generate_node_name(first.name + "_new_shape")
        tensor = onnx.TensorProto(name=shape_name, dims=[len(shape_value)], data_type=onnx.TensorProto.INT64)
        tensor.raw_data = np.asarray(shape_value, dtype="<i8").tobytes()
        graph.add_initializer(tensor)
        new_node = graph.add_node(
            graph.generate_node_name(first.name + "_new_reshape"),
            "Reshape",
            [first.inputs[0], shape_name],
            [""],
            doc_string="Reshape for " + first.name,
            ep=first.ep,
        )
        finalize_nodes_fusion(graph, chain, new_node)
        return True


def _is_one_element_input(graph: Graph, node: Node, index: int) -> bool:
    """``Is_One_Element_Input``: the input's inferred shape holds exactly one element."""
    if index >= len(node.inputs):
        return False
    return _element_count(graph.shape(node.inputs[index], view=View.DATA)) == 1


def _same_dim(a: int | str | None, b: int | str | None) -> bool:
    """Equal known values, or equal symbolic names."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return isinstance(a, str) and isinstance(b, str) and a == b


def _is_initializer_any_scope(graph: Graph, name: str) -> bool:
    if graph.is_initializer(name):
        return True
    parent = graph.parent
    return parent is not None and graph.producer(name) is None and _is_initializer_any_scope(parent, name)
