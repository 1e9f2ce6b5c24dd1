"""Task kinds: classification, token classification (NER), reading comprehension (MRC), UIE extraction."""

from __future__ import annotations

from pipeline.errors import ConfigError
from pipeline.kinds.base import Batch, Feature, FeatureSet, Score, TaskKind, trim_outputs

KIND_NAMES = ("classification", "token_classification", "reading_comprehension", "uie")


def get_kind(cfg) -> TaskKind:
    """The kind object for a task config (its ``type``)."""
    if cfg.type == "classification":
        from pipeline.kinds.classification import Classification

        return Classification()
    if cfg.type == "token_classification":
        from pipeline.kinds.token_classification import TokenClassification

        return TokenClassification(cfg)
    if cfg.type == "reading_comprehension":
        from pipeline.kinds.reading_comprehension import ReadingComprehension

        return ReadingComprehension(cfg)
    if cfg.type == "uie":
        from pipeline.kinds.extraction import UniversalExtraction

        return UniversalExtraction(cfg)
    raise ConfigError(f"type: {cfg.type!r} is not one of {', '.join(KIND_NAMES)}")


def load_task_data(cfg):
    """The task's train and dev splits (``pipeline.data.TaskDataset``), read the way its kind reads them."""
    return get_kind(cfg).load(cfg)


def featurize(cfg, tokenizer, examples) -> FeatureSet:
    return get_kind(cfg).featurize(tokenizer, examples, cfg)


__all__ = ["Batch", "Feature", "FeatureSet", "KIND_NAMES", "Score", "TaskKind", "featurize", "get_kind", "trim_outputs"]
