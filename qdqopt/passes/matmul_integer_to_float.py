"""MatMulIntegerToFloatFusion: MatMulInteger -> Cast -> Mul(scales) [-> Add(bias)] becomes MatMulIntegerToFloat.

``matmul_integer_to_float.cc``, registered at Level2 for the CPU, DML and ACL EPs::

    A  A_zp  B  B_zp        A_scale  B_scale
     \\   |   |   /             \\     /
     MatMulInteger               Mul (right)
          |                       |
        Cast ------------------> Mul                  (A, B, A_scale, B_scale, A_zp, B_zp[, bias])
                                  |            ->             |
                                 Add <- bias         com.microsoft.MatMulIntegerToFloat
                                  |                            |
                                  y                            y

Rules (ORT 1.32):

* every graph, subgraphs first (per node); nodes in one topological snapshot; the matched nodes are removed only
  after the whole graph was visited (their output edges first, then the nodes);
* the anchor is a Mul (ONNX 7, 13, 14) on a compatible EP whose input 0 is not float16 (float16 is allowed only on
  DML, for which the large-tensor check of a DynamicQuantizeLinear-fed MatMulInteger applies; not modelled: CPU);
* the Mul's first producer (input edges in ``EdgeEndCompare`` order) that is a Cast, that Cast's first producer that
  is a MatMulInteger, and the Mul's first producer that is a Mul (the scale product); no op version, domain or
  ``to`` check on them; Cast, MatMulInteger and the scale Mul each have exactly one output edge and no graph output;
* bias: if the Mul has exactly one output edge and no graph output and its first consumer that is an Add (no op
  version or EP check) has an input (slot 0, then 1) that is a constant initializer (outer scopes included) of shape
  [1, ..., 1, N] with N > 1, that Add and that input;
* the new node is named as the MatMulInteger (no ``GenerateNodeName``), no doc string, no attributes, domain
  ``com.microsoft``, EP of the Mul; inputs (A, B, scale-Mul input 0, scale-Mul input 1, A_zp, B_zp[, bias]) with
  "" for absent zero points; outputs those of the Add, or of the Mul without bias;
* removed: MatMulInteger, Cast, scale Mul, Mul and the Add.
"""

from __future__ import annotations

import onnx

from qdqopt.graph import Graph, Node, ShapeDims
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import (
    check_output_edges,
    first_child_by_type,
    first_parent_by_type,
    is_constant,
    is_supported_op,
)

__all__ = ["MatMulIntegerToFloatFusion"]

_DML = "DmlExecutionProvider"


def _bias_shape_ok(shape: ShapeDims | None) -> bool:
    """``CheckBiasShape``: rank >= 1, every dim but the last has value 1, the last a value > 1."""
    if not shape:
        return False
    if any(d != 1 for d in shape[:-1]):
        return False
    last = shape[-1]
    return isinstance(last, int) and last > 1


class MatMulIntegerToFloatFusion(GraphTransformer):
    """Fuse MatMulInteger + Cast + scale Muls (+ bias Add) into ``com.microsoft.MatMulIntegerToFloat``."""

    name = "MatMulIntegerToFloatFusion"
    compatible_eps = ("CPUExecutionProvider", _DML, "ACLExecutionProvider")

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        return self.visit_then_remove(
            graph, ctx, graph_level, lambda node, out: self._try_fuse(graph, node, out), ops=("Mul",)
        )

    def _try_fuse(self, graph: Graph, mul: Node, to_remove: list[Node]) -> None:
        is_dml = mul.ep == _DML
        if (
            not is_supported_op(mul, "Mul", (7, 13, 14))
            or not self.node_is_compatible(mul)
            or (not is_dml and graph.elem_type(mul.inputs[0]) == onnx.TensorProto.FLOAT16)
        ):
            return
        cast = first_parent_by_type(graph, mul, "Cast")
        if cast is None:
            return
        matmul = first_parent_by_type(graph, cast, "MatMulInteger")
        if matmul is None:
            return
        scale_mul = first_parent_by_type(graph, mul, "Mul")
        if scale_mul is None:
            return
        if not (
            check_output_edges(graph, cast, 1)
            and check_output_edges(graph, matmul, 1)
            and check_output_edges(graph, scale_mul, 1)
        ):
            return
        # The DML-only large-tensor check is not modelled: qdqopt targets the CPU EP.
        add: Node | None = None
        bias = ""
        if check_output_edges(graph, mul, 1):
            candidate = first_child_by_type(graph, mul, "Add")
            if candidate is not None:
                for value in candidate.inputs[:2]:
                    if is_constant(graph, value) and _bias_shape_ok(graph.shape(value)):
                        add, bias = candidate, value
                        break
        zps = [matmul.inputs[i] if len(matmul.inputs) > i else "" for i in (2, 3)]
        inputs = [matmul.inputs[0], matmul.inputs[1], scale_mul.inputs[0], scale_mul.inputs[1], *zps]
        if add is not None:
            inputs.append(bias)
        graph.add_node(
            matmul.name,
            "MatMulIntegerToFloat",
            inputs,
            list((add if add is not None else mul).outputs),
            domain="com.microsoft",
            ep=mul.ep,
        )
        to_remove.extend([matmul, cast, scale_mul, mul])
        if add is not None:
            to_remove.append(add)
