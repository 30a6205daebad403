"""Function inlining: ORT's ``Graph::InlineFunction`` (``graph.cc``) and ``function_utils::Specialize``.

A node whose op is a *function* (a model-local ``FunctionProto`` of ``ModelProto.functions``, or an operator schema
with a function body: HardSwish-14, Softmax-13+ through its context-dependent builder...) can be replaced by the
nodes of its body. ORT does it in two places, both drivers living in :mod:`qdqopt.partition` (as in
``graph_partitioner.cc``): ``InlineFunctionsAOT`` before any transformer, and ``InlineNodes`` during partitioning.
This module is the per-node mechanism they share::

    before                                   after (prefix "_inlfunc_HardSwish_", nodes added, call removed)
    xd -> HardSwish "hs" -> t                xd -> HardSigmoid "" (alpha, beta) -> _inlfunc_HardSwish_HS_X
                                             xd, _inlfunc_HardSwish_HS_X -> Mul "" -> t

What ORT does, step by step:

1. **Prefix.** ``GenerateNodeName("_inlfunc_" + op_type)``, plus ``"_"``: ``_inlfunc_HardSwish_``, then
   ``_inlfunc_HardSwish_token_0_`` for the next call of the same op (the name counter is the graph's own, shared with
   every other generated name; the call node is still in the graph, so a call *named* ``_inlfunc_X`` takes a token).
2. **Attributes.** The call node's attribute map (schema defaults included, as Resolve filled them), completed by the
   function's own defaults (``FunctionProto.attribute_proto``) for what the call does not set.
3. **Specialize** (``function_utils.cc``): formal inputs are bound to the actual ones (a missing optional input to
   ``""``), formal outputs to the actual ones (a missing output to ``prefix + formal``); every other value a body node
   defines becomes ``prefix + name``, and so does every non-empty node name (unnamed body nodes stay unnamed); a name
   a body node reads without defining it is an outer-scope value and stays. An attribute referring to a function
   attribute (``ref_attr_name``) takes a copy of the call's attribute under its own name, or is dropped when the call
   has none (Resolve then fills the schema default). Subgraphs in the body get a scope of their own, their inputs,
   initializers and outputs renamed with the same prefix.
4. **InlineFunctionProto.** ``Constant`` body nodes become initializers named after their (renamed) output,
   appended in body order; the other nodes are added in body order, each with a fresh attribute map reserved for its
   attribute count and filled in body order, its doc string and its domain (``ai.onnx`` read as ``""``).
5. The call node is removed. The drivers Resolve afterwards (defaults, types, unused initializers), which is also
   when an inlined node is checked against the *model's* opsets: the function's own ``opset_import`` is not used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSequence, Sequence

import onnx

from qdqopt.errors import ModelError
from qdqopt.graph.core import Graph, Node
from qdqopt.graph.schema import (
    FunctionKey,
    function_key,
    local_functions,
    normalize_domain,
    set_local_functions,
    subgraph_protos,
)

__all__ = [
    "INLINE_PREFIX",
    "FunctionKey",
    "check_not_recursive",
    "function_key",
    "inline_function",
    "local_function",
    "local_functions",
    "set_local_functions",
    "specialize",
]

#: ``base_uniq_identifier`` of ``Graph::InlineFunction``
INLINE_PREFIX = "_inlfunc_"


def describe(key: FunctionKey) -> str:
    """``domain:name`` (``:overload``), as ORT prints a function."""
    domain, name, overload = key
    return f"{domain}:{name}" + (f":{overload}" if overload else "")


def local_function(graph: Graph, node: Node) -> onnx.FunctionProto | None:
    """The model-local function a node calls, or None (ORT matches the node's domain and op type exactly)."""
    table = local_functions(graph)
    return table.get(function_key(node.domain, node.op_type)) if table else None


def check_not_recursive(functions: Sequence[onnx.FunctionProto]) -> None:
    """Raise :class:`ModelError` if a model-local function calls itself, directly or through others (ORT rejects the
    model at load: "Model local function definitions must not be recursive")."""
    table = {function_key(f.domain, f.name, f.overload): f for f in functions}

    def calls(function: onnx.FunctionProto) -> list[tuple[FunctionKey, str]]:
        out: list[tuple[FunctionKey, str]] = []
        pending: list[Iterable[onnx.NodeProto]] = [function.node]
        while pending:
            for node in pending.pop():
                key = function_key(node.domain, node.op_type, node.overload)
                if key in table:
                    out.append((key, node.name))
                pending.extend(g.node for g in subgraph_protos(node))
        return out

    done: set[FunctionKey] = set()

    def visit(key: FunctionKey, path: list[FunctionKey]) -> None:
        if key in done:
            return
        for callee, node_name in calls(table[key]):
            if callee in path or callee == key:
                cycle = [*path[path.index(callee) :], key, callee] if callee in path else [key, callee]
                chain = " -> ".join(describe(k) for k in cycle)
                raise ModelError(
                    f"node {node_name!r} of model-local function {describe(key)} calls {describe(callee)}: local "
                    f"functions must not be recursive ({chain}); ORT rejects the model"
                )
            visit(callee, [*path, key])
        done.add(key)

    for key in table:
        visit(key, [])


# ------------------------------------------------------------------------------------------------------ Specialize
class _Specializer:
    """``function_utils::Inliner``: renames a function body for one call site."""

    def __init__(self, prefix: str, attributes: Mapping[str, onnx.AttributeProto]) -> None:
        self.prefix = prefix
        self.attributes = attributes
        self.scopes: list[dict[str, str]] = [{}]

    def make_unique(self, name: str) -> str:
        renamed = self.prefix + name
        self.scopes[-1][name] = renamed
        return renamed

    def rename(self, name: str, *, defines: bool) -> str:
        if not name:
            return name
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        # a new definition gets the prefix; a reference to an unknown name is an outer-scope value and stays
        return self.make_unique(name) if defines else name

    def bind(self, formals: MutableSequence[str], actuals: Sequence[str], *, outputs: bool) -> None:
        scope = self.scopes[-1]
        for index, formal in enumerate(list(formals)):
            if index < len(actuals):
                actual = actuals[index]
                if outputs and not actual:
                    actual = self.prefix + formal
            else:
                actual = self.prefix + formal if outputs else ""
            scope[formal] = actual
            if actual:
                formals[index] = actual

    def node(self, node: onnx.NodeProto) -> None:
        if node.name:
            node.name = self.prefix + node.name
        for index, name in enumerate(node.input):
            node.input[index] = self.rename(name, defines=False)
        for index, name in enumerate(node.output):
            node.output[index] = self.rename(name, defines=True)
        kept: list[onnx.AttributeProto] = []
        for written in node.attribute:
            attr = written
            if written.ref_attr_name:
                actual = self.attributes.get(written.ref_attr_name)
                if actual is None:
                    continue  # the call does not set it: dropped
                attr = onnx.AttributeProto()
                attr.CopyFrom(actual)
                attr.name = written.name
            if attr.HasField("g"):
                self.graph(attr.g)
            for sub in attr.graphs:
                self.graph(sub)
            kept.append(attr)
        del node.attribute[:]
        node.attribute.extend(kept)

    def graph(self, graph: onnx.GraphProto) -> None:
        self.scopes.append({})
        for value in graph.input:
            value.name = self.make_unique(value.name)
        for tensor in graph.initializer:
            tensor.name = self.make_unique(tensor.name)
        for value in graph.output:
            value.name = self.make_unique(value.name)
        for node in graph.node:
            self.node(node)
        self.scopes.pop()


def specialize(
    body: onnx.FunctionProto,
    inputs: Sequence[str],
    outputs: Sequence[str],
    attributes: Mapping[str, onnx.AttributeProto],
    prefix: str,
) -> onnx.FunctionProto:
    """``function_utils::Specialize``: a copy of ``body`` renamed for a call with these actual inputs and outputs
    (no more than the body's formal ones)."""
    fp = onnx.FunctionProto()
    fp.CopyFrom(body)
    specializer = _Specializer(prefix, attributes)
    specializer.bind(fp.input, inputs, outputs=False)
    specializer.bind(fp.output, outputs, outputs=True)
    for node in fp.node:
        specializer.node(node)
    return fp


# -------------------------------------------------------------------------------------------------- InlineFunction
def inline_function(
    graph: Graph, node: Node, body: onnx.FunctionProto, *, constants_as_ort_values: bool = False
) -> list[Node]:
    """``Graph::InlineFunction``: replace the call ``node`` by the nodes of ``body``; returns the nodes added.

    ``constants_as_ort_values``: the session has not yet moved its initializers into OrtValues (ahead-of-time
    inlining), so the body's Constants are saved the way loaded initializers are (typed fields of 128 bytes or more
    as ``raw_data``); the partitioner's inlining comes after that move and keeps them as the body wrote them. The
    caller Resolves the graph afterwards, as ORT's drivers do.
    """
    if len(node.inputs) > len(body.input) or len(node.outputs) > len(body.output):
        raise ModelError(
            f"node {node.name!r} ({node.qualified_op}) has {len(node.inputs)} inputs and {len(node.outputs)} outputs, "
            f"its function {len(body.input)} and {len(body.output)} (ORT: number of actual parameters cannot exceed "
            "the number of formal parameters)"
        )
    prefix = graph.generate_node_name(INLINE_PREFIX + node.op_type) + "_"
    attributes = dict(node.attributes)
    for default in body.attribute_proto:
        attributes.setdefault(default.name, default)
    fp = specialize(body, node.inputs, node.outputs, attributes, prefix)
    added = _inline_function_proto(graph, fp, node, constants_as_ort_values)
    graph.remove_node(node)
    return added


def _inline_function_proto(graph: Graph, fp: onnx.FunctionProto, call: Node, normalise: bool) -> list[Node]:
    """``Graph::InlineFunctionProto``: Constant nodes first (as initializers), then the other nodes in body order."""
    from qdqopt.graph.model import _add_proto_node, _build_graph, _constant_to_tensor, _normalise_initializer

    def duplicate(name: str) -> ModelError:
        return ModelError(
            f"node {call.name!r} ({call.qualified_op}): inlining its function defines {name!r}, which the graph "
            f"already has (ORT: Duplicate definition of name ({name}))"
        )

    call_outputs = set(call.outputs)
    for body_node in fp.node:
        if body_node.op_type == "Constant":
            tensor = _constant_to_tensor(body_node)
            if graph.is_initializer(tensor.name):
                raise duplicate(tensor.name)
            graph.add_initializer(_normalise_initializer(tensor) if normalise else tensor)
    added: list[Node] = []
    for body_node in fp.node:
        if body_node.op_type == "Constant":
            continue
        for name in body_node.output:
            if (
                name
                and name not in call_outputs
                and (graph.producer(name) is not None or graph.is_initializer(name) or name in graph.input_index())
            ):
                raise duplicate(name)
        new = _add_proto_node(graph, body_node, normalize_domain(body_node.domain))
        for attr in body_node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                new.subgraphs[attr.name] = _build_graph(attr.g, graph.opsets, graph.ir_version, graph, new)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                raise ModelError(
                    f"node {call.name!r} ({call.qualified_op}): its function body has a GRAPHS attribute, which "
                    "qdqopt does not support"
                )
        if new.subgraphs:
            graph.refresh_implicit_inputs(new)
        added.append(new)
    return added
