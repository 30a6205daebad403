"""QDQS8ToU8Transformer (``qdqopt/passes/qdq_s8_to_u8.py``) against ORT 1.32, live: the ``level2_small/s8_*``
fixtures in a full EXTENDED session (default, int8 allowed, ``session.x64quantprecision=1``) and alone, tier P with
ORT's trace; a wrong zero-point conversion must make the comparison fail. The corpus: ``tests/test_level2_small.py``.
"""

from __future__ import annotations

import onnx
import pytest

from qdqopt.passes import qdq_s8_to_u8
from tests.passes._helpers.level2_small import _fixtures_of, _holds, check_fixture_full_extended


def test_mutation_s8_zp_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _holds("level2_small/s8_conv_unit")
    original = qdq_s8_to_u8._raw_tensor

    def shifted(name: str, dims: list[int], data: bytes) -> onnx.TensorProto:
        if name.startswith("qdq_s8_to_u8_zp_conversion"):
            data = bytes([(data[0] + 1) & 0xFF])
        return original(name, dims, data)

    monkeypatch.setattr(qdq_s8_to_u8, "_raw_tensor", shifted)
    assert not _holds("level2_small/s8_conv_unit")


@pytest.mark.parametrize("name", _fixtures_of("QDQS8ToU8Transformer"))
def test_fixture_full_extended(name: str) -> None:
    check_fixture_full_extended(name)
