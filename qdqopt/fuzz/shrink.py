"""Shrinking a model that shows a finding to a smaller one that still shows it (delta debugging on nodes).

Each step proposes a smaller model and keeps it when the same finding still shows (kind and level, and the same first
difference or message once numbers and name counters are blanked), checked in the worker child like any case:

* drop a graph output (when there are several), then every node and initializer nothing uses any more;
* *cut* at a node: its outputs become graph inputs (with the types ONNX's inference gives them) and what only fed it
  goes; tried from the graph's inputs downwards, so that whole prefixes go first;
* *bypass* a node with one data input whose output has the same type and shape: its consumers read its input.

It stops when no step applies, or after ``max_checks`` checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import onnx

from qdqopt.fuzz.runner import Finding, Worker, run_case
from qdqopt.fuzz.worker import normalize
from qdqopt.graph.inference import infer_shapes

__all__ = ["candidates", "prune", "shrink_model"]

#: element types a cut may make a graph input of (the worker can feed them)
_FEEDABLE = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.BOOL,
}


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes whose outputs nothing uses, then unused initializers and graph inputs (in place; returned)."""
    g = model.graph
    while True:
        used = {o.name for o in g.output}
        for n in g.node:
            used.update(n.input)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    used.update(_outer_names(a.g))
        keep = [n for n in g.node if any(o in used for o in n.output)]
        if len(keep) == len(g.node):
            break
        del g.node[:]
        g.node.extend(keep)
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [i for i in g.input if i.name in used]
    del g.input[:]
    g.input.extend(inputs)
    return model


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for n in graph.node:
        names.update(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names.update(_outer_names(a.g))
    return names


def _types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The inferred types of the main graph's values, without the dim names ONNX invents (``unk__<n>``): a cut must
    not declare a name the model never had (it would change what ORT's inference unifies)."""
    try:
        inferred = infer_shapes(model)
    except Exception:
        return {}
    out = {vi.name: vi for vi in inferred.graph.value_info}
    out.update({vi.name: vi for vi in inferred.graph.output})
    for vi in out.values():
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param.startswith("unk__"):
                dim.ClearField("dim_param")
    return out


def candidates(model: onnx.ModelProto) -> Iterator[onnx.ModelProto]:
    """Smaller variants of ``model``, the most promising first."""
    g = model.graph
    if len(g.output) > 1:
        for i in range(len(g.output)):
            m = onnx.ModelProto()
            m.CopyFrom(model)
            del m.graph.output[i]
            yield prune(m)
    types = _types(model)
    for i, node in enumerate(g.node):  # cut: the node's outputs become graph inputs
        if node.op_type == "Constant":
            continue
        vis = [types.get(o) for o in node.output]
        if any(v is None or v.type.tensor_type.elem_type not in _FEEDABLE for v in vis):
            continue
        m = onnx.ModelProto()
        m.CopyFrom(model)
        del m.graph.node[i]
        for v in vis:
            assert v is not None
            if v.name not in {o.name for o in m.graph.input}:
                m.graph.input.append(v)
        yield prune(m)
    for i, node in enumerate(g.node):  # bypass: consumers read the node's first input
        if not node.input or len(node.output) != 1 or node.op_type in ("Constant", "If"):
            continue
        a, b = types.get(node.input[0]), types.get(node.output[0])
        if a is None or b is None or a.type != b.type:
            a = next((x for x in g.input if x.name == node.input[0]), a)
            if a is None or b is None or a.type != b.type:
                continue
        src, dst = node.input[0], node.output[0]
        outputs = {o.name for o in g.output}
        if dst in outputs and (src in outputs or src in {x.name for x in g.input}):
            continue
        m = onnx.ModelProto()
        m.CopyFrom(model)
        del m.graph.node[i]
        for n in m.graph.node:
            for k, name in enumerate(n.input):
                if name == dst:
                    n.input[k] = src
        for o in m.graph.output:
            if o.name == dst:
                o.name = src
        yield prune(m)


def _shows(worker: Worker, model: onnx.ModelProto, finding: Finding, folder: str, ours_disabled: Sequence[str]) -> bool:
    path = os.path.join(folder, "shrink.onnx")
    with open(path, "wb") as handle:
        handle.write(model.SerializeToString())
    drift = finding.kind in ("ort-drift", "ort-own-output", "ort-level-reject")
    outcomes = run_case(
        worker,
        path,
        [(finding.level, finding.config)] if finding.level != "disable_all" else [],
        ours_disabled=ours_disabled,
        drift=drift or finding.level == "disable_all",
    )
    want = _gist(finding.kind, finding.detail)
    return any(
        o["kind"] == finding.kind
        and o.get("level") == finding.level
        and _gist(o["kind"], str(o.get("detail", ""))) == want
        for o in outcomes
    )


def _gist(kind: str, detail: str) -> str:
    """What must stay the same while shrinking, so that the shrinker does not wander off to another fault: the first
    difference or message, numbers and name counters blanked (ORT's findings: only the kind)."""
    if kind.startswith("ort-") or kind in ("qdqopt-crash", "compare-crash"):
        return ""
    return normalize(detail.split("; ", maxsplit=1)[0])


def shrink_model(
    worker: Worker,
    finding: Finding,
    folder: str,
    *,
    ours_disabled: Sequence[str] = (),
    max_checks: int = 150,
) -> bytes:
    """The smallest model :func:`candidates` reach from the finding's model that still shows it (serialized)."""
    best = onnx.ModelProto.FromString(finding.model)
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for candidate in candidates(best):
            if not candidate.graph.node or not candidate.graph.output:
                continue
            checks += 1
            if _shows(worker, candidate, finding, folder, ours_disabled):
                best = candidate
                progress = True
                break
            if checks >= max_checks:
                break
    data: bytes = best.SerializeToString()
    return data
