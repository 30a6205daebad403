"""GatherSliceToSplitFusion: Gathers and Slices that cut one tensor into pieces become one Split
(``gather_fusion.cc``, Level2, CPU EP).

When several Gather (scalar index) and Slice (one axis, step 1) nodes read the same tensor along the same axis and
their pieces cover that axis exactly, without overlap, ORT replaces them with a single Split (one kernel). A Gather
with a rank-0 index drops the axis, so its piece goes through a Squeeze::

    before                                          after
    X[.., 4, ..] -+-> Gather(idx=0, axis=a)   -> g0  X -> Split(splits=[1,2,1], axis=a) -+-> s0 -> Squeeze(a) -> g0
                  +-> Slice(1:3, axes=[a])    -> s1                                      +-> s1
                  +-> Gather(idx=[3], axis=a) -> g3                                      +-> g3
                  +-> Conv ...  (other consumers stay on X)

Rules (ORT 1.32, CPU EP):

* nothing at all unless the graph imports ai.onnx at opset 13 or later; every graph, each node's subgraphs first
  (during the candidate scan below), then this graph's candidates;
* candidates, in this order: graph inputs (initializers excluded) with more than one consumer node; initializers
  with more than one consumer node, in ``name_to_initial_tensor_`` iteration order; the output of every node (in
  one topological snapshot) that is not a ``Shape``, has exactly one output and more than one output edge;
* a candidate needs a known shape (rank); its consumers are taken in ``GetConsumerNodes`` order, the iteration
  order of a ``std::unordered_set<NodeIndex>`` that the last ``Resolve`` filled in node-index order (emulated
  here); of those, the Gather and Slice nodes that read it as input 0 are the *pieces* (other consumers are left
  alone); at least two are needed;
* the axis is the first piece's: Gather's ``axis`` attribute (default 0), or the Slice's ``axes`` input (it must
  exist and be a constant int64 scalar, i.e. rank 0 or ``[1]``); negative axes count from the rank; the axis must
  be within the rank and its dim known (``dim_value``);
* every piece must be on the CPU EP and: a Gather (since 13) on that axis whose index is a constant int64 scalar
  (rank 0: squeezed; ``[1]``: kept); negative index counts from the dim; within the dim; or a Slice (since 13) on
  that axis with constant int64 scalar starts/ends (clamped as the schema says, non-empty) and, if there is a steps
  input, a constant int64 scalar step of 1; no two pieces may overlap and together they cover the whole dim;
* rewrite, pieces sorted by start: for each squeezed Gather: value ``GenerateNodeArgName(split_output)`` (typed
  as X with the axis dim 1), initializer ``GenerateNodeName(squeeze_axes)`` (int64 [1] = axis, raw data), node
  ``GenerateNodeName(Squeeze)`` ("Squeeze for Fused Gather nodes") writing the Gather's output; then initializer
  ``GenerateNodeArgName(splits)`` (int64, one length per piece), node
  ``GenerateNodeName(<first piece's name>/GatherSliceToSplitFusion)`` ("Split for Fused Gather nodes", inputs X
  and the splits, attribute ``axis`` only, outputs the pieces' outputs or the Squeezes' inputs); new nodes take
  the first piece's EP; the pieces are removed. Graph outputs among the pieces' outputs are simply produced by the
  Split or a Squeeze.

GatherToSliceFusion (same ORT file) is :class:`GatherToSliceFusion` below.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.graph.stdhash import StdUnorderedIndexSet
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.qdq_util import constant_initializer, is_scalar_arg, is_supported_op, tensor_from_array

__all__ = ["GatherSliceToSplitFusion", "GatherToSliceFusion"]

_ONNX = ""


class _ConsumerOrder:
    """``Graph::GetConsumerNodes`` order while the pass runs.

    ``Resolve`` rebuilt ORT's consumer sets from the nodes in index order; this pass then adds (new nodes, higher
    indices) and removes consumers. The sets are replayed from the snapshot taken when the pass started.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._start: dict[str, list[int]] = {}

    def snapshot(self, value: str) -> None:
        self._start.setdefault(value, [n.index for n in self.graph.consumers(value)])

    def consumers(self, value: str) -> list[Node]:
        now = {n.index for n in self.graph.consumers(value)}
        start = self._start.get(value, sorted(now))
        table = StdUnorderedIndexSet()
        for index in start:
            table.insert(index)
        for index in start:
            if index not in now:
                table.erase(index)
        for index in sorted(now - set(start)):
            table.insert(index)
        found = [self.graph.node(i) for i in table]
        return [n for n in found if n is not None]


