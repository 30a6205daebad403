"""``QDQSelectorActionTransformer`` (qdq_transformer/selectors_actions, notes selector_action.md, spec §7).

For each node in the topological order of the graph at the start of the call (subgraphs first), on the CPU/DML/
ACL/CUDA/unassigned EPs, the registry entries for the node's op key are tried (version list, the rule's EP list,
then its selector); the first selection wins and its action rewrites the unit::

    DQ ─> Conv ─> [redundant Relu/Clip] ─> Q      =>   QLinearConv
    DQ ─> Add <─ DQ, Add ─> Q                      =>   com.microsoft.QLinearAdd
    DQ ─> Gemm <─ DQ (no Q)                        =>   com.microsoft.QGemm (float output)
    DQ ─> MatMul <─ DQ (no Q)                      =>   com.microsoft.MatMulIntegerToFloat
    DQ ─> Reshape ─> Q (same params)               =>   Reshape on the quantized tensor

Every decision is an event of the run (:mod:`qdqopt.events`), in the order the nodes are visited: each rule that
refuses a target records a ``no-match`` (the version or EP check's reason, or the selector's
:class:`~qdqopt.events.NoMatch`), the rule that takes it ``Matched <op>`` (ORT's VERBOSE line) and then ``fused``
or ``dropped`` with what the unit became; a node with DQ inputs or Q consumers and no rule for its op records a
``no-match`` without a rule. Their payload is a :class:`~qdqopt.events.Unit` (target, op, rule, DQs, Qs).
:func:`unit_reports` reads them back, one :class:`UnitReport` per target; :func:`explain_units` runs the transformer
on a copy of a graph and reads its events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qdqopt import events
from qdqopt.events import Event, Kind, NoMatch, Unit, emit_matched, emit_no_match, say
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.qdq.actions import DropAction
from qdqopt.passes.qdq.registry import Entry, build_registry, entries_for
from qdqopt.passes.qdq.selectors import Ctx, Selection, find_children_by_type, find_parents_by_type

__all__ = ["QDQSelectorActionTransformer", "UnitReport", "explain_units", "unit_reports"]

#: the outcomes of a unit whose events end with the rule that took it
_TAKEN = {Kind.FUSED: "fused", Kind.DROPPED: "dropped"}


@dataclass(frozen=True)
class UnitReport:
    """What the transformer did with one target node, read from its events (:func:`unit_reports`): the
    ``no-match`` events of the rules that refused it, then the ``fused`` or ``dropped`` event of the rule that took
    it, if one did."""

    target: str
    op_type: str
    #: the rule that took it, or the rules tried ("/"-joined), or None when no rule exists for its op
    rule: str | None
    dq_nodes: list[str]
    q_nodes: list[str]
    outcome: str  # "fused" | "dropped" | "rejected" | "no rule"
    result_op: str | None
    events: tuple[Event, ...]

    @property
    def reasons(self) -> list[str]:
        """Why it stays: its ``no-match`` events' reasons, each after its rule's name when several rules were tried
        (none once a rule took it)."""
        if self.outcome in _TAKEN.values():
            return []
        refusals = [e for e in self.events if e.kind is Kind.NO_MATCH]
        several = len({_unit(e).rule for e in refusals}) > 1
        return [f"[{_unit(e).rule}] {e.text}" if several else e.text for e in refusals]


def _unit(event: Event) -> Unit:
    assert isinstance(event.data, Unit)
    return event.data


def _op_key(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _names(nodes: Iterable[Node | None]) -> tuple[str, ...]:
    return tuple(n.name for n in nodes if n is not None)


class QDQSelectorActionTransformer(GraphTransformer):
    """``QDQSelectorActionTransformer`` with the CPU EP registry."""

    name = "QDQSelectorActionTransformer"
    compatible_eps = (
        "CPUExecutionProvider",
        "DmlExecutionProvider",
        "ACLExecutionProvider",
        "CUDAExecutionProvider",
        "",
    )

    def __init__(self) -> None:
        self.registry: list[Entry] = build_registry()
        self.registry_key = (4, 0)

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        level = int(ctx.config.get("session.qdq_matmulnbits_accuracy_level", "4") or "4")
        block = int(ctx.config.get("session.qdq_matmulnbits_block_size", "0") or "0")
        if self.registry_key != (level, block):
            self.registry = build_registry(level, block)
            self.registry_key = (level, block)
        sctx = Ctx(graph, ctx.int8_allowed)
        return self.visit_in_order(graph, ctx, graph_level, lambda node: self._match(graph, sctx, node))

    def _match(self, graph: Graph, sctx: Ctx, node: Node) -> bool:
        if not self.node_is_compatible(node):
            return False
        key = _op_key(node)
        entries = entries_for(self.registry, key)
        recording = events.active() is not None
        for entry in entries:
            versions = entry.ops[key]
            refusal: NoMatch | None = None
            if versions and node.since_version not in versions:
                refusal = NoMatch(f"{node.op_type}-{node.since_version} is not in versions {list(versions)}")
            elif entry.eps and node.ep not in entry.eps:
                refusal = NoMatch(f"EP {node.ep or '(none)'!r} not in {list(entry.eps)}")
            else:
                result = entry.selector.select(sctx, node)
                if isinstance(result, Selection):
                    emit_matched(node.name, node.op_type)
                    unit = Unit(
                        node.name,
                        node.qualified_op,
                        entry.name,
                        _names(result.dq_nodes),
                        _names(result.q_nodes),
                        entry.action.result_op(result),
                    )
                    entry.action.run(graph, sctx, result)
                    if recording:
                        self._taken(unit, isinstance(entry.action, DropAction))
                    return True
                refusal = result
            if recording:
                emit_no_match(refusal, node.name, self._unit(graph, node, entry.name))
        if recording and not entries and node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            unit = self._unit(graph, node, None)
            if unit.dq_nodes or unit.q_nodes:
                emit_no_match(NoMatch(f"no QDQ selector/action rule for {key} on the CPU EP"), node.name, unit)
        return False

    @staticmethod
    def _unit(graph: Graph, node: Node, rule: str | None) -> Unit:
        """The unit around ``node`` as a refusal names it: its DQ inputs and Q consumers."""
        dqs = find_parents_by_type(graph, node, "DequantizeLinear")
        qs = find_children_by_type(graph, node, "QuantizeLinear")
        return Unit(node.name, node.qualified_op, rule, _names(dqs), _names(qs))

    @staticmethod
    def _taken(unit: Unit, dropped: bool) -> None:
        kind = Kind.DROPPED if dropped else Kind.FUSED
        say(kind, (unit.target, *unit.dq_nodes, *unit.q_nodes), unit, unit=unit)


def unit_reports(recorded: Iterable[Event]) -> list[UnitReport]:
    """One report per target, in the order the transformer visited them, from the events of one application of
    the transformer (events without a :class:`~qdqopt.events.Unit` are passed over)."""
    groups: list[list[Event]] = []
    for event in recorded:
        if not isinstance(event.data, Unit):
            continue
        last = groups[-1] if groups else None
        if last is None or _unit(last[-1]).target != event.data.target or last[-1].kind in _TAKEN:
            groups.append([event])
        else:
            last.append(event)
    return [_report(group) for group in groups]


def _report(group: list[Event]) -> UnitReport:
    final = group[-1]
    taken = _TAKEN.get(final.kind)
    unit = _unit(final if taken else group[0])
    if taken:
        rule, outcome = unit.rule, taken
    else:
        tried = [u.rule for u in map(_unit, group) if u.rule is not None]
        rule = "/".join(dict.fromkeys(tried)) or None
        outcome = "rejected" if rule else "no rule"
    return UnitReport(
        unit.target, unit.op, rule, list(unit.dq_nodes), list(unit.q_nodes), outcome, unit.result_op, tuple(group)
    )


def explain_units(graph: Graph, ctx: PassContext) -> list[UnitReport]:
    """Every candidate unit of ``graph`` as the transformer sees it, read from the events of one application on a
    copy (``graph`` itself is not modified)."""
    work = graph.clone()  # the types inferred so far included
    transformer = QDQSelectorActionTransformer()
    log = events.EventLog()
    with events.recording(log), log.scope(pass_name=transformer.name):
        work.begin_pass()
        transformer.apply_impl(work, ctx, 0)
    return unit_reports(log.events)
