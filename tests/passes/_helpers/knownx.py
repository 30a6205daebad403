"""Shared by the tests of the known EXTENDED difference classes of issue #12 (the ``knownx/`` fixtures), each in the
test module of the pass at fault: ``test_qdq_selector_action.py`` (float8 units, A16W8 contrib MatMul + Add),
``test_qdq_final_cleanup.py`` (kept Relus) and ``test_insert_cast.py`` (fp16 with int8 activations); and of the
transformer fixtures' classes of issue #11 (``knownt/``): ``tests/test_graph_core.py`` (NodeArg types, shape
values, initializers) and ``test_reshape_fusion.py``.

Every fixture runs a full session at BASIC, EXTENDED and ALL, as ORT runs it (nothing disabled on either side), with
the default config and ``session.qdqisint8allowed=1``; nothing of ORT's output is stored.
"""

from __future__ import annotations

import itertools

from tests.conftest import fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, ort_modified

__all__ = ["CONFIGS", "LEVELS", "assert_exact", "cases", "compare", "differs", "fixtures", "ort_modified"]


def fixtures(*prefixes: str, group: str = "knownx") -> list[str]:
    """The fixtures of ``group`` (``knownx/``, or ``knownt/``: issue #11's transformer classes) whose short name
    starts with one of ``prefixes``."""
    return [n for n in fixture_names() if n.startswith(f"{group}/") and n.split("/", 1)[1].startswith(prefixes)]


def cases(*prefixes: str, group: str = "knownx") -> list[tuple[str, str, str]]:
    """(fixture, level, config) for every fixture of ``prefixes``, every level and both configs."""
    return list(itertools.product(fixtures(*prefixes, group=group), LEVELS, CONFIGS))