def _piece_count(graph: Graph, value: str) -> int:
    return sum(1 for c in graph.consumers(value) if c.op_type in ("Gather", "Slice") and c.inputs[:1] == [value])


def _scalar_int64(graph: Graph, name: str) -> tuple[int, int] | None:
    """``GetScalarInt64Initializer``: (value, rank of the tensor) of a constant int64 scalar initializer."""
    if not name or not is_scalar_arg(graph, name):
        return None
    tensor = constant_initializer(graph, name)
    if tensor is None or tensor.data_type != onnx.TensorProto.INT64:
        return None
    value = graph.constant_array(name)
    assert value is not None
    return int(value.reshape(-1)[0]), len(tensor.dims)


def _add_int64_initializer(graph: Graph, name: str, values: list[int]) -> None:
    """``AddInitializerWithOrtValue`` of a 1-D int64 tensor (saved as raw data).

    The Squeeze axes are named by ``GenerateNodeName``, which does not look at initializer names: when the model
    already has an initializer of that name, ORT fails the session ("Attempt to replace the existing tensor").
    """
    if graph.is_initializer(name):
        raise ModelError(f"GatherSliceToSplitFusion: initializer {name!r} exists already (ORT fails the session)")
    graph.add_initializer(tensor_from_array(np.array(values, dtype=np.int64), name, onnx.TensorProto.INT64))


def _gather_axis(node: Node, rank: int) -> int:
    attr = node.attributes.get("axis")
    axis = 0
    if attr is not None and attr.type == onnx.AttributeProto.INT:
        axis = attr.i
        if axis < 0:
            axis += rank
    return axis


def _slice_axis(graph: Graph, node: Node, rank: int) -> int | None:
    if len(node.inputs) < 4:
        return None
    found = _scalar_int64(graph, node.inputs[3])
    if found is None:
        return None
    axis = found[0]
    return axis + rank if axis < 0 else axis


class _Piece:
    """One Gather or Slice to fuse: its node, where its piece starts, its length, whether it needs a Squeeze."""

    def __init__(self, node: Node, start: int, length: int, squeeze: bool) -> None:
        self.node = node
        self.start = start
        self.length = length
        self.squeeze = squeeze


