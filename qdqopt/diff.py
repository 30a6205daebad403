"""Compare two models at the fidelity tiers of qdqopt, and say where they first differ.

Tiers, weakest to strongest:

* **N** (numbers): both models, run by ORT's CPU EP (at ORT_DISABLE_ALL, so nothing rewrites them further) on the
  same seeded random inputs, give bit-identical outputs. Where S holds, N follows (same ops, attributes and bytes
  compute the same numbers) and the models are not run; :attr:`DiffReport.implied` says so.
* **S** (structure): the same DAG of ops, domains, attributes (schema defaults filled on both sides) and
  initializer bytes, whatever the names and the node order. Every tensor gets a structural signature from how it is
  computed (a Merkle hash over producers), and the two multisets of node signatures must match, as must the graph
  outputs' signatures, in order.
* **X** (exact): also the same names (nodes, tensors, initializers), the same node order and doc strings, the same
  graph inputs, outputs and value_info (names and types), opset imports, IR version and metadata. Attributes are
  compared as sets and initializers by name (their order in the file carries no meaning).
* **P** (bytes, beyond X): the serialized ModelProtos are byte-identical.

A :class:`DiffReport` holds a verdict per tier and, for each tier that fails, the first differences found, each
naming the node, tensor, attribute or initializer at fault in one line.
"""

from __future__ import annotations

import collections
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qdqopt.graph.schema import lookup, normalize_domain

__all__ = ["TIERS", "DiffReport", "Difference", "compare", "random_inputs", "run_numbers"]

TIERS = ("N", "S", "X", "P")
MAX_REPORTED = 5


@dataclass(frozen=True)
class Difference:
    """One difference at one tier, in a readable line."""

    tier: str
    where: str
    what: str

    def __str__(self) -> str:
        return f"[{self.tier}] {self.where}: {self.what}"


@dataclass
class DiffReport:
    """Verdict per tier (None: not checked) and the first differences of each failing tier."""

    verdict: dict[str, bool | None] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    #: tiers whose verdict follows from a stronger one instead of being checked (N holds wherever S does)
    implied: set[str] = field(default_factory=set)
    #: how ORT was run, set by :func:`qdqopt.compare.compare_level`: ``"as-run"`` (as a user runs it: a fidelity
    #: result) or ``"isolation"`` (what qdqopt lacks disabled on both sides); None for a bare :func:`compare`
    mode: str | None = None
    #: the names ORT ran with in ``disabled_optimizers`` (disabled on qdqopt's side too)
    ort_disabled: list[str] = field(default_factory=list)
    #: one line saying how ORT was run (in isolation mode: what was disabled, and that it is not a fidelity result)
    header: str = ""
    #: plain lines on what ran on one side only (a pass qdqopt lacks or that declines the model) or was isolated
    notes: list[str] = field(default_factory=list)

    @property
    def isolated(self) -> bool:
        """Whether ORT ran in isolation mode (what qdqopt lacks disabled on both sides: not a fidelity result)."""
        return self.mode == "isolation"

    @property
    def tier(self) -> str:
        """The strongest tier that holds (with every weaker checked tier), or ``-`` when none does."""
        best = "-"
        for tier in TIERS:
            ok = self.verdict.get(tier)
            if ok is None:
                continue
            if not ok:
                break
            best = tier
        return best

    def holds(self, tier: str) -> bool:
        """Whether ``tier`` and every weaker tier that was checked hold."""
        for t in TIERS[: TIERS.index(tier) + 1]:
            if self.verdict.get(t) is False:
                return False
        return self.verdict.get(tier) is True

    def flag(self, tier: str) -> str:
        """``ok``, ``ok(S)`` (implied by S), ``DIFF`` or ``-`` (not checked)."""
        value = self.verdict.get(tier)
        if value is None:
            return "-"
        if not value:
            return "DIFF"
        return "ok(S)" if tier in self.implied else "ok"

    def lines(self) -> list[str]:
        """How ORT was run (when known), the verdicts, the notes on what ran on one side only, the differences."""
        flags = " ".join(f"{t}:{self.flag(t)}" for t in self.verdict)
        head = [self.header] if self.header else []
        return [*head, flags, *self.notes, *(str(d) for d in self.differences)]


