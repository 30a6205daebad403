"""The graph API the transpose optimizer edits through (ORT's ``optimizer_api.h`` and ``ort_optimizer_api_impl.cc``).

Every name ORT gives what the optimizer creates is made here: nodes ``GenerateNodeName(op_type)``, their outputs
``GenerateNodeArgName(<node name>_out0)``, initializers ``const_transpose_optimizer[_token_N]``, and the
``MoveOutput`` rename ``GenerateNodeArgName(<node name>)``. NodeArg shapes the optimizer sets are kept in
:attr:`ApiGraph.types` and written back to the graph at the end of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.graph import Graph, Node
from qdqopt.passes.graph_utils import value_elem_type, value_shape

__all__ = ["DOC", "ApiGraph", "Quant", "Shape"]

DOC = "Added in transpose optimizer"
Shape = list[int] | None


@dataclass
class Quant:
    per_axis: bool
    axis: int


class ApiGraph:
    """ORT's ``api::GraphRef`` over a qdqopt :class:`~qdqopt.graph.Graph` (``ort_optimizer_api_impl.cc``): value
    info, producers and consumers, constants, and the edits the optimizer makes, with ORT's names."""

    def __init__(self, graph: Graph, opset: int, new_node_ep: str) -> None:
        self.graph = graph
        self.opset = opset
        self.new_node_ep = new_node_ep
        # NodeArg types this run changed: value -> (elem type, shape or None)
        self.types: dict[str, tuple[int | None, Shape]] = {}
        # values in ``types`` whose shape ORT would hold with symbolic dims (copied or permuted from one that has them)
        self.symbolic: set[str] = set()

    # -------------------------------------------------------------- ApiGraph
    def shape(self, name: str) -> Shape:
        if not name:
            return None
        tensor = self.graph.initializer(name)
        if tensor is not None and not any(i.name == name for i in self.graph.inputs):
            return [int(d) for d in tensor.dims]
        if name in self.types:
            return self.types[name][1]
        dims = value_shape(self.graph, name)
        if dims is None:
            return None
        return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]

    def dtype(self, name: str) -> int | None:
        if name in self.types and not self.graph.is_initializer(name):
            return self.types[name][0]
        return value_elem_type(self.graph, name)

    def has_symbolic_dims(self, name: str) -> bool:
        if name in self.types:
            return name in self.symbolic
        dims = value_shape(self.graph, name) if name else None
        return dims is not None and any(isinstance(d, str) for d in dims)

    def set_shape(self, name: str, shape: Shape, *, symbolic: bool = False) -> None:
        """``SetShape`` (drops symbolic dims; ``symbolic``: the dim-copying ``PermuteDims``/``UnsqueezeDims``)."""
        self.types[name] = (self.dtype(name), None if shape is None else list(shape))
        if symbolic:
            self.symbolic.add(name)
        else:
            self.symbolic.discard(name)

    def copy_value_info(self, src: str, dst: str) -> None:
        elem = self.dtype(src)
        shape = self.shape(src)
        if elem is None and shape is None:
            return
        symbolic = self.has_symbolic_dims(src)
        self.types[dst] = (elem, shape)
        if symbolic:
            self.symbolic.add(dst)
        else:
            self.symbolic.discard(dst)

    def permute_dims(self, name: str, perm: list[int]) -> None:
        shape = self.shape(name)
        if shape is not None:
            self.set_shape(name, [shape[p] for p in perm], symbolic=self.has_symbolic_dims(name))

    def unsqueeze_dims(self, name: str, axes: list[int]) -> None:
        shape = self.shape(name)
        if shape is None:
            return
        out: list[int] = []
        j = 0
        i = 0
        while True:
            if i in axes:
                out.append(1)
            elif j < len(shape):
                out.append(shape[j])
                j += 1
            else:
                break
            i += 1
        self.set_shape(name, out, symbolic=self.has_symbolic_dims(name))

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
        name = self.graph.generate_node_name(op_type)
        out = self.generate_value_name(name + "_out0")
        return self.graph.add_node(name, op_type, inputs, [out], domain=domain, doc_string=DOC, ep=self.new_node_ep)

    def set_attr(self, node: Node, name: str, value: int | list[int]) -> None:
        self.graph.set_attribute(node, onnx.helper.make_attribute(name, value))

    def set_input(self, node: Node, slot: int, value: str) -> None:
        self.graph.set_input(node, slot, value)

    def move_output(self, src: Node, src_slot: int, dst: Node, dst_slot: int) -> None:
        name = src.outputs[src_slot]
        new = self.generate_value_name(src.name)
        self.graph.set_output(src, src_slot, new)
        self.graph.set_output(dst, dst_slot, name)
        self.types.pop(new, None)
        self.symbolic.discard(new)

    def remove_node(self, node: Node) -> None:
        self.graph.remove_node(node)

    def add_initializer(self, dtype: int, shape: list[int], data: bytes) -> str:
        name = self.generate_value_name("const_transpose_optimizer")
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=shape, raw_data=data)
        self.graph.add_initializer(tensor)
        return name

    def add_int64(self, values: list[int]) -> str:
        return self.add_initializer(onnx.TensorProto.INT64, [len(values)], np.array(values, dtype=np.int64).tobytes())

    def _replace_initializer(self, name: str, array: np.ndarray, dtype: int) -> None:
        self.graph.remove_initializer(name)
        tensor = onnx.TensorProto(name=name, data_type=dtype, dims=list(array.shape))
        tensor.raw_data = np.ascontiguousarray(array).tobytes()
        self.graph.add_initializer(tensor)

    def transpose_initializer(self, name: str, perm: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, np.transpose(self.graph.array(name), perm), tensor.data_type)

    def reshape_initializer(self, name: str, shape: list[int]) -> None:
        tensor = self.graph.initializer(name)
        assert tensor is not None
        self._replace_initializer(name, self.graph.array(name).reshape(shape), tensor.data_type)

    # -------------------------------------------------------------- helpers
