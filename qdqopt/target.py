"""The target machine as ORT's CPU EP sees it (spec §8.1, §10.1, §13).

* ``int8_allowed``: ``QDQIsInt8Allowed()`` is a compile-time property of the ORT binary, true for ARM builds only.
  It is the default of ``session.qdqisint8allowed``; setting that key to 1 on x86 reproduces the arm64 graph.
* ``nchwc_block_size``: ``MlasNchwcGetBlockSize()``: 8 on every x86-64, 16 with usable AVX-512F; 1 (off) on a stock
  arm64 build. ``NchwcTransformer`` is registered only when it is above 1.
* ``u8s8_overflow``: ``MlasPlatformU8S8Overflow()``, every x86 with AVX2 (VNNI or not: the U8U8 and U8S8 dispatch
  tables differ); gates Avx2WeightS8ToU8Transformer with ``session.x64quantprecision=1``.
* ``fp16_nhwc_kernels`` / ``kleidiai_sme``: which extra entries ``NhwcTransformer``'s conversion table gets (arm64).

:meth:`Target.detect` reads the running Python's machine and CPU flags, as ORT does at build and load time;
:meth:`Target.probe` asks the installed onnxruntime directly (a one-Conv model at LAYOUT) for the block size. This
module imports no other qdqopt module but :mod:`qdqopt.config`: the target sits below the levels, the passes and the
reference runner.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass, replace
from pathlib import Path

from qdqopt.config import SessionConfig

__all__ = ["Target"]

_ARM = {"arm64", "aarch64", "armv7l", "armv8l", "arm"}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


@dataclass(frozen=True)
class Target:
    """What the CPU EP decides from the build and the CPU."""

    machine: str
    int8_allowed: bool
    nchwc_block_size: int
    u8s8_overflow: bool
    #: the CPU EP has fp16 NHWC kernels (``NhwcFusedConv``, NHWC-domain MaxPool/AveragePool): arm64 builds only
    fp16_nhwc_kernels: bool = False
    #: KleidiAI's SME float NHWC convolution (``FloatNhwcWrapperFilter``): arm64 with SME, unless
    #: ``mlas.disable_kleidiai=1``
    kleidiai_sme: bool = False

    @classmethod
    @functools.cache
    def detect(cls) -> Target:
        machine = platform.machine().lower()
        arm = machine in _ARM
        flags = _cpu_flags()
        block = 1 if arm else 16 if "avx512f" in flags else 8
        # MlasPlatformU8S8Overflow() is GemmU8U8Dispatch != GemmU8S8Dispatch: with AVX2 the two always differ,
        # VNNI or not (with VNNI only the U8S8 kernel changes); an SSE-only x86 (Linux build) shares one table
        overflow = (not arm) and "avx2" in flags
        return cls(
            machine=machine,
            int8_allowed=arm,
            nchwc_block_size=block,
            u8s8_overflow=overflow,
            fp16_nhwc_kernels=arm,
            kleidiai_sme=arm and bool({"sme", "sme2"} & flags),
        )

    @classmethod
    @functools.cache
    def probe(cls) -> Target:
        """Like :meth:`detect`, but the NCHWc block size is read from what the installed ORT does."""
        import tempfile

        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import helper, numpy_helper

        base = cls.detect()
        weight = numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
            "probe",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 4, 4])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 4, 4])],
            [weight],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        # ORT itself, not qdqopt.reference: the target sits below the reference runner (which needs the levels)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT
        options.log_severity_level = 3
        with tempfile.TemporaryDirectory(prefix="qdqopt-probe-") as tmp:
            options.optimized_model_filepath = str(Path(tmp) / "probe.onnx")
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            saved = onnx.load(options.optimized_model_filepath)
        # 8 output channels are padded up to the block size in the reordered weight.
        reordered = [int(t.dims[0]) for t in saved.graph.initializer if t.name != "w" and len(t.dims) == 4]
        has_nchwc = any(n.domain == "com.microsoft.nchwc" for n in saved.graph.node)
        return replace(base, nchwc_block_size=max(reordered, default=8) if has_nchwc else 1)

    def with_config(self, config: SessionConfig) -> Target:
        """Apply ``session.qdqisint8allowed`` the way ``GenerateTransformers`` reads it."""
        value = config.get("session.qdqisint8allowed")
        if value is None:
            return self
        return replace(self, int8_allowed=value == "1")
