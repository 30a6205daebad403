"""ORT 1.32's CPU-EP pass registry: one line per transformer, with its name, stage, position and class together.

:data:`PASSES` is the single source of truth for "which passes run, where, and which code runs them". Each
:class:`PassSpec` line holds

* ORT's exact transformer **name** (what ORT logs as ``GraphTransformer <name> modified: <0|1>`` and what
  ``disabled_optimizers`` takes) and, where it differs, ORT's C++ class (:attr:`PassSpec.ort_class`);
* its **stage** (``pre``, ``L0`` .. ``L4``, ``loop``, ``post``: see :mod:`qdqopt.levels`); its **position** is its
  place in the table, which is the order of ORT's INFO log, checked against ORT 1.32.0's own log
  (``tests/test_levels.py``);
* what **gates** its registration (a session config key, the target CPU), as code (:attr:`PassSpec.gate`) and as
  text (:attr:`PassSpec.gate_text`);
* the **qdq** flag, from the spec's table (§1.4): ``Q`` rewrites QDQ structure, ``q`` can touch QDQ graphs
  incidentally, ``-`` does not apply to int8 QDQ CNNs (documentation only: nothing is gated on it);
* the qdqopt class that **implements** it (:attr:`PassSpec.impl`), or ``None``: not implemented yet, listed as such
  by ``qdqopt passes`` and skipped visibly by the manager. Rule-based transformers carry their rules instead
  (:class:`RuleSpec`, each with its own class or ``None``).

The table is checked when this module is imported (:func:`check_table`): a class whose ``name`` is not the line's
name, a name twice in one stage, a rule name that is also a transformer name, stages out of order, a required flag
that does not match the stage... fail the import instead of reading as "not implemented".

:data:`TRANSFORMERS` and :data:`RULES` are indexes built from the table (name -> class), the ones the manager looks
implementations up in; tests may patch them to pretend a pass is missing.

Passes of one's own (:class:`Plugin`, loaded by :mod:`qdqopt.plugins`) are not in the table: :func:`with_plugins`
returns the table with them slotted in at their declared place, marked as not ORT's (:attr:`PassSpec.plugin`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.levels import LEVEL_STAGES, REQUIRED_STAGES, STAGES, Level, level_stage
from qdqopt.passes import rules_level1 as r1
from qdqopt.passes import rules_level2 as r2
from qdqopt.passes.attention_fusion import AttentionFusion
from qdqopt.passes.avx2_weight_s8_to_u8 import Avx2WeightS8ToU8Transformer
from qdqopt.passes.base import GraphTransformer, RewriteRule
from qdqopt.passes.bias_dropout_fusion import BiasDropoutFusion
from qdqopt.passes.bias_gelu_fusion import BiasGeluFusion
from qdqopt.passes.bias_skip_layer_norm_fusion import BiasSkipLayerNormFusion
from qdqopt.passes.bias_softmax_fusion import BiasSoftmaxFusion
from qdqopt.passes.constant_folding import ConstantFolding
from qdqopt.passes.constant_sharing import ConstantSharing
from qdqopt.passes.conv_activation_fusion import ConvActivationFusion
from qdqopt.passes.conv_add_activation_fusion import ConvAddActivationFusion
from qdqopt.passes.cse import CommonSubexpressionElimination
from qdqopt.passes.double_qdq import DoubleQDQPairsRemover
from qdqopt.passes.dq_matmulnbits_fusion import DQMatMulNBitsFusion
from qdqopt.passes.dynamic_quantize_matmul import DynamicQuantizeMatMulFusion
from qdqopt.passes.embed_layer_norm_fusion import EmbedLayerNormFusion
from qdqopt.passes.ensure_unique_dq import EnsureUniqueDQForNodeUnit
from qdqopt.passes.fast_gelu_fusion import FastGeluFusion
from qdqopt.passes.free_dimension_override import FreeDimensionOverrideTransformer
from qdqopt.passes.fuse_initializers import FuseFp16InitializerToFp32NodeTransformer
from qdqopt.passes.gather_fusion import GatherSliceToSplitFusion, GatherToSliceFusion
from qdqopt.passes.gelu_fusion import GeluFusionL1, GeluFusionL2
from qdqopt.passes.gemm_activation_fusion import GemmActivationFusion
from qdqopt.passes.group_query_attention_fusion import GroupQueryAttentionFusion
from qdqopt.passes.group_query_attention_pre_norm_fusion import GroupQueryAttentionPreNormFusion
from qdqopt.passes.insert_cast import InsertCastTransformer, RemoveDuplicateCastTransformer
from qdqopt.passes.layer_norm_fusion import LayerNormFusionL1, LayerNormFusionL2, SimplifiedLayerNormFusion
from qdqopt.passes.matmul_activation_fusion import MatMulActivationFusion
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
from qdqopt.passes.quick_gelu_fusion import QuickGeluFusion
from qdqopt.passes.reshape_fusion import ReshapeFusion
from qdqopt.passes.skip_layer_norm_fusion import SkipLayerNormFusion
from qdqopt.passes.slice_concat_to_space_to_depth_fusion import SliceConcatToSpaceToDepthFusion
from qdqopt.passes.swiglu_fusion import SwiGluFusion
from qdqopt.passes.transpose_optimizer import TransposeOptimizer, TransposeOptimizerCPU
from qdqopt.passes.weight_bias_quantization import WeightBiasQuantization
from qdqopt.passes.where_dummy_dq import WhereDummyDq
from qdqopt.target import Target

__all__ = [
    "LEVEL1_RULES",
    "LEVEL2_RULES",
    "OPTIMIZATION_STAGES",
    "PASSES",
    "QDQ_FLAGS",
    "RULES",
    "TRANSFORMERS",
    "Gate",
    "PassSpec",
    "Plugin",
    "RuleSpec",
    "all_names",
    "check_table",
    "implementation",
    "is_implemented",
    "plugin_specs",
    "registered_passes",
    "rule_implementation",
    "with_plugins",
]

#: ``(config, target) -> registered?``: what decides whether ORT registers a pass for a session.
Gate = Callable[[SessionConfig, Target], bool]

#: The ``qdq`` flag's values (spec §1.4): rewrites QDQ structure / can touch QDQ graphs incidentally / does not apply.
QDQ_FLAGS: dict[str, str] = {
    "Q": "rewrites QDQ structure",
    "q": "can touch QDQ graphs incidentally",
    "-": "does not apply to int8 QDQ CNNs",
}

#: The stages a pass of one's own may join: the optimization levels' fixed-point loops.
OPTIMIZATION_STAGES: tuple[str, ...] = ("L1", "L2", "L3", "L4")


def _always(config: SessionConfig, target: Target) -> bool:
    return True


def _qdq(config: SessionConfig, target: Target) -> bool:
    return not config.flag("session.disable_quant_qdq")


@dataclass(frozen=True)
class RuleSpec:
    """A rewrite rule inside a rule-based transformer, under its rule name (not its class name).

    ``impl`` is qdqopt's :class:`~qdqopt.passes.base.RewriteRule` class (None: not implemented); ``ort_class`` and
    ``ops`` default to the class's name and ``op_types``.
    """

    name: str
    impl: type[RewriteRule] | None = None
    ort_class: str = ""
    ops: tuple[str, ...] = ()
    gate: Gate = _always
    gate_text: str = ""

    def __post_init__(self) -> None:
        if self.impl is not None:
            if not self.ort_class:
                object.__setattr__(self, "ort_class", self.impl.__name__)
            if not self.ops:
                object.__setattr__(self, "ops", tuple(self.impl.op_types))

    @property
    def class_name(self) -> str:
        """ORT's C++ class (the former name of :attr:`ort_class`)."""
        return self.ort_class


