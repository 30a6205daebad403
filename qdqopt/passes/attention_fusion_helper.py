"""AttentionFusion's matchers shared by its BERT and GPT-2 forms, and the GPT-2 form itself
(``attention_fusion_helper.h``, ``AttentionFusionHelper::FuseGptAttention``)::

    before (GPT-2, as ORT's GPT-2 exports at opset 11/12 write it)
    h = Add(x, .) -> LN -> Gemm subgraph (W x 3W) -> Split(axis 2)
      -> q/k/v Reshape(0, 0, N, -1) -> Transpose (q, v 0,2,1,3; k 0,2,3,1)
      q, k -> [k Concat(past)] MatMul -> Div -> unidirectional mask -> [mask Add] -> Softmax
      -> MatMul(., v [Concat(past)]) -> Transpose(0,2,1,3) -> Reshape(0, 0, -1) -> Gemm subgraph (W x W) -> Add(h, .)

    after
    h -> LN -> Attention(num_heads, unidirectional) -> Gemm subgraph (W x W) -> Add(h, .)
      inputs: LN output, the first Gemm's weight and bias, the mask cast to int32 (or ""), [past];
      outputs: the output Reshape's, [present]

Rules (ORT 1.32; each refusal below is ORT's VERBOSE ``DEBUG_LOG`` text where it logs one):

* the candidate: a LayerNormalization (ai.onnx 1 or 17) on a compatible EP whose bias is ``[W]`` and whose output
  edges are exactly 1 Reshape and 1 or 3 Shapes (1: the Shape nodes of each subgraph are shared); its input 0 an
  Add (7, 13, 14) whose first Add consumer is the residual Add;
* **Gemm subgraph** (``MatchGemmSubgraph``, from a node's input ``i``): Reshape (5, 13) <- Gemm (9, 11, 13) <-
  Reshape <- (input 1) Concat (4, 11, 13) <- (input 1) Unsqueeze (1, 11, 13) <- Squeeze (1, 11, 13) <- Slice (1, 10,
  11, 13) <- Shape (1, 13) of the subgraph's input, which the first Reshape reads too; one output edge each (the Shape
  3 when shared); the Gemm has 3 inputs, its bias an initializer of known shape ``[n]``; the Slice's starts, ends,
  axes are -1, >= INT_MAX, 0; the Concat's input 0 the value -1; the last Reshape's shape a Concat of 3 (one output
  edge) of ``Unsqueeze(axes [0]) <- Gather(axis 0, index i) <- Shape`` of the subgraph's input for i = 0, 1 (one
  output edge each; shared: the Slice's Shape) and ``n``; those Unsqueezes' ``axes`` must be an attribute, so
  from opset 13 on nothing matches ("unsqueeze_after_gather axes value not expected"); ``ValidateGemmInitializer``:
  bias ``[W]`` (``[3W]`` before the Split) and weight ``[W, W]`` (``[W, 3W]``), both initializers;
* the output projection: the Gemm subgraph at the residual Add's input 1, its input the output Reshape (5, 13) <-
  Transpose (1, 13) <- qkv MatMul (1, 9); path v: the qkv MatMul's input 1 (or, with past, a Concat (4, 11, 13)
  there and its input 1) <- Transpose <- Reshape <- Split (2, 11, 13) output 2, the Split's input the Gemm
  subgraph (W x 3W) reading the LayerNormalization's output; ``CheckNodesInPathV`` as BERT's but the v Reshape must
  be ``(0, 0 or -1, N, -1)`` (``0 < N <= W``) and the output Reshape ``(0, 0, -1)``; the Split has 3 output edges;
* the mask: ``MatchInputMaskSubgraph`` with the input mask optional (a Softmax whose input is a Where has none);
  ``MatchUnidirMaskSubgraph`` from the mask Add (or the Softmax): Where (9) whose input 1 is the q.k Div (7, 13) and
  input 2 a float scalar constant (any value: 1.32 no longer wants -10000); Cast (9, 13) <- last Slice (10, 11, 13) <-
  mask Slice <- (input 1) Unsqueeze (11, 13) <- Sub (7, 13) <- Squeeze (1, 11, 13) <- Slice <- Shape (1, 13) of the
  Div's output; the mask Slice's data a constant ``[1, 1, M, M]`` uint8 or float initializer, lower triangular
  (unidirectional 1) or all ones (0); the Slices' parameters, the Unsqueezes of the key length and the second Shape ->
  Slice(-2, -1, 0) -> Squeeze as ORT checks them, one output edge each except where shared;
* q: the Div's input 0 <- MatMul (1, 9, 13) <- Transpose <- Reshape <- the same Split (output 0); k: the MatMul's
  input 1 (or past's Concat) <- Transpose <- Reshape <- the Split (output 1); their Reshapes ``(0, 0 or -1, N,
  -1)``, perms (0,2,1,3) and (0,2,3,1), each Reshape and Transpose with one output edge ("q path has an external
  use"); the Div's divisor is checked against sqrt(-1), which any value passes;
* past (``MatchPastSubgraph``): past -> Gather(0) -> Transpose(0,1,3,2) -> k Concat -> Transpose(0,1,3,2) ->
  Unsqueeze(0) -> Concat -> present (a graph output only), and past -> Gather(1) -> v Concat -> Unsqueeze(0) -> that
  Concat; 1.32's "transpose optimized pattern" (what Level1's transpose optimizer makes of it): the q.k MatMul
  reads a Transpose(0,1,3,2) of the k Concat, whose inputs are past's Gather(0) and a Transpose(0,2,1,3) of the k
  Reshape, and which feeds the present Unsqueeze directly; that Transpose is removed too.

Rewrite: ``com.microsoft`` Attention ``GenerateNodeName(Attention)``, doc string "Fused Attention subgraphs ",
attributes ``num_heads``, ``unidirectional`` and, unless it is -10000, ``mask_filter_value``: the input mask's Mul
constant if that is not -10000, else the Where's fill value; the LayerNormalization's EP; a mask gets a Cast to int32
whatever its type (``GetOrCreateMaskInt32``, shared with the BERT form's cache); removed: the attention nodes, the
first Gemm subgraph, the unidirectional mask, past and the input mask's nodes as the BERT form removes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from qdqopt.events import NoMatch
from qdqopt.graph import Graph, Node, NodeIndex
from qdqopt.passes.graph_utils import (
    EdgeToMatch,
    add_cast,
    append_tensor_from_initializer,
    check_output_edges,
    constant_initializer,
    edge_path,
    find_path,
    first_child_by_type,
    input_node,
    is_initializer,
    is_supported_op,
    output_edge_count,
)
from qdqopt.passes.qdq_util import is_initializer_with_expected_value, is_scalar_arg

__all__ = ["GPT_MASK_FILTER", "MaskNodes", "external_use_free", "fuse_gpt_attention", "match_input_mask"]

_TP = onnx.TensorProto
MS_DOMAIN = "com.microsoft"
INT_MAX = 2147483647
_SOFTMAX = (1, 11, 13)
_RESHAPE = (5, 13)
_TRANSPOSE = (1, 13)
_CONCAT = (4, 11, 13)
_UNSQ = (1, 11, 13)
_SQUEEZE = (1, 11, 13)
_SHAPE = (1, 13)
_GATHER = (1, 11, 13)
_SPLIT = (2, 11, 13)
_SLICE = (10, 11, 13)
#: the unidirectional mask's Where fills with this
GPT_MASK_FILTER = -10000.0

MASK_PATH = edge_path(("Add", (7, 13)), ("Mul@1", (7, 13)), ("Sub", (7, 13)))
MASK_FORMAT_1 = edge_path(("Cast@1", (9,)), ("Unsqueeze", (1, 11)), ("Unsqueeze", (1, 11)))
MASK_FORMAT_2 = edge_path(("Unsqueeze@1", (1, 11)), ("Unsqueeze", (1, 11)))
#: DistilBERT: the output Reshape's shape input back to the Unsqueeze its Concat reads first
_DISTIL_OUTPUT_SHAPE_PATH = edge_path(("Concat@1", _CONCAT), ("Unsqueeze", _UNSQ))
#: GPT-2's Gemm subgraph, from the first Reshape's Gemm back to the Shape of the subgraph's input (after the
#: subgraph's last Reshape, :func:`_match_gemm`)
_GEMM_PATH = edge_path(
    ("Gemm", (9, 11, 13)), ("Reshape", _RESHAPE), ("Concat@1", _CONCAT), ("Unsqueeze@1", _UNSQ), ("Squeeze", _SQUEEZE),
    ("Slice", (1, 10, 11, 13)), ("Shape", _SHAPE),
)  # fmt: skip
#: the unidirectional mask, from the Where back to the Shape of the Div's output
_UNIDIR_PATH_1 = edge_path(
    ("Cast", (9, 13)), ("Slice", _SLICE), ("Slice", _SLICE), ("Unsqueeze@1", (9, 11, 13)), ("Sub", (7, 13)),
    ("Squeeze", _SQUEEZE), ("Slice", _SLICE), ("Shape", _SHAPE),
)  # fmt: skip
_UNIDIR_ENDS_PATH = edge_path(("Unsqueeze@2", (9, 11, 13)), ("Squeeze", _SQUEEZE))
_UNIDIR_PATH_4 = edge_path(("Squeeze@1", _SQUEEZE), ("Slice", _SLICE), ("Shape", _SHAPE))
_PAST_K_PATH = edge_path(("Transpose", _TRANSPOSE), ("Gather", _GATHER))
_PRESENT_K_PATH = edge_path(("Transpose", _TRANSPOSE), ("Unsqueeze", _UNSQ), ("Concat", _CONCAT))
_PRESENT_V_PATH = edge_path(("Unsqueeze@1", _UNSQ), ("Concat", _CONCAT), ("Gather", _GATHER))
#: GPT-2: from the output projection's input back to the qkv MatMul
_QKV_MATMUL_PATH = edge_path(("Reshape", _RESHAPE), ("Transpose", _TRANSPOSE), ("MatMul", (1, 9)))


def shape_dim_path(dst_slot: int) -> tuple[EdgeToMatch, ...]:
    """One dim of a value's shape as a 1-D tensor, read at input ``dst_slot``: Unsqueeze <- Gather <- Shape."""
    return edge_path((f"Unsqueeze@{dst_slot}", _UNSQ), ("Gather", _GATHER), ("Shape", _SHAPE))


