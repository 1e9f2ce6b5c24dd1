"""DEVELOPERS.md's "Adding a CPU engine" walkthrough, held to the code: every file, test, name and field it tells a
newcomer to touch exists as it says, every registered engine's folder has the files the walkthrough lists, and the
number of files it counts is the number of places an engine's name must be written outside its folder."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "DEVELOPERS.md").read_text(encoding="utf-8")
    start = text.index("- Adding a CPU engine")
    return text[start : text.index("\n- ", start + 1)]


def _quoted(section: str) -> set[str]:
    return {" ".join(q.split()) for q in re.findall(r"`([^`]+)`", section)}


def test_every_path_test_and_name_the_walkthrough_names_exists():
    from pipeline.backends import registry
    from pipeline.backends.engine import CpuEngine, ServedEngine

    quoted = _quoted(_section())
    paths = [q for q in quoted if "/" in q and " " not in q and "<" not in q and "::" not in q]
    assert len(paths) >= 8
    for q in paths:  # relative to the root, or to pipeline/
        assert (ROOT / q).exists() or (ROOT / "pipeline" / q).exists(), q
    tests = [q.split("::") for q in quoted if "::" in q]
    assert len(tests) == 3
    for file, name in tests:
        assert f"def {name}(" in (ROOT / file).read_text(encoding="utf-8"), (file, name)
    for table in ("CPU_ENGINES", "runtimes", "served_engines"):
        if table in quoted or table == "served_engines":
            assert hasattr(registry, table), table
    fields = {f.name for f in dataclasses.fields(CpuEngine)} | {f.name for f in dataclasses.fields(ServedEngine)}
    assert {"form", "form_params", "served"} <= fields and {"form", "form_params"} <= quoted
    dotted = [q for q in quoted if re.fullmatch(r"pipeline(\.\w+)+", q)]
    for name in dotted:  # a module, or a name in one (pipeline.contract.register_form)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            module, _, attr = name.rpartition(".")
            assert hasattr(importlib.import_module(module), attr), name
    assert hasattr(importlib.import_module("serving.bundle.config"), "runtimes")


def test_every_registered_engine_folder_has_what_the_walkthrough_lists():
    from pipeline.backends.registry import CPU_ENGINES, served_engines

    for engine in CPU_ENGINES:
        folder = ROOT / "pipeline" / "backends" / engine.name
        assert (folder / "engine.py").is_file() and engine.served is not None, engine.name
        assert engine.served.source == folder / "served.py", engine.name
    for served in served_engines():
        assert hasattr(importlib.import_module(served.served), "Engine"), served.name


def test_the_files_it_counts_are_the_places_an_engine_is_named_outside_its_folder():
    """"3 files": the folder, registry.py and its tests, settings included (OpenVINO's openvino: section is its
    ``section``).  OpenVINO's name, form and folder (as a string or an import) appear in no other module of pipeline/
    or serving/ (comments and docstrings aside): not in pipeline/config.py either."""
    assert "3 files" in _section() and "`pipeline/config.py`" not in _section() and "`section`" in _section()
    import ast

    named = set()
    for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "serving").rglob("*.py")]:
        rel = path.relative_to(ROOT)
        if rel.parts[:3] == ("pipeline", "backends", "openvino"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline.backends.openvino"):
                named.add(str(rel))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and re.search(r"\bopenvino(_int8)?\b|python-openvino|pipeline\.backends\.openvino", node.value):
                named.add(str(rel))
    # FastDeploy's own engine choice (its fastdeploy_engine: openvino) is FastDeploy's name, not our engine's
    allowed = {"pipeline/backends/registry.py", "serving/bundle/config.py", "serving/bundle/repository.py",
               "serving/bundle/model_config.py"}
    assert named <= allowed and "pipeline/backends/registry.py" in named, sorted(named - allowed)


def test_an_engine_declares_its_own_form_in_its_folder_and_registering_it_lists_it():
    """The export contract names the forms every export writes; an engine's own form (OpenVINO's IR) comes from its
    folder when the registry imports it.  A fresh interpreter shows both halves: the contract alone lacks it, the
    registry adds every registered engine's form with its file and precision."""
    import subprocess
    import sys

    code = ("import pipeline.contract as c; before = set(c.FORMS); from pipeline.backends import registry; "
            "own = [e.form for e in registry.CPU_ENGINES if e.form]; "
            "print(sorted(before & set(own)), [(c.form(n).path, c.form(n).precision.value) for n in own])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] [('openvino/int8.xml', 'int8')]"


def test_a_second_form_of_the_same_name_or_path_is_refused():
    import pytest

    from pipeline.contract import FORMS, Form, Precision, register_form

    mine = Form("walkthrough_int8", "walkthrough/int8.bin", Precision.INT8)
    try:
        assert register_form(mine) is mine and register_form(mine) is mine  # once, then a no-op
        with pytest.raises(ValueError, match="registered twice"):
            register_form(Form("walkthrough_int8", "walkthrough/other.bin", Precision.INT8))
        with pytest.raises(ValueError, match="where onnx_int8 is"):
            register_form(Form("walkthrough_onnx", "onnx/int8.onnx", Precision.INT8))
    finally:
        FORMS.pop("walkthrough_int8", None)


# -- "Adding a task kind" ------------------------------------------------------------------------------------------
def _kind_section() -> str:
    text = (ROOT / "DEVELOPERS.md").read_text(encoding="utf-8")
    start = text.index("- Adding a task kind")
    return text[start : text.index("\n- ", start + 1)]


# A kind's objects: its pipeline module, and its serving folder's bundle.py and tools.py.
KIND_MODULES = ("pipeline/kinds/<kind>.py", "serving/kinds/<kind>/bundle.py", "serving/kinds/<kind>/tools.py")


def _own(value: str) -> tuple[str, ...]:
    """What is a kind's own: its pipeline module and its serving folder."""
    return (f"pipeline/kinds/{value}.py", f"serving/kinds/{value}/")


def test_the_kind_walkthrough_names_files_that_exist_and_every_kind_has_its_module_and_folder():
    """Every path it quotes exists (``<kind>`` as each kind); each kind's object is the ``KIND`` of its pipeline module
    and of its folder's bundle.py and tools.py, and says it is that kind; its python models are in its folder."""
    from pipeline.contract import TaskKind
    from serving.bundle.kinds import bundle_kind
    from serving.bundle.config import PackageConfig

    section = _kind_section()
    paths = [q for q in _quoted(section) if "/" in q and " " not in q and "::" not in q]
    assert len(paths) >= 8 and "4 files" in section
    for q in paths:
        for kind in TaskKind:
            path = ROOT / q.replace("<kind>", kind.value)
            assert path.exists(), q
    from pipeline.kinds.base import PipelineKind
    from serving.bundle.kinds.base import BundleKind
    from serving.tools.kinds.base import ToolKind

    bases = dict(zip(KIND_MODULES, (PipelineKind, BundleKind, ToolKind)))
    for module in KIND_MODULES:
        assert f"`{module}`" in section and f"`{bases[module].__name__}`" in section, module
        for kind in TaskKind:
            obj = importlib.import_module(module.replace("<kind>", kind.value).removesuffix(".py").replace("/", ".")).KIND
            assert obj.name == kind.value, (module, kind)
            # the class the walkthrough says it is (the pipeline's KIND is a class, serving's are objects)
            assert issubclass(obj, bases[module]) if isinstance(obj, type) else isinstance(obj, bases[module]), (module, kind)
    for kind in TaskKind:  # every python model and helper its bundles copy comes from its folder
        obj, pc = bundle_kind(kind), PackageConfig()
        folder = ROOT / "serving" / "kinds" / kind.value / "models"
        sources = [obj.models / obj.files.tokenizer, obj.models / obj.files.postprocess,
                   *(obj.models / m for m in (obj.fused_model(pc),) if m)]
        helpers = [h for h in [*obj.tokenizer_helpers(pc), *obj.postprocess_helpers(pc)] if "triton" not in h.parts]
        assert all(p.resolve().parent == folder.resolve() and p.is_file() for p in sources + helpers), kind
    for name in ("label_problem", "meta_problem", "fastdeploy", "first_segment", "data_formats", "settings",
                 "shape_fields"):
        assert f"`{name}`" in section, name


def _written_outside(kind, own: tuple[str, ...]) -> set[str]:
    """Modules of pipeline/ and serving/ (outside ``own``) that spell the kind: its value as a string, its TaskKind
    member, or an import of one of its modules (comments and docstrings aside)."""
    import ast

    # its modules, and its serving folder's as a prefix (the pipeline helper folders are shared readers: imported by
    # other kinds too, so an import of them does not name the kind)
    own_modules = tuple(o.removesuffix(".py").replace("/", ".") for o in own
                        if o.endswith(".py") or o.startswith("serving/kinds/"))
    named = set()
    for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "serving").rglob("*.py")]:
        rel = str(path.relative_to(ROOT))
        if any(rel == o or (o.endswith("/") and rel.startswith(o)) for o in own):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == kind.name) \
                    or (isinstance(node, ast.ImportFrom) and node.module
                        and any(node.module == o or (o.endswith(".") and node.module.startswith(o)) for o in own_modules)) \
                    or (isinstance(node, ast.Constant) and node.value == kind.value and id(node) not in docs):
                named.add(rel)
    return named


