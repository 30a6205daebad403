"""The pass contract: ORT's ``GraphTransformer`` and ``RewriteRule``, as small Python classes.

* A :class:`GraphTransformer` has ORT's exact ``name`` and implements :meth:`GraphTransformer.apply_impl`, which
  edits the graph through :class:`~qdqopt.graph.Graph` methods and returns whether it modified it. The
  ``modified`` flag is part of the contract: the manager reruns a level while any pass reports a change, and the
  trace prints it as ORT logs it. :meth:`GraphTransformer.apply` then resolves the graph, as
  ``GraphTransformer::Apply`` calls ``Graph::Resolve`` after a modifying ``ApplyImpl``.
* A :class:`RewriteRule` has ORT's *rule* name (``ReluQuantRewrite``, not ``ReluQuantFusion``), the op types it
  targets, a :meth:`RewriteRule.check` that returns ``None`` when it applies or the reason it does not, and an
  :meth:`RewriteRule.apply`. :class:`RuleBasedTransformer` runs them like ``RuleBasedGraphTransformer``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from qdqopt.config import SessionConfig
from qdqopt.graph import Graph, Node
from qdqopt.target import Target

__all__ = [
    "GraphTransformer",
    "LevelledTransformer",
    "PassContext",
    "RewriteRule",
    "RuleBasedTransformer",
    "RuleEffect",
    "Unsupported",
]


@dataclass
class PassContext:
    """What a pass may consult besides the graph."""

    config: SessionConfig
    target: Target
    partitioned: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def int8_allowed(self) -> bool:
        return self.target.with_config(self.config).int8_allowed


class Unsupported(Exception):
    """Raised by :meth:`GraphTransformer.apply` when the pass does not cover the graph; a run is then partly done,
    and its caller redoes it with the pass disabled."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


@mypyc_attr(allow_interpreted_subclasses=True)  # the passes that stay Python, and plugins
class GraphTransformer(ABC):
    """``onnxruntime::GraphTransformer``."""

    #: ORT's name for the transformer (a :class:`RuleBasedTransformer` instance names itself)
    name: ClassVar[str] = ""
    #: EPs whose nodes the pass may touch; empty means any (``GetCompatibleExecutionProviders``).
    compatible_eps: ClassVar[tuple[str, ...]] = ()

    def apply(self, graph: Graph, ctx: PassContext) -> bool:
        """Run the pass on the main graph, then resolve it if it changed anything.

        Raises :class:`Unsupported` (graph untouched) when the pass does not cover this graph (:meth:`unsupported`).
        ``unsupported`` and each ``apply_impl`` (subgraphs included, :meth:`recurse`) see the graph's NodeArg types
        as a pass application does (:meth:`Graph.begin_pass <qdqopt.graph.Graph.begin_pass>`).
        """
        graph.begin_pass()
        reason = self.unsupported(graph, ctx)
        if reason is not None:
            raise Unsupported(self.name, reason)
        graph.begin_pass()
        modified = self.apply_impl(graph, ctx, graph_level=0)
        if modified:
            graph.resolve()
        return modified

    def unsupported(self, graph: Graph, ctx: PassContext) -> str | None:
        """Why this pass cannot reproduce ORT on this graph (a case it does not cover yet), or None.

        A pass that covers only part of what ORT's transformer does says so here instead of guessing: the run is
        then redone with the pass disabled (``PipelineResult.unsupported`` gives the reason), and a comparison
        disables it on the ORT side too, exactly as for a pass qdqopt does not implement at all.
        """
        return None

    @abstractmethod
    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        """Edit ``graph`` (and recurse into subgraphs as ORT does); return whether anything changed."""

    def visit_in_order(
        self,
        graph: Graph,
        ctx: PassContext,
        graph_level: int,
        visit: Callable[[Node], bool],
        ops: Collection[str] | None = None,
    ) -> bool:
        """ORT's usual ``ApplyImpl`` loop: a topological snapshot, nodes removed meanwhile skipped, each node's
        subgraphs processed first, then ``visit(node)``; returns whether anything changed.

        ``ops``: the op types ``visit`` looks at; it returns False and does nothing else (no event either) for any
        other, which is then not visited at all (the graph's op type index gives the candidates, and the nodes with
        subgraphs, whose subgraphs are processed whatever their op type).
        """
        modified = False
        live = graph.live()
        order = graph.topological_order() if ops is None else graph.candidates_in_order(ops)
        for node in order:
            if node.index not in live:
                continue
            if node.subgraphs and self.recurse(node, ctx, graph_level):
                modified = True
            if (ops is None or node.op_type in ops) and visit(node):
                modified = True
        return modified

    def visit_then_remove(
        self,
        graph: Graph,
        ctx: PassContext,
        graph_level: int,
        fuse: Callable[[Node, list[Node]], None],
        ops: Collection[str] | None = None,
    ) -> bool:
        """:meth:`visit_in_order` for the fusions that add their fused node during the visit but remove the nodes it
        replaces only after it (ORT's ``nodes_to_remove`` list: DynamicQuantizeMatMulFusion,
        MatMulIntegerToFloatFusion); ``fuse(node, to_remove)`` appends to the list."""
        to_remove: list[Node] = []

        def visit(node: Node) -> bool:
            fuse(node, to_remove)
            return False

        modified = self.visit_in_order(graph, ctx, graph_level, visit, ops)
        for node in to_remove:
            graph.remove_node(node)
        return modified or bool(to_remove)

    def recurse(self, node: Node, ctx: PassContext, graph_level: int) -> bool:
        """``GraphTransformer::Recurse``: apply to each subgraph of ``node``, marking a changed one modified."""
        modified = False
        for sub in node.subgraphs.values():
            sub.begin_pass()
            if self.apply_impl(sub, ctx, graph_level + 1):
                sub.modified = True
                modified = True
        return modified

    def node_is_compatible(self, node: Node) -> bool:
        return not self.compatible_eps or node.ep in self.compatible_eps


