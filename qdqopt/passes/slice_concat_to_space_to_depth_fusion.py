"""SliceConcatToSpaceToDepthFusion: the YOLO "Focus" stem, four stride-2 Slices of one NCHW tensor concatenated on
the channels, becomes one SpaceToDepth(blocksize=2), followed by a channel-reordering Gather when the four phases
are not in SpaceToDepth's order (``slice_concat_to_space_to_depth_fusion.cc``, Level1, any EP)::

    before                                              after (phases in order (0,0) (0,1) (1,0) (1,1))
    x -+-> Slice x[..., 0::2, 0::2] -+                  x --> SpaceToDepth(blocksize=2) --> y
       +-> Slice x[..., 1::2, 0::2] -+
       +-> Slice x[..., 0::2, 1::2] -+-> Concat(axis=1) --> y
       +-> Slice x[..., 1::2, 1::2] -+                  after (any other order, YOLOv5's (0,0) (1,0) (0,1) (1,1))
                                                        x --> SpaceToDepth --> Gather(axis=1, indices) --> y

A branch may also be a chain of two Slices, one striding H and one striding W (how exporters often write
``x[..., ::2, 1::2]``); the first Slice of a chain may be shared by two branches.

Rules (ORT 1.32):

* every graph; nodes in one topological snapshot, each node's subgraphs first; after each fusion the walk starts
  again on a fresh snapshot (subgraphs included) until a walk fuses nothing;
* the candidate is a Concat (4, 11, 13) with exactly four inputs and an ``axis`` that is 1 (or -3);
* each input is made, through an edge, by a branch: walking up from the Concat at most two Slices (10, 11, 13) on
  the Concat's EP, none producing a graph output; the Slice next to the Concat has exactly one output edge, into
  the Concat; the one above it has output edges;
* a Slice's starts and ends (and axes and steps when given) are constant 1-D int32/int64 initializers of one
  length; the axes (made non-negative over rank 4) are distinct and in 0..3; over all four axes (the ones not
  given: start 0, end INT64_MAX, step 1) no start is negative and no step is below 1; batch and channel are taken
  whole (start 0, step 1, end INT64_MAX or at least the static dim of the Slice's input), H and W too as far as
  the end goes; each of H and W has step 1 and start 0, or step 2 and start 0 or 1, and is strided (step 2) exactly
  once along the branch; a Slice that strides nothing ends the match;
* the input of the branch's top Slice is the same value for all four branches; for the first it has a rank-4 shape
  and is float or double;
* the four (H, W) start pairs are the four phases, each once; in the canonical order (0,0) (0,1) (1,0) (1,1) the
  SpaceToDepth alone replaces the Concat; otherwise the input's channel dim must be a static value C > 0;
* new nodes, canonical: ``GenerateNodeName("SpaceToDepth")``, doc string "Fused Slice*4 + Concat into
  SpaceToDepth", input x, the Concat's output, int attribute ``blocksize`` 2, the Concat's EP. Otherwise first
  the value ``GenerateNodeArgName("space_to_depth_out")``, then the SpaceToDepth (doc string "... into SpaceToDepth
  + channel permutation") writing it, then an int64 initializer ``GenerateNodeArgName(
  "space_to_depth_gather_indices")`` of 4C indices (for each branch in Concat order, its phase's block times C
  plus 0..C-1), then ``GenerateNodeName("Gather")`` (doc string "Reorder SpaceToDepth channels to preserve
  Slice+Concat block order", int attribute ``axis`` 1, the Concat's EP) writing the Concat's output;
* removed: the Concat, then the four Slices next to it (in Concat order), then each upper Slice (first seen first)
  left with no output edge and no graph output.
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.events import NoMatch, emit_no_match
from qdqopt.graph import Graph, Node, View
from qdqopt.graph.core import tensor_array
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    input_node,
    is_supported_op,
    node_produces_graph_output,
    output_edge_count,
)
from qdqopt.passes.qdq_util import constant_initializer, tensor_from_array

__all__ = ["SliceConcatToSpaceToDepthFusion"]

INT64_MAX = 2**63 - 1
BLOCK = 2
#: the (H, W) start pairs in SpaceToDepth's channel-block order
CANONICAL_PHASES = ((0, 0), (0, 1), (1, 0), (1, 1))
_MAX_CHAIN = 2
_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def _int_values(graph: Graph, name: str) -> list[int] | None:
    """A constant 1-D int32/int64 initializer's values (``GetConstantInputIntValues``)."""
    if not name:
        return None
    tensor = constant_initializer(graph, name)
    if tensor is None or len(tensor.dims) != 1:
        return None
    if tensor.data_type not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64):
        return None
    return [int(v) for v in tensor_array(tensor).reshape(-1)]


