"""DEVELOPERS.md's "Adding a CPU engine" walkthrough, held to the code: every file, test, name and field it tells a
newcomer to touch exists as it says, every registered engine's folder has the files the walkthrough lists, and the
number of files it counts is the number of places an engine's name must be written outside its folder."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

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
    assert len(tests) == 2
    for file, name in tests:
        assert f"def {name}(" in (ROOT / file).read_text(encoding="utf-8"), (file, name)
    for table in ("CPU_ENGINES", "RUNTIMES", "SERVED_ENGINES"):
        if table in quoted or table == "SERVED_ENGINES":
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
    from pipeline.backends.registry import CPU_ENGINES, SERVED_ENGINES

    for engine in CPU_ENGINES:
        folder = ROOT / "pipeline" / "backends" / engine.name
        assert (folder / "engine.py").is_file() and engine.served is not None, engine.name
        assert engine.served.source == folder / "served.py", engine.name
    for served in SERVED_ENGINES:
        assert hasattr(importlib.import_module(served.served), "Engine"), served.name


def test_the_files_it_counts_are_the_places_an_engine_is_named_outside_its_folder():
    """"3 files": the folder, registry.py and its tests.  OpenVINO's name, form and folder (as a string or an import)
    appear in no other module of pipeline/ or serving/ (comments and docstrings aside)."""
    assert "3 files" in _section() and "`pipeline/config.py`" in _section()
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
    # and pipeline/config.py holds its settings' section of the task config (openvino:), which an engine without
    # settings of its own does not need (the walkthrough says so)
    allowed = {"pipeline/backends/registry.py", "pipeline/config.py", "serving/bundle/config.py",
               "serving/bundle/repository.py", "serving/bundle/model_config.py"}
    assert named <= allowed, sorted(named - allowed)


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
