"""The pass manager: ORT's ``InferenceSession::TransformGraph`` and ``GraphTransformerManager`` (spec §1.2, §1.3).

Order of a session:

1. ``EnsureUniqueDQForNodeUnit`` once (stage ``pre``), unless ``session.disable_quant_qdq=1``;
2. Level1 (``L1``) with the fixed-point loop: every registered transformer in order; if any modified the graph,
   the whole list runs again (apply-once transformers only in the first step), at most 10 steps;
3. partitioning (:func:`qdqopt.partition.partition`): a node is assigned to ``CPUExecutionProvider`` iff a CPU
   kernel matches its types; the others (fp16 ops without an fp16 kernel) keep the EP ``""``;
4. the optimization loop: Level2, Level3 (each with the fixed-point loop), ``InsertCastTransformer`` (which runs
   ``RemoveDuplicateCastTransformer`` at its end, so ORT logs ``RemoveDuplicateCastTransformer`` then
   ``CastFloat16Transformer``, both with the one shared flag), Level4; it repeats only when a change counts for
   ``session.graph_optimizations_loop_level`` (1: Level4 changes; 2 or more: any change), at most 10 times;
5. ``MemcpyTransformer``; then session creation fails (:class:`~qdqopt.errors.ModelError`) if a node is left without
   a kernel, as ORT's does before it would save the model.

Each run yields a trace: one :class:`TraceEntry` per transformer application, printed like ORT's INFO line
``GraphTransformer <name> modified: <0|1>``, with its stage, step and the op-count change it made; and its events
(:mod:`qdqopt.events`): what ORT logs at VERBOSE, the fixed-point loop's steps, skips and stops, the optimization
loop, the node units the selector-action transformers matched and what each Resolve removed, in ORT's words and
order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from qdqopt import events
from qdqopt.config import SessionConfig
from qdqopt.graph import Changes, CollectionPaused, Graph, Model
from qdqopt.levels import Level
from qdqopt.partition import check_kernels, partition
from qdqopt.passes import GraphTransformer, PassContext, RuleBasedTransformer
from qdqopt.passes.insert_cast import InsertCastTransformer, RemoveDuplicateCastTransformer
from qdqopt.registry import PassSpec, Plugin, RuleSpec, implementation, registered_passes, rule_implementation
from qdqopt.target import Target

__all__ = ["MAX_STEPS", "PipelineResult", "StopRun", "TraceEntry", "run_pipeline"]

MAX_STEPS = 10


@dataclass(init=False)
class TraceEntry:
    """One transformer application."""

    name: str
    stage: str
    step: int
    modified: bool
    implemented: bool
    op_delta: dict[str, int] = field(default_factory=dict)
    #: rules of a rule-based transformer that ORT would run but qdqopt skips (not implemented yet)
    missing_rules: tuple[str, ...] = ()
    #: a pass of one's own (:class:`~qdqopt.registry.Plugin`): ORT has no such pass and never logs this line
    plugin: bool = False
    #: wall time of the application (the pass and the Resolve after it), in seconds
    seconds: float = 0.0
    #: the pass did not run: its last application in the level found and changed nothing, and the graph is the same
    #: since, so that application's events were recorded again (see ``_Run.apply``)
    replayed: bool = False

    def __init__(
        self,
        name: str,
        stage: str,
        step: int,
        modified: bool,
        implemented: bool,
        op_delta: dict[str, int] | None = None,
        missing_rules: tuple[str, ...] = (),
        plugin: bool = False,
        seconds: float = 0.0,
        replayed: bool = False,
    ) -> None:
        self.name, self.stage, self.step, self.modified, self.implemented = name, stage, step, modified, implemented
        self.op_delta = {} if op_delta is None else op_delta
        self.missing_rules, self.plugin, self.seconds, self.replayed = missing_rules, plugin, seconds, replayed

    def ort_line(self) -> str:
        return f"GraphTransformer {self.name} modified: {int(self.modified)}"


@dataclass
class PipelineResult:
    """What a run did: its trace and the names it could not run (not implemented yet)."""

    trace: list[TraceEntry] = field(default_factory=list)
    unimplemented: list[str] = field(default_factory=list)
    #: passes that are implemented but do not cover this model (name -> reason); the run was made without them
    unsupported: dict[str, str] = field(default_factory=dict)
    #: the context the passes got (set when the run starts)
    context: PassContext | None = None
    #: whether the run ended early at ``stop_before``
    stopped: bool = False
    #: the passes of one's own registered for this run (not disabled, at a stage the level runs), in order
    plugins: list[str] = field(default_factory=list)
    #: what ORT would log at VERBOSE for this run (:mod:`qdqopt.events`)
    events: events.EventLog = field(default_factory=events.EventLog)

    def ort_lines(self) -> list[str]:
        """The lines ORT's log would hold: every entry but those of plugins, which ORT knows nothing of."""
        return [e.ort_line() for e in self.trace if not e.plugin]

    def verbose_lines(self) -> list[str]:
        """The lines ORT's VERBOSE log would hold (its optimizer lines, see :mod:`qdqopt.reference`), in order."""
        return self.events.lines()