def slice_params(graph: Graph, node: Node) -> tuple[list[int], list[int], list[int]] | None:
    """``GetSliceInfo`` + ``NormalizeSliceParams``: (starts, ends, steps) over the four axes, or None."""
    if not is_supported_op(node, "Slice", (10, 11, 13)) or node_produces_graph_output(graph, node):
        return None
    inputs = list(node.inputs) + [""] * (5 - len(node.inputs))
    starts, ends = _int_values(graph, inputs[1]), _int_values(graph, inputs[2])
    if starts is None or ends is None or not starts or len(starts) != len(ends):
        return None
    axes: list[int] | None = list(range(len(starts)))
    if inputs[3]:
        axes = _int_values(graph, inputs[3])
        if axes is None or len(axes) != len(starts):
            return None
    steps: list[int] | None = [1] * len(starts)
    if inputs[4]:
        steps = _int_values(graph, inputs[4])
        if steps is None or len(steps) != len(starts):
            return None
    assert axes is not None and steps is not None
    out_starts, out_ends, out_steps = [0] * 4, [INT64_MAX] * 4, [1] * 4
    seen: set[int] = set()
    for start, end, given, step in zip(starts, ends, axes, steps, strict=True):
        axis = given + 4 if given < 0 else given
        if not 0 <= axis < 4 or axis in seen:
            return None
        seen.add(axis)
        out_starts[axis], out_ends[axis], out_steps[axis] = start, end, step
    if any(s < 0 for s in out_starts) or any(s <= 0 for s in out_steps):
        return None
    return out_starts, out_ends, out_steps


def _static_dim(graph: Graph, name: str, axis: int) -> int | None:
    """``TryGetStaticInputDim``: the dim's value when the value has a rank-4 shape and the dim is a value > 0."""
    shape = graph.shape(name, view=View.DATA)
    if shape is None or len(shape) != 4:
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) and dim > 0 else None


def _full_extent(graph: Graph, name: str, axis: int, end: int) -> bool:
    """``IsFullExtentEnd``: INT64_MAX, or a non-negative end at least the input's static dim."""
    if end == INT64_MAX:
        return True
    if end < 0:
        return False
    dim = _static_dim(graph, name, axis)
    return dim is not None and end >= dim


