#!/usr/bin/env python
"""Evidence for docs/notes/insert_cast.md: ORT 1.32 InsertCastTransformer ("CastFloat16Transformer") and the
RemoveDuplicateCastTransformer it runs, on the CPU EP.

For every case (hand-built fp16 models and the 8 corpus models where the pass fires) this script

1. runs real onnxruntime in a subprocess (ORT_DISABLE_ALL unless the case says otherwise, log_severity_level=1,
   optimized_model_filepath) and keeps the `GraphTransformer <name> modified: <0|1>` lines;
2. runs `simulate()`, a direct transcription of the spec (partitioning by CPU kernel lookup, ForceSingleNode,
   cast insertion with ORT's name generator, Resolve, RemoveDuplicateCast, topological serialisation);
3. compares the two node by node: order, name, op, domain, inputs, outputs, doc_string and every attribute
   (schema defaults included), plus graph inputs/outputs and the set of initializers, and prints the saved graph.

Run:  /work/venv/bin/python docs/notes/insert_cast_probe.py [case-substring ...]   (34 cases, ~10 s)
      /work/venv/bin/python docs/notes/insert_cast_probe.py --sweep    (all 280 corpus files, ~90 s: the spec's
      modified flag and, where modified, the whole graph must equal ORT's, with session.disable_quant_qdq=1)
Exit status 0 iff every case matches. Scratch files go to $TMPDIR/insert_cast_probe/.

Cases (ids used in insert_cast.md): h1 fp16 chain, graph I/O and initializers; h2/h3 isolated fp16 node (and the
graph-output exception); h4 mixed fp16/fp32 inputs and Mul(x, x); h5 fan-out incl. an fp16-capable consumer; h6
wrapped output that is also a graph output; h7 TopK (only the fp16 output is cast back); h8 `dtype` rewrite; h9
model Cast chains in the remover; h10 model Cast f32->f16 then inserted cast; h11 node-name collisions; h12a/b
index-order dependency of the isolation walk; h13 fp16 initializer + Q/DQ; h14 arg-name collision (session
error); h15 If, h16 Loop subgraphs; h17 opset 13 (no `saturate`); h18 nothing to do; h19 output-only fp16 node
(session error); h20 diamond; h21 partitioner function inlining (shown only); h22/h23 value_info; h24 counter
continues after EnsureUniqueDQ; h25 fp16 ops with CPU kernels are left alone; plus the 8 corpus models.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnxruntime.capi import onnxruntime_pybind11_state as C

H, F, I64, I32, B = TP.FLOAT16, TP.FLOAT, TP.INT64, TP.INT32, TP.BOOL
CPU = "CPUExecutionProvider"
INT_MAX = 2147483647
PREFIX = "InsertedPrecisionFreeCast_"
DOC = "cast node to cast from float16 to float32 on cpu"
WORK = os.path.join(tempfile.gettempdir(), "insert_cast_probe")
CORPUS = "/work/shared/corpus"
os.makedirs(WORK, exist_ok=True)


def tstr(elem):
    """ORT's DataType string for a tensor element type, e.g. FLOAT16 -> 'tensor(float16)'."""
    return None if not elem else "tensor(%s)" % TP.DataType.Name(elem).lower()


# ----------------------------------------------------------------------------------------------------------------
# ORT's own registries, as exposed to Python
# ----------------------------------------------------------------------------------------------------------------
class Registry:
    """CPU kernel defs (get_all_opkernel_def) and op schemas (get_all_operator_schema) of this ORT build."""

    def __init__(self):
        self.kernels = {}
        for k in C.get_all_opkernel_def():
            if k.provider == CPU:
                self.kernels.setdefault((k.op_name, k.domain), []).append(k)
        self.schemas = {}
        for s in C.get_all_operator_schema():
            self.schemas.setdefault((s.name, s.domain), []).append(s)

    def schema(self, op, domain, opset):
        """Graph::Resolve's schema choice: highest since_version <= the model's opset for the domain."""
        cands = [s for s in self.schemas.get((op, domain), []) if s.since_version <= opset]
        return max(cands, key=lambda s: s.since_version) if cands else None

    @staticmethod
    def version_ok(kdef, since):
        """KernelRegistry VerifyVersion: exact start, or a closed range that contains since_version."""
        lo, hi = kdef.version_range
        return lo == since or (hi != INT_MAX and lo <= since <= hi)

    def node_has_kernel(self, g, node):
        """KernelRegistry::TryFindKernel(node): what the CPU EP's GetCapability uses during partitioning."""
        sch = node.schema
        if sch is None:
            return False
        counts = g.input_arg_counts(node)
        offsets = np.cumsum([0] + counts[:-1]).tolist() if counts else []
        for kdef in self.kernels.get((node.op, node.domain), []):
            if not self.version_ok(kdef, sch.since_version):
                continue
            ok = True
            for tname, allowed in kdef.type_constraints.items():
                cands = [("i", i) for i, p in enumerate(sch.inputs) if p.typeStr == tname]
                cands += [("o", i) for i, p in enumerate(sch.outputs) if p.typeStr == tname]
                for kind, idx in cands:
                    if kind == "i":
                        arg = None if idx >= len(counts) or counts[idx] == 0 else node.inputs[offsets[idx]]
                    else:
                        arg = node.outputs[idx] if idx < len(node.outputs) else None
                    if arg:  # NodeArg::Exists(): non-empty name
                        if g.type(arg) not in allowed:
                            ok = False
                        break  # only the first existing arg of each constraint is checked
                if not ok:
                    break
            if ok:
                return True
        return False

    def find_by_constraints(self, op, domain, since, tmap):
        """KernelRegistry::TryFindKernel(provider, op, domain, version, TypeConstraintMap)."""
        for kdef in self.kernels.get((op, domain), []):
            if self.version_ok(kdef, since) and all(
                    t in kdef.type_constraints and v in kdef.type_constraints[t] for t, v in tmap.items()):
                return True
        return False

    def defaults(self, schema):
        out = {}
        for name, a in schema.attributes.items():
            p = onnx.AttributeProto()
            p.ParseFromString(a._default_value)
            if p.name:
                out[name] = helper.get_attribute_value(p)
        return out


REG = Registry()


# ----------------------------------------------------------------------------------------------------------------
# A minimal in-memory graph with ORT's node indices, edges and name generator
# ----------------------------------------------------------------------------------------------------------------
class Node:
    def __init__(self, idx, name, op, domain, inputs, outputs, attrs, doc, subgraphs=None):
        self.idx, self.name, self.op, self.domain = idx, name, op, domain
        self.inputs, self.outputs, self.attrs, self.doc = list(inputs), list(outputs), dict(attrs), doc
        self.subgraphs = subgraphs or {}  # attribute name -> Graph
        self.ep = ""
        self.schema = None


