"""GroupQueryAttentionPreNormFusion: the per-head Q/K RMSNorm before a ``com.microsoft`` GroupQueryAttention (Qwen3's
``Reshape -> SimplifiedLayerNormalization -> Reshape`` on Q and K) moves into the GQA, whose inputs 14 and 15 take
the norm weights (``group_query_attention_pre_norm_fusion.cc``, Level2)::

    before                                                              after
    q_proj -> Reshape [B,S,H,D] -> SLN(wq, eps) -> Reshape [B,S,H*D] -+   q_proj -+
    k_proj -> Reshape [B,S,Hk,D] -> SLN(wk, eps) -> Reshape [B,S,Hk*D] +-> GQA      k_proj -+-> GQA(qk_norm_epsilon=eps,
    v ----------------------------------------------------------------+   v ------+    ..., 14: wq, 15: wk)

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is a
  ``com.microsoft`` GroupQueryAttention (1) on a compatible EP;
* the compatible EPs are the CUDA and WebGPU EPs (``graph_transformer_utils.cc``): a node the CPU EP owns is never
  fused, and a CPU session of 1.32 logs ``GroupQueryAttentionPreNormFusion modified: 0`` on every fixture of
  ``gqa/``. **In a CPU session the pass therefore never changes a graph**; the rules below are those of the source,
  kept for the reader and for a CUDA- or WebGPU-assigned graph;
* the GQA has no input 14 or 15 yet (a present input has a non-empty name), has inputs 0, 1 and 2 (so no packed
  QKV) and at least four, ``do_rotary`` is 1 (default 0), past_key (input 3) has a known shape of rank >= 4 whose
  dim 3 (head_size) is a value, and ``num_heads`` and ``kv_num_heads`` are set;
* on slot 0 (hidden num_heads * head_size) and slot 1 (kv_num_heads * head_size) the chain walking up is: a Reshape
  (5, 13, 14, 19, 21, 23, 24, 25; "outer") with one output edge, not a graph output, whose output's last dim is the
  hidden value; its input 0 made by a SimplifiedLayerNormalization (1, ONNX domain) with one output edge, not a
  graph output, no other output named, a scale input; input, scale and output of one known element type; the scale
  a constant initializer of dims ``[head_size]``; ``axis`` -1 as written (default -1: 3 on a rank-4 input is
  refused); ``epsilon`` (default 1e-5) finite and > 0; its input 0 made by a Reshape ("inner", same versions) with
  one output edge, not a graph output, whose output's last dim is head_size; the Reshape's input 0 is the
  projection. The Reshapes' output shapes are those Resolve infers from their constant shape input;
* the two epsilons differ by at most 1e-9 (as float);
* the GQA and the six chain nodes are removed (in that order: GQA, then Q's and K's outer Reshape, SLN, inner
  Reshape) and a new GQA added: ``GenerateNodeName(<name> + "_qknorm")``, doc string "GroupQueryAttention with fused
  per-head Q/K RMSNorm", 16 inputs (0: Q's projection, 1: K's, 14: Q's norm weight, 15: K's, the others as they were
  or empty), the same outputs, the GQA's attributes plus ``qk_norm_epsilon`` (Q's epsilon), domain com.microsoft, the
  GQA's EP. ORT logs ``GroupQueryAttentionPreNormFusion: matched gqa='...' q_sln='...' k_sln='...' head_size=...
  num_heads=... kv_num_heads=... epsilon=...`` (VERBOSE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.events import NoMatch, emit_no_match
from qdqopt.graph import Graph, Node, View
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import is_supported_op, output_edge_count

__all__ = ["GroupQueryAttentionPreNormFusion", "PreNormChain", "match_pre_norm_chain"]

MS_DOMAIN = "com.microsoft"
RESHAPE_VERSIONS = (5, 13, 14, 19, 21, 23, 24, 25)
EPSILON_TOLERANCE = np.float32(1e-9)
DEFAULT_EPSILON = 1e-5
QK_NORM_EPSILON = "qk_norm_epsilon"


def _has_input(node: Node, index: int) -> bool:
    return index < len(node.inputs) and bool(node.inputs[index])


@dataclass(frozen=True)
class PreNormChain:
    """``MatchPreNormReshapeChain``'s out-parameters."""

    reshape_outer: Node
    sln: Node
    reshape_inner: Node
    projection: str
    norm_weight: str
    epsilon: float


