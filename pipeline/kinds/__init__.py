"""Task kinds: classification, token classification (NER), reading comprehension (MRC), UIE extraction."""

from __future__ import annotations

import functools

from pipeline.contract import TaskKind as Kind
from pipeline.errors import ConfigError
from pipeline.kinds.base import Batch, Feature, FeatureSet, Score, TaskKind, trim_outputs

KIND_NAMES = tuple(k.value for k in Kind)  # pipeline.contract.TaskKind is the one list of kinds


def _classification() -> type[TaskKind]:
    from pipeline.kinds.classification import Classification

    return Classification


def _token_classification() -> type[TaskKind]:
    from pipeline.kinds.token_classification import TokenClassification

    return TokenClassification


def _reading_comprehension() -> type[TaskKind]:
    from pipeline.kinds.reading_comprehension import ReadingComprehension

    return ReadingComprehension


def _uie() -> type[TaskKind]:
    from pipeline.kinds.extraction import UniversalExtraction

    return UniversalExtraction


# each kind's module is imported when a config of that kind asks for it
_CLASSES = {Kind.CLASSIFICATION.value: _classification, Kind.TOKEN_CLASSIFICATION.value: _token_classification,
            Kind.READING_COMPREHENSION.value: _reading_comprehension, Kind.UIE.value: _uie}
assert set(_CLASSES) == set(KIND_NAMES), "pipeline/kinds: one kind class per pipeline.contract.TaskKind"


def kind_class(type_name: str) -> type[TaskKind]:
    """The kind class of a config's ``type`` (a pipeline.contract.TaskKind value): what the task config checks
    against (its data formats, its first segment) before a config exists to make the kind object with."""
    find = _CLASSES.get(type_name)
    if find is None:
        raise ConfigError(f"type: {type_name!r} is not one of {', '.join(KIND_NAMES)}")
    return find()


@functools.cache  # every DataConfig asks; the answer never changes, and it imports every kind's module once
def data_formats() -> tuple[str, ...]:
    """Every ``data.format`` some kind reads, in kind order."""
    return tuple(dict.fromkeys(f for find in _CLASSES.values() for f in find().data_formats))


def get_kind(cfg) -> TaskKind:
    """The kind object for a task config (its ``type``, a pipeline.contract.TaskKind value)."""
    return kind_class(cfg.type)(cfg)


def load_task_data(cfg):
    """The task's train and dev splits (``pipeline.data.TaskDataset``), read the way its kind reads them."""
    return get_kind(cfg).load(cfg)


def featurize(cfg, tokenizer, examples) -> FeatureSet:
    return get_kind(cfg).featurize(tokenizer, examples, cfg)


__all__ = ["Batch", "Feature", "FeatureSet", "KIND_NAMES", "Score", "TaskKind", "featurize", "data_formats", "get_kind",
           "kind_class", "trim_outputs"]
