"""The compiled build against the source it is compiled from.

``pip install .`` compiles the graph core and the helpers every pass calls with mypyc (``setup.py``'s ``COMPILED``);
the tests run the source, since an editable install is never compiled. This test compiles those modules from this
checkout into a temporary copy, then runs qdqopt twice in child processes, once from the copy and once from the
source, over the same models: the bundled examples, the CI sample of the fixtures, and a seeded sample of the shared
corpus. Each is run at every level in the default and int8 configs. Every saved model, ``trace --ort`` line and
VERBOSE line must be the same, and so must every refusal's message.

The build takes about three minutes on two cores. CI runs the sample; ``QDQOPT_FULL=1`` runs every fixture and
every corpus model.
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

import pytest

from tests.conftest import (
    FULL,
    ROOT,
    corpus_id,
    corpus_models,
    fixture_names,
    handbuilt_sample,
    load_file_module,
    realarch_sample,
    transformers_sample,
)

#: corpus models in the CI sample (the MobileNetV3 always among them); QDQOPT_FULL=1: all
CORPUS_COUNT = 12
_MOBILENET = "ort_testdata/csharp/tools/MauiModelTester/Resources/Raw/test_data/model.onnx"

# Runs in a child process: argv[1] is the JSON list of models ("fixture:<name>" or a path), sys.path[0] the tree
# qdqopt is imported from. Prints {"build": qdqopt.build(), "results": {model|level|config: digest or refusal}}.
_WORKER = r"""
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
import qdqopt
import fixtures
results = {}
for item in json.loads(sys.argv[1]):
    model = fixtures.get(item[8:]).build() if item.startswith("fixture:") else item
    for level in (0, 1, 2, 3, 99):
        for config_name, config in (("default", {}), ("int8", {"session.qdqisint8allowed": "1"})):
            key = f"{item}|{level}|{config_name}"
            try:
                run = qdqopt.run(model, level, config=config)
            except Exception as e:  # a refusal: the same one, in the same words
                results[key] = f"{type(e).__name__}: {e}"
                continue
            digest = hashlib.sha256(run.model.SerializeToString())
            digest.update("\n".join(run.pipeline.ort_lines()).encode())
            digest.update("\n".join(run.pipeline.verbose_lines()).encode())
            results[key] = digest.hexdigest()
