"""AttentionFusion: a BERT, DistilBERT or GPT-2 self-attention block becomes one com.microsoft Attention node
(``attention_fusion.cc`` and ``attention_fusion_helper.h``, Level2, CPU EP; the GPT-2 form and the matchers it
shares with BERT in :mod:`qdqopt.passes.attention_fusion_helper`)::

    before (BERT)                                                     after
    LN -> q/k/v MatMul(WxW) -> Add(W) -> Reshape(0,0,N,H) -> Transpose   LN, qkv_weights [W, 3W], qkv_bias [3W],
    q,k -> MatMul -> Div(sqrt H) -> Add(mask) -> Softmax(axis 3)          mask (int32) -> Attention(num_heads,
      -> MatMul(., v) -> Transpose(0,2,1,3) -> Reshape(0,0,W) -> ...      mask_filter_value) -> ...
    mask -> Unsqueeze(1) -> Unsqueeze(2) [-> Cast] -> Sub(1, .) -> Mul(., c)     (mask int64/float: a Cast to int32)

Rules (ORT 1.32):

* every node in one topological snapshot, subgraphs first; a candidate is a LayerNormalization (ai.onnx 1 or 17) on
  a compatible EP with 2 to 6 output edges and a bias input whose shape is ``[W]`` (known): ``W`` is the hidden
  size. Its consumers must be 1 Add, 3 MatMuls and as many Shapes as edges beyond 4 (BERT or DistilBERT), or 1
  Reshape and 1 or 3 Shapes and nothing else (GPT-2, ``FuseGptAttention``). Before that, ORT 1.32 tries every
  node as the qkv MatMul of a MobileCLIP block (``TryFuseMobileClipMHA``: MatMul -> Reshape -> Split(3) ->
  MultiHeadAttention; :mod:`qdqopt.passes.attention_fusion_mobileclip`);
* path v, from that Add up its input 0: Add (7, 13) <- MatMul (1, 9, 13) <- Reshape (5, 13) <- Transpose (1, 13)
  <- qkv MatMul (input 1) <- v Transpose <- v Reshape <- v Add <- v MatMul <- the same LayerNormalization. The v
  Add and v MatMul, the output Transpose, the qkv MatMul, the v Transpose and v Reshape have one output edge
  each (and no graph output); the two Transposes have perm (0, 2, 1, 3); the v Reshape constant is
  ``(0, 0 or -1, N, H)`` with ``0 < N <= W`` and ``N * H == W``; the output Reshape's is ``(0, 0, N*H or -1)``
  (or, DistilBERT, a Concat of 3 inputs: an Unsqueeze, ``[-1]`` and ``[W]``); the projection MatMul's and the v
  MatMul's input 1 are initializers of shape ``[W, W]``, the Adds' input 1 initializers of shape ``[W]``;
* the mask (``MatchInputMaskSubgraph``): the qkv MatMul's input 0 is a Softmax (1, 11, 13; one output edge) whose
  input 0 is an Add (7, 13) whose input 1 is a Mul (7, 13) whose input 0 is a Sub (7, 13) whose input 1 is a Cast
  (9) of an Unsqueeze (1, 11) of an Unsqueeze (1, 11), or directly the Unsqueeze; the Add, Sub, Cast and
  Unsqueezes have one output edge; the Softmax's ``axis`` is 3; the first Unsqueeze's ``axes`` [1], the second's
  [2]; the Sub's input 0 the scalar 1.0; the Mul's input 1 a float scalar initializer, written as the Attention's
  ``mask_filter_value`` (ORT 1.32 takes any value here, -10000 being only the usual one). In the opsets where the
  Unsqueeze takes its axes as an input (13 on) this form never matches;
* DistilBERT's mask: Softmax <- Where (9) <- Expand (8, 13) <- Reshape (1, 5, 13) <- Equal (1, 7, 11, 13), each
  with one output edge; Where's X the scalar -inf, its Y the q.k MatMul, which also feeds the Expand's shape
  through a Shape; Equal's B the scalar 0; the mask Reshape's shape a Concat of 4: Unsqueeze <- Gather(0) <- Shape
  and Unsqueeze <- Gather(1) <- Shape, both Shapes of the LayerNormalization's output, the first Unsqueeze the one
  the output Reshape's Concat reads, the middle inputs ``[1]`` and ``[1]``; the Attention's ``mask_filter_value``
  is then -10000 (``AttentionMaskNodesDistilBert``'s default: the Where's -inf is not read). In a full session the
  output Reshape keeps its Concat only when Level1's ReshapeFusion cannot fold it: with named batch and sequence
  dims it folds to ``(0, -1, W)``, which the v path refuses;
* path q: BERT: the mask Add's input 0 is a Div (7, 13) of a MatMul (1, 9) output; DistilBERT: the Where's input 2
  is a MatMul (1, 9, 13) of a Div (7, 13). From the q.k pivot: Transpose (0,2,1,3) <- Reshape ``(0, 0 or -1, N,
  H)`` <- Add <- MatMul <- LayerNormalization-1 (17 is refused here), the Div's input 1 the scalar ``sqrt(H)``;
  path k: the q.k MatMul's input 1: Transpose (0,2,3,1) <- Reshape (same constant rule) <- Add <- MatMul <- the
  LayerNormalization; q/k MatMul and Add initializers as for v; 1.32 refuses a q or k Reshape, Transpose, Add or
  MatMul with another consumer or a graph output ("q path has an external use", "q projection has an external
  use", and k's);
* the q, k and v weights (and biases) are initializers of one type, float or float16; the mask input has rank 2
  and type int64, int32 or float (else nothing is changed).

Rewrite: an int64 or float mask gets a Cast to int32 (``GenerateNodeArgName(Mask_Int32)`` typed int32 with the
mask's two dims, node ``GenerateNodeName(MaskCast)``, doc string "Cast mask from int64 to int32", the
LayerNormalization's EP; one per mask input for the whole pass application); ``qkv_weights`` ``[W, 3W]`` (each
row: q's row, k's row, v's row) and ``qkv_bias`` ``[3W]`` are added (``GenerateNodeArgName``, raw data); the node
``GenerateNodeName(Attention)``, doc string "Fused Attention subgraphs ", inputs (LN output, weights, bias, mask),
the output Reshape's output, attributes ``num_heads`` then ``mask_filter_value``, the LayerNormalization's EP.
Removed: the output Reshape and Transpose, the qkv MatMul, the v Transpose, Reshape, Add and MatMul, the q.k
MatMul and Div, the q and k Transposes, Reshapes, Adds and MatMuls, the Softmax and, BERT, the mask Add and, when
the mask Mul has only this consumer left, the Mul, Sub, Cast and Unsqueezes (layers sharing a mask keep them
until the last one); DistilBERT: the two Concats and what only they read (``RemoveNodesWithOneOutputBottomUp``),
then the Where, Expand, mask Reshape, Equal and the Shape of q.k.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from qdqopt.events import NoMatch, emit_fused, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.attention_fusion_helper import (
    MaskNodes,
    cast_mask_to_int32,
    check_nodes_in_path_k,
    check_nodes_in_path_q,
    check_nodes_in_path_v,
    external_use_free,
    fuse_gpt_attention,
    int_value_is,
    match_input_mask,
    replace_with_attention,
    set_mask_nodes_to_remove,
    shape_dim_path,
    validate_add_bias_initializer,
    validate_matmul_initializer,
)
from qdqopt.passes.attention_fusion_mobileclip import try_fuse_mobileclip_mha
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    EdgeToMatch,
    append_tensor_from_initializer,
    check_output_edges,
    edge_path,
    find_path,
    input_node,
    is_supported_op,
    output_edge_count,
    output_nodes,
    remove_nodes_with_one_output_bottom_up,
)
from qdqopt.passes.qdq_util import is_initializer_with_expected_value

__all__ = ["AttentionFusion"]

_TP = onnx.TensorProto
MS_DOMAIN = "com.microsoft"
_LN = (1, 17)
_ADD = (7, 13)
_MATMUL = (1, 9, 13)
_RESHAPE = (5, 13)
_TRANSPOSE = (1, 13)
_SOFTMAX = (1, 11, 13)
_SHAPE = (1, 13)
_UNSQ = (1, 11, 13)
_CONCAT = (4, 11, 13)
_GATHER = (1, 11, 13)


def _head_path(transpose_slot: int, ln_versions: tuple[int, ...]) -> tuple[EdgeToMatch, ...]:
    """q, k or v from its heads back to the LayerNormalization: Transpose (read at ``transpose_slot``) <- Reshape
    <- Add <- MatMul <- LayerNormalization."""
    return edge_path(
        (f"Transpose@{transpose_slot}", _TRANSPOSE), ("Reshape", _RESHAPE), ("Add", _ADD), ("MatMul", _MATMUL),
        ("LayerNormalization", ln_versions),
    )  # fmt: skip


#: path v: from the Add after the LayerNormalization up to it (the output projection, the qkv MatMul, then v)
PARENT_PATH = edge_path(
    ("Add", _ADD), ("MatMul", _MATMUL), ("Reshape", _RESHAPE), ("Transpose", _TRANSPOSE), ("MatMul", _MATMUL)
) + _head_path(1, _LN)
Q_PATH = _head_path(0, (1,))
K_PATH = _head_path(1, _LN)
#: BERT: the mask Add's input 0 back to the q.k MatMul; DistilBERT: the Where's input 2 back to the q Div
BERT_QK_PATH = edge_path(("Div", (7, 13)), ("MatMul", (1, 9)))
DISTIL_QK_PATH = edge_path(("MatMul@2", _MATMUL), ("Div", (7, 13)))
DISTIL_MASK_PATH = edge_path(
    ("Softmax", _SOFTMAX), ("Where", (9,)), ("Expand", (8, 13)), ("Reshape", (1, 5, 13)), ("Equal", (1, 7, 11, 13))
)


#: ``AttentionMaskNodesDistilBert::mask_filter_value``: the DistilBERT matcher never sets it (not the Where's -inf)
DISTIL_MASK_FILTER_VALUE = -10000.0


def _projection_ok(graph: Graph, add: Node, matmul: Node, hidden: int) -> bool:
    """``ValidateAddBiasInitializer`` and ``ValidateMatMulInitializer``: a ``[W]`` bias, a ``[W, W]`` weight."""
    return validate_add_bias_initializer(graph, add, hidden) and validate_matmul_initializer(graph, matmul, hidden)


#: ``FuseSubGraphQKImpl``'s words when the q or k path does not start at the LayerNormalization
_ROOT_REASON = {"q": "q root should be layer normalization", "k": "k root is not layer norm"}


def _match_head(
    graph: Graph,
    ln: Node,
    start: Node,
    which: str,
    hidden: int,
    check: Callable[[Node, Node], NoMatch | None],
) -> list[Node] | NoMatch:
    """Path q or k (``which``) from ``start`` back to ``ln`` (Transpose, Reshape, Add, MatMul, the
    LayerNormalization), its ``CheckNodesInPathQ`` / ``CheckNodesInPathK`` (``check(reshape, transpose)``), then
    its projection: 1.32's external-use check, a ``[W]`` bias and a ``[W, W]`` weight."""
    found = find_path(graph, start, True, Q_PATH if which == "q" else K_PATH)
    if found is None:
        return NoMatch(f"Failed to find path for {which}", (start.name,))
    transpose, reshape, add, matmul, root = found
    if root.index != ln.index:
        return NoMatch(_ROOT_REASON[which], (root.name,))
    checked = check(reshape, transpose)
    if checked is not None:
        return checked
    if not external_use_free(graph, add, matmul):
        return NoMatch(f"{which} projection has an external use", (add.name, matmul.name))
    if not _projection_ok(graph, add, matmul, hidden):
        return NoMatch(f"{which}_matmul and {which}_add shape not matched", (matmul.name, add.name))
    return found