# ----------------------------------------------------------------------------------------------------- helpers
def _attr_value(attr: onnx.AttributeProto) -> object:
    if attr.type == onnx.AttributeProto.GRAPH:
        return ("graph", _graph_signature(attr.g))
    if attr.type == onnx.AttributeProto.TENSOR:
        return ("tensor", _tensor_key(attr.t))
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, list):
        return tuple(v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in value)
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    return {normalize_domain(o.domain): int(o.version) for o in model.opset_import}


def _attrs_with_defaults(node: onnx.NodeProto, opsets: Mapping[str, int]) -> dict[str, object]:
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    schema = lookup(node.domain, node.op_type, opsets.get(normalize_domain(node.domain)))
    if schema is not None:
        for name, default in schema.defaults():
            attrs.setdefault(name, _attr_value(default))
    return attrs


def _tensor_key(tensor: onnx.TensorProto) -> tuple[int, tuple[int, ...], str]:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        ext = {e.key: e.value for e in tensor.external_data}
        payload = f"external:{ext.get('location')}:{ext.get('offset', '0')}:{ext.get('length', '')}"
        return int(tensor.data_type), tuple(tensor.dims), payload
    if tensor.data_type == onnx.TensorProto.UNDEFINED:
        # no values to read (a Constant whose ``value`` attribute is not a tensor: ORT's loader takes its empty
        # tensor as the initializer); its bytes, name left out, are what both sides must agree on
        bare = onnx.TensorProto()
        bare.CopyFrom(tensor)
        bare.ClearField("name")
        return 0, tuple(int(d) for d in tensor.dims), hashlib.sha256(bare.SerializeToString()).hexdigest()
    array = numpy_helper.to_array(tensor)
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return int(tensor.data_type), tuple(int(d) for d in tensor.dims), digest


def _h(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def _graph_signature(graph: onnx.GraphProto, opsets: Mapping[str, int] | None = None) -> str:
    sig = _structure(graph, opsets or {}, {})
    return _h(sorted(sig.node_sigs.elements()), sig.outputs)


@dataclass
class _Structure:
    node_sigs: collections.Counter[str]
    outputs: list[str]
    described: dict[str, str]  # node signature -> readable description of one such node


def _structure(graph: onnx.GraphProto, opsets: Mapping[str, int], outer: Mapping[str, str]) -> _Structure:
    sig: dict[str, str] = dict(outer)
    for i, vi in enumerate(graph.input):
        sig[vi.name] = _h("input", i)
    for tensor in graph.initializer:
        sig[tensor.name] = _h("init", _tensor_key(tensor))
    producers: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        for out in node.output:
            if out:
                producers[out] = node
    node_sig: dict[int, str] = {}
    index_of = {id(n): i for i, n in enumerate(graph.node)}
    described: dict[str, str] = {}

    def tensor_sig(name: str, stack: set[int]) -> str:
        if not name:
            return "<none>"
        if name in sig:
            return sig[name]
        producer = producers.get(name)
        if producer is None:
            sig[name] = _h("free", name)
            return sig[name]
        ns = compute(producer, stack)
        value = _h(ns, list(producer.output).index(name))
        sig[name] = value
        return value

    def compute(node: onnx.NodeProto, stack: set[int]) -> str:
        key = index_of[id(node)]
        if key in node_sig:
            return node_sig[key]
        if key in stack:
            return _h("cycle", node.op_type)
        stack = stack | {key}
        ins = [tensor_sig(x, stack) for x in node.input]
        attrs = _attrs_with_defaults(node, opsets)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                inner = _structure(a.g, opsets, sig)
                attrs[a.name] = ("graph", _h(sorted(inner.node_sigs.elements()), inner.outputs))
        value = _h(
            normalize_domain(node.domain),
            node.op_type,
            sorted(attrs.items(), key=lambda kv: kv[0]),
            ins,
            len(node.output),
        )
        node_sig[key] = value
        described.setdefault(value, f"{_qual(node)} {node.name!r}")
        return value

    for node in graph.node:
        compute(node, set())
    outputs = [tensor_sig(o.name, set()) for o in graph.output]
    return _Structure(collections.Counter(node_sig.values()), outputs, described)


def _qual(node: onnx.NodeProto) -> str:
    domain = normalize_domain(node.domain)
    return node.op_type if not domain else f"{domain}.{node.op_type}"


def _type_str(vi: onnx.ValueInfoProto) -> str:
    if not vi.HasField("type"):
        return "?"
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return str(vi.type).replace("\n", " ")
    dims = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            dims.append(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
        shape = "[" + ",".join(dims) + "]"
    else:
        shape = "(no shape)"
    return f"{onnx.TensorProto.DataType.Name(tt.elem_type)}{shape}"


# ----------------------------------------------------------------------------------------------------------- S
def _compare_structure(ours: onnx.ModelProto, ref: onnx.ModelProto, out: list[Difference]) -> bool:
    a = _structure(ours.graph, _opsets(ours), {})
    b = _structure(ref.graph, _opsets(ref), {})
    ok = True
    only_ours = a.node_sigs - b.node_sigs
    only_ref = b.node_sigs - a.node_sigs
    if only_ours or only_ref:
        ok = False
        ops_a = collections.Counter(_qual(n) for n in ours.graph.node)
        ops_b = collections.Counter(_qual(n) for n in ref.graph.node)
        if ops_a != ops_b:
            delta = {k: ops_a[k] - ops_b[k] for k in sorted(set(ops_a) | set(ops_b)) if ops_a[k] != ops_b[k]}
            out.append(Difference("S", "op counts", f"qdqopt minus ORT: {delta}"))
        for s in list(only_ours)[:MAX_REPORTED]:
            out.append(Difference("S", f"node {a.described[s]}", "computed by qdqopt, no structural twin in ORT's"))
        for s in list(only_ref)[:MAX_REPORTED]:
            out.append(Difference("S", f"node {b.described[s]}", "computed by ORT, no structural twin in qdqopt's"))
    if a.outputs != b.outputs:
        ok = False
        for i, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=False)):
            if x != y:
                out.append(Difference("S", f"graph output #{i} {ref.graph.output[i].name!r}", "computed differently"))
                break
        if len(a.outputs) != len(b.outputs):
            out.append(Difference("S", "graph outputs", f"{len(a.outputs)} vs {len(b.outputs)}"))
    return ok


