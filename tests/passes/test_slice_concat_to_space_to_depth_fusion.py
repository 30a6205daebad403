"""SliceConcatToSpaceToDepthFusion (``qdqopt/passes/slice_concat_to_space_to_depth_fusion.py``) against ORT 1.32, live.

* Every ``focus/`` fixture at BASIC, EXTENDED and ALL, both configs, nothing disabled: tier P and ORT's trace (a
  model ORT cannot create a session for must fail in qdqopt too).
* Mutations (the canonical phase order, chains of one Slice only, the full-extent check lifted, the channel dim
  read from the declared type only) must make the comparison fail.
"""

from __future__ import annotations

import pytest

from qdqopt.passes import TRANSFORMERS
from qdqopt.passes import slice_concat_to_space_to_depth_fusion as s2d
from tests.conftest import fixture_names
from tests.passes._helpers.gelu_family import CONFIGS, LEVELS, assert_exact, compare, differs, fired, holds

NAMES = [n for n in fixture_names() if n.startswith("focus/")]


def test_registered() -> None:
    assert TRANSFORMERS["SliceConcatToSpaceToDepthFusion"] is s2d.SliceConcatToSpaceToDepthFusion


def test_fires_where_expected() -> None:
    names = fired(NAMES, "SliceConcatToSpaceToDepthFusion")
    assert len(names) >= 15
    for refused in ("ends_short", "sym_channel", "fp16", "slice_two_consumers", "phase_twice", "two_sources", "qdq"):
        assert "focus/" + refused not in names
    for fused in ("yolo", "canonical", "chain_h_first", "chain_w_first", "chain_three", "sym_channel_canonical"):
        assert "focus/" + fused in names


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_exact(name: str, level: str, config: str) -> None:
    assert_exact(name, level, config)


def test_mutation_phase_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """SpaceToDepth's blocks are (0,0) (0,1) (1,0) (1,1): with H and W swapped the Gather's indices differ."""
    assert holds(compare("focus/yolo", "basic"))
    monkeypatch.setattr(s2d, "CANONICAL_PHASES", ((0, 0), (1, 0), (0, 1), (1, 1)))
    assert differs("focus/yolo", "basic")


def test_mutation_single_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.32 follows a branch through two Slices."""
    assert holds(compare("focus/chain_h_first", "basic"))
    monkeypatch.setattr(s2d, "_MAX_CHAIN", 1)
    assert differs("focus/chain_h_first", "basic")


def test_mutation_full_extent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ends short of the static dim are refused."""
    assert holds(compare("focus/ends_short", "basic"))
    monkeypatch.setattr(s2d, "_full_extent", lambda *args: True)
    assert differs("focus/ends_short", "basic")


def test_mutation_inferred_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel dim of a Slice's output is the one Resolve infers from the constant parameters."""
    assert holds(compare("focus/chain_three", "basic"))
    monkeypatch.setattr(s2d, "_static_dim", lambda graph, name, axis: 3 if name == "x" else None)
    assert differs("focus/chain_three", "basic")