def _split_path(first_slot: int, split_output: int) -> tuple[EdgeToMatch, ...]:
    """GPT-2: Transpose (read at ``first_slot``) <- Reshape <- output ``split_output`` of the Split."""
    return edge_path((f"Transpose@{first_slot}", _TRANSPOSE), ("Reshape", _RESHAPE), (f"Split:{split_output}", _SPLIT))


@dataclass
class MaskNodes:
    """``AttentionMaskNodes`` (BERT) or ``AttentionMaskNodesDistilBert``: the nodes of the mask subgraph (GPT-2
    without an input mask: the Softmax alone, ``mask_input`` empty)."""

    softmax: Node
    mask_input: str
    mask_filter_value: float
    remove_always: list[Node] = field(default_factory=list)  # gone with every fusion
    mul: Node | None = None  # BERT: the shared part goes when the Mul has one consumer left
    shared: list[Node] = field(default_factory=list)
    distil_reshape: Node | None = None  # DistilBERT: the mask Reshape (its Concat goes bottom up)

    @property
    def has_input_mask(self) -> bool:
        return bool(self.mask_input)


def perm_is(node: Node, perm: tuple[int, ...]) -> bool:
    return node.attr_ints("perm") == list(perm)


def external_use_free(graph: Graph, *nodes: Node) -> bool:
    """1.32's "... has an external use" checks: each node has one output edge and no graph output."""
    return all(check_output_edges(graph, n, 1) for n in nodes)