# ----------------------------------------------------------------------------------------------------------- X
def _compare_graph_exact(ga: onnx.GraphProto, gb: onnx.GraphProto, where: str, out: list[Difference]) -> bool:
    ok = True

    def report(place: str, what: str) -> None:
        nonlocal ok
        ok = False
        if sum(1 for d in out if d.tier == "X") < MAX_REPORTED:
            out.append(Difference("X", f"{where}{place}", what))

    if ga.name != gb.name:
        report("graph name", f"{ga.name!r} vs ORT {gb.name!r}")
    na, nb = list(ga.node), list(gb.node)
    if len(na) != len(nb):
        report("nodes", f"{len(na)} nodes vs ORT's {len(nb)}")
    for i, (x, y) in enumerate(zip(na, nb, strict=False)):
        label = f"node #{i} "
        if (x.name, _qual(x)) != (y.name, _qual(y)):
            report(label, f"{_qual(x)} {x.name!r} where ORT has {_qual(y)} {y.name!r}")
            break
        label += f"{_qual(x)} {x.name!r}"
        if list(x.input) != list(y.input):
            report(label, f"inputs {list(x.input)} vs ORT {list(y.input)}")
        if list(x.output) != list(y.output):
            report(label, f"outputs {list(x.output)} vs ORT {list(y.output)}")
        if x.doc_string != y.doc_string:
            report(label, f"doc_string {x.doc_string!r} vs ORT {y.doc_string!r}")
        ax = {a.name: a for a in x.attribute}
        ay = {a.name: a for a in y.attribute}
        for name in sorted(set(ax) | set(ay)):
            if name not in ax:
                report(label, f"attribute {name!r} missing (ORT has {_attr_value(ay[name])!r})")
            elif name not in ay:
                report(label, f"attribute {name!r}={_attr_value(ax[name])!r} that ORT does not have")
            elif ax[name].type == onnx.AttributeProto.GRAPH:
                if not _compare_graph_exact(ax[name].g, ay[name].g, f"{where}{label}.{name}/", out):
                    ok = False
            elif _attr_value(ax[name]) != _attr_value(ay[name]):
                report(label, f"attribute {name!r}={_attr_value(ax[name])!r} vs ORT {_attr_value(ay[name])!r}")
    ia = {t.name: t for t in ga.initializer}
    ib = {t.name: t for t in gb.initializer}
    for name in sorted(set(ia) - set(ib)):
        report(f"initializer {name!r}", "only in qdqopt's output")
    for name in sorted(set(ib) - set(ia)):
        report(f"initializer {name!r}", "only in ORT's output")
    for name in sorted(set(ia) & set(ib)):
        ka, kb = _tensor_key(ia[name]), _tensor_key(ib[name])
        if ka != kb:
            what = "different values" if ka[:2] == kb[:2] else f"type/shape {ka[:2]} vs ORT {kb[:2]}"
            report(f"initializer {name!r}", what)
    for field_name in ("input", "output", "value_info"):
        va, vb = list(getattr(ga, field_name)), list(getattr(gb, field_name))
        sa = [(v.name, _type_str(v)) for v in va]
        sb = [(v.name, _type_str(v)) for v in vb]
        if sa != sb:
            for i, (x2, y2) in enumerate(zip(sa, sb, strict=False)):
                if x2 != y2:
                    report(f"graph {field_name} #{i}", f"{x2[0]!r} {x2[1]} vs ORT {y2[0]!r} {y2[1]}")
                    break
            else:
                report(f"graph {field_name}", f"{len(sa)} entries vs ORT's {len(sb)}")
    return ok


