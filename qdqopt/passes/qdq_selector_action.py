"""``QDQSelectorActionTransformer`` (qdq_transformer/selectors_actions, notes selector_action.md, spec §7).

For each node in the topological order of the graph at the start of the call (subgraphs first), on the CPU/DML/
ACL/CUDA/unassigned EPs, the registry entries for the node's op key are tried (version list, the rule's EP list,
then its selector); the first selection wins and its action rewrites the unit::

    DQ ─> Conv ─> [redundant Relu/Clip] ─> Q      =>   QLinearConv
    DQ ─> Add <─ DQ, Add ─> Q                      =>   com.microsoft.QLinearAdd
    DQ ─> Gemm <─ DQ (no Q)                        =>   com.microsoft.QGemm (float output)
    DQ ─> MatMul <─ DQ (no Q)                      =>   com.microsoft.MatMulIntegerToFloat
    DQ ─> Reshape ─> Q (same params)               =>   Reshape on the quantized tensor

:func:`explain_units` evaluates every candidate unit as the transformer sees it (on a copy of the graph, applying
the fusions as it goes) and reports, per unit, the rule tried and either the result or ORT's reasons for rejection.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from qdqopt.events import Kind, emit, matched_text
from qdqopt.graph import Graph, Node
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.qdq.actions import DropAction
from qdqopt.passes.qdq.registry import Entry, build_registry, entries_for
from qdqopt.passes.qdq.selectors import Ctx, Rejection, Selection, find_children_by_type, find_parents_by_type

__all__ = ["QDQSelectorActionTransformer", "UnitReport", "explain_units"]


@dataclass
class UnitReport:
    """What the transformer did (or would do) with one target node."""

    target: str
    op_type: str
    rule: str | None
    dq_nodes: list[str] = field(default_factory=list)
    q_nodes: list[str] = field(default_factory=list)
    outcome: str = "no rule"  # "fused" | "dropped" | "rejected" | "no rule"
    result_op: str | None = None
    reasons: list[str] = field(default_factory=list)


def _op_key(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


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
        self.reports: list[UnitReport] | None = None

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
        entries = entries_for(self.registry, _op_key(node))
        report = self._new_report(graph, node)
        reasons: list[str] = []
        tried: list[str] = []
        for entry in entries:
            versions = entry.ops[_op_key(node)]
            tried.append(entry.name)
            if versions and node.since_version not in versions:
                reasons.append(
                    f"[{entry.name}] {node.op_type}-{node.since_version} is not in versions {list(versions)}"
                )
                continue
            if entry.eps and node.ep not in entry.eps:
                reasons.append(f"[{entry.name}] EP {node.ep or '(none)'!r} not in {list(entry.eps)}")
                continue
            result = entry.selector.select(sctx, node)
            if isinstance(result, Rejection):
                reasons.extend(f"[{entry.name}] {r}" if len(entries) > 1 else r for r in result.reasons)
                continue
            if report is not None:
                self._fill(report, entry, result)
            emit(Kind.MATCHED, matched_text(node.op_type), (node.name,))  # SelectorActionTransformer::MatchAndProcess
            entry.action.run(graph, sctx, result)
            return True
        if report is not None and entries:
            report.rule = "/".join(tried)
            report.outcome = "rejected"
            report.reasons = reasons
        return False

    # ---------------------------------------------------------------------------------------------- reporting
    def _new_report(self, graph: Graph, node: Node) -> UnitReport | None:
        if self.reports is None or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            return None
        dqs = find_parents_by_type(graph, node, "DequantizeLinear")
        q_names = [n.name for n in find_children_by_type(graph, node, "QuantizeLinear")]
        if not entries_for(self.registry, _op_key(node)) and not dqs and not q_names:
            return None
        report = UnitReport(node.name, node.qualified_op, None, [d.name for d in dqs], q_names)
        self.reports.append(report)
        return report

    @staticmethod
    def _fill(report: UnitReport, entry: Entry, sel: Selection) -> None:
        report.rule = entry.name
        report.dq_nodes = [d.name for d in sel.dq_nodes if d is not None]
        report.q_nodes = [q.name for q in sel.q_nodes]
        report.outcome = "dropped" if isinstance(entry.action, DropAction) else "fused"
        report.result_op = entry.action.result_op(sel)
        report.reasons = []


def explain_units(graph: Graph, ctx: PassContext) -> list[UnitReport]:
    """Every candidate unit of ``graph`` as the transformer would see it; ``graph`` itself is not modified."""
    work = copy.deepcopy(graph)
    transformer = QDQSelectorActionTransformer()
    transformer.reports = []
    transformer.apply_impl(work, ctx, 0)
    return transformer.reports