def int_value_is(graph: Graph, name: str, expected: int) -> bool:
    """``IsInitializerWithExpectedValue(int64_t, is_constant=true)``: a scalar int32/int64 constant equal to it."""
    if not name or not is_scalar_arg(graph, name) or constant_initializer(graph, name) is None:
        return False
    tensor = graph.constant_initializer(name)
    if tensor is None or tensor.data_type not in (_TP.INT64, _TP.INT32):
        return False
    array = graph.constant_array(name)
    return array is not None and int(array.reshape(-1)[0]) == expected


def float_scalar(graph: Graph, name: str) -> float | None:
    """The value of a float scalar initializer (the mask Mul's constant), or None."""
    if not name or not is_scalar_arg(graph, name):
        return None
    tensor = graph.initializer(name)
    if tensor is None or tensor.data_type != _TP.FLOAT:
        return None
    return float(np.float32(graph.array(name).reshape(-1)[0]))


def reshape_constant(graph: Graph, node: Node) -> list[int] | None:
    data: list[int] = []
    return data if append_tensor_from_initializer(graph, node.inputs[1], data) else None


def validate_shape(graph: Graph, name: str, dims: list[int]) -> bool:
    """``optimizer_utils::ValidateShape``: the NodeArg's shape is exactly ``dims`` (known values)."""
    return graph.shape(name) == dims


def validate_matmul_initializer(graph: Graph, matmul: Node, hidden: int) -> bool:
    """``ValidateMatMulInitializer``: input 1 an initializer of shape ``[W, W]``."""
    name = matmul.inputs[1]
    return is_initializer(graph, name) and validate_shape(graph, name, [hidden, hidden])


def validate_add_bias_initializer(graph: Graph, add: Node, hidden: int) -> bool:
    """``ValidateAddBiasInitializer``: input 1 an initializer of shape ``[W]``."""
    name = add.inputs[1]
    return is_initializer(graph, name) and validate_shape(graph, name, [hidden])


def check_distil_bert_reshape_shape(graph: Graph, reshape: Node, hidden: int) -> NodeIndex | None:
    """``CheckDistilBertReshapeShape``: the index of the Unsqueeze the output Reshape's Concat reads first, or None
    when its shape is not ``Concat(Unsqueeze, [-1], [W])``."""
    concat = input_node(graph, reshape, 1)
    if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 3:
        return None
    path = find_path(graph, reshape, True, _DISTIL_OUTPUT_SHAPE_PATH)
    if path is None:
        return None
    minus1: list[int] = []
    width: list[int] = []
    if not append_tensor_from_initializer(graph, concat.inputs[1], minus1) or minus1 != [-1]:
        return None
    if not append_tensor_from_initializer(graph, concat.inputs[2], width) or width != [hidden]:
        return None
    return path[1].index


def check_nodes_in_path_v(
    graph: Graph,
    reshape: Node,
    transpose: Node,
    qkv_matmul: Node,
    v_transpose: Node,
    v_reshape: Node,
    hidden: int,
    head_size: int,
) -> tuple[int, int, int | None] | NoMatch:
    """``CheckNodesInPathV``: (num_heads, head_size, the DistilBERT Unsqueeze's index or None).

    ``head_size`` 0 (BERT): the v Reshape is ``(0, 0 or -1, N, H)`` with ``N * H == W``; -1 (GPT-2): ``(0, 0 or
    -1, N, -1)``; ``0 < N <= W`` either way. The output Reshape is ``(0, 0, N * H or -1)`` or, without a constant
    shape, DistilBERT's Concat (``CheckDistilBertReshapeShape``)."""
    if not all(check_output_edges(graph, n, 1) for n in (transpose, qkv_matmul, v_transpose, v_reshape)):
        return NoMatch("Output edge count not expected for nodes in path v")
    if not perm_is(transpose, (0, 2, 1, 3)):
        return NoMatch("Failed in match Transpose attribute perm. Expected: 0, 2, 1, 3", (transpose.name,))
    if not perm_is(v_transpose, (0, 2, 1, 3)):
        return NoMatch("Failed in match v_transpose attribute perm. Expected: 0, 2, 1, 3", (v_transpose.name,))
    v_shape = reshape_constant(graph, v_reshape)
    if (
        v_shape is None
        or len(v_shape) != 4
        or v_shape[0] != 0
        or v_shape[1] not in (0, -1)
        or not 0 < v_shape[2] <= hidden
        or (head_size < 0 and v_shape[3] != -1)
        or (head_size == 0 and v_shape[2] * v_shape[3] != hidden)
    ):
        return NoMatch("v_reshape initializer value is not expected", (v_reshape.name,))
    num_heads, head_size = v_shape[2], v_shape[3]
    out_shape = reshape_constant(graph, reshape)
    if out_shape is None:
        record = check_distil_bert_reshape_shape(graph, reshape, hidden)
        if record is None:
            return NoMatch("reshape initializer value is not expected", (reshape.name,))
        return num_heads, head_size, record
    if len(out_shape) != 3 or out_shape[0] != 0 or out_shape[1] != 0 or out_shape[2] not in (num_heads * head_size, -1):
        return NoMatch("reshape initializer value is not expected", (reshape.name,))
    return num_heads, head_size, None


def _heads_reshape_ok(graph: Graph, reshape: Node, num_heads: int, head_size: int) -> bool:
    """The q or k Reshape's constant is ``(0, 0 or -1, N, H)``."""
    shape = reshape_constant(graph, reshape)
    return (
        shape is not None
        and len(shape) == 4
        and shape[0] == 0
        and shape[1] in (0, -1)
        and shape[2] == num_heads
        and shape[3] == head_size
    )