@dataclass(frozen=True)
class PassSpec:
    """One transformer as ORT registers it for the CPU EP (or, with :attr:`plugin`, a pass of one's own)."""

    #: ORT's exact name: the log line's and ``disabled_optimizers``'
    name: str
    #: ``pre``, ``L0``..``L4``, ``loop`` or ``post`` (:data:`qdqopt.levels.STAGES`)
    stage: str
    #: qdqopt's class (None: not implemented yet, or a rule-based transformer, whose rules carry the classes)
    impl: type[GraphTransformer] | None = None
    #: ORT's C++ class when it is not :attr:`name` (e.g. ``GeluFusion`` for ``GeluFusionL1``)
    ort_class: str = ""
    #: runs only in the first step of its level's fixed-point loop
    apply_once: bool = False
    gate: Gate = _always
    gate_text: str = ""
    #: ``GetCompatibleExecutionProviders`` (empty: any EP)
    eps: tuple[str, ...] = ()
    rules: tuple[RuleSpec, ...] = field(default_factory=tuple)
    #: ``disabled_optimizers`` does not reach it (the ``pre``, ``loop`` and ``post`` stages)
    required: bool = False
    #: :data:`QDQ_FLAGS`: ``Q``, ``q`` or ``-`` (documentation)
    qdq: str = "-"
    #: for a pass of one's own, where it came from (``module:Class`` or ``entry point NAME``); empty for ORT's
    plugin: str = ""
    #: for a pass of one's own, where it was asked to go (``after ReluQuantRewrite``, ``end of L2``)
    placement: str = ""
    #: whether this is a pass of one's own, which ORT knows nothing of (:attr:`plugin` set; a field, not a property:
    #: the compiled manager asks at every pass application, and a property of this interpreted class is a Python call)
    is_plugin: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_plugin", bool(self.plugin))

    @property
    def class_name(self) -> str:
        """ORT's C++ class (the former name of :attr:`ort_class`)."""
        return self.ort_class

    @property
    def level_label(self) -> str:
        """The stage, or ``required`` for the stages ``disabled_optimizers`` does not reach."""
        return "required" if self.stage in REQUIRED_STAGES else self.stage


