"""EmbedLayerNormFusion: BERT's embedding sum and its LayerNorm become com.microsoft EmbedLayerNormalization
(``embed_layer_norm_fusion.cc``, Level2, CPU EP)::

    before                                                                   after
    input_ids -> Gather(word_embed) ------------+                             input_ids -> Cast(int32) -+
    input_ids -> [position ids] -> Gather(pos) -> Add -+                     segment_ids -> Cast(int32) -+
    segment_ids -> Gather(seg_embed) -----------------> Add                  word, pos, seg embeddings, gamma, beta
                                      -> LayerNormalization -> Attention   -> EmbedLayerNormalization (epsilon)
                                                                             -> (LN's output, mask_index) -> Attention

DistilBERT's form has no segment embedding: ``Add(Gather(word), Gather(pos)) -> LayerNormalization`` (the node's
segment inputs are then empty). ORT 1.32 does not fuse the attention mask: the ReduceSum stays and the node's
``mask_index`` output is a fresh, unused value.

Rules (ORT 1.32):

* every node in one topological snapshot, subgraphs first; a candidate is a LayerNormalization (1 or 17, ai.onnx)
  on a compatible EP with three inputs (beta present) whose first child of type ``Attention`` is com.microsoft
  Attention-1 on a compatible EP; its input 0 comes from an Add (7, 13, 14). That Add's input edges are exactly two
  Gathers: DistilBERT; otherwise the BERT form;
* BERT: the Add's input 1 is a Gather (segment, one output edge) whose table is 2-D with a known positive
  ``hidden`` dim 1; its input 0 an Add (one output edge) whose input 0 is a Gather (word, one output edge) with a
  2-D table of the same hidden size; ``input_ids`` is the word Gather's indices. The position embedding is either
  the inner Add's input 1 as a constant ``[batch, seq, hidden]`` float/float16 initializer, identical for every
  batch (input_ids of known dims), which becomes a new ``[seq, hidden]`` initializer ``position_embeddings`` (the
  pass then reports a change even if a later check refuses: the unused initializer goes at the next Resolve), or a
  Gather (one output edge) at the inner Add's input 1 whose indices are a constant ``[0..seq-1]`` per batch or come
  from one of ORT's position subgraphs (below);
* DistilBERT: the word Gather at input 0 (one output edge, 2-D table with a known dim 1), the position Gather at
  input 1 as above (no constant-embedding form);
* the position table is 2-D of the same hidden size; input_ids (and segment_ids) are 2-D int32/int64, and have the
  same shape (unknown dims as -1); gamma's and beta's dim 0 is the hidden size;
* position subgraphs, from the position Gather's indices: ``Expand <- Unsqueeze <- [Cast <-] Squeeze <- Transpose
  <- NonZero <- ConstantOfShape <- Unsqueeze <- Gather <- Shape`` or ``Expand <- Unsqueeze <- Range <- [Cast <-]
  Gather <- Shape`` (Range from 0 by 1); every node one output edge, the Gather one or two, the Shape 1, 2 or 4.
  A Gather with one edge reads index 1 and the Expand's shape is a Shape; both Shapes read input_ids. With two,
  the Expand's shape is a Concat (directly, or through ``Reshape -> Equal -> Where``) of
  ``Unsqueeze(Gather(Shape(input_ids), 0))`` and ``Unsqueeze(<that Gather>)`` (index 1), Shapes from opset 15 with
  default start/end;
* rewrite: input_ids and segment_ids cast to int32 when int64 (``GenerateNodeArgName(<ids>_Int32)``, then
  ``GenerateNodeName(<ids>_Cast)``, doc ``"Cast Input from int64 to int32"``); a new value
  ``GenerateNodeArgName(mask_index)``; the node ``GenerateNodeName(EmbedLayerNormalization)``, doc
  ``"fused EmbedLayerNorm subgraphs "``, inputs (ids, segment ids, word, position, segment tables, gamma, beta),
  outputs (the LayerNorm's output, mask_index), the LayerNorm's ``epsilon`` attribute (else 1e-12), its EP; then the
  position Gather and the ancestors it alone fed go (``RemoveNodesWithOneOutputBottomUp``), and the Gathers, Adds
  and LayerNorm.

Each LayerNormalization with beta is a candidate: a fusion is reported as a ``fused`` event, a refusal as
``no-match`` events, in the words ORT logs at VERBOSE where it logs any (its ``DEBUG_LOG`` lines, innermost first);
``qdqopt explain --pass EmbedLayerNormFusion`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import onnx

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    EdgeToMatch,
    add_cast,
    check_output_edges,
    constant_array,
    constant_initializer,
    edge_path,
    find_path,
    first_child_by_type,
    is_constant,
    is_supported_op,
    output_edge_count,
    remove_nodes_with_one_output_bottom_up,
)
from qdqopt.passes.qdq_util import is_scalar_arg

__all__ = ["EmbedLayerNormFusion"]

_TP = onnx.TensorProto
MS = "com.microsoft"
DEFAULT_EPSILON = 1e-12  # contrib::kDefaultEmbedLayerNormEpsilon
_INT64_MAX = 2**63 - 1

_GATHER = (1, 11, 13)
_ADD = (7, 13, 14)
_SHAPE = (1, 13, 15, 19, 21, 23, 24, 25)
_UNSQUEEZE = (1, 11, 13, 21, 23, 24, 25)
_SQUEEZE = _UNSQUEEZE
_CAST = (9, 13, 19, 21, 23, 24, 25)
_TRANSPOSE = (1, 13, 21, 23, 24, 25)
_EXPAND = (8, 13)
_NONZERO = (9, 13)
_CONSTANT_OF_SHAPE = (9, 20, 21, 23, 24, 25)
_RANGE = (1, 11)
_CONCAT = (4, 11, 13)
_WHERE = (9, 16)
_EQUAL = (1, 7, 11, 13, 19)
_RESHAPE = (5, 13, 14, 19, 21, 23, 24, 25)


_TAIL_NONZERO = edge_path(
    ("Transpose", _TRANSPOSE), ("NonZero", _NONZERO), ("ConstantOfShape", _CONSTANT_OF_SHAPE),
    ("Unsqueeze", _UNSQUEEZE), ("Gather", _GATHER), ("Shape", _SHAPE),
)  # fmt: skip
#: the position paths from the position Gather, in ORT's order (NonZero with and without Cast, Range likewise)
POSITION_PATHS: tuple[tuple[EdgeToMatch, ...], ...] = (
    edge_path(("Expand@1", _EXPAND), ("Unsqueeze", _UNSQUEEZE), ("Cast", _CAST), ("Squeeze", _SQUEEZE)) + _TAIL_NONZERO,
    edge_path(("Expand@1", _EXPAND), ("Unsqueeze", _UNSQUEEZE), ("Squeeze", _SQUEEZE)) + _TAIL_NONZERO,
    edge_path(("Expand@1", _EXPAND), ("Unsqueeze", _UNSQUEEZE), ("Range", _RANGE), ("Cast@1", _CAST),
              ("Gather", _GATHER), ("Shape", _SHAPE)),
    edge_path(("Expand@1", _EXPAND), ("Unsqueeze", _UNSQUEEZE), ("Range", _RANGE), ("Gather@1", _GATHER),
              ("Shape", _SHAPE)),
)  # fmt: skip


_T = TypeVar("_T")
_NO_POSITION = "Failed to match position embedding subgraph."


class _Refused(Exception):
    """A check refused the candidate; ``reasons`` innermost first, as ORT logs them."""

    def __init__(self, *reasons: str) -> None:
        super().__init__(reasons[0])
        self.reasons = list(reasons)


def _require(ok: bool, *reasons: str) -> None:
    if not ok:
        raise _Refused(*reasons)


def _require_path(graph: Graph, node: Node, edges: tuple[EdgeToMatch, ...], *reasons: str) -> list[Node]:
    """``FindPath`` up ``node``'s inputs, or a refusal with ``reasons``."""
    found = find_path(graph, node, True, edges)
    _require(found is not None, *reasons)
    assert found is not None
    return found


