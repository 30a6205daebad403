"""ORT 1.32's optimization levels and its CPU-EP transformer lists, in ORT's order (spec §1).

One table holds every transformer and rewrite rule ORT registers for a CPU session, under ORT's exact name, with its
stage, whether it is apply-once, what gates its registration, and (looked up in :mod:`qdqopt.passes`) whether qdqopt
implements it. The order is the order of ORT's INFO log (``GraphTransformer <name> modified: <0|1>``), checked
against ORT 1.32.0's own log.

Stages, in the order ``InferenceSession::TransformGraph`` runs them:

* ``pre``: ``EnsureUniqueDQForNodeUnit``, once, at every level (unless ``session.disable_quant_qdq=1``);
* ``L0``: Default level (only with free-dimension overrides; qdqopt takes none);
* ``L1``: Level1, up to 10 steps, before partitioning;
* ``L2``/``L3``: inside the optimization loop, then ``loop`` (InsertCastTransformer, which runs
  RemoveDuplicateCastTransformer first), then ``L4``;
* ``post``: ``MemcpyTransformer``.

``pre``, ``loop`` and ``post`` passes are required: ``disabled_optimizers`` does not reach them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.target import Target

__all__ = ["LEVEL_STAGES", "PASSES", "Level", "PassSpec", "RuleSpec", "parse_level", "registered_passes"]


class Level(enum.IntEnum):
    """``GraphOptimizationLevel``; the value is ORT's API value."""

    DISABLE_ALL = 0
    BASIC = 1
    EXTENDED = 2
    LAYOUT = 3
    ALL = 99

    @property
    def ort_name(self) -> str:
        return {
            0: "ORT_DISABLE_ALL",
            1: "ORT_ENABLE_BASIC",
            2: "ORT_ENABLE_EXTENDED",
            3: "ORT_ENABLE_LAYOUT",
            99: "ORT_ENABLE_ALL",
        }[int(self)]

    @property
    def short(self) -> str:
        return self.name.lower()

    @property
    def transformer_level(self) -> int:
        """The highest ``TransformerLevel`` registered: 0 (Default) .. 4."""
        return {0: 0, 1: 1, 2: 2, 3: 3, 99: 4}[int(self)]


_LEVEL_ALIASES = {
    "0": Level.DISABLE_ALL,
    "disable_all": Level.DISABLE_ALL,
    "disable": Level.DISABLE_ALL,
    "none": Level.DISABLE_ALL,
    "1": Level.BASIC,
    "basic": Level.BASIC,
    "enable_basic": Level.BASIC,
    "2": Level.EXTENDED,
    "extended": Level.EXTENDED,
    "enable_extended": Level.EXTENDED,
    "3": Level.LAYOUT,
    "layout": Level.LAYOUT,
    "enable_layout": Level.LAYOUT,
    "99": Level.ALL,
    "all": Level.ALL,
    "enable_all": Level.ALL,
}


def parse_level(level: Level | int | str) -> Level:
    """Accept 0/1/2/3/99, ``"basic"``..., or ORT's enum names (``ORT_ENABLE_BASIC``, ``GraphOptimizationLevel.X``)."""
    if isinstance(level, Level):
        return level
    if isinstance(level, int):
        try:
            return Level(level)
        except ValueError:
            raise UsageError(f"unknown optimization level {level!r} (use 0, 1, 2, 3 or 99)") from None
    if not isinstance(level, str) and hasattr(level, "name"):  # an onnxruntime.GraphOptimizationLevel member
        level = str(level.name)
    key = str(level).strip().lower().removeprefix("graphoptimizationlevel.").removeprefix("ort_")
    if key in _LEVEL_ALIASES:
        return _LEVEL_ALIASES[key]
    raise UsageError(
        f"unknown optimization level {level!r} (use disable_all, basic, extended, layout, all, or 0/1/2/3/99)"
    )


Gate = Callable[[SessionConfig, Target], bool]


def _always(config: SessionConfig, target: Target) -> bool:
    return True


def _qdq(config: SessionConfig, target: Target) -> bool:
    return not config.flag("session.disable_quant_qdq")


