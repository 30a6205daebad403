"""Mutated-file fuzzing of the command line: bad input must never crash qdqopt (issue #12, item 4).

Each *mutant* is a model file derived from a seed model (a corpus file or a fixture) by one fault:

* byte level: ``bitflip`` (1 to 8 random bits), ``truncate``, ``insert`` (random bytes), ``delete`` (a byte range);
* protobuf level (the seed parsed, changed, serialized again): ``dangling_input`` (a node reads a value nobody
  makes), ``cycle`` (a node reads a value made downstream of it), ``attr_wrong_type`` (an attribute's type field or
  payload of another type), ``negative_dim`` (a graph input or value_info dim below zero), ``duplicate_output`` (two
  nodes, or a node and an initializer, make one value; or a graph output listed twice), ``short_initializer``
  (``raw_data`` or typed data shorter than the dims say), ``external_outside`` (an initializer's external data in
  a file outside the model's folder, absolute or ``..``), ``non_utf8`` (a node, value, graph or attribute string
  that is not valid UTF-8; names are patched in the serialized bytes, since protobuf refuses such strings).

For each mutant the command line (``optimize``, ``diff``, ``trace`` or ``explain``, at a random level) runs in its
own process with a timeout. The verdict (:func:`judge`) is ``ok`` when the run ended in a result (exit 0 or 1) or in
a one-line error (exit 2, one ``qdqopt: error:`` line on stderr besides warnings), and a crash class otherwise:
``traceback``, ``internal`` (exit 3), ``signal`` (an abort or a segfault), ``exit`` (another code), ``hang`` (the
timeout), ``multiline`` (an error of several lines), ``partial_output`` (``optimize`` failed but left a file, or a
temporary file, behind; or wrote a file ONNX cannot read), ``mode`` (the output file ignores the umask),
``input_changed`` (the input file's or its folder's bytes changed).

The default runner forks a process that has already imported qdqopt and onnxruntime (their import takes seconds,
the run of a mutant often milliseconds) and calls :func:`qdqopt.cli.main` in the child, with the child's file
descriptors 1 and 2 sent to files: an abort or a signal in ORT's C++ ends only that child, exactly as it would end a
``qdqopt`` process. ``exec_cli=True`` runs ``python -m qdqopt.cli`` instead (slower; the same verdicts).

``python -m qdqopt.mutants --count 5000 --seed 1`` runs a seeded campaign over ``../shared/corpus`` and every
fixture and prints the counts per verdict, mutation and command (``--jobs 2`` in parallel; ``--keep DIR`` saves
each failing mutant).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import onnx

__all__ = [
    "BYTE_MUTATIONS",
    "COMMANDS",
    "MUTATIONS",
    "PROTO_MUTATIONS",
    "Mutant",
    "Outcome",
    "judge",
    "mutate",
    "run_cli",
    "seed_models",
]

COMMANDS = ("optimize", "diff", "trace", "explain")
LEVELS = ("disable_all", "basic", "extended", "layout", "all")
UMASK = 0o022
OUTSIDE = "outside.bin"  # written beside (not in) the mutant's folder, so that a read outside it succeeds


@dataclasses.dataclass
class Mutant:
    """One mutated model: the bytes of ``model.onnx`` and any other files of its folder (external data)."""

    kind: str
    seed_name: str
    data: bytes
    detail: str = ""
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Outcome:
    """What one command did with one mutant."""

    verdict: str  # "ok" or a crash class (see the module doc)
    command: list[str]
    returncode: int | None
    stderr: str
    seconds: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


# ------------------------------------------------------------------------------------------------------ seeds
def seed_models(corpus: Path | None = None, *, fixtures: bool = True) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` of every corpus model (read in place, never written) and every fixture: the committed
    ``fixtures/models`` files and each hand-built case serialized."""
    seeds: list[tuple[str, bytes]] = []
    if corpus is not None and corpus.is_dir():
        for path in sorted(corpus.rglob("*.onnx")):
            seeds.append((f"corpus/{path.relative_to(corpus)}", path.read_bytes()))
    if fixtures:
        root = Path(__file__).resolve().parents[1] / "fixtures"
        for path in sorted((root / "models").glob("*.onnx")):
            seeds.append((f"fixtures/{path.name}", path.read_bytes()))
        cases: Sequence[Any] = ()
        with contextlib.suppress(ImportError):  # an installed qdqopt has not the repository's fixtures
            from fixtures.handbuilt import HANDBUILT

            cases = HANDBUILT
        for case in cases:
            with contextlib.suppress(Exception):
                seeds.append((f"handbuilt/{case.name}", case.build().SerializeToString()))
    return seeds