def check_nodes_in_path_q(
    graph: Graph, qk_div: Node, q_reshape: Node, q_transpose: Node, num_heads: int, head_size: int
) -> NoMatch | None:
    """``CheckNodesInPathQ`` after 1.32's external-use check: the q Reshape ``(0, 0 or -1, N, H)``, the Div's
    divisor a scalar initializer of value ``sqrt(H)`` (``sqrt(-1)``, NaN, for GPT-2: any value), the q Transpose
    (0, 2, 1, 3)."""
    if not external_use_free(graph, q_reshape, q_transpose):
        return NoMatch("q path has an external use", (q_reshape.name, q_transpose.name))
    if not _heads_reshape_ok(graph, q_reshape, num_heads, head_size):
        return NoMatch("q_reshape const not matched", (q_reshape.name,))
    divisor = math.sqrt(head_size) if head_size >= 0 else math.nan
    if not is_initializer_with_expected_value(graph, qk_div.inputs[1], divisor, is_constant=False):
        return NoMatch("qk_div const not matched.", (qk_div.name,))
    if not perm_is(q_transpose, (0, 2, 1, 3)):
        return NoMatch("q_transpose perm attribute not matched", (q_transpose.name,))
    return None


def check_nodes_in_path_k(
    graph: Graph,
    k_reshape: Node,
    k_transpose: Node,
    num_heads: int,
    head_size: int,
    perm: tuple[int, ...] = (0, 2, 3, 1),
) -> NoMatch | None:
    """``CheckNodesInPathK`` after 1.32's external-use check: the k Transpose ``perm`` (GPT-2's transpose
    optimized pattern: (0, 2, 1, 3)), the k Reshape ``(0, 0 or -1, N, H)``."""
    if not external_use_free(graph, k_reshape, k_transpose):
        return NoMatch("k path has an external use", (k_reshape.name, k_transpose.name))
    if not perm_is(k_transpose, perm):
        return NoMatch("k_transpose perm attribute not matched", (k_transpose.name,))
    if not _heads_reshape_ok(graph, k_reshape, num_heads, head_size):
        return NoMatch("k_reshape const not matched", (k_reshape.name,))
    return None


def cast_mask_to_int32(graph: Graph, mask: str, ep: str) -> str:
    """``CastMaskToInt32``: a new Cast of the mask to int32, typed with the mask's two dims (unknown ones when it
    does not have two)."""
    shape = graph.shape(mask, as_written=True)
    dims: list[int | str | None] = list(shape) if shape is not None and len(shape) == 2 else [None, None]
    return add_cast(graph, mask, _TP.INT32, dims, "Mask_Int32", "MaskCast", "Cast mask from int64 to int32", ep)


def set_mask_nodes_to_remove(graph: Graph, mask: MaskNodes) -> list[Node]:
    """``SetMaskNodesToRemove``: the mask nodes every fusion removes, and the shared ones (Mul, Sub, Cast,
    Unsqueezes) once the Mul has no other consumer left."""
    remove = list(mask.remove_always)
    if mask.mul is not None and check_output_edges(graph, mask.mul, 1):
        remove += mask.shared
    return remove


def replace_with_attention(
    graph: Graph,
    remove: list[Node],
    name: str,
    inputs: list[str],
    outputs: list[str],
    attributes: dict[str, onnx.AttributeProto],
    ep: str,
) -> None:
    """The rewrite both forms end with: the matched nodes go (each once), the com.microsoft Attention ``name``
    (doc string "Fused Attention subgraphs ") comes, on ``ep``."""
    for node in remove:
        if graph.node(node.index) is not None:
            graph.remove_node(node)
    graph.add_node(
        name,
        "Attention",
        inputs,
        outputs,
        domain=MS_DOMAIN,
        attributes=attributes,
        doc_string="Fused Attention subgraphs ",
        ep=ep,
    )


def match_input_mask(graph: Graph, qkv_matmul: Node, *, optional: bool = False) -> MaskNodes | NoMatch:
    """``MatchInputMaskSubgraph`` (BERT's Unsqueeze -> Unsqueeze -> [Cast] -> Sub -> Mul -> Add -> Softmax); with
    ``optional`` (GPT-2) a Softmax reading a Where (the unidirectional mask's) has no input mask."""
    found = find_path(graph, qkv_matmul, True, edge_path(("Softmax", _SOFTMAX)))
    if found is None:
        return NoMatch("Failed to find Softmax node")
    softmax = found[0]
    if not check_output_edges(graph, softmax, 1):
        return NoMatch("Output edge count not expected for Softmax", (softmax.name,))
    if optional:
        parent = input_node(graph, softmax, 0)
        if parent is not None and parent.op_type == "Where":
            return MaskNodes(softmax, "", GPT_MASK_FILTER, [softmax])
    path = find_path(graph, softmax, True, MASK_PATH)
    if path is None:
        return NoMatch("Failed to find path for mask", (softmax.name,))
    mask_add, mask_mul, mask_sub = path
    cast: Node | None = None
    fmt = find_path(graph, mask_sub, True, MASK_FORMAT_1)
    if fmt is not None:
        cast, unsq2, unsq1 = fmt
    else:
        fmt = find_path(graph, mask_sub, True, MASK_FORMAT_2)
        if fmt is None:
            return NoMatch("Failed to find path for mask", (mask_sub.name,))
        unsq2, unsq1 = fmt
    for n in (softmax, mask_add, mask_sub, cast, unsq2, unsq1):
        if n is not None and not check_output_edges(graph, n, 1):
            return NoMatch("Output edge count not expected for mask nodes", (n.name,))
    if softmax.attr_int("axis") != 3:
        return NoMatch("Softmax attribute axis is expected to be 3", (softmax.name,))
    if unsq1.attr_ints("axes") != [1]:
        return NoMatch("mask_unsqueeze_1 axes not matched. Expect: 1", (unsq1.name,))
    if unsq2.attr_ints("axes") != [2]:
        return NoMatch("mask_unsqueeze_2 axes not matched. Expect: 2", (unsq2.name,))
    if not is_initializer_with_expected_value(graph, mask_sub.inputs[0], 1.0, is_constant=False):
        return NoMatch("mask_sub const input not matched", (mask_sub.name,))
    value = float_scalar(graph, mask_mul.inputs[1])
    if value is None:
        return NoMatch("mask_mul const input not matched", (mask_mul.name,))
    shared = [mask_mul, mask_sub, *([cast] if cast is not None else []), unsq2, unsq1]
    return MaskNodes(softmax, unsq1.inputs[0], value, [softmax, mask_add], mask_mul, shared)


