"""Exceptions qdqopt raises for bad input.

Every error names what is at fault (a file, a node, a tensor) in one line, so that the CLI can print it as is and
exit with code 2.
"""

from __future__ import annotations

__all__ = ["ModelError", "QdqoptError", "ReferenceError", "UsageError"]


class QdqoptError(Exception):
    """Base class of qdqopt's own errors: one readable line, no traceback needed."""


class ModelError(QdqoptError):
    """The model cannot be loaded or is not one qdqopt (or ORT) accepts."""


class UsageError(QdqoptError):
    """A level, pass name or config key that qdqopt cannot use."""


class ReferenceError(QdqoptError):
    """Real ONNX Runtime rejected the model or failed to write its optimized model."""