# -------------------------------------------------------------------------------------------------- mutations
def _bitflip(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    flips = rng.randint(1, 8)
    for _ in range(flips):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf), f"{flips} bits"


def _truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(data))
    return data[:at], f"at {at} of {len(data)}"


def _insert(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return data[:at] + extra + data[at:], f"{len(extra)} bytes at {at}"


def _delete(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(data))
    n = rng.randint(1, 16)
    return data[:at] + data[at + n :], f"{n} bytes at {at}"


BYTE_MUTATIONS: dict[str, Callable[[bytes, random.Random], tuple[bytes, str]]] = {
    "bitflip": _bitflip,
    "truncate": _truncate,
    "insert": _insert,
    "delete": _delete,
}


class _Skip(Exception):
    """The seed has nothing this mutation can change (no node, no initializer ...)."""


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _pick_graph(model: onnx.ModelProto, rng: random.Random) -> onnx.GraphProto:
    graphs = [g for g in _graphs(model.graph) if g.node]
    if not graphs:
        raise _Skip
    return graphs[0] if rng.random() < 0.7 else rng.choice(graphs)


def _dangling_input(model: onnx.ModelProto, rng: random.Random) -> str:
    graph = _pick_graph(model, rng)
    node = rng.choice(list(graph.node))
    if not node.input:
        node.input.append("qdqopt_fuzz_nowhere")
        return f"{node.name!r} gets an input nobody makes"
    i = rng.randrange(len(node.input))
    node.input[i] = f"qdqopt_fuzz_nowhere_{i}"
    return f"{node.name!r} input {i} made by nobody"


def _cycle(model: onnx.ModelProto, rng: random.Random) -> str:
    graph = _pick_graph(model, rng)
    nodes = list(graph.node)
    if len(nodes) < 2:
        node = nodes[0]
        if not node.input or not node.output:
            raise _Skip
        node.input[0] = node.output[0]
        return f"{node.name!r} reads its own output"
    i, j = sorted(rng.sample(range(len(nodes)), 2))
    early, late = nodes[i], nodes[j]
    if not early.input or not late.output:
        raise _Skip
    early.input[rng.randrange(len(early.input))] = late.output[0]
    return f"{early.name!r} reads {late.output[0]!r}, made after it"


def _attr_wrong_type(model: onnx.ModelProto, rng: random.Random) -> str:
    graph = _pick_graph(model, rng)
    with_attrs = [n for n in graph.node if n.attribute]
    node = rng.choice(with_attrs) if with_attrs else rng.choice(list(graph.node))
    kinds = onnx.AttributeProto
    if not node.attribute:
        node.attribute.append(onnx.helper.make_attribute("axis", "not an int"))
        return f"{node.name!r} gets a string 'axis'"
    attr = rng.choice(list(node.attribute))
    how = rng.randrange(4)
    if how == 0:  # the type field says one thing, the payload another
        attr.type = rng.choice(
            [
                t
                for t in (kinds.INT, kinds.FLOAT, kinds.STRING, kinds.INTS, kinds.FLOATS, kinds.TENSOR)
                if t != attr.type
            ]
        )
        return f"{node.name!r}.{attr.name}: type field set to {kinds.AttributeType.Name(attr.type)}"
    name = attr.name
    node.attribute.remove(attr)
    value: object = rng.choice(["a string", 1.5, 7, [1.5, 2.5], [3, 4], ["x", "y"], b"\xff\xfe"])
    node.attribute.append(onnx.helper.make_attribute(name, value))
    if how == 3:  # and an unset type
        node.attribute[-1].type = kinds.UNDEFINED
    return f"{node.name!r}.{name} replaced by {value!r}"


def _negative_dim(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    inits = {t.name for t in g.initializer}
    infos = [v for v in g.input if v.name not in inits] or list(g.input)
    if rng.random() < 0.3:
        infos = list(g.value_info) + list(g.output) or infos
    shaped = [v for v in infos if v.type.tensor_type.shape.dim]
    if not shaped:
        raise _Skip
    vi = rng.choice(shaped)
    dims = vi.type.tensor_type.shape.dim
    d = dims[rng.randrange(len(dims))]
    value = rng.choice([-1, -2, -3, -(2**31), -(2**62)])
    d.dim_value = value
    return f"{vi.name!r} dim {value}"


def _duplicate_output(model: onnx.ModelProto, rng: random.Random) -> str:
    graph = _pick_graph(model, rng)
    nodes = [n for n in graph.node if n.output]
    if not nodes:
        raise _Skip
    how = rng.randrange(3)
    if how == 0 and len(nodes) >= 2:
        a, b = rng.sample(nodes, 2)
        b.output[0] = a.output[0]
        return f"{a.name!r} and {b.name!r} both make {a.output[0]!r}"
    if how == 1 and graph.initializer:
        node = rng.choice(nodes)
        node.output[0] = rng.choice(list(graph.initializer)).name
        return f"{node.name!r} makes initializer {node.output[0]!r}"
    if graph.output:
        graph.output.append(graph.output[rng.randrange(len(graph.output))])
        return f"graph output {graph.output[-1].name!r} listed twice"
    raise _Skip


def _short_initializer(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = [t for g in _graphs(model.graph) for t in g.initializer]
    if not inits:
        raise _Skip
    t = rng.choice(inits)
    if t.raw_data:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data))]
        return f"{t.name!r} raw_data cut to {len(t.raw_data)} bytes"
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        values = getattr(t, field)
        if len(values):
            del values[rng.randrange(len(values)) :]
            return f"{t.name!r} {field} cut to {len(values)}"
    t.dims.append(rng.choice([2, 3, 1 << 20]))
    return f"{t.name!r} gets an extra dim"