def _embedding_gather(graph: Graph, add: Node, slot: int, what: str) -> tuple[Node, str, int | None]:
    """The ``what`` Gather at ``add``'s input ``slot`` (used by it alone), its embedding table and the table's
    hidden size."""
    (gather,) = _require_path(
        graph, add, edge_path((f"Gather@{slot}", _GATHER)), f"no {what} Gather at the Add's input {slot}"
    )
    _require(check_output_edges(graph, gather, 1), f"the {what} Gather has other consumers")
    return gather, gather.inputs[0], _table_width(graph, gather.inputs[0])


def _table_width(graph: Graph, name: str) -> int | None:
    """The hidden size of an embedding table: dim 1 of a 2-D shape, when it is a value."""
    shape = graph.shape(name)
    return _dim_value(shape[1]) if shape is not None and len(shape) == 2 else None


def _also(reason: str, call: Callable[[], _T]) -> _T:
    """Run ``call`` and return what it returns; a refusal inside it gets ``reason`` appended (the outer function's
    log line)."""
    try:
        return call()
    except _Refused as refused:
        refused.reasons.append(reason)
        raise


def int_initializer_is(graph: Graph, name: str, expected: int) -> bool:
    """``optimizer_utils::IsInitializerWithExpectedValue(graph, arg, int64_t, is_constant=true)``: a scalar constant
    int32/int64 initializer holding ``expected``."""
    if not name or not is_scalar_arg(graph, name):
        return False
    found = constant_initializer(graph, name)
    if found is None or found[1].data_type not in (_TP.INT32, _TP.INT64):
        return False
    array = constant_array(graph, name)
    return array is not None and array.size > 0 and int(array.reshape(-1)[0]) == expected


