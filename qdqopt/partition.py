"""Graph partitioning for a CPU-only session, and the NodeArg types it depends on (spec insert_cast.md §1, §2).

``GraphPartitioner::Partition`` runs at every level, ORT_DISABLE_ALL included, between Level1 and the optimization
loop. With the CPU EP as the only EP, a node (of the main graph or any subgraph) is assigned to
``CPUExecutionProvider`` iff the CPU kernel registry has a kernel for its op, domain, since_version **and actual
types** (:func:`qdqopt.kernels.node_has_cpu_kernel`); every other node keeps the EP ``""``. An fp16 ``Add`` is such a
node on x86: InsertCastTransformer later wraps it in Casts and puts it on the CPU.

**Function inlining** (``graph_partitioner.cc``), with the per-node mechanism in
:mod:`qdqopt.graph.function_inlining`:

* ``InlineNodes``, inside ``Partition``: after assigning, every node left without an EP whose op is a function (a
  schema with a function body, e.g. HardSwish-14 on x86, fp16 Softmax-13+; or a model-local function) is replaced by
  its body, subgraphs first, each graph's candidates in node-index order; the graph is Resolved and partitioned
  again, until nothing is inlined. The inlined nodes are what Level2 and later passes see::

      before                          after partitioning
      DQ -> HardSwish "hs" -> Q       DQ -> HardSigmoid "" -> _inlfunc_HardSwish_HS_X -> Mul "" -> Q
                                      DQ ----------------------------------------------->

* ``InlineFunctionsAOT`` (:func:`inline_functions_aot`), at the start of the session, before EnsureUniqueDQ and
  Level1, and only for a model that has model-local functions: every node whose op is a function and that no EP
  claims (for the CPU EP: no kernel for its types) is inlined, schema ops such as HardSwish included, until nothing
  is left; then every local function not kept for a claimed call is dropped from the saved model, used or not.

Kernel matching needs the type of every value, as ``Graph::Resolve`` infers it. :func:`infer_types` reproduces that
with ONNX shape inference over the current graph (nodes in ORT's topological order, declared value_info kept), plus
a schema-driven propagation for what ONNX cannot infer (contrib ops): an output whose formal type is a constraint
takes the type of the first typed input bound to the same constraint, or the constraint's only allowed type.

:func:`check_kernels` is ``SessionState``'s final kernel lookup: ORT fails the session, and writes no optimized model,
when a node has no EP or its EP has no kernel for its types.
"""

from __future__ import annotations

import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Model, Node
from qdqopt.graph.function_inlining import (
    FunctionKey,
    function_key,
    inline_function,
    local_function,
    local_functions,
)
from qdqopt.kernels import (
    CPU,
    Schema,
    can_be_inlined,
    function_body,
    input_arg_counts,
    node_has_cpu_kernel,
    node_schema,
    type_string,
)

__all__ = ["check_kernels", "infer_types", "inline_functions_aot", "parse_type_string", "partition"]

_MAX_ROUNDS = 8


# --------------------------------------------------------------------------------------------------- partitioning
def partition(graph: Graph) -> None:
    """``PartitionOnnxFormatModel`` with the CPU EP: infer the types, assign each node (subgraphs included) to the CPU
    EP if a kernel matches, inline the unassigned function calls, and repeat after a Resolve until none is left."""
    infer_types(graph)
    while True:
        _assign(graph)
        if not _inline_nodes(graph):
            return
        graph.resolve()
        infer_types(graph)


def _assign(graph: Graph) -> None:
    for node in graph.nodes():
        for sub in node.subgraphs.values():
            _assign(sub)
        if node.ep:
            continue
        if node.since_version is None:
            if local_function(graph, node) is not None:
                continue  # a call of a model-local function: no kernel, inlined below
            raise ModelError(
                f"node {node.name!r} ({node.domain}:{node.op_type}) is neither an operator ORT knows at this opset nor "
                "a model-local function (ORT: 'is not a registered function/op')"
            )
        if node_has_cpu_kernel(graph, node):
            node.ep = CPU


def _inlinable(graph: Graph, node: Node) -> bool:
    """``Node::CanBeInlined``: a call of a model-local function, or a schema op with a function body."""
    if node.since_version is None:
        return local_function(graph, node) is not None
    return can_be_inlined(graph, node)


