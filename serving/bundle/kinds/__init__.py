"""What a bundle is made of, per task kind: one object per kind (``pipeline.contract.TaskKind``), the ``KIND`` of
``serving/kinds/<kind>/bundle.py`` (its base: ``base.py`` here), looked up once from meta.json's ``task_type`` with
``bundle_kind``.  ``serving/bundle/repository.py`` and the Triton configs ask it; nothing else in serving/bundle
compares kind names."""

from __future__ import annotations

import functools

from pipeline.contract import TaskKind, kind_table, lookup_kind
from serving.bundle import fastdeploy_api as fd
from serving.bundle.config import PackageConfig, _config_error
from serving.bundle.kinds.base import BundleKind, WindowedKind
from serving.bundle.model_config import BundleShape


@functools.cache
def kinds() -> dict[str, BundleKind]:
    """Every kind's object by its value: each ``KIND`` of ``serving/kinds/<kind>/bundle.py``, imported on first use
    (a kind's module imports its base from this package, so the table cannot be built while this package loads)."""
    return kind_table("serving.kinds.{kind}.bundle")


def _listed(names: list[str], last: str) -> str:
    """``a, b and c`` (``last``: "and" / "or"), for messages."""
    return f" {last} ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def fused_kinds() -> str:
    """The kinds with a fused layout of their own, for messages ("classification, token_classification or uie")."""
    return _listed([k.name for k in kinds().values() if k.fusable], "or")


def bundle_kind(task_type: str | TaskKind) -> BundleKind:
    """The kind object of a meta.json / bundle.json ``task_type`` (a TaskKind value)."""
    return lookup_kind(kinds(), task_type, _config_error)


def check_api(task_type: str | TaskKind, pc: PackageConfig) -> None:
    """Refuse, naming package.api, settings FastDeploy's examples have no served interface for (each kind names its
    own example: ``BundleKind.fastdeploy``)."""
    kind = bundle_kind(task_type)
    offered = _listed([f"{k.name} ({k.fastdeploy.model})" for k in kinds().values() if k.fastdeploy is not None], "and")
    fd.check(kind.name, kind.fastdeploy, pc, offered)


def all_configs(shape: BundleShape, pc: PackageConfig) -> dict:
    """Every Triton model config of the bundle, by model name (``BundleShape.task_type`` picks the kind)."""
    kind = bundle_kind(shape.task_type)
    configs = kind.configs(shape, pc)
    if configs is None:
        raise _config_error(f"package.layout: fused is for {fused_kinds()} bundles, not {kind.name}")
    return {c.name: c for c in configs}


__all__ = ["BundleKind", "WindowedKind", "all_configs", "bundle_kind", "check_api", "fused_kinds", "kinds"]
