"""qdqopt's passes, one module per ORT transformer, registered under ORT's exact names.

:data:`TRANSFORMERS` maps a transformer name to its class; :data:`RULES` maps a rule name (ORT's rule name, e.g.
``ReluQuantRewrite``) to its class. A name listed in :mod:`qdqopt.levels` but absent here is *not implemented*:
``qdqopt passes`` says so, the manager skips it visibly, and ``qdqopt diff`` disables it on the ORT side.
"""

from __future__ import annotations

from qdqopt.passes.base import GraphTransformer, PassContext, RewriteRule, RuleBasedTransformer, RuleEffect
from qdqopt.passes.constant_folding import ConstantFolding
from qdqopt.passes.constant_sharing import ConstantSharing
from qdqopt.passes.conv_activation_fusion import ConvActivationFusion
from qdqopt.passes.conv_add_activation_fusion import ConvAddActivationFusion
from qdqopt.passes.cse import CommonSubexpressionElimination
from qdqopt.passes.double_qdq import DoubleQDQPairsRemover
from qdqopt.passes.dynamic_quantize_matmul import DynamicQuantizeMatMulFusion
from qdqopt.passes.ensure_unique_dq import EnsureUniqueDQForNodeUnit
from qdqopt.passes.free_dimension_override import FreeDimensionOverrideTransformer
from qdqopt.passes.fuse_initializers import FuseFp16InitializerToFp32NodeTransformer
from qdqopt.passes.gather_fusion import GatherSliceToSplitFusion, GatherToSliceFusion
from qdqopt.passes.gemm_activation_fusion import GemmActivationFusion
from qdqopt.passes.insert_cast import InsertCastTransformer, RemoveDuplicateCastTransformer
from qdqopt.passes.matmul_add_fusion import MatMulAddFusion
from qdqopt.passes.matmul_integer_to_float import MatMulIntegerToFloatFusion
from qdqopt.passes.matmul_nbits_fusion import MatMulNBitsFusion
from qdqopt.passes.matmul_scale_fusion import MatMulScaleFusion
from qdqopt.passes.matmul_transpose_fusion import MatmulTransposeFusion
from qdqopt.passes.memcpy import MemcpyTransformer
from qdqopt.passes.nchwc_transformer import NchwcTransformer
from qdqopt.passes.nhwc_transformer import NhwcTransformer
from qdqopt.passes.qdq_final_cleanup import QDQFinalCleanupTransformer
from qdqopt.passes.qdq_propagation import QDQPropagationTransformer
from qdqopt.passes.qdq_s8_to_u8 import QDQS8ToU8Transformer
from qdqopt.passes.qdq_selector_action import QDQSelectorActionTransformer
from qdqopt.passes.reshape_fusion import ReshapeFusion
from qdqopt.passes.rules_level1 import LEVEL1_RULE_CLASSES
from qdqopt.passes.rules_level2 import LEVEL2_RULE_CLASSES
from qdqopt.passes.transpose_optimizer import TransposeOptimizer, TransposeOptimizerCPU
from qdqopt.passes.weight_bias_quantization import WeightBiasQuantization
from qdqopt.passes.where_dummy_dq import WhereDummyDq

__all__ = [
    "RULES",
    "TRANSFORMERS",
    "GraphTransformer",
    "PassContext",
    "RewriteRule",
    "RuleBasedTransformer",
    "RuleEffect",
    "is_implemented",
]

TRANSFORMERS: dict[str, type[GraphTransformer]] = {
    FreeDimensionOverrideTransformer.name: FreeDimensionOverrideTransformer,
    EnsureUniqueDQForNodeUnit.name: EnsureUniqueDQForNodeUnit,
    MemcpyTransformer.name: MemcpyTransformer,
    RemoveDuplicateCastTransformer.name: RemoveDuplicateCastTransformer,
    InsertCastTransformer.name: InsertCastTransformer,
    ConstantSharing.name: ConstantSharing,
    ReshapeFusion.name: ReshapeFusion,
    DoubleQDQPairsRemover.name: DoubleQDQPairsRemover,
    QDQPropagationTransformer.name: QDQPropagationTransformer,
    WhereDummyDq.name: WhereDummyDq,
    MatMulIntegerToFloatFusion.name: MatMulIntegerToFloatFusion,
    DynamicQuantizeMatMulFusion.name: DynamicQuantizeMatMulFusion,
    MatMulAddFusion.name: MatMulAddFusion,
    CommonSubexpressionElimination.name: CommonSubexpressionElimination,
    ConstantFolding.name: ConstantFolding,
    WeightBiasQuantization.name: WeightBiasQuantization,
    QDQS8ToU8Transformer.name: QDQS8ToU8Transformer,
    QDQSelectorActionTransformer.name: QDQSelectorActionTransformer,
    GemmActivationFusion.name: GemmActivationFusion,
    ConvActivationFusion.name: ConvActivationFusion,
    GatherSliceToSplitFusion.name: GatherSliceToSplitFusion,
    GatherToSliceFusion.name: GatherToSliceFusion,
    MatMulScaleFusion.name: MatMulScaleFusion,
    MatMulNBitsFusion.name: MatMulNBitsFusion,
    QDQFinalCleanupTransformer.name: QDQFinalCleanupTransformer,
    NchwcTransformer.name: NchwcTransformer,
    NhwcTransformer.name: NhwcTransformer,
    ConvAddActivationFusion.name: ConvAddActivationFusion,
    TransposeOptimizer.name: TransposeOptimizer,
    TransposeOptimizerCPU.name: TransposeOptimizerCPU,
    FuseFp16InitializerToFp32NodeTransformer.name: FuseFp16InitializerToFp32NodeTransformer,
    MatmulTransposeFusion.name: MatmulTransposeFusion,
}

RULES: dict[str, type[RewriteRule]] = {
    **{rule.name: rule for rule in LEVEL1_RULE_CLASSES},
    **{rule.name: rule for rule in LEVEL2_RULE_CLASSES},
}


def is_implemented(name: str, *, rule: bool = False) -> bool:
    """Whether qdqopt implements this transformer (or, with ``rule=True``, this rewrite rule)."""
    return name in (RULES if rule else TRANSFORMERS)