def _dim_value(dim: int | str | None) -> int | None:
    return dim if isinstance(dim, int) else None


def _shape_attrs_default(node: Node) -> bool:
    """From Shape-15 on: no ``start`` other than 0 and no ``end`` other than INT64_MAX."""
    if (node.since_version or 0) < 15:
        return True
    start, end = node.attr_int("start"), node.attr_int("end")
    return (start is None or start == 0) and (end is None or end == _INT64_MAX)


def _check_input(graph: Graph, name: str) -> None:
    """``CheckInput``: a 2-D int32/int64 tensor (dims may be symbolic)."""
    shape = graph.shape(name)
    _require(
        shape is not None and len(shape) == 2 and graph.elem_type(name) is not None,
        "Input shape is unknown or not 2D, or data type unknown",
    )
    _require(graph.elem_type(name) in (_TP.INT64, _TP.INT32), "Input data type is not int32 or int64")


def _tensor_shape(graph: Graph, name: str) -> list[int]:
    """``GetTensorShapeFromTensorShapeProto``: the dims, -1 where not a value."""
    shape = graph.shape(name) or []
    return [d if isinstance(d, int) else -1 for d in shape]


def _match_input_to_concat(graph: Graph, cur: Node, input_ids: str, index: int, gather1_expected: Node) -> None:
    """``MatchInputToConcatSubgraph``: ``cur``'s input ``index`` is ``Concat(Unsqueeze(Gather(Shape(ids), 0)),
    Unsqueeze(Gather(Shape(ids), 1)))``, that second Gather being the one the position path went through."""
    path1 = _require_path(
        graph,
        cur,
        edge_path((f"Concat@{index}", _CONCAT), ("Unsqueeze", _UNSQUEEZE), ("Gather", _GATHER), ("Shape", _SHAPE)),
        "Failed to find path 1 of position shape.",
    )
    for i, n in enumerate(path1):
        if not check_output_edges(graph, n, 1) and i != len(path1) - 1:
            raise _Refused("Output edge count not expected for nodes in path 1 of position shape.")
    concat, gather0, shape0 = path1[0], path1[2], path1[3]
    _require(_shape_attrs_default(shape0), "Shape node in path 1 has non-default start/end attributes.")
    _require(
        int_initializer_is(graph, gather0.inputs[1], 0),
        "Second input of Gather in path 1 of position shape should be a constant with value 0.",
    )
    path2 = _require_path(
        graph,
        concat,
        edge_path(("Unsqueeze@1", _UNSQUEEZE), ("Gather", _GATHER), ("Shape", _SHAPE)),
        "Failed to find path 2 of position shape.",
    )
    _require(
        check_output_edges(graph, path2[0], 1) and check_output_edges(graph, path2[1], 2),
        "Output edge count not expected for nodes in path 2 of position shape.",
    )
    gather1, shape1 = path2[1], path2[2]
    _require(_shape_attrs_default(shape1), "Shape node in path 2 has non-default start/end attributes.")
    _require(gather1.index == gather1_expected.index, "Gather node in path 2 is not linked to another subgraph.")
    _require(
        int_initializer_is(graph, gather1.inputs[1], 1),
        "Second input of Gather in path 2 of position shape should be a constant with value 1.",
    )
    _require(
        shape0.inputs[0] == input_ids and shape1.inputs[0] == input_ids,
        "The parent of two shape nodes are expected to be input_ids.",
    )
    if not (check_output_edges(graph, shape0, 1) and check_output_edges(graph, shape1, 1)):
        # one Shape for both paths (CommonSubexpressionElimination merged them): 2 or 4 output edges
        _require(shape0.index == shape1.index and output_edge_count(graph, shape0) in (2, 4), "")


