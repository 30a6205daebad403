#!/usr/bin/env python
"""Evidence for docs/notes/rule_names.md: the rule name of every RewriteRule that ORT 1.32 registers in
Level1_RuleBasedTransformer and Level2_RuleBasedTransformer on the CPU EP, and their order.

For every rule this script builds a tiny model where the rule fires and runs real onnxruntime
(optimized_model_filepath, log_severity_level=1) in five configurations:

  base   all *other* transformers of the levels that run are disabled by name (names taken from ORT's own
         `GraphTransformer <name> modified:` log lines), the rule-based transformer keeps all its rules
         -> the rule's effect must be present
  off    as base, plus disabled_optimizers=[<rule name>]            -> effect absent
  only   as base, plus every *other* rule name of the same level    -> effect present (the rule alone does it)
  wrong  as base, plus plausible wrong names (class name, old names) -> effect present (wrong names are ignored)
  level  Level1 rules: effect present at ORT_ENABLE_BASIC.
         Level2 rules: effect present at ORT_ENABLE_EXTENDED with Level1_RuleBasedTransformer disabled and
         `Level2_RuleBasedTransformer modified: 1` logged; ClipQuantRewrite/ReluQuantRewrite also absent at
         ORT_ENABLE_BASIC (GemmTransposeFusion is a Level1 rule too, so it does fire there).

Completeness: GenerateRuleBasedGraphTransformer() returns nullptr (so the transformer is not registered and never
logged) when every rule of the level is disabled. The script checks that disabling exactly the listed names makes
LevelN_RuleBasedTransformer disappear from the log, and that leaving any single one enabled brings it back. So the
lists are complete for 1.32.0 (with and without optimization.enable_cast_chain_elimination=1), and no
Level3/other *_RuleBasedTransformer exists at ORT_ENABLE_ALL.

Order: registration order is not observable from outputs (rules sharing a target op never compete in these
patterns), so unless --no-binary-order is given (and if objdump exists) the script disassembles the installed
onnxruntime_pybind11_state*.so and lists, in code-address order, the rule-name string literals referenced by
GenerateRewriteRules() (each `make_unique<Rule>()` inlines its RewriteRule("name") constructor), and checks that
the out-of-line CastChainElimination block is entered after the CastElimination push and returns before the
PreShapeNodeElimination push.

Test models feed the node to be removed through an Abs: graph_utils::CanRemoveNode() needs exactly one input edge
(or no edge and a single input), so e.g. Add(graph_input, 0) is never removed; side_checks() shows this.

Run:  /work/venv/bin/python docs/notes/rule_names_probe.py [--no-binary-order] [rule-substring ...]
Exit status 0 iff every check passes. Scratch files go to $TMPDIR/rule_names_probe/.
"""
import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

WORK = os.path.join(tempfile.gettempdir(), "rule_names_probe")
os.makedirs(WORK, exist_ok=True)
CPU = ["CPUExecutionProvider"]
BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
EXTENDED = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
CAST_CHAIN = {"optimization.enable_cast_chain_elimination": "1"}
F, H, I64, U8, B = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.UINT8, TP.BOOL
INT64_MAX = np.iinfo(np.int64).max


# ----------------------------------------------------------------------------------------------- running ORT
@contextlib.contextmanager
def _capture_fd2():
    """ORT's default log sink writes to fd 2 from C++; redirect it to a file for the duration."""
    out = {}
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out["log"] = tmp.read().decode("utf-8", "replace")


_counter = [0]


def run(model, level, disabled=(), config=None):
    """Create a session; return (optimized ModelProto, {transformer: modified-ever}, raw log)."""
    _counter[0] += 1
    path = os.path.join(WORK, f"opt_{_counter[0]}.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = path
    so.log_severity_level = 1
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    with _capture_fd2() as cap:
        ort.InferenceSession(model.SerializeToString(), so, providers=CPU, disabled_optimizers=list(disabled))
    mods = {}
    for name, flag in re.findall(r"GraphTransformer (\S+) modified: (\d)", cap["log"]):
        mods[name] = mods.get(name, False) or flag == "1"
    return onnx.load(path), mods, cap["log"]


def op_count(m, op):
    return sum(n.op_type == op for n in m.graph.node)


def mk(nodes, inputs, outputs, inits=(), ml=False, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("ai.onnx.ml", 4)] if ml else [])
    m = helper.make_model(g, opset_imports=ops, ir_version=8)
    onnx.checker.check_model(m)
    return m


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def f32(*a):
    return np.array(a, dtype=np.float32)


