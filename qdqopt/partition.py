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

Kernel matching needs the type of every value, as ``Graph::Resolve`` infers it: :func:`infer_types`
(:mod:`qdqopt.graph.inference`, where every type inference lives) gives it, before each round of assignment.

:func:`check_kernels` is ``SessionState``'s final kernel lookup: ORT fails the session, and writes no optimized model,
when a node has no EP or its EP has no kernel for its types.
"""

from __future__ import annotations

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Model, Node
from qdqopt.graph.function_inlining import FunctionKey, function_key, inline_function, local_function
from qdqopt.graph.inference import infer_types
from qdqopt.graph.schema import normalize_domain, parse_type_string
from qdqopt.kernels import CPU, can_be_inlined, function_body, node_has_cpu_kernel

__all__ = ["check_kernels", "infer_types", "inline_functions_aot", "parse_type_string", "partition"]


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
    for node in graph.nodes():
        reason = _lookup_table_error(graph, node)
        if reason is not None:
            raise ModelError(f"Exception during initialization: {reason}")


#: contrib QLinear ops whose CPU kernel builds a lookup table from constant quantization parameters when it is
#: created: (input slot of each scale, its zero point) per quantized input, then the output's (QLinearSoftmax checks
#: only its input's)
_LOOKUP_TABLE_PARAMS: dict[str, tuple[tuple[int, int], ...]] = {
    "QLinearSigmoid": ((1, 2), (3, 4)),
    "QLinearLeakyRelu": ((1, 2), (3, 4)),
    "QLinearSoftmax": ((1, 2),),
    "QLinearWhere": ((2, 3), (5, 6), (7, 8)),
}


def _lookup_table_error(graph: Graph, node: Node) -> str | None:
    """``QlinearBuildLookupTable``'s checks at kernel creation (ORT 1.32, measured): a constant scale that is neither
    a scalar nor a one-element 1-D tensor fails the session (the QDQ fusion makes such nodes from per-axis units)."""
    slots = _LOOKUP_TABLE_PARAMS.get(node.op_type) if normalize_domain(node.domain) == "com.microsoft" else None
    if node.op_type == "QLinearWhere" and slots:
        # measured: with the output's scale constant (and its zero point constant or absent), a zero point of X or
        # Y that is not constant crashes the kernel's construction; with the output's scale or zero point not
        # constant the session is created
        inputs = [*node.inputs, "", ""]
        fixed_output = all(not inputs[s] or graph.constant_initializer(inputs[s]) is not None for s in (7, 8))
        fixed_output = fixed_output and bool(inputs[7])
        for slot in (3, 6) if fixed_output else ():  # the X and Y zero points
            name = inputs[slot]
            if name and graph.constant_initializer(name) is None:
                return (
                    f"ORT 1.32's QLinearWhere kernel crashes the process (segmentation fault) when a zero point is "
                    f"not a constant initializer: node '{node.name}', input {name!r}"
                )
    for i, (scale_slot, _) in enumerate(slots or ()):
        name = node.inputs[scale_slot] if scale_slot < len(node.inputs) else ""
        tensor = graph.constant_initializer(name) if name else None
        if tensor is not None and not (len(tensor.dims) == 0 or list(tensor.dims) == [1]):
            which = "X_scale" if i == 0 else "Y_scale"
            return (
                f"IsScalarOr1ElementVector(tensor_{which.lower()}) was false. {node.op_type} "
                f"'{node.name}': input {which} must be a scalar or 1D tensor of size 1"
            )
    return None
