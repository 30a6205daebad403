"""NhwcTransformer (``qdqopt/passes/nhwc_transformer.py``) against ORT 1.32, live, with ORT as it runs.

* Every ``nhwc/`` fixture at LAYOUT and ALL, default config and ``session.qdqisint8allowed=1``: nothing disabled on
  either side, ORT's saved model byte for byte (tier P) and ORT's log line for line.
* Where ORT's log shows NhwcTransformer modifying the model, qdqopt's trace does too, and the converted ops are there.
* Mutations (the copy named after its op type, as the API's naming suggests; MaxPool refused; the output perm
  inverted) must each make a comparison fail.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest

from fixtures.handbuilt import nhwc as nhwc_fixtures
from qdqopt.compare import compare_level
from qdqopt.passes import nhwc_transformer
from qdqopt.passes.nhwc_transformer import NhwcTransformer
from qdqopt.passes.transpose_optimization import layout, ort, perms
from tests.conftest import fixture_model, patched

CONFIGS = {"default": {}, "int8": {"session.qdqisint8allowed": "1"}}
NAMES = [c.name for c in nhwc_fixtures.GROUP.cases]


def _ort_fired(comp: object, name: str) -> bool:
    lines: list[str] = comp.ort_lines  # type: ignore[attr-defined]
    return any(f"GraphTransformer {name} modified: 1" in line for line in lines)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("level", ["layout", "all"])
@pytest.mark.parametrize("name", NAMES)
def test_fixture_as_ort_runs(name: str, level: str, config: str) -> None:
    comp = compare_level(fixture_model(name), level, config=CONFIGS[config])
    assert not comp.isolated and not comp.ort_disabled
    assert NhwcTransformer.name not in comp.unsupported, comp.unsupported
    assert comp.ours_lines == comp.ort_lines, f"trace differs\nours {comp.ours_lines}\nORT  {comp.ort_lines}"
    assert comp.report.holds("P"), "\n".join(comp.report.lines())


def _ours(comp: object) -> onnx.ModelProto:
    model = comp.ours  # type: ignore[attr-defined]
    assert isinstance(model, onnx.ModelProto)
    return model


def _ops(model: onnx.ModelProto) -> list[str]:
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def test_fires_where_ort_fires() -> None:
    """The group exercises the pass: most cases convert, and the converted ops are the channels-last ones."""
    fired = 0
    for name in NAMES:
        comp = compare_level(fixture_model(name), "layout")
        if _ort_fired(comp, NhwcTransformer.name):
            fired += 1
            ops = _ops(_ours(comp))
            assert "com.microsoft.QLinearConv" in ops, name
            assert all(
                n.attribute and any(a.name == "channels_last" and a.i == 1 for a in n.attribute)
                for n in _ours(comp).graph.node
                if n.op_type == "QLinearConv"
            ), name
    assert fired >= len(NAMES) - 3


def test_maxpool_becomes_nhwc_maxpool() -> None:
    comp = compare_level(fixture_model("nhwc/maxpool_storage_order"), "layout")
    pools = [n for n in _ours(comp).graph.node if n.op_type == "NhwcMaxPool"]
    assert len(pools) == 1 and pools[0].domain == "com.microsoft"
    assert not any(a.name == "storage_order" for a in pools[0].attribute)


def test_skips_unknown_rank_and_channels_last() -> None:
    for name in ("nhwc/unknown_rank", "nhwc/qlinearconv_ms_nhwc"):
        comp = compare_level(fixture_model(name), "layout")
        assert not _ort_fired(comp, NhwcTransformer.name)
        assert not any(n.op_type == "Transpose" for n in _ours(comp).graph.node)


# ------------------------------------------------------------------------------------------------------ mutations
def _fails(name: str) -> bool:
    comp = compare_level(fixture_model(name), "layout")
    return not comp.report.holds("X") or comp.ours_lines != comp.ort_lines


def test_mutation_copy_named_after_op_type() -> None:
    """ORT 1.32 names the swapped node ``GenerateNodeName(<old name>)``; naming it after the op type must show."""
    with patched(layout, "copy_node_name", lambda source, op_type: op_type):
        assert _fails("nhwc/conv_u8")


def test_mutation_maxpool_refused() -> None:
    with patched(ort, "channel_last_to_first_perm", lambda rank: [0, *range(1, rank)]):
        assert _fails("nhwc/conv_maxpool_chain")


def test_mutation_output_perm_inverted() -> None:
    with patched(nhwc_transformer, "channel_last_to_first_perm", perms.channel_first_to_last_perm):
        assert _fails("nhwc/conv_u8")


# ------------------------------------------------------------------------------------------------------- explain
def test_explain_layout_reasons() -> None:
    from qdqopt.explain import explain_layout

    def by_name(name: str, disabled: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
        reports = explain_layout(fixture_model(name), "layout", disabled=disabled)
        return {r.name: (r.outcome, r.detail) for r in reports}

    chain = by_name("nhwc/conv_maxpool_chain")
    assert chain["p1_maxpool"] == ("nhwc", "com.microsoft.NhwcMaxPool")
    assert chain["c1_conv"] == ("nhwc", "com.microsoft.QLinearConv")
    # where the NCHWc block divides its channels (block 8, AVX2 without AVX-512) NchwcTransformer takes the pool first
    outcome, detail = by_name("nhwc/maxpool_float", ("NchwcTransformer",))["p1_maxpool"]
    assert outcome == "nchw" and "not uint8/int8" in detail
    outcome, detail = by_name("nhwc/unknown_rank")["c1_conv"]
    assert outcome == "nchw" and "no shape" in detail
    outcome, detail = by_name("nhwc/qlinearconv_ms_nhwc")["qconv"]
    assert outcome == "nchw" and "already channels_last" in detail


@pytest.mark.parametrize("name", NAMES)
def test_explain_layout_agrees_with_ort(name: str) -> None:
    """The convs explain sends to NHWC are the channels-last QLinearConvs in ORT's own LAYOUT output."""
    from qdqopt.explain import explain_layout
    from qdqopt.reference import run_reference

    reports = explain_layout(fixture_model(name), "layout")
    ours = sum(1 for r in reports if r.outcome == "nhwc" and r.detail == "com.microsoft.QLinearConv")
    ort_model = run_reference(fixture_model(name), "layout", capture_log=False).model
    theirs = sum(
        1
        for n in ort_model.graph.node
        if n.op_type == "QLinearConv" and any(a.name == "channels_last" and a.i == 1 for a in n.attribute)
    )
    before = sum(1 for r in reports if r.op.endswith("QLinearConv") and "already channels_last" in r.detail)
    assert ours + before == theirs