def _external_outside(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = list(model.graph.initializer)
    if not inits:
        raise _Skip
    t = rng.choice(inits)
    nbytes = len(t.raw_data) or 4
    t.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        t.ClearField(field)
    location = rng.choice([f"../{OUTSIDE}", f"sub/../../{OUTSIDE}", "/etc/hostname", "/dev/zero", "missing.bin"])
    t.data_location = onnx.TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return f"{t.name!r} external data at {location}"


_PLACEHOLDER = "QDQOPTFUZZ"


def _non_utf8_attr(model: onnx.ModelProto, rng: random.Random) -> str:
    graph = _pick_graph(model, rng)
    node = rng.choice(list(graph.node))
    strings = [a for a in node.attribute if a.type == onnx.AttributeProto.STRING]
    bad = rng.choice([b"\xff\xfe", b"caf\xe9", b"\xc3(", b"\xed\xa0\x80"])
    if strings:
        strings[0].s = bad
        return f"{node.name!r}.{strings[0].name} = {bad!r}"
    node.attribute.append(onnx.helper.make_attribute("mode", bad))
    return f"{node.name!r} gets mode={bad!r}"


def _non_utf8_name(model: onnx.ModelProto, rng: random.Random) -> tuple[str, str]:
    """Rename something to a placeholder of the bad name's length; the caller patches the serialized bytes."""
    graph = _pick_graph(model, rng)
    token = _PLACEHOLDER
    what = rng.randrange(4)
    if what == 0:
        node = rng.choice(list(graph.node))
        node.name = token
        return token, f"node {node.op_type} name"
    if what == 1:
        graph.name = token
        return token, "graph name"
    if what == 2:
        node = rng.choice(list(graph.node))
        node.doc_string = token
        return token, "node doc_string"
    # a value name, everywhere it is used
    values = [v for n in graph.node for v in n.output if v]
    if not values:
        raise _Skip
    old = rng.choice(values)
    for g in _graphs(model.graph):
        for n in g.node:
            n.input[:] = [token if v == old else v for v in n.input]
            n.output[:] = [token if v == old else v for v in n.output]
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.name == old:
                vi.name = token
    return token, f"value {old!r}"


PROTO_MUTATIONS: dict[str, Callable[[onnx.ModelProto, random.Random], str]] = {
    "dangling_input": _dangling_input,
    "cycle": _cycle,
    "attr_wrong_type": _attr_wrong_type,
    "negative_dim": _negative_dim,
    "duplicate_output": _duplicate_output,
    "short_initializer": _short_initializer,
    "external_outside": _external_outside,
    "non_utf8": _non_utf8_attr,  # and names, below
}

MUTATIONS = (*BYTE_MUTATIONS, *PROTO_MUTATIONS)


def mutate(seed_name: str, data: bytes, kind: str, rng: random.Random) -> Mutant | None:
    """One mutant of ``data`` by ``kind`` (None when the seed offers nothing to change, or cannot be parsed)."""
    if kind in BYTE_MUTATIONS:
        if not data:
            return None
        out, detail = BYTE_MUTATIONS[kind](data, rng)
        return Mutant(kind, seed_name, out, detail)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        return None
    files: dict[str, bytes] = {}
    try:
        if kind == "non_utf8" and rng.random() < 0.5:
            token, detail = _non_utf8_name(model, rng)
            bad = rng.choice([b"\xff", b"\xe9", b"\xc3(", b"\x80"])
            bad = (bad * len(token))[: len(token)]
            out = model.SerializeToString().replace(token.encode(), bad)
            return Mutant(kind, seed_name, out, f"{detail} = {bad!r}")
        detail = PROTO_MUTATIONS[kind](model, rng)
    except _Skip:
        return None
    if kind == "external_outside":
        files[f"../{OUTSIDE}"] = bytes(rng.randrange(256) for _ in range(64))
    return Mutant(kind, seed_name, model.SerializeToString(), detail, files)


# ------------------------------------------------------------------------------------------------------ running
def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _argv(command: str, model: Path, out: Path, level: str) -> list[str]:
    if command == "optimize":
        return ["optimize", str(model), "-o", str(out), "--level", level]
    if command == "diff":
        return ["diff", str(model), "--level", level, "--max-lines", "2"]
    if command == "trace":
        return ["trace", str(model), "--level", level]
    return ["explain", str(model), "--level", level if level in ("extended", "layout", "all") else "extended"]


def _run_forked(argv: list[str], timeout: float, folder: Path, scratch: str) -> tuple[int | None, str, bool]:
    """``qdqopt ARGV`` in a forked child (stdout, stderr to files; its temporary files in ``scratch``, which the
    caller removes: a child killed or crashed leaves them); (exit status or -signal, stderr, timed out)."""
    out_path, err_path = folder / "stdout.txt", folder / "stderr.txt"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: the CLI as a process of its own
        status = 3
        tempfile.tempdir = scratch
        try:
            import faulthandler

            faulthandler.disable()  # a crash is this run's verdict, not a dump on the parent's terminal
            os.setpgid(0, 0)
            os.umask(UMASK)
            fd_out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fd_err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            from qdqopt.cli import main

            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            import traceback

            traceback.print_exc()
            status = 3
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(status)
    deadline = time.monotonic() + timeout
    hung = False
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            hung = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, raw = os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(raw)
    err = err_path.read_text("utf-8", "replace") if err_path.exists() else ""
    return code, err, hung


def _run_exec(argv: list[str], timeout: float, scratch: str) -> tuple[int | None, str, bool]:
    """:func:`_run_forked` with ``qdqopt ARGV`` run as a new interpreter."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    env["TMPDIR"] = scratch
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import os, sys; os.umask({UMASK}); from qdqopt.cli import main; sys.exit(main())",
                *argv,
            ],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, err, True
    return proc.returncode, proc.stderr, False


def judge(returncode: int | None, stderr: str, hung: bool) -> tuple[str, str]:
    """The verdict on one run from its exit status and stderr (the output-file checks are :func:`run_cli`'s)."""
    if hung:
        return "hang", ""
    if "Traceback (most recent call last)" in stderr:
        return "traceback", stderr.strip().splitlines()[-1][:200]
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("qdqopt: warning:")]
    if returncode is None or returncode < 0:
        return "signal", f"signal {-(returncode or 0)}: {(lines or [''])[-1][:200]}"
    if returncode == 3 or any("internal error" in line for line in lines):
        return "internal", (lines or [""])[-1][:200]
    if returncode == 2:
        if len(lines) != 1 or not lines[0].startswith("qdqopt: error:"):
            return "multiline", " | ".join(lines)[:300]
        return "ok", lines[0][:200]
    if returncode in (0, 1):
        return "ok", ""
    return "exit", f"exit {returncode}: {(lines or [''])[-1][:200]}"


def run_cli(mutant: Mutant, command: str, level: str, *, timeout: float = 120.0, exec_cli: bool = False) -> Outcome:
    """Write the mutant into a fresh folder, run ``qdqopt COMMAND`` on it and judge the run."""
    with (
        tempfile.TemporaryDirectory(prefix="qdqopt-mutant-") as tmp,
        tempfile.TemporaryDirectory(prefix="qdqopt-mutant-scratch-") as scratch,
    ):
        root = Path(tmp)
        folder = root / "in"
        sub = folder / "sub"  # so that "sub/../x" resolves inside the folder's parent
        sub.mkdir(parents=True)
        model = folder / "model.onnx"
        model.write_bytes(mutant.data)
        for rel, blob in mutant.files.items():
            (folder / rel).resolve().write_bytes(blob)
        outdir = root / "out"
        outdir.mkdir()
        out = outdir / "optimized.onnx"
        before = _digest(root / "in"), _digest(root) if mutant.files else {}
        argv = _argv(command, model, out, level)
        start = time.monotonic()
        if exec_cli:
            code, err, hung = _run_exec(argv, timeout, scratch)
        else:
            code, err, hung = _run_forked(argv, timeout, root, scratch)
        seconds = time.monotonic() - start
        verdict, note = judge(code, err, hung)
        if verdict == "ok" and command == "optimize":
            leftovers = sorted(p.name for p in outdir.iterdir() if p.name != out.name)
            if leftovers:
                verdict, note = "partial_output", f"left behind {leftovers}"
            elif code == 0:
                try:
                    onnx.load(str(out), load_external_data=False)
                except Exception as exc:
                    verdict, note = "partial_output", f"unreadable output: {exc}"[:200]
                else:
                    mode = stat.S_IMODE(out.stat().st_mode)
                    if mode != 0o666 & ~UMASK:
                        verdict, note = "mode", f"output mode {mode:o}"
            elif out.exists():
                verdict, note = "partial_output", f"exit {code} but {out.name} written"
        after = _digest(root / "in"), _digest(root) if mutant.files else {}
        changed = [k for k in before[0] if before[0].get(k) != after[0].get(k)]
        if changed and verdict == "ok":
            verdict, note = "input_changed", f"changed: {changed}"
        return Outcome(verdict, ["qdqopt", *argv], code, err, seconds, note)


# ------------------------------------------------------------------------------------------------------ campaign
@dataclasses.dataclass
class Case:
    index: int
    seed_name: str
    kind: str
    command: str
    level: str


def plan(seeds: Sequence[tuple[str, bytes]], count: int, seed: int) -> list[Case]:
    """``count`` cases, spread round-robin over the seeds (shuffled), mutation kinds and commands."""
    rng = random.Random(seed)
    order = list(range(len(seeds)))
    rng.shuffle(order)
    cases = []
    for i in range(count):
        name = seeds[order[i % len(order)]][0]
        kind = MUTATIONS[(i // len(order) + i) % len(MUTATIONS)] if rng.random() < 0.5 else rng.choice(MUTATIONS)
        cases.append(Case(i, name, kind, rng.choice(COMMANDS), rng.choice(LEVELS)))
    return cases


def run_case(
    case: Case, seeds: dict[str, bytes], seed: int, *, timeout: float, exec_cli: bool = False
) -> tuple[Mutant | None, Outcome | None]:
    rng = random.Random(f"{seed}:{case.index}")
    mutant = mutate(case.seed_name, seeds[case.seed_name], case.kind, rng)
    if mutant is None:  # nothing to change: fall back to a byte mutation, so every case runs
        kind = rng.choice(list(BYTE_MUTATIONS))
        mutant = mutate(case.seed_name, seeds[case.seed_name], kind, rng)
    if mutant is None:
        return None, None
    return mutant, run_cli(mutant, case.command, case.level, timeout=timeout, exec_cli=exec_cli)


def campaign(
    count: int,
    seed: int,
    *,
    corpus: Path | None,
    timeout: float = 120.0,
    jobs: int = 1,
    shard: tuple[int, int] = (0, 1),
    keep: Path | None = None,
    exec_cli: bool = False,
    progress: bool = True,
) -> list[tuple[Case, Mutant | None, Outcome | None]]:
    seeds = seed_models(corpus)
    by_name = dict(seeds)
    cases = [c for c in plan(seeds, count, seed) if c.index % shard[1] == shard[0]]
    if jobs > 1:  # split the cases over forked workers, each writing its results to a file
        return _parallel(cases, by_name, seed, timeout=timeout, jobs=jobs, keep=keep, exec_cli=exec_cli)
    results = []
    start = time.monotonic()
    for n, case in enumerate(cases, 1):
        mutant, outcome = run_case(case, by_name, seed, timeout=timeout, exec_cli=exec_cli)
        results.append((case, mutant, outcome))
        if outcome is not None and not outcome.ok:
            _report_failure(case, mutant, outcome, keep)
        if progress and (n % 50 == 0 or n == len(cases)):
            rate = n / max(time.monotonic() - start, 1e-9)
            print(f"[{n}/{len(cases)}] {rate:.1f} cases/s", file=sys.stderr, flush=True)
    return results


def _parallel(
    cases: list[Case],
    seeds: dict[str, bytes],
    seed: int,
    *,
    timeout: float,
    jobs: int,
    keep: Path | None,
    exec_cli: bool,
) -> list[tuple[Case, Mutant | None, Outcome | None]]:
    import pickle

    with tempfile.TemporaryDirectory(prefix="qdqopt-mutants-") as tmp:
        pids = []
        for j in range(jobs):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    mine = cases[j::jobs]
                    out = []
                    for n, case in enumerate(mine, 1):
                        mutant, outcome = run_case(case, seeds, seed, timeout=timeout, exec_cli=exec_cli)
                        if outcome is not None and not outcome.ok:
                            _report_failure(case, mutant, outcome, keep)
                        out.append((case, mutant if outcome is not None and not outcome.ok else None, outcome))
                        if n % 50 == 0:
                            print(f"[worker {j}] {n}/{len(mine)}", file=sys.stderr, flush=True)
                    Path(tmp, f"{j}.pkl").write_bytes(pickle.dumps(out))
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        results: list[tuple[Case, Mutant | None, Outcome | None]] = []
        for j in range(jobs):
            path = Path(tmp, f"{j}.pkl")
            if path.exists():
                results.extend(pickle.loads(path.read_bytes()))
        return sorted(results, key=lambda r: r[0].index)


def _report_failure(case: Case, mutant: Mutant | None, outcome: Outcome, keep: Path | None) -> None:
    print(
        f"FAIL #{case.index} {outcome.verdict}: {case.seed_name} {case.kind}"
        f" ({mutant.detail if mutant else ''}) {' '.join(outcome.command[:2])} --level {case.level}: {outcome.note}",
        file=sys.stderr,
        flush=True,
    )
    if keep is not None and mutant is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{case.index:05d}_{outcome.verdict}_{case.kind}.onnx").write_bytes(mutant.data)


def summary(results: Sequence[tuple[Case, Mutant | None, Outcome | None]]) -> list[str]:
    ran = [(c, o) for c, _, o in results if o is not None]
    verdicts = collections.Counter(o.verdict for _, o in ran)
    exits = collections.Counter(o.returncode for _, o in ran)
    lines = [f"{len(ran)} mutants run ({len(results) - len(ran)} skipped: nothing to mutate)"]
    lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    lines.append("exit codes: " + ", ".join(f"{k} {v}" for k, v in sorted(exits.items(), key=lambda kv: str(kv[0]))))
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for c, o in ran:
        by_kind[c.kind]["ok" if o.ok else "fail"] += 1
        by_kind[c.kind][f"exit{o.returncode}"] += 1
    lines.append(f"  {'mutation':<18} {'runs':>5} {'fail':>5} {'exit0':>6} {'exit1':>6} {'exit2':>6}")
    for kind in MUTATIONS:
        k = by_kind.get(kind, collections.Counter())
        runs = k["ok"] + k["fail"]
        lines.append(f"  {kind:<18} {runs:>5} {k['fail']:>5} {k['exit0']:>6} {k['exit1']:>6} {k['exit2']:>6}")
    commands = collections.Counter(c.command for c, _ in ran)
    lines.append("commands: " + ", ".join(f"{k} {v}" for k, v in sorted(commands.items())))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qdqopt.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "corpus")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--shard", default="0/1", help="I/N: run only the cases whose index is I modulo N")
    parser.add_argument("--keep", type=Path, help="save every failing mutant in this folder")
    parser.add_argument("--exec", dest="exec_cli", action="store_true", help="python -m qdqopt.cli, not a fork")
    args = parser.parse_args(argv)
    import onnxruntime  # noqa: F401  (imported once, before the forks)

    import qdqopt.cli  # noqa: F401

    i, n = (int(x) for x in args.shard.split("/"))
    start = time.monotonic()
    results = campaign(
        args.count,
        args.seed,
        corpus=args.corpus,
        timeout=args.timeout,
        jobs=args.jobs,
        shard=(i, n),
        keep=args.keep,
        exec_cli=args.exec_cli,
    )
    print(f"python -m qdqopt.mutants --count {args.count} --seed {args.seed} (shard {args.shard})")
    print("\n".join(summary(results)))
    print(f"took {time.monotonic() - start:.0f} s")
    return 0 if all(o is None or o.ok for _, _, o in results) else 1


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