def _no_dq_remover(c: SessionConfig, t: Target) -> bool:
    return not c.flag("session.disable_double_qdq_remover")


def _dq_matmulnbits(c: SessionConfig, t: Target) -> bool:
    return _qdq(c, t) and c.flag("session.enable_dq_matmulnbits_fusion")


def _s8_to_u8(c: SessionConfig, t: Target) -> bool:
    return _qdq(c, t) and not t.with_config(c).int8_allowed


def _avx2_s8_u8(c: SessionConfig, t: Target) -> bool:
    # registered outside GenerateTransformers' `if (!disable_quant_qdq)` block: disable_quant_qdq does not gate it
    return c.flag("session.x64quantprecision") and t.u8s8_overflow


def _nchwc(c: SessionConfig, t: Target) -> bool:
    return t.nchwc_block_size > 1


def _cast_chain(c: SessionConfig, t: Target) -> bool:
    return c.flag("optimization.enable_cast_chain_elimination")


def _never(c: SessionConfig, t: Target) -> bool:
    return False


_QDQ_TEXT = "not session.disable_quant_qdq"
_CPU = ("CPUExecutionProvider",)

LEVEL1_RULES: tuple[RuleSpec, ...] = (
    RuleSpec("EliminateIdentity", r1.EliminateIdentity),
    RuleSpec("EliminateSlice", r1.EliminateSlice),
    RuleSpec("UnsqueezeElimination", r1.UnsqueezeElimination),
    RuleSpec("EliminateDropout", r1.EliminateDropout),
    RuleSpec("ExpandElimination", r1.ExpandElimination),
    RuleSpec("CastElimination", r1.CastElimination),
    RuleSpec(
        "CastChainElimination",
        r1.CastChainElimination,
        gate=_cast_chain,
        gate_text="optimization.enable_cast_chain_elimination=1",
    ),
    RuleSpec("PreShapeNodeElimination", r1.PreShapeNodeElimination),
    RuleSpec("NoopElimination", r1.NoopElimination),
    RuleSpec("DivMulFusion", r1.DivMulFusion),
    RuleSpec("FuseReluClip", r1.FuseReluClip),
    RuleSpec("GemmSumFusion", r1.GemmSumFusion),
    RuleSpec("GemmTransposeFusion", r1.GemmTransposeFusion),
    RuleSpec("NotWhereFusion", r1.NotWhereFusion),
    RuleSpec("ConvAddFusion", r1.ConvAddFusion),
    RuleSpec("ConvMulFusion", r1.ConvMulFusion),
    RuleSpec("ConvBNFusion", r1.ConvBNFusion),
    RuleSpec("Pad_Fusion", r1.PadFusion),
    RuleSpec("MatMul_BatchNormalization_Fusion", r1.MatmulBNFusion),
    RuleSpec("LabelEncoderFusion", r1.LabelEncoderFusion),
)