def _single_use(graph: Graph, node: Node) -> bool:
    """One output edge, and output 0 not a graph output."""
    return output_edge_count(graph, node) == 1 and not graph.is_graph_output(node.outputs[0])


def _last_dim_is(graph: Graph, value: str, expected: int) -> bool:
    """The Reshape output's last dim, as ORT's Resolve infers it: from the constant shape input (its inference
    context hands constant initializers to ONNX's Reshape inference), so ``View.DATA``."""
    shape = graph.shape(value, view=View.DATA)
    return bool(shape) and isinstance(shape[-1], int) and shape[-1] == expected  # type: ignore[index]


def match_pre_norm_chain(
    graph: Graph, consumer: Node, slot: int, head_size: int, hidden: int
) -> PreNormChain | NoMatch:
    """``MatchPreNormReshapeChain``: producer Reshape <- SimplifiedLayerNormalization <- Reshape above ``slot``."""
    where = f"input {slot}"
    if not _has_input(consumer, slot):
        return NoMatch(f"{where} is absent")
    outer = graph.producer(consumer.inputs[slot])
    if outer is None or not is_supported_op(outer, "Reshape", RESHAPE_VERSIONS):
        return NoMatch(f"{where} is not made by a Reshape")
    if not _single_use(graph, outer):
        return NoMatch(f"{where}: the outer Reshape has another consumer or is a graph output", (outer.name,))
    if not _last_dim_is(graph, outer.outputs[0], hidden):
        return NoMatch(f"{where}: the outer Reshape's last dim is not {hidden}", (outer.name,))
    sln = graph.producer(outer.inputs[0])
    if sln is None or not is_supported_op(sln, "SimplifiedLayerNormalization", (1,)):
        return NoMatch(f"{where}: the outer Reshape's input is not made by a SimplifiedLayerNormalization")
    if not _single_use(graph, sln) or any(sln.outputs[1:]):
        return NoMatch(f"{where}: the SimplifiedLayerNormalization has another consumer or output", (sln.name,))
    if not _has_input(sln, 1):
        return NoMatch(f"{where}: the SimplifiedLayerNormalization has no scale", (sln.name,))
    types = [graph.elem_type(sln.inputs[0]), graph.elem_type(sln.inputs[1]), graph.elem_type(sln.outputs[0])]
    if types[0] in (None, 0) or len(set(types)) != 1:
        return NoMatch(f"{where}: the SimplifiedLayerNormalization's input, scale and output types differ", (sln.name,))
    weight = graph.constant_initializer(sln.inputs[1])  # GetConstantInitializer, outer scopes included
    if weight is None or list(weight.dims) != [head_size]:
        return NoMatch(f"{where}: the norm weight is not a constant initializer of dims [{head_size}]", (sln.name,))
    if sln.attr_int("axis", -1) != -1:
        return NoMatch(f"{where}: the SimplifiedLayerNormalization's axis is not -1", (sln.name,))
    epsilon = sln.attr_float("epsilon", DEFAULT_EPSILON)
    if not math.isfinite(epsilon) or epsilon <= 0.0:
        return NoMatch(f"{where}: the SimplifiedLayerNormalization's epsilon is not finite and > 0", (sln.name,))
    inner = graph.producer(sln.inputs[0])
    if inner is None or not is_supported_op(inner, "Reshape", RESHAPE_VERSIONS):
        return NoMatch(f"{where}: the SimplifiedLayerNormalization's input is not made by a Reshape", (sln.name,))
    if not _single_use(graph, inner):
        return NoMatch(f"{where}: the inner Reshape has another consumer or is a graph output", (inner.name,))
    if not _last_dim_is(graph, inner.outputs[0], head_size):
        return NoMatch(f"{where}: the inner Reshape's last dim is not {head_size}", (inner.name,))
    return PreNormChain(outer, sln, inner, inner.inputs[0], sln.inputs[1], epsilon)