class Graph:
    def __init__(self, gproto, opsets, types, parent=None):
        self.parent, self.opsets, self.types, self.proto = parent, opsets, types, gproto
        self.inputs = [v.name for v in gproto.input]
        self.outputs = [v.name for v in gproto.output]
        self.initializers = [t.name for t in gproto.initializer]
        self.nodes = {}
        self.next_idx = 0
        self.counter = 0                   # Graph::name_generator_, shared by GenerateNodeName/GenerateNodeArgName
        self.generated_node_names = set()
        for n in gproto.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                self.initializers.append(n.output[0])  # Graph ctor turns Constant nodes into initializers
                continue
            attrs, subs = {}, {}
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    subs[a.name] = Graph(a.g, opsets, types, self)
                else:
                    attrs[a.name] = helper.get_attribute_value(a)
            self.add_node(n.name, n.op_type, "" if n.domain == "ai.onnx" else n.domain, n.input, n.output, attrs,
                          n.doc_string, subs)
        self.arg_names = set(self.inputs) | set(self.initializers) | set(self.outputs)
        for n in self.nodes.values():
            self.arg_names |= {a for a in n.inputs + n.outputs if a}

    # -- basic queries -------------------------------------------------------------------------------------------
    def type(self, name):
        return self.types.get(name)

    def add_node(self, name, op, domain, inputs, outputs, attrs, doc, subs=None):
        """Graph::AddNode: index = number of node slots so far (removed slots are never reused)."""
        idx = self.next_idx
        self.next_idx += 1
        node = Node(idx, name, op, domain, inputs, outputs, attrs, doc, subs)
        node.schema = REG.schema(op, domain, self.opsets.get(domain, 1))
        self.nodes[idx] = node
        return node

    def all_indices(self):
        return range(self.next_idx)

    def remove_node(self, idx):
        del self.nodes[idx]

    def live(self):
        return [self.nodes[i] for i in sorted(self.nodes)]

    def input_arg_counts(self, node):
        sch = node.schema
        counts, n = [], len(node.inputs)
        for i, p in enumerate(sch.inputs):
            if "Variadic" in str(p.option):
                counts.append(max(n - i, 0))
            else:
                counts.append(1 if i < n else 0)
        return counts

    def implicit_inputs(self, node):
        """Outer-scope names a node's subgraphs read (they give the node extra input edges)."""
        seen = []
        for sg in node.subgraphs.values():
            for name in sg.outer_refs():
                if name not in seen:
                    seen.append(name)
        return seen

    def outer_refs(self):
        defined = set(self.inputs) | set(self.initializers)
        for n in self.nodes.values():
            defined |= set(n.outputs)
        refs = []
        for n in self.live():
            for a in n.inputs + self.implicit_inputs(n):
                if a and a not in defined and a not in refs:
                    refs.append(a)
        return refs

    def producer(self):
        return {o: (n.idx, k) for n in self.nodes.values() for k, o in enumerate(n.outputs) if o}

    def in_edges(self, node):
        """(src_idx, src_slot, dst_slot) for explicit then implicit inputs produced by nodes of this graph."""
        prod = self.producer()
        args = node.inputs + self.implicit_inputs(node)
        return [(prod[a][0], prod[a][1], j) for j, a in enumerate(args) if a in prod]

    def out_edges(self, node):
        """(dst_idx, src_slot, dst_slot), in EdgeEndCompare order (consumer index, then slots)."""
        res = []
        for c in self.live():
            for (s, k, j) in self.in_edges(c):
                if s == node.idx:
                    res.append((c.idx, k, j))
        return sorted(res)

    def topo_order(self):
        """GraphViewer order (spec ORT_QDQ_PASSES.md §2.2): reverse DFS from the leaves, ascending indices."""
        inputs_of = {n.idx: sorted(s for (s, _, _) in self.in_edges(n)) for n in self.live()}
        has_out = {s for ps in inputs_of.values() for s in ps}
        stack = [(i, False) for i in sorted(inputs_of) if i not in has_out]
        visited, order = set(), []
        while stack:
            n, leave = stack.pop()
            if leave:
                order.append(n)
                continue
            if n in visited:
                continue
            visited.add(n)
            stack.append((n, True))
            for p in inputs_of[n]:
                if p not in visited:
                    stack.append((p, False))
        return order

    def generate_node_name(self, base):
        """Graph::GenerateNodeName: collides with live node names and with names it returned before."""
        live = {n.name for n in self.nodes.values()}
        name = base
        while name in live or name in self.generated_node_names:
            name = "%s_token_%d" % (base, self.counter)
            self.counter += 1
        self.generated_node_names.add(name)
        return name


# ----------------------------------------------------------------------------------------------------------------
# The spec, as code
# ----------------------------------------------------------------------------------------------------------------
FP16 = "tensor(float16)"


def is_fp16(g, arg):
    return bool(arg) and g.type(arg) == FP16


def partition(g):
    """GraphPartitioner with only the CPU EP: a node is assigned iff a CPU kernel matches its actual types."""
    for n in g.live():
        n.ep = CPU if REG.node_has_kernel(g, n) else ""
        for sg in n.subgraphs.values():
            partition(sg)


def needs_input_cast_to_fp32(g, n):  # NodeNeedsInputCastToFp32
    return n.ep == "" and any(is_fp16(g, a) for a in n.inputs)


def is_isolated_fp16_node_on_cpu(g, node):
    if not (g.in_edges(node) and not node.subgraphs and not any(o in g.outputs for o in node.outputs)
            and node.ep == CPU):
        return False
    sch = node.schema
    if sch is None:
        return False
    constraints = {tc.type_param_str for tc in sch.type_constraints}
    tmap, fp16_args = {}, set()
    counts = g.input_arg_counts(node)
    start = 0
    for f, p in enumerate(sch.inputs[:len(counts)]):
        if p.typeStr in constraints:
            for k in range(counts[f]):
                idx = start + k
                a = node.inputs[idx]
                if not a:
                    continue
                if is_fp16(g, a):
                    fp16_args.add(idx)
                    tmap[p.typeStr] = "tensor(float)"
                else:
                    tmap[p.typeStr] = g.type(a)
                break
        start += counts[f]
    if not fp16_args:
        return False
    nodes = g.nodes
    for (s, _, j) in g.in_edges(node):
        if j in fp16_args and not needs_input_cast_to_fp32(g, nodes[s]):
            return False
    fp16_outs = set()
    for idx, p in enumerate(sch.outputs[:len(node.outputs)]):
        if p.typeStr not in constraints:
            continue
        a = node.outputs[idx]
        if not a:
            continue
        if is_fp16(g, a):
            fp16_outs.add(idx)
            tmap[p.typeStr] = "tensor(float)"
        else:
            tmap[p.typeStr] = g.type(a)
    if not fp16_outs:
        return False
    for (d, k, _) in g.out_edges(node):
        if k in fp16_outs and not needs_input_cast_to_fp32(g, nodes[d]):
            return False
    return REG.find_by_constraints(node.op, node.domain, sch.since_version, tmap)


