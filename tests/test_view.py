"""``qdqopt view``: the one-line error without the optional viewers, and the overlay data Model Explorer gets (which
pass created each node, its node unit, whether ORT has it too), checked on the bundled example against live ORT and
with a deliberately broken pass. None of this needs the extras: the viewer itself is replaced where it would start."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from qdqopt import overlay
from qdqopt.api import run
from qdqopt.cli import example_model, main
from qdqopt.passes import RuleEffect
from qdqopt.passes.rules_level2 import ReluQuantFusion

MODEL = str(example_model())


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a))


@pytest.mark.parametrize(
    ("app", "missing"),
    [("netron", "netron"), ("model-explorer", "ai-edge-model-explorer, model-explorer-onnx")],
)
def test_a_missing_viewer_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], app: str, missing: str
) -> None:
    _without(monkeypatch, "netron", "model_explorer", "model_explorer_onnx")
    assert main(["view", MODEL, "--app", app]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{app} is not installed (missing {missing}): pip install 'qdqopt[view]'" in err[0]


def _overlay(level: str) -> dict[str, overlay.NodeInfo]:
    result = run(MODEL, level)
    return overlay.node_overlay(result, overlay.ort_reference_model(MODEL, level, {}, ()))


def test_overlay_at_extended() -> None:
    data = _overlay("extended")
    assert data and all(info.in_ort for info in data.values())  # byte-identical to ORT at EXTENDED
    conv = data["node_conv2d"]
    assert conv.created_by == "QDQSelectorActionTransformer (L2 step 1)"
    assert conv.node_unit == "Conv unit node_conv2d: fused into QLinearConv"
    duplicated = [name for name in data if name.endswith("/duplicated")]
    assert duplicated and {data[n].created_by for n in duplicated} == {"EnsureUniqueDQForNodeUnit (pre step 1)"}
    reduce_mean = next(n.name for n in run(MODEL, "extended").model.graph.node if n.op_type == "ReduceMean")
    assert data[reduce_mean].created_by == "input model"
    assert data[reduce_mean].node_unit.startswith("ReduceMean unit") and "not fused" in data[reduce_mean].node_unit
    bias = [n for n, info in data.items() if info.created_by.startswith("WeightBiasQuantization")]
    assert bias  # the int32 bias DQs


def test_overlay_at_layout_names_the_nhwc_pass() -> None:
    data = _overlay("layout")
    assert any(info.created_by.startswith("NhwcTransformer (L3 step 1)") for info in data.values())


def test_overlay_sees_a_broken_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReluQuantFusion, "apply", lambda self, graph, node, ctx: RuleEffect.NONE)
    data = _overlay("extended")
    relus = [n for n in run(MODEL, "extended").model.graph.node if n.op_type == "Relu"]
    assert relus and all(data[n.name].in_ort is False for n in relus)


def test_model_explorer_node_data_documents(tmp_path: Path) -> None:
    paths = overlay.write_node_data(_overlay("extended"), tmp_path)
    docs = {p.stem: json.loads(p.read_text()) for p in paths}
    assert set(docs) == {"qdqopt_created_by", "qdqopt_node_unit", "qdqopt_in_ORT"}
    for doc in docs.values():
        assert doc["results"] and all("value" in r for r in doc["results"].values())
    assert docs["qdqopt_in_ORT"]["results"]["node_conv2d"]["value"] == 1


def test_view_command_runs_up_to_the_viewer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[tuple[str, Any, list[Any]]] = []

    def fake_open(app: str, path: Path, data: list[Path], **kwargs: Any) -> None:
        model = onnx.load(str(path))
        docs = [json.loads(p.read_text()) for p in data]
        opened.append((app, model, docs))

    monkeypatch.setattr(overlay, "check_viewer", lambda app: None)
    monkeypatch.setattr(overlay, "open_viewer", fake_open)
    assert (
        main(
            [
                "view",
                MODEL,
                "--app",
                "model-explorer",
                "--level",
                "extended",
                "--stop-after",
                "QDQSelectorActionTransformer",
            ]
        )
        == 0
    )
    app, model, docs = opened[-1]
    assert app == "model-explorer" and len(docs) == 3
    assert any(n.op_type == "QLinearConv" for n in model.graph.node)
    assert main(["view", MODEL]) == 0  # as is, no overlay
    assert opened[-1][0] == "netron" and opened[-1][2] == []
    assert main(["view", MODEL, "--stop-after", "ConstantFolding"]) == 2
    assert "need --level" in capsys.readouterr().err
