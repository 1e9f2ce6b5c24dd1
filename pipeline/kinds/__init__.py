"""Task kinds: classification, token classification (NER), reading comprehension (MRC), UIE extraction."""

from __future__ import annotations

import functools
import importlib

from pipeline.contract import TaskKind
from pipeline.errors import ConfigError
from pipeline.kinds.base import Batch, Feature, FeatureSet, PipelineKind, Score, trim_outputs

KIND_NAMES = tuple(k.value for k in TaskKind)  # pipeline.contract.TaskKind is the one list of kinds


def kind_class(type_name: str) -> type[PipelineKind]:
    """The kind class of a config's ``type`` (a pipeline.contract.TaskKind value): what the task config checks
    against (its data formats, its first segment) before a config exists to make the kind object with."""
    if type_name not in KIND_NAMES:
        raise ConfigError(f"type: {type_name!r} is not one of {', '.join(KIND_NAMES)}")
    # each kind's module (named after it: pipeline/kinds/<type>.py, its KIND) is imported when a config asks for it
    return importlib.import_module(f"pipeline.kinds.{type_name}").KIND


@functools.cache  # every DataConfig asks; the answer never changes, and it imports every kind's module once
def data_formats() -> tuple[str, ...]:
    """Every ``data.format`` some kind reads, in kind order."""
    return tuple(dict.fromkeys(f for name in KIND_NAMES for f in kind_class(name).data_formats))


def get_kind(cfg) -> PipelineKind:
    """The kind object for a task config (its ``type``, a pipeline.contract.TaskKind value)."""
    return kind_class(cfg.type)(cfg)


def load_task_data(cfg):
    """The task's train and dev splits (``pipeline.data.TaskDataset``), read the way its kind reads them."""
    return get_kind(cfg).load(cfg)


def featurize(cfg, tokenizer, examples) -> FeatureSet:
    return get_kind(cfg).featurize(tokenizer, examples, cfg)


__all__ = ["Batch", "Feature", "FeatureSet", "KIND_NAMES", "PipelineKind", "Score", "featurize", "data_formats", "get_kind",
           "kind_class", "trim_outputs"]