def add_cast_node(g, old_arg, new_on_input, to, trace=None):
    """AddCastNode: node name = GenerateNodeName(PREFIX + arg); the new arg takes the same name
    (GetOrCreateNodeArg, NOT GenerateNodeArgName: an existing arg of that name is reused as is)."""
    name = g.generate_node_name(PREFIX + old_arg)
    if name not in g.arg_names:
        g.types[name] = "tensor(float)"
        g.arg_names.add(name)
    ins, outs = ([name], [old_arg]) if new_on_input else ([old_arg], [name])
    cast = g.add_node(name, "Cast", "", ins, outs, {"to": to}, DOC)
    cast.ep = CPU
    if trace is not None:
        trace.append("  new Cast #%d %r (%s, to=%d)" % (cast.idx, name, "back to fp16 for output %r" % old_arg
                                                       if new_on_input else "input %r" % old_arg, to))
    return name


def insert_cast_apply(g, level, trace):
    # 1. ForceSingleNodeCPUFloat16ToFloat32: node-index order, decisions see earlier un-assignments
    for n in g.live():
        if is_isolated_fp16_node_on_cpu(g, n):
            n.ep = ""
            trace.append("isolated->fp32: %s" % n.name)
    modified = False
    input_def_updates = {}
    order = g.topo_order()  # snapshot taken before any insertion
    trace.append("topological order (indices): %s" % order)
    for i in order:
        node = g.nodes[i]
        replacement, casted = {}, False
        for a in list(node.inputs):
            if node.ep == "" and not node.subgraphs and is_fp16(g, a):
                if a in input_def_updates:
                    replacement[a] = input_def_updates[a]
                else:
                    new = add_cast_node(g, a, False, TP.FLOAT, trace)
                    replacement[a] = input_def_updates[a] = new
                casted = True
        if casted:
            trace.append("wrap #%d %r (%s %s)" % (node.idx, node.name, node.domain or "ai.onnx", node.op))
            node.ep = CPU
            if node.attrs.get("dtype") == TP.FLOAT16:
                node.attrs["dtype"] = TP.FLOAT
            for o in list(node.outputs):
                if is_fp16(g, o):
                    replacement[o] = add_cast_node(g, o, True, TP.FLOAT16, trace)
            node.inputs = [replacement.get(a, a) for a in node.inputs]
            node.outputs = [replacement.get(a, a) for a in node.outputs]
            modified = True
        for sg in node.subgraphs.values():
            modified |= insert_cast_apply(sg, level + 1, trace)
    if level == 0:
        modified |= remove_duplicate_cast(g, trace)
    return modified


# -- RemoveDuplicateCastTransformer -------------------------------------------------------------------------------
def group(t):
    if t == "tensor(bool)":
        return "Bool"
    if t in ("tensor(int16)", "tensor(int32)", "tensor(int64)", "tensor(int8)"):
        return "Integer"
    if t in ("tensor(uint16)", "tensor(uint32)", "tensor(uint64)", "tensor(uint8)"):
        return "Unsigned"
    if t in ("tensor(bfloat16)", "tensor(double)", "tensor(float)", "tensor(float16)"):
        return "Float"
    return "Unknown"


def bits(t):
    return {"tensor(bool)": 1, "tensor(uint8)": 8, "tensor(int8)": 8, "tensor(int16)": 16, "tensor(uint16)": 16,
            "tensor(bfloat16)": 16, "tensor(float16)": 16, "tensor(int32)": 32, "tensor(uint32)": 32,
            "tensor(float)": 32, "tensor(int64)": 64, "tensor(uint64)": 64, "tensor(double)": 64}.get(t, -1)


def unsafe_cast(src, dst, node_name):
    sg, dg = group(src), group(dst)
    if "Unknown" in (sg, dg):
        return True
    if sg not in ("Bool", "Unsigned") and dg == "Unsigned":
        return True
    if sg == "Float" and dg != "Float":
        return True
    sb, db = bits(src), bits(dst)
    if sg == "Unsigned" and dg == "Integer":
        return db <= sb
    if sg in ("Integer", "Unsigned") and dg == "Float":
        return db <= sb
    if {src, dst} == {"tensor(float16)", "tensor(bfloat16)"}:
        return True
    return sb > db and not node_name.startswith(PREFIX)


def remove_duplicate_cast(g, trace):
    modified = False
    graph_outputs = set(g.outputs)
    for idx in g.all_indices():  # graph.Nodes(): index order, removed slots skipped
        node = g.nodes.get(idx)
        if node is None:
            continue
        removed = False
        if node.op == "Cast":
            src_t, dst_t = g.type(node.inputs[0]), g.type(node.outputs[0])
            lossy = unsafe_cast(src_t, dst_t, node.name)
            out_edges = g.out_edges(node)
            num_children = len(out_edges)
            to_remove, to_keep, inconsistent = [], [], False
            for (d, _, _) in out_edges:
                child = g.nodes[d]
                if child.op != "Cast":
                    continue
                s1, d1 = g.type(child.inputs[0]), g.type(child.outputs[0])
                if lossy and unsafe_cast(d1, s1, child.name):
                    inconsistent = True
                    break
                if child.outputs[0] not in graph_outputs and src_t == d1 and s1 == dst_t:
                    to_remove.append(child)
                else:
                    to_keep.append(child)
            if inconsistent:
                continue
            if to_remove:
                in_edges = g.in_edges(node)
                for child in to_remove:
                    repl = node.inputs[0]  # no input edge: the graph input / initializer itself
                    if in_edges:
                        s, k, _ = in_edges[0]
                        repl = g.nodes[s].outputs[k]
                    for (d, _, j) in g.out_edges(child):
                        c = g.nodes[d]
                        if j < len(c.inputs):
                            c.inputs[j] = repl
                    g.remove_node(child.idx)
                    trace.append("remove child cast %s (consumers now read %s)" % (child.name, repl))
                modified = True
            if (num_children > 0 and len(to_remove) + len(to_keep) == num_children
                    and node.outputs[0] not in graph_outputs):
                cross_ep = any(node.ep and k.ep and k.ep != node.ep for k in to_keep)
                to_bool = lossy and any(group(g.type(k.outputs[0])) == "Bool" for k in to_keep)
                if not cross_ep and not to_bool:
                    for k in to_keep:  # Graph::SetNodeArgType on the (now orphaned) arg
                        g.types[k.inputs[0]] = src_t
                    in_edges = g.in_edges(node)
                    repl = g.nodes[in_edges[0][0]].outputs[in_edges[0][1]] if len(in_edges) == 1 else node.inputs[0]
                    for (d, _, j) in g.out_edges(node):
                        c = g.nodes[d]
                        if j < len(c.inputs):
                            c.inputs[j] = repl
                    g.remove_node(node.idx)
                    trace.append("remove first cast %s (children now read %s)" % (node.name, repl))
                    removed = modified = True
        if not removed:
            for sg in node.subgraphs.values():
                modified |= remove_duplicate_cast(sg, trace)
    return modified


