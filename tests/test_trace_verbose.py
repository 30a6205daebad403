"""``qdqopt trace --verbose``: qdqopt's events against ORT 1.32's own VERBOSE optimizer lines, line for line.

ORT runs as a user runs it (nothing disabled), in the default config and with ``session.qdqisint8allowed=1``, at
every level. The lines compared are the optimizer lines :mod:`qdqopt.reference` extracts (the manager's levels,
steps, skips and stops, each transformer's ``modified`` line, the optimization loop, the selectors' ``Matched`` and
Resolve's removals, in order). The bundled example, a seeded sample of the corpus and of the fixtures, and the models
that exercise each kind of event run by default; the whole corpus runs with ``QDQOPT_FULL=1`` (marked ``slow``).
Mutations (a loop step more, Resolve's removals in another order, subgraphs cleaned in file order) must show.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

import fixtures
import qdqopt.graph.core as core
from qdqopt import events
from qdqopt.api import run
from qdqopt.cli import example_model, main
from qdqopt.errors import ReferenceError
from qdqopt.graph import Graph
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes.base import PassContext, RuleBasedTransformer
from qdqopt.passes.where_dummy_dq import WhereDummyDq
from qdqopt.reference import LogRecord, optimizer_lines, parse_log, run_reference, transformer_diagnostics
from tests.conftest import CORPUS, FULL, corpus_id, corpus_models, fixture_model, ort_accepts, patched

LEVELS = ("disable_all", "basic", "extended", "layout", "all")
CONFIGS = {"default": {}, "int8-allowed": {"session.qdqisint8allowed": "1"}}
RUNS = [(level, config) for level in LEVELS for config in CONFIGS]
RUN_IDS = [f"{level}-{config}" for level, config in RUNS]

Model = Path | onnx.ModelProto

#: corpus models that show one kind of event each: the final Resolve after MemcpyTransformer (a subgraph left with
#: NodeArgs by a NhwcTransformer that reports no change), a second optimization loop, MatMulNBitsFusion's Matched,
#: NodeArg removals after NhwcTransformer and the transpose optimizer
FEATURED = (
    "tract/qlstm_3-2-3_T3_S1/model.onnx",
    "migraphx/test/onnx/int4_const_identity_block_sz_2_qdq_test.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/runtime_optimization/matmulnbits_add.onnx",
)
#: corpus models where qdqopt differs from ORT for a reason outside the events: (path, levels) -> why
KNOWN: dict[str, tuple[tuple[str, ...], str]] = {}
#: fixtures that show one kind of event each: If branches cleaned in attribute-map order (then_branch first),
#: ConvAddActivationFusion's Matched, NhwcTransformer's NodeArg removals
FEATURED_FIXTURES = ("convaddact/if_branches", "convaddact/residual_blocks", "nhwc/conv_maxpool_chain")
SAMPLE_SIZE = 6
SEED = 32


# ------------------------------------------------------------------------------------------------------ helpers
def _first_difference(ort: list[str], ours: list[str]) -> str:
    at = next((k for k, (a, b) in enumerate(zip(ort, ours, strict=False)) if a != b), min(len(ort), len(ours)))
    theirs = ort[at] if at < len(ort) else "(nothing more)"
    mine = ours[at] if at < len(ours) else "(nothing more)"
    before = "\n  ".join(ort[max(0, at - 3) : at])
    return f"first difference at line {at + 1} of {len(ort)}:\n  {before}\nORT:    {theirs}\nqdqopt: {mine}"


@functools.cache
def _ort_lines(key: str, level: str, config: str) -> list[str] | None:
    """ORT's optimizer lines for a corpus path or fixture name (None: ORT rejects the session)."""
    model: Model = CORPUS / key if key.endswith(".onnx") else fixture_model(key)
    try:
        return run_reference(model, level, config=CONFIGS[config]).verbose
    except ReferenceError:
        return None


def _model(key: str) -> Model:
    return CORPUS / key if key.endswith(".onnx") else fixture_model(key)


def _check(key: str, level: str, config: str) -> None:
    ort = _ort_lines(key, level, config)
    if ort is None:
        pytest.skip("ORT rejects this session")
    ours = run(_model(key), level, config=CONFIGS[config]).pipeline.verbose_lines()
    assert ours == ort, _first_difference(ort, ours)


