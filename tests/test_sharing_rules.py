"""ConstantSharing, the Level1 rewrite rules and ReshapeFusion together (each one's own tests:
``tests/passes/test_constant_sharing.py``, ``test_rules_level1.py``, ``test_reshape_fusion.py``): the fixture groups
are not vacuous, and the rule registry follows ORT's.
"""

from __future__ import annotations

from qdqopt.compare import compare_level
from qdqopt.levels import LEVEL1_RULES, LEVEL2_RULES
from qdqopt.passes import RULES, TRANSFORMERS, rules_level1
from qdqopt.passes.constant_sharing import ConstantSharing
from qdqopt.passes.reshape_fusion import ReshapeFusion
from tests.conftest import fixture_model
from tests.passes._helpers.sharing_rules import L1_RULE_NAMES, _alone, _pass_of


def test_fixtures_exercise_the_passes() -> None:
    """Each rule fixture group fires where its description says so: the cases are not vacuous."""
    fired = {}
    for name in ("sharing/cs_many_scales_hash_order", "rules/conv_bn_bias", "rules/reshape_fusion_div_path"):
        comp = compare_level(fixture_model(name), "basic", disabled=_alone(_pass_of(name)), isolate=True)
        fired[name] = any(line == f"GraphTransformer {_pass_of(name)} modified: 1" for line in comp.ort_lines)
    assert all(fired.values()), fired


# ---------------------------------------------------------------------------------------------------- registries
def test_rule_registry_follows_ort() -> None:
    assert [r.name for r in LEVEL1_RULES] == [n for n in RULES if n in L1_RULE_NAMES]
    assert all(name in RULES for name in L1_RULE_NAMES)
    assert "GemmTransposeFusion" in [r.name for r in LEVEL2_RULES]
    assert RULES["Pad_Fusion"] is rules_level1.PadFusion
    assert RULES["MatMul_BatchNormalization_Fusion"] is rules_level1.MatmulBNFusion
    assert TRANSFORMERS["ConstantSharing"] is ConstantSharing
    assert TRANSFORMERS["ReshapeFusion"] is ReshapeFusion