def topo_sorted_copy(m):
    """onnx shape inference walks nodes in file order; sort a copy (Kahn) so out-of-order files infer too."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    nodes, done = list(m2.graph.node), set()
    known = {v.name for v in m2.graph.input} | {t.name for t in m2.graph.initializer} | {""}
    out = []
    while nodes:
        for n in nodes:
            outer = set()
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    outer |= {i for sn in a.g.node for i in sn.input}
            if all(i in known for i in n.input) and all(i in known or i not in produced(nodes) for i in outer):
                out.append(n)
                known |= set(n.output)
                nodes.remove(n)
                break
        else:
            out += nodes
            break
    del m2.graph.node[:]
    m2.graph.node.extend(out)
    return m2


def produced(nodes):
    return {o for n in nodes for o in n.output}


def simulate(model_path, counter_start=0):
    """Returns (predicted Graph, modified flag, trace lines). counter_start: the main graph's name_generator_ value
    left by earlier passes (EnsureUniqueDQForNodeUnit runs first, even at DISABLE_ALL)."""
    m = onnx.load(model_path, load_external_data=False)
    opsets = {("" if o.domain in ("", "ai.onnx") else o.domain): o.version for o in m.opset_import}
    inferred = onnx.shape_inference.infer_shapes(topo_sorted_copy(m))  # ORT infers in topological order
    types = {}

    def collect(gp):
        for v in list(gp.input) + list(gp.output) + list(gp.value_info):
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                types[v.name] = tstr(v.type.tensor_type.elem_type)
        for t in gp.initializer:
            types[t.name] = tstr(t.data_type)
        for n in gp.node:
            if n.op_type == "Constant":
                types[n.output[0]] = tstr(n.attribute[0].t.data_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    collect(a.g)

    collect(inferred.graph)
    g = Graph(m.graph, opsets, types)
    g.counter = counter_start
    partition(g)
    trace = ["unassigned after partitioning (no CPU kernel for the actual types): %s"
             % [("#%d" % n.idx, n.name, n.op) for n in g.live() if not n.ep]]
    modified = insert_cast_apply(g, 0, trace)
    return g, modified, trace


# ----------------------------------------------------------------------------------------------------------------
# Real ORT, in a subprocess (so the C++ log on stderr can be captured)
# ----------------------------------------------------------------------------------------------------------------
RUNNER = r"""
import sys, onnxruntime as ort
so = ort.SessionOptions()
if len(sys.argv) > 4:
    so.add_session_config_entry("session.disable_quant_qdq", "1")  # sweep: skip EnsureUniqueDQForNodeUnit
so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[3])
so.optimized_model_filepath = sys.argv[2]
so.log_severity_level = 1
try:
    ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
except Exception as e:
    print("SESSION_ERROR", e, file=sys.stderr)
