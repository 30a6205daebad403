"""Passes of one's own: the registry's checks, where a plugin goes, how it is loaded, and that ORT never hears of it.

The example is ``examples/leaky_relu_to_relu.py`` (walked through in ``docs/adding_a_pass.md``, whose unit-test
template runs here too). Tests that compare with ORT are at the end.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qdqopt
from qdqopt.cli import main
from qdqopt.config import SessionConfig
from qdqopt.errors import UsageError
from qdqopt.graph import Graph
from qdqopt.levels import Level
from qdqopt.passes import GraphTransformer, PassContext
from qdqopt.plugins import ENTRY_POINT_GROUP, installed_plugins, load_plugin, resolve_plugins
from qdqopt.registry import PASSES, PassSpec, Plugin, RuleSpec, check_table, registered_passes, with_plugins
from qdqopt.target import Target

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILE = ROOT / "examples" / "leaky_relu_to_relu.py"
EXAMPLE = f"{EXAMPLE_FILE}:LeakyReluZeroToRelu"
NAME = "LeakyReluZeroToRelu"


@pytest.fixture
def examples_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    yield
    sys.modules.pop("leaky_relu_to_relu", None)


def _leaky_qdq(alpha: float = 0.0) -> onnx.ModelProto:
    """DQ -> LeakyRelu -> Q -> DQ, uint8 with zero point 0: ORT fuses it into QLinearLeakyRelu."""
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "zp"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s2"),
        numpy_helper.from_array(np.array(0, np.uint8), "zp2"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["xf"], name="dq"),
        helper.make_node("LeakyRelu", ["xf"], ["yf"], name="leaky", alpha=alpha),
        helper.make_node("QuantizeLinear", ["yf", "s2", "zp2"], ["yq"], name="q"),
        helper.make_node("DequantizeLinear", ["yq", "s2", "zp2"], ["y"], name="dq_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "leaky",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


class _Noop(GraphTransformer):
    name = "MyNoop"
    level = "extended"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return False


def _named(cls: type[GraphTransformer], name: str, **where: object) -> type[GraphTransformer]:
    return types.new_class(name, (cls,), {}, lambda ns: ns.update({"name": name, **where}))


# ------------------------------------------------------------------------------------------- the registry
def test_the_table_is_checked() -> None:
    check_table(PASSES)
    line = PASSES[4]  # ConstantSharing, L1
    with pytest.raises(ValueError, match="already registered"):
        check_table([line, line])
    with pytest.raises(ValueError, match="stage out of session order"):
        check_table([PASSES[-1], line])
    with pytest.raises(ValueError, match=r"\.name is 'ConstantSharing'"):
        check_table([PassSpec("ConstantSharingX", "L1", line.impl)])
    with pytest.raises(ValueError, match="required must be True"):
        check_table([PassSpec("X", "post")])
    with pytest.raises(ValueError, match="qdq flag"):
        check_table([PassSpec("X", "L1", qdq="yes")])
    rule = PASSES[2].rules[0]
    with pytest.raises(ValueError, match="is listed twice"):
        check_table([PassSpec("R", "L1", rules=(rule, rule))])
    with pytest.raises(ValueError, match="named both a transformer and a rule"):
        check_table([PassSpec("R", "L1", rules=(rule,)), PassSpec(rule.name, "L1")])
    with pytest.raises(ValueError, match=r"EliminateIdentity\.name"):
        check_table([PassSpec("R", "L1", rules=(RuleSpec("Other", rule.impl),))])


def test_old_import_paths_still_work() -> None:
    from qdqopt import levels, passes, registry

    assert levels.PASSES is registry.PASSES and levels.registered_passes is registry.registered_passes
    assert passes.TRANSFORMERS is registry.TRANSFORMERS and passes.RULES is registry.RULES
    with pytest.raises(AttributeError):
        _ = levels.NOT_A_NAME  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------- placement
def _names(table: tuple[PassSpec, ...], stage: str) -> list[str]:
    return [s.name for s in table if s.stage == stage]


def test_placed_before_a_rule_means_before_its_transformer(examples_on_path: None) -> None:
    plugin = load_plugin("leaky_relu_to_relu:LeakyReluZeroToRelu")
    l2 = _names(with_plugins([plugin]), "L2")
    assert l2[:2] == [NAME, "Level2_RuleBasedTransformer"]
    spec = next(s for s in with_plugins([plugin]) if s.is_plugin)
    assert spec.placement == "before ReluQuantRewrite" and spec.plugin == "leaky_relu_to_relu:LeakyReluZeroToRelu"


def test_after_before_and_level() -> None:
    after = Plugin(_Noop, after="QDQS8ToU8Transformer")
    l2 = _names(with_plugins([after]), "L2")
    assert l2[l2.index("QDQS8ToU8Transformer") + 1] == "MyNoop"
    assert _names(with_plugins([Plugin(_Noop, level="all")]), "L4")[-1] == "MyNoop"
    assert _names(with_plugins([Plugin.of(_Noop)]), "L2")[-1] == "MyNoop"  # class attribute level = "extended"
    second = _named(_Noop, "MySecond", after="MyNoop", level=None)
    l1 = _names(with_plugins([Plugin(_Noop, before="ConstantFolding"), Plugin.of(second)]), "L1")
    assert l1[l1.index("MyNoop") : l1.index("ConstantFolding") + 1] == ["MyNoop", "MySecond", "ConstantFolding"]


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (Plugin(_Noop, after="MatMulAddFusion"), "registered at L1, L2: say which with level="),
        (Plugin(_Noop, after="ReluQuantRewrit"), "did you mean ReluQuantRewrite"),
        (Plugin(_Noop, after="ConstantFolding", level="extended"), "'ConstantFolding' runs at L1, not at L2"),
        (Plugin(_Noop, after="MemcpyTransformer"), "runs at post, not at L1..L4"),
        (Plugin(_Noop, after="NoSuchPassAnywhere"), "no pass or rule named 'NoSuchPassAnywhere'"),
        (Plugin(_Noop, after="ConstantFolding", before="ConstantSharing"), "not both"),
        (Plugin(_named(_Noop, "ConstantFolding")), "the name is ORT's"),
        (Plugin(_named(_Noop, "X", level=None)), "say where it goes"),
        (Plugin(_Noop, level="disable_all"), "DISABLE_ALL"),
    ],
)
def test_a_plugin_that_cannot_be_placed_is_an_error(plugin: Plugin, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        with_plugins([plugin])


def test_the_same_plugin_twice_is_an_error() -> None:
    with pytest.raises(UsageError, match="given twice"):
        resolve_plugins([_Noop, _Noop])


def test_a_plugin_is_registered_at_its_stage_only() -> None:
    plugin = Plugin.of(_Noop)
    cfg, target = SessionConfig(), Target.detect()
    assert "MyNoop" in [s.name for s, _ in registered_passes(Level.EXTENDED, cfg, target, set(), [plugin])]
    assert "MyNoop" not in [s.name for s, _ in registered_passes(Level.BASIC, cfg, target, set(), [plugin])]
    assert "MyNoop" not in [s.name for s, _ in registered_passes(Level.ALL, cfg, target, {"MyNoop"}, [plugin])]
    assert [s for s, _ in registered_passes(Level.ALL, cfg, target, set(), [])] == [
        s for s, _ in registered_passes(Level.ALL, cfg, target, set())
    ]


# -------------------------------------------------------------------------------------------- loading
def test_load_from_a_file_a_module_and_a_class(examples_on_path: None) -> None:
    from_file = load_plugin(EXAMPLE)
    from_module = load_plugin("leaky_relu_to_relu:LeakyReluZeroToRelu")
    assert from_file.name == from_module.name == NAME and from_file.before == "ReluQuantRewrite"
    (from_class,) = resolve_plugins([from_module.impl])
    assert from_class.impl is from_module.impl


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module_xyz:Pass", "cannot import it"),
        ("qdqopt.registry:NoSuchPass", "has no NoSuchPass"),
        ("qdqopt.registry:PASSES", "neither a GraphTransformer subclass"),
        ("no-such-entry-point", "give module:Class, or the name of an entry point"),
        ("/no/such/file.py:Pass", "no such file"),
    ],
)
def test_a_plugin_that_cannot_be_loaded_is_an_error(ref: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        load_plugin(ref)


def test_plugins_must_be_a_list() -> None:
    with pytest.raises(UsageError, match="must be a list"):
        resolve_plugins(EXAMPLE)  # type: ignore[arg-type]


def test_an_entry_point_makes_a_plugin_available_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, examples_on_path: None
) -> None:
    dist = tmp_path / "leaky_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: leaky-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nleaky = leaky_relu_to_relu:LeakyReluZeroToRelu\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_plugins()["leaky"] == "leaky_relu_to_relu:LeakyReluZeroToRelu"
    plugin = load_plugin("leaky")
    assert plugin.name == NAME and plugin.source.startswith("entry point leaky")
    # available, not active: a run without it is ORT's pipeline
    assert qdqopt.run(_leaky_qdq(), "extended").plugins == []


# ------------------------------------------------------------------------------------------- running it
def test_the_docs_unit_test_template_passes(examples_on_path: None) -> None:
    text = (ROOT / "docs" / "adding_a_pass.md").read_text(encoding="utf-8")
    block = text.split("<!-- test-template -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"__name__": "adding_a_pass_template"}
    exec(compile(block, "docs/adding_a_pass.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert len(tests) >= 4
    for test in tests:
        test()


def test_the_docs_pass_is_the_example() -> None:
    """The class shown in the walk-through is the example file's, line for line (comments aside)."""

    def code(text: str) -> list[str]:
        body = text[text.index("class LeakyReluZeroToRelu") :].split("```", 1)[0]
        lines = [re.sub(r"\s*#.*$", "", line).rstrip() for line in body.splitlines()]
        return [line for line in lines if line.strip() and not line.strip().startswith("#")]

    doc = (ROOT / "docs" / "adding_a_pass.md").read_text(encoding="utf-8")
    assert code(doc) == code(EXAMPLE_FILE.read_text(encoding="utf-8"))


