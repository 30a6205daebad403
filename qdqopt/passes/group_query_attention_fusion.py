"""GroupQueryAttentionFusion: the Q, K and V projections of a ``com.microsoft`` GroupQueryAttention become one
MatMul (or MatMulNBits) with merged weights, and the two RotaryEmbeddings on Q and K move into the GQA
(``do_rotary=1``) (``group_query_attention_fusion.cc``, Level2)::

    before                                                          after
    x -> MatMul(Wq) -> RotaryEmbedding(pos, cos, sin) --+
    x -> MatMul(Wk) -> RotaryEmbedding(pos, cos, sin) --+--> GQA    x -> MatMul([Wq|Wk|Wv]) -> GQA(do_rotary=1,
    x -> MatMul(Wv) ------------------------------------+               q=qkv, k="", v="", ..., cos, sin)

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is a
  ``com.microsoft`` GroupQueryAttention (1) on a compatible EP;
* the compatible EPs are the CUDA EP's only (``graph_transformer_utils.cc`` registers it with ``cuda_eps``): a node
  the CPU EP owns is never fused, and a CPU session of 1.32 logs ``GroupQueryAttentionFusion modified: 0`` on every
  fixture of ``gqa/``. **In a CPU session the pass therefore never changes a graph**; the rules below are those of
  the source, kept for the reader and for a CUDA-assigned graph;
* a GQA whose ``do_rotary`` is 1 is already fused;
* the GQA's input nodes (one per input edge, in producer index order) are walked: each ``RotaryEmbedding`` (op type
  only, any domain) is the first rotary, then the second (a third replaces the second); the MatMul or MatMulNBits
  among a rotary's input nodes is Q for the first one met and K after (a later one replaces K), its input 0 is the
  new node's input ("layer norm": the last one met), and whether it is a MatMulNBits decides ``quantized`` (the last
  one met); the first rotary's inputs 2 and 3 are the cos and sin caches; a MatMul or MatMulNBits feeding the GQA
  directly is V (the last one met). Two rotaries, Q, K and V are required ("Some of the required pre-GQA nodes
  required for fusion were not retrieved"): which rotary and MatMul is Q follows node order, not the GQA's slots;
* the weights (input 1) of Q, K and V are initializers of this graph (``GetInitializedTensor``: overridable ones
  too); quantized, so are the scales (input 2) and, where a node has an input 3, its zero points ("Some of the
  required tensors were not able to load");
* head_size is dim 3 of the GQA's past_key (0 when symbolic; ORT reads it without a check: an unknown shape or a
  rank below 4 crashes the session, qdqopt refuses), q_hidden = num_heads * head_size, kv_hidden = kv_num_heads *
  head_size; the new output ``GenerateNodeArgName("MatMul_output")`` has the layer norm value's type (required
  here: ORT dereferences it) with dim 2, when the rank is above 2, set to q_hidden + 2 * kv_hidden;
* MatMul: the weights are read as fp16 (any other type fails the session: "Tensor type mismatch") and merged row by
  row, ``[Wq | Wk | Wv]`` of dims ``[Wq.dims[0], q_hidden + 2 * kv_hidden]``, ``GenerateNodeArgName("qkv_B")``;
  the node ``GenerateNodeName("MatMul")``, doc string "MatMul fusion node", ONNX domain, Q's attributes;
* MatMulNBits: blocks and blob size are Q's B dims 1 and 2; B (uint8), the scales (fp16) and, when all three have
  them, the zero points (uint8, ``blocks / 2`` bytes a row) are concatenated Q, K, V (``qkv_B`` ``[N, blocks,
  blob]``, ``qkv_scale`` ``[N, blocks]`` or ``[N * blocks]`` as Q's scales, ``qkv_zp`` ``[N * blocks / 2]``); the
  node ``GenerateNodeName("MatMulNBits")``, doc string "MatMulNBits fusion node", Q's attributes with ``N`` set;
* the new node takes the GQA's EP; Q, K, V and both rotaries are removed (a removed output read elsewhere leaves an
  input with no producer, and Resolve fails the session); the GQA gets ``do_rotary=1`` and the inputs
  ``(MatMul_output, "", "", past_key, past_value, seqlens_k, total_sequence_length, cos, sin)`` (anything after
  slot 8 dropped); the graph is resolved after each fusion.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.events import NoMatch, emit_no_match
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import is_supported_op

__all__ = ["GroupQueryAttentionFusion", "QkvProjections", "find_projections"]

MS_DOMAIN = "com.microsoft"
_TP = onnx.TensorProto
_PROJECTIONS = ("MatMulNBits", "MatMul")


class QkvProjections:
    """What the walk over the GQA's inputs found (``rotary_node_1/2``, ``q/k/v_node``, ``layer_norm``, the caches)."""

    def __init__(self) -> None:
        self.rotary: list[Node] = []  # [first, second]
        self.q: Node | None = None
        self.k: Node | None = None
        self.v: Node | None = None
        self.layer_norm = ""
        self.quantized = False
        self.cos: str | None = None
        self.sin: str | None = None

    def complete(self) -> bool:
        return len(self.rotary) == 2 and None not in (self.q, self.k, self.v)