class AttentionFusion(GraphTransformer):
    """Fuse a BERT / DistilBERT self-attention block hanging off a LayerNormalization into Attention."""

    name = "AttentionFusion"
    compatible_eps = ("CPUExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        mask_int32: dict[str, str] = {}  # mask input -> its int32 version, for this application
        return self.visit_in_order(
            graph,
            ctx,
            graph_level,
            lambda node: self._visit(graph, node, mask_int32),
            ops=("MatMul", "LayerNormalization"),
        )

    def _visit(self, graph: Graph, node: Node, mask_int32: dict[str, str]) -> bool:
        mobileclip = try_fuse_mobileclip_mha(graph, node, self.compatible_eps)
        if isinstance(mobileclip, str):
            emit_fused(node.name, "MultiHeadAttention", mobileclip, MS_DOMAIN)
            return True
        if mobileclip is not None:
            emit_no_match(mobileclip, node.name)
        edges = output_edge_count(graph, node)
        if not 2 <= edges <= 6 or not is_supported_op(node, "LayerNormalization", _LN):
            return False
        if not self.node_is_compatible(node) or len(node.inputs) <= 2 or not node.inputs[2]:
            return False
        bias_shape = graph.shape(node.inputs[2])
        if bias_shape is None or len(bias_shape) != 1 or not isinstance(bias_shape[0], int):
            emit_no_match(NoMatch("shape of layer norm bias tensor not expected"), node.name)
            return False
        hidden = bias_shape[0]
        children = output_nodes(graph, node)
        kinds = [c.op_type for c in children]
        reshapes, shapes = kinds.count("Reshape"), kinds.count("Shape")
        if kinds.count("Add") == 1 and kinds.count("MatMul") == 3 and shapes == edges - 4:  # BERT or DistilBERT
            add = next(c for c in children if c.op_type == "Add")
            found = self._fuse_subgraph(graph, node, add, hidden, mask_int32)
        elif reshapes == 1 and shapes in (1, 3) and reshapes + shapes == edges:  # GPT-2
            found = fuse_gpt_attention(graph, node, hidden, mask_int32, shapes == 1)
        else:
            return False
        if isinstance(found, NoMatch):
            emit_no_match(found, node.name)
            return False
        emit_fused(node.name, "Attention", found, MS_DOMAIN)
        return True

    # ------------------------------------------------------------------------------------------------ matching
    def _fuse_subgraph(
        self, graph: Graph, ln: Node, add_after_ln: Node, hidden: int, mask_int32: dict[str, str]
    ) -> str | NoMatch:
        """``FuseSubGraph``: the new Attention node's name, or why not."""
        path = find_path(graph, add_after_ln, True, PARENT_PATH)
        if path is None:
            return NoMatch("Faild to find path v", (add_after_ln.name,))
        add, matmul, reshape, transpose, qkv_matmul, v_transpose, v_reshape, v_add, v_matmul, v_root = path
        if v_root.index != ln.index:
            return NoMatch("the v path does not start at this LayerNormalization", (v_root.name,))
        if not check_output_edges(graph, v_add, 1) or not check_output_edges(graph, v_matmul, 1):
            return NoMatch("Output edge count not expected for Add or MatMul in path v", (v_add.name, v_matmul.name))
        checked = check_nodes_in_path_v(graph, reshape, transpose, qkv_matmul, v_transpose, v_reshape, hidden, 0)
        if isinstance(checked, NoMatch):
            return checked
        num_heads, head_size, record_unsqueeze = checked
        if not (_projection_ok(graph, add, matmul, hidden) and _projection_ok(graph, v_add, v_matmul, hidden)):
            return NoMatch("Failed in match v_matmul and v_add input shape", (matmul.name, v_matmul.name))
        parent_nodes = [reshape, transpose, qkv_matmul, v_transpose, v_reshape, v_add, v_matmul]
        mask = match_input_mask(graph, qkv_matmul)
        distil = False
        if isinstance(mask, NoMatch):
            distil_mask = self._match_distil_mask(graph, ln, qkv_matmul, record_unsqueeze)
            if isinstance(distil_mask, NoMatch):
                return NoMatch("Failed in match input mask subgraph", (), (mask.reason, distil_mask.reason))
            mask, distil = distil_mask, True
        # BERT: from the mask Add (Div, then MatMul); DistilBERT: from the Where (MatMul, then Div)
        pivot = find_path(graph, mask.remove_always[1], True, DISTIL_QK_PATH if distil else BERT_QK_PATH)
        if pivot is None:
            return NoMatch("Failed to find path for q")
        qk_div = pivot[0] if pivot[0].op_type == "Div" else pivot[1]
        qk_matmul = pivot[1] if pivot[1].op_type == "MatMul" else pivot[0]
        return self._fuse_qk(
            graph,
            ln,
            mask,
            parent_nodes,
            pivot[-1],
            qk_matmul,
            qk_div,
            hidden,
            num_heads,
            head_size,
            mask_int32,
            distil,
        )

    def _match_distil_mask(
        self, graph: Graph, ln: Node, qkv_matmul: Node, record_unsqueeze: int | None
    ) -> MaskNodes | NoMatch:
        """``MatchInputMaskSubgraph`` for DistilBERT (Equal -> Reshape -> Expand -> Where -> Softmax)."""
        path = find_path(graph, qkv_matmul, True, DISTIL_MASK_PATH)
        if path is None:
            return NoMatch("Failed to find mask path")
        softmax, where, expand, reshape, equal = path
        if not all(check_output_edges(graph, n, 1) for n in path):
            return NoMatch("Output edge count not expected for mask nodes")
        if softmax.attr_int("axis") != 3:
            return NoMatch("Softmax attribute axis is expected to be 3", (softmax.name,))
        if not is_initializer_with_expected_value(graph, where.inputs[1], float("-inf"), is_constant=True):
            return NoMatch("where const not matched.", (where.name,))
        shape_path = find_path(graph, expand, True, edge_path(("Shape@1", _SHAPE), ("MatMul", _MATMUL)))
        if shape_path is None:
            return NoMatch("Failed to find shape path", (expand.name,))
        shape, qk_matmul = shape_path
        y = input_node(graph, where, 2)
        if y is None or y.index != qk_matmul.index:
            return NoMatch("the Where's input 2 is not the MatMul the Expand's Shape reads", (where.name,))
        if not is_initializer_with_expected_value(graph, equal.inputs[1], 0.0, is_constant=True):
            return NoMatch("equal const not matched.", (equal.name,))
        path1 = find_path(graph, reshape, True, edge_path(("Concat@1", _CONCAT)) + shape_dim_path(0))
        if path1 is None:
            return NoMatch("Failed to find reshape shape path 1", (reshape.name,))
        concat, unsq1, gather1, shape1 = path1
        if unsq1.index != record_unsqueeze:
            return NoMatch("the mask Concat's Unsqueeze is not the output Reshape's", (unsq1.name,))
        path2 = find_path(graph, concat, True, shape_dim_path(3))
        if path2 is None:
            return NoMatch("Failed to find reshape shape path 2", (concat.name,))
        _, gather2, shape2 = path2
        if not int_value_is(graph, gather1.inputs[1], 0) or not int_value_is(graph, gather2.inputs[1], 1):
            return NoMatch("gather indices not matched.", (gather1.name, gather2.name))
        if len(shape1.inputs) != 1 or len(shape2.inputs) != 1 or shape1.inputs[0] != shape2.inputs[0]:
            return NoMatch("the two Shapes do not read one value", (shape1.name, shape2.name))
        if shape1.inputs[0] != ln.outputs[0]:
            return NoMatch("the Shapes do not read the LayerNormalization's output", (shape1.name,))
        if len(concat.inputs) != 4:
            return NoMatch("the mask Concat does not have 4 inputs", (concat.name,))
        for i in (1, 2):
            data: list[int] = []
            if not append_tensor_from_initializer(graph, concat.inputs[i], data) or data != [1]:
                return NoMatch("the mask Concat's middle inputs are not [1], [1]", (concat.name,))
        return MaskNodes(
            softmax,
            equal.inputs[0],
            DISTIL_MASK_FILTER_VALUE,
            [softmax, where, expand, reshape, equal, shape],
            distil_reshape=reshape,
        )

    def _fuse_qk(
        self,
        graph: Graph,
        ln: Node,
        mask: MaskNodes,
        parent_nodes: list[Node],
        q_start: Node,
        qk_matmul: Node,
        qk_div: Node,
        hidden: int,
        num_heads: int,
        head_size: int,
        mask_int32: dict[str, str],
        distil: bool,
    ) -> str | NoMatch:
        """``FuseSubGraphQKImpl`` and the rewrite."""
        q = _match_head(
            graph,
            ln,
            q_start,
            "q",
            hidden,
            lambda reshape, transpose: check_nodes_in_path_q(graph, qk_div, reshape, transpose, num_heads, head_size),
        )
        if isinstance(q, NoMatch):
            return q
        q_transpose, q_reshape, q_add, q_matmul, _ = q
        k = _match_head(
            graph,
            ln,
            qk_matmul,
            "k",
            hidden,
            lambda reshape, transpose: check_nodes_in_path_k(graph, reshape, transpose, num_heads, head_size),
        )
        if isinstance(k, NoMatch):
            return k
        k_transpose, k_reshape, k_add, k_matmul, _ = k
        v_add, v_matmul = parent_nodes[5], parent_nodes[6]
        weights = self._load_qkv(graph, (q_matmul, k_matmul, v_matmul))
        if weights is None:
            return NoMatch("Failed to load Q, K and V weights, or data type is not float or float16.")
        biases = self._load_qkv(graph, (q_add, k_add, v_add))
        if biases is None:
            return NoMatch("Failed to load Q, K and V bias tensors, or data type is not float or float16.")
        mask_arg = self._mask_int32(graph, mask.mask_input, mask_int32, ln.ep)
        if mask_arg is None:
            return NoMatch("Failed to convert mask to int32", (mask.softmax.name,))
        qkv_weights = self._add_merged(graph, "qkv_weights", np.concatenate(weights, axis=1))
        qkv_bias = self._add_merged(graph, "qkv_bias", np.concatenate(biases))
        reshape = parent_nodes[0]
        output = reshape.outputs[0]
        name = graph.generate_node_name("Attention")
        remove = [*parent_nodes, qk_matmul, qk_div, q_transpose, q_reshape, q_add, q_matmul]
        remove += [k_transpose, k_reshape, k_add, k_matmul]
        if distil:
            concat_1 = input_node(graph, reshape, 1)
            assert mask.distil_reshape is not None
            concat_2 = input_node(graph, mask.distil_reshape, 1)
            if concat_1 is None or concat_2 is None:  # ORT returns false here with the graph already changed
                return NoMatch("the Reshapes' Concats are gone")
            remove_nodes_with_one_output_bottom_up(graph, concat_1)
            remove_nodes_with_one_output_bottom_up(graph, concat_2)
            remove += mask.remove_always
        else:
            remove += set_mask_nodes_to_remove(graph, mask)
        attributes = {
            "num_heads": onnx.helper.make_attribute("num_heads", num_heads),
            "mask_filter_value": onnx.helper.make_attribute("mask_filter_value", mask.mask_filter_value),
        }
        inputs = [ln.outputs[0], qkv_weights, qkv_bias, mask_arg]
        replace_with_attention(graph, remove, name, inputs, [output], attributes, ln.ep)
        return name

    @staticmethod
    def _load_qkv(graph: Graph, nodes: tuple[Node, Node, Node]) -> list[np.ndarray] | None:
        """``LoadQkvWeights``: the three input-1 initializers, of one type, float or float16."""
        arrays: list[np.ndarray] = []
        data_type: int | None = None
        for node in nodes:
            tensor = graph.initializer(node.inputs[1])
            if tensor is None:
                return None
            if data_type is None:
                if tensor.data_type not in (_TP.FLOAT, _TP.FLOAT16):
                    return None
                data_type = tensor.data_type
            elif tensor.data_type != data_type:
                return None
            arrays.append(graph.array(node.inputs[1]))
        return arrays

    @staticmethod
    def _add_merged(graph: Graph, base: str, array: np.ndarray) -> str:
        name = graph.generate_value_name(base)
        graph.add_initializer(onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    @staticmethod
    def _mask_int32(graph: Graph, mask: str, cache: dict[str, str], ep: str) -> str | None:
        """``ConvertMaskToInt32``: the mask as it is (int32) or through a new Cast to int32 (int64, float); None for
        a mask of unknown or other rank or another type. One Cast per mask input and pass application."""
        if mask in cache:
            return cache[mask]
        shape = graph.shape(mask, as_written=True)
        elem = graph.elem_type(mask)
        if shape is None or len(shape) != 2 or elem not in (_TP.INT64, _TP.INT32, _TP.FLOAT):
            return None
        cache[mask] = mask if elem == _TP.INT32 else cast_mask_to_int32(graph, mask, ep)
        return cache[mask]