@dataclass(frozen=True)
class RuleSpec:
    """A rewrite rule inside a rule-based transformer, under its rule name (not its class name)."""

    name: str
    class_name: str
    ops: tuple[str, ...] = ()
    gate: Gate = _always
    gate_text: str = ""


@dataclass(frozen=True)
class PassSpec:
    """One transformer as ORT registers it for the CPU EP."""

    name: str
    stage: str
    class_name: str = ""
    apply_once: bool = False
    gate: Gate = _always
    gate_text: str = ""
    eps: tuple[str, ...] = ()
    rules: tuple[RuleSpec, ...] = field(default_factory=tuple)
    required: bool = False
    qdq: str = "-"

    @property
    def level_label(self) -> str:
        return {"pre": "required", "loop": "required", "post": "required"}.get(self.stage, self.stage)


def _no_dq_remover(c: SessionConfig, t: Target) -> bool:
    return not c.flag("session.disable_double_qdq_remover")


def _dq_matmulnbits(c: SessionConfig, t: Target) -> bool:
    return _qdq(c, t) and c.flag("session.enable_dq_matmulnbits_fusion")


def _s8_to_u8(c: SessionConfig, t: Target) -> bool:
    return _qdq(c, t) and not t.with_config(c).int8_allowed


def _avx2_s8_u8(c: SessionConfig, t: Target) -> bool:
    return _qdq(c, t) and c.flag("session.x64quantprecision") and t.u8s8_overflow


def _nchwc(c: SessionConfig, t: Target) -> bool:
    return t.nchwc_block_size > 1


def _cast_chain(c: SessionConfig, t: Target) -> bool:
    return c.flag("optimization.enable_cast_chain_elimination")


_QDQ_TEXT = "not session.disable_quant_qdq"
_CPU = ("CPUExecutionProvider",)

LEVEL1_RULES: tuple[RuleSpec, ...] = (
    RuleSpec("EliminateIdentity", "EliminateIdentity", ("Identity",)),
    RuleSpec("EliminateSlice", "EliminateSlice", ("Slice",)),
    RuleSpec("UnsqueezeElimination", "UnsqueezeElimination", ("Unsqueeze",)),
    RuleSpec("EliminateDropout", "EliminateDropout", ("Dropout",)),
    RuleSpec("ExpandElimination", "ExpandElimination", ("Expand",)),
    RuleSpec("CastElimination", "CastElimination", ("Cast",)),
    RuleSpec(
        "CastChainElimination",
        "CastChainElimination",
        ("Cast",),
        _cast_chain,
        "optimization.enable_cast_chain_elimination=1",
    ),
    RuleSpec("PreShapeNodeElimination", "PreShapeNodeElimination", ("Cast",)),
    RuleSpec("NoopElimination", "NoopElimination", ("Add", "Sub", "Mul", "Div")),
    RuleSpec("DivMulFusion", "DivMulFusion", ("Div",)),
    RuleSpec("FuseReluClip", "FuseReluClip", ("Relu",)),
    RuleSpec("GemmSumFusion", "GemmSumFusion", ("Gemm",)),
    RuleSpec("GemmTransposeFusion", "GemmTransposeFusion", ("Gemm",)),
    RuleSpec("NotWhereFusion", "NotWhereFusion", ("Where",)),
    RuleSpec("ConvAddFusion", "ConvAddFusion", ("Conv",)),
    RuleSpec("ConvMulFusion", "ConvMulFusion", ("Conv",)),
    RuleSpec("ConvBNFusion", "ConvBNFusion", ("Conv",)),
    RuleSpec("Pad_Fusion", "PadFusion", ("Pad",)),
    RuleSpec("MatMul_BatchNormalization_Fusion", "MatmulBNFusion", ("MatMul",)),
    RuleSpec("LabelEncoderFusion", "LabelEncoderFusion", ("LabelEncoder",)),
)

LEVEL2_RULES: tuple[RuleSpec, ...] = (
    RuleSpec("ClipQuantRewrite", "ClipQuantFusion", ("Clip",)),
    RuleSpec("ReluQuantRewrite", "ReluQuantFusion", ("Relu",)),
    RuleSpec("GemmTransposeFusion", "GemmTransposeFusion", ("Gemm",)),
)

