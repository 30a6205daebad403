"""Why each QDQ node unit was, or was not, fused: ``QDQSelectorActionTransformer`` explained.

The model is run through ORT's session stages up to the first application of QDQSelectorActionTransformer (so
EnsureUniqueDQ, Level1, partitioning, ReluQuantRewrite/ClipQuantRewrite and QDQS8ToU8 have already rewritten it,
exactly as the fusion pass sees it), then every candidate target node is put through the selectors without
changing the graph. Each report names the target, the rule tried, the DQs and Qs around it, and either what it
becomes or the reasons it stays (ORT's own words where ORT has them). Units that only appear after a first round
of fusion (the fixed-point loop's later steps) are not listed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import onnx

from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.graph import load_model
from qdqopt.levels import Level, parse_level
from qdqopt.manager import run_pipeline
from qdqopt.passes import TRANSFORMERS
from qdqopt.target import Target

__all__ = ["FUSION_PASS", "explain"]

FUSION_PASS = "QDQSelectorActionTransformer"


def explain(
    model: str | os.PathLike[str] | onnx.ModelProto,
    level: Level | int | str = "extended",
    *,
    config: Mapping[str, object] | Iterable[str] | None = None,
    disabled: Iterable[str] = (),
) -> list[object]:
    """The unit reports (``qdqopt.passes.qdq_selector_action.UnitReport``) for the model at this level."""
    if FUSION_PASS not in TRANSFORMERS:
        raise UsageError(f"explain needs {FUSION_PASS}, which qdqopt does not implement yet")
    from qdqopt.passes.qdq_selector_action import explain_units

    lvl = parse_level(level)
    cfg = SessionConfig.from_mapping(config)
    loaded = load_model(model)
    result = run_pipeline(
        loaded, lvl, config=cfg, disabled=set(disabled), target=Target.detect(), stop_before=FUSION_PASS
    )
    if not result.stopped or result.context is None:
        raise UsageError(
            f"{FUSION_PASS} does not run in this session (level below EXTENDED, disabled, "
            "or session.disable_quant_qdq=1)"
        )
    return list(explain_units(loaded.graph, result.context))