Snapshot = Callable[[str, Graph], None]
#: called after every transformer application with its trace entry and the graph as the application left it
EntryHook = Callable[["TraceEntry", Graph], None]


def op_counts(graph: Graph) -> dict[str, int]:
    """Op counts of a graph and its subgraphs, keyed ``op`` or ``domain.op``."""
    return graph.op_counts()


def _log_changes(log: events.EventLog, name: str, changes: Changes) -> None:
    """The ``changed`` event of a transformer application that modified the graph."""
    nodes = [n for _, n, _ in (*changes.added, *changes.removed)]
    added, removed, rewired = len(changes.added), len(changes.removed), len(changes.rewired)
    log.say(events.Kind.CHANGED, nodes, changes, name=name, added=added, removed=removed, rewired=rewired)


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    keys = sorted(set(before) | set(after))
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys if after.get(k, 0) != before.get(k, 0)}


def _instantiate(spec: PassSpec, rules: tuple[RuleSpec, ...]) -> GraphTransformer | None:
    if spec.rules:
        classes = [rule_implementation(r) for r in rules]
        implemented = [cls() for cls in classes if cls is not None]
        return RuleBasedTransformer(spec.name, implemented, spec.eps) if implemented else None
    cls = implementation(spec)
    return cls() if cls is not None else None


def run_pipeline(
    model: Model,
    level: Level,
    *,
    config: SessionConfig | None = None,
    disabled: set[str] | None = None,
    target: Target | None = None,
    on_pass: Snapshot | None = None,
    stop_before: str | None = None,
    plugins: Sequence[Plugin] = (),
    on_entry: EntryHook | None = None,
) -> PipelineResult:
    """Run ORT's session transformations on ``model`` in place.

    ``plugins`` (passes of one's own) run at their declared places; their trace entries are marked
    (:attr:`TraceEntry.plugin`). With ``stop_before``, the run stops right before the first application of that
    transformer (the graph is then exactly what that pass would see; ``PipelineResult.context`` is the context it
    would get). ``on_pass(name, graph)`` and ``on_entry(entry, graph)`` are called after every application (the
    latter with its :class:`TraceEntry`); either may raise :class:`StopRun` to end the run right there
    (``PipelineResult.stopped``).
    """
    cfg = config or SessionConfig()
    tgt = target or Target.detect()
    off = set(disabled or ()) | set(cfg.disabled_by_config())
    ctx = PassContext(config=cfg, target=tgt)
    result = PipelineResult()
    plan = registered_passes(level, cfg, tgt, off, plugins)
    result.plugins = [spec.name for spec, _ in plan if spec.is_plugin]
    by_stage: dict[str, list[tuple[PassSpec, GraphTransformer | None, tuple[RuleSpec, ...]]]] = {}
    for spec, rules in plan:
        by_stage.setdefault(spec.stage, []).append((spec, _instantiate(spec, rules), rules))
        if spec.rules:
            result.unimplemented.extend(r.name for r in rules if rule_implementation(r) is None)
        elif implementation(spec) is None:
            result.unimplemented.append(spec.name)
    missing = {
        spec.name: tuple(r.name for r in rules if rule_implementation(r) is None) for spec, rules in plan if spec.rules
    }
    run = _Run(model.graph, ctx, result, by_stage, missing, on_pass, on_entry, stop_before)
    result.context = ctx
    try:
        with CollectionPaused(), events.recording(result.events):
            _run_stages(model.graph, ctx, cfg, by_stage, run.apply, run.apply_level, run.apply_insert_cast)
    except StopRun:
        result.stopped = True
    return result


