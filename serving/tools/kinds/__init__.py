"""The serving tools' side of the task kinds: one object per ``pipeline.contract.TaskKind`` (a ``ToolKind``,
``serving/tools/kinds/base.py``), the ``KIND`` of ``serving/kinds/<kind>/tools.py``, with what only it does (its smoke
run and result, its offline answers, how its requests and answers look, how the client prints them).  The tools look the object up once, from the bundle's
``task_type`` (``tool_kind``) or the served ensemble's outputs (``kind_of_outputs``), and call it."""

from __future__ import annotations

import functools
from typing import Iterable

from pipeline.contract import TaskKind, kind_table, lookup_kind
from pipeline.errors import ModelError
from serving.tools.kinds.base import ToolKind


@functools.cache
def kinds() -> dict[str, ToolKind]:
    """Every kind's object by its value: each ``KIND`` of ``serving/kinds/<kind>/tools.py``, imported on first use
    (a kind's module imports its base from this package, so the table cannot be built while this package loads)."""
    return kind_table("serving.kinds.{kind}.tools")


def commands() -> dict[str, str]:
    """serving.client's command -> the kind it asks."""
    return {k.command: k.name for k in kinds().values()}


def tool_kind(task_type: str | TaskKind) -> ToolKind:
    """The kind object of a bundle's ``task_type`` (a TaskKind value)."""
    return lookup_kind(kinds(), task_type, ModelError)


def kind_of_outputs(names: Iterable[str]) -> ToolKind:
    """The kind of a served ensemble with these outputs: the one whose own output is there; classification else."""
    names = set(names)
    otherwise = kinds()[TaskKind.CLASSIFICATION.value]  # none of the kinds' own outputs (FastDeploy's api): as before
    return next((k for k in kinds().values() if k.output in names), otherwise)


__all__ = ["ToolKind", "commands", "kind_of_outputs", "kinds", "tool_kind"]