def _corpus_sample() -> list[str]:
    """The featured corpus models and ``SAMPLE_SIZE`` others ORT accepts, drawn with a fixed seed."""
    models = [corpus_id(p) for p in corpus_models()]
    rest = sorted(set(models) - set(FEATURED) - set(KNOWN))
    random.Random(SEED).shuffle(rest)
    picked = [key for key in rest if ort_accepts(CORPUS / key)][:SAMPLE_SIZE] if rest else []
    return [*(m for m in FEATURED if m in models), *picked]


def _fixture_sample() -> list[str]:
    big = {*fixtures.REALARCH, *fixtures.TRANSFORMERS}
    names = sorted(f.name for f in fixtures.all_fixtures() if f.name not in big and not f.ort_crashes)
    rest = [n for n in names if n not in FEATURED_FIXTURES]
    return [*FEATURED_FIXTURES, *random.Random(SEED).sample(rest, min(SAMPLE_SIZE, len(rest)))]


# --------------------------------------------------------------------------------------------- ORT's log filter
_LOG = """\
2026-12-02 07:31:40.977971337 [I:onnxruntime:, inference_session.cc:778 TraceSessionOptions] Session Options { x }
\x1b[0;93m2026-12-02 07:31:40.9 [W:onnxruntime:, graph.cc:5809 CleanUnusedInitializersAndNodeArgs] Removing \
initializer 'w'. It is not used by any node and should be removed from the model.\x1b[m
2026-12-02 07:31:40.986185531 [I:onnxruntime:, inference_session.cc:2835 operator()] Initializing session.
2026-12-02 07:31:40.990966620 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer A modified: 1 with \
status: OK
2026-12-02 07:31:40.991 [I:onnxruntime:, graph.cc:5812 CleanUnusedInitializersAndNodeArgs] Removing initializer 'b'. \
It is no longer used by any node.
2026-12-02 07:31:40.991 [I:onnxruntime:, graph.cc:5875 CleanUnusedInitializersAndNodeArgs] Removing NodeArg 'x'. It \
is no longer used by any node.
2026-12-02 07:31:40.991459215 [V:onnxruntime:, graph_transformer_mgr.cc:31 ApplyTransformers] No graph transformers \
registered for level 0.
2026-12-02 07:31:40.992 [I:onnxruntime:, inference_session.cc:2029 TransformGraph] Running graph optimizations in \
loop 1 time/s (Graph Optimizations Loop Level : 1)
2026-12-02 07:31:40.993 [V:onnxruntime:, selector_action_transformer.cc:126 MatchAndProcess] Matched Conv
2026-12-02 07:31:40.994 [I:onnxruntime:, constant_sharing.cc:186 ApplyImpl] Total shared scalar initializer count: 1
\x1b[0;93m2026-12-02 07:31:40.995 [W:onnxruntime:, constant_folding.cc:611 operator()] Exception during constant \
folding of QuantizeLinear node '': quantize_linear.cc:117 scale must be 1D
. Skipping constant folding for this node.\x1b[m
2026-12-02 07:31:40.996 [V:onnxruntime:, session_state.cc:1598 VerifyEachNodeIsAssignedToAnEp] Node placements
"""


def test_log_filter() -> None:
    """The optimizer lines are exactly the manager's, the modified lines, the loop, Resolve's INFO removals and the
    selectors' Matched; load-time removals, session lines and transformers' own diagnostics are left out."""
    records = parse_log(_LOG)
    assert optimizer_lines(records) == [
        "GraphTransformer A modified: 1 with status: OK",
        "Removing initializer 'b'. It is no longer used by any node.",
        "Removing NodeArg 'x'. It is no longer used by any node.",
        "No graph transformers registered for level 0.",
        "Running graph optimizations in loop 1 time/s (Graph Optimizations Loop Level : 1)",
        "Matched Conv",
    ]
    diagnostics = transformer_diagnostics(records)
    assert [(r.file, r.severity) for r in diagnostics] == [("constant_sharing.cc", "I"), ("constant_folding.cc", "W")]
    assert diagnostics[1].message.endswith("scale must be 1D\n. Skipping constant folding for this node.")
    assert records[0] == LogRecord("I", "inference_session.cc", 778, "TraceSessionOptions", "Session Options { x }")


def test_insert_before_resolve() -> None:
    """A transformer's ``modified`` line goes before the removals of the Resolve that follows it."""
    log = events.EventLog()
    log.add(events.Kind.APPLY, "apply")
    mark = len(log.events)
    log.add(events.Kind.MATCHED, "Matched Conv")
    log.add(events.Kind.REMOVE_INITIALIZER, "init")
    log.add(events.Kind.REMOVE_NODEARG, "arg")
    log.insert_before_resolve(mark, events.Kind.MODIFIED, "modified")
    assert log.lines() == ["apply", "Matched Conv", "modified", "init", "arg"]
    assert events.emit(events.Kind.APPLY, "outside any run") is None


