"""The int8 -> uint8 weight helpers both S8->U8 transformers share (ORT's ``qdq_transformer/s8_to_u8.h/.cc``).

* :func:`int8_tensor_to_uint8` (``QDQ::Int8TensorProto2Uint8``): ``<src>_s8_2_u8``, every byte XOR 0x80 (int8 ``v``
  becomes uint8 ``v + 128``) with ``src``'s dims, as raw data; only when some value lies outside [-64, 64] (the
  weights then do not fit in 7 bits, where the AVX2 U8S8 kernels' 16-bit sums may overflow) unless forced. Without
  a source tensor (a missing zero point) it is a generated ``weight_zp_s8_2_u8`` scalar of 128.
* :func:`convert_s8_weight_to_u8` (``QDQ::ConvertS8WeightToU8``): one node's constant int8 weight input and its
  int8 zero-point input, by slot::

      node(..., w: int8 const, ..., w_zp: int8 const | absent, ...)
        =>  node(..., w_s8_2_u8: uint8, ..., w_zp_s8_2_u8 | weight_zp_s8_2_u8 (128): uint8, ...)

  The weight must be a constant initializer held by this graph (``NodeArgIsConstant`` and ``GetInitializedTensor``)
  of type int8; a zero point that is present (not missing, not an empty name) must be one too, or nothing happens.
  The weight converts only as above; the zero point then always does (an absent one is added, the missing optional
  inputs before it becoming empty names). The old initializers go at the next Resolve if nothing else reads them. A
  converted tensor whose name is already an initializer (the same weight read by two nodes, e.g. the DQ copies of
  EnsureUniqueDQForNodeUnit) makes ORT 1.32 fail the session ("Attempt to replace the existing tensor"): so does
  qdqopt (:class:`~qdqopt.errors.ModelError`).

Used by ``QDQS8ToU8Transformer`` (lone DQ weights, ``qdq_s8_to_u8.py``) and ``Avx2WeightS8ToU8Transformer``
(``avx2_weight_s8_to_u8.py``).
"""

from __future__ import annotations

import numpy as np
import onnx

from qdqopt.errors import ModelError
from qdqopt.graph import Graph, Node
from qdqopt.passes.graph_utils import constant_initializer

__all__ = [
    "add_converted",
    "convert_s8_weight_to_u8",
    "flip_int8",
    "int8_tensor_to_uint8",
    "local_constant",
    "raw_uint8_tensor",
]

TP = onnx.TensorProto


def local_constant(graph: Graph, name: str) -> onnx.TensorProto | None:
    """``NodeArgIsConstant && GetInitializedTensor``: a constant initializer held by this graph."""
    if not name or constant_initializer(graph, name) is None or not graph.is_initializer(name):
        return None
    return graph.initializer(name)


def raw_uint8_tensor(name: str, dims: list[int], data: bytes) -> onnx.TensorProto:
    """A uint8 initializer with ``raw_data``, as the S8->U8 passes make them."""
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = TP.UINT8
    tensor.dims.extend(dims)
    tensor.raw_data = data
    return tensor


def flip_int8(graph: Graph, src: onnx.TensorProto) -> tuple[bytes, bool]:
    """``src``'s values XOR 0x80 as uint8 bytes, and whether some value lies outside [-64, 64]."""
    values = np.asarray(graph.array(src.name)).astype(np.int8).reshape(-1)
    outside = bool(np.any((values < -64) | (values > 64)))
    return (values.view(np.uint8) ^ np.uint8(0x80)).astype(np.uint8).tobytes(), outside


def int8_tensor_to_uint8(graph: Graph, src: onnx.TensorProto | None, *, force: bool = False) -> onnx.TensorProto | None:
    """``QDQ::Int8TensorProto2Uint8``: ``<src>_s8_2_u8`` with every byte XOR 0x80, if ``force`` or some value lies
    outside [-64, 64]; None otherwise. Without ``src``: a generated ``weight_zp_s8_2_u8`` scalar of 128."""
    if src is None:
        return raw_uint8_tensor(graph.generate_value_name("weight_zp_s8_2_u8"), [], bytes([128]))
    data, outside = flip_int8(graph, src)
    if not (force or outside):
        return None
    return raw_uint8_tensor(src.name + "_s8_2_u8", list(src.dims), data)


def add_converted(graph: Graph, tensor: onnx.TensorProto) -> str:
    """``graph_utils::AddInitializerWithOrtValue`` for a converted tensor. ORT 1.32 refuses a name this graph
    already holds, and with it the session: so a second reader of one int8 weight (two nodes, or the copies
    EnsureUniqueDQForNodeUnit makes of a shared weight DQ) fails the session."""
    if graph.is_initializer(tensor.name):
        raise ModelError(
            f"AddInitializedOrtValue Attempt to replace the existing tensor {tensor.name!r}: ORT 1.32 fails the "
            "session when two nodes read one int8 weight that the S8->U8 conversion rewrites"
        )
    graph.add_initializer(tensor)
    return tensor.name


def convert_s8_weight_to_u8(graph: Graph, node: Node, weight_slot: int, zp_slot: int) -> bool:
    """``QDQ::ConvertS8WeightToU8(graph, node, weight_slot, zp_slot)``: True when the weight was converted."""
    if len(node.inputs) <= weight_slot:
        return False
    weight = local_constant(graph, node.inputs[weight_slot])
    if weight is None or weight.data_type != TP.INT8:
        return False
    zp: onnx.TensorProto | None = None
    zp_name = node.inputs[zp_slot] if zp_slot < len(node.inputs) else ""
    if zp_name:
        zp = local_constant(graph, zp_name)
        if zp is None or zp.data_type != TP.INT8:
            return False
    weight_u8 = int8_tensor_to_uint8(graph, weight)
    if weight_u8 is None:
        return False  # the weights fit in 7 bits: no overflow to fear
    graph.set_input(node, weight_slot, add_converted(graph, weight_u8))
    zp_u8 = int8_tensor_to_uint8(graph, zp, force=True)
    assert zp_u8 is not None
    graph.set_input(node, zp_slot, add_converted(graph, zp_u8))
    return True
