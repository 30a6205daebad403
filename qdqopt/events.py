"""Events: what a run did, in the very words ORT 1.32 logs at VERBOSE (``log_severity_level=0``).

``qdqopt trace`` shows the INFO line ``GraphTransformer <name> modified: <0|1>`` per transformer application; at
VERBOSE ORT says much more, and those lines pin what the saved model alone does not show: the fixed-point loop of each
level, the apply-once skips, the optimization loop, the node units the selector-action transformers matched, and the
order in which ``Graph::Resolve`` removes what passes left unused. A run records each of them as an :class:`Event`:

* ``no-transformers`` (V, manager): ``No graph transformers registered for level <L>.``
* ``level`` (V, manager): ``Applying <N> graph transformer(s) for level <L> for up to <S> step(s).``
* ``step-start`` (V, manager): ``Graph transformer step <s> of <S> for level <L> started.``
* ``skip`` (V, manager): ``Skipping graph transformer <X> on step <s> because it should only apply once.``
* ``apply`` (V, manager): ``Applying graph transformer <X> on step <s>.``
* ``matched`` (V, the selector-action transformers: QDQSelectorActionTransformer, ConvActivationFusion,
  ConvAddActivationFusion, MatMulNBitsFusion): ``Matched <op type>``, before the action rewrites the unit;
* ``modified`` (I, manager): ``GraphTransformer <X> modified: <0|1> with status: OK``;
* ``remove-initializer`` (I, Resolve): ``Removing initializer '<name>'. It is no longer used by any node.``
* ``remove-nodearg`` (I, Resolve): ``Removing NodeArg '<name>'. It is no longer used by any node.``
* ``step-end`` (V, manager): ``Graph transformer step <s> of <S> for level <L> completed. graph_changed: <0|1>.``
* ``stop`` (V, manager): ``Stopping graph transformer iteration for level <L> after step <s> because the graph was
  not modified.``
* ``loop`` (I, manager): ``Running graph optimizations in loop <n> time/s (Graph Optimizations Loop Level : <l>)``.

ORT logs no reason when a selector, filter or check refuses a candidate, and nothing when a unit is fused: a run
records those too, as qdqopt's own kinds (:attr:`Kind.ort` is False; :meth:`EventLog.lines`, what ``qdqopt trace
--ort --verbose`` compares with ORT's log, leaves them out), so that ``qdqopt explain`` and ``trace --why`` read the
same channel:

* ``no-match`` (the selector-action transformers' selectors, NhwcTransformer's conversion table and filters, the
  transpose optimizer's handlers and cost check): a candidate refused; the text is the reason (:class:`NoMatch`),
  in ORT's words where ORT has them (a status message or a comment), the nodes start with the candidate;
* ``fused`` / ``dropped`` (QDQSelectorActionTransformer): a node unit replaced by one node, or its Q/DQ dropped
  around the target, with what it became; ``fused`` also comes from the transformer fusions (GeluFusion,
  LayerNormFusion, AttentionFusion, ...): the candidate (first of the nodes) replaced by one node, its op and
  name in a :class:`Fusion`;
* ``converted`` (NhwcTransformer): a node swapped for its channels-last form;
* ``pushed`` (the transpose optimizer): a Transpose pushed through a node, with what the node became;
* ``changed`` (the pipeline, after each transformer application that modified the graph): the nodes it added,
  removed and rewired (``data``: a :class:`qdqopt.graph.Changes`), the Resolve's removals excepted.

Their :attr:`Event.data` holds the details a reader needs (:class:`Unit` for a node unit, :class:`Fusion` for a
transformer fusion, the transpose optimizer's ``PushEvent`` for a layout decision).

Steps are printed 1-based, as ORT prints them; levels are ORT's ``TransformerLevel`` numbers (0 to 4). Resolve
removes unused initializers first, then unused untyped NodeArgs, each in the iteration order of the graph's
``std::unordered_map`` (``name_to_initial_tensor_``, ``node_args_``), the main graph first, then every subgraph
depth first.

Emitters do not hold the log: the pipeline makes an :class:`EventLog` the active one for the run
(:func:`recording`), sets the scope (level, step, pass) as it goes, and :func:`emit` adds to whichever log is active
(or does nothing outside a run, e.g. when ``qdqopt explain`` runs a pass on a copy).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from mypy_extensions import mypyc_attr

__all__ = [
    "QDQOPT_ONLY",
    "TEXTS",
    "Event",
    "EventLog",
    "Fusion",
    "Kind",
    "NoMatch",
    "Unit",
    "active",
    "emit",
    "emit_fused",
    "emit_matched",
    "emit_no_match",
    "recording",
    "say",
    "text",
]


class Kind(enum.StrEnum):
    """What an event is (one kind per ORT log message)."""

    NO_TRANSFORMERS = "no-transformers"
    LEVEL = "level"
    STEP_START = "step-start"
    SKIP = "skip"
    APPLY = "apply"
    MATCHED = "matched"
    MODIFIED = "modified"
    REMOVE_INITIALIZER = "remove-initializer"
    REMOVE_NODEARG = "remove-nodearg"
    STEP_END = "step-end"
    STOP = "stop"
    LOOP = "loop"
    # qdqopt's own: ORT logs none of these
    NO_MATCH = "no-match"
    FUSED = "fused"
    DROPPED = "dropped"
    CONVERTED = "converted"
    PUSHED = "pushed"
    CHANGED = "changed"

    @property
    def ort(self) -> bool:
        """Whether ORT logs this message (False for qdqopt's own kinds, never compared with ORT's log)."""
        return self not in QDQOPT_ONLY

    @property
    def severity(self) -> str:
        """ORT's severity letter for this message: ``V`` (VERBOSE) or ``I`` (INFO); ``Q`` for qdqopt's own."""
        return "Q" if self in QDQOPT_ONLY else "I" if self in _INFO else "V"


_INFO = frozenset({Kind.MODIFIED, Kind.REMOVE_INITIALIZER, Kind.REMOVE_NODEARG, Kind.LOOP})
#: the kinds ORT does not log (the reasons and outcomes qdqopt adds)
QDQOPT_ONLY = frozenset({Kind.NO_MATCH, Kind.FUSED, Kind.DROPPED, Kind.CONVERTED, Kind.PUSHED, Kind.CHANGED})

#: the kinds ``Graph::Resolve`` emits
RESOLVE_KINDS = frozenset({Kind.REMOVE_INITIALIZER, Kind.REMOVE_NODEARG})


@mypyc_attr(native_class=False)  # compiled, a plain class still: :func:`_event` fills its ``__dict__``
@dataclass(frozen=True)
class Event:
    """One thing a run did, as ORT logs it.

    ``pass_name``, ``level`` and ``step`` are the scope it happened in (the transformer being applied, ORT's
    ``TransformerLevel`` number and the 1-based step), where there is one; ``nodes`` names the nodes or values it is
    about (the matched node, the removed initializer or NodeArg, the refused candidate first); ``plugin`` marks events
    of a pass of one's own, which ORT knows nothing of (left out of :meth:`EventLog.lines` unless asked for); ``data``
    is the payload of qdqopt's own kinds (:class:`Unit`, or the transpose optimizer's ``PushEvent``).
    """

    kind: Kind
    text: str
    pass_name: str | None = None
    level: int | None = None
    step: int | None = None
    nodes: tuple[str, ...] = ()
    plugin: bool = False
    data: object | None = None  # (``object`` alone: mypyc cannot resolve the dataclass's annotation)

    @property
    def severity(self) -> str:
        return self.kind.severity

    @property
    def ort(self) -> bool:
        """Whether ORT's log holds this line (not a plugin's event, not one of qdqopt's own kinds)."""
        return self.kind.ort and not self.plugin

    def __str__(self) -> str:
        return self.text


