"""BiasSkipLayerNormFusion: the bias Add of a MatMul in front of a 4-input com.microsoft SkipLayerNormalization
moves into the SkipLayerNormalization's fifth input, ``bias`` (``bias_skip_layer_norm_fusion.cc``, Level2)::

    before                                              after
    MatMul [-> Cast] -> Add(bias [C]) --+               MatMul [-> Cast] --+
                              skip -----+-> SLN -> y     skip -------------+-> SLN(input, skip, gamma, beta, bias) -> y
                       gamma, beta -----+                gamma, beta ------+

The SkipLayerNormalization is usually SkipLayerNormFusion's (format 3), made earlier in the same step.

Rules (ORT 1.32):

* every graph, each node's subgraphs first, nodes in one topological snapshot; the candidate is a
  ``com.microsoft`` SkipLayerNormalization (1) on a compatible EP with exactly 4 inputs (an empty beta counts);
* the Add is searched for by ``FindPath`` from SLN input 0, then 1; for each, with the MatMul on Add input 0,
  then 1: first ``Add (7, 13, 14) <- MatMul (1, 9, 13)``, then ``Add <- Cast (1, 6, 9, 13, 15) <- MatMul`` (the
  Cast's input 0). The first Add that passes these checks is taken:

  - the Add is on the SLN's EP, has one output edge and does not produce a graph output;
  - its other input (the bias) is a constant initializer (outer scopes included) of rank 1 whose dim is known;
  - the hidden size is gamma's (SLN input 2) length when gamma is 1-D with a known dim (or a 1-D constant), else
    beta's likewise, else the last dim of the Add's MatMul-side input; it must be known and equal the bias length;

  nothing is checked on the types, ranks or EP of MatMul / Cast;
* rewrite: the Add and the SLN go; a new ``GenerateNodeName("SkipLayerNormalization")`` (com.microsoft) with
  doc string ``"fused SkipLayerNormalization and bias Add"``, the SLN's inputs with the Add's slot replaced by the
  Add's MatMul-side input and the bias appended, the SLN's outputs, the SLN's attributes other than ``epsilon``
  then ``epsilon`` (1e-12 when the SLN had none), the SLN's EP.
"""

from __future__ import annotations

from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    constant_initializer,
    edge_path,
    find_path,
    is_constant,
    is_supported_op,
    node_produces_graph_output,
)
from qdqopt.passes.skip_layer_norm_fusion import epsilon_attribute, replace_with_skip_layer_norm

__all__ = ["BiasSkipLayerNormFusion"]

MS_DOMAIN = "com.microsoft"
_ADD = (7, 13, 14)
_MATMUL = (1, 9, 13)
_CAST = (1, 6, 9, 13, 15)


def _one_d_length(graph: Graph, name: str) -> tuple[bool, int]:
    """(is 1-D, its length or -1): from the value's shape, else from a constant initializer's dims."""
    shape = graph.shape(name) if name else None
    if shape is not None:
        if len(shape) != 1:
            return False, -1
        return True, shape[0] if isinstance(shape[0], int) else -1
    found = constant_initializer(graph, name) if name else None
    if found is not None and len(found[1].dims) == 1:
        return True, int(found[1].dims[0])
    return False, -1


def _hidden_size_of(graph: Graph, sln: Node, slot: int) -> int:
    """The length of SLN input ``slot`` (gamma or beta) if it is 1-D and known, else -1."""
    if len(sln.inputs) <= slot or not sln.inputs[slot]:
        return -1
    name = sln.inputs[slot]
    shape = graph.shape(name)
    if shape is not None and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0]
    found = constant_initializer(graph, name)
    if found is not None and len(found[1].dims) == 1:
        return int(found[1].dims[0])
    return -1


class BiasSkipLayerNormFusion(GraphTransformer):
    """Fold ``MatMul [-> Cast] -> Add(1-D constant bias)`` in front of a SkipLayerNormalization into its bias."""

    name = "BiasSkipLayerNormFusion"
    compatible_eps = ("CPUExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_in_order(
            graph, ctx, graph_level, lambda node: self._fuse(graph, node), ops=("SkipLayerNormalization",)
        )

    def _accept(self, graph: Graph, sln: Node, add: Node, matmul_slot: int) -> bool:
        if add.ep != sln.ep or graph.output_edge_count(add) != 1 or node_produces_graph_output(graph, add):
            return False
        bias = add.inputs[1 - matmul_slot]
        if not is_constant(graph, bias):
            return False
        is_1d, bias_len = _one_d_length(graph, bias)
        if not is_1d:
            return False
        hidden = _hidden_size_of(graph, sln, 2)
        if hidden == -1:
            hidden = _hidden_size_of(graph, sln, 3)
        if hidden == -1:
            shape = graph.shape(add.inputs[matmul_slot])
            if shape and isinstance(shape[-1], int):
                hidden = shape[-1]
        return hidden != -1 and bias_len != -1 and hidden == bias_len

    def _match(self, graph: Graph, sln: Node) -> tuple[int, Node, int] | None:
        """(SLN slot, the Add, the Add's MatMul-side slot) of the first acceptable path."""
        for sln_slot in (0, 1):
            for matmul_slot in (0, 1):
                add_step = (f"Add@{sln_slot}", _ADD)
                paths = (
                    edge_path(add_step, (f"MatMul@{matmul_slot}", _MATMUL)),
                    edge_path(add_step, (f"Cast@{matmul_slot}", _CAST), ("MatMul", _MATMUL)),
                )
                for path in paths:
                    found = find_path(graph, sln, True, path)
                    if found is not None and self._accept(graph, sln, found[0], matmul_slot):
                        return sln_slot, found[0], matmul_slot
        return None

    def _fuse(self, graph: Graph, sln: Node) -> bool:
        if not is_supported_op(sln, "SkipLayerNormalization", (1,), MS_DOMAIN) or not self.node_is_compatible(sln):
            return False
        if len(sln.inputs) != 4:
            return False
        found = self._match(graph, sln)
        if found is None:
            return False
        sln_slot, add, matmul_slot = found
        inputs = [*sln.inputs, add.inputs[1 - matmul_slot]]
        inputs[sln_slot] = add.inputs[matmul_slot]
        attributes = {k: v for k, v in sln.attributes.items() if k != "epsilon"}
        attributes["epsilon"] = epsilon_attribute(sln)
        doc = "fused SkipLayerNormalization and bias Add"
        replace_with_skip_layer_norm(graph, sln, [add, sln], inputs, attributes, doc)
        return True