def _compare_exact(ours: onnx.ModelProto, ref: onnx.ModelProto, out: list[Difference]) -> bool:
    ok = _compare_graph_exact(ours.graph, ref.graph, "", out)
    fields = {
        "ir_version": (ours.ir_version, ref.ir_version),
        "producer": ((ours.producer_name, ours.producer_version), (ref.producer_name, ref.producer_version)),
        "opset_import": (
            [(o.domain, o.version) for o in ours.opset_import],
            [(o.domain, o.version) for o in ref.opset_import],
        ),
        "metadata_props": (
            [(p.key, p.value) for p in ours.metadata_props],
            [(p.key, p.value) for p in ref.metadata_props],
        ),
    }
    for name, (x, y) in fields.items():
        if x != y:
            ok = False
            out.append(Difference("X", f"model {name}", f"{x} vs ORT {y}"))
    return ok


# ----------------------------------------------------------------------------------------------------------- N
def random_inputs(
    model: onnx.ModelProto, seed: int, *, spread: float = 1.0, positive_scales: bool = False
) -> dict[str, np.ndarray]:
    """Seeded random data for the model's graph inputs (unknown dims as 1): what tier N, the report's numerics and
    the fuzzer run the models on. Floats are normal around 0 times ``spread`` (with ``positive_scales``, an input
    named as a scale is small and positive: the fuzzer feeds Q/DQ scales as graph inputs), integers within
    [-100, 100] and their type's range, booleans either."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            values = rng.standard_normal(shape) * spread
            if positive_scales and "scale" in vi.name:
                values = np.abs(values) * 0.05 + 0.001
            feeds[vi.name] = values.astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            low, high = max(int(info.min), -100), min(int(info.max), 100)
            feeds[vi.name] = rng.integers(low, high + 1, shape).astype(dtype)
        else:
            raise ValueError(f"graph input {vi.name!r}: cannot make random data of type {dtype}")
    return feeds


def run_numbers(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], base_dir: str | os.PathLike[str] | None = None
) -> list[np.ndarray]:
    """Run a model with ORT's CPU EP at ORT_DISABLE_ALL (external data resolved against ``base_dir``)."""
    import tempfile

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    has_external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if has_external and base_dir is not None:
        with tempfile.NamedTemporaryFile(suffix=".onnx", dir=str(base_dir), delete=False) as tmp:
            tmp.write(model.SerializeToString())
        try:
            session = ort.InferenceSession(tmp.name, so, providers=["CPUExecutionProvider"])
        finally:
            Path(tmp.name).unlink(missing_ok=True)
    else:
        session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, dict(feeds))]


def _compare_numbers(
    ours: onnx.ModelProto, ref: onnx.ModelProto, out: list[Difference], seed: int, base_dir: Path | None
) -> bool | None:
    try:
        feeds = random_inputs(ref, seed)
        ya = run_numbers(ours, feeds, base_dir)
        yb = run_numbers(ref, feeds, base_dir)
    except Exception as exc:
        out.append(Difference("N", "run", f"not checked: {str(exc).splitlines()[0][:160]}"))
        return None
    ok = True
    for i, (a, b) in enumerate(zip(ya, yb, strict=True)):
        name = ref.graph.output[i].name
        same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        if not same:
            ok = False
            if a.shape != b.shape or a.dtype != b.dtype:
                what = f"{a.dtype}{list(a.shape)} vs ORT {b.dtype}{list(b.shape)}"
            else:
                mismatch = int(np.count_nonzero(a != b))
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                finite = diff[~np.isnan(diff)]  # NaN where either side is NaN (or both are inf of one sign)
                largest = f"max |diff| {float(finite.max()):.6g}" if finite.size else "every difference NaN"
                what = f"{mismatch} of {a.size} values differ, {largest}"
            out.append(Difference("N", f"output {name!r}", what))
    return ok