"""


def run_ort(path, level="ORT_DISABLE_ALL", no_qdq=False):
    out = os.path.join(WORK, os.path.basename(path).replace(".onnx", "") + "_" + level + "_ort.onnx")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([sys.executable, "-c", RUNNER, path, out, level] + (["no_qdq"] if no_qdq else []),
                       capture_output=True, text=True)
    log = [l.split("GraphTransformer ", 1)[1].split(" with status")[0] for l in r.stderr.splitlines()
           if "GraphTransformer " in l and " modified: " in l]
    err = [l for l in r.stderr.splitlines() if "SESSION_ERROR" in l]
    return (onnx.load(out, load_external_data=False) if os.path.exists(out) else None), log, err


# ----------------------------------------------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------------------------------------------
def norm_attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [norm_attr(x) for x in v]
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, onnx.TensorProto):
        return ("tensor", v.data_type, list(v.dims))
    return v


def predicted_nodes(g, modified=True):
    """Modified graph: topological order (§2.2) and schema defaults on every node (§2.4). Unmodified: verbatim."""
    if not modified:
        return actual_nodes(g.proto)
    out = []
    for i in g.topo_order():
        n = g.nodes[i]
        attrs = dict(REG.defaults(n.schema)) if n.schema else {}
        attrs.update(n.attrs)
        out.append(dict(name=n.name, op=n.op, domain=n.domain, inputs=list(n.inputs), outputs=list(n.outputs),
                        attrs={k: norm_attr(v) for k, v in attrs.items()}, doc=n.doc,
                        sub={k: predicted_nodes(s) for k, s in n.subgraphs.items()}))
    return out


def actual_nodes(gp):
    out = []
    for n in gp.node:
        attrs, subs = {}, {}
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                subs[a.name] = actual_nodes(a.g)
            else:
                attrs[a.name] = norm_attr(helper.get_attribute_value(a))
        out.append(dict(name=n.name, op=n.op_type, domain="" if n.domain == "ai.onnx" else n.domain,
                        inputs=list(n.input), outputs=list(n.output), attrs=attrs, doc=n.doc_string, sub=subs))
    return out


def diff_nodes(pred, act, where="graph"):
    problems = []
    if [p["name"] for p in pred] != [a["name"] for a in act]:
        problems.append("%s order/names differ:\n      spec %s\n      ORT  %s" % (
            where, [p["name"] for p in pred], [a["name"] for a in act]))
        return problems
    for p, a in zip(pred, act):
        for k in ("op", "domain", "inputs", "outputs", "attrs", "doc"):
            if p[k] != a[k]:
                problems.append("%s node %r %s: spec %r ORT %r" % (where, p["name"], k, p[k], a[k]))
        for k in set(p["sub"]) | set(a["sub"]):
            problems += diff_nodes(p["sub"].get(k, []), a["sub"].get(k, []), "%s/%s.%s" % (where, p["name"], k))
    return problems


def fmt(nodes, indent="    "):
    lines = []
    for n in nodes:
        a = {k: v for k, v in n["attrs"].items()}
        lines.append("%s%s%s %r in=%s out=%s%s%s" % (indent, (n["domain"] + ".") if n["domain"] else "", n["op"],
                                                     n["name"], n["inputs"], n["outputs"],
                                                     (" " + str(a)) if a else "",
                                                     " doc=%r" % n["doc"] if n["doc"] else ""))
        for k, s in n["sub"].items():
            lines.append("%s  [%s]" % (indent, k))
            lines += fmt(s, indent + "    ")
    return lines


def all_refs(g):
    refs = set()
    for n in g.live():
        refs |= set(n.inputs)
        for sg in n.subgraphs.values():
            refs |= all_refs(sg)
    return refs


def check(case, path, level="ORT_DISABLE_ALL", expect_error=False, sim_path=None, counter_start=0):
    print("=" * 110)
    print("CASE %s  (%s, %s)" % (case, os.path.relpath(path, CORPUS) if path.startswith(CORPUS) else
                                 os.path.basename(path), level))
    mi = onnx.load(path, load_external_data=False)
    print("  input:")
    print("\n".join(fmt(actual_nodes(mi.graph))))
    mo, log, err = run_ort(path, level)
    ic_log = [l for l in log if l.split()[0] in ("RemoveDuplicateCastTransformer", "CastFloat16Transformer")]
    print("  ORT log:", ic_log, err)
    if expect_error == "inline":
        print("  ORT saved graph (partitioner function inlining; outside this pass, shown for reference):")
        print("\n".join(fmt(actual_nodes(mo.graph))) if mo is not None else "    (none)")
        return True
    g, modified, trace = simulate(sim_path or path, counter_start)
    if sim_path:
        print("  spec input: %s (the graph after EnsureUniqueDQForNodeUnit), name counter starts at %d"
              % (os.path.basename(sim_path), counter_start))
    for t in trace:
        print("  spec trace:", t)
    if mo is None:
        ok = expect_error is True and bool(err)
        print("  ORT saved nothing (session failed)." + ("  [as expected]" if ok else "  [UNEXPECTED]"))
        return ok
    problems = []
    if level == "ORT_DISABLE_ALL":
        want = ["RemoveDuplicateCastTransformer modified: %d" % modified, "CastFloat16Transformer modified: %d"
                % modified]
        if ic_log != want:
            problems.append("log: spec %s ORT %s" % (want, ic_log))
        problems += diff_nodes(predicted_nodes(g, modified), actual_nodes(mo.graph))
        # value_info: the input's entries, sorted by name, with the NodeArg's current element type. NodeArgs
        # orphaned by the pass (e.g. 'r' of Relu->Sigmoid after the cast pair is removed) keep their entry.
        want_vi = sorted((v.name, g.types.get(v.name)) for v in mi.graph.value_info)
        if not modified:
            want_vi = [(v.name, tstr(v.type.tensor_type.elem_type)) for v in mi.graph.value_info]
        got_vi = [(v.name, tstr(v.type.tensor_type.elem_type)) for v in mo.graph.value_info]
        if want_vi != got_vi:
            problems.append("value_info: spec %s ORT %s" % (want_vi, got_vi))
    gi = [(v.name, v.type.tensor_type.elem_type) for v in mi.graph.input]
    go = [(v.name, v.type.tensor_type.elem_type) for v in mi.graph.output]
    if gi != [(v.name, v.type.tensor_type.elem_type) for v in mo.graph.input]:
        problems.append("graph inputs changed")
    if go != [(v.name, v.type.tensor_type.elem_type) for v in mo.graph.output]:
        problems.append("graph outputs changed")
    used = {a for n in mo.graph.node for a in n.input}
    want_inits = sorted(t for t in g.initializers if t in all_refs(g) or t in g.outputs)
    if level == "ORT_DISABLE_ALL" and sorted(t.name for t in mo.graph.initializer) != want_inits:
        problems.append("initializers: spec %s ORT %s" % (want_inits, sorted(t.name for t in mo.graph.initializer)))
    print("  ORT saved graph:")
    print("\n".join(fmt(actual_nodes(mo.graph))))
    if problems:
        print("  MISMATCH:")
        for p in problems:
            print("    -", p)
    else:
        print("  MATCH: spec predicts every node (order, name, op, inputs, outputs, attrs, doc) and the log")
    return not problems


# ----------------------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------------------
def vi(n, t, s=None):
    return helper.make_tensor_value_info(n, t, s)


def N(op, ins, outs, name, domain="", doc_string=None, **kw):
    return helper.make_node(op, ins, outs, name=name, domain=domain, doc_string=doc_string, **kw)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def save(tag, nodes, ins, outs, inits=(), opset=21, value_info=()):
    g = helper.make_graph(nodes, "g", ins, outs, list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    p = os.path.join(WORK, tag + ".onnx")
    onnx.save(m, p)
    return p


h16 = lambda *s: np.ones(s, np.float16)  # noqa: E731


def hand_cases():
    c = []
    # h1: an fp16 chain with no fp16 CPU kernels; fp16 graph input, output and initializers
    c.append(("h1_chain", save("h1_chain", [
        N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s"], "sig"), N("Add", ["s", "w"], ["a"], "add"),
        N("MatMul", ["a", "m"], ["mm"], "matmul"), N("Tanh", ["mm"], ["y"], "tanh")],
        [vi("x", H, [2, 4])], [vi("y", H, [2, 4])], [init("w", h16(4)), init("m", h16(4, 4))])))
    # h2: Round has an fp16 CPU kernel; between two kernel-less nodes it is forced to fp32 (isolated)
    c.append(("h2_isolated", save("h2_isolated", [
        N("Relu", ["x"], ["r"], "relu"), N("Round", ["r"], ["q"], "round"), N("Sigmoid", ["q"], ["y"], "sig")],
        [vi("x", H, [4])], [vi("y", H, [4])])))
    # h3: same, but Round produces a graph output too -> stays fp16, gets casts around it
    c.append(("h3_isolated_graph_output", save("h3_isolated_graph_output", [
        N("Relu", ["x"], ["r"], "relu"), N("Round", ["r"], ["q"], "round"), N("Sigmoid", ["q"], ["y"], "sig")],
        [vi("x", H, [4])], [vi("y", H, [4]), vi("q", H, [4])])))
    # h4: a node consuming fp16 and fp32 (Resize: X fp16, scales fp32) and one input used twice (Mul(x, x))
    c.append(("h4_mixed_and_twice", save("h4_mixed_and_twice", [
        N("Mul", ["x", "x"], ["sq"], "mul"),
        N("Resize", ["sq", "", "scales"], ["y"], "resize", mode="nearest")],
        [vi("x", H, [1, 1, 2, 2])], [vi("y", H, [1, 1, 4, 4])], [init("scales", np.array([1, 1, 2, 2], np.float32))])))
    # h5: fp16 value read by two kernel-less nodes and by one fp16-capable node (Identity)
    c.append(("h5_fanout", save("h5_fanout", [
        N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s1"], "sig1"), N("Neg", ["r"], ["s2"], "neg"),
        N("Identity", ["r"], ["s3"], "ident"), N("Add", ["s1", "s2"], ["y"], "add")],
        [vi("x", H, [4])], [vi("y", H, [4]), vi("s3", H, [4])])))
    # h6: a kernel-less node whose fp16 output is a graph output AND feeds another kernel-less node
    c.append(("h6_output_and_consumer", save("h6_output_and_consumer", [
        N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["y"], "sig")],
        [vi("x", H, [4])], [vi("y", H, [4]), vi("r", H, [4])])))
    # h7: two-output node (TopK: Values fp16, Indices int64); only the fp16 output gets a back-cast
    c.append(("h7_topk", save("h7_topk", [
        N("TopK", ["x", "k"], ["v", "i"], "topk"), N("Relu", ["v"], ["y"], "relu")],
        [vi("x", H, [8])], [vi("y", H, [2]), vi("i", I64, [2])], [init("k", np.array([2], np.int64))])))
    # h8: `dtype` attribute rewrite (EyeLike, RandomNormalLike with dtype=FLOAT16)
    c.append(("h8_dtype", save("h8_dtype", [
        N("EyeLike", ["x"], ["e"], "eye", dtype=H), N("RandomNormalLike", ["x"], ["r"], "rnl", dtype=H),
        N("Add", ["e", "r"], ["y"], "add")], [vi("x", H, [3, 3])], [vi("y", H, [3, 3])])))
    # h9: model Casts only (no fp16 kernels involved): lossless round trips are removed, lossy ones kept
    c.append(("h9_model_casts", save("h9_model_casts", [
        N("Cast", ["x"], ["c1"], "f32_to_f64", to=TP.DOUBLE), N("Cast", ["c1"], ["c2"], "f64_to_f32", to=F),
        N("Relu", ["c2"], ["y1"], "relu1"),
        N("Cast", ["x"], ["d1"], "f32_to_f16", to=H), N("Cast", ["d1"], ["d2"], "f16_to_f32", to=F),
        N("Relu", ["d2"], ["y2"], "relu2"),
        N("Cast", ["x"], ["e1"], "f32_to_i32", to=I32), N("Cast", ["e1"], ["e2"], "i32_to_bool", to=B),
        N("Cast", ["i"], ["f1"], "i64_to_i64", to=I64), N("Cast", ["f1"], ["f2"], "i64_to_i64_b", to=I64),
        N("Neg", ["f2"], ["y4"], "neg"),
        N("Cast", ["x"], ["h1"], "f32_to_f16b", to=H), N("Cast", ["h1"], ["h2"], "f16_to_i32", to=I32),
        N("Neg", ["h2"], ["y5"], "neg2")],
        [vi("x", F, [4]), vi("i", I64, [4])],
        [vi("y1", F, [4]), vi("y2", F, [4]), vi("e2", B, [4]), vi("y4", I64, [4]), vi("y5", I32, [4])])))
    # h10: a model Cast fp32->fp16 feeding a kernel-less fp16 node (input comes from a graph input: no edge)
    c.append(("h10_model_cast_then_fp16", save("h10_model_cast_then_fp16", [
        N("Cast", ["x"], ["xh"], "to_half", to=H), N("Relu", ["xh"], ["y"], "relu")],
        [vi("x", F, [4])], [vi("y", H, [4])])))
    # h11: name collisions: an existing node named like a generated Cast; the _token_ counter advances
    c.append(("h11_name_collision", save("h11_name_collision", [
        N("Relu", ["x"], ["r"], "InsertedPrecisionFreeCast_x"), N("Sigmoid", ["r"], ["s"], "sig"),
        N("Neg", ["r"], ["t"], "InsertedPrecisionFreeCast_r"), N("Add", ["s", "t"], ["y"], "add")],
        [vi("x", H, [4])], [vi("y", H, [4])])))
    # h12: ForceSingleNode visits nodes in index order and sees earlier un-assignments. Concat's check looks only at
    # the FIRST input of its variadic formal, so it is isolated although its 2nd input comes from a CPU node
    # (Round). If Round's index is higher than Concat's, Round then sees Concat as "needs a cast" and is isolated
    # too (h12a); with Round first, Round is checked while Concat is still on CPU and stays fp16 (h12b).
    for tag, order in (("h12a_isolated_index_order", ("r1", "r2", "cat", "rd", "sig")),
                       ("h12b_isolated_index_order", ("r1", "r2", "rd", "cat", "sig"))):
        nd = {"r1": N("Relu", ["x"], ["a"], "relu1"), "r2": N("Relu", ["x2"], ["b0"], "relu2"),
              "rd": N("Round", ["b0"], ["b"], "round"), "cat": N("Concat", ["a", "b"], ["c"], "concat", axis=0),
              "sig": N("Sigmoid", ["c"], ["y"], "sig")}
        c.append((tag, save(tag, [nd[k] for k in order], [vi("x", H, [4]), vi("x2", H, [4])], [vi("y", H, [8])])))
    # h13: fp16 initializer only (no graph input), kernel-less consumer; plus QuantizeLinear with fp16 (has kernel)
    c.append(("h13_initializer_and_q", save("h13_initializer_and_q", [
        N("Add", ["x", "w"], ["a"], "add"),
        N("QuantizeLinear", ["a", "s", "z"], ["q"], "q"), N("DequantizeLinear", ["q", "s", "z"], ["dq"], "dq"),
        N("Sigmoid", ["dq"], ["y"], "sig")],
        [vi("x", H, [4])], [vi("y", H, [4])],
        [init("w", h16(4)), init("s", np.array(0.1, np.float16)), init("z", np.array(0, np.uint8))])))
    # h14: the same node reached through an arg that already exists with the generated name (arg collision)
    c.append(("h14_arg_collision", save("h14_arg_collision", [
        N("Relu", ["x"], ["InsertedPrecisionFreeCast_q"], "relu"), N("Neg", ["q"], ["y2"], "neg")],
        [vi("x", H, [4]), vi("q", H, [4])], [vi("InsertedPrecisionFreeCast_q", H, [4]), vi("y2", H, [4])]),
        "error"))
    # h15: subgraphs: If with fp16 branches, the If itself has an fp16 input
    then_g = helper.make_graph([N("Relu", ["x"], ["t1"], "then_relu"), N("Sigmoid", ["t1"], ["t2"], "then_sig")],
                               "then", [], [vi("t2", H, [4])])
    else_g = helper.make_graph([N("Identity", ["x"], ["e1"], "else_id")], "else", [], [vi("e1", H, [4])])
    c.append(("h15_if_subgraph", save("h15_if_subgraph", [
        N("Neg", ["x"], ["nx"], "neg"),
        N("If", ["cond"], ["o"], "if", then_branch=then_g, else_branch=else_g), N("Add", ["o", "nx"], ["y"], "add")],
        [vi("x", H, [4]), vi("cond", B, [])], [vi("y", H, [4])])))
    # h16: Loop body with an fp16 Add, loop-carried fp16 value
    body = helper.make_graph([N("Add", ["v_in", "one"], ["v_out"], "body_add"),
                              N("Identity", ["cond_in"], ["cond_out"], "body_cond")], "body",
                             [vi("iter", I64, []), vi("cond_in", B, []), vi("v_in", H, [4])],
                             [vi("cond_out", B, []), vi("v_out", H, [4])])
    c.append(("h16_loop_subgraph", save("h16_loop_subgraph", [
        N("Loop", ["trip", "cond", "x"], ["y"], "loop", body=body)],
        [vi("x", H, [4]), vi("trip", I64, []), vi("cond", B, [])], [vi("y", H, [4])],
        [init("one", h16(4))])))
    # h17: opset 13 (Cast has no `saturate`), three kernel-less nodes in a row
    c.append(("h17_opset13", save("h17_opset13", [
        N("Relu", ["x"], ["a"], "r1"), N("Relu", ["a"], ["b"], "r2"), N("Relu", ["b"], ["y"], "r3")],
        [vi("x", H, [4])], [vi("y", H, [4])], opset=13)))
    # h18: an fp16 graph input feeding only fp16-capable nodes -> nothing to do (modified: 0, graph kept)
    c.append(("h18_nothing", save("h18_nothing", [
        N("Identity", ["x"], ["a"], "id"), N("Round", ["a"], ["y"], "round")], [vi("x", H, [4])],
        [vi("y", H, [4])])))
    # h19: unassigned fp16 node without fp16 inputs (RandomNormal dtype=fp16): nothing can fix it, session fails
    c.append(("h19_output_only", save("h19_output_only", [
        N("RandomNormal", [], ["r"], "rn", dtype=H, shape=[4]), N("Relu", ["r"], ["y"], "relu")],
        [], [vi("y", H, [4])]), "error"))
    # h21: Softmax-13+ has no fp16 CPU kernel but a function body: the PARTITIONER inlines it (nodes named '',
    # args '_inlfunc_Softmax_*', initializer '_inlfunc_Softmax_axes') before InsertCast runs. Not simulated here.
    c.append(("h21_function_inlined", save("h21_function_inlined", [N("Softmax", ["x"], ["y"], "softmax")],
                                           [vi("x", H, [2, 4])], [vi("y", H, [2, 4])]), "inline"))
    # h22: value_info of tensors the pass orphans; Graph::SetNodeArgType on a removed Cast's output (int32 now)
    p = save("h22_value_info", [N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s"], "sig"),
                                N("Tanh", ["s"], ["y"], "tanh")], [vi("x", H, [4])], [vi("y", H, [4])],
             value_info=[vi("s", H, [4]), vi("r", H, [4])])
    c.append(("h22_value_info", p))
    m = onnx.load(os.path.join(CORPUS, CORPUS_MODELS[6]))
    m.graph.value_info.extend([vi("matmul_output_float", H), vi("multiplier", H), vi("matmul_output_int32", I32)])
    p = os.path.join(WORK, "h23_value_info_settype.onnx")
    onnx.save(m, p)
    c.append(("h23_value_info_settype", p))
    # h24: the _token_ counter is per Graph and shared with earlier passes: EnsureUniqueDQ duplicates the DQ for
    # relu1/relu2 (tokens 0 and 1); InsertCast's collisions continue at 2; the three forward casts that collide with
    # back-casts consume 2, 3, 4 and are removed again; the live node named like x's cast gives '_token_5'.
    qdq_init = [init("s", np.array(0.1, np.float16)), init("z", np.array(0, np.uint8))]
    pre = [N("QuantizeLinear", ["x", "s", "z"], ["q"], "Q"), N("DequantizeLinear", ["q", "s", "z"], ["d"], "DQ"),
           N("Relu", ["x"], ["rx"], "InsertedPrecisionFreeCast_x")]
    outs = [vi("r0", H, [4]), vi("r1", H, [4]), vi("r2", H, [4]), vi("rx", H, [4])]
    p = save("h24_counter_persists", pre + [N("Relu", ["d"], ["r%d" % i], "relu%d" % i) for i in range(3)],
             [vi("x", H, [4])], outs, qdq_init)
    dup = dict(doc_string="Added by EnsureUniqueDQForNodeUnit")
    p_sim = save("h24_after_ensure_unique_dq", pre + [
        N("Relu", ["d"], ["r0"], "relu0"), N("Relu", ["d/duplicated"], ["r1"], "relu1"),
        N("Relu", ["d/duplicated_token_0"], ["r2"], "relu2"),
        N("DequantizeLinear", ["q", "s", "z"], ["d/duplicated"], "DQ/duplicated", **dup),
        N("DequantizeLinear", ["q", "s", "z"], ["d/duplicated_token_0"], "DQ/duplicated_token_1", **dup)],
        [vi("x", H, [4])], outs, qdq_init)
    c.append(("h24_counter_persists", p, ("sim", p_sim, 2)))
    # h25: CPU-assigned nodes that have an fp16 kernel are left alone (no 1.32 "kernel-less" rewrite is triggered)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [N("Shape", ["x"], ["o_shape"], "shape"), N("Gather", ["x", "gi"], ["o_gather"], "gather", axis=0),
             N("Slice", ["x", "st", "en"], ["o_slice"], "slice"), N("Expand", ["x", "shp"], ["o_expand"], "expand"),
             N("ConstantOfShape", ["shp"], ["o_cos"], "cos", value=numpy_helper.from_array(h16(1))),
             N("Split", ["x"], ["o_s1", "o_s2"], "split", axis=1, num_outputs=2),
             N("Transpose", ["x"], ["o_tr"], "transpose", perm=[1, 0]), N("Unsqueeze", ["x", "ax"], ["o_unsq"], "unsq"),
             N("Flatten", ["x"], ["o_flat"], "flatten"), N("Clip", ["x", "lo", "hi"], ["o_clip"], "clip"),
             N("Max", ["x", "x2"], ["o_max"], "max"), N("Min", ["x", "x2"], ["o_min"], "min"),
             N("LayerNormalization", ["x", "g1", "b1"], ["o_ln"], "ln"), N("IsNaN", ["x"], ["o_isnan"], "isnan"),
             N("Sign", ["x"], ["o_sign"], "sign"), N("Mod", ["x", "x2"], ["o_mod"], "mod", fmod=1),
             N("GatherElements", ["x", "ge"], ["o_ge"], "gather_el", axis=0),
             N("Compress", ["x", "cm"], ["o_comp"], "compress", axis=0),
             N("Shrink", ["x"], ["o_shrink"], "shrink"), N("Round", ["x"], ["o_round"], "round"),
             N("Dropout", ["x"], ["o_drop"], "dropout"), N("Reshape", ["x", "rs"], ["o_reshape"], "reshape")]
    outs = [vi(o, I64 if o == "o_shape" else B if o == "o_isnan" else H) for n in nodes for o in n.output]
    c.append(("h25_fp16_kernels_untouched", save("h25_fp16_kernels_untouched", nodes,
              [vi("x", H, [2, 4]), vi("x2", H, [2, 4])], outs,
              [init("gi", i64(0)), init("st", i64(0)), init("en", i64(1)), init("shp", i64(2, 4)), init("ax", i64(0)),
               init("lo", np.array(0, np.float16)), init("hi", np.array(1, np.float16)), init("g1", h16(4)),
               init("b1", h16(4)), init("ge", np.zeros((1, 4), np.int64)), init("cm", np.array([True, False])),
               init("rs", i64(8))])))
    # h20: diamond where two kernel-less nodes share a consumer that is also kernel-less (token numbering)
    c.append(("h20_diamond", save("h20_diamond", [
        N("Sigmoid", ["x"], ["a"], "sa"), N("Sigmoid", ["x"], ["b"], "sb"), N("Add", ["a", "b"], ["c"], "add"),
        N("Mul", ["c", "a"], ["y"], "mul")], [vi("x", H, [4])], [vi("y", H, [4])])))
    return c


CORPUS_MODELS = [
    "onnx_backend_node/test_qlinearmatmul_2D_int8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_2D_uint8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_3D_int8_float16/model.onnx",
    "onnx_backend_node/test_qlinearmatmul_3D_uint8_float16/model.onnx",
    "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8s8.onnx",
    "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8u8.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/fusion/matmul_integer_to_float16_int8.onnx",
    "ort_testdata/onnxruntime/test/testdata/transform/qdq_optimization/dup_qdq_float16.onnx",
]


def kernel_table_summary():
    """Which ops have an fp16 CPU kernel in this build (the partitioning decision depends on this list)."""
    ops = sorted({(k.domain or "ai.onnx") + "." + k.op_name for ks in REG.kernels.values() for k in ks
                  if any(FP16 in v for v in k.type_constraints.values())})
    print("ORT %s; CPU kernel defs: %d; ops with an fp16 CPU kernel (%d): %s" % (
        ort.__version__, sum(len(v) for v in REG.kernels.values()), len(ops), " ".join(ops)))


def sweep():
    """Every corpus model at DISABLE_ALL with session.disable_quant_qdq=1 (so InsertCast sees the file's graph):
    the spec's modified flag must equal ORT's CastFloat16Transformer flag, and modified graphs must match."""
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(CORPUS) for f in fs if f.endswith(".onnx"))
    agree = disagree = skipped = 0
    for p in paths:
        rel = os.path.relpath(p, CORPUS)
        mo, log, err = run_ort(p, no_qdq=True)
        flags = [l for l in log if l.startswith("CastFloat16Transformer")]
        if mo is None or not flags:
            skipped += 1
            continue
        ort_mod = flags[0].endswith("1")
        try:
            g, modified, _ = simulate(p)
        except Exception as e:  # noqa: BLE001 - report and go on
            print("  SIM-ERROR %s: %s" % (rel, e))
            disagree += 1
            continue
        problems = [] if modified == ort_mod else ["flag spec %d ORT %d" % (modified, ort_mod)]
        if modified:
            problems += diff_nodes(predicted_nodes(g, modified), actual_nodes(mo.graph))
        if problems:
            disagree += 1
            print("  DIFF %s: %s" % (rel, problems[:3]))
        else:
            agree += 1
            if modified:
                print("  modified and matched: %s" % rel)
    print("sweep: %d models agree, %d disagree, %d skipped (ORT rejects the model)" % (agree, disagree, skipped))
    return disagree == 0


def main(argv):
    kernel_table_summary()
    if argv[:1] == ["--sweep"]:
        return 0 if sweep() else 1
    cases = [(n, p, x[0] if x else None) for n, p, *x in hand_cases()]
    cases += [("corpus:" + os.path.basename(os.path.dirname(p)) if p.endswith("model.onnx") else
               "corpus:" + os.path.basename(p), os.path.join(CORPUS, p), None) for p in CORPUS_MODELS]
    if argv:
        cases = [c for c in cases if any(a in c[0] for a in argv)]
    results = []
    for name, path, flag in cases:
        if isinstance(flag, tuple):
            results.append((name, check(name, path, sim_path=flag[1], counter_start=flag[2])))
            continue
        results.append((name, check(name, path, expect_error=(flag == "error") or (flag == "inline" and flag))))
    print("=" * 110)
    for name, ok in results:
        print("%-55s %s" % (name, "MATCH" if ok else "MISMATCH"))
    print("%d/%d cases match" % (sum(ok for _, ok in results), len(results)))
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