class SliceConcatToSpaceToDepthFusion(GraphTransformer):
    """Fuse four stride-2 Slices concatenated on the channels into SpaceToDepth (+ Gather)."""

    name = "SliceConcatToSpaceToDepthFusion"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        again = True
        while again:  # a fresh topological snapshot after every fusion
            again = False
            for node in graph.topological_order():
                if graph.node(node.index) is None:
                    continue
                if node.subgraphs and self.recurse(node, ctx, graph_level):
                    modified = True
                if self.node_is_compatible(node) and self._fuse(graph, node):
                    modified = again = True
                    break
        return modified

    def _branch(self, graph: Graph, concat: Node, slot: int) -> tuple[list[Node], str, tuple[int, int]] | NoMatch:
        """``TryMatchSliceChain``: the Slices from the Concat up, the branch's input and its (H, W) phase."""
        nodes: list[Node] = []
        strided = {2: False, 3: False}
        offset = {2: 0, 3: 0}
        node = input_node(graph, concat, slot)
        consumer = concat
        while len(nodes) < _MAX_CHAIN:
            if node is None or node is concat or node.ep != concat.ep or node_produces_graph_output(graph, node):
                return NoMatch(f"Concat input {slot} is not made by a Slice on the Concat's EP without graph output")
            if not nodes:
                edges = graph.output_edges(node)
                if len(edges) != 1 or edges[0].dst != consumer.index:
                    return NoMatch(f"{node.op_type} {node.name!r} has other consumers than the Concat", (node.name,))
            elif output_edge_count(graph, node) == 0:
                return NoMatch(f"{node.op_type} {node.name!r} has no output edge", (node.name,))
            params = slice_params(graph, node)
            if params is None or not node.inputs or not node.inputs[0]:
                return NoMatch(f"{node.op_type} {node.name!r} is not a Slice with constant parameters", (node.name,))
            starts, ends, steps = params
            data = node.inputs[0]
            for axis in (0, 1):
                if starts[axis] != 0 or steps[axis] != 1 or not _full_extent(graph, data, axis, ends[axis]):
                    return NoMatch(f"Slice {node.name!r} does not take axis {axis} whole", (node.name,))
            here = False
            for axis in (2, 3):
                if not _full_extent(graph, data, axis, ends[axis]):
                    return NoMatch(f"Slice {node.name!r} ends early on axis {axis}", (node.name,))
                if steps[axis] == BLOCK:
                    if strided[axis] or starts[axis] not in (0, 1):
                        return NoMatch(f"Slice {node.name!r}: axis {axis} strided twice or from {starts[axis]}")
                    strided[axis], offset[axis], here = True, starts[axis], True
                elif steps[axis] != 1 or starts[axis] != 0:
                    return NoMatch(f"Slice {node.name!r}: axis {axis} is neither whole nor stride 2", (node.name,))
            if not here:
                return NoMatch(f"Slice {node.name!r} strides neither H nor W", (node.name,))
            nodes.append(node)
            if strided[2] and strided[3]:
                return nodes, data, (offset[2], offset[3])
            consumer = node
            node = input_node(graph, node, 0)
        return NoMatch(f"the branch of Concat input {slot} does not stride both H and W in two Slices")

    def _fuse(self, graph: Graph, concat: Node) -> bool:
        if not is_supported_op(concat, "Concat", (4, 11, 13)) or len(concat.inputs) != 4:
            return False
        axis = concat.attr_int("axis")
        if axis is None or (axis + 4 if axis < 0 else axis) != 1:
            return False
        branches: list[list[Node]] = []
        phases: list[tuple[int, int]] = []
        x = ""
        for slot, value in enumerate(concat.inputs):
            found = self._branch(graph, concat, slot) if value else NoMatch(f"Concat input {slot} is empty")
            if isinstance(found, NoMatch):
                if slot > 0 or found.nodes:  # refusals of a Concat that starts like a Focus stem
                    emit_no_match(found, concat.name)
                return False
            nodes, data, phase = found
            if slot == 0:
                shape = graph.shape(data, view=View.DATA)
                if shape is None or len(shape) != 4 or graph.elem_type(data, view=View.DATA) not in _TYPES:
                    emit_no_match(NoMatch(f"{data!r} is not a float or double tensor of rank 4"), concat.name)
                    return False
                x = data
            elif data != x:
                emit_no_match(NoMatch(f"branch {slot} slices {data!r}, not {x!r}"), concat.name)
                return False
            branches.append(nodes)
            phases.append(phase)
        if sorted(phases) != sorted(CANONICAL_PHASES):
            emit_no_match(NoMatch(f"the phases {phases} are not the four (H, W) offsets once each"), concat.name)
            return False
        permutation = [CANONICAL_PHASES.index(p) for p in phases]
        canonical = permutation == [0, 1, 2, 3]
        channels = None if canonical else _static_dim(graph, x, 1)
        if not canonical and channels is None:
            emit_no_match(NoMatch(f"phases out of order and the channel dim of {x!r} is not static"), concat.name)
            return False
        self._rewrite(graph, concat, branches, x, permutation, channels)
        return True

    def _rewrite(
        self,
        graph: Graph,
        concat: Node,
        branches: list[list[Node]],
        x: str,
        permutation: list[int],
        channels: int | None,
    ) -> None:
        blocksize = {"blocksize": onnx.helper.make_attribute("blocksize", BLOCK)}
        if channels is None:
            end = graph.add_node(
                graph.generate_node_name("SpaceToDepth"),
                "SpaceToDepth",
                [x],
                [""],
                attributes=blocksize,
                doc_string="Fused Slice*4 + Concat into SpaceToDepth",
                ep=concat.ep,
            )
        else:
            out = graph.new_value("space_to_depth_out")
            graph.add_node(
                graph.generate_node_name("SpaceToDepth"),
                "SpaceToDepth",
                [x],
                [out],
                attributes=blocksize,
                doc_string="Fused Slice*4 + Concat into SpaceToDepth + channel permutation",
                ep=concat.ep,
            )
            indices = np.array([b * channels + c for b in permutation for c in range(channels)], dtype=np.int64)
            name = graph.generate_value_name("space_to_depth_gather_indices")
            graph.add_initializer(tensor_from_array(indices, name, onnx.TensorProto.INT64))
            end = graph.add_node(
                graph.generate_node_name("Gather"),
                "Gather",
                [out, name],
                [""],
                attributes={"axis": onnx.helper.make_attribute("axis", 1)},
                doc_string="Reorder SpaceToDepth channels to preserve Slice+Concat block order",
                ep=concat.ep,
            )
        outputs = list(concat.outputs)
        graph.remove_node(concat)
        upper: list[Node] = []
        for nodes in branches:
            for node in nodes[1:]:
                if all(node is not seen for seen in upper):
                    upper.append(node)
        for nodes in branches:
            graph.remove_node(nodes[0])
        for node in upper:
            if output_edge_count(graph, node) == 0 and not node_produces_graph_output(graph, node):
                graph.remove_node(node)
        for slot, value in enumerate(outputs):
            graph.set_output(end, slot, value)
