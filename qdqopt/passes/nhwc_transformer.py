"""NhwcTransformer: move the CPU EP's channels-last kernels to NHWC and let the transpose optimizer clean up
(``nhwc_transformer.cc``; spec §10.2).

::

    Q ─> QLinearConv ─> QLinearConv ─> DQ
        becomes (wrap each, then optimize)
    Q ─> Transpose(0,2,3,1) ─> ms.QLinearConv(channels_last=1) ─> ms.QLinearConv(channels_last=1)
      ─> Transpose(0,3,1,2) ─> DQ

For each CPU node in topological order whose op, domain and input-0 element type have an entry in the conversion
table (:func:`conversion_table`) and whose filter accepts it, not yet channels-last and with a known input-0 rank:
set ``channels_last=1`` (ops that have it), wrap input 0 in ``Transpose(channel first -> last)`` (and the fused Sum
input 3 where the target takes it) and output 0 in ``Transpose(channel last -> first)``, and swap the op for its
target (``CopyNode``: a new node named after the op type). If anything changed, the transpose optimizer runs once on
the whole graph with the CPU EP's cost check and ORT's extended handlers, pushing the new Transposes until they
cancel; MaxPools on u8/s8 become ``com.microsoft.NhwcMaxPool`` on the way.

Weights are not transposed: ``com.microsoft.QLinearConv`` with ``channels_last=1`` takes OIHW weights.

During a run every conv, pool and Resize (:data:`LAYOUT_OPS`) gets events (:mod:`qdqopt.events`, payload
:class:`~qdqopt.passes.transpose_optimization.context.PushEvent`): ``converted`` or a ``no-match`` with the check that
refused it, in topological order; then those of the transpose optimizer (``pushed``, or ``no-match`` with the
handler's or the cost check's refusal); last, a ``no-match`` for each pool or Resize that only a push could move to
NHWC and that no push reached. ``qdqopt explain --level layout`` reads them back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import onnx

from qdqopt import events
from qdqopt.graph import Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.transpose_optimization import OptimizerCtx, optimize
from qdqopt.passes.transpose_optimization.context import CPU, MS, PushEvent, record_layout
from qdqopt.passes.transpose_optimization.core import MAX_OPSET, MIN_OPSET
from qdqopt.passes.transpose_optimization.layout import (
    swap_node_op_type_domain_and_since_version,
    wrap_transposes_around_node,
)
from qdqopt.passes.transpose_optimization.perms import channel_first_to_last_perm, channel_last_to_first_perm
from qdqopt.passes.transpose_optimizer import write_back_types
from qdqopt.target import Target

__all__ = ["LAYOUT_OPS", "NhwcTransformer", "OpTransformInfo", "conversion_table"]

_NHWC_DOMAIN = "com.ms.internal.nhwc"
_ACL = "ACLExecutionProvider"
_U8, _S8, _F16, _F32 = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT)

Filter = Callable[[OptimizerCtx, Node], bool]
#: the ops (any domain) whose every decision is recorded: those that have an NHWC form on the CPU EP
LAYOUT_OPS = frozenset(
    {
        "QLinearConv",
        "Conv",
        "FusedConv",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "Resize",
    }
)
#: the ops (``domain.op``) that only a pushed Transpose moves to NHWC (ORT's extended handlers)
_BY_PUSH = frozenset({"MaxPool", "Resize", f"{MS}.QLinearAveragePool", f"{MS}.QLinearGlobalAveragePool"})


@dataclass(frozen=True)
class OpTransformInfo:
    """``OpTransformInfo``: the target op, whether it has ``channels_last``, whether the fused Sum input 3 is
    transposed too, and an optional filter."""

    op_type: str
    domain: str
    version: int
    has_channels_last: bool
    transpose_fused_sum_input: bool = False
    filter: Filter | None = None
    #: the filter's refusal, in words (``explain``)
    filter_text: str = ""


def _fp16_conv_filter(ctx: OptimizerCtx, node: Node) -> bool:
    dilations = node.attr_ints("dilations", [])
    if (len(dilations) >= 1 and dilations[0] != 1) or (len(dilations) >= 2 and dilations[1] != 1):
        return False
    return node.attr_int("group", 1) == 1


def _kleidiai_filter(ctx: OptimizerCtx, node: Node) -> bool:
    """``FloatNhwcWrapperFilter`` ends in MLAS's SME kernel check (``MlasConvSupportsSymmetricChannelsLast2DFloat
    Kernel``), which only an arm64 build with SME can answer: qdqopt does not model it and keeps such Convs NCHW
    (the table entry exists, so ``explain`` names this filter)."""
    return False


def conversion_table(target: Target) -> dict[tuple[str, str, int], OpTransformInfo]:
    """The table ``NhwcTransformer``'s constructor builds from the CPU kernel registry: (op, domain, input-0 element
    type) to the target. u8/s8 QLinearConv always; the fp16 and SME float entries on arm64 builds only."""
    qconv = OpTransformInfo("QLinearConv", MS, 1, has_channels_last=True)
    table: dict[tuple[str, str, int], OpTransformInfo] = {
        ("QLinearConv", "", _S8): qconv,
        ("QLinearConv", MS, _S8): qconv,
        ("QLinearConv", "", _U8): qconv,
        ("QLinearConv", MS, _U8): qconv,
    }
    if target.fp16_nhwc_kernels:
        conv16 = OpTransformInfo(
            "NhwcFusedConv", MS, 1, False, False, _fp16_conv_filter, "dilations other than 1 or group other than 1"
        )
        table[("Conv", "", _F16)] = conv16
        table[("FusedConv", MS, _F16)] = OpTransformInfo(
            "NhwcFusedConv", MS, 1, False, True, _fp16_conv_filter, "dilations other than 1 or group other than 1"
        )
    if target.kleidiai_sme:
        conv32 = OpTransformInfo("NhwcFusedConv", MS, 1, False, True, _kleidiai_filter, "MLAS SME kernel check")
        table[("Conv", "", _F32)] = conv32
        table[("FusedConv", MS, _F32)] = conv32
    if target.fp16_nhwc_kernels:
        table[("MaxPool", "", _F16)] = OpTransformInfo("MaxPool", _NHWC_DOMAIN, 12, False)
        table[("AveragePool", "", _F16)] = OpTransformInfo("AveragePool", _NHWC_DOMAIN, 11, False)
        table[("GlobalAveragePool", "", _F16)] = OpTransformInfo("GlobalAveragePool", _NHWC_DOMAIN, 1, False)
    return table


def _no_entry(key: tuple[str, str, int]) -> str:
    op, domain, elem = key
    name = onnx.TensorProto.DataType.Name(elem).lower() if elem else "untyped"
    if op == "QLinearConv":
        return f"input 0 is {name}; only uint8/int8 QLinearConv have an NHWC kernel"
    if domain not in ("", MS):
        return f"{domain} op: not in the conversion table"
    if op in ("Conv", "FusedConv"):
        return f"{name} {op}: NHWC float kernels exist only in arm64 builds (fp16; fp32 with KleidiAI SME)"
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        return f"{name} {op}: the table only has fp16 pools (arm64); u8/s8 MaxPool goes NHWC through the transposes"
    if op in ("Resize", "QLinearAveragePool", "QLinearGlobalAveragePool"):
        return f"{op}: not in the conversion table; only a pushed channels-last Transpose takes it to NHWC"
    return "not in the conversion table"


def lookup(
    table: dict[tuple[str, str, int], OpTransformInfo], ctx: OptimizerCtx, node: Node
) -> tuple[OpTransformInfo | None, str]:
    """``NhwcConvLookup``: the node's entry (None and why not when it has none or its filter refuses)."""
    if not node.inputs:
        return None, "no inputs"
    if node.op_type not in LAYOUT_OPS:  # no entry in the table, whatever the type (and no event to record)
        return None, "not in the conversion table"
    key = (node.op_type, normalize_domain(node.domain), ctx.dtype(node.inputs[0]) or 0)
    info = table.get(key)
    if info is None:
        return None, _no_entry(key)
    if info.filter is not None and not info.filter(ctx, node):
        return None, f"the filter refused it ({info.filter_text})"
    return info, ""