def test_run_marks_plugin_entries_and_keeps_ort_lines() -> None:
    result = qdqopt.run(_leaky_qdq(), "extended", plugins=[EXAMPLE])
    assert result.plugins == [NAME]
    plugin_entries = [e for e in result.pipeline.trace if e.plugin]
    assert [(e.name, e.modified) for e in plugin_entries] == [(NAME, True), (NAME, False)]
    assert len(result.pipeline.ort_lines()) == len(result.pipeline.trace) - 2
    # ORT's own passes react: ReluQuantRewrite drops the Relu, the transpose optimizer the DQ -> Q pair left
    fired = [e.name for e in result.pipeline.trace if e.modified and not e.plugin]
    assert "Level2_RuleBasedTransformer" in fired
    assert [n.op_type for n in result.model.graph.node] == ["DequantizeLinear"]


def test_disabled_plugin_changes_nothing() -> None:
    with pytest.warns(UserWarning, match="not the name of any ORT"):
        qdqopt.run(_leaky_qdq(), "extended", disabled=["NoSuchPassAnywhere"])
    off = qdqopt.run(_leaky_qdq(), "extended", plugins=[EXAMPLE], disabled=[NAME])  # no warning: a known name
    without = qdqopt.run(_leaky_qdq(), "extended")
    assert off.plugins == [] and off.model.SerializeToString() == without.model.SerializeToString()
    assert off.pipeline.ort_lines() == without.pipeline.ort_lines()