class _Run:
    """The state of one :func:`run_pipeline` and its steps, which :func:`_run_stages` calls.

    (An object, not closures over the run's locals: compiled with mypyc, nested functions share one environment
    object that holds them, a reference cycle through the graph, so every run's model waited for the cyclic garbage
    collector.)"""

    def __init__(
        self,
        graph: Graph,
        ctx: PassContext,
        result: PipelineResult,
        by_stage: dict[str, list[tuple[PassSpec, GraphTransformer | None, tuple[RuleSpec, ...]]]],
        missing: dict[str, tuple[str, ...]],
        on_pass: Snapshot | None,
        on_entry: EntryHook | None,
        stop_before: str | None,
    ) -> None:
        self.graph, self.ctx, self.result, self.log = graph, ctx, result, result.events
        self.by_stage, self.missing = by_stage, missing
        self.on_pass, self.on_entry, self.stop_before = on_pass, on_entry, stop_before
        #: the level's passes whose last application found nothing and changed nothing: the graph's state stamp
        #: then, and the events the application recorded (see :meth:`apply`)
        self.quiet: dict[str, tuple[tuple[int, ...], list[events.Event]]] = {}

    def record(self, entry: TraceEntry) -> None:
        """One pass application's trace entry, and the callers' hooks told of it."""
        self.result.trace.append(entry)
        if self.on_pass is not None:
            self.on_pass(entry.name, self.graph)
        if self.on_entry is not None:
            self.on_entry(entry, self.graph)

    def apply(self, spec: PassSpec, transformer: GraphTransformer | None, step: int) -> bool:
        graph, log = self.graph, self.log
        if spec.name == self.stop_before:
            raise _Stop
        before = op_counts(graph)
        # A pass that found nothing on a graph finds nothing on it again (ORT's passes read nothing but the graph):
        # where no application changed the graph since this pass's last one, which found and changed nothing, that
        # application's events are recorded again instead of running the pass (a level's second step, after a
        # first whose changes all came before this pass, runs most of its passes on the graph they left).
        stamp = graph.state_stamp()
        quiet = self.quiet.pop(spec.name, None)
        plugin = spec.is_plugin
        with log.scope(pass_name=spec.name, level=log.level, step=log.step, plugin=plugin):
            if log.level is not None:  # GraphTransformerManager::ApplyTransformers
                log.say(events.Kind.APPLY, name=spec.name, step=step + 1)
            mark = len(log.events)
            start = time.perf_counter()
            replayed = False
            if quiet is not None and quiet[0] == stamp:
                replayed = True
                log.add_again(quiet[1])
                self.quiet[spec.name] = quiet
                modified = False
                seconds = time.perf_counter() - start
            else:
                graph.take_changes()
                modified = transformer.apply(graph, self.ctx) if transformer is not None else False
                seconds = time.perf_counter() - start
                line = events.text(events.Kind.MODIFIED, name=spec.name, modified=modified)
                log.insert_before_resolve(mark, events.Kind.MODIFIED, line)
                changes = graph.take_changes()
                if modified:
                    self.quiet.clear()  # (the stamp is the safeguard; a reported change ends every replay)
                    _log_changes(log, spec.name, changes)
                elif transformer is not None and not plugin and not changes:
                    # (kept with the stamp from before the application: one that changed the graph without saying
                    # so, a name generated say, moved the stamp, and is not replayed)
                    self.quiet[spec.name] = (stamp, log.events[mark:])
        entry = TraceEntry(
            spec.name,
            spec.stage,
            step,
            modified,
            transformer is not None,
            plugin=plugin,
            seconds=seconds,
            replayed=replayed,
        )
        entry.missing_rules = self.missing.get(spec.name, ()) if transformer is not None else ()
        if modified:
            entry.op_delta = _delta(before, op_counts(graph))
        self.record(entry)
        return modified

    def apply_insert_cast(self) -> bool:
        """``InsertCastTransformer``: it inserts its Casts, then runs ``RemoveDuplicateCastTransformer::Apply`` with
        its own modified flag; so the remover's line is logged first and both lines print that shared flag."""
        graph, ctx, log = self.graph, self.ctx, self.log
        loop = {spec.name: (spec, transformer) for spec, transformer, _ in self.by_stage.get("loop", [])}
        if not loop:
            return False
        insert_spec, inserter = loop[InsertCastTransformer.name]
        remove_spec, remover = loop[RemoveDuplicateCastTransformer.name]
        assert isinstance(inserter, InsertCastTransformer)
        assert isinstance(remover, RemoveDuplicateCastTransformer)
        before = op_counts(graph)
        graph.take_changes()
        start = time.perf_counter()
        inserted = inserter.insert_casts(graph, ctx)
        middle_time = time.perf_counter()
        middle = op_counts(graph)
        insert_changes = graph.take_changes()
        mark = len(log.events)
        remove_start = time.perf_counter()
        modified = remover.apply_shared(graph, ctx, inserted)
        seconds = {insert_spec.name: middle_time - start, remove_spec.name: time.perf_counter() - remove_start}
        after = op_counts(graph)
        with log.scope(pass_name=remove_spec.name):
            line = events.text(events.Kind.MODIFIED, name=remove_spec.name, modified=modified)
            log.insert_before_resolve(mark, events.Kind.MODIFIED, line)
            if modified:
                _log_changes(log, remove_spec.name, graph.take_changes())
        with log.scope(pass_name=insert_spec.name):
            log.say(events.Kind.MODIFIED, name=insert_spec.name, modified=modified)
            if modified:
                _log_changes(log, insert_spec.name, insert_changes)
        for spec, delta in ((remove_spec, _delta(middle, after)), (insert_spec, _delta(before, middle))):
            entry = TraceEntry(
                spec.name, spec.stage, 0, modified, True, delta if modified else {}, seconds=seconds[spec.name]
            )
            self.record(entry)
        return modified

    def apply_level(self, stage: str) -> bool:
        log = self.log
        self.quiet = {}  # (replays stay within a level's loop)
        entries = self.by_stage.get(stage, [])
        number = int(stage[1:])  # ORT's TransformerLevel
        ort_count = sum(1 for spec, _, _ in entries if not spec.is_plugin)
        if not ort_count:
            log.say(events.Kind.NO_TRANSFORMERS, level=number)
        else:
            log.say(events.Kind.LEVEL, level=number, count=ort_count, steps=MAX_STEPS)
        if not entries:
            return False
        changed_at_all = False
        with log.scope(level=number):
            for step in range(MAX_STEPS):
                log.step = step + 1
                log.say(events.Kind.STEP_START, step=step + 1, steps=MAX_STEPS, level=number)
                changed = False
                for spec, transformer, _ in entries:
                    if step > 0 and spec.apply_once:
                        with log.scope(pass_name=spec.name, level=number, step=step + 1):
                            log.say(events.Kind.SKIP, name=spec.name, step=step + 1)
                        continue
                    changed = self.apply(spec, transformer, step) or changed
                changed_at_all = changed_at_all or changed
                log.say(events.Kind.STEP_END, step=step + 1, steps=MAX_STEPS, level=number, changed=changed)
                if not changed:
                    log.say(events.Kind.STOP, level=number, step=step + 1)
                    break
        return changed_at_all


