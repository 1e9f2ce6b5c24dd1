"""Task kinds: classification, token classification (NER), reading comprehension (MRC), UIE extraction."""

from __future__ import annotations

from pipeline.contract import TaskKind as Kind
from pipeline.errors import ConfigError
from pipeline.kinds.base import Batch, Feature, FeatureSet, Score, TaskKind, trim_outputs

KIND_NAMES = tuple(k.value for k in Kind)  # pipeline.contract.TaskKind is the one list of kinds


def _classification(cfg) -> TaskKind:
    from pipeline.kinds.classification import Classification

    return Classification()


def _token_classification(cfg) -> TaskKind:
    from pipeline.kinds.token_classification import TokenClassification

    return TokenClassification(cfg)


def _reading_comprehension(cfg) -> TaskKind:
    from pipeline.kinds.reading_comprehension import ReadingComprehension

    return ReadingComprehension(cfg)


def _uie(cfg) -> TaskKind:
    from pipeline.kinds.extraction import UniversalExtraction

    return UniversalExtraction(cfg)


# each kind's module is imported when a config of that kind asks for it
_MAKERS = {Kind.CLASSIFICATION.value: _classification, Kind.TOKEN_CLASSIFICATION.value: _token_classification,
           Kind.READING_COMPREHENSION.value: _reading_comprehension, Kind.UIE.value: _uie}
assert set(_MAKERS) == set(KIND_NAMES), "pipeline/kinds: one kind object per pipeline.contract.TaskKind"


def get_kind(cfg) -> TaskKind:
    """The kind object for a task config (its ``type``, a pipeline.contract.TaskKind value)."""
    maker = _MAKERS.get(cfg.type)
    if maker is None:
        raise ConfigError(f"type: {cfg.type!r} is not one of {', '.join(KIND_NAMES)}")
    return maker(cfg)


def load_task_data(cfg):
    """The task's train and dev splits (``pipeline.data.TaskDataset``), read the way its kind reads them."""
    return get_kind(cfg).load(cfg)


def featurize(cfg, tokenizer, examples) -> FeatureSet:
    return get_kind(cfg).featurize(tokenizer, examples, cfg)


__all__ = ["Batch", "Feature", "FeatureSet", "KIND_NAMES", "Score", "TaskKind", "featurize", "get_kind", "trim_outputs"]
