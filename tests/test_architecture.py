"""The layout's rules, checked by walking qdqopt's imports (``ast``, nothing is imported to check them).

An *edge* is an explicit import of a qdqopt module: ``import qdqopt.x``, ``from qdqopt.x import name`` (to
``qdqopt.x``), or ``from qdqopt.x import y`` where ``qdqopt.x.y`` is a module (to ``qdqopt.x.y``). The parent packages
Python initialises on the way are not edges. Edges are of three kinds:

* *load* edges run when the module is imported (module level, class bodies, ``try``/``if`` blocks);
* *deferred* edges run when a function does (an import inside a ``def``);
* *type-only* edges sit under ``if TYPE_CHECKING:`` and never run; they are left out.

Rules: no circle of load edges; no circle at all once the few deferred edges listed in :data:`KNOWN_DEFERRED` (each
with its reason) are set aside; ``networkx`` only inside ``qdqopt/graph/``; a pass never imports what runs, lists or
compares passes (the CLI, the reference runner, the registry...); the target and the levels stay at the bottom.
See ``docs/architecture.md``.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qdqopt"

#: Deferred edges that close a circle, and why each is tolerated. The test fails if one disappears (drop it here)
#: or if a new circle appears (break it, or argue for it here).
KNOWN_DEFERRED: dict[tuple[str, str], str] = {
    ("qdqopt.levels", "qdqopt.registry"): "compatibility alias: qdqopt.levels.PASSES & co. resolve on first use",
    ("qdqopt.passes", "qdqopt.registry"): "compatibility alias: qdqopt.passes.TRANSFORMERS & co. resolve on first use",
    ("qdqopt.graph.model", "qdqopt.partition"): "graph core debt: loading a model inlines functions with the "
    "partitioner's kernel lookup (it should move below the graph or be passed in)",
    ("qdqopt.graph.function_inlining", "qdqopt.graph.model"): "graph core debt: function inlining builds subgraphs "
    "with the model loader's helpers (they should move to a module both use)",
}

#: Modules a pass (``qdqopt.passes.*``) must never import: what runs, lists, compares or registers passes.
ABOVE_PASSES = frozenset(
    {
        "qdqopt.cli",
        "qdqopt.reference",
        "qdqopt.compare",
        "qdqopt.diff",
        "qdqopt.api",
        "qdqopt.manager",
        "qdqopt.registry",
        "qdqopt.plugins",
        "qdqopt.explain",
        "qdqopt.levels",
    }
)

#: The layers, bottom first (docs/architecture.md draws them): a module imports only from its own layer or below.
#: A module is in the layer of the longest prefix listed; a new top-level module must be given a layer here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("qdqopt.errors", "qdqopt.config", "qdqopt.target", "qdqopt.levels", "qdqopt.events"),
    ("qdqopt.graph",),
    ("qdqopt.partition", "qdqopt.kernels", "qdqopt.evaluate"),
    ("qdqopt.passes",),
    ("qdqopt.registry",),
    ("qdqopt.manager", "qdqopt.plugins"),
    ("qdqopt.api", "qdqopt.reference", "qdqopt.diff", "qdqopt"),  # the package itself re-exports the API
    ("qdqopt.compare", "qdqopt.explain"),
    ("qdqopt.dumps", "qdqopt.jsonout", "qdqopt.overlay", "qdqopt.bisect"),  # stop and dump, --json, view, bisect
    ("qdqopt.fuzz",),  # qdqopt fuzz: generated graphs through ORT and qdqopt in child processes
    ("qdqopt.report",),  # the HTML report: reads runs, comparisons and explain
    ("qdqopt.cli",),
    ("qdqopt.mutants",),  # runs the command line on mutated files
)

#: What the bottom layers may import from qdqopt, at all.
BOTTOM = {
    "qdqopt.errors": set(),
    "qdqopt.config": {"qdqopt.errors"},
    "qdqopt.target": {"qdqopt.config", "qdqopt.errors"},
    "qdqopt.levels": {"qdqopt.errors", "qdqopt.registry"},  # the registry only through the compatibility alias
}


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # "load" or "deferred"
    line: int


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in MODULES else base


def _walk(module: str, path: Path) -> Iterator[tuple[str, str, int]]:
    """(imported module, kind, line) for every import in ``path``, qdqopt's or not."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, kind: str) -> Iterator[tuple[str, str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    yield from visit(other, kind)
                continue
            here = "deferred" if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else kind
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(module, is_package, child):
                    yield target, kind, child.lineno
            yield from visit(child, here)

    yield from visit(tree, "load")


def _edges() -> list[Edge]:
    out: list[Edge] = []
    for module, path in MODULES.items():
        for imported, kind, line in _walk(module, path):
            if not imported.startswith("qdqopt"):
                continue
            target = imported
            while target not in MODULES:  # qdqopt.x.name -> qdqopt.x
                target = target.rpartition(".")[0]
            if target != module:
                out.append(Edge(module, target, kind, line))
    return out