# ------------------------------------------------------------------------------------------------ the words
#: What an event of each kind says, as a ``str.format`` template (:func:`text` fills it in): ORT's words for ORT's
#: kinds, then qdqopt's own (``fused`` and ``dropped`` for a node unit: a transformer fusion says
#: :attr:`Fusion.text`); a ``no-match`` event says its reason.
TEXTS: dict[Kind, str] = {
    Kind.NO_TRANSFORMERS: "No graph transformers registered for level {level}.",
    Kind.LEVEL: "Applying {count} graph transformer(s) for level {level} for up to {steps} step(s).",
    Kind.STEP_START: "Graph transformer step {step} of {steps} for level {level} started.",
    Kind.SKIP: "Skipping graph transformer {name} on step {step} because it should only apply once.",
    Kind.APPLY: "Applying graph transformer {name} on step {step}.",
    Kind.MATCHED: "Matched {op_type}",
    Kind.MODIFIED: "GraphTransformer {name} modified: {modified:d} with status: OK",
    Kind.REMOVE_INITIALIZER: "Removing initializer '{name}'. It is no longer used by any node.",
    Kind.REMOVE_NODEARG: "Removing NodeArg '{name}'. It is no longer used by any node.",
    Kind.STEP_END: "Graph transformer step {step} of {steps} for level {level} completed. graph_changed: {changed:d}.",
    Kind.STOP: "Stopping graph transformer iteration for level {level} after step {step} because the graph was not"
    " modified.",
    Kind.LOOP: "Running graph optimizations in loop {iteration} time/s (Graph Optimizations Loop Level : {loop_level})",
    Kind.FUSED: "{unit.op} unit fused into {unit.result_op} (rule {unit.rule})",
    Kind.DROPPED: "Q/DQ around {unit.op} dropped, {unit.result_op} stays (rule {unit.rule})",
    Kind.CONVERTED: "{op} converted to {became}",
    Kind.PUSHED: "Transpose pushed through {op}: {became}",
    Kind.CHANGED: "{name}: {added} node(s) added, {removed} removed, {rewired} rewired",
}