# ------------------------------------------------------------------------ arm64-only table entries, by structure
def _fp16_graph(op: str, **attrs: Any) -> Any:
    import dataclasses

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from qdqopt.config import SessionConfig
    from qdqopt.graph import load_model
    from qdqopt.passes.base import PassContext
    from qdqopt.target import Target

    inits = []
    inputs = ["x"]
    if op in ("Conv", "FusedConv"):
        inits.append(numpy_helper.from_array(np.ones((4, 4 // int(attrs.get("group", 1)), 3, 3), np.float16), "w"))
        inputs.append("w")
    if op == "FusedConv":
        inits.append(numpy_helper.from_array(np.ones(4, np.float16), "b"))
        inputs += ["b", "z"]  # the Sum input Z (input 3)
    domain = "com.microsoft" if op == "FusedConv" else ""
    kw: dict[str, Any] = {"kernel_shape": [3, 3]} if op in ("MaxPool", "AveragePool") else {}
    node = helper.make_node(op, inputs, ["y"], name="n", domain=domain, pads=[1, 1, 1, 1], **kw, **attrs)
    if op == "GlobalAveragePool":
        node = helper.make_node(op, ["x"], ["y"], name="n")
    names = ["x", "z"] if op == "FusedConv" else ["x"]
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT16, [1, 4, 8, 8]) for v in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    model = load_model(m)
    for n in model.graph.nodes():
        n.ep = "CPUExecutionProvider"
    target = dataclasses.replace(Target.detect(), fp16_nhwc_kernels=True)
    ctx = PassContext(SessionConfig.from_mapping({}, warn=False), target, partitioned=True)
    NhwcTransformer().apply(model.graph, ctx)
    return model.graph


@pytest.mark.parametrize(
    ("op", "attrs", "expected"),
    [
        ("Conv", {}, "com.microsoft.NhwcFusedConv"),
        ("FusedConv", {"activation": "Relu"}, "com.microsoft.NhwcFusedConv"),
        ("Conv", {"group": 2}, None),  # the fp16 filter: group 1 only
        ("Conv", {"dilations": [2, 2]}, None),  # and dilations 1
        ("MaxPool", {}, "com.ms.internal.nhwc.MaxPool"),
        ("AveragePool", {}, "com.ms.internal.nhwc.AveragePool"),
        ("GlobalAveragePool", {}, "com.ms.internal.nhwc.GlobalAveragePool"),
    ],
)
def test_arm64_fp16_entries(op: str, attrs: dict[str, Any], expected: str | None) -> None:
    """The fp16 table entries exist on arm64 builds only, so ORT on x86 cannot check them: their structure is
    checked here (ORT's table in ``nhwc_transformer.cc``): a Transpose in front of input 0 (and the Sum input 3
    of FusedConv), the swapped op, a Transpose behind, or nothing where the filter refuses."""
    graph = _fp16_graph(op, **attrs)
    ops = [n.qualified_op for n in graph.topological_order()]  # type: ignore[attr-defined]
    if expected is None:
        assert ops == [op]
        return
    assert expected in ops and ops.count("Transpose") == (3 if op == "FusedConv" else 2), ops
    swapped = next(n for n in graph.nodes() if n.qualified_op == expected)  # type: ignore[attr-defined]
    assert swapped.name.startswith("n_token_")
    transposes = [n for n in graph.nodes() if n.op_type == "Transpose"]  # type: ignore[attr-defined]
    perms = sorted(list(t.attr("perm")) for t in transposes)
    assert [0, 2, 3, 1] in perms and [0, 3, 1, 2] in perms