@pytest.mark.parametrize("value, helpers", [
    ("token_classification", ("pipeline/labeling/",)),
    ("reading_comprehension", ("pipeline/reading/",)),
    ("uie", ("pipeline/extraction/",))])
def test_the_files_it_counts_are_the_places_a_kind_is_named_outside_its_modules(value, helpers):
    """"4 files": no module outside a kind's pipeline module and serving folder (and the pipeline helpers only it
    loads) spells it, but ``pipeline/contract.py``'s TaskKind.  (Classification, the default of records older than
    ``task_type``, is named as that default too.)"""
    from pipeline.contract import TaskKind

    kind = TaskKind(value)
    assert _written_outside(kind, (*_own(value), *helpers)) == {"pipeline/contract.py"}
    # and the scan sees what it looks for: the classification default is spelled where records predate task_type
    assert "pipeline/config.py" in _written_outside(TaskKind.CLASSIFICATION, _own("classification"))


# -- the module map --------------------------------------------------------------------------------------------------
def test_the_module_map_names_every_module_of_pipeline_and_serving():
    """Every module in pipeline/, serving/ and their folders is named in DEVELOPERS.md's module map, except in the
    folders the map describes as one module per item (stage, kind, engine, python model)."""
    text = (ROOT / "DEVELOPERS.md").read_text(encoding="utf-8")
    start = text.index("### Module map")
    module_map = text[start : text.index("```", text.index("```", start) + 3)]
    per_item = {"pipeline/stages": "one module per stage", "pipeline/kinds": "one\n                               module per kind",
                "serving/kinds": "one folder per task kind",
                "pipeline/backends": "one folder per engine", "serving/triton/models": "the model runner"}
    for folder, says in per_item.items():
        assert says in module_map, (folder, says)
    folders = [ROOT / "pipeline", ROOT / "serving"]
    folders += [p for f in list(folders) for p in f.iterdir() if p.is_dir() and p.name != "__pycache__"]
    unnamed = []
    for folder in folders:
        rel = str(folder.relative_to(ROOT))
        if rel in per_item:
            continue
        for path in sorted(folder.glob("*.py")):
            if path.name not in ("__init__.py", "__main__.py") and \
                    not re.search(rf"(?<!\w){re.escape(path.stem)}(\.py)?(?!\w)", module_map):
                unnamed.append(str(path.relative_to(ROOT)))
    assert unnamed == []