def _match_position_from_gather(graph: Graph, position_gather: Node, input_ids: str) -> None:
    """``MatchPositionEmbeddingSubgraphsFromGather``: the position ids come from one of :data:`POSITION_PATHS`."""
    path = None
    for candidate in POSITION_PATHS:
        path = find_path(graph, position_gather, True, candidate)
        if path is not None:
            break
    _require(path is not None, "")
    assert path is not None
    gather_i, shape_i = len(path) - 2, len(path) - 1
    for i, n in enumerate(path):
        if check_output_edges(graph, n, 1):
            continue
        if i == gather_i and check_output_edges(graph, n, 2):
            continue
        if i == shape_i and (check_output_edges(graph, n, 2) or check_output_edges(graph, n, 4)):
            continue
        raise _Refused("Output edge count not expected for nodes in path1.")
    expand, gather = path[0], path[gather_i]
    if path[2].op_type == "Range":
        rng = path[2]
        _require(
            int_initializer_is(graph, rng.inputs[0], 0), "The first input of Range should be a constant with value 0."
        )
        _require(
            int_initializer_is(graph, rng.inputs[2], 1), "The third input of Range should be a constant with value 1."
        )
    if output_edge_count(graph, gather) == 1:
        _require(
            int_initializer_is(graph, gather.inputs[1], 1), "Second input of Gather should be a constant with value 1. "
        )
        found = _require_path(graph, expand, edge_path(("Shape@1", _SHAPE)), "Failed to match Shape node. ")
        _require(
            path[-1].inputs[0] == input_ids and found[0].inputs[0] == input_ids,
            "The parent of shape nodes are expected to be input_ids.",
        )
        return
    where_path = find_path(
        graph, expand, True, edge_path(("Where@1", _WHERE), ("Equal", _EQUAL), ("Reshape", _RESHAPE))
    )
    if where_path is not None:
        where, equal, reshape = where_path
        _require(
            check_output_edges(graph, where, 1) and check_output_edges(graph, equal, 1)
            and check_output_edges(graph, reshape, 2),
            "Optional position subgraph nodes number of outputs unexpected.",
        )  # fmt: skip
        _require(
            len(where.inputs) > 2 and where.inputs[2] == reshape.outputs[0],
            "Optional position subgraph nodes Where node is expected to be the parent of Reshape.",
        )
        _also(
            "Failed to match position subgraph.", lambda: _match_input_to_concat(graph, reshape, input_ids, 0, gather)
        )
        return
    _also("Failed to match position subgraph.", lambda: _match_input_to_concat(graph, expand, input_ids, 1, gather))