LEVEL2_RULES: tuple[RuleSpec, ...] = (
    RuleSpec("ClipQuantRewrite", r2.ClipQuantFusion),
    RuleSpec("ReluQuantRewrite", r2.ReluQuantFusion),
    RuleSpec("GemmTransposeFusion", r1.GemmTransposeFusion),
)

# fmt: off
#: Every transformer ORT 1.32 can register for a CPU session, in the order of its log (name, stage, class, ...).
PASSES: tuple[PassSpec, ...] = (
    PassSpec("EnsureUniqueDQForNodeUnit", "pre", EnsureUniqueDQForNodeUnit, gate=_qdq, gate_text=_QDQ_TEXT,
             required=True, qdq="Q"),
    PassSpec("FreeDimensionOverrideTransformer", "L0", FreeDimensionOverrideTransformer, gate=_never,
             gate_text="free dimension overrides given (qdqopt takes none)"),
    # ---------------------------------------------------------------- Level1
    PassSpec("Level1_RuleBasedTransformer", "L1", None, "RuleBasedGraphTransformer", rules=LEVEL1_RULES, qdq="q"),
    PassSpec("DoubleQDQPairsRemover", "L1", DoubleQDQPairsRemover, gate=_no_dq_remover,
             gate_text="not session.disable_double_qdq_remover", qdq="Q"),
    PassSpec("ConstantSharing", "L1", ConstantSharing, apply_once=True, qdq="q"),
    PassSpec("CommonSubexpressionElimination", "L1", CommonSubexpressionElimination, qdq="q"),
    PassSpec("ConstantFolding", "L1", ConstantFolding, qdq="Q"),
    PassSpec("MatMulAddFusion", "L1", MatMulAddFusion, qdq="q"),
    PassSpec("ReshapeFusion", "L1", ReshapeFusion),
    PassSpec("FreeDimensionOverrideTransformer", "L1", FreeDimensionOverrideTransformer),
    PassSpec("SliceConcatToSpaceToDepthFusion", "L1", SliceConcatToSpaceToDepthFusion),
    PassSpec("GeluFusionL1", "L1", GeluFusionL1, "GeluFusion"),
    PassSpec("LayerNormFusionL1", "L1", LayerNormFusionL1, "LayerNormFusion"),
    PassSpec("QDQPropagationTransformer", "L1", QDQPropagationTransformer, gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("WeightBiasQuantization", "L1", WeightBiasQuantization, gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("EnsureUniqueDQForNodeUnit", "L1", EnsureUniqueDQForNodeUnit, gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("WhereDummyDq", "L1", WhereDummyDq, gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("DQMatMulNBitsFusion", "L1", DQMatMulNBitsFusion, gate=_dq_matmulnbits,
             gate_text="session.enable_dq_matmulnbits_fusion=1 and " + _QDQ_TEXT, qdq="Q"),
    PassSpec("TransposeOptimizer", "L1", TransposeOptimizer, apply_once=True, qdq="q"),
    # ---------------------------------------------------------------- Level2
    PassSpec("Level2_RuleBasedTransformer", "L2", None, "RuleBasedGraphTransformer", rules=LEVEL2_RULES, eps=_CPU,
             qdq="Q"),
    PassSpec("TransposeOptimizer_CPUExecutionProvider", "L2", TransposeOptimizerCPU, "TransposeOptimizer",
             apply_once=True, eps=_CPU, qdq="q"),
    PassSpec("QDQS8ToU8Transformer", "L2", QDQS8ToU8Transformer, gate=_s8_to_u8,
             gate_text="int8 not allowed and " + _QDQ_TEXT, eps=_CPU, qdq="Q"),
    PassSpec("QDQSelectorActionTransformer", "L2", QDQSelectorActionTransformer, gate=_qdq, gate_text=_QDQ_TEXT,
             eps=("CPUExecutionProvider", "DmlExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", ""),
             qdq="Q"),
    PassSpec("GemmActivationFusion", "L2", GemmActivationFusion, eps=_CPU),
    PassSpec("MatMulIntegerToFloatFusion", "L2", MatMulIntegerToFloatFusion, eps=_CPU),
    PassSpec("DynamicQuantizeMatMulFusion", "L2", DynamicQuantizeMatMulFusion, eps=_CPU),
    PassSpec("ConvActivationFusion", "L2", ConvActivationFusion, eps=_CPU, qdq="q"),
    PassSpec("GeluFusionL2", "L2", GeluFusionL2, "GeluFusion", eps=_CPU),
    PassSpec("LayerNormFusionL2", "L2", LayerNormFusionL2, "LayerNormFusion", eps=_CPU),
    PassSpec("SimplifiedLayerNormFusion", "L2", SimplifiedLayerNormFusion, eps=_CPU),
    PassSpec("AttentionFusion", "L2", AttentionFusion, eps=_CPU),
    PassSpec("EmbedLayerNormFusion", "L2", EmbedLayerNormFusion, eps=_CPU),
    PassSpec("GatherSliceToSplitFusion", "L2", GatherSliceToSplitFusion, eps=_CPU),
    PassSpec("GatherToSliceFusion", "L2", GatherToSliceFusion, eps=_CPU),
    PassSpec("MatmulTransposeFusion", "L2", MatmulTransposeFusion, eps=_CPU),
    PassSpec("BiasGeluFusion", "L2", BiasGeluFusion, eps=_CPU),
    PassSpec("GroupQueryAttentionFusion", "L2", GroupQueryAttentionFusion, eps=("CUDAExecutionProvider",)),
    PassSpec("MatMulAddFusion", "L2", MatMulAddFusion, qdq="q"),  # registered for any EP
    PassSpec("SkipLayerNormFusion", "L2", SkipLayerNormFusion, eps=_CPU),
    PassSpec("BiasSkipLayerNormFusion", "L2", BiasSkipLayerNormFusion, eps=_CPU),
    PassSpec("FastGeluFusion", "L2", FastGeluFusion, eps=_CPU),
    PassSpec("QuickGeluFusion", "L2", QuickGeluFusion, eps=_CPU),
    # SwiGluFusion and BiasDropoutFusion fuse CUDA-assigned nodes only, BiasSoftmaxFusion CUDA/ROCm ones: no-ops in a
    # CPU session
    PassSpec("SwiGluFusion", "L2", SwiGluFusion, eps=("CUDAExecutionProvider",)),
    PassSpec("BiasSoftmaxFusion", "L2", BiasSoftmaxFusion, eps=_CPU),
    PassSpec("BiasDropoutFusion", "L2", BiasDropoutFusion, eps=("CUDAExecutionProvider",)),
    PassSpec("MatMulScaleFusion", "L2", MatMulScaleFusion, eps=_CPU),
    PassSpec("MatMulActivationFusion", "L2", MatMulActivationFusion, eps=("DmlExecutionProvider",)),
    PassSpec("Avx2WeightS8ToU8Transformer", "L2", Avx2WeightS8ToU8Transformer, gate=_avx2_s8_u8,
             gate_text="session.x64quantprecision=1 on an x86 CPU whose U8S8 kernels may overflow", eps=_CPU, qdq="Q"),
    PassSpec("MatMulNBitsFusion", "L2", MatMulNBitsFusion, eps=_CPU, qdq="q"),
    # GroupQueryAttentionFusion / GroupQueryAttentionPreNormFusion fuse CUDA (and WebGPU) nodes only: no-ops on CPU
    PassSpec("GroupQueryAttentionPreNormFusion", "L2", GroupQueryAttentionPreNormFusion,
             eps=("CUDAExecutionProvider", "WebGpuExecutionProvider")),
    PassSpec("QDQFinalCleanupTransformer", "L2", QDQFinalCleanupTransformer, qdq="Q"),
    # ---------------------------------------------------------------- Level3
    PassSpec("NchwcTransformer", "L3", NchwcTransformer, gate=_nchwc,
             gate_text="NCHWc block size > 1 (every x86-64)", qdq="q"),
    PassSpec("NhwcTransformer", "L3", NhwcTransformer,
             gate_text="a CPU NHWC kernel exists (always for QLinearConv)", qdq="Q"),
    PassSpec("ConvAddActivationFusion", "L3", ConvAddActivationFusion, eps=_CPU),
    # ---------------------------------------------------------------- in the loop, after Level3
    PassSpec("RemoveDuplicateCastTransformer", "loop", RemoveDuplicateCastTransformer, required=True),
    PassSpec("CastFloat16Transformer", "loop", InsertCastTransformer, "InsertCastTransformer", required=True),
    # ---------------------------------------------------------------- Level4
    PassSpec("FuseFp16InitializerToFp32NodeTransformer", "L4", FuseFp16InitializerToFp32NodeTransformer,
             "FuseInitializersTransformer"),
    # ---------------------------------------------------------------- after the loop
    PassSpec("MemcpyTransformer", "post", MemcpyTransformer, required=True),
)
# fmt: on


# ------------------------------------------------------------------------------------------------- checks
def check_table(table: Sequence[PassSpec]) -> None:
    """Raise ``ValueError`` naming the first inconsistent line of a pass table (run on :data:`PASSES` at import).

    Checks: known stages in session order; a name once per stage; ``required`` exactly for the required stages; a
    known ``qdq`` flag; an implementing class that subclasses ``GraphTransformer`` and carries the line's name; one
    class per name across stages; rules only in rule-based transformers, each rule class a ``RewriteRule`` with the
    rule's name and op types, one class per rule name, rule names unique within a transformer and distinct from
    every transformer name.
    """
    order = {stage: i for i, stage in enumerate(STAGES)}
    seen: set[tuple[str, str]] = set()
    by_name: dict[str, type[GraphTransformer] | None] = {}
    rule_classes: dict[str, type[RewriteRule] | None] = {}
    last = 0
    for i, spec in enumerate(table):
        where = f"pass table line {i + 1} ({spec.name!r}, {spec.stage!r})"
        if spec.stage not in order:
            raise ValueError(f"{where}: unknown stage (use one of {', '.join(STAGES)})")
        if order[spec.stage] < last:
            raise ValueError(f"{where}: stage out of session order ({' < '.join(STAGES)})")
        last = order[spec.stage]
        if (spec.name, spec.stage) in seen:
            raise ValueError(f"{where}: the name is already registered at this stage")
        seen.add((spec.name, spec.stage))
        if spec.required != (spec.stage in REQUIRED_STAGES):
            raise ValueError(f"{where}: required must be {spec.stage in REQUIRED_STAGES} at this stage")
        if spec.qdq not in QDQ_FLAGS:
            raise ValueError(f"{where}: qdq flag {spec.qdq!r} is not one of {', '.join(QDQ_FLAGS)}")
        if spec.impl is not None:
            if not (isinstance(spec.impl, type) and issubclass(spec.impl, GraphTransformer)):
                raise ValueError(f"{where}: {spec.impl!r} is not a GraphTransformer subclass")
            if spec.impl.name != spec.name:
                raise ValueError(f"{where}: {spec.impl.__name__}.name is {spec.impl.name!r}")
            if spec.rules:
                raise ValueError(f"{where}: a rule-based transformer takes rules, not a class")
        if spec.name in by_name and by_name[spec.name] is not spec.impl:
            raise ValueError(f"{where}: another stage registers this name with another class")
        by_name[spec.name] = spec.impl
        names = [r.name for r in spec.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: a rule is listed twice")
        for rule in spec.rules:
            if rule.impl is not None:
                if not (isinstance(rule.impl, type) and issubclass(rule.impl, RewriteRule)):
                    raise ValueError(f"{where}: rule {rule.name!r}: {rule.impl!r} is not a RewriteRule subclass")
                if rule.impl.name != rule.name:
                    raise ValueError(f"{where}: rule {rule.name!r}: {rule.impl.__name__}.name is {rule.impl.name!r}")
                if tuple(rule.impl.op_types) != rule.ops:
                    raise ValueError(
                        f"{where}: rule {rule.name!r}: ops {rule.ops} but the class targets {tuple(rule.impl.op_types)}"
                    )
            if rule.name in rule_classes and rule_classes[rule.name] is not rule.impl:
                raise ValueError(f"{where}: rule {rule.name!r} is registered elsewhere with another class")
            rule_classes[rule.name] = rule.impl
    clash = sorted(set(by_name) & set(rule_classes))
    if clash:
        raise ValueError(f"pass table: {', '.join(clash)} named both a transformer and a rule")


check_table(PASSES)

#: Transformer name -> implementing class, for every implemented line of :data:`PASSES` (an index of the table).
TRANSFORMERS: dict[str, type[GraphTransformer]] = {s.name: s.impl for s in PASSES if s.impl is not None}

#: Rule name -> implementing class, for every implemented rule of :data:`PASSES`, in registration order.
RULES: dict[str, type[RewriteRule]] = {r.name: r.impl for s in PASSES for r in s.rules if r.impl is not None}


def implementation(spec: PassSpec) -> type[GraphTransformer] | None:
    """The class that runs ``spec`` now: a plugin's own class, or :data:`TRANSFORMERS`' entry for ORT's name."""
    if spec.is_plugin:
        return spec.impl
    return TRANSFORMERS.get(spec.name)


def rule_implementation(rule: RuleSpec) -> type[RewriteRule] | None:
    """The class that runs ``rule`` now (:data:`RULES`' entry), or None: not implemented."""
    return RULES.get(rule.name)


def is_implemented(name: str, *, rule: bool = False) -> bool:
    """Whether qdqopt implements this transformer (or, with ``rule=True``, this rewrite rule)."""
    return name in (RULES if rule else TRANSFORMERS)


def all_names() -> set[str]:
    """Every transformer and rule name ORT 1.32 can register for a CPU session."""
    names = {p.name for p in PASSES}
    for p in PASSES:
        names.update(r.name for r in p.rules)
    return names


# ------------------------------------------------------------------------------------------------ plugins
@dataclass(frozen=True)
class Plugin:
    """A pass of one's own and where it goes in ORT's pipeline.

    Exactly one of ``after`` / ``before`` names a transformer or rule of ORT's (a rule stands for its rule-based
    transformer) or an earlier plugin, and the pass goes right after / before it; ``level`` (``"basic"`` ..
    ``"all"``, 1/2/3/99) alone puts it at the end of that level's stage (``L1`` .. ``L4``), and with ``after`` or
    ``before`` picks the stage of a name ORT registers twice (``MatMulAddFusion`` runs at L1 and L2).

    A plugin runs in its level's fixed-point loop like ORT's own passes (only in the first step with
    ``apply_once``), is toggled by its name as ORT's are (``disabled``), and is never sent to ORT.
    """

    impl: type[GraphTransformer]
    after: str | None = None
    before: str | None = None
    level: Level | int | str | None = None
    apply_once: bool = False
    #: where it was loaded from (``module:Class``, ``entry point NAME``), for the listings and reports
    source: str = ""

    @property
    def name(self) -> str:
        """The pass's name (its class's ``name``)."""
        return self.impl.name

    @classmethod
    def of(cls, impl: type[GraphTransformer], source: str = "") -> Plugin:
        """A plugin from a pass class that declares its place as class attributes (``after``, ``before``,
        ``level``, ``apply_once``)."""
        return cls(
            impl,
            after=getattr(impl, "after", None),
            before=getattr(impl, "before", None),
            level=getattr(impl, "level", None),
            apply_once=bool(getattr(impl, "apply_once", False)),
            source=source or f"{impl.__module__}:{impl.__qualname__}",
        )


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _place(table: list[PassSpec], plugin: Plugin) -> None:
    """Insert ``plugin``'s line into ``table`` at its declared place, or raise :class:`UsageError`."""
    impl, name = plugin.impl, getattr(plugin.impl, "name", "")
    if not (isinstance(impl, type) and issubclass(impl, GraphTransformer)):
        raise UsageError(f"plugin {plugin.source or impl!r}: {impl!r} is not a GraphTransformer subclass")
    if not name or not isinstance(name, str):
        raise UsageError(f"plugin {plugin.source}: {impl.__name__} has no name (set the class attribute `name`)")
    if getattr(impl, "__abstractmethods__", None):
        raise UsageError(f"plugin {name}: {impl.__name__} does not implement apply_impl")
    if name in all_names():
        raise UsageError(f"plugin {name}: the name is ORT's; give a pass of one's own a name ORT does not use")
    if any(s.name == name for s in table):
        raise UsageError(f"plugin {name}: given twice")
    if plugin.after and plugin.before:
        raise UsageError(f"plugin {name}: give after= or before=, not both")
    stage = level_stage(plugin.level) if plugin.level is not None else None
    anchor = plugin.after or plugin.before
    if not anchor:
        if stage is None:
            raise UsageError(f"plugin {name}: say where it goes: after=NAME, before=NAME or level=LEVEL")
        index = max(i for i, s in enumerate(table) if s.stage == stage) + 1
        placement = f"end of {stage}"
    else:
        hits = [
            i
            for i, s in enumerate(table)
            if s.stage in OPTIMIZATION_STAGES
            and (stage is None or s.stage == stage)
            and (s.name == anchor or any(r.name == anchor for r in s.rules))
        ]
        if not hits:
            elsewhere = [s.stage for s in table if s.name == anchor or any(r.name == anchor for r in s.rules)]
            if elsewhere:
                where = f"{stage}" if stage else "L1..L4 (a plugin joins an optimization level)"
                raise UsageError(f"plugin {name}: {anchor!r} runs at {', '.join(elsewhere)}, not at {where}")
            known = {s.name for s in table} | {r.name for s in table for r in s.rules}
            raise UsageError(f"plugin {name}: no pass or rule named {anchor!r}{_suggest(anchor, known)}")
        if len(hits) > 1:
            stages = ", ".join(table[i].stage for i in hits)
            raise UsageError(f"plugin {name}: {anchor!r} is registered at {stages}: say which with level=")
        index = hits[0] + (1 if plugin.after else 0)
        stage = table[hits[0]].stage
        placement = f"{'after' if plugin.after else 'before'} {anchor}"
    label = plugin.source or f"{impl.__module__}:{impl.__qualname__}"
    spec = PassSpec(
        name,
        stage,
        impl,
        apply_once=plugin.apply_once,
        gate_text=f"from {label} ({placement}); not ORT's",
        eps=tuple(getattr(impl, "compatible_eps", ())),
        qdq="-",
        plugin=label,
        placement=placement,
    )
    table.insert(index, spec)


def with_plugins(plugins: Iterable[Plugin] = (), table: Sequence[PassSpec] = PASSES) -> tuple[PassSpec, ...]:
    """The pass table with each plugin slotted in at its declared place, in the order given (a plugin may be placed
    relative to an earlier one). Raises :class:`UsageError` for a plugin that cannot be placed."""
    out = list(table)
    for plugin in plugins:
        _place(out, plugin)
    return tuple(out)


def registered_passes(
    level: Level,
    config: SessionConfig,
    target: Target,
    disabled: set[str],
    plugins: Sequence[Plugin] = (),
) -> list[tuple[PassSpec, tuple[RuleSpec, ...]]]:
    """The passes ORT registers for this session, in order, each with the rules it keeps (plus ``plugins``).

    A disabled name removes a level transformer, a rule or a plugin; a rule-based transformer left with no rule is not
    registered at all. Required passes ignore ``disabled``.
    """
    stages = LEVEL_STAGES[level]
    out: list[tuple[PassSpec, tuple[RuleSpec, ...]]] = []
    for spec in with_plugins(plugins) if plugins else PASSES:
        if spec.stage not in stages or not spec.gate(config, target):
            continue
        if not spec.required and spec.name in disabled:
            continue
        rules: tuple[RuleSpec, ...] = ()
        if spec.rules:
            rules = tuple(r for r in spec.rules if r.gate(config, target) and r.name not in disabled)
            if not rules:
                continue
        out.append((spec, rules))
    return out


def plugin_specs(plugins: Sequence[Plugin]) -> tuple[PassSpec, ...]:
    """The placed lines of ``plugins`` alone (what :func:`with_plugins` adds), in table order."""
    return tuple(s for s in with_plugins(plugins) if s.is_plugin)
