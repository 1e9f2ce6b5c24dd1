"""Module structure (issue 11): no import cycle among the modules' imports (top level or inside functions), and stages never
import the runner (runner -> graph -> stages -> runner was a cycle; StageResult/StageContext now live in
pipeline.records).  Engines: one folder per runtime, each split by the same concerns, none importing another.
Layering: serving/triton (run inside Triton) imports only what Triton has; pipeline imports serving only from the
package stage and its config; only serving/bundle and serving/tools import pipeline; stages do not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("pipeline", "serving"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only: never imported at run time)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path, known: set[str], top_level_only: bool, annotations: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    nodes = tree.body if top_level_only else ast.walk(tree) if annotations else _runtime_nodes(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found & known


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_at_module_level():
    mods = _modules()
    graph = {m: _imports(p, set(mods), top_level_only=True) for m, p in mods.items()}
    assert _cycles(graph) == []
    # the check itself finds a cycle when there is one
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def test_no_import_cycle_inside_functions_either():
    """Imports inside functions count too (they only postpone a cycle): data <-> kinds and pipeline <-> env were
    the last two."""
    mods = _modules()
    graph = {m: _imports(p, set(mods), top_level_only=False) for m, p in mods.items()}
    assert _cycles(graph) == []


def test_no_import_cycle_even_for_annotations():
    """Imports under ``if TYPE_CHECKING:`` count too: a module that names another's types depends on it.  The last
    two circles were registry <-> the ONNX Runtime and Paddle sessions (``ShapeRange``, now ``backends/shapes.py``) and
    the client <-> the kinds' tool modules (the command line is ``client_cli.py`` now; the client knows no kinds)."""
    mods = _modules()
    graph = {m: _imports(p, set(mods), top_level_only=False, annotations=True) for m, p in mods.items()}
    assert _cycles(graph) == []


def test_stages_never_import_the_runner():
    mods = _modules()
    for name, path in mods.items():
        if name.startswith("pipeline.stages"):
            assert "pipeline.runner" not in _imports(path, set(mods), top_level_only=False), name


def test_every_stage_declares_itself_beside_its_code():
    """graph.py composes the STAGE each stage module declares; it declares none itself."""
    import importlib

    from pipeline import graph

    for s in graph.STAGES:
        module = importlib.import_module(f"pipeline.stages.{s.name.replace('-', '_')}")
        assert module.STAGE is s and s.run.__module__ == module.__name__
    assert "Stage(" not in Path(graph.__file__).read_text()


def test_graph_refuses_a_stage_that_requires_a_later_or_unknown_one():
    import dataclasses

    import pytest

    from pipeline import graph

    stages = graph.STAGES
    graph.check_order(stages)
    with pytest.raises(ValueError, match="stage 'finetune-check' requires compress"):
        graph.check_order((stages[0], dataclasses.replace(stages[1], requires=("compress",)), *stages[2:]))
    with pytest.raises(ValueError, match="declared twice"):
        graph.check_order((stages[0], stages[0]))


BACKENDS = ROOT / "pipeline" / "backends"
CONCERNS = ("convert", "quantize", "session")


