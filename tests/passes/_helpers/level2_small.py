"""Shared by the tests of ReluQuantRewrite and ClipQuantRewrite (``tests/passes/test_rules_level2.py``),
QDQS8ToU8Transformer (``test_qdq_s8_to_u8.py``) and QDQFinalCleanupTransformer (``test_qdq_final_cleanup.py``) on
the ``level2_small/`` fixtures, and by ``tests/test_level2_small.py`` (the corpus, where they run together).

Each fixture runs a full EXTENDED session (passes qdqopt lacks, e.g. QDQSelectorActionTransformer, disabled on both
sides by :func:`compare_level`), with the default config and ``session.qdqisint8allowed=1`` (S8ToU8 is then not
registered), plus ``session.x64quantprecision=1`` for the S8ToU8 cases and ``session.enable_quant_qdq_cleanup=1``
for the cleanup cases; and its own pass alone (every other Level2 transformer and rule disabled on both sides).
ORT's trace and the saved model byte for byte (tier P).
"""

from __future__ import annotations

from qdqopt.compare import LevelComparison, compare_level
from qdqopt.levels import LEVEL2_RULES, PASSES
from tests.conftest import fixture_model, fixture_names

L2_NAMES = [p.name for p in PASSES if p.stage == "L2" and not p.rules] + [r.name for r in LEVEL2_RULES]
INT8_ALLOWED = {"session.qdqisint8allowed": "1"}

#: Fixture-name prefix -> (the pass it exercises, the extra config that matters for it).
OWN_PASS: dict[str, tuple[str, dict[str, str]]] = {
    "relu_": ("ReluQuantRewrite", {}),
    "clip_": ("ClipQuantRewrite", {}),
    "s8_": ("QDQS8ToU8Transformer", {"session.x64quantprecision": "1"}),
    "cleanup_": ("QDQFinalCleanupTransformer", {"session.enable_quant_qdq_cleanup": "1"}),
}

FIXTURES = [n for n in fixture_names() if n.startswith("level2_small/")]


def _own(name: str) -> tuple[str, dict[str, str]]:
    short = name.split("/", 1)[1]
    for prefix, found in OWN_PASS.items():
        if short.startswith(prefix):
            return found
    raise AssertionError(f"no pass for fixture {name}")


def _fixtures_of(*passes: str) -> list[str]:
    """The ``level2_small/`` fixtures made for one of ``passes``."""
    return [name for name in FIXTURES if _own(name)[0] in passes]


def _assert_p(result: LevelComparison, what: str) -> None:
    assert result.ours_lines == result.ort_lines, f"{what}: trace differs"
    assert result.report.holds("P"), f"{what}:\n" + "\n".join(result.report.lines())


def check_fixture_full_extended(name: str) -> None:
    """``test_fixture_full_extended`` (one per pass module, parametrized by its fixtures): the whole EXTENDED level
    under each config that matters, then the fixture's own pass alone."""
    model = fixture_model(name)
    own, extra = _own(name)
    for tag, cfg in (("default", {}), ("int8", INT8_ALLOWED), ("extra", extra)):
        if tag == "extra" and not extra:
            continue
        _assert_p(compare_level(model, "extended", config=cfg, isolate=True), f"{name} [{tag}]")
    alone = [n for n in L2_NAMES if n != own]
    _assert_p(compare_level(model, "extended", config=extra, disabled=alone, isolate=True), f"{name} [{own} alone]")


def _holds(name: str, cfg: dict[str, str] | None = None) -> bool:
    return compare_level(fixture_model(name), "extended", config=cfg or {}, isolate=True).report.holds("P")
