"""Sequence classification (single texts and sentence pairs): TNEWS, IFLYTEK, AFQMC, OCNLI, ..."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from pipeline.kinds.base import Feature, FeatureSet, Score, PipelineKind

ENCODE_CHUNK = 1024


class Classification(PipelineKind):
    name = "classification"
    metric = "accuracy"
    metric_label = "accuracy"
    data_formats = ("clue", "csv", "tsv")


    def feature_params(self, cfg) -> dict:
        """A table's format and column names decide which of its cells are texts and labels: the same bytes read with
        other ``data.columns`` are other examples (JSON lines: none beyond the shared text fields, so their cached
        results stay)."""
        from pipeline.data import TABLE_DELIMITERS

        if cfg.data.format not in TABLE_DELIMITERS:
            return {}
        return {"table": {"format": cfg.data.format, "columns": cfg.data.columns, "label_field": cfg.data.label_field}}

    def baseline_details(self, ev, fs: FeatureSet, labels) -> tuple[dict, str]:
        """Macro-F1, the majority class's accuracy (what a model that learned nothing scores) and per-class recall."""
        targets = np.array([f.target for f in fs.features], dtype=np.int64)
        pred = ev.flat().argmax(-1)
        majority = float(max((targets == c).mean() for c in range(len(labels))))
        recall = [float((pred[targets == c] == c).mean()) if (targets == c).any() else None for c in range(len(labels))]
        details = {"macro_f1": ev.score.metrics["macro_f1"], "majority_class_accuracy": majority,
                   "per_class_recall": dict(zip(labels, recall))}
        return details, f" (macro-F1 {ev.score.metrics['macro_f1']:.4f}, majority class {majority:.4f})"

    def manifest_sections(self, cfg) -> dict:
        """A pair task's served model takes ``text`` and ``text_pair`` (meta.json ``text_pair``), and a field that holds
        a list (CSL's keywords) was joined with ``text_pair_join``: clients send it joined the same way."""
        return {"text_pair": True, "text_pair_join": cfg.data.join} if cfg.data.text_b else {}

    def load(self, cfg):
        from pipeline.data import load_classification_data

        return load_classification_data(cfg)

    def featurize(self, tokenizer, examples: Sequence, cfg=None) -> FeatureSet:
        feats = []
        for start in range(0, len(examples), ENCODE_CHUNK):
            chunk = examples[start : start + ENCODE_CHUNK]
            enc = tokenizer.encode([e.text_a for e in chunk], [e.text_b for e in chunk])
            for j, e in enumerate(chunk):
                n = int(enc.lengths[j])
                feats.append(Feature(enc.input_ids[j, :n].copy(), enc.token_type_ids[j, :n].copy(),
                                     np.asarray(e.label, dtype=np.int64), start + j))
        return FeatureSet(self, feats, examples, tokenizer.pad_id)

    def training_texts(self, examples) -> Iterator[str]:
        for e in examples:
            yield e.text_a
            if e.text_b:
                yield e.text_b

    def model_class(self):
        from pipeline.ernie_models import ErnieForSequenceClassification

        return ErnieForSequenceClassification

    def loss(self, logits, batch, pad_id: int):
        import paddle
        import paddle.nn.functional as F

        return F.cross_entropy(logits, paddle.to_tensor(batch.targets))

    def score(self, outputs, fs: FeatureSet) -> Score:
        logits = np.stack(outputs) if len(outputs) else np.zeros((0, 0), np.float32)
        labels = np.array([f.target for f in fs.features], dtype=np.int64)
        pred = logits.argmax(-1) if len(logits) else np.zeros(0, np.int64)
        acc = float((pred == labels).mean()) if len(labels) else 0.0
        return Score("accuracy", acc, {"accuracy": acc, "macro_f1": macro_f1(pred, labels, logits.shape[-1] if logits.ndim == 2 else 0)})

    def predictions(self, outputs, fs: FeatureSet) -> list:
        return [int(np.argmax(o)) for o in outputs]


def macro_f1(pred: np.ndarray, labels: np.ndarray, num_labels: int) -> float:
    f1s = []
    for c in range(num_labels):
        tp = float(((pred == c) & (labels == c)).sum())
        fp = float(((pred == c) & (labels != c)).sum())
        fn = float(((pred != c) & (labels == c)).sum())
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else 0.0


KIND = Classification  # what pipeline.kinds.kind_class finds in the module named after the kind