def _match_position_embedding(graph: Graph, add: Node, input_ids: str) -> tuple[Node, str]:
    """``MatchPositionEmbeddingSubgraph``: the Gather at ``add``'s input 1 and its table."""
    (gather,) = _require_path(graph, add, edge_path(("Gather@1", _GATHER)), "")
    _require(check_output_edges(graph, gather, 1), "")
    indices = gather.inputs[1]
    if is_constant(graph, indices):
        array = constant_array(graph, indices)
        tensor = constant_initializer(graph, indices)
        shape = graph.shape(input_ids)
        _require(shape is not None and len(shape) >= 2, "")  # (ORT reads the dims unchecked)
        assert shape is not None and tensor is not None and array is not None
        d0, d1 = _dim_value(shape[0]), _dim_value(shape[1])
        _require(tensor[1].data_type in (_TP.INT32, _TP.INT64) and d0 is not None and d1 is not None, "")
        assert d0 is not None and d1 is not None
        data = array.reshape(-1)
        _require(data.size == d0 * d1, "")
        expected = np.tile(np.arange(max(d1, 1), dtype=np.int64), max(d0, 1))[: data.size] if d1 > 0 else data
        _require(bool(np.array_equal(data.astype(np.int64), expected)), "")
    else:
        _match_position_from_gather(graph, gather, input_ids)
    return gather, gather.inputs[0]


def _batches_equal(data: np.ndarray, batch: int, count: int) -> bool:
    """``CheckEmbeddingData``: every batch equals the first (float ``!=``: NaN never equal; float16 by bits, NaN
    never equal)."""
    flat = data.reshape(-1)[: batch * count]
    first = flat[:count]
    rows = flat.reshape(batch, count)
    if flat.dtype == np.float16:
        bits = rows.view(np.uint16)
        return bool(np.all(bits == bits[0]) and not np.any(np.isnan(first)))
    return bool(np.all(rows == first))