class NhwcTransformer(GraphTransformer):
    """``NhwcTransformer`` (Level3, CPU EP)."""

    name = "NhwcTransformer"

    def _convert(self, graph: Graph, target: Target) -> tuple[OptimizerCtx, bool]:
        opset = graph.opset("") or 0
        ctx = OptimizerCtx(graph, opset, CPU, CPU)
        table = conversion_table(target)
        modified = False
        log = events.active()
        #: the pools and Resizes left to a pushed Transpose (recorded if none reaches them)
        waiting: list[PushEvent] = []

        for node in graph.topological_order():
            if graph.node(node.index) is None:
                continue
            if node.ep not in (CPU, _ACL):
                _skip(log, waiting, node, f"assigned to {node.ep or 'no EP'}, not the CPU EP")
                continue
            info, why = lookup(table, ctx, node)
            if info is None:
                _skip(log, waiting, node, why)
                continue
            if info.has_channels_last and ctx.int_attr(node, "channels_last", 0) == 1:
                _skip(log, waiting, node, "already channels_last=1")
                continue
            shape = ctx.shape(node.inputs[0])
            if shape is None:
                _skip(log, waiting, node, "input 0 has no shape (unknown rank)")
                continue
            if log is not None and node.op_type in LAYOUT_OPS:
                record_layout(
                    PushEvent(node.index, node.name, node.qualified_op, "converted", f"{info.domain}.{info.op_type}")
                )
            if info.has_channels_last:
                ctx.set_attr(node, "channels_last", 1)
            rank = len(shape)
            input_perm = channel_first_to_last_perm(rank)
            input_perms: list[list[int] | None] = [None] * len(node.inputs)
            if node.inputs:
                input_perms[0] = input_perm
            if info.transpose_fused_sum_input and len(node.inputs) > 3 and node.inputs[3]:
                input_perms[3] = input_perm
            wrap_transposes_around_node(ctx, node, input_perms, [channel_last_to_first_perm(rank)])
            if (
                normalize_domain(node.domain) != info.domain
                or node.op_type != info.op_type
                or node.since_version != info.version
            ):
                swap_node_op_type_domain_and_since_version(ctx, node, info.op_type, info.domain)
            modified = True
        mark = len(log.events) if log is not None else 0
        if modified and MIN_OPSET <= opset <= MAX_OPSET:
            optimize(ctx)
        if log is not None and waiting:
            _record_unreached(log, mark, waiting)
        return ctx, modified

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        for node in graph.topological_order():
            self.recurse(node, ctx, graph_level)
        octx, modified = self._convert(graph, ctx.target)
        write_back_types(graph, octx)
        return modified


def _skip(log: events.EventLog | None, waiting: list[PushEvent], node: Node, reason: str) -> None:
    """Record that a layout-sensitive node stays as it is, and why; the pools and Resizes wait for a Transpose.

    (A module function: compiled, a function nested in ``_convert`` would share its locals in an environment object
    that refers to it in turn, a reference cycle holding the graph until the cyclic collector runs.)"""
    if log is not None and node.op_type in LAYOUT_OPS:
        push = record_layout(PushEvent(node.index, node.name, node.qualified_op, "skipped", reason))
        if push.op in _BY_PUSH:
            waiting.append(push)


def _record_unreached(log: events.EventLog, since: int, waiting: list[PushEvent]) -> None:
    """A ``no-match`` for each of ``waiting`` that no push event recorded since ``since`` is about."""
    reached = {(e.data.node_index, e.data.node_name) for e in log.events[since:] if isinstance(e.data, PushEvent)}
    for push in waiting:
        if (push.node_index, push.node_name) not in reached:
            record_layout(replace(push, outcome="not reached", reason="no channels-last Transpose reached it"))