print(json.dumps({"build": qdqopt.build(), "results": results}))
"""


def _sample() -> list[str]:
    examples = sorted(str(p) for p in (ROOT / "qdqopt" / "examples").glob("*.onnx"))
    chosen = set(fixture_names()) if FULL else handbuilt_sample() | realarch_sample() | transformers_sample()
    # refusals that print a numpy scalar: compiled, an f-string's {x} is str(x), interpreted format(x, ""), which
    # differ for a float32 (0.2 against 0.20000000298023224) unless the text says !s
    chosen |= {"nhwc/maxpool_float", "selector/reshape_diff"}
    fixtures = [f"fixture:{name}" for name in sorted(chosen)]
    corpus = {corpus_id(p): str(p) for p in corpus_models()}
    if FULL:
        ids = sorted(corpus)
    else:
        others = sorted(key for key in corpus if key != _MOBILENET)
        ids = random.Random(17).sample(others, min(CORPUS_COUNT - 1, len(others)))
        ids += [_MOBILENET] if _MOBILENET in corpus else []
    return examples + fixtures + [corpus[key] for key in sorted(ids)]


def _backend() -> Any:
    """``_build/backend.py``, the build backend ``pip install .`` runs."""
    return load_file_module(ROOT / "_build" / "backend.py", "qdqopt_build_backend")


def test_backend_compiles_only_a_wheel_with_a_toolchain(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wheel asks for mypyc and the dependencies its analysis reads; QDQOPT_COMPILE=0, or a machine without a C
    compiler, gives a pure-Python wheel that says why; an editable install never compiles."""
    backend = _backend()
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("QDQOPT_COMPILE", raising=False)
    if backend.missing_toolchain() is None:
        assert backend._compiling()
        assert any(r.startswith("mypy==") for r in backend.get_requires_for_build_wheel())
        assert any(r.startswith("onnxruntime") for r in backend.get_requires_for_build_wheel())
    monkeypatch.setenv("QDQOPT_COMPILE", "0")
    assert not backend._compiling()
    assert not any(r.startswith("mypy") for r in backend.get_requires_for_build_wheel())
    monkeypatch.delenv("QDQOPT_COMPILE")
    monkeypatch.setattr(backend.shutil, "which", lambda name: None)
    assert backend.missing_toolchain().startswith("no C compiler")
    assert not backend._compiling()
    assert "building pure Python" in capsys.readouterr().err
    monkeypatch.setattr(backend._setuptools, "build_editable", lambda *args: os.environ["QDQOPT_COMPILE"])
    monkeypatch.setenv("QDQOPT_COMPILE", "1")
    assert backend.build_editable("wheels") == "0"


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package with setup.py's modules compiled in place (skips, saying why, without a C compiler or
    mypyc)."""
    missing = _backend().missing_toolchain()
    if missing is not None:
        pytest.skip(f"{missing} found: the compiled build cannot be built here")
    pytest.importorskip("mypyc", reason="mypyc (part of mypy, in the dev extra) is not installed")
    tree = tmp_path_factory.mktemp("compiled")
    shutil.copytree(ROOT / "qdqopt", tree / "qdqopt", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        env={**os.environ, "QDQOPT_COMPILE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, f"the mypyc build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    return tree


def _run(tree: Path, models: list[str], script: str = _WORKER) -> dict[str, object]:
    """``script`` run from ``tree`` on ``models`` in a child process: what its last line of output says (JSON)."""
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(models)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    assert done.returncode == 0, f"qdqopt from {tree} failed:\n{done.stderr[-3000:]}"
    out: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return out


def test_compiled_build_gives_the_same_outputs(compiled_tree: Path) -> None:
    models = _sample()
    compiled, source = _run(compiled_tree, models), _run(ROOT, models)
    assert compiled["build"] == "compiled with mypyc", "the copy's qdqopt.graph.core is not the compiled module"
    assert source["build"] == "pure Python", "the source run imported a compiled module (a stray .so in the checkout?)"
    theirs, ours = compiled["results"], source["results"]
    assert isinstance(theirs, dict) and isinstance(ours, dict)
    assert theirs.keys() == ours.keys()
    differing = sorted(key for key in ours if theirs[key] != ours[key])
    assert not differing, f"{len(differing)} of {len(ours)} runs differ, e.g. {differing[:5]}: " + "; ".join(
        f"compiled {theirs[k]!s:.200} / source {ours[k]!s:.200}" for k in differing[:3]
    )


# Runs in a child process: argv[1] is the JSON list of model paths, sys.path[0] the tree qdqopt is imported from.
# Prints the number of objects the cyclic garbage collector found unreachable after each run was dropped.
_CYCLES = r"""
import gc, json, sys, tempfile, warnings
from pathlib import Path
warnings.simplefilter("ignore")
import qdqopt
from qdqopt.graph import load_model
from qdqopt.graph.model import write_atomic
from qdqopt.manager import run_pipeline
from qdqopt.levels import Level
found = {}
with tempfile.TemporaryDirectory() as folder:
    for path in json.loads(sys.argv[1]):
        qdqopt.run(path, "all")  # (a first run: what the imports and caches make stays out of the count)
        gc.collect()
        gc.disable()
        model = load_model(path)
        run_pipeline(model, Level.ALL)
        write_atomic(model, Path(folder) / "out.onnx")
        del model
        api = qdqopt.run(path, "all")
        del api
        found[path] = gc.collect()
        gc.enable()
print(json.dumps({"build": qdqopt.build(), "unreachable": found}))
"""


#: corpus models of the cycle test: MobileNetV3 (NhwcTransformer, the QDQ fusions), and a quantized attention with
#: Slices (Level1's EliminateSlice, whose nested functions once made a cycle compiled)
_CYCLE_MODELS = (_MOBILENET, "ort_testdata/onnxruntime/test/testdata/attention_past_state.u8s8.onnx")


@pytest.mark.parametrize("build", ["compiled", "source"])
def test_a_run_leaves_no_reference_cycles(build: str, request: pytest.FixtureRequest) -> None:
    """What a run made (the model, its trace and events) is freed by reference counting once dropped, in both builds:
    nothing waits for the cyclic garbage collector (compiled, nested functions sharing an environment once held the
    whole run in a cycle, so every run's model stayed until a full collection: ``benchmarks/hashsweep.py --cycles``
    looks for such cycles over every model)."""
    tree = request.getfixturevalue("compiled_tree") if build == "compiled" else ROOT
    models = sorted(str(p) for p in (ROOT / "qdqopt" / "examples").glob("*.onnx"))
    models += [str(p) for p in corpus_models() if corpus_id(p) in _CYCLE_MODELS]
    out = _run(tree, models, _CYCLES)
    assert out["build"] == ("compiled with mypyc" if build == "compiled" else "pure Python")
    assert out["unreachable"] == dict.fromkeys(models, 0)


# Runs in a child process: sys.path[0] is the tree qdqopt is imported from. The example plugin (plain Python,
# derived from the pass base class, which the compiled build compiles) on a model it rewrites, at each level it runs
# at, and disabled. Prints {"build": ..., "results": {level|plugin: digest}, "marked": whether the trace marks it}.
_PLUGIN = r"""
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
import qdqopt
from tests.test_plugins import EXAMPLE, NAME, _leaky_qdq
results, marked = {}, []
for level in (2, 3, 99):
    for disabled in ((), (NAME,)):
        run = qdqopt.run(_leaky_qdq(), level, plugins=[EXAMPLE], disabled=list(disabled))
        digest = hashlib.sha256(run.model.SerializeToString())
        digest.update("\n".join(run.pipeline.ort_lines()).encode())
        digest.update("\n".join(run.pipeline.verbose_lines()).encode())
        results[f"{level}|{','.join(disabled)}"] = digest.hexdigest()
        rewrote = any(e.name == NAME and e.plugin and e.modified for e in run.pipeline.trace)
        marked.append(rewrote != bool(disabled))
