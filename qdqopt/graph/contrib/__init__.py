"""Type and shape inference for ORT's contrib ops, registered with ONNX's schema registry.

The graph core types values the way ORT's ``Graph::Resolve`` does, with ONNX shape inference; ONNX has no schemas
for ORT's ``com.microsoft`` / ``com.microsoft.nchwc`` ops, so values they produce would stay untyped where ORT,
which registers those ops' inference functions, types them (and the passes that read a value's element type or
rank, the saved value_info and the transpose optimizer's cost model would then differ from ORT's).
:func:`register` gives ONNX those schemas, re-implemented from ORT 1.32's schema definitions: the formal parameters,
type constraints and attributes come from the installed onnxruntime's registry, the inference functions are written
here (one module per ORT source file), and every output's element type follows ORT's binding rule (see
:mod:`qdqopt.graph.contrib._base`). It runs once when :mod:`qdqopt.graph` is imported, and never replaces a schema
ONNX already has (at the same version); this changes ONNX's registry for the whole process.

* :mod:`~qdqopt.graph.contrib.quantization`: contrib QuantizeLinear/DequantizeLinear, QLinearAdd/Mul/LeakyRelu/
  Sigmoid/Softmax/ReduceMean/Concat/Where, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits.
* :mod:`~qdqopt.graph.contrib.nhwc`: QLinearConv, NhwcMaxPool, QLinearAveragePool, QLinearGlobalAveragePool (with
  ``channels_last``), NhwcConv, NhwcFusedConv.
* :mod:`~qdqopt.graph.contrib.fused`: FusedMatMul, FusedConv, FusedGemm, Gelu, FastGelu, BiasGelu, QuickGelu,
  SkipLayerNormalization, SkipSimplifiedLayerNormalization, and ORT's LayerNormalization-1 and
  SimplifiedLayerNormalization-1 of the ``ai.onnx`` domain (ONNX has LayerNormalization from opset 17 only).
* :mod:`~qdqopt.graph.contrib.nchwc`: the ``com.microsoft.nchwc`` Conv, MaxPool, AveragePool, GlobalMaxPool,
  GlobalAveragePool, ReorderInput, ReorderOutput, Upsample.

ONNX's own QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger and DynamicQuantizeLinear (domain ``ai.onnx``)
are ONNX's schemas in ORT too: nothing to add.
"""

from __future__ import annotations

from qdqopt.graph.contrib import fused, nchwc, nhwc, quantization
from qdqopt.graph.contrib._base import OpSpec, register_specs

__all__ = ["SPECS", "register"]

#: every op registered, by module
SPECS: list[OpSpec] = [*quantization.SPECS, *nhwc.SPECS, *fused.SPECS, *nchwc.SPECS]

_registered: list[str] | None = None


def register() -> list[str]:
    """Register the contrib ops' inference with ONNX (idempotent); the ops this process registered."""
    global _registered  # noqa: PLW0603
    if _registered is None:
        _registered = register_specs(SPECS)
    return list(_registered)
