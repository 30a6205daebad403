"""TransposeOptimizer: push Transposes through the ops that allow it until they cancel (``transpose_optimizer.cc``;
the algorithm is the package :mod:`qdqopt.passes.transpose_optimization`; see ``docs/notes/transpose_optimizer.md``).

::

    x ─> Transpose(0,3,1,2) ─> Relu ─> Transpose(0,2,3,1) ─> y        becomes        x ─> Relu ─> y

Registered twice: ``TransposeOptimizer`` at Level1 (no EP, default cost check) and
``TransposeOptimizer_CPUExecutionProvider`` at Level2 (CPU nodes, ORT's EP cost check, new nodes on the CPU EP).

For each node in a topological snapshot, the first input produced by a Transpose whose handler accepts it and whose
cost estimate decreases is pushed: the node's other inputs are transposed with the inverse perm (constant
initializers in place, cancelling Transposes removed, new Transposes added) and its outputs get a Transpose with
the perm. Then, if the graph has a DequantizeLinear, Transpose/Squeeze nodes on constants are folded and QDQ node
units the pushes broke are repaired. Every subgraph is then optimized the same way, after its parent. The NodeArg
types the run sets are written back to the graph (for later passes and for the saver). Every handler ORT 1.32
registers is implemented, so the pass covers every model (it declines none).
"""

from __future__ import annotations

from qdqopt.graph import Graph
from qdqopt.graph.schema import tensor_type_proto
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.transpose_optimization import OptimizerCtx, make_ctx, optimize
from qdqopt.passes.transpose_optimization.api import UNTYPED
from qdqopt.passes.transpose_optimization.context import CPU

__all__ = ["TransposeOptimizer", "TransposeOptimizerCPU", "write_back_types"]


def write_back_types(graph: Graph, ctx: OptimizerCtx) -> None:
    """Give the graph the NodeArg types the run left (ORT edits its NodeArgs in place).

    The types it set go to the passes after it (:meth:`Graph.set_value_type`) and are pinned for the saver
    (:meth:`Graph.pin_value_type`: a DQ looked past, an initializer transposed in place); a declared value whose
    producer it removed or replaced keeps the type it had then, which the saver writes should no node produce the
    value any more (:meth:`Graph.keep_value_type`).
    """
    for name, (elem, dims) in ctx.changed_types().items():
        if not graph.has_value(name):
            continue
        type_proto = tensor_type_proto(elem or 0, dims)
        if not graph.is_initializer(name):
            graph.set_value_type(name, type_proto)
        graph.pin_value_type(name, type_proto)
    for name, (elem, dims) in ctx.replaced_types().items():
        graph.keep_value_type(name, tensor_type_proto(elem or 0, dims))
    for name, found in ctx.types.items():  # NodeArgs it made untyped: the next Resolve removes those nothing uses
        if found == UNTYPED:
            graph.mark_untyped(name)


# ---------------------------------------------------------------------------------------------------- passes
class _TransposeOptimizerBase(GraphTransformer):
    provider = ""

    def _optimize(self, graph: Graph) -> tuple[OptimizerCtx | None, bool]:
        """``Optimize`` on one graph (no subgraphs), the types it set written back."""
        ctx = make_ctx(graph, self.provider)
        if ctx is None:
            return None, False
        changed = optimize(ctx)
        write_back_types(graph, ctx)
        return ctx, changed

    def _run(self, graph: Graph) -> tuple[OptimizerCtx | None, bool]:
        """``ApplyImpl``: ``Optimize`` on ``graph``, then on every subgraph, nodes in topological order (each graph
        with its own context and its own ``_token_N`` counter, as ORT's per-graph name generators)."""
        ctx, changed = self._optimize(graph)
        for node in graph.candidates_in_order(()):  # the nodes with subgraphs
            for sub in node.subgraphs.values():
                if self._run(sub)[1]:
                    sub.modified = True
                    changed = True
        return ctx, changed

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self._run(graph)[1]


class TransposeOptimizer(_TransposeOptimizerBase):
    """Level1: no EP assigned yet, the default cost check."""

    name = "TransposeOptimizer"
    provider = ""


class TransposeOptimizerCPU(_TransposeOptimizerBase):
    """Level2: CPU-EP nodes, ORT's EP cost check first, new nodes on the CPU EP."""

    name = "TransposeOptimizer_CPUExecutionProvider"
    provider = CPU
