"""Shape inference for ORT's contrib ops that ONNX does not know, registered with ONNX's schema registry.

The graph core types values the way ORT's ``Graph::Resolve`` does, with ONNX shape inference; ONNX has no
``com.microsoft`` schemas, so a value computed from a contrib op's output (``Shape`` of a FusedMatMul, say) would
stay untyped where ORT, which registers those ops' inference functions, types it. :func:`register` gives ONNX
those inference functions, re-implemented from ORT's schema definitions; it runs once when :mod:`qdqopt.graph` is
imported and never replaces a schema ONNX already has. This changes ONNX's registry for the whole process (only by
adding ops ONNX does not know).

* ``com.microsoft::FusedMatMul`` (1): ``FusedMatMulShapeInference``: ONNX MatMul inference on the operands after
  ``transA``/``transB`` and ``transBatchA``/``transBatchB`` rearrange their dims.
"""

from __future__ import annotations

import onnx
import onnx.defs
import onnx.shape_inference

__all__ = ["register"]


def _transposed(shape: onnx.TensorShapeProto, trans: bool, trans_batch: bool) -> list[onnx.TensorShapeProto.Dimension]:
    """The operand's dims as the MatMul sees them (``FusedMatMulShapeInference``); a vector is left as it is."""
    dims = list(shape.dim)
    rank = len(dims)
    if rank == 1:
        return dims
    batch = dims[1 : rank - 1] if trans_batch else dims[: rank - 2]
    row = rank - 1 if trans else (0 if trans_batch else rank - 2)
    col = (0 if trans_batch else rank - 2) if trans else rank - 1
    return [*batch, dims[row], dims[col]]


def _infer_fused_matmul(ctx: onnx.shape_inference.InferenceContext) -> None:
    """ORT's ``FusedMatMulShapeInference``: MatMul's inference on the (batch-)transposed operands."""
    a_type = ctx.get_input_type(0)
    b_type = ctx.get_input_type(1)
    if a_type is None or not a_type.HasField("tensor_type"):
        return
    out = onnx.TypeProto()
    out.tensor_type.elem_type = a_type.tensor_type.elem_type
    if (
        b_type is None
        or not b_type.HasField("tensor_type")
        or not a_type.tensor_type.HasField("shape")
        or not b_type.tensor_type.HasField("shape")
    ):
        ctx.set_output_type(0, out)
        return

    def flag(name: str) -> bool:
        attr = ctx.get_attribute(name)
        return attr is not None and int(attr.i) != 0

    a_shape, b_shape = a_type.tensor_type.shape, b_type.tensor_type.shape
    if len(a_shape.dim) == 0 or len(b_shape.dim) == 0:
        raise onnx.shape_inference.InferenceError("Input tensors of wrong rank (0).")
    operands: dict[str, onnx.TypeProto] = {}
    for name, shape, trans, batch in (
        ("A", a_shape, flag("transA"), flag("transBatchA")),
        ("B", b_shape, flag("transB"), flag("transBatchB")),
    ):
        operand = onnx.TypeProto()
        operand.tensor_type.elem_type = a_type.tensor_type.elem_type
        operand.tensor_type.shape.dim.extend(_transposed(shape, trans, batch))
        operands[name] = operand
    matmul = onnx.helper.make_node("MatMul", ["A", "B"], ["Y"])
    inferred = onnx.shape_inference.infer_node_outputs(onnx.defs.get_schema("MatMul", 13), matmul, operands)
    result = inferred.get("Y")
    ctx.set_output_type(0, result if result is not None else out)


def register() -> None:
    """Register the contrib ops' inference with ONNX (idempotent)."""
    if onnx.defs.has("FusedMatMul", "com.microsoft"):
        return
    schema_cls = onnx.defs.OpSchema
    schema = schema_cls(
        "FusedMatMul",
        "com.microsoft",
        1,
        inputs=[schema_cls.FormalParameter("A", "T"), schema_cls.FormalParameter("B", "T")],
        outputs=[schema_cls.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"], "")],
        attributes=[
            schema_cls.Attribute("alpha", schema_cls.AttrType.FLOAT, "", required=False),
            schema_cls.Attribute("transA", schema_cls.AttrType.INT, "", required=False),
            schema_cls.Attribute("transB", schema_cls.AttrType.INT, "", required=False),
            schema_cls.Attribute("transBatchA", schema_cls.AttrType.INT, "", required=False),
            schema_cls.Attribute("transBatchB", schema_cls.AttrType.INT, "", required=False),
        ],
    )
    schema.set_type_and_shape_inference_function(_infer_fused_matmul)
    onnx.defs.register_schema(schema)
