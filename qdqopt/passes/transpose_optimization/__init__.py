"""The transpose optimizer, as ORT splits it (``onnxruntime/core/optimizer/transpose_optimization/``).

================================  ===============================================================================
module                            ORT
================================  ===============================================================================
:mod:`.perms`                     perm/axes helpers of ``onnx_transpose_optimization.cc``
:mod:`.api`                       ``optimizer_api.h`` / ``ort_optimizer_api_impl.cc``: the graph API and its names
:mod:`.context`                   ``OptimizerCtx`` and the editing helpers (``TransposeInput``, ``MakeQDQNodeUnit``...)
:mod:`.handlers`                  ``handler_map``: one module per op family
:mod:`.ort`                       ``ort_transpose_optimization.cc``: ``OrtExtendedHandlers``, ``OrtEPCostCheck``
:mod:`.registry`                  ``GetHandler``
:mod:`.cost`                      ``DefaultCostCheck``
:mod:`.core`                      ``OptimizeImpl``, ``ProcessTranspose``, ``TryConstantFoldNode``
:mod:`.qdq_fixups`                ``FixQDQNodeUnits``
:mod:`.layout`                    ``WrapTransposesAroundNode``, ``SwapNodeOpTypeDomainAndSinceVersion`` (NHWC)
================================  ===============================================================================

Its clients are the passes :mod:`qdqopt.passes.transpose_optimizer` (``TransposeOptimizer`` at Level1 and
``TransposeOptimizer_CPUExecutionProvider`` at Level2) and :mod:`qdqopt.passes.nhwc_transformer`.
See ``docs/notes/transpose_optimizer.md`` for what was read in ORT and checked live.
"""

from __future__ import annotations

from qdqopt.passes.transpose_optimization.context import OptimizerCtx
from qdqopt.passes.transpose_optimization.core import make_ctx, optimize

__all__ = ["OptimizerCtx", "make_ctx", "optimize"]