def test_a_declining_plugin_is_reported_and_skipped() -> None:
    class Declines(_Noop):
        name = "MyDecliner"

        def unsupported(self, graph: Graph, ctx: PassContext) -> str | None:
            return "not my kind of model"

    result = qdqopt.run(_leaky_qdq(), "extended", plugins=[Declines])
    assert result.unsupported == {"MyDecliner": "not my kind of model"} and result.plugins == []


def test_a_plugin_sees_the_same_context_and_helpers() -> None:
    seen: list[tuple[bool, str]] = []

    class Looks(GraphTransformer):
        name = "MyLooker"
        before = "QDQSelectorActionTransformer"

        def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
            for node in graph.nodes():
                if node.op_type == "LeakyRelu":  # in step 1; QDQSelectorActionTransformer fuses it right after
                    seen.append((ctx.partitioned, node.ep))
                    assert node.attr_float("alpha") == 0.0 and node.attr_int("alpha") is None
            return False

    qdqopt.run(_leaky_qdq(), "extended", plugins=[Looks])
    assert seen and seen[0] == (True, "CPUExecutionProvider")


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_passes_lists_the_plugin_at_its_place(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["passes", "--level", "extended", "--plugin", EXAMPLE]) == 0
    lines = capsys.readouterr().out.splitlines()
    mine = next(i for i, line in enumerate(lines) if NAME in line)
    assert re.search(r"\bplugin\b.*not ORT's", lines[mine])
    assert "Level2_RuleBasedTransformer" in lines[mine + 1]
    assert any("plugin (a pass of your own" in line for line in lines)