@mypyc_attr(allow_interpreted_subclasses=True)  # the passes that stay Python, and plugins
class LevelledTransformer(GraphTransformer):
    """A transformer ORT registers at Level1 and at Level2 (``GeluFusion``, ``LayerNormFusion``): its constructor
    takes the ``TransformerLevel`` and names the instance after it, ``<class>L1`` or ``<class>L2``.

    Each instance is a subclass that gives its level and compatible EPs (empty: any) in its class statement,
    ``class GeluFusionL2(GeluFusion, level=2, eps=("CPUExecutionProvider",))``, and is named after the class it
    derives from and that level.
    """

    #: ``optimization_level_``: the TransformerLevel of this instance (1 or 2)
    level: ClassVar[int] = 1

    def __init_subclass__(cls, *, level: int | None = None, eps: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if level is not None:
            (family,) = cls.__bases__
            cls.name = f"{family.__name__}L{level}"
            cls.level = level
            cls.compatible_eps = eps


class RuleEffect(enum.Enum):
    """``RewriteRuleEffect``."""

    NONE = 0
    UPDATED_CURRENT_NODE = 1
    REMOVED_CURRENT_NODE = 2
    MODIFIED_REST_OF_GRAPH = 3


@mypyc_attr(allow_interpreted_subclasses=True)  # the passes that stay Python, and plugins
class RewriteRule(ABC):
    """``onnxruntime::RewriteRule``."""

    name: ClassVar[str] = ""
    op_types: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def check(self, graph: Graph, node: Node, ctx: PassContext) -> str | None:
        """``SatisfyCondition``: None when the rule applies, otherwise why it does not."""

    @abstractmethod
    def apply(self, graph: Graph, node: Node, ctx: PassContext) -> RuleEffect:
        """``Apply``: rewrite and report the effect."""


@mypyc_attr(allow_interpreted_subclasses=True)  # the passes that stay Python, and plugins
class RuleBasedTransformer(GraphTransformer):
    """``RuleBasedGraphTransformer``: nodes in topological order; each node's rules by op type, in registration order,
    until one removes the node; then, if the node is still there, its subgraphs."""

    def __init__(self, name: str, rules: list[RewriteRule], compatible_eps: tuple[str, ...] = ()) -> None:
        # ORT names each RuleBasedGraphTransformer at construction: the instance's own name, over the class's
        # (through setattr: a class variable is not assigned through an instance, as far as mypy knows)
        setattr(self, "name", name)  # noqa: B010
        self.rules = rules
        self._eps = compatible_eps
        self._by_op: dict[str, list[RewriteRule]] = {}  # the rules for an op type, in registration order

    def rule_ops(self) -> frozenset[str] | None:
        """The op types some rule targets (None: a rule targets every op)."""
        if any(not r.op_types for r in self.rules):
            return None
        return frozenset(op for r in self.rules for op in r.op_types)

    def rules_for(self, op_type: str) -> list[RewriteRule]:
        """The rules that target ``op_type`` (or every op), in registration order."""
        found = self._by_op.get(op_type)
        if found is None:
            found = self._by_op[op_type] = [r for r in self.rules if not r.op_types or op_type in r.op_types]
        return found

    def node_is_compatible(self, node: Node) -> bool:
        return not self._eps or node.ep in self._eps

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        modified = False
        ops = self.rule_ops()  # a node no rule targets is only recursed into
        order = graph.topological_order() if ops is None else graph.candidates_in_order(ops)
        live = graph.live()
        for node in order:
            if node.index not in live:
                continue
            removed = False
            if self.node_is_compatible(node):
                for rule in self.rules_for(node.op_type):
                    if rule.check(graph, node, ctx) is not None:
                        continue
                    effect = rule.apply(graph, node, ctx)
                    if effect is not RuleEffect.NONE:
                        modified = True
                    if effect is RuleEffect.REMOVED_CURRENT_NODE:
                        removed = True
                        break
            if not removed and node.subgraphs and node.index in live and self.recurse(node, ctx, graph_level):
                modified = True
        return modified
