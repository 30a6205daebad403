"""Reading protobuf's wire format directly, for the few facts the graph core reads of many small messages.

Each field read through protobuf's Python API (upb) costs hundreds of instructions: a wrapper object made, the field
found by name, its value converted. A tensor type of rank 4 read field by field costs some 20 k instructions; its
bytes (``SerializeToString``, one call) read here cost a tenth of that. These readers take bytes protobuf wrote:
upb writes each field once, and of a oneof only the member that is set, so a field present in the bytes is a field
set (a file's bytes, which any writer may have made, go through :mod:`qdqopt.graph.model`'s own checks instead).
"""

from __future__ import annotations

from typing import Final

#: wire types
VARINT: Final = 0
LENGTH: Final = 2

# field numbers of onnx.proto read here and by the graph core
MODEL_GRAPH: Final = 7  # ModelProto.graph
GRAPH_INPUT: Final = 11  # GraphProto.input
GRAPH_OUTPUT: Final = 12  # GraphProto.output
GRAPH_VALUE_INFO: Final = 13  # GraphProto.value_info
VALUE_INFO_NAME: Final = 1  # ValueInfoProto.name
VALUE_INFO_TYPE: Final = 2  # ValueInfoProto.type
TYPE_TENSOR: Final = 1  # TypeProto.tensor_type
TENSOR_ELEM_TYPE: Final = 1  # TypeProto.Tensor.elem_type
TENSOR_SHAPE: Final = 2  # TypeProto.Tensor.shape
SHAPE_DIM: Final = 1  # TensorShapeProto.dim
DIM_VALUE: Final = 1  # TensorShapeProto.Dimension.dim_value
DIM_PARAM: Final = 2  # TensorShapeProto.Dimension.dim_param


def tag(data: bytes, pos: int) -> tuple[int, int, int]:
    """The field number and wire type of the field at ``pos``, and where its value starts."""
    key, pos = varint(data, pos)
    return key >> 3, key & 7, pos


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def skip(data: bytes, pos: int, wire_type: int) -> int:
    """The position after the value of a field of ``wire_type`` starting at ``pos``."""
    if wire_type == VARINT:
        return varint(data, pos)[1]
    if wire_type == LENGTH:
        length, pos = varint(data, pos)
        return pos + length
    if wire_type == 1:
        return pos + 8
    if wire_type == 5:
        return pos + 4
    raise ValueError(f"wire type {wire_type} in a message protobuf wrote")


def signed(value: int, bits: int) -> int:
    """A varint's value as the signed integer of ``bits`` bits it encodes (a negative one is written in 64 bits)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def submessage(data: bytes, pos: int, end: int, number: int) -> tuple[int, int]:
    """Where field ``number`` (a message) of the message in ``data[pos:end]`` starts and ends; (-1, -1) if it is
    not there. (Plain integers, not None: compiled, a tuple of integers is returned without making objects.)"""
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if field == number and wire_type == LENGTH:
            length, pos = varint(data, pos)
            return pos, pos + length
        pos = skip(data, pos, wire_type)
    return -1, -1


def tensor_type(data: bytes, pos: int, end: int) -> tuple[bool, int, int, int]:
    """Of the ``TypeProto`` in ``data[pos:end]``: whether it is a tensor type (not another member of its ``value``
    oneof, nor none), its element type (0 when unset), and where its shape starts and ends ((-1, -1) without one)."""
    pos, end = submessage(data, pos, end, TYPE_TENSOR)
    if pos < 0:
        return False, 0, -1, -1
    elem = 0
    shape_start = shape_end = -1
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if field == TENSOR_ELEM_TYPE and wire_type == VARINT:
            value, pos = varint(data, pos)
            elem = signed(value, 32)
        elif field == TENSOR_SHAPE and wire_type == LENGTH:
            length, pos = varint(data, pos)
            shape_start, shape_end = pos, pos + length
            pos += length
        else:
            pos = skip(data, pos, wire_type)
    return True, elem, shape_start, shape_end


def shape_dims(data: bytes, pos: int, end: int) -> list[int | str | None]:
    """The dims of the ``TensorShapeProto`` in ``data[pos:end]``: each its value, else its name (UTF-8, as protobuf
    decodes it), else None."""
    dims: list[int | str | None] = []
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if field != SHAPE_DIM or wire_type != LENGTH:
            pos = skip(data, pos, wire_type)
            continue
        length, pos = varint(data, pos)
        dims.append(_dimension(data, pos, pos + length))
        pos += length
    return dims


def _dimension(data: bytes, pos: int, end: int) -> int | str | None:
    found: int | str | None = None
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if field == DIM_VALUE and wire_type == VARINT:
            value, pos = varint(data, pos)
            found = signed(value, 64)
        elif field == DIM_PARAM and wire_type == LENGTH:
            length, pos = varint(data, pos)
            found = data[pos : pos + length].decode("utf-8")
            pos += length
        else:
            pos = skip(data, pos, wire_type)
    return found


def value_infos(data: bytes) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]], list[tuple[str, bool]]] | None:
    """Of the serialised ModelProto ``data``: its main graph's inputs, outputs and value_info entries, each as its
    name and whether it has a type that is not a tensor type without an element type; None without a graph."""
    pos, end = submessage(data, 0, len(data), MODEL_GRAPH)
    if pos < 0:
        return None
    inputs: list[tuple[str, bool]] = []
    outputs: list[tuple[str, bool]] = []
    value_info: list[tuple[str, bool]] = []
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if wire_type != LENGTH or field < GRAPH_INPUT or field > GRAPH_VALUE_INFO:
            pos = skip(data, pos, wire_type)
            continue
        length, pos = varint(data, pos)
        entry = _value_info(data, pos, pos + length)
        (inputs if field == GRAPH_INPUT else outputs if field == GRAPH_OUTPUT else value_info).append(entry)
        pos += length
    return inputs, outputs, value_info


def _value_info(data: bytes, pos: int, end: int) -> tuple[str, bool]:
    name = ""
    typed = False
    while pos < end:
        field, wire_type, pos = tag(data, pos)
        if wire_type == LENGTH and field == VALUE_INFO_NAME:
            length, pos = varint(data, pos)
            name = data[pos : pos + length].decode("utf-8")
            pos += length
        elif wire_type == LENGTH and field == VALUE_INFO_TYPE:
            length, pos = varint(data, pos)
            is_tensor, elem, _, _ = tensor_type(data, pos, pos + length)
            typed = not is_tensor or elem != 0
            pos += length
        else:
            pos = skip(data, pos, wire_type)
    return name, typed