def test_cli_passes_without_plugins_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["passes", "--level", "extended"]) == 0
    out = capsys.readouterr().out
    assert "plugin" not in out


def test_cli_trace_marks_the_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "leaky.onnx"
    onnx.save(_leaky_qdq(), str(path))
    assert main(["trace", str(path), "-l", "extended", "--plugin", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert f"GraphTransformer {NAME} modified: 1   LeakyRelu -1 Relu +1  [plugin: not ORT's]" in out
    assert main(["trace", str(path), "-l", "extended", "--plugin", EXAMPLE, "--disable", NAME]) == 0
    assert NAME not in capsys.readouterr().out


def test_cli_optimize_names_the_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, out_path = tmp_path / "leaky.onnx", tmp_path / "out.onnx"
    onnx.save(_leaky_qdq(), str(path))
    assert main(["optimize", str(path), "-o", str(out_path), "-l", "extended", "-p", EXAMPLE]) == 0
    assert f"plugins that ran (passes of your own, not ORT's): {NAME}" in capsys.readouterr().out


def test_cli_bad_plugin_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "leaky.onnx"
    onnx.save(_leaky_qdq(), str(path))
    assert main(["trace", str(path), "--plugin", "qdqopt.registry:Nope"]) == 2
    assert "has no Nope" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ against ORT
def test_comparison_names_the_active_plugin_and_checks_ort_lines_only() -> None:
    from qdqopt.compare import compare_level

    comp = compare_level(_leaky_qdq(), "extended", plugins=[EXAMPLE])
    assert comp.plugins == [NAME]
    assert any(f"{NAME} (before ReluQuantRewrite, modified the model)" in note for note in comp.notes())
    assert any("plugins active" in line for line in comp.lines())
    assert NAME not in " ".join(comp.ours_lines) and len(comp.ours_lines) == len(comp.ort_lines)
    assert not comp.report.holds("S")  # ORT fuses QLinearLeakyRelu, qdqopt (with the plugin) removed the unit


@pytest.mark.parametrize("isolate", [False, True])
def test_a_disabled_plugin_leaves_the_comparison_intact(isolate: bool) -> None:
    from qdqopt.compare import compare_level

    off = compare_level(_leaky_qdq(), "extended", plugins=[EXAMPLE], disabled=[NAME], isolate=isolate)
    without = compare_level(_leaky_qdq(), "extended", isolate=isolate)
    assert off.lines() == without.lines() and off.notes() == without.notes() and off.header() == without.header()
    assert off.trace_matches and off.report.holds("P") and off.ort_disabled == without.ort_disabled
    assert off.plugins == []


def test_a_plugin_at_a_stage_the_level_does_not_run_leaves_the_comparison_intact() -> None:
    from qdqopt.compare import compare_level

    basic = compare_level(_leaky_qdq(), "basic", plugins=[EXAMPLE])
    assert basic.lines() == compare_level(_leaky_qdq(), "basic").lines() and basic.plugins == []


def test_cli_diff_with_a_disabled_plugin_prints_as_without(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "leaky.onnx"
    onnx.save(_leaky_qdq(), str(path))
    assert main(["diff", str(path), "-l", "extended"]) == 0
    without = capsys.readouterr().out
    assert main(["diff", str(path), "-l", "extended", "--plugin", EXAMPLE, "--disable", NAME]) == 0
    assert capsys.readouterr().out == without
    assert main(["diff", str(path), "-l", "extended", "--plugin", EXAMPLE]) == 1
    assert "plugins active on qdqopt's side only" in capsys.readouterr().out


def test_cli_trace_ort_skips_plugin_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "leaky.onnx"
    onnx.save(_leaky_qdq(0.2), str(path))  # a true LeakyRelu: the plugin changes nothing, ORT's log is matched
    assert main(["trace", str(path), "-l", "extended", "--plugin", EXAMPLE, "--ort"]) == 0
    out = capsys.readouterr().out
    assert f"GraphTransformer {NAME} modified: 0  [plugin: not ORT's]\n" in out
    assert "(and 2 of plugins, not checked): identical" in out
    assert "it changed nothing here" in out