# ------------------------------------------------------------------------------------------------------ GPT-2
@dataclass
class _Gemm:
    """``MatchGemmResult``: the Gemm, the Shape reading the subgraph's input, the last Reshape, every node."""

    gemm: Node
    input_node: Node
    output_node: Node
    nodes: list[Node]


def _slice_parameters(graph: Graph, node: Node, slots: tuple[int, ...], values: tuple[int, ...]) -> bool:
    """``CheckSliceParameters``: the Slice's inputs at ``slots`` are these int constants (a value >= INT_MAX: an
    ``ends`` of one value at least INT_MAX)."""
    if len(node.inputs) <= slots[-1]:
        return False
    for slot, value in zip(slots, values, strict=True):
        name = node.inputs[slot]
        if value >= INT_MAX:
            data: list[int] = []
            if not (append_tensor_from_initializer(graph, name, data) and len(data) == 1 and data[0] >= INT_MAX):
                return False
        elif not int_value_is(graph, name, value):
            return False
    return True


def _match_gemm(graph: Graph, after: Node, slot: int, shared: bool) -> _Gemm | NoMatch:
    """``MatchGemmSubgraph``: the Gemm subgraph feeding input ``slot`` of ``after``."""
    path = find_path(graph, after, True, edge_path((f"Reshape@{slot}", _RESHAPE)) + _GEMM_PATH)
    if path is None:
        return NoMatch("Faild to match gemm path", (after.name,))
    reshape_after, gemm, reshape_before, concat, unsqueeze, squeeze, slice_, shape = path
    source = shape.inputs[0]
    if reshape_before.inputs[0] != source:
        return NoMatch("Input of reshape_before_gemm is not the input of subgraph", (reshape_before.name,))
    edges = ((shape, 3 if shared else 1), *((n, 1) for n in path[:7]))
    if not all(check_output_edges(graph, n, count) for n, count in edges):
        return NoMatch("Output edge count not expected for nodes in gemm path", (gemm.name,))
    if len(gemm.inputs) != 3:
        return NoMatch("Gemm does not have 3 inputs", (gemm.name,))
    if not is_initializer(graph, gemm.inputs[2]):
        return NoMatch("Gemm bias is not constant", (gemm.name,))
    bias_shape = graph.shape(gemm.inputs[2])
    if bias_shape is None or len(bias_shape) != 1 or not isinstance(bias_shape[0], int):
        return NoMatch("Gemm bias shape not expected", (gemm.name,))
    if not _slice_parameters(graph, slice_, (1, 2, 3), (-1, INT_MAX, 0)):
        return NoMatch("CheckSliceParameters return false", (slice_.name,))
    if not int_value_is(graph, concat.inputs[0], -1):
        return NoMatch("concat first input value is not -1", (concat.name,))
    found = find_path(graph, reshape_after, True, edge_path(("Concat@1", _CONCAT)))
    if found is None:
        return NoMatch("Faild to match concat node for Gather paths", (reshape_after.name,))
    concat_after = found[0]
    if len(concat_after.inputs) != 3 or not check_output_edges(graph, concat_after, 1):
        return NoMatch(
            "concat_after_gather does not have expected number of inputs or output edges", (concat_after.name,)
        )
    if not int_value_is(graph, concat_after.inputs[2], bias_shape[0]):
        return NoMatch("concat_after_gather input 2 does not have expected value", (concat_after.name,))
    nodes: list[Node] = []
    for i in (0, 1):
        gather_path = find_path(graph, concat_after, True, shape_dim_path(i))
        if gather_path is None:
            return NoMatch("Faild to match gemm gather path", (concat_after.name,))
        unsq, gather, gather_shape = gather_path
        if (
            not check_output_edges(graph, unsq, 1)
            or not check_output_edges(graph, gather, 1)
            or (not check_output_edges(graph, gather_shape, 1) and not shared)
        ):
            return NoMatch("Output edge count not expected for nodes in gemm gather path", (gather.name,))
        nodes += [unsq, gather]
        if shared:
            if gather_shape.index != shape.index:
                return NoMatch("the Gather's Shape is not the shared one", (gather_shape.name,))
        else:
            nodes.append(gather_shape)
        if gather_shape.inputs[0] != source:
            return NoMatch("the Gather's Shape does not read the subgraph's input", (gather_shape.name,))
        if unsq.attr_ints("axes") != [0]:
            return NoMatch("unsqueeze_after_gather axes value not expected", (unsq.name,))
        if gather.attr_int("axis", 0) != 0:
            return NoMatch("gather axis value not expected", (gather.name,))
        if not int_value_is(graph, gather.inputs[1], i):
            return NoMatch("gather input 1 value is not expected", (gather.name,))
    nodes += [reshape_after, gemm, reshape_before, concat, unsqueeze, squeeze, slice_, shape, concat_after]
    return _Gemm(gemm, shape, reshape_after, nodes)


def _validate_gemm(graph: Graph, gemm: Node, hidden: int, before_split: bool) -> NoMatch | None:
    """``ValidateGemmInitializer``: bias ``[W]`` (``[3W]`` before the Split) and weight ``[W, .]`` initializers."""
    bias, weights = gemm.inputs[2], gemm.inputs[1]
    length = (3 if before_split else 1) * hidden
    if not is_initializer(graph, bias):
        return NoMatch("Gemm bias is not constant initializer", (gemm.name,))
    if graph.shape(bias) != [length]:
        return NoMatch("Gemm bias shape is not expected", (gemm.name,))
    if not is_initializer(graph, weights):
        return NoMatch("Gemm weight is not constant initializer", (gemm.name,))
    if graph.shape(weights) != [hidden, length]:
        return NoMatch("Gemm weight shape is not expected", (gemm.name,))
    return None


