"""Sequence labeling (NER): CLUENER2020 JSON lines or MSRA-style BIO files; entity-level chunk F1.

Tags are BIO over the task's entity types (``labels:`` in the task YAML, in that order):
``O, B-<t1>, I-<t1>, B-<t2>, ...`` is the model's output order.  Tokens carry character offsets, so
decoded entities are character spans of the original text; the same ``pipeline.labeling.bio`` code
decodes in evaluation and in the served post-processing model.
Texts longer than ``max_seq_len - 2`` tokens are truncated for the model; their gold entities past the
cut still count in the metric (as misses), so the score is honest about truncation.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from pipeline.errors import ConfigError
from pipeline.kinds.base import (Feature, FeatureSet, Score, PipelineKind, f1_of, request_shaped_batches,
                                 span_feature_params)


class TokenClassification(PipelineKind):
    name = "token_classification"
    metric = "f1"
    metric_label = "entity F1"
    data_formats = ("cluener", "msra_bio")
    token_level_outputs = True
    token_level_targets = True


    def manifest_sections(self, cfg) -> dict:
        return {"entity_types": list(cfg.labels)}

    def feature_params(self, cfg) -> dict:
        """The data format and files (part of every data-reading stage's key)."""
        return span_feature_params(cfg)

    def __init__(self, cfg):
        from pipeline.labeling.bio import tag_names

        if not cfg.labels:
            raise ConfigError(f"task {cfg.task}: labels: list the entity types (e.g. [name, address, ...])")
        self.entity_types = list(cfg.labels)
        self.tags = tag_names(self.entity_types)
        self.tag_index = {t: i for i, t in enumerate(self.tags)}

    def load(self, cfg):
        from pipeline.data import Split, TaskDataset, data_fingerprint, resolve_local_dir
        from pipeline.errors import DataError
        from pipeline.labeling import readers

        data_dir = resolve_local_dir(cfg)
        reader = {"cluener": readers.read_cluener, "msra_bio": readers.read_msra_bio}.get(cfg.data.format)
        if reader is None:
            raise ConfigError(f"data.format: {cfg.data.format!r} is not a sequence-labeling format (cluener, msra_bio)")
        splits = {}
        for name, file_name in (("train", cfg.data.train_file), ("dev", cfg.data.dev_file)):
            path = data_dir / file_name
            if not path.is_file():
                raise DataError(f"{path}: split {name!r} not found in data dir {data_dir}")
            s = reader(path)
            for ex in s.examples:
                for ent in ex.entities:
                    if f"B-{ent.type}" not in self.tag_index:
                        raise DataError(f"{path}: entity type {ent.type!r} ({ent.text!r}) is not one of the task's labels "
                                        f"{self.entity_types}")
            if not s.examples:
                raise DataError(f"{path}: split {name!r} is empty")
            splits[name] = Split(name, tuple(s.examples), str(path), {k: v for k, v in s.skipped.items() if v})
        fp = data_fingerprint([data_dir / cfg.data.train_file, data_dir / cfg.data.dev_file])
        return TaskDataset(tuple(self.tags), tuple(self.tags), splits["train"], splits["dev"], fp)

    def featurize(self, tokenizer, examples: Sequence, cfg) -> FeatureSet:
        from pipeline.labeling.bio import encode_token, token_tags

        raw = tokenizer.raw
        feats, offsets, cut = [], [], 0
        for i, ex in enumerate(examples):
            t = encode_token(raw, ex.text, cfg.max_seq_len)
            cut += t.truncated
            tags = token_tags(t.offsets, ex.entities, self.tag_index)
            feats.append(Feature(t.input_ids, np.zeros_like(t.input_ids), tags, i))
            offsets.append(t.offsets)
        return FeatureSet(self, feats, examples, tokenizer.pad_id, offsets, truncated=cut)

    def eval_batches(self, fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
        # Shaped like the served requests (data order, ``batch_size`` items each): with a per-batch INT8
        # form (quantization.batch_independent_int8: false) validated, offline and served numbers stay equal.
        return request_shaped_batches(fs, batch_size)

    def training_texts(self, examples) -> Iterator[str]:
        for e in examples:
            yield e.text

    def model_class(self):
        from pipeline.ernie_models import ErnieForTokenClassification

        return ErnieForTokenClassification

    def loss(self, logits, batch, pad_id: int):
        import paddle
        import paddle.nn.functional as F

        c = logits.shape[-1]
        return F.cross_entropy(logits.reshape([-1, c]), paddle.to_tensor(batch.targets).reshape([-1]), ignore_index=-100)

    def distill_loss(self, student_logits, teacher_logits, input_ids, pad_id: int):
        import paddle
        import paddle.nn.functional as F

        per_token = -(F.log_softmax(student_logits, axis=-1) * F.softmax(teacher_logits, axis=-1)).sum(-1)
        real = (input_ids != pad_id).astype("float32")
        return (per_token * real).sum() / paddle.clip(real.sum(), min=1.0)

    def entities(self, outputs, fs: FeatureSet) -> list[list]:
        from pipeline.labeling.bio import decode_tags

        return [decode_tags(np.asarray(o).argmax(-1), fs.extras[k], fs.examples[fs.features[k].example_index].text, self.tags)
                for k, o in enumerate(outputs)]

    def score(self, outputs, fs: FeatureSet) -> Score:
        from pipeline.labeling.metric import chunk_f1

        pred = self.entities(outputs, fs)
        gold = [fs.examples[f.example_index].entities for f in fs.features]
        s = chunk_f1(gold, pred)
        return Score("f1", s.f1, {"f1": s.f1, "precision": s.precision, "recall": s.recall,
                                   "gold_entities": s.gold, "predicted_entities": s.predicted, "correct_entities": s.correct})

    def predictions(self, outputs, fs: FeatureSet) -> list:
        return [tuple((e.type, e.start, e.end) for e in ents) for ents in self.entities(outputs, fs)]

    def shown(self, example, labels) -> dict:
        return {"text": example.text, "gold": self.shown_answer(example, _gold(example), labels)}

    def answer_counts(self, predictions, labels) -> dict[str, int]:
        counts = dict.fromkeys(self.entity_types, 0)  # entities by type, as the served tagger counts them
        for entities in predictions:
            for entity_type, _, _ in entities:
                counts[entity_type] += 1
        return counts

    def shown_answer(self, example, prediction, labels):
        """Each entity as [type, its text, its first character's offset]."""
        return [[t, example.text[s:e], s] for t, s, e in prediction]

    def is_right(self, example, prediction) -> bool:
        return set(prediction) == set(_gold(example))

    def metric_parts(self, example, prediction) -> tuple[float, ...]:
        """(entities right, entities given, entities it has), each a set as ``chunk_f1`` counts them."""
        gold, given = set(_gold(example)), set(prediction)
        return (float(len(gold & given)), float(len(given)), float(len(gold)))

    def metric_of(self, sums: np.ndarray) -> np.ndarray:
        return f1_of(sums)


def _gold(example) -> tuple:
    return tuple((e.type, e.start, e.end) for e in example.entities)


KIND = TokenClassification  # what pipeline.kinds.kind_class finds in the module named after the kind
