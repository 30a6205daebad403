"""NchwcTransformer: float convolutions and what surrounds them move to MLAS's blocked NCHWc layout.

``nchwc_transformer.cc``, Level3 (``ORT_ENABLE_LAYOUT``), registered when ``MlasNchwcGetBlockSize() > 1`` (every
x86-64: 8 with AVX2, 16 with AVX-512F; ``ctx.target.nchwc_block_size``). On a QDQ model it converts the Convs and
pools the QDQ fusion left in float. ``B`` is the block size; the channel dimension of an NCHWc tensor is padded to a
multiple of ``B`` and blocked::

    X ─> Conv(W, B) ─> c ─> Relu ─> r ─> MaxPool ─> p ─> Conv(W2) ─> y
                                  =>
    X ─> ReorderInput ─> reorder_token_0 ─> nchwc.Conv(reorder, B, activation="Relu") ─> reorder_token_1
      ─> nchwc.MaxPool ─> reorder_token_2 ─> nchwc.Conv(reorder_token_3) ─> reorder_token_4 ─> ReorderOutput ─> y

Rules (ORT 1.32.0, checked against it on this machine):

* One walk per graph over a topological snapshot (subgraphs first, each with its own state); only nodes on the CPU
  EP. Every converted op is a new ``com.microsoft.nchwc`` node named ``GenerateNodeName(<output>+"_nchwc")`` (with
  ``_mul_nchwc`` / ``_bn_nchwc`` for Mul and BatchNormalization), its doc string equal to its name, the original
  node removed at the end. Its output is a new value ``reorder[_token_N]``; the pass remembers, per original
  output, the NCHWc value, the node producing it, how many uses the original had (output edges, +1 for a graph
  output) and how many are still unconverted, the logical channel count, and a symbolic 4-d shape (each dim the
  value it was first seen on, spatial dims with a count of stride-2 halvings).
* ``Conv`` 1/11/22 and ``com.microsoft.FusedConv`` 1: the weight a constant initializer of this graph, float, rank 4;
  a bias, when there is an input 2 (even empty), also one, float, ``[O]``; a FusedConv with a Sum input only when
  that input is already NCHWc. Group 1: fewer than ``B`` input channels read the NCHW input directly (filter
  OIHWBo, no ReorderInput); otherwise the input channels must be a multiple of 4 and the filter is OIHWBiBo with
  the input channels padded to ``B``. Group > 1: output channels a multiple of 4; depthwise (1 input channel per
  group, O == group) uses OIHWBo and ``group`` becomes the padded channel count; otherwise input channels and
  output channels per group must be multiples of ``B``. The reordered filter is a new initializer ``reorder..``
  (shared by Convs of the same weight and layout); a bias is padded with zeros to ``Op`` (a new initializer) only
  when O is not a multiple of ``B``. An NCHW input gets a ``ReorderInput`` (one per input value); an NCHWc input is
  used directly.
* ``MaxPool`` (1 output) / ``AveragePool`` (not ``ceil_mode=1`` with ``count_include_pad != 0``), and, once all
  their inputs are NCHWc, ``GlobalMaxPool`` / ``GlobalAveragePool``: float rank-4 input whose channel count is a
  known multiple of ``B``.
* ``Mul`` 7/13/14 with one NCHWc input and a constant float ``[C,1,1]`` or ``[1,C,1,1]`` scale: a depthwise 1x1
  ``nchwc.Conv`` (``group`` = padded C) with the scale padded with ones (``mul_scale..``); two NCHWc inputs: as Add
  below without the Conv fusion.
* Nodes whose input edges are all gone (their producers were converted): ``Add``/``Sum`` of NCHWc inputs of equal
  channels: with provably equal shapes the op reads the NCHWc values, and a two-input Add whose one input comes
  from a single-use nchwc.Conv without activation is fused into it as its Sum input (bias ``""`` when it had none);
  with unprovable shapes Reshapes split the channel blocks (``[0,Cp/B,0,0,B]``) and unsplit them (``[0,Cp,0,0]``,
  ``Cp`` the padded channel count; one shape initializer per direction and ``Cp``).
  ``Concat`` on axis 1 of NCHWc inputs whose channels are multiples of ``B``. ``Relu``/``Sigmoid``/``Tanh``/
  ``HardSigmoid`` are fused into a single-use nchwc.Conv without activation (HardSigmoid with
  ``activation_params=[alpha, beta]``), else they (and ``Gelu``, ``QuickGelu``) read the NCHWc value. First, a
  HardSigmoid (alpha, beta within ``1e-6`` of 1/6, 0.5; one output edge) on an nchwc.Conv output without activation
  whose two uses are it and a ``Mul`` of both (an inlined HardSwish), neither a graph output: the Conv gets
  ``activation="HardSwish"`` and both nodes go (:meth:`_Impl.try_fuse_hardswish`).
  ``BatchNormalization`` with constant float ``[C]`` parameters becomes a depthwise 1x1 nchwc.Conv (``bn_scale..``,
  ``bn_B..``, zero padded). ``Transpose`` perm ``[0,2,3,1]`` becomes ``ReorderOutput(channels_last=1)``;
  ``Upsample``/``Resize`` with integer spatial scales (nearest: asymmetric + floor; linear: asymmetric,
  align_corners or half_pixel) becomes ``nchwc.Upsample``.
* A ``Transpose`` perm ``[0,3,1,2]`` with one consumer, not a graph output, feeding the next ReorderInput is
  folded into it (``channels_last=1``).
* At the end, every NCHWc value whose original still has unconverted uses gets a ``ReorderOutput(channels)``
  producing the original. ORT walks an ``absl::flat_hash_map`` keyed by pointers here, so with two or more such
  values the order (hence names and node order) varies from run to run; qdqopt uses the order of creation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import onnx

from qdqopt.graph import Edge, Graph, Node
from qdqopt.graph.schema import normalize_domain
from qdqopt.graph.stdhash import StdUnorderedMap
from qdqopt.passes.base import GraphTransformer, PassContext
from qdqopt.passes.graph_utils import constant_initializer, is_constant, is_supported_op
from qdqopt.passes.nchwc_reorder import align_up, reorder_filter_oihwbibo, reorder_filter_oihwbo
from qdqopt.passes.qdq_util import tensor_from_array

__all__ = ["NchwcTransformer"]

CPU = "CPUExecutionProvider"
MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
_DIMS = 4
_SPATIAL = 2
#: ReorderInput needs channel counts aligned to this.
_CHANNEL_ALIGNMENT = 4
_TRANSPOSE_VERSIONS = (1, 13, 21, 23, 24, 25)
#: HardSigmoid parameters that make ``Mul(x, HardSigmoid(x))`` a HardSwish, and how far (float32) they may be off
_HARDSWISH_ALPHA = np.float32(1.0) / np.float32(6.0)
_HARDSWISH_BETA = np.float32(0.5)
_HARDSWISH_TOLERANCE = np.float32(1e-6)


@dataclass
class _Shape:
    """``NchwcArgument::Shape``: per dim, the value it was derived from; per spatial dim, stride-2 halvings."""

    dims: list[str]
    shifts: list[int]

    @classmethod
    def of(cls, value: str) -> _Shape:
        return cls([value] * _DIMS, [0] * _SPATIAL)

    def copy(self) -> _Shape:
        return _Shape(list(self.dims), list(self.shifts))

    def dim_equal(self, other: _Shape, dim: int) -> bool:
        if self.dims[dim] != other.dims[dim]:
            return False
        return dim < _DIMS - _SPATIAL or self.shifts[dim - 2] == other.shifts[dim - 2]


@dataclass(eq=False, init=False)
class _PNode:
    """A node as the pass sees it: an existing node (``existing``) with possibly changed inputs/outputs, or a node
    the pass creates (added to the graph at the end, in creation order)."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, onnx.AttributeProto] = field(default_factory=dict)
    attr_map: StdUnorderedMap = field(default_factory=StdUnorderedMap)
    doc_string: str = ""
    existing: Node | None = None

    def __init__(
        self,
        name: str,
        op_type: str,
        domain: str,
        inputs: list[str],
        outputs: list[str],
        attributes: dict[str, onnx.AttributeProto] | None = None,
        attr_map: StdUnorderedMap | None = None,
        doc_string: str = "",
        existing: Node | None = None,
    ) -> None:
        self.name, self.op_type, self.domain, self.inputs, self.outputs = name, op_type, domain, inputs, outputs
        self.attributes = {} if attributes is None else attributes
        self.attr_map = StdUnorderedMap() if attr_map is None else attr_map
        self.doc_string, self.existing = doc_string, existing

    def add_attribute(self, attr: onnx.AttributeProto) -> None:
        """``Node::AddAttribute``: replace the value, keep an existing key's place."""
        self.attributes[attr.name] = attr
        self.attr_map.insert(attr.name)

    def has_attribute(self, name: str) -> bool:
        return name in self.attributes


