"""Module structure (issue 11): no import cycle among the modules' imports (top level or inside functions), and stages never
import the runner (runner -> graph -> stages -> runner was a cycle; StageResult/StageContext now live in
pipeline.records)."""

from __future__ import annotations

import ast
from pathlib import Path

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


def _imports(path: Path, known: set[str], top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body if top_level_only else _runtime_nodes(tree):
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
