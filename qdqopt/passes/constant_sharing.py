"""ConstantSharing: equal small initializers become one (spec §4.3, ORT ``constant_sharing.cc``).

Consumers of an initializer that equals one met earlier read that earlier one instead; the duplicate goes::

    before                                        after
    s1 = 0.02 (float) ──> DQ_a                    s1 = 0.02 ──┬──> DQ_a
    s2 = 0.02 (float) ──> DQ_b                                └──> DQ_b       (s2 removed)
    z1 = 128 (uint8)  ──> DQ_a                    z1 = 128 ──> DQ_a
    z2 = 128 (uint8)  ──> DQ_b                    z2 = 128 ──> DQ_b           (uint8 is never shared)

Rules:

* Candidates, in ``GetAllInitializedTensors()`` order (``name_to_initial_tensor_``, a ``std::unordered_map``: the
  iteration order of its libstdc++ emulation in the graph core): constant initializers (no graph input can
  override them), not graph outputs. The main graph only; the pass does not recurse into subgraphs.
* A candidate is skipped unless its NodeArg shape has only known dims with 1..8 elements in all, its type is
  float16, float, double, int32 or int64, some node reads it, and no node reads it as an implicit (subgraph) input.
* Equality: same data type, rank, dims and data bytes (so ``-0.0 != 0.0`` and equal NaN bit patterns are equal).
  The first candidate of a value survives under its own name; each later equal one is replaced in every input slot
  of its consumers and removed from the initializers (swap-with-last in the saved list).
* Apply-once: the manager runs it in the first Level1 step only.
"""

from __future__ import annotations

import onnx

from qdqopt.graph import Graph, View
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import constant_initializer, initializer_map_order

__all__ = ["TENSOR_ELEM_COUNT_THRESHOLD", "ConstantSharing"]

#: ``ConstantSharing::TENSOR_ELEM_COUNT_THRESHOLD``.
TENSOR_ELEM_COUNT_THRESHOLD = 8

_SUPPORTED = frozenset(
    {
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT64,
    }
)


def _element_count(dims: list[int | str | None] | None) -> int | None:
    """``IsAllowedToShare``: the element count if every dim is known and it is in 1..threshold, else None."""
    if dims is None:
        return None
    count = 1
    for dim in dims:
        if not isinstance(dim, int):
            return None
        count *= dim
        if count > TENSOR_ELEM_COUNT_THRESHOLD:
            return None
    return count if 0 < count <= TENSOR_ELEM_COUNT_THRESHOLD else None


class ConstantSharing(GraphTransformer):
    """Share one initializer among equal small constants."""

    name = "ConstantSharing"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        candidates = [
            name
            for name in initializer_map_order(graph)
            if constant_initializer(graph, name) is not None and not graph.is_graph_output(name)
        ]
        # data store key -> {(dims, bytes): value id} of the values met so far, ids in order; pattern -> survivor
        store: dict[str, dict[tuple[tuple[int, ...], bytes], int]] = {}
        survivors: dict[str, str] = {}
        modified = False
        for name in candidates:
            dims = graph.shape(name, view=View.DATA)
            count = _element_count(dims)
            found = constant_initializer(graph, name)
            if count is None or dims is None or found is None:
                continue
            owner, tensor = found
            if tensor.data_type not in _SUPPORTED:
                continue
            ports: list[tuple[int, int]] = []
            subgraph_use = False
            for consumer in graph.consumers(name):
                if name in consumer.implicit_inputs:
                    subgraph_use = True
                    break
                ports.extend((consumer.index, slot) for slot, value in enumerate(consumer.inputs) if value == name)
            if subgraph_use or not ports:
                continue
            key = f"{tensor.data_type}_{len(dims)}_{count}"
            value = (tuple(int(d) for d in tensor.dims), owner.array(name).tobytes())
            ids = store.setdefault(key, {})
            value_id = ids.setdefault(value, len(ids))
            pattern = f"{key}_{value_id}"
            survivor = survivors.get(pattern)
            if survivor is None:
                survivors[pattern] = name
                continue
            for index, slot in ports:
                target = graph.node(index)
                assert target is not None
                graph.set_input(target, slot, survivor)
            if not graph.consumers(name):
                graph.remove_initializer(name)
            modified = True
        return modified