def _match_valid_gemm(
    graph: Graph, after: Node, slot: int, shared: bool, hidden: int, before_split: bool
) -> _Gemm | NoMatch:
    """``MatchGemmSubgraph`` then ``ValidateGemmInitializer``, as ``FuseGptAttention`` asks both of each subgraph."""
    found = _match_gemm(graph, after, slot, shared)
    if isinstance(found, NoMatch):
        return found
    invalid = _validate_gemm(graph, found.gemm, hidden, before_split)
    return invalid if invalid is not None else found


@dataclass
class _Unidir:
    div: Node
    unidirectional: bool
    nodes: list[Node]
    fill: float  # the Where's input 2


def _unidir_mask_kind(graph: Graph, name: str) -> bool | NoMatch:
    """``ValidateUnidirMask``: a constant ``[1, 1, M, M]`` uint8 or float mask; True when lower triangular, False
    when all ones."""
    if not is_initializer(graph, name):
        return NoMatch("unidir mask is not constant")
    shape = graph.shape(name)
    if shape is None or len(shape) != 4 or shape[0] != 1 or shape[1] != 1 or not isinstance(shape[2], int):
        return NoMatch("unidir mask shape not expected")
    if shape[2] != shape[3]:
        return NoMatch("unidir mask shape not expected")
    tensor = graph.initializer(name)
    assert tensor is not None
    if tensor.data_type not in (_TP.UINT8, _TP.FLOAT):
        return NoMatch("Expect mask data type is uint8 or float")
    data = graph.array(name).reshape(-1)
    m = shape[2]
    if data.size == m * m:
        square = data.reshape(m, m)
        tril = np.tril(np.ones((m, m), dtype=square.dtype))
        if np.array_equal(square, tril):
            return True
        if bool(np.all(square == 1)):
            return False
    return NoMatch("Mask is neither unidirectional nor all ones")


def _match_unidir(graph: Graph, start: Node, shared: bool) -> _Unidir | NoMatch:
    """``MatchUnidirMaskSubgraph``: the unidirectional mask from the Where read by ``start`` (mask Add or Softmax)."""
    root = find_path(graph, start, True, edge_path(("Where", (9,)), ("Div@1", (7, 13))))
    if root is None:
        return NoMatch("Faild to match the path (Div-->Where-->Add) for unidirectional mask", (start.name,))
    where, div = root
    fill = float_scalar(graph, where.inputs[2]) if constant_initializer(graph, where.inputs[2]) is not None else None
    if fill is None:
        return NoMatch("the Where's input 2 is not a float scalar constant", (where.name,))
    path1 = find_path(graph, where, True, _UNIDIR_PATH_1)
    if path1 is None:
        return NoMatch("Faild to match path 1 for unidirectional mask", (where.name,))
    cast, last_slice, mask_slice, unsqueeze1, sub, squeeze1, slice1, shape1 = path1
    counts = (
        (where, 1),
        (cast, 1),
        (last_slice, 1),
        (mask_slice, 1),
        (unsqueeze1, 1),
        (sub, 1),
        (squeeze1, 2 if shared else 3),
        (slice1, 1),
        (shape1, 2 if shared else 1),
    )
    if not all(check_output_edges(graph, n, count) for n, count in counts):
        return NoMatch("Output edge count not expected for nodes in path 1 of unidirectional mask", (where.name,))
    if div.outputs[0] != shape1.inputs[0]:
        return NoMatch("Div and Shape1 does not have edge", (shape1.name,))
    if not _slice_parameters(graph, last_slice, (1, 3, 4), (0, 3, 1)):
        return NoMatch("CheckSliceParameters returns false for last_slice", (last_slice.name,))
    if not _slice_parameters(graph, mask_slice, (3, 4), (2, 1)):
        return NoMatch("CheckSliceParameters returns false for mask_slice", (mask_slice.name,))
    kind = _unidir_mask_kind(graph, mask_slice.inputs[0])
    if isinstance(kind, NoMatch):
        return NoMatch("ValidateUnidirMask returns false for mask_slice", (mask_slice.name,), (kind.reason,))
    if not _slice_parameters(graph, slice1, (1, 2, 3), (-1, INT_MAX, 0)):
        return NoMatch("CheckSliceParameters returns false for slice1", (slice1.name,))
    ends: list[Node] = []  # the Unsqueezes of the key length for the last Slice (path 2) and the mask Slice (3)
    for path, slice_node in ((2, last_slice), (3, mask_slice)):
        found = find_path(graph, slice_node, True, _UNIDIR_ENDS_PATH)
        if found is None or found[1].index != squeeze1.index:
            return NoMatch(f"Faild to match path {path} for unidirectional mask", (slice_node.name,))
        if not check_output_edges(graph, found[0], 2 if shared else 1):
            reason = f"Output edge count not expected for unsqueeze{path} of unidirectional mask"
            return NoMatch(reason, (found[0].name,))
        ends.append(found[0])
    unsqueeze2, unsqueeze3 = ends
    path4 = find_path(graph, sub, True, _UNIDIR_PATH_4)
    if path4 is None:
        return NoMatch("Faild to match path 4 for unidirectional mask", (sub.name,))
    squeeze2, slice2, shape2 = path4
    if div.outputs[0] != shape2.inputs[0]:
        return NoMatch("Div and Shape does not have edge", (shape2.name,))
    counts2 = ((squeeze2, 1), (slice2, 1), (shape2, 2 if shared else 1))
    if not all(check_output_edges(graph, n, count) for n, count in counts2):
        return NoMatch(
            "Output edge count not expected for squeeze_2/slices2/shape2 of unidirectional mask", (squeeze2.name,)
        )
    if not _slice_parameters(graph, slice2, (1, 2, 3), (-2, -1, 0)):
        return NoMatch("CheckSliceParameters return false for slice2", (slice2.name,))
    if shared and (shape1.index != shape2.index or unsqueeze2.index != unsqueeze3.index):
        return NoMatch("the shared Shape or Unsqueeze is not shared", (shape1.name,))
    nodes = [where, cast, last_slice, mask_slice, unsqueeze1, sub, squeeze1, slice1, shape1, unsqueeze2, squeeze2]
    nodes.append(slice2)
    if not shared:
        nodes += [unsqueeze3, shape2]
    return _Unidir(div, kind, nodes, fill)