def find_projections(graph: Graph, gqa: Node) -> QkvProjections:
    """The walk of ``ApplyImpl`` over the GQA's input nodes and each rotary's input nodes (edge order)."""
    found = QkvProjections()
    for producer in graph.input_nodes(gqa):
        if producer.op_type == "RotaryEmbedding":
            if not found.rotary:
                found.rotary.append(producer)
            else:
                found.rotary[1:] = [producer]
            for pre in graph.input_nodes(producer):
                if pre.op_type not in _PROJECTIONS:
                    continue
                found.quantized = pre.op_type == "MatMulNBits"
                if found.q is None:
                    found.q = pre
                else:
                    found.k = pre
                found.layer_norm = pre.inputs[0]
            if found.cos is None:
                found.cos = producer.inputs[2] if len(producer.inputs) > 2 else ""
            if found.sin is None:
                found.sin = producer.inputs[3] if len(producer.inputs) > 3 else ""
        elif producer.op_type in _PROJECTIONS:
            found.v = producer
    return found


def _local_initializer(graph: Graph, node: Node, slot: int) -> onnx.TensorProto | None:
    """``graph.GetInitializedTensor(node->InputDefs()[slot]->Name())``: this graph's initializers only."""
    if slot >= len(node.inputs) or not node.inputs[slot]:
        return None
    return graph.initializer(node.inputs[slot])


def _data(tensor: onnx.TensorProto, want: int, count: int) -> np.ndarray:
    """``Initializer(tensor).data<T>()`` read for ``count`` elements: the type must be ``want`` (ORT_ENFORCE)."""
    if tensor.data_type != want:
        raise ModelError(
            f"Tensor type mismatch. T != {_TP.DataType.Name(tensor.data_type).lower()}: GroupQueryAttentionFusion "
            f"reads {tensor.name!r} as {_TP.DataType.Name(want).lower()} and ORT 1.32 fails the session"
        )
    flat = onnx.numpy_helper.to_array(tensor).reshape(-1)
    if flat.size < count:
        raise ModelError(f"GroupQueryAttentionFusion reads {count} elements of {tensor.name!r}, which has {flat.size}")
    return flat[:count]


def _tensor(name: str, dims: Sequence[int], data_type: int, data: np.ndarray) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, dims=list(dims), data_type=data_type)
    tensor.raw_data = np.ascontiguousarray(data).tobytes()
    return tensor