class GatherSliceToSplitFusion(GraphTransformer):
    """Fuse the Gather/Slice nodes that split one tensor along one axis into one Split."""

    name = "GatherSliceToSplitFusion"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        opset = graph.opset(_ONNX)
        if opset is None or opset < 13:
            return False
        order = _ConsumerOrder(graph)
        candidates: list[str] = []
        for vi in graph.inputs:
            if not graph.is_initializer(vi.name) and len(graph.consumers(vi.name)) > 1:
                candidates.append(vi.name)
        for name in graph.initializer_map_order():
            if len(graph.consumers(name)) > 1:
                candidates.append(name)

        def collect(node: Node) -> bool:  # a scan only: subgraphs are fused by the recursion, this graph below
            if node.op_type != "Shape" and len(node.outputs) == 1 and graph.output_edge_count(node) > 1:
                candidates.append(node.outputs[0])
            return False

        modified = self.visit_in_order(graph, ctx, graph_level, collect)
        # the pass only adds Splits and Squeezes: a value read as input 0 by fewer than two Gathers or Slices now
        # never has two pieces, whatever its consumers' order (shared scales and zero points have thousands)
        candidates = [value for value in candidates if _piece_count(graph, value) >= 2]
        for value in candidates:
            order.snapshot(value)
        for value in candidates:
            if self._fuse(graph, order, value):
                modified = True
        return modified

    # ------------------------------------------------------------------ checks
    def _gather(self, graph: Graph, node: Node, rank: int, axis: int, dim: int, consumed: list[bool]) -> _Piece | None:
        """``IsSupportedGather``."""
        if not is_supported_op(node, "Gather", (13,)) or not self.node_is_compatible(node):
            return None
        if _gather_axis(node, rank) != axis:
            return None
        found = _scalar_int64(graph, node.input(1))
        if found is None:
            return None
        start, index_rank = found
        if start < 0:
            start += dim
        if start < 0 or start >= dim or consumed[start]:
            return None
        consumed[start] = True
        return _Piece(node, start, 1, index_rank == 0)

    def _slice(self, graph: Graph, node: Node, rank: int, axis: int, dim: int, consumed: list[bool]) -> _Piece | None:
        """``IsSupportedSlice``."""
        if not is_supported_op(node, "Slice", (13,)) or not self.node_is_compatible(node):
            return None
        if _slice_axis(graph, node, rank) != axis:
            return None
        starts = _scalar_int64(graph, node.inputs[1])
        ends = _scalar_int64(graph, node.inputs[2])
        if starts is None or ends is None:
            return None
        start, end = starts[0], ends[0]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        if start >= end:
            return None
        if len(node.inputs) >= 5:
            step = _scalar_int64(graph, node.inputs[4])
            if step is None or step[0] != 1:
                return None
        for i in range(start, end):
            if consumed[i]:
                return None
            consumed[i] = True
        return _Piece(node, start, end - start, False)

    # ------------------------------------------------------------------ rewrite
    def _fuse(self, graph: Graph, order: _ConsumerOrder, value: str) -> bool:
        shape = graph.shape(value, as_written=True)  # the squeezed outputs copy its dims, ONNX's unk__<n> names too
        if shape is None:
            return False
        rank = len(shape)
        pieces_in = [
            c for c in order.consumers(value) if c.inputs and c.inputs[0] == value and c.op_type in ("Gather", "Slice")
        ]
        if len(pieces_in) < 2:
            return False
        first = pieces_in[0]
        axis: int | None = _gather_axis(first, rank) if first.op_type == "Gather" else None
        if first.op_type == "Slice":
            axis = _slice_axis(graph, first, rank)
        if axis is None or axis < 0 or axis >= rank:
            return False
        dim = shape[axis]
        if not isinstance(dim, int):
            return False
        consumed = [False] * max(dim, 0)
        pieces: list[_Piece] = []
        for consumer in pieces_in:
            piece = self._gather(graph, consumer, rank, axis, dim, consumed)
            if piece is None:
                piece = self._slice(graph, consumer, rank, axis, dim, consumed)
            if piece is None:
                return False
            pieces.append(piece)
        if not all(consumed):
            return False

        lead = pieces[0].node
        elem = graph.elem_type(value)
        split_outputs: list[str] = []
        for piece in sorted(pieces, key=lambda p: p.start):
            out = piece.node.outputs[0]
            if not piece.squeeze:
                split_outputs.append(out)
                continue
            arg = graph.generate_value_name("split_output")
            dims = [piece.length if i == axis else d for i, d in enumerate(shape)]
            graph.set_value_type(arg, onnx.helper.make_tensor_type_proto(elem or 0, dims))
            axes = graph.generate_node_name("squeeze_axes")
            _add_int64_initializer(graph, axes, [axis])
            graph.add_node(
                graph.generate_node_name("Squeeze"),
                "Squeeze",
                [arg, axes],
                [out],
                doc_string="Squeeze for Fused Gather nodes",
                ep=lead.ep,
            )
            split_outputs.append(arg)
        splits = graph.generate_value_name("splits")
        lengths = [p.length for p in sorted(pieces, key=lambda p: p.start)]
        _add_int64_initializer(graph, splits, lengths)
        graph.add_node(
            graph.generate_node_name(lead.name + "/GatherSliceToSplitFusion"),
            "Split",
            [value, splits],
            split_outputs,
            attributes={"axis": onnx.helper.make_attribute("axis", axis)},
            doc_string="Split for Fused Gather nodes",
            ep=lead.ep,
        )
        for piece in pieces:
            graph.remove_node(piece.node)
        return True


