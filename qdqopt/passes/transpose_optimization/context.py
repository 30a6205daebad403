"""ORT's ``OptimizerCtx`` and the graph-editing helpers of ``onnx_transpose_optimization.cc`` that every handler
uses: ``TransposeInput`` (constants transposed in place, cancelling Transposes removed, existing ones reused, new
ones made, QDQ units kept whole by ``MakeQDQNodeUnit``), ``UnsqueezeInput``, ``TransposeOutputs`` and the node
makers.

Every push the main loop considers, and every handler's refusal (:meth:`OptimizerCtx.refuse`), is an event of the
run (:mod:`qdqopt.events`) with a :class:`PushEvent` as its payload: ``pushed`` (with what the node became) or
``no-match`` (with why not). ``qdqopt explain --level layout`` reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from qdqopt.events import Kind, NoMatch, active, emit_no_match, say
from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.transpose_optimization.api import ApiGraph, Quant
from qdqopt.passes.transpose_optimization.perms import (
    compose_perm,
    invert_perm,
    normalize_axes,
    normalize_axis,
    unsqueeze_axis,
    unsqueeze_perm,
    unsqueeze_shape,
    valid_perm,
)

__all__ = ["CPU", "MS", "OptimizerCtx", "PushChannel", "PushEvent", "pushed_form", "record_layout"]

CPU = "CPUExecutionProvider"
MS = "com.microsoft"


@dataclass(frozen=True, init=False)
class PushEvent:
    """One layout decision on a node, the payload of its event: the node, the outcome (the transpose optimizer's
    ``pushed``, ``refused`` or ``not pushed``; NhwcTransformer's ``converted`` or ``skipped``) and the reason, or,
    for ``pushed`` and ``converted``, what the node became."""

    node_index: int
    node_name: str
    op: str
    outcome: str
    reason: str = ""

    def __init__(self, node_index: int, node_name: str, op: str, outcome: str, reason: str = "") -> None:
        object.__setattr__(self, "node_index", node_index)
        object.__setattr__(self, "node_name", node_name)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "reason", reason)


#: what a node becomes when a Transpose is pushed through it, where its handler changes it
_PUSHED_FORMS = {
    "MaxPool": "com.microsoft.NhwcMaxPool",
    f"{MS}.QLinearAveragePool": f"{MS}.QLinearAveragePool(channels_last=1)",
    f"{MS}.QLinearGlobalAveragePool": f"{MS}.QLinearGlobalAveragePool(channels_last=1)",
    "Resize": "Resize on NHWC data",
}


def pushed_form(op: str) -> str:
    """What a node of op ``op`` (``domain.op`` outside ONNX) becomes once a Transpose is pushed through it."""
    return _PUSHED_FORMS.get(op, f"{op} on the transposed data")


def record_layout(push: PushEvent) -> PushEvent:
    """Record a layout decision as an event of the run (``converted``, ``pushed`` or ``no-match``); returns it,
    with what the node became filled in for a push."""
    if push.outcome == "pushed":
        if not push.reason:
            push = PushEvent(push.node_index, push.node_name, push.op, push.outcome, pushed_form(push.op))
        say(Kind.PUSHED, (push.node_name,), push, op=push.op, became=push.reason)
    elif push.outcome == "converted":
        say(Kind.CONVERTED, (push.node_name,), push, op=push.op, became=push.reason)
    else:
        emit_no_match(NoMatch(push.reason), push.node_name, push)
    return push


class PushChannel:
    """Where the main loop and the handlers report pushes: each one becomes an event of the run
    (:func:`record_layout`); ``channel[-1:]`` is the last one reported (the main loop asks whether the handler
    already said why it refused)."""

    def __init__(self) -> None:
        self._last: list[PushEvent] = []

    def append(self, push: PushEvent) -> None:
        self._last = [record_layout(push)]

    def __getitem__(self, index: slice) -> list[PushEvent]:
        return self._last[index]


class OptimizerCtx(ApiGraph):
    """One ``Optimize`` call on one graph: ORT's ``OptimizerCtx`` (opset, the EP whose nodes may be edited, whether
    the EP cost check runs first) and its ``ApiGraph``."""

    def __init__(self, graph: Graph, opset: int, provider: str, new_node_ep: str) -> None:
        super().__init__(graph, opset, new_node_ep)
        self.provider = provider
        self.outputs_leading: set[str] = set()
        #: during a run, every push the main loop considers goes here, as an event of the run (None outside a run)
        self.events: PushChannel | None = PushChannel() if active() is not None else None

    def refuse(self, node: Node, reason: str) -> bool:
        """A handler declining ``node`` says why (a ``no-match`` event of the run); returns False."""
        if self.events is not None:
            self.events.append(PushEvent(node.index, node.name, node.qualified_op, "refused", reason))
        return False

    def can_modify(self, node: Node) -> bool:
        """``CanModifyNode``: unassigned nodes, or nodes on the optimizer's EP."""
        return not node.ep or node.ep == self.provider

    def perm_of(self, node: Node) -> list[int] | None:
        perm = node.attr_ints("perm")
        return perm if perm is not None and valid_perm(perm) else None

    def int_attr(self, node: Node, name: str, default: int) -> int:
        """``GetAttributeIntDefault``: the attribute's int, ``default`` if absent or of another type."""
        return node.attr_int(name, default)

    def ints_attr(self, node: Node, name: str) -> list[int] | None:
        """``GetAttributeInts``: the attribute's ints, None if absent or of another type."""
        return node.attr_ints(name)

    def read_attr_or_input(self, node: Node, attr: str, slot: int, opset_with_input: int) -> list[int] | None:
        if self.opset < opset_with_input:
            return node.attr_ints(attr)
        if slot >= len(node.inputs) or not node.inputs[slot]:
            return None
        array = self.constant_array(node.inputs[slot])
        if array is None:
            return None
        return [int(v) for v in array.reshape(-1).astype(np.int64)]

    def quant_info(self, node: Node) -> Quant | None:
        """``GetQuantizationInfo``; None also for blocked quantization (unsupported)."""
        if len(node.inputs) < 2:
            return None
        scale_shape = self.shape(node.inputs[1])
        if scale_shape is None:
            return None
        if len(scale_shape) == 0 or (len(scale_shape) == 1 and scale_shape[0] == 1):
            return Quant(False, 1)
        rank = self.shape(node.inputs[0])
        if rank is None:
            return None
        axis = normalize_axis(self.int_attr(node, "axis", 1), len(rank))
        if axis is None:
            return None
        if self.int_attr(node, "block_size", 0) != 0:
            return None
        return Quant(True, axis)

    def single_consumer(self, value: str) -> Node | None:
        nodes, comprehensive = self.consumers(value)
        return nodes[0] if comprehensive and len(nodes) == 1 else None

    def dq_to_look_past(self, value: str) -> tuple[Node, Quant] | None:
        """``GetDQWithConstInitializerInputAndSingleConsumer``."""
        dq = self.producer(value)
        if dq is None or dq.op_type != "DequantizeLinear":
            return None
        if self.constant(dq.inputs[0]) is None:
            return None
        quant = self.quant_info(dq)
        if quant is None:
            return None
        if not self.consumers(dq.inputs[0])[1]:
            return None
        if self.single_consumer(dq.outputs[0]) is None:
            return None
        return dq, quant

    def dq_set_input(self, dq: Node, quant: Quant, new_input: str) -> None:
        """``DQToLookPast::SetUpdatedInput``."""
        self.set_input(dq, 0, new_input)
        self.set_attr(dq, "axis", quant.axis)
        self.set_shape(dq.outputs[0], self.shape(new_input))

    # -------------------------------------------------------------- node makers
    def make_transpose(self, value: str, perm: list[int]) -> Node:
        node = self.add_node("Transpose", [value])
        self.set_attr(node, "perm", perm)
        return node

    def make_squeeze_or_unsqueeze(self, op_type: str, value: str, axes: list[int]) -> Node:
        if self.opset < 13:
            node = self.add_node(op_type, [value])
            self.set_attr(node, "axes", axes)
            return node
        axes_name = self.add_int64(axes)
        return self.add_node(op_type, [value, axes_name])

    def _set_if_not_default(self, node: Node, name: str, value: int | None, default: int) -> None:
        if value is not None and value != default:
            self.set_attr(node, name, value)

    def make_q(
        self, domain: str, inputs: list[str], axis: int, block: int | None, out_dtype: int | None, sat: int | None
    ) -> Node:
        node = self.add_node("QuantizeLinear", inputs, domain)
        self._set_if_not_default(node, "axis", axis, 1)
        opset = self.graph.opset(domain)
        if opset is not None:
            onnx_domain = normalize_domain(domain) == ""
            if opset >= (19 if onnx_domain else 1):
                self._set_if_not_default(node, "saturate", sat, 1)
            if opset >= (21 if onnx_domain else 1):
                self._set_if_not_default(node, "block_size", block, 0)
                self._set_if_not_default(node, "output_dtype", out_dtype, 0)
        return node

    def make_dq(self, domain: str, inputs: list[str], axis: int, block: int | None) -> Node:
        node = self.add_node("DequantizeLinear", inputs, domain)
        self._set_if_not_default(node, "axis", axis, 1)
        opset = self.graph.opset(domain)
        if opset is not None and opset >= (21 if normalize_domain(domain) == "" else 1):
            self._set_if_not_default(node, "block_size", block, 0)
        return node

    def opt_int(self, node: Node, name: str) -> int | None:
        return node.attr_int(name)

    def make_qdq_node_unit(self, dq: Node) -> bool:
        """``MakeQDQNodeUnit``: DQ -> next (Transpose/Unsqueeze) becomes DQ -> next -> Q -> DQ."""
        nxt = self.single_consumer(dq.outputs[0])
        if nxt is None:
            return False
        domain = dq.domain
        scale = dq.inputs[1]
        zp = dq.inputs[2] if len(dq.inputs) > 2 else None
        quant = self.quant_info(dq)
        if quant is None:
            return False
        axis = quant.axis
        if quant.per_axis:
            if nxt.op_type == "Transpose":
                perm = self.perm_of(nxt)
                assert perm is not None
                axis = invert_perm(perm)[axis]
            elif nxt.op_type == "Unsqueeze":
                axes = self.read_attr_or_input_graph(nxt, "axes", 1, 13)
                assert axes is not None
                rank = self.shape(dq.outputs[0])
                if rank is None:
                    return False
                norm = normalize_axes(axes, len(rank) + len(axes))
                if norm is None:
                    return False
                axis = unsqueeze_axis(norm, axis)
        nxt_out = nxt.outputs[0]
        nxt_shape = self.shape(nxt_out)
        inputs = ["", scale] + ([zp] if zp is not None else [])
        out_dtype: int | None = None
        if zp is None:
            in_dtype = self.dtype(dq.inputs[0])
            if in_dtype is not None and in_dtype != onnx.TensorProto.UINT8:
                dq_opset = self.graph.opset(domain)
                if normalize_domain(domain) != "" or dq_opset is None or dq_opset < 21:
                    return False
                if in_dtype not in (2, 3, 4, 5, 17, 18, 19, 20):
                    return False
                out_dtype = in_dtype
        q = self.make_q(domain, inputs, axis, self.opt_int(dq, "block_size"), out_dtype, self.opt_int(dq, "saturate"))
        self.copy_value_info(dq.inputs[0], q.outputs[0])
        self.set_shape(q.outputs[0], nxt_shape)
        inputs[0] = q.outputs[0]
        new_dq = self.make_dq(domain, inputs, axis, self.opt_int(dq, "block_size"))
        self.copy_value_info(nxt_out, new_dq.outputs[0])
        self.move_output(nxt, 0, new_dq, 0)
        self.set_input(q, 0, nxt.outputs[0])
        self.copy_value_info(new_dq.outputs[0], nxt.outputs[0])
        return True

    def read_attr_or_input_graph(self, node: Node, attr: str, slot: int, opset_with_input: int) -> list[int] | None:
        """The graph-opset variant of ``ReadFromAttrOrInput`` (the node's own domain's opset)."""
        return self.read_attr_or_input(node, attr, slot, opset_with_input)

    # -------------------------------------------------------------- inputs and outputs
    def redirect(self, consumers: list[Node], old: str, new: str) -> None:
        """Point every input of ``consumers`` that reads ``old`` at ``new``."""
        for consumer in consumers:
            for k, inp in enumerate(consumer.inputs):
                if inp == old:
                    self.set_input(consumer, k, new)

    def detach_input(
        self, node: Node, i: int
    ) -> tuple[str, onnx.TensorProto | None, tuple[Node, Quant] | None, str, str, list[Node], bool]:
        """The start shared by ``TransposeInputImpl`` and ``UnsqueezeInput``: the input's value, its constant
        (looking past a DQ of a constant, whose input is then detached too), the DQ looked past and its input, the
        value to modify in place, and that value's other consumers (and whether they are all known); input ``i``
        of ``node`` is detached, so those consumers exclude it."""
        value = node.inputs[i]
        constant = self.constant(value, local=True)
        look: tuple[Node, Quant] | None = None
        dq_input = ""
        if constant is None:
            look = self.dq_to_look_past(value)
            if look is not None:
                dq_input = look[0].inputs[0]
                constant = self.constant(dq_input, local=True)
                self.set_input(look[0], 0, "")
        self.set_input(node, i, "")
        to_modify = dq_input if look is not None else value
        consumers, comprehensive = self.consumers(to_modify)
        return value, constant, look, dq_input, to_modify, consumers, comprehensive

    def producer_past_dq(
        self, value: str, consumers: list[Node], comprehensive: bool
    ) -> tuple[Node | None, tuple[Node, Quant] | None, list[Node], bool]:
        """The node producing ``value``, looking past a DQ with known quantization params (then also returned, with
        the consumers of the DQ's input in place of the given ``consumers``)."""
        producer = self.producer(value)
        if producer is not None and producer.op_type == "DequantizeLinear":
            found = self.quant_info(producer)
            if found is not None:
                consumers, comprehensive = self.consumers(producer.inputs[0])
                return self.producer(producer.inputs[0]), (producer, found), consumers, comprehensive
        return producer, None, consumers, comprehensive

    def transpose_input(self, node: Node, i: int, perm: list[int], perm_inv: list[int]) -> None:
        """``TransposeInputImpl``."""
        value, constant, look, dq_input, to_modify, consumers, comprehensive = self.detach_input(node, i)
        if constant is not None and comprehensive:
            restore_input = True
            restore_dq = look is not None
            try:
                dims = [int(d) for d in constant.dims[:]]
                if int(np.prod(dims)) == 1:
                    return
                if len(dims) == 1 and dims[0] == len(perm):
                    # values per axis (Resize's sizes, ...): a permuted copy; ORT asserts there is no DQ here, and a
                    # release build, with one, reads the initializer past the DQ and reconnects the DQ afterwards
                    self.permute_1d_constant(node, constant, i, to_modify, perm)
                    restore_input = False
                    return
                if consumers:
                    inv = self.make_transpose(to_modify, perm_inv)
                    self.copy_value_info(to_modify, inv.outputs[0])
                    self.redirect(consumers, to_modify, inv.outputs[0])
                self.transpose_initializer(to_modify, perm)
                if look is not None:
                    quant = look[1]
                    if quant.per_axis:
                        quant.axis = perm_inv[quant.axis]
                    self.dq_set_input(look[0], quant, to_modify)
                    restore_dq = False
            finally:
                if restore_input:
                    self.set_input(node, i, value)
                if restore_dq and look is not None:
                    self.set_input(look[0], 0, dq_input)
            return
        # Case 2: a Transpose, possibly through a DQ
        inp_node, look2, consumers, comprehensive = self.producer_past_dq(value, consumers, comprehensive)
        if inp_node is not None and inp_node.op_type == "Transpose":
            perm2 = self.perm_of(inp_node)
            if perm2 is not None and len(perm2) == len(perm):
                if perm2 == perm_inv:
                    pre = inp_node.inputs[0]
                    if look2 is not None:
                        q = look2[1]
                        if q.per_axis:
                            q.axis = perm_inv[q.axis]
                        self.dq_set_input(look2[0], q, pre)
                        self.set_input(node, i, look2[0].outputs[0])
                    else:
                        self.set_input(node, i, pre)
                    if comprehensive and len(consumers) == (1 if look2 is not None else 0):
                        self.remove_node(inp_node)
                    return
                if look2 is None:
                    combined = compose_perm(perm2, perm)
                    tr = self.make_transpose(inp_node.inputs[0], combined)
                    self.copy_value_info(value, tr.outputs[0])
                    self.permute_dims(tr.outputs[0], perm)
                    if comprehensive and not consumers:
                        self.remove_node(inp_node)
                    self.set_input(node, i, tr.outputs[0])
                    return
        if look2 is not None:
            inp_node = look2[0]
            consumers, comprehensive = self.consumers(value)
        # Case 3: an existing Transpose with the same perm
        for consumer in consumers:
            if consumer.op_type == "Transpose" and self.perm_of(consumer) == perm:
                self.set_input(node, i, consumer.outputs[0])
                return
        # Case 4: a new Transpose
        tr = self.make_transpose(value, perm)
        self.copy_value_info(value, tr.outputs[0])
        self.permute_dims(tr.outputs[0], perm)
        self.set_input(node, i, tr.outputs[0])
        if inp_node is not None and inp_node.op_type == "DequantizeLinear":
            self.make_qdq_node_unit(inp_node)

    def permute_1d_constant(self, node: Node, constant: onnx.TensorProto, i: int, name: str, perm: list[int]) -> None:
        """``Permute1DConstant``: input ``i`` of ``node`` gets a new initializer holding the 1-D ``constant``'s
        elements in ``perm`` order (same type and shape; an empty one stays empty); ``name`` is removed if nothing
        reads it any more."""
        array = self.constant_array(name)
        data = b"" if array is None else np.ascontiguousarray(array).tobytes()
        width = len(data) // len(perm)
        permuted = b"".join(data[p * width : (p + 1) * width] for p in perm)
        new = self.add_initializer(int(constant.data_type), [int(d) for d in constant.dims[:]], permuted)
        self.set_input(node, i, new)
        if not self.has_consumers(name):
            self.graph.remove_initializer(name)

    def permute_input(self, node: Node, i: int, perm: list[int]) -> None:
        """``PermuteInput``: a 1-D input holding one value per axis (or per begin/end of each axis) is reordered:
        a constant of length ``len(perm)`` (or empty) by :meth:`permute_1d_constant`, anything else by a new
        ``Gather(input, perm, axis=0)`` (no DQ is looked past: pads, roi, scales and sizes are never quantized)."""
        name = node.inputs[i]
        constant = self.constant(name)
        if constant is not None and len(constant.dims) == 1 and int(constant.dims[0]) in (len(perm), 0):
            self.permute_1d_constant(node, constant, i, name, perm)
            return
        indices = self.add_int64(perm)
        gather = self.add_node("Gather", [name, indices])
        self.copy_value_info(name, gather.outputs[0])
        self.set_attr(gather, "axis", 0)
        self.set_input(node, i, gather.outputs[0])

    def add_int_matching(self, values: list[int], dtype: int | None) -> str:
        """``AddIntInitializerMatchingDtype``: an int32 initializer if ``dtype`` is int32, else int64."""
        if dtype == onnx.TensorProto.INT32:
            data = np.array(values, dtype=np.int32).tobytes()
            return self.add_initializer(onnx.TensorProto.INT32, [len(values)], data)
        return self.add_int64(values)

    def int_values(self, name: str) -> tuple[list[int], int] | None:
        """A constant int32/int64 tensor's values and type (``TensorIntData``), None if ``name`` is no constant."""
        constant = self.constant(name)
        array = self.constant_array(name)
        if constant is None or array is None:
            return None
        return [int(v) for v in array.reshape(-1)], int(constant.data_type)

    def unsqueeze_input(self, node: Node, i: int, axes: list[int]) -> None:
        """``UnsqueezeInput``."""
        value, constant, look, _, to_modify, consumers, comprehensive = self.detach_input(node, i)
        if constant is not None and comprehensive:
            if consumers:
                sq = self.make_squeeze_or_unsqueeze("Squeeze", to_modify, axes)
                self.copy_value_info(to_modify, sq.outputs[0])
                self.redirect(consumers, to_modify, sq.outputs[0])
            self.reshape_initializer(to_modify, unsqueeze_shape([int(d) for d in constant.dims[:]], axes))
            if look is not None:
                quant = look[1]
                if quant.per_axis:
                    quant.axis = unsqueeze_axis(axes, quant.axis)
                self.dq_set_input(look[0], quant, to_modify)
            self.set_input(node, i, value)
            return
        inp_node, look2, consumers, comprehensive = self.producer_past_dq(value, consumers, comprehensive)
        if inp_node is not None and inp_node.op_type == "Squeeze":
            sq_axes = self.read_attr_or_input(inp_node, "axes", 1, 13)
            if sq_axes is not None and sq_axes == axes:
                pre = inp_node.inputs[0]
                if look2 is not None:
                    q = look2[1]
                    if q.per_axis:
                        q.axis = unsqueeze_axis(axes, q.axis)
                    self.dq_set_input(look2[0], q, pre)
                    self.set_input(node, i, look2[0].outputs[0])
                else:
                    self.set_input(node, i, pre)
                if comprehensive and len(consumers) == (1 if look2 is not None else 0):
                    axes_input = inp_node.inputs[1] if len(inp_node.inputs) > 1 else ""
                    self.remove_node(inp_node)
                    if self.opset >= 13 and not self.has_consumers(axes_input):
                        self.graph.remove_initializer(axes_input)
                return
        if look2 is not None:
            inp_node = look2[0]
        unsq = self.make_squeeze_or_unsqueeze("Unsqueeze", value, axes)
        out = unsq.outputs[0]
        self.copy_value_info(value, out)
        self.unsqueeze_dims(out, axes)
        if inp_node is not None and inp_node.op_type == "Transpose":
            perm = self.perm_of(inp_node)
            if perm is not None:
                new_input = self.help_handle_unsqueeze(unsq, perm, invert_perm(perm), axes)
                self.set_input(node, i, new_input)
                return
        self.set_input(node, i, out)
        if inp_node is not None and inp_node.op_type == "DequantizeLinear":
            self.make_qdq_node_unit(inp_node)

    def transpose_output(self, node: Node, i: int, perm: list[int], perm_inv: list[int]) -> str:
        tr = self.make_transpose("", perm)
        self.move_output(node, i, tr, 0)
        new_output = node.outputs[i]
        self.set_input(tr, 0, new_output)
        old = tr.outputs[0]
        self.copy_value_info(old, new_output)
        self.permute_dims(new_output, perm_inv)
        return old

    def transpose_outputs(self, node: Node, perm: list[int]) -> None:
        if perm == list(range(len(perm))):
            return
        perm_inv = invert_perm(perm)
        for j in range(len(node.outputs)):
            self.transpose_output(node, j, perm, perm_inv)

    def transpose_inputs(self, node: Node, perm: list[int], indices: list[int]) -> None:
        perm_inv = invert_perm(perm)
        for j in indices:
            self.transpose_input(node, j, perm, perm_inv)

    def normalize_input_ranks(self, node: Node, rank: int, indices: list[int]) -> bool:
        ranks: list[int] = []
        for j in indices:
            shape = self.shape(node.inputs[j])
            if shape is None or len(shape) > rank:
                return False
            ranks.append(len(shape))
        for j, r in zip(indices, ranks, strict=True):
            if rank - r > 0:
                self.unsqueeze_input(node, j, list(range(rank - r)))
        return True

    def help_handle_unsqueeze(self, node: Node, perm: list[int], perm_inv: list[int], axes: list[int]) -> str:
        self.transpose_input(node, 0, perm_inv, invert_perm(perm_inv))
        new_perm = unsqueeze_perm(axes, perm)
        return self.transpose_output(node, 0, new_perm, invert_perm(new_perm))