class GroupQueryAttentionPreNormFusion(GraphTransformer):
    """Fold the per-head Q/K RMSNorm into GroupQueryAttention (CUDA- and WebGPU-assigned nodes only)."""

    name = "GroupQueryAttentionPreNormFusion"
    compatible_eps = ("CUDAExecutionProvider", "WebGpuExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("GroupQueryAttention",)
        )

    def _refuse(self, gqa: Node) -> NoMatch | None:
        if _has_input(gqa, 14) or _has_input(gqa, 15):
            return NoMatch("already fused (input 14 or 15 present)")
        if len(gqa.inputs) < 4 or not all(_has_input(gqa, i) for i in (0, 1, 2)):
            return NoMatch("query, key and value are not all present (packed QKV)")
        if gqa.attr_int("do_rotary", 0) != 1:
            return NoMatch("do_rotary is not 1")
        return None

    def _fuse(self, graph: Graph, gqa: Node) -> bool:
        if not is_supported_op(gqa, "GroupQueryAttention", (1,), MS_DOMAIN):
            return False
        if not self.node_is_compatible(gqa):
            emit_no_match(
                NoMatch(f"GroupQueryAttention {gqa.name!r} is on {gqa.ep or '(no EP)'}, not the CUDA or WebGPU EP"),
                gqa.name,
            )
            return False
        refused = self._refuse(gqa)
        past_key = graph.shape(gqa.inputs[3]) if refused is None and gqa.inputs[3] else None
        if refused is None and (past_key is None or len(past_key) < 4 or not isinstance(past_key[3], int)):
            refused = NoMatch("past_key's dim 3 (head_size) is not known")
        if refused is None and (gqa.attr_int("num_heads") is None or gqa.attr_int("kv_num_heads") is None):
            refused = NoMatch("num_heads or kv_num_heads is not set")
        if refused is not None:
            emit_no_match(refused, gqa.name)
            return False
        assert past_key is not None and isinstance(past_key[3], int)
        head_size = past_key[3]
        num_heads, kv_heads = gqa.attr_int("num_heads", 0), gqa.attr_int("kv_num_heads", 0)
        q_chain = match_pre_norm_chain(graph, gqa, 0, head_size, num_heads * head_size)
        if isinstance(q_chain, NoMatch):
            emit_no_match(q_chain, gqa.name)
            return False
        k_chain = match_pre_norm_chain(graph, gqa, 1, head_size, kv_heads * head_size)
        if isinstance(k_chain, NoMatch):
            emit_no_match(k_chain, gqa.name)
            return False
        if np.abs(np.float32(q_chain.epsilon) - np.float32(k_chain.epsilon)) > EPSILON_TOLERANCE:
            emit_no_match(NoMatch("the Q and K epsilons differ", (q_chain.sln.name, k_chain.sln.name)), gqa.name)
            return False
        # 16 inputs: the projections at 0 and 1, the norm weights at 14 and 15, the rest as they were or empty
        inputs = [*gqa.inputs[:16], *[""] * (16 - len(gqa.inputs))]
        inputs[0], inputs[1] = q_chain.projection, k_chain.projection
        inputs[14], inputs[15] = q_chain.norm_weight, k_chain.norm_weight
        attributes = dict(gqa.attributes)
        attributes[QK_NORM_EPSILON] = onnx.helper.make_attribute(QK_NORM_EPSILON, float(q_chain.epsilon))
        attr_map = gqa.attr_map.copy()
        attr_map.insert(QK_NORM_EPSILON)
        name, ep, outputs = gqa.name, gqa.ep, list(gqa.outputs)
        for node in (
            gqa,
            q_chain.reshape_outer,
            q_chain.sln,
            q_chain.reshape_inner,
            k_chain.reshape_outer,
            k_chain.sln,
            k_chain.reshape_inner,
        ):
            graph.remove_node(node)
        graph.add_node(
            graph.generate_node_name(name + "_qknorm"),
            "GroupQueryAttention",
            inputs,
            outputs,
            domain=MS_DOMAIN,
            attributes=attributes,
            attr_map=attr_map,
            doc_string="GroupQueryAttention with fused per-head Q/K RMSNorm",
            ep=ep,
        )
        return True
