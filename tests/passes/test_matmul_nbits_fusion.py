"""MatMulNBitsFusion (``qdqopt/passes/matmul_nbits_fusion.py``) against ORT 1.32, live: the ``nbits/`` fixtures at
EXTENDED (LAYOUT work off on both sides), with and without ``session.qdqisint8allowed=1``, then alone where ORT's log
shows it firing, must give ORT's bytes and trace; folding a [1, N] bias must not. The corpus models:
``tests/test_matmul_scale_nbits.py``.
"""

from __future__ import annotations

import pytest

from fixtures.handbuilt import nbits
from qdqopt.passes import matmul_nbits_fusion
from tests.conftest import patched
from tests.passes._helpers.matmul_scale_nbits import (
    CONFIGS,
    FIXTURES,
    LAYOUT_WORK,
    _compare,
    check_fixture_extended_and_alone,
)


def test_mutation_nbits_bias_shape_check_dropped_fails() -> None:
    """Folding a [1, N] bias must make the comparison fail."""
    original = matmul_nbits_fusion._select_bias

    def lax(graph, node):  # type: ignore[no-untyped-def]
        found = original(graph, node)
        if found is not None:
            return found
        edges = graph.output_edges(node)
        if len(edges) != 1:
            return None
        add = graph.node(edges[0].dst)
        return (add, 1 if edges[0].dst_slot == 0 else 0) if add is not None and add.op_type == "Add" else None

    with patched(matmul_nbits_fusion, "_select_bias", lax):
        result = _compare(FIXTURES["nbits/bias_1n"](), {}, LAYOUT_WORK)
    assert not result.report.holds("P") or result.ours_lines != result.ort_lines


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("name", [case.name for case in nbits.GROUP.cases])
def test_fixture_extended_and_alone(name: str, config: str) -> None:
    check_fixture_extended_and_alone(name, config)
