"""Session config keys that change ORT's graph rewriting, with ORT's strings and defaults (spec §1.5).

ORT silently ignores keys it does not know; qdqopt accepts them too (they are passed to the reference session as
they are) but warns, since a misspelt key is the commonest reason for a surprising result.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from qdqopt.errors import UsageError

__all__ = ["KNOWN_KEYS", "SessionConfig"]

#: key -> (default as ORT reads it, what it does)
KNOWN_KEYS: dict[str, tuple[str | None, str]] = {
    "session.disable_quant_qdq": ("0", "1 disables the QDQ passes (EnsureUniqueDQ, propagation, WBQ, S8->U8, fusion)"),
    "session.disable_qdq_constant_folding": ("0", "with disable_quant_qdq=1, keep DQ protected from folding"),
    "session.disable_double_qdq_remover": ("0", "1 skips DoubleQDQPairsRemover"),
    "session.enable_quant_qdq_cleanup": ("0", "1 also removes Q->DQ pairs in QDQFinalCleanupTransformer"),
    "session.qdqisint8allowed": (None, "int8 QDQ allowed; default: 1 on ARM builds, 0 elsewhere"),
    "session.x64quantprecision": ("0", "x86: S8->U8 weight conversion when U8S8 may overflow"),
    "session.qdq_matmulnbits_accuracy_level": ("4", "accuracy_level of generated MatMulNBits"),
    "session.qdq_matmulnbits_block_size": ("0", "block size for MatMulNBits expansion (0: 32, -1: heuristic)"),
    "session.enable_dq_matmulnbits_fusion": ("0", "1 registers DQMatMulNBitsFusion at Level1"),
    "session.graph_optimizations_loop_level": ("1", "which levels' changes rerun the Level2-4 loop"),
    "session.disable_aot_function_inlining": ("0", "1 skips ahead-of-time inlining of model-local functions"),
    "optimization.disable_specified_optimizers": ("", "';'-separated transformer or rule names to disable"),
    "optimization.enable_cast_chain_elimination": ("0", "1 registers the CastChainElimination rule"),
    "optimization.constant_folding_max_output_size_in_bytes": (str(1 << 30), "ConstantFolding output limit"),
    "optimization.minimal_build_optimizations": ("", "minimal-build transformer set (not reproduced)"),
    "mlas.disable_kleidiai": ("0", "arm64: disable KleidiAI kernels"),
}


@dataclass
class SessionConfig:
    """Session config entries as ORT sees them: strings, with ORT's defaults for missing keys."""

    entries: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, config: Mapping[str, object] | Iterable[str] | None, *, warn: bool = True) -> SessionConfig:
        """Accept a mapping or ``KEY=VALUE`` strings; warn about keys ORT does not know."""
        entries: dict[str, str] = {}
        if config is None:
            pass
        elif isinstance(config, Mapping):
            entries = {str(k): str(v) for k, v in config.items()}
        else:
            for item in config:
                if "=" not in item:
                    raise UsageError(f"config entry {item!r} is not KEY=VALUE")
                key, value = item.split("=", 1)
                entries[key.strip()] = value.strip()
        if warn:
            for key in entries:
                if key not in KNOWN_KEYS:
                    warnings.warn(
                        f"session config key {key!r} is not one qdqopt knows; ORT ignores unknown keys silently",
                        stacklevel=3,
                    )
        return cls(entries)

    def get(self, key: str, default: str | None = None) -> str | None:
        if key in self.entries:
            return self.entries[key]
        known = KNOWN_KEYS.get(key)
        return known[0] if known is not None and known[0] is not None else default

    def flag(self, key: str) -> bool:
        """ORT's reading of a 0/1 key: exactly "1" is on."""
        return self.get(key, "0") == "1"

    def disabled_by_config(self) -> list[str]:
        """``optimization.disable_specified_optimizers`` split on ';' as ORT 1.32 does (spec §0.1)."""
        raw = self.entries.get("optimization.disable_specified_optimizers", "")
        return [part for part in raw.split(";") if part]

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)