def test_event_scopes() -> None:
    """Events carry the pass, ORT's level number, the 1-based step and the nodes they are about."""
    result = run(example_model(), "extended").pipeline
    matched = [e for e in result.events.events if e.kind is events.Kind.MATCHED]
    assert matched and all((e.pass_name, e.level, e.step) == ("QDQSelectorActionTransformer", 2, 1) for e in matched)
    assert all(len(e.nodes) == 1 and e.nodes[0] for e in matched)
    removed = [e for e in result.events.events if e.kind is events.Kind.REMOVE_INITIALIZER]
    assert removed and {e.pass_name for e in removed} >= {"ConstantFolding"}
    assert [e.severity for e in result.events.ort_events()[:2]] == ["I", "V"]  # pre's modified line, then level 0
    # the INFO trace is the events' modified lines, without their status
    modified = [e.text for e in result.events.events if e.kind is events.Kind.MODIFIED]
    assert [line + " with status: OK" for line in result.ort_lines()] == modified


# ------------------------------------------------------------------------------------------- against live ORT
@pytest.mark.parametrize(("level", "config"), RUNS, ids=RUN_IDS)
def test_example(level: str, config: str) -> None:
    ort = run_reference(example_model(), level, config=CONFIGS[config]).verbose
    ours = run(example_model(), level, config=CONFIGS[config]).pipeline.verbose_lines()
    assert ours == ort, _first_difference(ort, ours)