class GatherToSliceFusion(GraphTransformer):
    """Fuse ``Range -> Gather`` into one Slice (ORT's ``GatherToSliceFusion``, same source file).

    ``Gather(data, Range(start, limit, delta), axis=a)`` takes the same elements as
    ``Slice(data, [start], [limit], [a], [delta])``, and the Slice kernel is faster::

        start, limit, delta -> Range -> r        start -> Unsqueeze -> u0
        data, r -> Gather(axis=a) -> y            limit -> Unsqueeze -> u1     data, u0, u1, [a], u2 -> Slice -> y
                                                  delta -> Unsqueeze -> u2

    Rules (ORT 1.32, CPU EP): every graph, each node's subgraphs first; a Range (since 11 or 27) with exactly one
    output edge, into input 1 of a Gather (since 1, 11 or 13), both on the CPU EP (no other check: not on the Range
    inputs, not on graph outputs). Names, in generation order: values ``unsqueeze_output_0..2`` (typed as the
    Range's output, shape [1]); from opset 13 one initializer ``GenerateNodeName(UnsqueezeAxesInitializer)``
    (int64 [1] = 0) read by three Unsqueezes ``GenerateNodeName(Unsqueeze_<i>)``, before 13 the Unsqueezes carry
    ``axes=[0]``; then initializer ``GenerateNodeName(SliceAxesInitializer)`` ([1] = the Gather's ``axis``
    attribute as written, default 0, in the Range's element type) and the node ``GenerateNodeName(Slice)``
    ("Slice for Fused Gather nodes") writing the Gather's output. New nodes take the Range's EP (the Slice the
    Gather's); the Range and the Gather are removed.
    """

    name = "GatherToSliceFusion"
    compatible_eps = ("CPUExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node))

    def _fuse(self, graph: Graph, rng: Node) -> bool:
        if not is_supported_op(rng, "Range", (11, 27)) or not self.node_is_compatible(rng):
            return False
        edges = graph.output_edges(rng)
        if len(edges) != 1:
            return False
        gather = graph.node(edges[0].dst)
        assert gather is not None
        if not is_supported_op(gather, "Gather", (1, 11, 13)) or not self.node_is_compatible(gather):
            return False
        if gather.input(1) != rng.outputs[0]:
            return False
        assert len(rng.inputs) == 3, "Range has 3 inputs"
        elem = graph.elem_type(rng.outputs[0]) or 0
        unsqueezed: list[str] = []
        for i in range(3):
            arg = graph.generate_value_name(f"unsqueeze_output_{i}")
            graph.set_value_type(arg, onnx.helper.make_tensor_type_proto(elem, [1]))
            unsqueezed.append(arg)
        opset = graph.opset(_ONNX)
        if opset is not None and opset >= 13:
            axes = graph.generate_node_name("UnsqueezeAxesInitializer")
            _add_int64_initializer(graph, axes, [0])
            for i in range(3):
                graph.add_node(
                    graph.generate_node_name(f"Unsqueeze_{i}"),
                    "Unsqueeze",
                    [rng.inputs[i], axes],
                    [unsqueezed[i]],
                    doc_string="Unsqueeze for Fused Gather nodes",
                    ep=rng.ep,
                )
        else:
            for i in range(3):
                graph.add_node(
                    graph.generate_node_name(f"Unsqueeze_{i}"),
                    "Unsqueeze",
                    [rng.inputs[i]],
                    [unsqueezed[i]],
                    attributes={"axes": onnx.helper.make_attribute("axes", [0])},
                    doc_string="Unsqueeze for Fused Gather nodes",
                    ep=rng.ep,
                )
        attr = gather.attributes.get("axis")
        axis = attr.i if attr is not None and attr.type == onnx.AttributeProto.INT else 0
        slice_axes = graph.generate_node_name("SliceAxesInitializer")
        if graph.is_initializer(slice_axes):
            raise ModelError(f"GatherToSliceFusion: initializer {slice_axes!r} exists already (ORT fails the session)")
        np_type = np.int64 if elem == onnx.TensorProto.INT64 else np.int32
        graph.add_initializer(tensor_from_array(np.array([axis], dtype=np_type), slice_axes, elem))
        graph.add_node(
            graph.generate_node_name("Slice"),
            "Slice",
            [gather.inputs[0], unsqueezed[0], unsqueezed[1], slice_axes, unsqueezed[2]],
            [gather.outputs[0]],
            doc_string="Slice for Fused Gather nodes",
            ep=gather.ep,
        )
        graph.remove_node(rng)
        graph.remove_node(gather)
        return True
