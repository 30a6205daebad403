"""Probe ORT 1.32's transpose optimizer: save the BASIC/EXTENDED graph with and without it and print what changed.

Usage: python docs/notes/transpose_optimizer_probe.py model.onnx [basic|extended|layout] [config=value ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT,
}
TRANSPOSE_OPTIMIZERS = ["TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"]


def optimized(model: str, level: str, disabled: list[str], config: dict[str, str]) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = LEVELS[level]
        so.optimized_model_filepath = str(Path(tmp) / "out.onnx")
        for key, value in config.items():
            so.add_session_config_entry(key, value)
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return onnx.load(so.optimized_model_filepath)


def show(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.type != a.GRAPH}
        print(f"  {node.op_type:18} {node.name!r:28} {list(node.input)} -> {list(node.output)} {attrs}")
    print("  initializers:", [(i.name, list(i.dims)) for i in model.graph.initializer])


if __name__ == "__main__":
    path, level = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "basic")
    config = dict(arg.split("=", 1) for arg in sys.argv[3:])
    print("== without the transpose optimizers")
    show(optimized(path, level, TRANSPOSE_OPTIMIZERS, config))
    print("== with them")
    show(optimized(path, level, [], config))