class EmbedLayerNormFusion(GraphTransformer):
    """Fuse the word/position(/segment) embedding Gathers, their Adds and the LayerNorm before an Attention."""

    name = "EmbedLayerNormFusion"
    compatible_eps = ("CPUExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._visit(graph, node), ops=("LayerNormalization",)
        )

    def _visit(self, graph: Graph, ln: Node) -> bool:
        if not is_supported_op(ln, "LayerNormalization", (1, 17)) or not self.node_is_compatible(ln):
            return False
        if not (len(ln.inputs) == 3 and ln.inputs[2]):
            emit_no_match(NoMatch("LayerNormalization without beta (three inputs needed)"), ln.name)
            return False
        attention = first_child_by_type(graph, ln, "Attention")
        if attention is None:
            emit_no_match(NoMatch("no Attention after the LayerNormalization"), ln.name)
            return False
        if not is_supported_op(attention, "Attention", (1,), MS) or not self.node_is_compatible(attention):
            emit_no_match(NoMatch("the Attention is not com.microsoft Attention-1 on a compatible EP"), ln.name)
            return False
        found = find_path(graph, ln, True, edge_path(("Add", _ADD)))
        if found is None:
            emit_no_match(NoMatch("no Add before the LayerNormalization"), ln.name)
            return False
        ln_add = found[0]
        edges = graph.input_edges(ln_add)
        distil = len(edges) == 2 and all(graph.node(e.src).op_type == "Gather" for e in edges)  # type: ignore[union-attr]
        self._extracted = False
        try:
            if distil:
                self._fuse_distilbert(graph, ln_add, ln)
            else:
                self._fuse_bert(graph, ln_add, ln)
        except _Refused as refused:
            reasons = [r for r in refused.reasons if r] or ["the embedding subgraph does not match"]
            form = "DistilBERT" if distil else "BERT"
            emit_no_match(NoMatch(reasons[0], (ln_add.name,), (*reasons[1:], f"({form} form)")), ln.name)
            return self._extracted
        return True

    # ------------------------------------------------------------------------------------------ the two forms
    def _fuse_bert(self, graph: Graph, ln_add: Node, ln: Node) -> None:
        """``FuseSubGraph``: word + position + segment."""
        seg_gather, seg_embedding, hidden = _embedding_gather(graph, ln_add, 1, "segment")
        _require(hidden is not None and hidden > 0, "segment embedding not 2-D with a known hidden size")
        assert hidden is not None
        add, word_gather = _require_path(
            graph,
            ln_add,
            edge_path(("Add", _ADD), ("Gather", _GATHER)),
            "no Add(Gather, ...) at the Add's input 0",
        )
        _require(
            check_output_edges(graph, add, 1) and check_output_edges(graph, word_gather, 1),
            "the word Gather or its Add has other consumers",
        )
        word_embedding = word_gather.inputs[0]
        _require(_table_width(graph, word_embedding) == hidden, "Word embedding shape not expected.")
        input_ids = word_gather.inputs[1]
        position_gather: Node | None = None
        position_embedding: str | None
        if is_constant(graph, add.inputs[1]):
            position_embedding = self._extract_embedding(graph, add.inputs[1], input_ids, hidden)
        else:
            position_gather, position_embedding = _also(
                _NO_POSITION, lambda: _match_position_embedding(graph, add, input_ids)
            )
        _require(position_embedding is not None, "Failed to get position embedding weights.")
        assert position_embedding is not None
        self._check_common(graph, ln, position_embedding, input_ids, hidden)
        segment_ids = seg_gather.inputs[1]
        _also("Segment id is not valid. ", lambda: _check_input(graph, segment_ids))
        _require(
            _tensor_shape(graph, input_ids) == _tensor_shape(graph, segment_ids),
            "Input_ids and segment id should have the same shape. ",
        )
        self._check_gamma_beta(graph, ln, hidden)
        self._rewrite(graph, ln, input_ids, segment_ids, word_embedding, position_embedding, seg_embedding,
                      position_gather, [word_gather, seg_gather, add, ln_add, ln])  # fmt: skip

    def _fuse_distilbert(self, graph: Graph, ln_add: Node, ln: Node) -> None:
        """``FuseSubGraphDistilBert``: word + position, no segment."""
        word_gather, word_embedding, hidden = _embedding_gather(graph, ln_add, 0, "word")
        _require(hidden is not None, "Word embedding shape not expected.")
        assert hidden is not None
        input_ids = word_gather.inputs[1]
        position_gather, position_embedding = _also(
            _NO_POSITION, lambda: _match_position_embedding(graph, ln_add, input_ids)
        )
        self._check_common(graph, ln, position_embedding, input_ids, hidden)
        self._check_gamma_beta(graph, ln, hidden)
        self._rewrite(graph, ln, input_ids, None, word_embedding, position_embedding, None, position_gather,
                      [word_gather, ln_add, ln])  # fmt: skip

    # ------------------------------------------------------------------------------------------------ checks
    def _check_common(self, graph: Graph, ln: Node, position_embedding: str, input_ids: str, hidden: int) -> None:
        _require(_table_width(graph, position_embedding) == hidden, "Position embedding shape is not expected.")
        _also("Input id is not valid. ", lambda: _check_input(graph, input_ids))

    def _check_gamma_beta(self, graph: Graph, ln: Node, hidden: int) -> None:
        for name, what in ((ln.inputs[1], "Gamma"), (ln.inputs[2], "Beta")):
            shape = graph.shape(name)
            dim = _dim_value(shape[0]) if shape else None
            _require(shape is not None and (dim or 0) == hidden, f"{what} should be of shape (hidden_size). ")

    def _extract_embedding(self, graph: Graph, name: str, input_ids: str, hidden: int) -> str | None:
        """The constant ``[batch, seq, hidden]`` position embedding: one batch of it as a new initializer (None when
        the batches differ)."""
        shape = graph.shape(input_ids)
        _require(
            shape is not None and len(shape) == 2 and all(isinstance(d, int) for d in shape),
            "Input is expected to have dim value in all dimensions.",
        )
        assert shape is not None
        batch, seq = int(shape[0] or 0), int(shape[1] or 0)
        _require(batch > 0 and seq > 0, "")
        tensor = graph.initializer(name)
        _require(tensor is not None, "Failed to get initializer tensor.")
        assert tensor is not None
        _require(list(tensor.dims) == [batch, seq, hidden], "Position embedding shape not matched.")
        _require(
            tensor.data_type in (_TP.FLOAT, _TP.FLOAT16), "Position embedding data type shall be float or float16."
        )
        data = graph.array(name)
        count = seq * hidden
        if not _batches_equal(data, batch, count):
            return None
        table = onnx.numpy_helper.from_array(data.reshape(-1)[:count].reshape(seq, hidden).copy())
        table.name = graph.generate_value_name("position_embeddings")
        graph.add_initializer(table)
        self._extracted = True  # ORT's `modified = true`, whatever follows
        return table.name

    # ----------------------------------------------------------------------------------------------- rewrite
    def _cast_to_int32(self, graph: Graph, name: str, ln: Node) -> str:
        """``CastToInt32``: int64 ids through a new Cast to int32."""
        if graph.elem_type(name) == _TP.INT32:
            return name
        dims = (graph.shape(name, as_written=True) or [])[:2]
        doc = "Cast Input from int64 to int32"
        return add_cast(graph, name, _TP.INT32, dims, name + "_Int32", name + "_Cast", doc, ln.ep)

    def _rewrite(
        self,
        graph: Graph,
        ln: Node,
        input_ids: str,
        segment_ids: str | None,
        word_embedding: str,
        position_embedding: str,
        segment_embedding: str | None,
        position_gather: Node | None,
        remove: list[Node],
    ) -> None:
        ids = self._cast_to_int32(graph, input_ids, ln)
        seg = self._cast_to_int32(graph, segment_ids, ln) if segment_ids and segment_embedding else ""
        mask_index = graph.new_value("mask_index")
        epsilon = ln.attributes.get("epsilon")
        attr = epsilon if epsilon is not None else onnx.helper.make_attribute("epsilon", DEFAULT_EPSILON)
        ln_output = ln.outputs[0]
        fused = graph.add_node(
            graph.generate_node_name("EmbedLayerNormalization"),
            "EmbedLayerNormalization",
            [ids, seg, word_embedding, position_embedding, segment_embedding or "", ln.inputs[1], ln.inputs[2]],
            ["", mask_index],
            domain=MS,
            attributes={"epsilon": attr},
            doc_string="fused EmbedLayerNorm subgraphs ",
            ep=ln.ep,
        )
        if position_gather is not None:
            remove_nodes_with_one_output_bottom_up(graph, position_gather)
        for node in remove:
            if graph.node(node.index) is not None:
                graph.remove_node(node)
        graph.set_output(fused, 0, ln_output)
        emit_fused(ln.name, "EmbedLayerNormalization", fused.name, MS)