@dataclass
class _Past:
    past: str
    present: str
    nodes: list[Node]


def _match_past(graph: Graph, k_concat: Node, v_concat: Node, optimized: bool) -> _Past | NoMatch:
    """``MatchPastSubgraph``; ``optimized``: the transpose optimizer's form, where the k Concat reads past's Gather
    directly and feeds the present Unsqueeze directly (its two Transposes cancelled)."""
    past_k_transpose: Node | None = None
    present_k_transpose: Node | None = None
    found = find_path(graph, k_concat, True, _PAST_K_PATH[1:] if optimized else _PAST_K_PATH)
    if found is None:
        return NoMatch("Failed to find path for past_k", (k_concat.name,))
    if optimized:
        (past_k_gather,) = found
    else:
        past_k_transpose, past_k_gather = found
    found = find_path(graph, k_concat, False, _PRESENT_K_PATH[1:] if optimized else _PRESENT_K_PATH)
    if found is None:
        return NoMatch("Failed to find path for present_k", (k_concat.name,))
    if optimized:
        present_k_unsqueeze, present_concat = found
    else:
        present_k_transpose, present_k_unsqueeze, present_concat = found
    found = find_path(graph, present_concat, True, _PRESENT_V_PATH)
    if found is None:
        return NoMatch("Failed to find path for present_v and past_v", (present_concat.name,))
    present_v_unsqueeze, past_v_concat, past_v_gather = found
    if past_v_concat.index != v_concat.index:
        return NoMatch("Failed to match v_concat", (past_v_concat.name,))
    if past_k_transpose is not None and not perm_is(past_k_transpose, (0, 1, 3, 2)):
        return NoMatch("past_k_transpose perm attribute not matched", (past_k_transpose.name,))
    if present_k_transpose is not None and not perm_is(present_k_transpose, (0, 1, 3, 2)):
        return NoMatch("present_k_transpose perm attribute not matched", (present_k_transpose.name,))
    if present_k_unsqueeze.attr_ints("axes") != [0]:
        return NoMatch("present_k_unsqueeze axes value not expected", (present_k_unsqueeze.name,))
    if present_v_unsqueeze.attr_ints("axes") != [0]:
        return NoMatch("present_v_unsqueeze axes value not expected", (present_v_unsqueeze.name,))
    if not int_value_is(graph, past_v_gather.inputs[1], 1):
        return NoMatch("past_v_gather indices != 1", (past_v_gather.name,))
    if not int_value_is(graph, past_k_gather.inputs[1], 0):
        return NoMatch("past_k_gather indices != 0", (past_k_gather.name,))
    if past_v_gather.inputs[0] != past_k_gather.inputs[0]:
        return NoMatch("past_v_gather and past_k_gather does not have same past input", (past_v_gather.name,))
    counts = (
        (k_concat, 2),
        (past_k_transpose, 1),
        (past_k_gather, 1),
        (present_k_transpose, 1),
        (present_k_unsqueeze, 1),
        (present_v_unsqueeze, 1),
        (past_v_concat, 2),
        (past_v_gather, 1),
    )
    edges_ok = all(n is None or check_output_edges(graph, n, c) for n, c in counts)
    if not edges_ok or output_edge_count(graph, present_concat) != 0:
        return NoMatch("Output edge count not expected for nodes in past subgraph", (k_concat.name,))
    nodes = [k_concat, *(n for n in (past_k_transpose,) if n is not None), past_k_gather]
    nodes += [n for n in (present_k_transpose,) if n is not None]
    nodes += [present_k_unsqueeze, present_concat, present_v_unsqueeze, past_v_concat, past_v_gather]
    return _Past(past_v_gather.inputs[0], present_concat.outputs[0], nodes)


def get_or_create_mask_int32(graph: Graph, mask: str, cache: dict[str, str], ep: str) -> str:
    """``GetOrCreateMaskInt32``: the mask's Cast to int32 whatever its type, one per mask input and pass
    application (the cache the BERT form fills too)."""
    if mask not in cache:
        cache[mask] = cast_mask_to_int32(graph, mask, ep)
    return cache[mask]