def _add(graph: Graph, tensor: onnx.TensorProto) -> str:
    """``graph_utils::AddInitializer``: the initializer and its typed NodeArg."""
    graph.add_initializer(tensor)
    graph.set_value_type(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    return tensor.name


class GroupQueryAttentionFusion(GraphTransformer):
    """Merge the Q/K/V projections of a GroupQueryAttention and absorb its rotaries (CUDA-assigned nodes only)."""

    name = "GroupQueryAttentionFusion"
    compatible_eps = ("CUDAExecutionProvider",)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("GroupQueryAttention",)
        )

    def _fuse(self, graph: Graph, gqa: Node) -> bool:
        if not is_supported_op(gqa, "GroupQueryAttention", (1,), MS_DOMAIN):
            return False
        if not self.node_is_compatible(gqa):
            emit_no_match(
                NoMatch(f"GroupQueryAttention {gqa.name!r} is on {gqa.ep or '(no EP)'}, not the CUDA EP"), gqa.name
            )
            return False
        if gqa.attr_int("do_rotary", 0) == 1:
            emit_no_match(NoMatch("GQA is already fused (do_rotary=1)"), gqa.name)
            return False
        found = find_projections(graph, gqa)
        if not found.complete():
            emit_no_match(
                NoMatch("Some of the required pre-GQA nodes required for fusion were not retrieved"), gqa.name
            )
            return False
        q, k, v = found.q, found.k, found.v
        assert q is not None and k is not None and v is not None
        tensors = self._load(graph, found.quantized, q, k, v)
        if tensors is None:
            emit_no_match(
                NoMatch("Some of the required tensors were not able to load", (q.name, k.name, v.name)), gqa.name
            )
            return False
        ln_type = graph.type_proto(found.layer_norm)
        past_key = graph.shape(gqa.inputs[3]) if len(gqa.inputs) > 3 and gqa.inputs[3] else None
        if ln_type is None or past_key is None or len(past_key) < 4:
            why = "the MatMul input has no type" if ln_type is None else "past_key has no shape of rank 4"
            emit_no_match(NoMatch(f"{why} (ORT 1.32 dereferences it and crashes)"), gqa.name)
            return False
        head_size = past_key[3] if isinstance(past_key[3], int) else 0
        q_hidden = gqa.attr_int("num_heads", 0) * head_size
        kv_hidden = gqa.attr_int("kv_num_heads", 0) * head_size
        total = q_hidden + 2 * kv_hidden

        out_type = onnx.TypeProto()
        out_type.CopyFrom(ln_type)
        shape = out_type.tensor_type.shape  # mutable_shape(): an absent shape becomes an empty one
        shape.SetInParent()
        if len(shape.dim) > 2:
            shape.dim[2].dim_value = total
        output = graph.generate_value_name("MatMul_output")
        graph.set_value_type(output, out_type)

        merge = self._merged_nbits if found.quantized else self._merged_matmul
        merged = merge(graph, tensors, q_hidden, kv_hidden)
        op = "MatMulNBits" if found.quantized else "MatMul"
        new = graph.add_node(
            graph.generate_node_name(op),
            op,
            [found.layer_norm, *merged],
            [output],
            domain=MS_DOMAIN if found.quantized else "",
            attributes=q.attributes,
            attr_map=q.attr_map,
            doc_string=f"{op} fusion node",
        )
        if found.quantized:
            graph.set_attribute(new, onnx.helper.make_attribute("N", total))
        new.ep = gqa.ep
        fused = [q, k, v, *found.rotary]
        for node in fused:
            if graph.node(node.index) is not None:
                graph.remove_node(node)
        graph.set_attribute(gqa, onnx.helper.make_attribute("do_rotary", 1))
        graph.set_inputs(gqa, [output, "", "", *gqa.inputs[3:7], found.cos or "", found.sin or ""])
        for node in fused:
            for value in node.outputs:
                if value and graph.producer(value) is None and (graph.consumers(value) or graph.is_graph_output(value)):
                    raise ModelError(
                        f"GroupQueryAttentionFusion removed {node.name!r}, whose output {value!r} is still read: "
                        "ORT 1.32's Resolve fails the session"
                    )
        root = graph
        while root.parent is not None:
            root = root.parent
        root.resolve()  # ORT: graph.Resolve() after each fusion ("todo prob remove")
        return True

    @staticmethod
    def _load(graph: Graph, quantized: bool, q: Node, k: Node, v: Node) -> list[list[onnx.TensorProto | None]] | None:
        """``LoadQKVProjectionTensors``: per node [weights, scales, zero points] (None where not loaded)."""
        loaded: list[list[onnx.TensorProto | None]] = []
        for node in (q, k, v):
            weights = _local_initializer(graph, node, 1)
            if weights is None:
                return None
            row: list[onnx.TensorProto | None] = [weights, None, None]
            if quantized:
                row[1] = _local_initializer(graph, node, 2)
                if row[1] is None:
                    return None
            loaded.append(row)
        if quantized:
            for node, row in zip((q, k, v), loaded, strict=True):
                if len(node.inputs) > 3:
                    row[2] = _local_initializer(graph, node, 3)
                    if row[2] is None:
                        return None
        return loaded

    @staticmethod
    def _merged_matmul(
        graph: Graph, tensors: list[list[onnx.TensorProto | None]], q_hidden: int, kv_hidden: int
    ) -> list[str]:
        """The fused MatMul's B: the three weights side by side (``MergeMatMulWeightsByRow``)."""
        wq, wk, wv = (row[0] for row in tensors)
        assert wq is not None and wk is not None and wv is not None
        rows = wq.dims[0]
        parts = [
            _data(w, _TP.FLOAT16, rows * width).reshape(rows, width)
            for w, width in ((wq, q_hidden), (wk, kv_hidden), (wv, kv_hidden))
        ]
        merged = np.concatenate(parts, axis=1)
        name = graph.generate_value_name("qkv_B")
        return [_add(graph, _tensor(name, [rows, q_hidden + 2 * kv_hidden], wq.data_type, merged))]

    @staticmethod
    def _merged_nbits(
        graph: Graph, tensors: list[list[onnx.TensorProto | None]], q_hidden: int, kv_hidden: int
    ) -> list[str]:
        """The fused MatMulNBits' B, scales and (when all three have them) zero points, each Q's rows, then K's,
        then V's (``MergeMatMulWeightsByBlocks``)."""
        (bq, sq, zq), (bk, sk, zk), (bv, sv, zv) = tensors
        assert bq is not None and bk is not None and bv is not None
        assert sq is not None and sk is not None and sv is not None
        blocks, blob = bq.dims[1], bq.dims[2]
        total = q_hidden + 2 * kv_hidden

        def by_blocks(
            trio: tuple[onnx.TensorProto, onnx.TensorProto, onnx.TensorProto], want: int, per_row: int
        ) -> np.ndarray:  # MergeMatMulWeightsByBlocks: Q's rows, then K's, then V's
            widths = (q_hidden, kv_hidden, kv_hidden)
            return np.concatenate([_data(t, want, n * per_row) for t, n in zip(trio, widths, strict=True)])

        b_name = graph.generate_value_name("qkv_B")
        s_name = graph.generate_value_name("qkv_scale")
        merged_b = by_blocks((bq, bk, bv), _TP.UINT8, blocks * blob)
        merged_s = by_blocks((sq, sk, sv), _TP.FLOAT16, blocks)
        s_dims = [total, blocks] if len(sq.dims) > 1 else [total * blocks]
        inputs = [
            _add(graph, _tensor(b_name, [total, blocks, blob], bq.data_type, merged_b)),
            _add(graph, _tensor(s_name, s_dims, sq.data_type, merged_s)),
        ]
        if zq is not None and zk is not None and zv is not None:
            zp_name = graph.generate_value_name("qkv_zp")
            merged_zp = by_blocks((zq, zk, zv), _TP.UINT8, blocks // 2)
            inputs.append(_add(graph, _tensor(zp_name, [total * blocks // 2], zq.data_type, merged_zp)))
        return inputs