def _inline(graph: Graph, node: Node, *, ahead_of_time: bool = False) -> None:
    """``Graph::InlineFunction`` with the body ``Node::TryGetFunctionProto`` gives."""
    body = local_function(graph, node) if node.since_version is None else function_body(graph, node)
    assert body is not None
    inline_function(graph, node, body, constants_as_ort_values=ahead_of_time)


def _inline_nodes(graph: Graph) -> bool:
    """``InlineNodes``: subgraphs first, then the unassigned nodes that can be inlined, in node-index order."""
    modified = False
    for node in graph.nodes():
        for sub in node.subgraphs.values():
            modified = _inline_nodes(sub) or modified
    for node in [n for n in graph.nodes() if not n.ep and _inlinable(graph, n)]:
        _inline(graph, node)
        modified = True
    return modified


def inline_functions_aot(model: Model) -> None:
    """``GraphPartitioner::InlineFunctionsAOT`` (skipped by ORT when ``session.disable_aot_function_inlining=1``).

    Only for a model with model-local functions. Each round inlines, subgraphs first, every node that can be inlined
    and that the CPU EP does not claim (claims are taken before the round's first inlining), then Resolves; rounds
    repeat until one inlines nothing. The local functions are then removed from the model except those called by a
    claimed node.
    """
    functions = list(model.header.functions)
    if not functions:
        return
    graph = model.graph
    not_inlined: set[FunctionKey] = set()
    while True:
        infer_types(graph)
        if not _inline_aot(graph, not_inlined):
            break
        graph.resolve()
    kept = [f for f in functions if function_key(f.domain, f.name, f.overload) in not_inlined]
    del model.header.functions[:]
    model.header.functions.extend(kept)


def _inline_aot(graph: Graph, not_inlined: set[FunctionKey]) -> int:
    """``InlineFunctionsAOTImpl``: the number of nodes inlined in ``graph`` and its subgraphs."""
    count = 0
    for node in graph.nodes():
        for sub in node.subgraphs.values():
            count += _inline_aot(sub, not_inlined)
    candidates = [n for n in graph.nodes() if _inlinable(graph, n)]
    if not candidates:
        return count
    claimed = {n.index for n in graph.nodes() if node_has_cpu_kernel(graph, n)}
    for node in candidates:
        if node.index in claimed:
            not_inlined.add(function_key(node.domain, node.op_type))
        else:
            _inline(graph, node, ahead_of_time=True)
            count += 1
    return count


def check_kernels(graph: Graph) -> None:
    """Raise ModelError where ORT's session creation would fail for want of a kernel (no model is saved then)."""
    for node in graph.nodes():
        if not node.ep:
            raise ModelError(
                f"Could not find an implementation for {node.op_type}({node.since_version}) "
                f"node with name '{node.name}'"
            )
    for node in graph.nodes():
        if node.ep == CPU and not node_has_cpu_kernel(graph, node):
            raise ModelError(
                f"Failed to find kernel for {node.qualified_op}({node.since_version}) "
                f"(node:'{node.name}' ep:'{node.ep}')"
            )
        for sub in node.subgraphs.values():
            check_kernels(sub)


# ---------------------------------------------------------------------------------------------------------- types
def infer_types(graph: Graph) -> None:
    """Give the values of ``graph`` and its subgraphs the types ``Graph::Resolve`` would infer."""
    for _ in range(_MAX_ROUNDS):
        model = onnx.ModelProto(ir_version=onnx.IR_VERSION)
        for domain, version in sorted(_root(graph).opsets.items()):
            model.opset_import.append(onnx.helper.make_opsetid(domain, version))
        model.functions.extend(local_functions(graph).values())  # calls of them are typed through their bodies
        model.graph.CopyFrom(_inference_graph(graph))
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # onnx gave up on the whole model: keep what the schemas can tell
            inferred = model
        _store(graph, inferred.graph)
        if not _propagate_by_schema(graph):
            return


def _root(graph: Graph) -> Graph:
    while graph.parent is not None:
        graph = graph.parent
    return graph