def _engine_folders() -> list[Path]:
    return sorted(p for p in BACKENDS.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def test_every_engine_folder_has_the_same_concern_modules():
    """convert / quantize / session in every engine folder (a module or a package), or its docstring says why not
    ("no quantize: ..."); and every runtime of the registry's table is one folder, so a new engine is one folder."""
    import ast

    from pipeline.backends.registry import runtimes

    folders = _engine_folders()
    assert {f.name for f in folders} == {r.runtime for r in runtimes()}
    for folder in folders:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        assert doc, f"{folder.name}/__init__.py: no docstring saying what the folder holds"
        for concern in CONCERNS:
            present = (folder / f"{concern}.py").is_file() or (folder / concern / "__init__.py").is_file()
            assert present or f"no {concern}" in doc, f"{folder.name}: no {concern} module, and its docstring says not why"


def _engine_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["pipeline", "backends"] and len(parts) > 2 and (BACKENDS / parts[2]).is_dir():
        return parts[2]
    return None


def _engine_crossings(graph: dict[str, set[str]]) -> list[str]:
    """"module -> imported" for every import of one engine folder's module by another engine folder's, or of any
    engine by the engine-neutral INT8 package (``pipeline.quantization``, which both engines share)."""
    out = []
    for module, imported in graph.items():
        engine, neutral = _engine_of(module), module.split(".")[:2] == ["pipeline", "quantization"]
        for name in imported:
            other = _engine_of(name)
            if other is not None and ((engine is not None and other != engine) or neutral):
                out.append(f"{module} -> {name}")
    return sorted(out)


def test_no_engine_folder_imports_another():
    """What engines share lives outside their folders (``backends.forms``, the registry, ``pipeline.quantization``):
    an engine folder can be added or removed alone.  Imports inside functions count."""
    mods = _modules()
    graph = {m: _imports(p, set(mods), top_level_only=False) for m, p in mods.items()}
    assert _engine_crossings(graph) == []
    # the check itself finds a crossing when there is one
    assert _engine_crossings({"pipeline.backends.openvino.quantize": {"pipeline.backends.onnxruntime.int8.recipe"},
                              "pipeline.quantization.search": {"pipeline.backends.paddle.session"},
                              "pipeline.backends.paddle.session": {"pipeline.backends.forms"}}) == [
        "pipeline.backends.openvino.quantize -> pipeline.backends.onnxruntime.int8.recipe",
        "pipeline.quantization.search -> pipeline.backends.paddle.session"]


# -- layering: who may import whom ---------------------------------------------------------------------------------------

# What each part of serving may import of serving, besides itself (serving is split by where its code runs).
SERVING_LAYERS = {
    "serving": set(),
    "serving.kinds": set(),  # the kinds' folders' package files (their modules: KIND_FOLDER_PARTS)
    "serving.triton": set(),  # copied into bundles: see test_triton_code_imports_only_what_triton_has
    "serving.procfs": set(),  # /proc/<pid>/stat, for the launcher and the tools
    "serving.bundle": {"serving.triton"},  # builds bundles: locates and hashes what it copies, checks integrity
    "serving.triton_install": set(),  # which tritonserver, the python its models run in, that python's engine check
    "serving.process_group": {"serving.procfs"},  # a server's processes and shared memory, ended
    # the launcher: the bundle check, the install, its process group
    "serving.server": {"serving.triton", "serving.procfs", "serving.triton_install", "serving.process_group"},
    "serving.tools": {"serving.triton", "serving.bundle", "serving.server", "serving.procfs", "serving.process_group"},
    "serving.client": {"serving.tools"},  # `python -m serving.client`, the command bundles' model cards print
}
# The only parts of serving that may import pipeline: they run where the pipeline is installed (packaging, dev tools).
SERVING_MAY_IMPORT_PIPELINE = {"serving.bundle", "serving.tools"}
# The only pipeline modules that may import serving: the package stage, and pipeline/config.py, whose task config
# holds the package: and deploy: sections (PackageConfig, DeployConfig, checked against package.api there), which
# live in serving/bundle/config.py beside the code that reads them.
PIPELINE_MAY_IMPORT_SERVING = {"pipeline.stages.package", "pipeline.config"}
# The export contract (standard library only: forms, layout, meta.json, CPU info) is shared by every part of serving
# that runs in the project's environment, the launcher included; never by the code copied into bundles.
CONTRACT = "pipeline.contract"
# What the served python models' Triton has: the standard library, these, and the copied files (model_support.py is
# the one imported by name; the others are loaded by model_support.sibling).
TRITON_PACKAGES = {"numpy", "tokenizers", "onnxruntime", "openvino", "paddle", "triton_python_backend_utils",
                   "model_support"}


# A kind's folder (serving/kinds/<kind>/) holds one module of three parts: its bundle.py is built like serving/bundle,
# its tools.py like serving/tools, and its models/ are copied into bundles like serving/triton.
KIND_FOLDER_PARTS = {"bundle": "serving.bundle", "tools": "serving.tools", "models": "serving.triton"}


def _serving_part(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["serving", "kinds"] and len(parts) > 3:
        return KIND_FOLDER_PARTS[parts[3]]
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _layering_problems(graph: dict[str, set[str]]) -> list[str]:
    """"module -> imported" for every import the layering above does not allow."""
    out = []
    for module, imported in graph.items():
        top = module.split(".")[0]
        part = _serving_part(module)
        for name in imported:
            other = name.split(".")[0]
            if top == "serving" and other == "serving" and _serving_part(name) not in SERVING_LAYERS[part] | {part}:
                out.append(f"{module} -> {name}")
            elif top == "serving" and other == "pipeline" and part not in SERVING_MAY_IMPORT_PIPELINE \
                    and not (name == CONTRACT and part != "serving.triton"):
                out.append(f"{module} -> {name}")
            elif top == "pipeline" and other == "serving" and module not in PIPELINE_MAY_IMPORT_SERVING:
                out.append(f"{module} -> {name}")
    return sorted(out)


def test_layering():
    """Who may import whom between pipeline and serving's parts (SERVING_LAYERS, SERVING_MAY_IMPORT_PIPELINE,
    PIPELINE_MAY_IMPORT_SERVING above); imports inside functions count."""
    mods = _modules()
    graph = {m: _imports(p, set(mods), top_level_only=False) for m, p in mods.items()}
    assert _layering_problems(graph) == []
    # the check itself finds each kind of crossing
    assert _layering_problems({"serving.triton.text_input": {"serving.bundle.config"},
                               "serving.server": {"pipeline.cpu", "serving.triton.integrity"},
                               "serving.bundle.repository": {"serving.tools.offline", "pipeline.errors"},
                               "pipeline.stages.export": {"serving.bundle.repository"},
                               "pipeline.stages.package": {"serving.bundle.repository"},
                               "serving.kinds.uie.bundle": {"serving.kinds.uie.tools", "pipeline.errors"},
                               "serving.kinds.uie.tools": {"serving.kinds.uie.bundle"},
                               "serving.kinds.uie.models.extractor": {"serving.bundle.config", "pipeline.contract"}}) == [
        "pipeline.stages.export -> serving.bundle.repository", "serving.bundle.repository -> serving.tools.offline",
        "serving.kinds.uie.bundle -> serving.kinds.uie.tools", "serving.kinds.uie.models.extractor -> pipeline.contract",
        "serving.kinds.uie.models.extractor -> serving.bundle.config",
        "serving.server -> pipeline.cpu", "serving.triton.text_input -> serving.bundle.config"]


def _triton_problems(source: str, where: str) -> list[str]:
    """Every import of ``source`` Triton's python backend cannot satisfy, wherever it stands (inside functions and
    ``if TYPE_CHECKING:`` too): relative imports (the files are copied flat, no package), ``serving`` or ``pipeline``
    (neither is installed there, ``serving.triton`` itself included: siblings are loaded as files), and anything
    beyond the standard library and TRITON_PACKAGES."""
    import sys

    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append(f"{where}:{node.lineno}: relative import")
                continue
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in TRITON_PACKAGES:
                problems.append(f"{where}:{node.lineno}: imports {name}")
    return problems


def test_triton_code_imports_only_what_triton_has():
    """serving/triton, the kinds' models/ and the engines' served modules are copied into bundles and run by Triton's python backend,
    where neither pipeline nor serving is installed: checked from the source, so a model that would fail only when Triton loads it fails here."""
    from pipeline.backends.registry import served_engines

    # and every served engine's module, copied beside runner.py as engine.py
    engines = [e.source for e in served_engines()]
    assert {f.parent.name for f in engines} >= {"onnxruntime", "openvino", "paddle"}
    files = sorted((ROOT / "serving" / "triton").rglob("*.py")) + sorted((ROOT / "serving" / "kinds").glob("*/models/*.py"))
    files += engines
    assert len(files) > 20 and {f.parent.parent.name for f in files if f.parent.name == "models"} >= {"triton", "uie"}
    problems = [p for f in files for p in _triton_problems(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert problems == []
    # the check itself sees imports inside functions, relative imports and serving's own modules
    sample = ("import numpy\nfrom . import text_input\ndef f():\n    from pipeline.reading import windows\n"
              "    import serving.triton.text_input\n    import pandas\n")
    assert [p.split(": ", 1)[1] for p in _triton_problems(sample, "x")] == [
        "relative import", "imports pipeline.reading", "imports serving.triton.text_input", "imports pandas"]


def test_stages_never_import_each_other():
    mods = _modules()
    bad = [f"{name} imports {imported}" for name, path in mods.items() if name.startswith("pipeline.stages.")
           for imported in _imports(path, set(mods), top_level_only=False)
           if imported.startswith("pipeline.stages.") and imported != name]
    assert bad == []
