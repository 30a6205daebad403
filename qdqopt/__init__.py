"""qdqopt: see, toggle and test how ONNX Runtime rewrites quantized (QDQ) models.

qdqopt reimplements ORT 1.32's CPU-EP graph transformers as readable Python passes, grouped into ORT's five
optimization levels, and compares its output with what real ORT writes to ``optimized_model_filepath``.
"""

from __future__ import annotations

from qdqopt.api import OptimizeResult, optimize, run
from qdqopt.errors import ModelError, QdqoptError, UsageError
from qdqopt.levels import Level

__all__ = ["Level", "ModelError", "OptimizeResult", "QdqoptError", "UsageError", "build", "optimize", "run"]
__version__ = "0.1.0"


def build() -> str:
    """How this qdqopt was built: ``"compiled with mypyc"`` (the graph core and the helpers, as ``pip install .``
    builds them: see setup.py) or ``"pure Python"`` (an editable install, or ``QDQOPT_COMPILE=0``)."""
    import qdqopt.graph.core

    return "pure Python" if qdqopt.graph.core.__file__.endswith(".py") else "compiled with mypyc"