class StopRun(Exception):
    """Raised to end a run at ``stop_before``, or by a snapshot hook to end it right after an application."""


_Stop = StopRun


def _run_stages(
    graph: Graph,
    ctx: PassContext,
    cfg: SessionConfig,
    by_stage: dict[str, list[tuple[PassSpec, GraphTransformer | None, tuple[RuleSpec, ...]]]],
    apply: Callable[[PassSpec, GraphTransformer | None, int], bool],
    apply_level: Callable[[str], bool],
    apply_insert_cast: Callable[[], bool],
) -> None:
    """``InferenceSession::TransformGraph``'s order of stages."""
    for spec, transformer, _ in by_stage.get("pre", []):
        apply(spec, transformer, 0)
    apply_level("L0")
    apply_level("L1")
    partition(graph)
    ctx.partitioned = True
    loop_level = int(cfg.get("session.graph_optimizations_loop_level", "1") or "1")
    for iteration in range(MAX_STEPS):
        events.say(events.Kind.LOOP, iteration=iteration + 1, loop_level=loop_level)
        changed_l2 = apply_level("L2")
        changed_l3 = apply_level("L3")
        changed_cast = apply_insert_cast()
        changed_l4 = apply_level("L4")
        again = (loop_level >= 1 and changed_l4) or (loop_level >= 2 and (changed_l2 or changed_l3 or changed_cast))
        if not again:
            break
    for spec, transformer, _ in by_stage.get("post", []):
        apply(spec, transformer, 0)
    _final_resolve(graph)
    check_kernels(graph)


def _final_resolve(graph: Graph) -> None:
    """``InferenceSession::Initialize`` resolves the graph once more after ``TransformGraph``: a no-op unless a pass
    changed the graph without reporting it (NhwcTransformer does not report what it did to subgraphs), whose leftovers
    it then removes. qdqopt resolves exactly when there is something to remove, since every Resolve removes all
    there is."""
    if _leaves_something(graph):
        graph.resolve()


def _leaves_something(graph: Graph) -> bool:
    """Whether a Resolve of ``graph`` (or of a subgraph) would remove an initializer or a NodeArg."""
    return graph.has_unused() or any(_leaves_something(sub) for _, _, sub in graph.subgraphs())
