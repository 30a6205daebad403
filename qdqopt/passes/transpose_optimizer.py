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
units the pushes broke are repaired. :meth:`_TransposeOptimizerBase.unsupported` runs the pass on a copy and names
the first thing it would need that qdqopt lacks.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from qdqopt.graph import Graph
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import clone_with_types
from qdqopt.passes.transpose_optimization import NotImplementedHandler, OptimizerCtx, make_ctx, optimize
from qdqopt.passes.transpose_optimization.context import CPU

__all__ = ["TransposeOptimizer", "TransposeOptimizerCPU", "write_back_types"]


def write_back_types(graph: Graph, ctx: OptimizerCtx) -> None:
    """Set the NodeArg types the run changed on the graph (ORT edits its NodeArgs in place)."""
    for name, (elem, shape) in ctx.types.items():
        if not graph.has_value(name) or graph.is_initializer(name):
            continue
        dims: list[int | str | None] | None = None if shape is None else [d if d >= 0 else None for d in shape]
        graph.set_value_type(name, onnx.helper.make_tensor_type_proto(elem or 0, dims))


def check_run(graph: Graph, run: Callable[[Graph], OptimizerCtx | None]) -> str | None:
    """Run ``run`` on a copy of ``graph``; why qdqopt cannot reproduce it exactly (None: it can)."""
    if any(True for _ in graph.subgraphs()):
        return "the model has subgraphs (the transpose optimizer recursing into them is not implemented)"
    probe = make_ctx(graph, "")
    if probe is None:
        return None
    declared = [v.name for v in (*graph.value_info, *graph.outputs) if graph.has_value(v.name)]
    shapes = {name: probe.shape(name) for name in declared}
    trial = clone_with_types(graph)
    try:
        ctx = run(trial)
    except NotImplementedHandler as exc:
        return str(exc)
    if ctx is None:
        return None
    for name in ctx.types:
        if name in ctx.symbolic and trial.has_value(name):
            # ORT copies and permutes NodeArg shapes dim by dim, symbolic names included; qdqopt keeps ints
            return f"it would copy a shape with symbolic dims to {name!r} (not reproduced)"
    for name in declared:
        if name in ctx.types and trial.has_value(name) and ctx.types[name][1] != shapes[name]:
            # ORT sets the NodeArg's shape; qdqopt's saver keeps the type a value had at load
            return f"it would change the shape of the declared value {name!r} (the core cannot save that)"
    return None


# ---------------------------------------------------------------------------------------------------- passes
class _TransposeOptimizerBase(GraphTransformer):
    provider = ""

    def _optimize(self, graph: Graph) -> tuple[OptimizerCtx | None, bool]:
        ctx = make_ctx(graph, self.provider)
        if ctx is None:
            return None, False
        return ctx, optimize(ctx)

    def _run(self, graph: Graph) -> bool:
        ctx, changed = self._optimize(graph)
        if ctx is not None:
            write_back_types(graph, ctx)
        return changed

    def unsupported(self, graph: Graph, ctx: PassContext) -> str | None:
        """Why qdqopt cannot reproduce this pass exactly on ``graph`` (None: it can)."""
        return check_run(graph, lambda trial: self._optimize(trial)[0])

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self._run(graph)  # apply() has checked unsupported() first


class TransposeOptimizer(_TransposeOptimizerBase):
    """Level1: no EP assigned yet, the default cost check."""

    name = "TransposeOptimizer"
    provider = ""


class TransposeOptimizerCPU(_TransposeOptimizerBase):
    """Level2: CPU-EP nodes, ORT's EP cost check first, new nodes on the CPU EP."""

    name = "TransposeOptimizer_CPUExecutionProvider"
    provider = CPU