def fuse_gpt_attention(graph: Graph, ln: Node, hidden: int, cache: dict[str, str], shared: bool) -> str | NoMatch:
    """``FuseGptAttention``: the new Attention node's name, or why not."""
    parent = input_node(graph, ln, 0)
    if parent is None or not is_supported_op(parent, "Add", (7, 13, 14)):
        return NoMatch("the LayerNormalization's input is not an Add")
    add_after_gemm = first_child_by_type(graph, parent, "Add")
    if add_after_gemm is None:
        return NoMatch("the LayerNormalization's input Add has no Add consumer", (parent.name,))
    gemm1 = _match_valid_gemm(graph, add_after_gemm, 1, shared, hidden, False)
    if isinstance(gemm1, NoMatch):
        return gemm1
    found = find_path(graph, gemm1.input_node, True, _QKV_MATMUL_PATH)
    if found is None:
        return NoMatch("Faild to find path to qkv_matmul", (gemm1.input_node.name,))
    reshape, transpose, qkv_matmul = found
    v_concat = input_node(graph, qkv_matmul, 1)
    if v_concat is None:
        return NoMatch("the qkv MatMul's input 1 has no producer", (qkv_matmul.name,))
    has_past = is_supported_op(v_concat, "Concat", _CONCAT)
    found = find_path(graph, v_concat if has_past else qkv_matmul, True, _split_path(1, 2))
    if found is None:
        return NoMatch("Faild to find path v to Split", (qkv_matmul.name,))
    v_transpose, v_reshape, split = found
    gemm0 = _match_valid_gemm(graph, split, 0, shared, hidden, True)
    if isinstance(gemm0, NoMatch):
        return gemm0
    gemm0_parent = input_node(graph, gemm0.input_node, 0)
    if gemm0_parent is None or gemm0_parent.index != ln.index:
        return NoMatch("the first Gemm subgraph does not read the LayerNormalization", (gemm0.input_node.name,))
    path_v = check_nodes_in_path_v(graph, reshape, transpose, qkv_matmul, v_transpose, v_reshape, hidden, -1)
    if isinstance(path_v, NoMatch):
        return NoMatch("CheckNodesInPathV return false", path_v.nodes, (path_v.reason,))
    num_heads, head_size, _ = path_v
    if not check_output_edges(graph, split, 3):
        return NoMatch("Output edge count not expected for nodes in path v", (split.name,))
    mask = match_input_mask(graph, qkv_matmul, optional=True)
    if isinstance(mask, NoMatch):
        return NoMatch("MatchInputMaskSubgraph returns false", mask.nodes, (mask.reason,))
    unidir = _match_unidir(graph, mask.remove_always[-1], shared)
    if isinstance(unidir, NoMatch):
        return NoMatch("MatchUnidirMaskSubgraph returns NULL", unidir.nodes, unidir.reasons)
    found = find_path(graph, unidir.div, True, edge_path(("MatMul", (1, 9, 13))) + _split_path(0, 0))
    if found is None:
        return NoMatch("Failed to find path for q", (unidir.div.name,))
    qk_matmul, q_transpose, q_reshape, q_split = found
    if q_split.index != split.index:
        return NoMatch("q and v are not from same Split node", (q_split.name,))
    checked = check_nodes_in_path_q(graph, unidir.div, q_reshape, q_transpose, num_heads, head_size)
    if checked is not None:
        return NoMatch("CheckNodesInPathQ returns false", checked.nodes, (checked.reason,))
    k_concat: Node | None = None
    opt_k_transpose: Node | None = None
    if has_past:
        k_concat = input_node(graph, qk_matmul, 1)
        if k_concat is not None and is_supported_op(k_concat, "Transpose", _TRANSPOSE):
            # "Using transpose optimized pattern": Level1's transpose optimizer pushed k's Transpose(0,2,3,1) and
            # past k's Transpose(0,1,3,2) through the Concat: Transpose(0,2,1,3) -> Concat -> Transpose(0,1,3,2)
            opt_k_transpose = k_concat
            if not perm_is(opt_k_transpose, (0, 1, 3, 2)):
                return NoMatch("opt_k_transpose perm attribute not matched", (opt_k_transpose.name,))
            k_concat = input_node(graph, opt_k_transpose, 0)
        if k_concat is None or not is_supported_op(k_concat, "Concat", _CONCAT):
            return NoMatch("the q.k MatMul's input 1 is not past's Concat", (qk_matmul.name,))
    found = find_path(graph, k_concat if k_concat is not None else qk_matmul, True, _split_path(1, 1))
    if found is None:
        return NoMatch("Failed to find path for k", (qk_matmul.name,))
    k_transpose, k_reshape, k_split = found
    if k_split.index != split.index:
        return NoMatch("k and v are not from same Split node", (k_split.name,))
    k_perm = (0, 2, 1, 3) if opt_k_transpose is not None else (0, 2, 3, 1)
    checked = check_nodes_in_path_k(graph, k_reshape, k_transpose, num_heads, head_size, k_perm)
    if checked is not None:
        return NoMatch("CheckNodesInPathK returns false", checked.nodes, (checked.reason,))
    past: _Past | None = None
    if k_concat is not None:
        matched = _match_past(graph, k_concat, v_concat, opt_k_transpose is not None)
        if isinstance(matched, NoMatch):
            return NoMatch("MatchPastSubgraph returns false", matched.nodes, (matched.reason,))
        past = matched
    # the rewrite
    inputs = [ln.outputs[0], gemm0.gemm.inputs[1], gemm0.gemm.inputs[2]]
    outputs = [reshape.outputs[0]]
    inputs.append(get_or_create_mask_int32(graph, mask.mask_input, cache, ln.ep) if mask.has_input_mask else "")
    if past is not None:
        inputs.append(past.past)
        outputs.append(past.present)
    name = graph.generate_node_name("Attention")
    attributes = {
        "num_heads": onnx.helper.make_attribute("num_heads", num_heads),
        "unidirectional": onnx.helper.make_attribute("unidirectional", int(unidir.unidirectional)),
    }
    # the input mask's Mul constant unless it is the default, else the Where's; written when not the default
    fill = mask.mask_filter_value if mask.mask_filter_value != GPT_MASK_FILTER else unidir.fill
    if fill != GPT_MASK_FILTER:
        attributes["mask_filter_value"] = onnx.helper.make_attribute("mask_filter_value", fill)
    remove = [reshape, transpose, qkv_matmul, v_transpose, v_reshape, split, unidir.div, qk_matmul]
    remove += [q_transpose, q_reshape, k_transpose, k_reshape, *unidir.nodes, *gemm0.nodes]
    if past is not None:
        remove += past.nodes
    if opt_k_transpose is not None:
        remove.append(opt_k_transpose)
    remove += set_mask_nodes_to_remove(graph, mask)
    replace_with_attention(graph, remove, name, inputs, outputs, attributes, ln.ep)
    return name