EDGES = _edges()


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.src, set()).add(edge.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _explain(cycle: list[str], edges: list[Edge]) -> str:
    inside = [e for e in edges if e.src in cycle and e.dst in cycle]
    return "; ".join(f"{e.src}:{e.line} -> {e.dst} ({e.kind})" for e in inside)


def test_the_walk_sees_the_package() -> None:
    assert {"qdqopt.registry", "qdqopt.levels", "qdqopt.manager", "qdqopt.passes.base"} <= set(MODULES)
    assert any(e.src == "qdqopt.registry" and e.dst == "qdqopt.passes.constant_folding" for e in EDGES)


def test_the_checks_catch_the_old_circle() -> None:
    """levels -> target -> reference -> levels (the circle issue 10 found) is caught, deferred or not."""
    old = [
        Edge("qdqopt.levels", "qdqopt.target", "load", 1),
        Edge("qdqopt.target", "qdqopt.reference", "deferred", 2),
        Edge("qdqopt.reference", "qdqopt.levels", "load", 3),
        Edge("qdqopt.reference", "qdqopt.errors", "load", 4),
    ]
    assert _cycles(old) == [["qdqopt.levels", "qdqopt.reference", "qdqopt.target"]]
    assert _cycles([e for e in old if e.kind == "load"]) == []


def test_no_import_circle_at_load() -> None:
    load = [e for e in EDGES if e.kind == "load"]
    cycles = _cycles(load)
    assert not cycles, "import circles: " + " | ".join(_explain(c, load) for c in cycles)


def test_no_import_circle_but_the_known_deferred_ones() -> None:
    edges = [e for e in EDGES if (e.src, e.dst) not in KNOWN_DEFERRED or e.kind != "deferred"]
    cycles = _cycles(edges)
    assert not cycles, "import circles (deferred imports count): " + " | ".join(_explain(c, edges) for c in cycles)


@pytest.mark.parametrize(("src", "dst"), sorted(KNOWN_DEFERRED))
def test_known_deferred_edges_still_exist(src: str, dst: str) -> None:
    """An entry of KNOWN_DEFERRED whose import is gone is dropped from the list, so that it stays a true account."""
    assert any(e.src == src and e.dst == dst and e.kind == "deferred" for e in EDGES), (src, dst)


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def test_every_module_has_a_layer() -> None:
    assert not [m for m in MODULES if _layer(m) is None], "give it a layer in LAYERS and docs/architecture.md"


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{e.src}:{e.line} -> {e.dst} ({e.kind})"
        for e in EDGES
        if (_layer(e.dst) or 0) > (_layer(e.src) or 0) and (e.src, e.dst) not in KNOWN_DEFERRED
    ]
    assert not upward, f"imports up the layers (see docs/architecture.md): {upward}"


def test_networkx_stays_in_the_graph_core() -> None:
    offenders = [
        f"{module}:{line}"
        for module, path in MODULES.items()
        for target, _, line in _walk(module, path)
        if target.split(".")[0] == "networkx" and not module.startswith("qdqopt.graph")
    ]
    assert not offenders, f"networkx imported outside qdqopt/graph/: {offenders}"


def test_passes_do_not_import_what_runs_them() -> None:
    offenders = [
        f"{e.src}:{e.line} -> {e.dst}"
        for e in EDGES
        if e.src.startswith("qdqopt.passes") and e.dst in ABOVE_PASSES and (e.src, e.dst) not in KNOWN_DEFERRED
    ]
    assert not offenders, f"a pass imports the CLI, the reference runner or another runner of passes: {offenders}"


@pytest.mark.parametrize("module", sorted(BOTTOM))
def test_bottom_layers_stay_at_the_bottom(module: str) -> None:
    imported = {e.dst for e in EDGES if e.src == module}
    assert imported <= BOTTOM[module], f"{module} imports {sorted(imported - BOTTOM[module])}"


def test_every_pass_class_is_registered() -> None:
    """A GraphTransformer or RewriteRule defined in qdqopt.passes is a line of the registry (or an abstract base)."""
    import importlib

    from qdqopt.passes.base import GraphTransformer, RewriteRule, RuleBasedTransformer
    from qdqopt.registry import PASSES

    registered: set[type] = {s.impl for s in PASSES if s.impl is not None}
    registered |= {r.impl for s in PASSES for r in s.rules if r.impl is not None}
    orphans = []
    for module in MODULES:
        if not module.startswith("qdqopt.passes."):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if cls.__module__ != module or not issubclass(cls, GraphTransformer | RewriteRule):
                continue
            if inspect.isabstract(cls) or cls is RuleBasedTransformer or not getattr(cls, "name", ""):
                continue
            if cls not in registered:
                orphans.append(f"{module}.{cls.__name__}")
    assert not orphans, f"pass classes no registry line uses (add them to qdqopt/registry.py): {orphans}"