@pytest.mark.parametrize(("level", "config"), RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("key", _corpus_sample() or [pytest.param("", marks=pytest.mark.skip(reason="no corpus"))])
def test_corpus_sample(key: str, level: str, config: str) -> None:
    _check(key, level, config)


@pytest.mark.parametrize(("level", "config"), RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("key", _fixture_sample())
def test_fixture_sample(key: str, level: str, config: str) -> None:
    _check(key, level, config)


def _full_corpus() -> Iterator[object]:
    for path in corpus_models():
        key = corpus_id(path)
        marks = [pytest.mark.slow]
        if not FULL:
            marks.append(pytest.mark.skip(reason="whole-corpus sweep: QDQOPT_FULL=1"))
        yield pytest.param(key, marks=marks, id=key)


@pytest.mark.parametrize(("level", "config"), RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("key", list(_full_corpus()))
def test_corpus_full(key: str, level: str, config: str) -> None:
    known = KNOWN.get(key)
    if known is not None and level in known[0]:
        pytest.xfail(known[1])
    _check(key, level, config)


# -------------------------------------------------------------------------------------------------- mutations
def test_mutation_one_step_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Level1 pass claiming one change it did not make: the fixed-point loop runs a step more, and it shows.

    (The level's first pass, which runs at every step: a later one that found nothing at a step is replayed at the
    next, where nothing changed since, see ``manager._Run.apply``.)"""
    ort = run_reference(example_model(), "basic").verbose
    steps = sum("for level 1 started" in line for line in ort)
    calls: list[int] = []
    original = RuleBasedTransformer.apply_impl

    def claims_once(self: RuleBasedTransformer, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        changed = original(self, graph, ctx, graph_level)
        if self.name != "Level1_RuleBasedTransformer" or graph_level:
            return changed
        calls.append(1)
        return changed or len(calls) == steps  # in the last step, which changed nothing in ORT

    monkeypatch.setattr(RuleBasedTransformer, "apply_impl", claims_once)
    ours = run(example_model(), "basic").pipeline.verbose_lines()
    assert ours != ort
    assert sum("for level 1 started" in line for line in ours) == steps + 1


def test_mutation_initializer_order() -> None:
    """Resolve removing the unused initializers in another order than ``name_to_initial_tensor_``'s shows."""
    ort = run_reference(example_model(), "basic").verbose
    original = core.Graph.unused_initializers
    with patched(core.Graph, "unused_initializers", lambda self: list(reversed(original(self)))):
        ours = run(example_model(), "basic").pipeline.verbose_lines()
    assert ours != ort and sorted(ours) == sorted(ort)
    assert "Removing initializer" in _first_difference(ort, ours).split("ORT:")[1]


def test_mutation_nodearg_order() -> None:
    """``node_args_`` filled in another order than ORT's Graph constructor's: NhwcTransformer's removals show it."""
    ort = run_reference(example_model(), "all").verbose

    def file_order(self: Graph) -> None:  # every name as qdqopt met it while loading: not ORT's order
        self._arg_map = StdUnorderedMap()
        self._arg_map.update(sorted(self._known_values))

    with patched(core.Graph, "_seed_node_args", file_order):
        ours = run(example_model(), "all").pipeline.verbose_lines()
    assert ours != ort and sorted(ours) == sorted(ort)
    assert "Removing NodeArg" in _first_difference(ort, ours).split("ORT:")[1]


def test_mutation_subgraph_order() -> None:
    """Subgraphs cleaned in file order (else_branch first) instead of the attribute map's: the If fixture shows it."""
    ort = _ort_lines("convaddact/if_branches", "all", "default")
    assert ort is not None
    with patched(core, "_subgraphs_in_map_order", lambda node: list(node.subgraphs.values())):
        ours = run(fixture_model("convaddact/if_branches"), "all").pipeline.verbose_lines()
    assert ours != ort and sorted(ours) == sorted(ort)


# ---------------------------------------------------------------------------------------------------- the CLI
def test_cli_verbose_without_ort(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(example_model()), "--level", "all", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "  V Applying 16 graph transformer(s) for level 1 for up to 10 step(s)." in out
    assert "  V Matched Conv" in out
    assert "  I GraphTransformer EnsureUniqueDQForNodeUnit modified: 1 with status: OK   DequantizeLinear +1" in out
    assert "  I Removing NodeArg '" in out


def test_cli_verbose_against_ort(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(example_model()), "--level", "all", "--ort", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "<> ORT" not in out
    assert out.rstrip().endswith("optimizer lines; qdqopt 300: identical"), out[-300:]


def test_cli_verbose_names_the_first_difference(capsys: pytest.CaptureFixture[str]) -> None:
    original = core.Graph.unused_initializers
    with patched(core.Graph, "unused_initializers", lambda self: list(reversed(original(self)))):
        status = main(["trace", str(example_model()), "--level", "basic", "--ort", "--verbose"])
    out = capsys.readouterr().out
    assert status == 1
    assert "DIFFERENT" in out and "first difference at line" in out
    assert "    ORT:    Removing initializer '" in out and "    qdqopt: Removing initializer '" in out


def test_cli_verbose_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(tmp_path / "nope.onnx"), "--ort", "--verbose"]) == 2
    assert "no such file" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------------- replays
def _replay_runs(model: Path, level: str) -> tuple[bytes, list[tuple[object, ...]], list[bool]]:
    result = run(model, level)
    log: list[tuple[object, ...]] = [
        (e.kind, e.text, e.pass_name, e.level, e.step, e.nodes, e.plugin) for e in result.pipeline.events.events
    ]
    return result.model.SerializeToString(), log, [e.replayed for e in result.pipeline.trace]


@pytest.mark.parametrize("level", ["basic", "extended", "all"])
@pytest.mark.parametrize("source", ["example", "mobilenetv3"])
def test_a_replayed_pass_says_and_leaves_what_running_it_would(
    monkeypatch: pytest.MonkeyPatch, source: str, level: str
) -> None:
    """The manager replays a pass whose last application in the level found and changed nothing when the graph is
    the same since (``_Run.apply``): the saved model and every event (kind, text, scope, nodes) are those of the
    run where every pass runs each time (every state stamp made unique), and some passes were replayed."""
    model = example_model()
    if source != "example":
        model = CORPUS / "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"
        if not model.is_file():
            pytest.skip(f"the shared corpus is not beside the checkout ({model})")
    saved, log, replayed = _replay_runs(model, level)
    assert any(replayed)
    stamps = iter(range(1 << 30))
    monkeypatch.setattr(Graph, "state_stamp", lambda self: (next(stamps),))
    saved_all, log_all, replayed_all = _replay_runs(model, level)
    assert not any(replayed_all)
    assert saved == saved_all
    assert log == log_all


def test_a_pass_is_replayed_only_while_the_graph_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that edits the graph without saying so (here WhereDummyDq generating a name each time) is never
    replayed: its state stamp moved during its application."""
    original = WhereDummyDq.apply_impl

    def names_one(self: WhereDummyDq, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        graph.generate_value_name("probe")
        return original(self, graph, ctx, graph_level)

    plain = run(example_model(), "basic").pipeline.trace
    assert any(e.replayed for e in plain if e.name == "WhereDummyDq")
    monkeypatch.setattr(WhereDummyDq, "apply_impl", names_one)
    trace = run(example_model(), "basic").pipeline.trace
    assert [e.name for e in trace] == [e.name for e in plain]
    assert not any(e.replayed for e in trace if e.name == "WhereDummyDq")