# ------------------------------------------------------------------------------------------- the test models
# Each builder returns (model, effect) where effect(optimized_model) -> True iff the rule's rewrite happened.
# Nodes that RemoveNode() deletes are fed through ABS: graph_utils::CanRemoveNode() requires exactly one input
# *edge* (or no edge and a single input), so e.g. Add(graph_input, 0) is never removed (see edge_requirement_check()).
ABS = helper.make_node("Abs", ["x"], ["xa"])
def m_identity():
    m = mk([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]),
            helper.make_node("Relu", ["b"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    return m, lambda o: op_count(o, "Identity") == 0


def m_slice():
    m = mk([ABS, helper.make_node("Slice", ["xa", "st", "en", "ax", "sp"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [4, 4])], [vi("y", F, [4, 4])],
           [init("st", np.array([0], np.int64)), init("en", np.array([INT64_MAX], np.int64)),
            init("ax", np.array([0], np.int64)), init("sp", np.array([1], np.int64))])
    return m, lambda o: op_count(o, "Slice") == 0


def m_unsqueeze(opset=11):
    # 1.32 only handles the `axes` *attribute* form (Unsqueeze-1/11); with Unsqueeze-13 (axes as input) it never
    # fires (see unsqueeze_opset13_check()).
    if opset < 13:
        uq, inits = helper.make_node("Unsqueeze", ["c"], ["cu"], axes=[0]), [init("c", f32(1, 2, 3))]
    else:
        uq, inits = (helper.make_node("Unsqueeze", ["c", "axes"], ["cu"]),
                     [init("c", f32(1, 2, 3)), init("axes", np.array([0], np.int64))])
    m = mk([uq, helper.make_node("Add", ["x", "cu"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], inits,
           opset=opset)
    return m, lambda o: op_count(o, "Unsqueeze") == 0


def m_dropout():
    m = mk([helper.make_node("Dropout", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    return m, lambda o: op_count(o, "Dropout") == 0


def m_expand():
    m = mk([ABS, helper.make_node("Expand", ["xa", "shp"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [init("shp", np.array([2, 3], np.int64))])
    return m, lambda o: op_count(o, "Expand") == 0


def m_cast():
    m = mk([helper.make_node("Cast", ["x"], ["a"], to=F), helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    return m, lambda o: op_count(o, "Cast") == 0


def m_cast_chain():
    # f32 -> f16 -> f32: CastElimination cannot remove either Cast; the chain rule removes both.
    m = mk([helper.make_node("Cast", ["x"], ["a"], to=H), helper.make_node("Cast", ["a"], ["b"], to=F),
            helper.make_node("Relu", ["b"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    return m, lambda o: op_count(o, "Cast") < 2


def m_pre_shape():
    m = mk([helper.make_node("Cast", ["x"], ["a"], to=H), helper.make_node("Shape", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", I64, [2])])
    return m, lambda o: op_count(o, "Cast") == 0


def m_noop(op="Add", val=0.0):
    m = mk([ABS, helper.make_node(op, ["xa", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [init("k", np.array(val, np.float32))])
    return m, lambda o: op_count(o, op) == 0


def m_divmul():
    m = mk([helper.make_node("Div", ["one", "x"], ["a"]), helper.make_node("Mul", ["a", "z"], ["y"])],
           [vi("x", F, [2, 3]), vi("z", F, [2, 3])], [vi("y", F, [2, 3])], [init("one", np.array(1.0, np.float32))])
    return m, lambda o: op_count(o, "Mul") == 0


def m_reluclip():
    m = mk([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Clip", ["a", "lo", "hi"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
           [init("lo", np.array(-1.0, np.float32)), init("hi", np.array(6.0, np.float32))])
    return m, lambda o: op_count(o, "Relu") == 0


def m_gemmsum():
    m = mk([helper.make_node("Gemm", ["a", "w"], ["d"]), helper.make_node("Sum", ["d", "c"], ["y"])],
           [vi("a", F, [2, 3]), vi("c", F, [2, 4])], [vi("y", F, [2, 4])], [init("w", np.ones((3, 4), np.float32))])
    return m, lambda o: op_count(o, "Sum") == 0


def m_gemmtranspose():
    m = mk([helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0]), helper.make_node("Gemm", ["at", "w"], ["y"])],
           [vi("a", F, [3, 2])], [vi("y", F, [2, 4])], [init("w", np.ones((3, 4), np.float32))])
    return m, lambda o: op_count(o, "Transpose") == 0


def m_notwhere():
    m = mk([helper.make_node("Not", ["c"], ["nc"]), helper.make_node("Where", ["nc", "a", "b"], ["y"])],
           [vi("c", B, [2, 3]), vi("a", F, [2, 3]), vi("b", F, [2, 3])], [vi("y", F, [2, 3])])
    return m, lambda o: op_count(o, "Not") == 0


def _conv_then(op, extra_inits, extra_inputs):
    nodes = [helper.make_node("Conv", ["x", "W", "Bc"], ["c"]), helper.make_node(op, ["c"] + extra_inputs, ["y"])]
    inits = [init("W", np.ones((3, 2, 1, 1), np.float32)), init("Bc", f32(0.1, 0.2, 0.3))] + extra_inits
    return mk(nodes, [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 3, 4, 4])], inits)


def m_convadd():
    m = _conv_then("Add", [init("k", np.ones((3, 1, 1), np.float32))], ["k"])
    return m, lambda o: op_count(o, "Add") == 0


def m_convmul():
    m = _conv_then("Mul", [init("k", np.full((3, 1, 1), 2.0, np.float32))], ["k"])
    return m, lambda o: op_count(o, "Mul") == 0


def m_convbn():
    bn = [init(n, f32(*v)) for n, v in (("s", (1, 2, 3)), ("bb", (0, 1, 0)), ("mu", (0, 0, 1)), ("var", (1, 1, 2)))]
    m = _conv_then("BatchNormalization", bn, ["s", "bb", "mu", "var"])
    return m, lambda o: op_count(o, "BatchNormalization") == 0


def m_pad():
    m = mk([helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
            helper.make_node("Conv", ["p", "W"], ["y"])],
           [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 3, 4, 4])],
           [init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), init("W", np.ones((3, 2, 3, 3), np.float32))])
    return m, lambda o: op_count(o, "Pad") == 0


def m_matmulbn():
    bn = [init(n, f32(*v)) for n, v in (("s", (1, 2, 3, 4)), ("bb", (0, 1, 0, 1)), ("mu", (0, 0, 1, 1)),
                                         ("var", (1, 1, 2, 2)))]
    m = mk([helper.make_node("MatMul", ["x", "W"], ["mm"]),
            helper.make_node("BatchNormalization", ["mm", "s", "bb", "mu", "var"], ["y"], epsilon=1e-5)],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 4])], [init("W", np.ones((3, 4), np.float32))] + bn)
    return m, lambda o: op_count(o, "BatchNormalization") == 0 and op_count(o, "Gemm") == 1


def m_labelencoder():
    le1 = helper.make_node("LabelEncoder", ["x"], ["s"], domain="ai.onnx.ml", keys_int64s=[1, 2],
                           values_strings=["a", "b"], default_string="_")
    le2 = helper.make_node("LabelEncoder", ["s"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                           values_int64s=[10, 20], default_int64=-1)
    m = mk([le1, le2], [vi("x", I64, [3])], [vi("y", I64, [3])], ml=True)
    return m, lambda o: op_count(o, "LabelEncoder") == 1


def _q_dq(src):
    return [helper.make_node("QuantizeLinear", [src, "qs", "qz"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"])]


_QINITS = [init("qs", np.array(0.02, np.float32)), init("qz", np.array(0, np.uint8))]


def m_clipquant():
    # Q range with scale 0.02, zp 0 (uint8) is [0, 5.1] which lies inside Clip [0, 6] -> Clip is redundant.
    m = mk([ABS, helper.make_node("Clip", ["xa", "lo", "hi"], ["c"])] + _q_dq("c"), [vi("x", F, [2, 3])],
           [vi("y", F, [2, 3])],
           [init("lo", np.array(0.0, np.float32)), init("hi", np.array(6.0, np.float32))] + _QINITS)
    return m, lambda o: op_count(o, "Clip") == 0


def m_reluquant():
    m = mk([helper.make_node("Relu", ["x"], ["r"])] + _q_dq("r"), [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], _QINITS)
    return m, lambda o: op_count(o, "Relu") == 0


# ------------------------------------------------------------------------------------------------ the table
# (class, rule name ORT uses, builder, wrong names that must NOT disable it, extra session config)
LEVEL1 = [
    ("EliminateIdentity", "EliminateIdentity", m_identity, ["IdentityElimination"], None),
    ("EliminateSlice", "EliminateSlice", m_slice, ["SliceElimination"], None),
    ("UnsqueezeElimination", "UnsqueezeElimination", m_unsqueeze, ["EliminateUnsqueeze"], None),
    ("EliminateDropout", "EliminateDropout", m_dropout, ["DropoutElimination"], None),
    ("ExpandElimination", "ExpandElimination", m_expand, ["EliminateExpand"], None),
    ("CastElimination", "CastElimination", m_cast, ["EliminateCast", "CastChainElimination"], None),
    ("CastChainElimination", "CastChainElimination", m_cast_chain, ["CastElimination"], CAST_CHAIN),
    ("PreShapeNodeElimination", "PreShapeNodeElimination", m_pre_shape, ["CastElimination"], None),
    ("NoopElimination", "NoopElimination", m_noop, ["EliminateNoop"], None),
    ("DivMulFusion", "DivMulFusion", m_divmul, ["FuseDivMul"], None),
    ("FuseReluClip", "FuseReluClip", m_reluclip, ["ReluClipFusion"], None),
    ("GemmSumFusion", "GemmSumFusion", m_gemmsum, ["FuseGemmSum"], None),
    ("GemmTransposeFusion", "GemmTransposeFusion", m_gemmtranspose, ["FuseGemmTranspose"], None),
    ("NotWhereFusion", "NotWhereFusion", m_notwhere, ["FuseNotWhere"], None),
    ("ConvAddFusion", "ConvAddFusion", m_convadd, ["FuseConvAdd"], None),
    ("ConvMulFusion", "ConvMulFusion", m_convmul, ["FuseConvMul"], None),
    ("ConvBNFusion", "ConvBNFusion", m_convbn, ["ConvBatchNormFusion"], None),
    ("PadFusion", "Pad_Fusion", m_pad, ["PadFusion", "pad_fusion"], None),
    ("MatmulBNFusion", "MatMul_BatchNormalization_Fusion", m_matmulbn, ["MatmulBNFusion", "MatMulBNFusion"], None),
    ("LabelEncoderFusion", "LabelEncoderFusion", m_labelencoder, ["FuseLabelEncoder"], None),
]
LEVEL2 = [
    ("ClipQuantFusion", "ClipQuantRewrite", m_clipquant, ["ClipQuantFusion"], None),
    ("ReluQuantFusion", "ReluQuantRewrite", m_reluquant, ["ReluQuantFusion", "ReluQuantTransformer"], None),
    ("GemmTransposeFusion", "GemmTransposeFusion", m_gemmtranspose, ["FuseGemmTranspose"], None),
]
L1_NAMES = [r[1] for r in LEVEL1]
L2_NAMES = [r[1] for r in LEVEL2]


def trivial():
    return mk([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])])


def other_transformers(level, config=None):
    """Every transformer ORT logs at this level except the rule-based ones (disabled to isolate the rules)."""
    _, mods, _ = run(trivial(), level, config=config)
    return sorted(n for n in mods if not n.endswith("_RuleBasedTransformer"))


FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
    return ok


def probe_rule(lvl, pos, cls, name, builder, wrong, config):
    model, effect = builder()
    same_level = L1_NAMES if lvl == 1 else L2_NAMES
    others = [n for n in same_level if n != name]
    if lvl == 1:
        level, iso = BASIC, OTHERS[BASIC, bool(config)]
    else:  # isolate Level2: also switch Level1's rule transformer off
        level, iso = EXTENDED, OTHERS[EXTENDED, bool(config)] + ["Level1_RuleBasedTransformer"]
    res = {}
    o, mods, _ = run(model, level, iso, config)
    res["base"] = effect(o)
    res["log"] = mods.get(f"Level{lvl}_RuleBasedTransformer", False)
    res["off"] = effect(run(model, level, iso + [name], config)[0])
    res["only"] = effect(run(model, level, iso + others, config)[0])
    res["wrong"] = {w: effect(run(model, level, iso + [w], config)[0]) for w in wrong}
    if lvl == 2 and name not in L1_NAMES:  # must not happen at BASIC (Level2 does not run there)
        res["basic"] = effect(run(model, BASIC, OTHERS[BASIC, False], config)[0])
    if config:  # gated rule: without the config entry it is not registered
        res["noconfig"] = effect(run(model, level, OTHERS[level, False])[0])
    ok = (res["base"] and res["log"] and not res["off"] and res["only"] and all(res["wrong"].values())
          and not res.get("basic", False) and not res.get("noconfig", False))
    check(ok, f"L{lvl} {name}")
    wr = " ".join(f"wrong[{w}]={'fires' if v else 'GONE'}" for w, v in res["wrong"].items())
    extra = ""
    if "basic" in res:
        extra += f" at-BASIC={'fires' if res['basic'] else 'no'}"
    if "noconfig" in res:
        extra += f" without-config={'fires' if res['noconfig'] else 'no'}"
    print(f"L{lvl} #{pos:02d} {cls:24s} rule={name!r:36s} base={'fires' if res['base'] else 'NO'}"
          f" (Level{lvl}_RuleBasedTransformer modified={int(res['log'])})"
          f" off={'gone' if not res['off'] else 'STILL FIRES'} only={'fires' if res['only'] else 'NO'} {wr}{extra}"
          f" -> {'VERIFIED' if ok else 'FAILED'}")


def noop_targets():
    """Which op types NoopElimination handles (x+0, x-0, x*1, x/1)."""
    got = []
    for op, val in (("Add", 0.0), ("Sub", 0.0), ("Mul", 1.0), ("Div", 1.0)):
        m, effect = m_noop(op, val)
        iso = OTHERS[BASIC, False]
        if effect(run(m, BASIC, iso)[0]) and not effect(run(m, BASIC, iso + ["NoopElimination"])[0]):
            got.append(op)
    print(f"NoopElimination target ops confirmed (x+0, x-0, x*1, x/1 removed only while enabled): {got}")
    check(got == ["Add", "Sub", "Mul", "Div"], "NoopElimination targets")


def side_checks():
    """Two behaviours that decide whether a probe model fires at all (not rule names, but needed to build tests)."""
    iso = OTHERS[BASIC, False]
    m, effect = m_unsqueeze(13)
    u13 = effect(run(m, BASIC, iso)[0])
    m, effect = m_unsqueeze(11)
    u11 = effect(run(m, BASIC, iso)[0])
    print(f"UnsqueezeElimination: fires on Unsqueeze-11 (axes attribute)={u11}, on Unsqueeze-13 (axes input)={u13}")
    check(u11 and not u13, "UnsqueezeElimination opset")
    m = mk([helper.make_node("Add", ["x", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
           [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [init("k", np.array(0.0, np.float32))])
    direct = op_count(run(m, BASIC, iso)[0], "Add") == 0
    print(f"NoopElimination on Add(graph_input, 0) with no input edge: removed={direct} "
          f"(CanRemoveNode needs one input edge, or no edge and a single input)")
    check(not direct, "CanRemoveNode edge requirement")


def completeness():
    def present(level, disabled, config=None):
        return f"Level{1 if level == BASIC else 2}_RuleBasedTransformer" in run(trivial(), level, disabled, config)[1]

    l1_plain = [n for n in L1_NAMES if n != "CastChainElimination"]
    r = [present(BASIC, l1_plain), present(BASIC, L1_NAMES, CAST_CHAIN), present(BASIC, l1_plain, CAST_CHAIN)]
    print(f"completeness L1: all {len(l1_plain)} names disabled -> Level1_RuleBasedTransformer registered={r[0]}; "
          f"with cast-chain config, all {len(L1_NAMES)} disabled -> {r[1]}; "
          f"cast-chain config but CastChainElimination left enabled -> {r[2]}")
    check(r == [False, False, True], "completeness L1")
    loo = [n for n in L1_NAMES if not present(BASIC, [m for m in L1_NAMES if m != n], CAST_CHAIN)]
    print(f"  leave-one-out L1 (each single name left enabled re-registers the transformer): "
          f"{'all ' + str(len(L1_NAMES)) + ' ok' if not loo else 'NOT registered for ' + str(loo)}")
    check(not loo, "leave-one-out L1")
    r2 = present(EXTENDED, L2_NAMES)
    loo2 = [n for n in L2_NAMES if not present(EXTENDED, [m for m in L2_NAMES if m != n])]
    print(f"completeness L2: all {len(L2_NAMES)} names disabled -> Level2_RuleBasedTransformer registered={r2}; "
          f"leave-one-out: {'all 3 ok' if not loo2 else loo2}")
    check(not r2 and not loo2, "completeness L2")
    log = run(trivial(), ALL)[2]
    names = sorted(set(re.findall(r"(\w+_RuleBasedTransformer)", log)))
    print(f"rule-based transformers logged at ORT_ENABLE_ALL: {names}")
    check(names == ["Level1_RuleBasedTransformer", "Level2_RuleBasedTransformer"], "no Level3 rule transformer")


def binary_order():
    """Rule-name literals referenced by GenerateRewriteRules(), in code-address order (static check)."""
    objdump = shutil.which("objdump")
    so = glob.glob(os.path.join(os.path.dirname(ort.__file__), "capi", "onnxruntime_pybind11_state*.so"))
    if not objdump or not so:
        print("binary order: skipped (objdump or pybind .so not found)")
        return
    with open(so[0], "rb") as fh:
        data = fh.read()
    names = set(L1_NAMES + L2_NAMES)
    addr = {}  # virtual address of every NUL-delimited copy of each name in .rodata
    sec = subprocess.run(["readelf", "-SW", so[0]], check=True, capture_output=True, text=True).stdout
    m = re.search(r"\.rodata\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", sec)
    vaddr, off, size = (int(x, 16) for x in m.groups())
    for n in names:
        for hit in re.finditer(b"\\x00" + re.escape(n.encode()) + b"\\x00", data[off:off + size]):
            addr[vaddr + hit.start() + 1] = n
    refs, jumps = [], []
    proc = subprocess.Popen([objdump, "-d", "--no-show-raw-insn", so[0]], stdout=subprocess.PIPE, text=True)
    lea = re.compile(r"^\s*([0-9a-f]+):\s+lea\s+\S+\(%rip\),%\w+\s+# ([0-9a-f]+)")
    jmp = re.compile(r"^\s*([0-9a-f]+):\s+(j[a-z]+)\s+([0-9a-f]+) ")
    for line in proc.stdout:
        if "lea" in line and "(%rip)" in line:
            mm = lea.match(line)
            if mm and int(mm.group(2), 16) in addr:
                refs.append((int(mm.group(1), 16), addr[int(mm.group(2), 16)]))
        elif "\tj" in line:
            mm = jmp.match(line)
            if mm:
                jumps.append((int(mm.group(1), 16), mm.group(2), int(mm.group(3), 16)))
    proc.wait()
    refs.sort()
    # longest run of references that are close together = GenerateRewriteRules
    best, cur = [], []
    for r in refs:
        if cur and r[0] - cur[-1][0] > 0x400:
            best, cur = max(best, cur, key=len), []
        cur.append(r)
    best = max(best, cur, key=len)
    seq = [n for _, n in best]
    print(f"binary order (GenerateRewriteRules, {best[0][0]:#x}..{best[-1][0]:#x}): {seq}")
    # CastChainElimination sits in an out-of-line block: a conditional jump placed after the CastElimination push
    # goes there, and the block jumps back before the PreShapeNodeElimination push.
    cast = next(a for a, n in best if n == "CastElimination")
    pre = next(a for a, n in best if n == "PreShapeNodeElimination")
    chain = [a for a, n in refs if n == "CastChainElimination" and (a, n) not in best]
    placed = False
    for c in chain:
        into = [j for j in jumps if cast < j[0] < pre and j[1] != "jmp" and c - 0x40 <= j[2] <= c]
        back = [j for j in jumps if c < j[0] < c + 0x100 and cast < j[2] < pre]
        if into and back:
            placed = True
            print(f"  CastChainElimination at {c:#x}: reached by `{into[0][1]}` at {into[0][0]:#x} (between the "
                  f"CastElimination and PreShapeNodeElimination pushes), returns by `{back[-1][1]}` at "
                  f"{back[-1][0]:#x} to {back[-1][2]:#x} (before the PreShapeNodeElimination push)")
    check(placed, "CastChainElimination between CastElimination and PreShapeNodeElimination")
    expect = [n for n in L1_NAMES if n != "CastChainElimination"] + L2_NAMES
    check(seq == expect, "binary order")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    OTHERS = {(lv, cfg): other_transformers(lv, CAST_CHAIN if cfg else None)
              for lv in (BASIC, EXTENDED) for cfg in (False, True)}
    print(f"isolation: disabling {len(OTHERS[BASIC, False])} other L1 transformers at BASIC, "
          f"{len(OTHERS[EXTENDED, False])} other L1+L2 transformers at EXTENDED")
    for lvl, table in ((1, LEVEL1), (2, LEVEL2)):
        for pos, (cls, name, builder, wrong, config) in enumerate(table, 1):
            if not args or any(a.lower() in (cls + name).lower() for a in args):
                probe_rule(lvl, pos, cls, name, builder, wrong, config)
    if not args:
        noop_targets()
        side_checks()
        completeness()
        if "--no-binary-order" not in sys.argv:
            binary_order()
    print("ALL CHECKS PASSED" if not FAILS else f"FAILED: {FAILS}")
    sys.exit(1 if FAILS else 0)