def _inference_graph(graph: Graph) -> onnx.GraphProto:
    """The graph for ONNX shape inference: initializers as typed value_info (no data), the known types given."""
    gp = onnx.GraphProto(name=graph.name or "g")
    gp.input.extend(graph.inputs)
    gp.output.extend(graph.outputs)
    declared = {v.name for v in (*graph.inputs, *graph.outputs)}
    for vi in graph.value_info:
        if vi.name not in declared:
            gp.value_info.append(vi)
            declared.add(vi.name)
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        if tensor is not None and name not in declared:
            gp.value_info.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
            declared.add(name)
    order = graph.topological_order()
    for node in order:
        for value in (*node.inputs, *node.outputs):
            if value and value not in declared:
                known = graph.value_type(value) if graph.defines(value) else None
                if known is not None:
                    gp.value_info.append(onnx.helper.make_value_info(value, known))
                declared.add(value)
    for node in order:
        proto = onnx.NodeProto(name=node.name, op_type=node.op_type, domain=node.domain)
        proto.input.extend(node.inputs)
        proto.output.extend(node.outputs)
        for attr_name in node.attribute_order():
            attr = node.attributes[attr_name]
            sub = node.subgraphs.get(attr_name)
            if sub is None:
                proto.attribute.append(attr)
            else:
                proto.attribute.append(onnx.helper.make_attribute(attr_name, _inference_graph(sub)))
        gp.node.append(proto)
    return gp


def _store(graph: Graph, inferred: onnx.GraphProto) -> None:
    for vi in (*inferred.input, *inferred.output, *inferred.value_info):
        if vi.HasField("type") and type_string(vi.type) is not None:
            graph.set_value_type(vi.name, vi.type)
    for name in graph.initializer_names():
        tensor = graph.initializer(name)
        if tensor is not None:
            graph.set_value_type(name, onnx.helper.make_tensor_type_proto(tensor.data_type, None))
    protos = list(inferred.node)
    order = graph.topological_order()
    if len(protos) != len(order):
        return
    for node, proto in zip(order, protos, strict=True):
        for attr in proto.attribute:
            sub = node.subgraphs.get(attr.name)
            if sub is not None and attr.HasField("g"):
                _store(sub, attr.g)


def _propagate_by_schema(graph: Graph) -> bool:
    """Type outputs ONNX inference left unknown from their schema; True if any new type was found."""
    found = False
    for node in graph.topological_order():
        for sub in node.subgraphs.values():
            found = _propagate_by_schema(sub) or found
        schema = node_schema(node)
        if schema is None or not schema.outputs:
            continue
        counts = input_arg_counts(schema, len(node.inputs))
        for slot, value in enumerate(node.outputs):
            if not value or graph.value_type(value) is not None:
                continue
            formal = schema.outputs[min(slot, len(schema.outputs) - 1)]
            guessed = _type_for_formal(graph, node, schema, formal.type_str, counts)
            if guessed is not None:
                graph.set_value_type(value, guessed)
                found = True
    return found


def _type_for_formal(
    graph: Graph, node: Node, schema: Schema, type_str: str, counts: list[int]
) -> onnx.TypeProto | None:
    if type_str not in schema.constraint_names:
        return parse_type_string(type_str)
    start = 0
    for index, formal in enumerate(schema.inputs[: len(counts)]):
        if formal.type_str == type_str:
            for value in node.inputs[start : start + counts[index]]:
                known = graph.value_type(value) if value else None
                if known is not None:  # the type the parameter binds, without the input's shape
                    return parse_type_string(type_string(known) or "") or known
        start += counts[index]
    allowed = dict(schema.type_constraints)[type_str]
    if len(allowed) == 1:
        return parse_type_string(next(iter(allowed)))
    return None


def parse_type_string(text: str) -> onnx.TypeProto | None:
    """The TypeProto of an ORT type string (``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``)."""
    if text.startswith("tensor(") and text.endswith(")"):
        elem = _elem_type(text[len("tensor(") : -1])
        return onnx.helper.make_tensor_type_proto(elem, None) if elem else None
    if text.startswith("seq(") and text.endswith(")"):
        inner = parse_type_string(text[len("seq(") : -1])
        return onnx.helper.make_sequence_type_proto(inner) if inner else None
    if text.startswith("optional(") and text.endswith(")"):
        inner = parse_type_string(text[len("optional(") : -1])
        return onnx.helper.make_optional_type_proto(inner) if inner else None
    return None


def _elem_type(name: str) -> int:
    try:
        return int(onnx.TensorProto.DataType.Value(name.upper()))
    except ValueError:
        return 0