def text(kind: Kind, **fields: object) -> str:
    """What an event of ``kind`` says: its :data:`TEXTS` template, ``fields`` filled in."""
    return TEXTS[kind].format(**fields)


# ------------------------------------------------------------------------------------------------ qdqopt's own
@dataclass(frozen=True, init=False)
class NoMatch:
    """Why a selector, filter or check refused a candidate: the reason (ORT's words where ORT has them) and the
    nodes it names besides the candidate; ``also`` holds further reasons checked at the same point, the first one
    being the one ORT stops at. Selectors return it; the pass that asked emits it as ``no-match`` events."""

    reason: str
    nodes: tuple[str, ...] = ()
    also: tuple[str, ...] = ()

    def __init__(self, reason: str, nodes: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "also", also)

    @property
    def reasons(self) -> tuple[str, ...]:
        return (self.reason, *self.also)


@dataclass(frozen=True, init=False)
class Unit:
    """The node unit a selector-action event is about: the target, its op (``domain.op`` outside ONNX), the rule
    tried (None: no rule for the op), the DequantizeLinear and QuantizeLinear nodes around it and, once fused or
    dropped, what it became."""

    target: str
    op: str
    rule: str | None
    dq_nodes: tuple[str, ...] = ()
    q_nodes: tuple[str, ...] = ()
    result_op: str | None = None

    def __init__(
        self,
        target: str,
        op: str,
        rule: str | None,
        dq_nodes: tuple[str, ...] = (),
        q_nodes: tuple[str, ...] = (),
        result_op: str | None = None,
    ) -> None:
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "dq_nodes", dq_nodes)
        object.__setattr__(self, "q_nodes", q_nodes)
        object.__setattr__(self, "result_op", result_op)


@dataclass(frozen=True, init=False)
class Fusion:
    """What a transformer fusion (GeluFusion, LayerNormFusion, AttentionFusion, ...) made of a candidate: the op of
    the node it added (``domain.op`` outside ONNX) and that node's name."""

    op: str
    node: str

    def __init__(self, op: str, node: str) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "node", node)

    @property
    def text(self) -> str:
        """The ``fused`` event's text: ``fused into <op> '<node>'``."""
        return f"fused into {self.op} {self.node!r}"


# ------------------------------------------------------------------------------------------------ the log
def _event(
    kind: Kind,
    text: str,
    pass_name: str | None,
    level: int | None,
    step: int | None,
    nodes: tuple[str, ...],
    plugin: bool,
    data: object,
) -> Event:
    """``Event(...)`` without the frozen dataclass's ``__init__``, which sets each field through
    ``object.__setattr__`` (a run records hundreds of events): the fields go straight into the instance's dict, as
    that ``__init__`` puts them."""
    event = object.__new__(Event)
    own = event.__dict__  # (each field stored in turn: cheaper than update()'s keywords)
    own["kind"] = kind
    own["text"] = text
    own["pass_name"] = pass_name
    own["level"] = level
    own["step"] = step
    own["nodes"] = nodes
    own["plugin"] = plugin
    own["data"] = data
    return event