print(json.dumps({"build": qdqopt.build(), "results": results, "marked": all(marked)}))
"""


def test_a_plugin_runs_on_the_compiled_build(compiled_tree: Path) -> None:
    """A pass of one's own stays Python and derives from the compiled ``GraphTransformer``: it runs, shows in the
    trace, toggles by name, and leaves what the source build leaves."""
    compiled, source = _run(compiled_tree, [], _PLUGIN), _run(ROOT, [], _PLUGIN)
    assert compiled["build"] == "compiled with mypyc" and source["build"] == "pure Python"
    assert compiled["results"] == source["results"]
    assert compiled["marked"] and source["marked"]


#: how many objects of one class of a compiled module a run may make through generated code (the run's singletons,
#: such as its Model and PassContext, and per-level or per-pass tables); a class made per node, unit, edge or
#: candidate writes its own ``__init__``
_GENERATED_PER_RUN = 4


def _compiled_modules() -> tuple[frozenset[str], tuple[str, ...]]:
    """What ``setup.py``'s ``COMPILED`` lists, read from it (its ``setup()`` call left out): the module names of its
    files, and the package prefixes of its folders."""
    with mock.patch("setuptools.setup"):
        compiled: list[str] = load_file_module(ROOT / "setup.py", "qdqopt_setup").COMPILED
    files = frozenset(path.removesuffix(".py").replace("/", ".") for path in compiled if path.endswith(".py"))
    folders = tuple(path.replace("/", ".") + "." for path in compiled if not path.endswith(".py"))
    return files, folders


def test_a_run_makes_no_object_through_generated_code() -> None:
    """Compiled with mypyc, a dataclass keeps the ``__init__`` the dataclasses module generates at run time, and a
    ``NamedTuple`` its ``__new__``: interpreted Python even in the compiled build (mypyc issue #817), some 6,000
    instructions an object. So a class of a compiled module that a run makes per node, unit, edge or candidate writes
    its own ``__init__`` (docs/architecture.md, "The compiled build"). Over the examples, the fixtures' CI samples and
    the cycle test's corpus models, at every level, a run makes at most :data:`_GENERATED_PER_RUN` objects of any such
    class through generated code (functions whose source is ``<string>``)."""
    import fixtures
    import qdqopt

    models: list[Any] = sorted(str(p) for p in (ROOT / "qdqopt" / "examples").glob("*.onnx"))
    models += [str(p) for p in corpus_models() if corpus_id(p) in _CYCLE_MODELS]
    models += [fixtures.get(name).build() for name in sorted(realarch_sample() | transformers_sample())]
    qdqopt.run(models[0], 99)  # (the process's tables, made once, are made before the count)
    files, folders = _compiled_modules()
    assert "qdqopt.manager" in files and "qdqopt.graph." in folders  # (the test's own premise)
    worst: dict[str, tuple[int, str]] = {}
    made: collections.Counter[str] = collections.Counter()

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename == "<string>":
            found = frame.f_locals.get("self", frame.f_locals.get("_cls"))
            cls = found if isinstance(found, type) else type(found)
            if cls.__module__ in files or cls.__module__.startswith(folders):
                made[f"{cls.__module__}.{cls.__qualname__}"] += 1

    for model in models:
        for level in (0, 1, 2, 3, 99):
            made.clear()
            sys.setprofile(count)
            try:
                qdqopt.run(model, level)
            except Exception:  # (a refusal: what the run made until then still counts)
                pass
            finally:
                sys.setprofile(None)
            for name, times in made.items():
                if times > worst.get(name, (0, ""))[0]:
                    where = model if isinstance(model, str) else model.graph.name
                    worst[name] = (times, f"{Path(where).name} at level {level}")
    too_many = {name: found for name, found in worst.items() if found[0] > _GENERATED_PER_RUN}
    assert not too_many, f"made through generated code (write the class's own __init__): {too_many}"