# ----------------------------------------------------------------------------------------------------------- P
def _parts(message: Any, prefix: str = "") -> dict[str, bytes]:
    """Serialized pieces of a message: one per scalar field, one per element of a repeated field (recursing into
    the graph and into nodes' attributes), so that the first differing piece can be named."""
    out: dict[str, bytes] = {}
    for fd, value in message.ListFields():
        name = f"{prefix}{fd.name}"
        if isinstance(value, (str, bytes, int, float, bool)):
            out[name] = repr(value).encode()
        elif hasattr(value, "ListFields"):
            out.update(_parts(value, name + "."))
        else:
            for i, item in enumerate(value):
                label = f"{name}[{i}]"
                if hasattr(item, "ListFields"):
                    out[label] = item.SerializeToString()
                else:
                    out[label] = repr(item).encode()
    return out


def _first_byte_differences(ours: onnx.ModelProto, ref: onnx.ModelProto) -> list[Difference]:
    a, b = _parts(ours), _parts(ref)
    found: list[Difference] = []
    keys = list(dict.fromkeys([*a, *b]))
    for key in keys:
        if a.get(key) != b.get(key):
            if key not in a or key not in b:
                what = "present only in " + ("qdqopt's" if key in a else "ORT's") + " output"
            else:
                what = _explain_bytes(key, a[key], b[key], ours, ref)
            found.append(Difference("P", key, what))
            if len(found) >= MAX_REPORTED:
                break
    return found


def _explain_bytes(key: str, x: bytes, y: bytes, ours: onnx.ModelProto, ref: onnx.ModelProto) -> str:
    if key.startswith("graph.node["):
        na, nb = onnx.NodeProto.FromString(x), onnx.NodeProto.FromString(y)
        order_a, order_b = [t.name for t in na.attribute], [t.name for t in nb.attribute]
        if order_a != order_b and sorted(order_a) == sorted(order_b):
            return f"attribute order {order_a} vs ORT {order_b}"
        return f"{_qual(na)} {na.name!r} serialized differently"
    if key.startswith("graph.initializer["):
        ta, tb = onnx.TensorProto.FromString(x), onnx.TensorProto.FromString(y)
        if ta.name != tb.name:
            return f"initializer order: {ta.name!r} where ORT has {tb.name!r}"
        return f"initializer {ta.name!r} encoded differently (raw_data vs typed fields?)"
    return "serialized differently (order or field presence)"


# ----------------------------------------------------------------------------------------------------------- API
def compare(
    ours: onnx.ModelProto,
    ref: onnx.ModelProto,
    *,
    tiers: Iterable[str] = TIERS,
    seed: int = 0,
    base_dir: str | os.PathLike[str] | None = None,
) -> DiffReport:
    """Compare qdqopt's model with ORT's at the requested tiers."""
    wanted = set(tiers)
    report = DiffReport(dict.fromkeys(TIERS))
    if "S" in wanted or "N" in wanted:
        report.verdict["S"] = _compare_structure(ours, ref, report.differences)
    if "N" in wanted:
        if report.verdict["S"]:
            # Same DAG, attributes and initializer bytes: ORT computes the same numbers; no need to run it.
            report.verdict["N"] = True
            report.implied.add("N")
        else:
            report.verdict["N"] = _compare_numbers(
                ours, ref, report.differences, seed, Path(base_dir) if base_dir else None
            )
    if "S" not in wanted:
        report.verdict["S"] = None
    if "X" in wanted:
        report.verdict["X"] = _compare_exact(ours, ref, report.differences)
    if "P" in wanted:
        same = ours.SerializeToString() == ref.SerializeToString()
        report.verdict["P"] = same
        if not same:
            report.differences.extend(_first_byte_differences(ours, ref))
    return report
