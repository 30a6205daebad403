"""BiasSoftmaxFusion: ``Softmax(input + bias)`` becomes one ``com.microsoft`` BiasSoftmax when the bias broadcasts
over the input in one of two simple ways (``bias_softmax_fusion.cc``, Level2)::

    before                                        after
    input --> Add --> Softmax(axis) --> y          input --+
               ^                                           +--> BiasSoftmax(axis=k, is_inner_broadcast) --> y
    bias ------+                                   bias ---+

Rules (ORT 1.32):

* registered for the CPU, CUDA and ROCm EPs, but the Add itself must be assigned to the **CUDA or ROCm** EP (the
  only EPs with a BiasSoftmax kernel): **in a CPU session the pass never changes a graph** (a CPU session of 1.32
  logs ``BiasSoftmaxFusion modified: 0`` on every fixture of ``biassoftmax/``: BERT's [B, 1, 1, S] mask, opsets
  11 and 13, either input order). The rules below are those of the source, kept for the reader and for a
  CUDA-assigned graph;
* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is an Add (7, 13, 14)
  with exactly one output edge and no graph output (``CheckOutputEdges``); both inputs have a shape of rank >= 1
  and are float16, float or double;
* its consumer is a Softmax (1, 11, 13) on the Add's EP;
* the softmax axis ``k``: the ``axis`` attribute, else 1 below opset 13 and -1 from 13 on, made non-negative over
  the larger input rank; from Softmax-13 on ``k`` must be the last axis;
* the dims from ``k`` on (counted from the end of each input) are equal (equal values or equal symbols);
* inner broadcast (same ranks): the first axis ``B`` before ``k`` where the inputs differ, the input the one whose
  dim there is not 1 (or input 0 if there is none), and the bias's dims ``B..k-1`` all 1 -> ``is_inner_broadcast``
  1;
* otherwise outer broadcast: walking back from just before the softmax dims while the dims agree, the input the one
  with more dims left (input 0 on a tie whose dim is not 1), and the bias's remaining leading dims all 1 ->
  ``is_inner_broadcast`` 0; anything else is refused;
* the new node: ``GenerateNodeName("BiasSoftmax")``, doc string "fused <Add> and <Softmax> into softmax(input +
  bias)", inputs (input, bias), the Softmax's output, int attributes ``axis`` = k then ``is_inner_broadcast``,
  domain ``com.microsoft``, the Add's EP; Add and Softmax are removed.
"""

from __future__ import annotations

import onnx

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node, ShapeDims, dims_equal
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import check_output_edges, finalize_nodes_fusion, is_supported_op, output_nodes

__all__ = ["BiasSoftmaxFusion"]

MS_DOMAIN = "com.microsoft"
#: the EPs whose Add nodes the pass fuses (the ones with a BiasSoftmax kernel)
FUSING_EPS = ("CUDAExecutionProvider", "ROCMExecutionProvider")
_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def _is(dim: int | str | None, value: int) -> bool:
    """ORT's ``dim == value`` of this file: a known dim of that value."""
    return isinstance(dim, int) and dim == value


def select_bias(shape1: ShapeDims, shape2: ShapeDims, axis: int, since_13: bool) -> tuple[int, int, bool] | NoMatch:
    """``TrySelectInputAndBiasWithAlignment``: (the slot of the input, k, is_inner_broadcast), or why not."""
    n1, n2 = len(shape1), len(shape2)
    rank = max(n1, n2)
    k = axis + rank if axis < 0 else axis
    if since_13 and k != rank - 1:
        return NoMatch(f"Softmax-13 axis {k} is not the last axis")
    single = rank - k
    if single > n1 or single > n2:
        return NoMatch("an input has fewer dims than the softmax axes")
    for i in range(1, single + 1):
        if not dims_equal(shape1[n1 - i], shape2[n2 - i]):
            return NoMatch("the dims from the softmax axis on differ")
    if n1 == n2:
        pos = 0
        while pos < k and dims_equal(shape1[pos], shape2[pos]):
            pos += 1
        lhs = pos == k or not _is(shape1[pos], 1)
        mask = shape2 if lhs else shape1
        if all(_is(mask[i], 1) for i in range(pos, k)):
            return (0 if lhs else 1), k, True
    pos1, pos2 = n1 - single - 1, n2 - single - 1
    while pos1 >= 0 and pos2 >= 0 and dims_equal(shape1[pos1], shape2[pos2]):
        pos1 -= 1
        pos2 -= 1
    lhs = pos1 > pos2 or (pos1 == pos2 and (pos1 < 0 or not _is(shape1[pos1], 1)))
    mask = shape2 if lhs else shape1
    if not all(_is(mask[i], 1) for i in range(pos2 if lhs else pos1, -1, -1)):
        return NoMatch("the bias broadcasts neither over inner nor over outer dims")
    return (0 if lhs else 1), k, False


class BiasSoftmaxFusion(GraphTransformer):
    """Fuse ``Softmax(input + bias)`` into one BiasSoftmax (CUDA/ROCm-assigned nodes only)."""

    name = "BiasSoftmaxFusion"
    compatible_eps = ("CPUExecutionProvider", "CUDAExecutionProvider", "ROCMExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("Add",))

    def _fuse(self, graph: Graph, add: Node) -> bool:
        if not is_supported_op(add, "Add", (7, 13, 14)):
            return False
        if add.ep not in FUSING_EPS:
            if any(n.op_type == "Softmax" for n in output_nodes(graph, add)):
                why = f"Add {add.name!r} is on {add.ep or '(no EP)'}, not the CUDA or ROCm EP"
                emit_no_match(NoMatch(why), add.name)
            return False
        if not check_output_edges(graph, add, 1):
            return False
        shape1, shape2 = graph.shape(add.inputs[0]), graph.shape(add.inputs[1])
        if shape1 is None or shape2 is None or not shape1 or not shape2:
            return False
        if graph.elem_type(add.inputs[0]) not in _TYPES or graph.elem_type(add.inputs[1]) not in _TYPES:
            return False
        softmax = output_nodes(graph, add)[0]
        if not is_supported_op(softmax, "Softmax", (1, 11, 13)) or softmax.ep != add.ep:
            return False
        since_13 = softmax.since_version not in (1, 11)
        axis = softmax.attr_int("axis", -1 if since_13 else 1)
        found = select_bias(shape1, shape2, axis, since_13)
        if isinstance(found, NoMatch):
            emit_no_match(found, add.name)
            return False
        slot, k, inner = found
        fused = graph.add_node(
            graph.generate_node_name("BiasSoftmax"),
            "BiasSoftmax",
            [add.inputs[slot], add.inputs[1 - slot]],
            [""],
            domain=MS_DOMAIN,
            attributes={
                "axis": onnx.helper.make_attribute("axis", k),
                "is_inner_broadcast": onnx.helper.make_attribute("is_inner_broadcast", 1 if inner else 0),
            },
            doc_string=f"fused {add.name} and {softmax.name} into softmax(input + bias)",
            ep=add.ep,
        )
        finalize_nodes_fusion(graph, [add, softmax], fused)
        emit_fused(add.name, "BiasSoftmax", fused.name, MS_DOMAIN)
        return True