PASSES: tuple[PassSpec, ...] = (
    PassSpec("EnsureUniqueDQForNodeUnit", "pre", gate=_qdq, gate_text=_QDQ_TEXT, required=True, qdq="Q"),
    PassSpec(
        "FreeDimensionOverrideTransformer",
        "L0",
        gate=lambda c, t: False,
        gate_text="free dimension overrides given (qdqopt takes none)",
    ),
    # ---------------------------------------------------------------- Level1
    PassSpec("Level1_RuleBasedTransformer", "L1", "RuleBasedGraphTransformer", rules=LEVEL1_RULES, qdq="q"),
    PassSpec(
        "DoubleQDQPairsRemover", "L1", gate=_no_dq_remover, gate_text="not session.disable_double_qdq_remover", qdq="Q"
    ),
    PassSpec("ConstantSharing", "L1", apply_once=True, qdq="q"),
    PassSpec("CommonSubexpressionElimination", "L1", qdq="q"),
    PassSpec("ConstantFolding", "L1", qdq="Q"),
    PassSpec("MatMulAddFusion", "L1", qdq="q"),
    PassSpec("ReshapeFusion", "L1"),
    PassSpec("FreeDimensionOverrideTransformer", "L1"),
    PassSpec("SliceConcatToSpaceToDepthFusion", "L1"),
    PassSpec("GeluFusionL1", "L1", "GeluFusion"),
    PassSpec("LayerNormFusionL1", "L1", "LayerNormFusion"),
    PassSpec("QDQPropagationTransformer", "L1", gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("WeightBiasQuantization", "L1", gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("EnsureUniqueDQForNodeUnit", "L1", gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec("WhereDummyDq", "L1", gate=_qdq, gate_text=_QDQ_TEXT, qdq="Q"),
    PassSpec(
        "DQMatMulNBitsFusion",
        "L1",
        gate=_dq_matmulnbits,
        gate_text="session.enable_dq_matmulnbits_fusion=1 and " + _QDQ_TEXT,
        qdq="Q",
    ),
    PassSpec("TransposeOptimizer", "L1", apply_once=True, qdq="q"),
    # ---------------------------------------------------------------- Level2
    PassSpec("Level2_RuleBasedTransformer", "L2", "RuleBasedGraphTransformer", rules=LEVEL2_RULES, eps=_CPU, qdq="Q"),
    PassSpec("TransposeOptimizer_CPUExecutionProvider", "L2", "TransposeOptimizer", apply_once=True, eps=_CPU, qdq="q"),
    PassSpec(
        "QDQS8ToU8Transformer", "L2", gate=_s8_to_u8, gate_text="int8 not allowed and " + _QDQ_TEXT, eps=_CPU, qdq="Q"
    ),
    PassSpec(
        "QDQSelectorActionTransformer",
        "L2",
        gate=_qdq,
        gate_text=_QDQ_TEXT,
        eps=("CPUExecutionProvider", "DmlExecutionProvider", "ACLExecutionProvider", "CUDAExecutionProvider", ""),
        qdq="Q",
    ),
    PassSpec("GemmActivationFusion", "L2", eps=_CPU),
    PassSpec("MatMulIntegerToFloatFusion", "L2", eps=_CPU),
    PassSpec("DynamicQuantizeMatMulFusion", "L2", eps=_CPU),
    PassSpec("ConvActivationFusion", "L2", eps=_CPU, qdq="q"),
    PassSpec("GeluFusionL2", "L2", "GeluFusion", eps=_CPU),
    PassSpec("LayerNormFusionL2", "L2", "LayerNormFusion", eps=_CPU),
    PassSpec("SimplifiedLayerNormFusion", "L2", eps=_CPU),
    PassSpec("AttentionFusion", "L2", eps=_CPU),
    PassSpec("EmbedLayerNormFusion", "L2", eps=_CPU),
    PassSpec("GatherSliceToSplitFusion", "L2", eps=_CPU),
    PassSpec("GatherToSliceFusion", "L2", eps=_CPU),
    PassSpec("MatmulTransposeFusion", "L2", eps=_CPU),
    PassSpec("BiasGeluFusion", "L2", eps=_CPU),
    PassSpec("GroupQueryAttentionFusion", "L2", eps=("CUDAExecutionProvider",)),
    PassSpec("MatMulAddFusion", "L2", qdq="q"),  # registered for any EP
    PassSpec("SkipLayerNormFusion", "L2", eps=_CPU),
    PassSpec("BiasSkipLayerNormFusion", "L2", eps=_CPU),
    PassSpec("FastGeluFusion", "L2", eps=_CPU),
    PassSpec("QuickGeluFusion", "L2", eps=_CPU),
    PassSpec("SwiGluFusion", "L2", eps=_CPU),
    PassSpec("BiasSoftmaxFusion", "L2", eps=_CPU),
    PassSpec("BiasDropoutFusion", "L2", eps=("CUDAExecutionProvider",)),
    PassSpec("MatMulScaleFusion", "L2", eps=_CPU),
    PassSpec("MatMulActivationFusion", "L2", eps=("DmlExecutionProvider",)),
    PassSpec(
        "Avx2WeightS8ToU8Transformer",
        "L2",
        gate=_avx2_s8_u8,
        gate_text="session.x64quantprecision=1 on an x86 CPU whose U8S8 kernels may overflow",
        eps=_CPU,
        qdq="Q",
    ),
    PassSpec("MatMulNBitsFusion", "L2", eps=_CPU, qdq="q"),
    PassSpec("GroupQueryAttentionPreNormFusion", "L2", eps=("CUDAExecutionProvider", "WebGpuExecutionProvider")),
    PassSpec("QDQFinalCleanupTransformer", "L2", qdq="Q"),
    # ---------------------------------------------------------------- Level3
    PassSpec("NchwcTransformer", "L3", gate=_nchwc, gate_text="NCHWc block size > 1 (every x86-64)", qdq="q"),
    PassSpec("NhwcTransformer", "L3", gate_text="a CPU NHWC kernel exists (always for QLinearConv)", qdq="Q"),
    PassSpec("ConvAddActivationFusion", "L3", eps=_CPU),
    # ---------------------------------------------------------------- in the loop, after Level3
    PassSpec("RemoveDuplicateCastTransformer", "loop", required=True),
    PassSpec("CastFloat16Transformer", "loop", "InsertCastTransformer", required=True),
    # ---------------------------------------------------------------- Level4
    PassSpec("FuseFp16InitializerToFp32NodeTransformer", "L4", "FuseInitializersTransformer"),
    # ---------------------------------------------------------------- after the loop
    PassSpec("MemcpyTransformer", "post", required=True),
)

#: Stages each level runs, in order.
LEVEL_STAGES: dict[Level, tuple[str, ...]] = {
    Level.DISABLE_ALL: ("pre", "L0", "loop", "post"),
    Level.BASIC: ("pre", "L1", "loop", "post"),
    Level.EXTENDED: ("pre", "L1", "L2", "loop", "post"),
    Level.LAYOUT: ("pre", "L1", "L2", "L3", "loop", "post"),
    Level.ALL: ("pre", "L1", "L2", "L3", "loop", "L4", "post"),
}


def all_names() -> set[str]:
    """Every transformer and rule name ORT 1.32 can register for a CPU session."""
    names = {p.name for p in PASSES}
    for p in PASSES:
        names.update(r.name for r in p.rules)
    return names


def registered_passes(
    level: Level, config: SessionConfig, target: Target, disabled: set[str]
) -> list[tuple[PassSpec, tuple[RuleSpec, ...]]]:
    """The passes ORT registers for this session, in order, each with the rules it keeps.

    A disabled name removes a level transformer or a rule; a rule-based transformer left with no rule is not
    registered at all. Required passes ignore ``disabled``.
    """
    stages = LEVEL_STAGES[level]
    out: list[tuple[PassSpec, tuple[RuleSpec, ...]]] = []
    for spec in PASSES:
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