@dataclass
class EventLog:
    """The events of one run, in order, with the scope new events are recorded in."""

    events: list[Event] = field(default_factory=list)
    #: the current scope (set by the pipeline as it goes)
    pass_name: str | None = None
    level: int | None = None
    step: int | None = None
    plugin: bool = False

    def add(self, kind: Kind, text: str, nodes: Sequence[str] = (), data: object = None) -> Event:
        """Record an event in the current scope and return it."""
        event = _event(kind, text, self.pass_name, self.level, self.step, tuple(nodes), self.plugin, data)
        self.events.append(event)
        return event

    def say(self, kind: Kind, nodes: Sequence[str] = (), data: object = None, **fields: object) -> Event:
        """:meth:`add` an event that says what ``kind`` says (:func:`text`), ``fields`` filled in."""
        return self.add(kind, TEXTS[kind].format_map(fields), nodes, data)  # (text, inlined: a run says hundreds)

    def add_again(self, recorded: Sequence[Event]) -> None:
        """Record ``recorded`` (events of an earlier pass application) again, in the current scope: what the same
        pass says once more on the same graph (the manager's replay of a pass that found nothing)."""
        for e in recorded:
            self.add(e.kind, e.text, e.nodes, e.data)

    def insert_before_resolve(self, since: int, kind: Kind, text: str, nodes: Sequence[str] = ()) -> Event:
        """Record an event before the trailing run of Resolve events recorded since index ``since``.

        ``GraphTransformer::Apply`` logs its ``modified`` line between the transformer's own work and the Resolve
        that follows it; qdqopt's passes resolve inside :meth:`~qdqopt.passes.GraphTransformer.apply`, so the
        manager puts the line back where ORT logs it.
        """
        event = _event(kind, text, self.pass_name, self.level, self.step, tuple(nodes), self.plugin, None)
        at = len(self.events)
        while at > since and self.events[at - 1].kind in RESOLVE_KINDS:
            at -= 1
        self.events.insert(at, event)
        return event

    def scope(
        self,
        *,
        pass_name: str | None = None,
        level: int | None = None,
        step: int | None = None,
        plugin: bool = False,
    ) -> _Scope:
        """Record the events of the ``with`` block in that scope (the previous scope comes back after it)."""
        return _Scope(self, pass_name, level, step, plugin)

    def ort_events(self) -> list[Event]:
        """The events ORT would log too (everything but those of passes of one's own and qdqopt's own kinds)."""
        return [e for e in self.events if e.ort]

    def lines(self, *, plugins: bool = False) -> list[str]:
        """The events' texts, in order: what ORT's filtered VERBOSE log holds (plugins' events only if asked; never
        qdqopt's own kinds, which ORT does not log)."""
        return [e.text for e in self.events if e.kind.ort and (plugins or not e.plugin)]

    def of_kind(self, *kinds: Kind, pass_name: str | None = None) -> list[Event]:
        """The events of those kinds (of that pass, if given), in order."""
        return [e for e in self.events if e.kind in kinds and (pass_name is None or e.pass_name == pass_name)]


class _Scope:
    """:meth:`EventLog.scope`'s context manager (a class, not ``contextlib.contextmanager``, whose machinery is
    interpreted Python: the manager opens a scope per pass application)."""

    def __init__(self, log: EventLog, pass_name: str | None, level: int | None, step: int | None, plugin: bool) -> None:
        self.log = log
        self.scope = (pass_name, level, step, plugin)
        self.saved = self.scope

    def __enter__(self) -> EventLog:
        log = self.log
        self.saved = (log.pass_name, log.level, log.step, log.plugin)
        log.pass_name, log.level, log.step, log.plugin = self.scope
        return log

    def __exit__(self, *exc_info: object) -> None:
        log = self.log
        log.pass_name, log.level, log.step, log.plugin = self.saved


_ACTIVE: Final[contextvars.ContextVar[EventLog | None]] = contextvars.ContextVar("qdqopt_event_log", default=None)


@contextlib.contextmanager
def recording(log: EventLog) -> Iterator[EventLog]:
    """Make ``log`` the log :func:`emit` adds to, for the ``with`` block."""
    token = _ACTIVE.set(log)
    try:
        yield log
    finally:
        _ACTIVE.reset(token)


def active() -> EventLog | None:
    """The log events go to now, or None outside a run."""
    return _ACTIVE.get()


def emit(kind: Kind, text: str, nodes: Sequence[str] = (), data: object = None) -> Event | None:
    """Record an event in the active log (nothing happens when no run is recording)."""
    log = _ACTIVE.get()
    return log.add(kind, text, nodes, data) if log is not None else None


def say(kind: Kind, nodes: Sequence[str] = (), data: object = None, **fields: object) -> Event | None:
    """:func:`emit` an event that says what ``kind`` says (:func:`text`, ``fields`` filled in only when a run is
    recording)."""
    log = _ACTIVE.get()  # (EventLog.say, without its keywords packed again)
    return log.add(kind, TEXTS[kind].format_map(fields), nodes, data) if log is not None else None


def emit_fused(candidate: str, op: str, node: str, domain: str = "") -> None:
    """Record a ``fused`` event: a transformer fusion's ``candidate`` became node ``node`` of type ``op`` (in
    ``domain``); ``data`` is a :class:`Fusion`, the candidate is the first of the nodes."""
    fusion = Fusion(f"{domain}.{op}" if domain and domain != "ai.onnx" else op, node)
    emit(Kind.FUSED, fusion.text, (candidate, node), fusion)


def emit_matched(node: str, op_type: str) -> None:
    """Record a ``matched`` event: ``SelectorActionTransformer::MatchAndProcess`` matched the unit of ``node`` (of
    type ``op_type``) and its action is about to rewrite it."""
    say(Kind.MATCHED, (node,), op_type=op_type)


def emit_no_match(no_match: NoMatch, candidate: str, data: object = None) -> None:
    """Record ``no-match`` events for ``candidate`` in the active log: one per reason, the candidate first among
    the nodes."""
    log = _ACTIVE.get()
    if log is None:
        return
    nodes = (candidate, *(n for n in no_match.nodes if n != candidate))
    for reason in no_match.reasons:
        log.add(Kind.NO_MATCH, reason, nodes, data)