@dataclass(eq=False)
class _NchwcArg:
    """``NchwcArgument``."""

    node: _PNode
    value: str
    starting_uses: int
    remaining_uses: int
    channels: int
    shape: _Shape


def _dim_value(dim: int | str | None) -> int | None:
    return dim if isinstance(dim, int) else None


def _dim_param(dim: int | str | None) -> str | None:
    """A symbolic dim as ORT keeps it (:data:`~qdqopt.graph.ShapeDims` has none for the symbols ONNX inference
    invents, ``unk__N``: unknown dims to ORT); an empty name is none either."""
    return dim if isinstance(dim, str) and dim else None


class _Impl:
    """``NchwcTransformerImpl`` for one graph. Graph edits are deferred to :meth:`finalize`: the pass reads the graph
    as it was when the walk started (ORT's edits during the walk add nodes without edges and only remove edges)."""

    #: create the final ReorderOutputs in reverse creation order (ORT's order is random; tests try both)
    reverse_final_order: ClassVar[bool] = False

    def __init__(self, graph: Graph, block: int) -> None:
        self.graph = graph
        self.block = block
        self.in_edges: dict[int, list[Edge]] = {n.index: graph.input_edges(n) for n in graph.nodes()}
        self.out_edges: dict[int, list[Edge]] = {n.index: graph.output_edges(n) for n in graph.nodes()}
        self.removed_edges: set[Edge] = set()
        self.views: dict[int, _PNode] = {}
        self.created: list[_PNode] = []
        self.new_initializers: list[onnx.TensorProto] = []
        self.removed_nodes: list[int] = []  # push_front order
        self.nchwc_args: dict[str, _NchwcArg] = {}
        self.reorder_inputs: dict[str, str] = {}
        self.filters_oihwbo: dict[str, str] = {}
        self.filters_oihwbibo: dict[str, str] = {}
        self.aligned_biases: dict[str, str] = {}
        self.reshape_shapes: dict[tuple[bool, int], str] = {}
        self.transpose_node: Node | None = None
        self.transpose_output: str | None = None

    # ------------------------------------------------------------------ bookkeeping
    def view(self, node: Node) -> _PNode:
        found = self.views.get(node.index)
        if found is None:
            found = _PNode(
                node.name,
                node.op_type,
                node.domain,
                list(node.inputs),
                list(node.outputs),
                node.attributes,
                node.attr_map,
                existing=node,
            )
            self.views[node.index] = found
        return found

    def add_node(
        self,
        name: str,
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        *,
        domain: str = NCHWC,
        like: Node | None = None,
        doc_string: str | None = None,
    ) -> _PNode:
        """``Graph::AddNode(name, op_type, description=doc, ...)`` on the CPU EP; ``like``: copy its attributes."""
        node = _PNode(name, op_type, domain, list(inputs), list(outputs), doc_string=op_type)
        node.doc_string = name if doc_string is None else doc_string
        if like is not None:
            node.attributes = dict(like.attributes)
            node.attr_map = like.attr_map.copy()
        self.created.append(node)
        return node

    def add_initializer(self, base: str, array: np.ndarray, dtype: int) -> str:
        name = self.graph.generate_value_name(base)
        self.new_initializers.append(tensor_from_array(array, name, dtype))
        return name

    def input_edge_count(self, node: Node) -> int:
        return sum(1 for e in self.in_edges.get(node.index, ()) if e not in self.removed_edges)

    def output_edge_count(self, node: Node) -> int:
        return sum(1 for e in self.out_edges.get(node.index, ()) if e not in self.removed_edges)

    def remove_node_output_edges(self, node: Node) -> None:
        self.removed_edges.update(self.out_edges.get(node.index, ()))

    def produces_graph_output(self, node: Node) -> bool:
        return any(v and self.graph.is_graph_output(v) for v in node.outputs)

    def remove_output_edges(self, node: Node) -> int:
        """``RemoveOutputEdges``: the uses of the node's outputs, +1 for a graph output."""
        count = self.output_edge_count(node)
        self.remove_node_output_edges(node)
        return count + 1 if self.produces_graph_output(node) else count

    def create_nchwc_argument(self, node: Node, nchwc_node: _PNode, channels: int, shape: _Shape) -> None:
        uses = self.remove_output_edges(node)
        original = nchwc_node.outputs[0]
        value = self.graph.generate_value_name("reorder")
        self.nchwc_args[original] = _NchwcArg(nchwc_node, value, uses, uses, channels, shape)
        nchwc_node.outputs[0] = value

    def fuse_nchwc_argument(self, node: Node, arg: _NchwcArg) -> None:
        uses = self.remove_output_edges(node)
        original = node.outputs[0]
        self.nchwc_args[original] = _NchwcArg(arg.node, arg.node.outputs[0], uses, uses, arg.channels, arg.shape)

    def insert_reorder_input(self, node: _PNode) -> None:
        original = node.inputs[0]
        found = self.reorder_inputs.get(original)
        if found is not None:
            node.inputs[0] = found
            return
        value = self.graph.generate_value_name("reorder")
        self.reorder_inputs[original] = value
        reorder = self.add_node(self.graph.generate_node_name("ReorderInput"), "ReorderInput", [original], [value])
        reorder.doc_string = "ReorderInput"
        node.inputs[0] = value
        if self.transpose_output == original and self.transpose_node is not None:
            reorder.inputs[0] = self.transpose_node.inputs[0]
            reorder.add_attribute(onnx.helper.make_attribute("channels_last", 1))
            self.remove_node_output_edges(self.transpose_node)
            self.removed_nodes.insert(0, self.transpose_node.index)
            self.transpose_node = None

    def shape_inference(self, node: Node, source: _Shape, out: _Shape, filter_dims: list[int] | None) -> None:
        """``ConvPoolShapeInference``."""
        out.dims[0] = source.dims[0]
        pads, strides, dilations = node.attr_ints("pads"), node.attr_ints("strides"), node.attr_ints("dilations")
        if (
            (pads is not None and len(pads) != 2 * _SPATIAL)
            or (strides is not None and len(strides) != _SPATIAL)
            or (dilations is not None and len(dilations) != _SPATIAL)
        ):
            return
        kernel_shape: list[int] | None = None
        if filter_dims is None:
            kernel_shape = node.attr_ints("kernel_shape")
            if kernel_shape is None or len(kernel_shape) != _SPATIAL:
                return
        same_shape = False
        auto_pad = node.attr_str("auto_pad")
        if auto_pad is not None and auto_pad != "NOTSET":
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                same_shape = True
            elif auto_pad != "VALID":
                return
            pads = None
        for i in range(_SPATIAL):
            if dilations is not None and dilations[i] != 1:
                continue
            stride = 1
            if strides is not None:
                stride = strides[i]
                if stride not in (1, 2):
                    continue
            padding = pads[i] + pads[i + _SPATIAL] if pads is not None else 0
            kernel = kernel_shape[i] if kernel_shape is not None else filter_dims[2 + i]  # type: ignore[index]
            if padding + 1 == kernel or same_shape:
                out.dims[2 + i] = source.dims[2 + i]
                out.shifts[i] = source.shifts[i] + stride - 1

    # ------------------------------------------------------------------ transforms
    def transform(self, node: Node) -> None:
        if is_supported_op(node, "Transpose", _TRANSPOSE_VERSIONS):
            self.track_transpose_from_nhwc(node)
        if is_supported_op(node, "Conv", (1, 11, 22)) or is_supported_op(node, "FusedConv", (1,), MS):
            self.transform_conv(node)
        elif is_supported_op(node, "MaxPool", (1, 8, 10, 11, 12, 22)) or is_supported_op(
            node, "AveragePool", (1, 7, 10, 11, 19, 22)
        ):
            self.transform_pool(node)
        elif is_supported_op(node, "Mul", (7, 13, 14)):
            self.transform_mul(node)
        elif self.input_edge_count(node) == 0 and node.inputs:
            if is_supported_op(node, "Add", (7, 13, 14)) or is_supported_op(node, "Sum", (6, 8, 13)):
                self.transform_binary(node, add_node=True)
            elif is_supported_op(node, "Concat", (4, 11, 13)):
                self.transform_concat(node)
            elif (
                is_supported_op(node, "Relu", (6, 13, 14))
                or is_supported_op(node, "HardSigmoid", (6, 22))
                or is_supported_op(node, "Sigmoid", (6, 13))
                or is_supported_op(node, "Tanh", (6, 13))
                or is_supported_op(node, "Gelu", (20,))
                or is_supported_op(node, "Gelu", (1,), MS)
                or is_supported_op(node, "QuickGelu", (1,), MS)
            ):
                self.transform_activation(node)
            elif is_supported_op(node, "BatchNormalization", (7, 9, 14, 15)):
                self.transform_batch_normalization(node)
            elif is_supported_op(node, "Transpose", _TRANSPOSE_VERSIONS):
                self.transform_transpose_to_nhwc(node)
            elif is_supported_op(node, "Upsample", (9, 13)) or is_supported_op(node, "Resize", (10, 11, 13, 18, 19)):
                self.transform_resize(node)
            elif is_supported_op(node, "GlobalMaxPool", (1, 22)) or is_supported_op(node, "GlobalAveragePool", (1, 22)):
                self.transform_pool(node)

    def _float_initializer(self, name: str) -> onnx.TensorProto | None:
        """A constant initializer of this graph (``NodeArgIsConstant`` + ``GetInitializedTensor``), float."""
        if not name or not is_constant(self.graph, name):
            return None
        tensor = self.graph.initializer(name)
        if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
            return None
        return tensor

    def transform_conv(self, node: Node) -> None:
        inputs = node.inputs
        sum_input: _NchwcArg | None = None
        if node.op_type == "FusedConv" and len(inputs) >= 4 and inputs[3]:
            sum_input = self.nchwc_args.get(inputs[3])
            if sum_input is None:
                return
        weight = self._float_initializer(inputs[1]) if len(inputs) > 1 else None
        if weight is None or len(weight.dims) != 4:
            return
        out_channels, in_channels = int(weight.dims[0]), int(weight.dims[1])
        group = node.attr_int("group", 1)
        block = self.block
        nchwc_out_channels = align_up(out_channels, block)
        reorder_input = True
        oihwbo = False
        filter_in_channels = in_channels
        nchwc_group = group
        if group > 1:
            if out_channels % _CHANNEL_ALIGNMENT != 0:
                return
            if in_channels == 1 and out_channels == group:
                oihwbo = True
                nchwc_group = nchwc_out_channels
            elif in_channels % block != 0 or out_channels % group != 0 or (out_channels // group) % block != 0:
                return
        elif in_channels < block:
            oihwbo = True
            reorder_input = False
        else:
            if in_channels % _CHANNEL_ALIGNMENT != 0:
                return
            filter_in_channels = align_up(in_channels, block)
        bias: onnx.TensorProto | None = None
        if len(inputs) >= 3:
            bias = self._float_initializer(inputs[2])
            if bias is None or len(bias.dims) != 1 or bias.dims[0] != out_channels:
                return

        filters = self.filters_oihwbo if oihwbo else self.filters_oihwbibo
        nchwc_weight = filters.get(inputs[1])
        if nchwc_weight is None:
            array = self.graph.array(inputs[1]).astype(np.float32, copy=False)
            reordered = reorder_filter_oihwbo(array, block) if oihwbo else reorder_filter_oihwbibo(array, block)
            assert reordered.shape[1] == filter_in_channels
            nchwc_weight = self.add_initializer("reorder", reordered, onnx.TensorProto.FLOAT)
            filters[inputs[1]] = nchwc_weight

        nchwc_bias: str | None = None
        if bias is not None and out_channels != nchwc_out_channels:
            nchwc_bias = self.aligned_biases.get(inputs[2])
            if nchwc_bias is None:
                aligned = np.zeros(nchwc_out_channels, dtype=np.float32)
                aligned[:out_channels] = self.graph.array(inputs[2]).reshape(-1)
                nchwc_bias = self.add_initializer("reorder", aligned, onnx.TensorProto.FLOAT)
                self.aligned_biases[inputs[2]] = nchwc_bias

        name = self.graph.generate_node_name(node.outputs[0] + "_nchwc")
        conv = self.add_node(name, "Conv", list(inputs), list(node.outputs), like=node)
        if nchwc_group != group:
            conv.add_attribute(onnx.helper.make_attribute("group", nchwc_group))
        conv.inputs[1] = nchwc_weight
        if nchwc_bias is not None:
            conv.inputs[2] = nchwc_bias
        if sum_input is not None:
            conv.inputs[3] = sum_input.value
            sum_input.remaining_uses -= 1

        out_shape = _Shape.of(node.outputs[0])
        if reorder_input:
            source = self.nchwc_args.get(inputs[0])
            if source is None:
                self.insert_reorder_input(conv)
            else:
                conv.inputs[0] = source.value
                source.remaining_uses -= 1
                self.shape_inference(node, source.shape, out_shape, [int(d) for d in weight.dims])
        self.create_nchwc_argument(node, conv, out_channels, out_shape)
        self.removed_nodes.insert(0, node.index)

    def transform_pool(self, node: Node) -> None:
        if len(node.outputs) > 1:
            return
        if (
            node.op_type == "AveragePool"
            and node.attr_int("ceil_mode", 0) == 1
            and node.attr_int("count_include_pad", 0) != 0
        ):
            return
        source_value = node.inputs[0]
        if self.graph.elem_type(source_value) != onnx.TensorProto.FLOAT:
            return
        shape = self.graph.shape(source_value)
        if shape is None or len(shape) != _DIMS:
            return
        channels = _dim_value(shape[1])
        if channels is None or channels % self.block != 0:
            return
        name = self.graph.generate_node_name(node.outputs[0] + "_nchwc")
        pool = self.add_node(name, node.op_type, list(node.inputs), list(node.outputs), like=node)
        out_shape = _Shape.of(node.outputs[0])
        source = self.nchwc_args.get(source_value)
        if source is None:
            self.insert_reorder_input(pool)
        else:
            pool.inputs[0] = source.value
            source.remaining_uses -= 1
            self.shape_inference(node, source.shape, out_shape, None)
        self.create_nchwc_argument(node, pool, channels, out_shape)
        self.removed_nodes.insert(0, node.index)

    def insert_reshape(self, source: str, target: str, channels: int, split: bool) -> _PNode:
        """``InsertReshape``: a Reshape that splits ``[N, Cp, H, W]`` into ``[N, Cp/B, H, W, B]`` or unsplits it.

        ORT 1.32 writes the padded channel count into the shape (``[0, Cp/B, 0, 0, B]``, ``[0, Cp, 0, 0]``) and
        shares one shape initializer per direction and padded channel count."""
        nchwc_channels = align_up(channels, self.block)
        key = (split, nchwc_channels)
        shape_value = self.reshape_shapes.get(key)
        if shape_value is None:
            if split:
                values = [0, nchwc_channels // self.block, *([0] * _SPATIAL), self.block]
            else:
                values = [0, nchwc_channels, *([0] * _SPATIAL)]
            shape_value = self.add_initializer("Reshape", np.array(values, dtype=np.int64), onnx.TensorProto.INT64)
            self.reshape_shapes[key] = shape_value
        name = self.graph.generate_node_name("Reshape")
        return self.add_node(name, "Reshape", [source, shape_value], [target], domain="", doc_string="Reshape")

    def _shapes_match(self, node: Node, args: list[_NchwcArg]) -> bool:
        shape0 = self.graph.shape(node.inputs[0])
        for n in range(1, len(args)):
            for i in range(_DIMS):
                if args[0].shape.dim_equal(args[n].shape, i):
                    continue
                shape_n = self.graph.shape(node.inputs[n])
                if shape0 is None or shape_n is None:
                    return False
                d0, dn = shape0[i], shape_n[i]
                v0, vn = _dim_value(d0), _dim_value(dn)
                if v0 is None or vn is None or v0 <= 0 or v0 != vn:
                    p0, pn = _dim_param(d0), _dim_param(dn)
                    if p0 is None or pn is None or p0 != pn:
                        return False
        return True

    def transform_binary(self, node: Node, add_node: bool) -> None:
        args: list[_NchwcArg] = []
        for value in node.inputs:
            found = self.nchwc_args.get(value)
            if found is None:
                return
            args.append(found)
        if not args:
            return
        channels = args[0].channels
        if any(a.channels != channels for a in args[1:]):
            return
        view = self.view(node)
        if self._shapes_match(node, args):
            for n, arg in enumerate(args):
                view.inputs[n] = arg.value
                arg.remaining_uses -= 1
            if add_node and len(args) == 2:
                for n in range(2):
                    conv = args[n].node
                    if (
                        conv.op_type == "Conv"
                        and conv.domain == NCHWC
                        and len(conv.inputs) < 4
                        and args[n].starting_uses == 1
                        and not conv.has_attribute("activation")
                    ):
                        if len(conv.inputs) < 3:
                            conv.inputs.extend([""] * (3 - len(conv.inputs)))
                        conv.inputs.append(args[n ^ 1].node.outputs[0])
                        self.fuse_nchwc_argument(node, args[n])
                        self.removed_nodes.insert(0, node.index)
                        return
            self.create_nchwc_argument(node, view, channels, args[0].shape)
            return
        if add_node:
            for n, arg in enumerate(args):
                split_value = self.graph.generate_value_name("reshape")
                self.insert_reshape(arg.value, split_value, channels, split=True)
                view.inputs[n] = split_value
                arg.remaining_uses -= 1
            reshaped = self.graph.generate_value_name("reshape")
            unsplit = self.insert_reshape(reshaped, node.outputs[0], channels, split=False)
            self.create_nchwc_argument(node, unsplit, channels, _Shape.of(node.outputs[0]))
            view.outputs[0] = reshaped

    def transform_mul(self, node: Node) -> None:
        if len(node.inputs) != 2 or len(node.outputs) != 1:
            return
        arg0, arg1 = self.nchwc_args.get(node.inputs[0]), self.nchwc_args.get(node.inputs[1])
        if arg0 is not None and arg1 is not None:
            self.transform_binary(node, add_node=False)
            return
        if (arg0 is None) == (arg1 is None):
            return
        arg = arg0 if arg0 is not None else arg1
        assert arg is not None
        scale_value = node.inputs[1] if arg0 is not None else node.inputs[0]
        found = constant_initializer(self.graph, scale_value) if scale_value else None
        if found is None or found[1].data_type != onnx.TensorProto.FLOAT:
            return
        channels = arg.channels
        dims = [int(d) for d in found[1].dims]
        if dims not in ([channels, 1, 1], [1, channels, 1, 1]):
            return
        nchwc_channels = align_up(channels, self.block)
        padded = np.ones((nchwc_channels, 1, 1, 1), dtype=np.float32)
        scale = found[0].array(scale_value)
        padded.reshape(-1)[:channels] = scale.reshape(-1)[:channels]
        weight = self.add_initializer("mul_scale", padded, onnx.TensorProto.FLOAT)
        name = self.graph.generate_node_name(node.outputs[0] + "_mul_nchwc")
        conv = self.add_node(name, "Conv", [arg.value, weight], list(node.outputs))
        conv.add_attribute(onnx.helper.make_attribute("group", nchwc_channels))
        arg.remaining_uses -= 1
        self.create_nchwc_argument(node, conv, channels, arg.shape)
        self.removed_nodes.insert(0, node.index)

    def transform_concat(self, node: Node) -> None:
        if node.attr_int("axis") != 1:
            return
        args: list[_NchwcArg] = []
        total = 0
        for value in node.inputs:
            found = self.nchwc_args.get(value)
            if found is None or found.channels % self.block != 0:
                return
            total += found.channels
            args.append(found)
        view = self.view(node)
        for n, arg in enumerate(args):
            view.inputs[n] = arg.value
            arg.remaining_uses -= 1
        shape = args[0].shape.copy()
        shape.dims[1] = node.outputs[0]
        self.create_nchwc_argument(node, view, total, shape)

    def try_fuse_hardswish(self, node: Node, arg: _NchwcArg) -> bool:
        """``TryFuseNchwcHardSwish``: ``Mul(c, HardSigmoid(c))``, either operand order, becomes the nchwc.Conv's
        ``activation`` ``HardSwish`` (no ``activation_params``); the HardSigmoid and the Mul go.

        The HardSigmoid: one output edge, not a graph output, alpha and beta within ``1e-6`` of ``1/6`` and ``0.5``
        (float32; defaults 0.2 and 0.5). Its input: the NCHWc value of an nchwc.Conv without an activation, with
        exactly two uses (edges, +1 for a graph output). Every other consumer of that value (as the graph was when
        the pass started) must be a two-input ``Mul`` (any version) reading both that value and the HardSigmoid's
        output; there must be one, not producing a graph output."""
        if node.op_type != "HardSigmoid" or self.output_edge_count(node) != 1:
            return False
        alpha = np.float32(node.attr_float("alpha", 0.2))
        beta = np.float32(node.attr_float("beta", 0.5))
        if abs(alpha - _HARDSWISH_ALPHA) > _HARDSWISH_TOLERANCE or abs(beta - _HARDSWISH_BETA) > _HARDSWISH_TOLERANCE:
            return False
        conv = arg.node
        if conv.op_type != "Conv" or conv.domain != NCHWC:
            return False
        if arg.starting_uses != 2 or conv.has_attribute("activation"):
            return False
        value, gate = node.inputs[0], node.outputs[0]
        mul: Node | None = None
        for consumer in self.graph.consumers(value):
            if consumer.index == node.index:
                continue
            inputs = consumer.inputs
            if (
                consumer.op_type != "Mul"
                or normalize_domain(consumer.domain) != ""
                or len(inputs) != 2
                or value not in inputs
                or gate not in inputs
            ):
                return False
            mul = consumer
        if mul is None or self.produces_graph_output(node) or self.produces_graph_output(mul):
            return False
        conv.add_attribute(onnx.helper.make_attribute("activation", "HardSwish"))
        arg.remaining_uses -= 2  # the HardSigmoid's use and the Mul's
        self.remove_node_output_edges(node)
        self.removed_nodes.insert(0, node.index)
        self.fuse_nchwc_argument(mul, arg)
        self.removed_nodes.insert(0, mul.index)
        return True

    def transform_activation(self, node: Node) -> None:
        arg = self.nchwc_args.get(node.inputs[0])
        if arg is None:
            return
        if self.try_fuse_hardswish(node, arg):
            return
        view = self.view(node)
        view.inputs[0] = arg.value
        arg.remaining_uses -= 1
        conv = arg.node
        fusable = node.op_type in ("Relu", "Sigmoid", "Tanh", "HardSigmoid")
        if (
            conv.op_type == "Conv"
            and conv.domain == NCHWC
            and fusable
            and arg.starting_uses == 1
            and not conv.has_attribute("activation")
        ):
            conv.add_attribute(onnx.helper.make_attribute("activation", node.op_type))
            if node.op_type == "HardSigmoid":
                params = [node.attr_float("alpha", 0.2), node.attr_float("beta", 0.5)]
                conv.add_attribute(onnx.helper.make_attribute("activation_params", params))
            self.fuse_nchwc_argument(node, arg)
            self.removed_nodes.insert(0, node.index)
        else:
            self.create_nchwc_argument(node, view, arg.channels, arg.shape)

    def transform_batch_normalization(self, node: Node) -> None:
        if len(node.outputs) > 1:
            return
        arg = self.nchwc_args.get(node.inputs[0])
        if arg is None:
            return
        spatial = node.attr_int("spatial")
        if spatial is not None and spatial != 1:
            return
        eps = node.attr_float("epsilon")
        if eps is None:
            return
        channels = arg.channels
        params: list[np.ndarray] = []
        for value in node.inputs[1:5]:
            found = constant_initializer(self.graph, value) if value else None
            if found is None:
                return
            tensor = found[1]
            if tensor.data_type != onnx.TensorProto.FLOAT or list(tensor.dims) != [channels]:
                return
            params.append(found[0].array(value).astype(np.float32))
        if len(params) != 4:
            return
        scale, bias, mean, var = params
        epsilon = np.float32(eps)
        std = np.sqrt((var + epsilon).astype(np.float32)).astype(np.float32)
        scale = (scale / std).astype(np.float32)
        bias = (bias - (mean * scale).astype(np.float32)).astype(np.float32)
        nchwc_channels = align_up(channels, self.block)
        padded = np.zeros((nchwc_channels,), dtype=np.float32)
        padded[:channels] = scale
        weight = self.add_initializer("bn_scale", padded.reshape(nchwc_channels, 1, 1, 1), onnx.TensorProto.FLOAT)
        padded[:channels] = bias
        bias_value = self.add_initializer("bn_B", padded.copy(), onnx.TensorProto.FLOAT)
        name = self.graph.generate_node_name(node.outputs[0] + "_bn_nchwc")
        conv = self.add_node(name, "Conv", [arg.value, weight, bias_value], list(node.outputs))
        conv.add_attribute(onnx.helper.make_attribute("group", nchwc_channels))
        arg.remaining_uses -= 1
        self.create_nchwc_argument(node, conv, channels, arg.shape)
        self.removed_nodes.insert(0, node.index)

    def transform_transpose_to_nhwc(self, node: Node) -> None:
        arg = self.nchwc_args.get(node.inputs[0])
        if arg is None:
            return
        if node.attr_ints("perm") != [0, 2, 3, 1]:
            return
        reorder = self.add_node(
            self.graph.generate_node_name("ReorderOutput"), "ReorderOutput", [arg.value], list(node.outputs)
        )
        reorder.doc_string = "ReorderOutput"
        reorder.add_attribute(onnx.helper.make_attribute("channels", arg.channels))
        reorder.add_attribute(onnx.helper.make_attribute("channels_last", 1))
        arg.remaining_uses -= 1
        self.remove_node_output_edges(node)
        self.removed_nodes.insert(0, node.index)

    def transform_resize(self, node: Node) -> None:
        inputs = node.inputs
        arg = self.nchwc_args.get(inputs[0])
        if arg is None:
            return
        mode = node.attr_str("mode")
        nearest = True
        if mode is not None and mode != "nearest":
            if mode != "linear":
                return
            nearest = False
        transformation: str | None = None
        sizes_value: str | None = None
        scales_value: str | None = None
        if (node.since_version or 0) >= 11:
            if len(inputs) >= 4:
                sizes_value = inputs[3]
            if sizes_value is None:
                if len(inputs) < 3:
                    return
                scales_value = inputs[2]
            transformation = node.attr_str("coordinate_transformation_mode")
            if transformation is None:
                return
            # the nearest kernel supports asymmetric only
            if transformation != "asymmetric" and (nearest or transformation not in ("align_corners", "half_pixel")):
                return
            if nearest and node.attr_str("nearest_mode") != "floor":
                return
        else:
            if len(inputs) < 2:
                return
            scales_value = inputs[1]
        scales: list[int] = []
        if sizes_value is not None:
            found = constant_initializer(self.graph, sizes_value) if sizes_value else None
            if found is None:
                return
            tensor = found[1]
            if tensor.data_type != onnx.TensorProto.INT64 or list(tensor.dims) != [4]:
                return
            shape = self.graph.shape(inputs[0])
            if shape is None or len(shape) < 4:
                return
            sizes = [int(v) for v in found[0].array(sizes_value).reshape(-1)]
            for i in range(4):
                dim = _dim_value(shape[i])
                if dim is None or dim <= 0:
                    return
                quotient = int(sizes[i] / dim) if sizes[i] >= 0 else -((-sizes[i]) // dim)
                if quotient * dim != sizes[i]:
                    return
                scales.append(quotient)
        elif scales_value is not None:
            found = constant_initializer(self.graph, scales_value) if scales_value else None
            if found is None:
                return
            tensor = found[1]
            if tensor.data_type != onnx.TensorProto.FLOAT or list(tensor.dims) != [4]:
                return
            for value in found[0].array(scales_value).astype(np.float32).reshape(-1):
                if not np.isfinite(value):
                    return
                scale = int(value)  # truncation toward zero, as static_cast<int64_t>
                if scale <= 0 or np.float32(scale) != value:
                    return
                scales.append(scale)
        else:
            return
        if scales[0] != 1 or scales[1] != 1:
            return
        name = self.graph.generate_node_name(node.outputs[0] + "_nchwc")
        upsample = self.add_node(name, "Upsample", [arg.value], list(node.outputs))
        upsample.add_attribute(onnx.helper.make_attribute("scales", scales))
        if not nearest:
            assert mode is not None
            upsample.add_attribute(onnx.helper.make_attribute("mode", mode))
            if transformation is not None:
                upsample.add_attribute(onnx.helper.make_attribute("coordinate_transformation_mode", transformation))
        arg.remaining_uses -= 1
        self.create_nchwc_argument(node, upsample, arg.channels, _Shape.of(node.outputs[0]))
        self.removed_nodes.insert(0, node.index)

    def track_transpose_from_nhwc(self, node: Node) -> None:
        if node.attr_ints("perm") != [0, 3, 1, 2]:
            return
        if self.produces_graph_output(node) or self.output_edge_count(node) != 1:
            return
        self.transpose_node = node
        self.transpose_output = node.outputs[0]

    # ------------------------------------------------------------------ finalize
    def finalize(self) -> bool:
        entries = list(self.nchwc_args.items())
        for original, arg in reversed(entries) if self.reverse_final_order else entries:
            if arg.remaining_uses > 0:
                reorder = self.add_node(
                    self.graph.generate_node_name("ReorderOutput"), "ReorderOutput", [arg.value], [original]
                )
                reorder.doc_string = "ReorderOutput"
                reorder.add_attribute(onnx.helper.make_attribute("channels", arg.channels))
        if not self.removed_nodes:
            return False
        graph = self.graph
        for index in self.removed_nodes:
            gone = graph.node(index)
            assert gone is not None
            graph.remove_node(gone)
        for index, view in self.views.items():
            kept = graph.node(index)
            if kept is None:
                continue
            for slot, value in enumerate(view.outputs):
                if slot >= len(kept.outputs) or kept.outputs[slot] != value:
                    graph.set_output(kept, slot, value)
            for slot, value in enumerate(view.inputs):
                if slot >= len(kept.inputs) or kept.inputs[slot] != value:
                    graph.set_input(kept, slot, value)
        for tensor in self.new_initializers:
            graph.add_initializer(tensor)
        for pending in self.created:
            graph.add_node(
                pending.name,
                pending.op_type,
                pending.inputs,
                pending.outputs,
                domain=pending.domain,
                attributes=pending.attributes,
                attr_map=pending.attr_map,
                doc_string=pending.doc_string,
                ep=CPU,
            )
        return True


class NchwcTransformer(GraphTransformer):
    """Convert float Conv / pooling (and the elementwise ops between them) to ``com.microsoft.nchwc`` ops."""

    name = "NchwcTransformer"

    def apply_impl(self, graph: Graph, ctx: PassContext, graph_level: int) -> bool:
        impl = _Impl(graph, ctx.target.nchwc_block_size)
        modified = False
        for node in graph.topological_order():
            if self.recurse(node, ctx, graph_level):
                modified = True
            if node.ep == CPU:
                impl.transform(node)
        if impl.finalize():
            modified = True
        return modified
