"""The graph API the transpose optimizer edits through (ORT's ``optimizer_api.h`` and ``ort_optimizer_api_impl.cc``).

Every name ORT gives what the optimizer creates is made here: nodes ``GenerateNodeName(op_type)``, their outputs
``GenerateNodeArgName(<node name>_out0)``, initializers ``const_transpose_optimizer[_token_N]``, and the
``MoveOutput`` rename ``GenerateNodeArgName(<node name>)``. NodeArg types the optimizer sets are kept in
:attr:`ApiGraph.types`, dim by dim as ORT keeps them, and written back to the graph at the end of the run
(:meth:`ApiGraph.changed_types`, :meth:`ApiGraph.replaced_types`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import onnx

from qdqopt.graph import Graph, Node, View
from qdqopt.graph.model import infer_current_types

__all__ = ["DOC", "UNTYPED", "ApiGraph", "Dims", "NodeArgType", "Quant", "Shape"]

DOC = "Added in transpose optimizer"
Shape = list[int] | None
#: a NodeArg's dims as ORT holds them: a value, a symbolic name, or None (unknown)
Dims = list[int | str | None]
#: a NodeArg's type: (element type, dims), None for what it lacks; ``UNTYPED`` for a NodeArg without a type
NodeArgType = tuple[int | None, Dims | None]
UNTYPED: Final[NodeArgType] = (None, None)


@dataclass
class Quant:
    per_axis: bool
    axis: int


class ApiGraph:
    """ORT's ``api::GraphRef`` over a qdqopt :class:`~qdqopt.graph.Graph` (``ort_optimizer_api_impl.cc``): value
    info, producers and consumers, constants, and the edits the optimizer makes, with ORT's names.

    NodeArg types are kept as ORT keeps them, dim by dim (:data:`Dims`): ``SetShape`` writes only dims > 0 (others
    unknown) and does nothing to an untyped NodeArg; ``CopyValueInfo``, ``PermuteDims`` and ``UnsqueezeDims`` copy
    dims as they are, symbolic names included; nodes and ``MoveOutput`` create untyped NodeArgs; ``Shape()`` reads
    a symbolic or unknown dim as -1.
    """

    def __init__(self, graph: Graph, opset: int, new_node_ep: str) -> None:
        self.graph = graph
        self.opset = opset
        self.new_node_ep = new_node_ep
        #: NodeArg types this run set: value -> (elem type, dims); ``UNTYPED`` for a NodeArg it created untyped
        self.types: dict[str, NodeArgType] = {}
        # declared values (value_info, graph outputs) with a producer when the run first edited the graph:
        # value -> (producer index, output slot, NodeArg type then)
        self._before: dict[str, tuple[int, int, NodeArgType]] | None = None

    # -------------------------------------------------------------- value info
    # ``api::ValueInfoRef``: the NodeArg types the graph core has (``View.DATA``, what the transpose optimizer's
    # inputs were matched against ORT with), under the edits this run made to them (:attr:`types`).
    def value_type(self, name: str) -> NodeArgType:
        """The NodeArg's type now: what the run set, else an initializer's tensor type, else the graph core's
        (:meth:`Graph.elem_type`, :meth:`Graph.shape`, ``View.DATA``)."""
        if not name:
            return UNTYPED
        tensor = self.graph.initializer(name)
        if tensor is not None and name not in self.graph.input_index():
            return int(tensor.data_type), [int(d) for d in tensor.dims[:]]
        if name in self.types:
            return self.types[name]
        return self.graph.elem_type(name, view=View.DATA), self.graph.shape(name, view=View.DATA)

    def shape(self, name: str) -> Shape:
        """``ValueInfoRef::Shape()``: the dims of :meth:`value_type` (this run's edits over :meth:`Graph.shape`) as
        ints, -1 for a symbolic or unknown dim."""
        dims = self.value_type(name)[1]
        if dims is None:
            return None
        return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]

    def dtype(self, name: str) -> int | None:
        """``ValueInfoRef::DType()``: the element type this run set, else :meth:`Graph.elem_type` (``View.DATA``)."""
        if name in self.types and not self.graph.is_initializer(name):
            return self.types[name][0]
        return self.graph.elem_type(name, view=View.DATA)

    def set_shape(self, name: str, shape: Shape) -> None:
        """``SetShape``: dims > 0 are written, others left unknown (a symbolic name is lost); None clears the
        shape. An untyped NodeArg is left as it is (``NodeArg::SetShape`` only edits a tensor type)."""
        elem, dims = self.value_type(name)
        if elem is None and dims is None:
            return
        self._edit()
        self.types[name] = (elem, None if shape is None else [d if d > 0 else None for d in shape])

    def copy_value_info(self, src: str, dst: str) -> None:
        """``CopyValueInfo``: ``dst`` gets ``src``'s type as it is (nothing happens if ``src`` is untyped)."""
        elem, dims = self.value_type(src)
        if elem is None and dims is None:
            return
        self._edit()
        self.types[dst] = (elem, None if dims is None else list(dims))

    def permute_dims(self, name: str, perm: list[int]) -> None:
        """``PermuteDims``: the dims, symbolic names included, reordered (nothing without a shape)."""
        elem, dims = self.value_type(name)
        if dims is not None:
            self._edit()
            self.types[name] = (elem, [dims[p] for p in perm])

    def unsqueeze_dims(self, name: str, axes: list[int]) -> None:
        """``UnsqueezeDims``: a dim of value 1 at each of ``axes``, the others copied in order."""
        elem, dims = self.value_type(name)
        if dims is None:
            return
        out: Dims = []
        j = 0
        i = 0
        while True:
            if i in axes:
                out.append(1)
            elif j < len(dims):
                out.append(dims[j])
                j += 1
            else:
                break
            i += 1
        self._edit()
        self.types[name] = (elem, out)

    def _edit(self) -> None:
        """Called before the run's first edit: remember the declared values' producers and types as they were.

        Those types are what the Resolve before the run left on the NodeArgs: the types qdqopt inferred earlier,
        with the dims they leave unknown filled by inference on the graph as it is now (ORT's Resolve refines a
        NodeArg after each pass that changed the graph: e.g. a shape computed by nodes that ConstantFolding folded).
        """
        if self._before is not None:
            return
        self._before = {}
        graph = self.graph
        for name in sorted(graph.value_info_names | set(graph.graph_output_names())):
            producer = graph.producer(name)
            slot = graph.producer_slot(name)
            if producer is not None and slot is not None:
                self._before[name] = (producer.index, slot, self.value_type(name))
        if any(_incomplete(found) for _, _, found in self._before.values()):
            fresh = infer_current_types(graph)
            for name, (index, slot, found) in self._before.items():
                self._before[name] = (index, slot, _refined(found, fresh.get(name)))

    def changed_types(self) -> dict[str, NodeArgType]:
        """The NodeArg types the run set (not the untyped NodeArgs it created)."""
        return {name: found for name, found in self.types.items() if found != UNTYPED}

    def replaced_types(self) -> dict[str, NodeArgType]:
        """The declared values whose producer the run removed or replaced (and whose type it did not set), with the
        type they had when it started: ORT's NodeArg keeps that type, and a value no node produces any more is
        never inferred again."""
        out: dict[str, NodeArgType] = {}
        for name, (index, slot, found) in (self._before or {}).items():
            producer = self.graph.producer(name)
            moved = producer is None or (producer.index, self.graph.producer_slot(name)) != (index, slot)
            if moved and name not in self.types and found != UNTYPED:
                out[name] = found
        return out

    # -------------------------------------------------------------- graph
    def producer(self, name: str) -> Node | None:
        return self.graph.producer(name) if name else None

    def consumers(self, name: str) -> tuple[list[Node], bool]:
        """``GetValueConsumers``: the nodes reading ``name`` explicitly, and whether that list is comprehensive."""
        nodes: list[Node] = []
        comprehensive = not self.graph.is_graph_output(name)
        for node in self.graph.consumers(name):
            if name in node.implicit_inputs:
                comprehensive = False
            if name in node.inputs:
                nodes.append(node)
        return nodes, comprehensive

    def has_consumers(self, name: str) -> bool:
        return bool(self.graph.consumers(name)) or self.graph.is_graph_output(name)

    def constant(self, name: str, *, local: bool = False) -> onnx.TensorProto | None:
        if not name:
            return None
        return self.graph.constant_initializer(name, check_outer_scope=not local)

    def constant_array(self, name: str, *, local: bool = False) -> np.ndarray | None:
        if not name:
            return None
        return self.graph.constant_array(name, check_outer_scope=not local)

    def generate_value_name(self, base: str) -> str:
        name = self.graph.generate_value_name(base)
        if not name:  # the empty NodeArg exists by then in ORT
            name = self.graph.generate_value_name(base)
        return name

    def add_node(self, op_type: str, inputs: list[str], domain: str = "") -> Node:
        self._edit()
        name = self.graph.generate_node_name(op_type)
        out = self.generate_value_name(name + "_out0")
        self.types[out] = UNTYPED
        return self.graph.add_node(name, op_type, inputs, [out], domain=domain, doc_string=DOC, ep=self.new_node_ep)

    def copy_node(self, source: Node, op_type: str, domain: str, name_base: str) -> Node:
        """``CopyNode``: a node named ``GenerateNodeName(name_base)`` with the source's inputs, as many new untyped
        outputs (``<name>_out<i>``), the source's EP, and its attributes added in the source map's order."""
        self._edit()
        name = self.graph.generate_node_name(name_base)
        outputs = [self.generate_value_name(f"{name}_out{i}") for i in range(len(source.outputs))]
        for out in outputs:
            self.types[out] = UNTYPED
        # the source's attribute protos themselves (never edited in place: a change replaces the proto)
        attributes = {key: source.attributes[key] for key in source.attribute_order()}
        return self.graph.add_node(
            name,
            op_type,
            list(source.inputs),
            outputs,
            domain=domain,
            attributes=attributes,
            doc_string=DOC,
            ep=source.ep,
        )

    def set_attr(self, node: Node, name: str, value: int | list[int]) -> None:
        self._edit()
        self.graph.set_attribute(node, _int_attribute(name, value))

    def set_input(self, node: Node, slot: int, value: str) -> None:
        self._edit()
        self.graph.set_input(node, slot, value)

    def move_output(self, src: Node, src_slot: int, dst: Node, dst_slot: int) -> None:
        """``MoveOutput``: ``dst`` takes the NodeArg (name and type); ``src`` gets a new, untyped one."""
        self._edit()
        name = src.outputs[src_slot]
        new = self.generate_value_name(src.name)
        self.graph.set_output(src, src_slot, new)
        self.graph.set_output(dst, dst_slot, name)
        self.types[new] = UNTYPED

    def remove_node(self, node: Node) -> None:
        self._edit()
        self.graph.remove_node(node)

    def add_initializer(self, dtype: int, shape: list[int], data: bytes) -> str:
        self._edit()
        name = self.generate_value_name("const_transpose_optimizer")
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=shape, raw_data=data)
        self.graph.add_initializer(tensor)
        return name

    def add_int64(self, values: list[int]) -> str:
        return self.add_initializer(onnx.TensorProto.INT64, [len(values)], np.array(values, dtype=np.int64).tobytes())

    def _replace_initializer(self, name: str, array: np.ndarray, dtype: int) -> None:
        """Remove and re-add the initializer; its NodeArg gets the new dims (``SetShape`` with every dim a value)."""
        self._edit()
        self.graph.remove_initializer(name)
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=list(array.shape))
        tensor.raw_data = np.ascontiguousarray(array).tobytes()
        self.graph.add_initializer(tensor)
        self.types[name] = (dtype, [int(d) for d in array.shape])

    def transpose_initializer(self, name: str, perm: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, np.transpose(self.graph.array(name), perm), tensor.data_type)

    def reshape_initializer(self, name: str, shape: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, self.graph.array(name).reshape(shape), tensor.data_type)


# ------------------------------------------------------------------ helpers
def _incomplete(found: NodeArgType) -> bool:
    elem, dims = found
    return elem is not None and (dims is None or any(d is None for d in dims))


def _refined(found: NodeArgType, inferred: onnx.TypeProto | None) -> NodeArgType:
    """``found`` with what inference adds: its shape if ``found`` has none, else the dims ``found`` leaves unknown
    (same rank only), as ORT's shape merge fills a NodeArg."""
    elem, dims = found
    if elem is None or inferred is None or not inferred.tensor_type.HasField("shape"):
        return found
    new: Dims = [
        d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
        for d in inferred.tensor_type.shape.dim
    ]
    if dims is None:
        return elem, new
    if len(dims) != len(new):
        return found
    return elem, [d if d is not None else n for d, n in zip(dims, new, strict=True)]


def _int_attribute(name: str, value: int | list[int]) -> onnx.AttributeProto:
    """``onnx.helper.make_attribute(name, value)`` for an int or a non-empty list of ints, made directly."""
    if isinstance(value, int):
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.INT, i=int(value))
    if type(value) is list and value and all(type(v) is int for v in value):  # (make_attribute refuses a bool)
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.INTS, ints=value)
    return onnx.helper.make_attribute(name, value)
