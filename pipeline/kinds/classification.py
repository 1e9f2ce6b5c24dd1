"""Sequence classification (single texts and sentence pairs): TNEWS, IFLYTEK, AFQMC, OCNLI, ...

A text has one label (softmax over the labels, cross-entropy, accuracy), or with ``classification.multi_label`` a
set of them: none, one or several (a sigmoid per label, binary cross-entropy, micro-F1 over (text, label) decisions;
PaddleNLP's multi_label application and Hugging Face's ``problem_type: multi_label_classification``).  The model and
its ``[B, C]`` logits are the same; only what a logit decides differs, so every stage runs both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import numpy as np

from pipeline.config_checks import number
from pipeline.errors import ConfigError
from pipeline.kinds.base import Feature, FeatureSet, Score, PipelineKind, f1_of, mean_of

ENCODE_CHUNK = 1024


@dataclass
class ClassificationConfig:
    """The task config's ``classification:`` section: one label per text, or a set (multi_label)."""

    multi_label: bool = False  # each text has a set of labels (none, one or several): a sigmoid per label
    threshold: float = 0.5  # multi_label: a label is predicted when its sigmoid probability is above this
    label_separator: str = ","  # multi_label: cuts a label field that is a string (a table's cell); JSON lists need none
    # multi_label: labels are paths in a hierarchy (PaddleNLP's hierarchical application: "A##B" under "A"); a text
    # with a label has its ancestors too, and each level is scored on its own
    hierarchy_separator: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.multi_label, bool):
            raise ConfigError(f"classification.multi_label must be true or false, got {self.multi_label!r}")
        number("classification.threshold", self.threshold, above=0.0)
        if self.threshold >= 1:
            raise ConfigError(f"classification.threshold must be below 1, got {self.threshold}")
        if not isinstance(self.label_separator, str) or not self.label_separator:
            raise ConfigError(f"classification.label_separator must be a non-empty string, got {self.label_separator!r}")
        if self.hierarchy_separator is not None:
            if not isinstance(self.hierarchy_separator, str) or not self.hierarchy_separator.strip():
                raise ConfigError("classification.hierarchy_separator must be a non-empty string (PaddleNLP's is "
                                  f"'##'), got {self.hierarchy_separator!r}")
            if self.hierarchy_separator in self.label_separator or self.label_separator in self.hierarchy_separator:
                raise ConfigError(f"classification.hierarchy_separator {self.hierarchy_separator!r} and label_separator "
                                  f"{self.label_separator!r} must not contain each other (one cuts a set, the other a path)")
        if not self.multi_label and (self.threshold, self.label_separator, self.hierarchy_separator) != (0.5, ",", None):
            raise ConfigError("classification.threshold, label_separator and hierarchy_separator are for multi_label: "
                              "true (a text with one label takes the most probable; a hierarchy's text has a label at "
                              "each level)")

    @property
    def cut(self) -> float:
        """The logit above which a label is predicted: the threshold's log-odds (0.0 exactly at 0.5), so that offline
        scoring and the served post-processing compare the same float32 logits with the same number."""
        return math.log(self.threshold / (1 - self.threshold))


class Classification(PipelineKind):
    name = "classification"
    metric = "accuracy"
    metric_label = "accuracy"
    data_formats = ("clue", "csv", "tsv")
    settings = ("classification", ClassificationConfig)  # the task config's classification: section

    def __init__(self, cfg=None):
        self.cc = (cfg.kind_settings if cfg is not None else None) or ClassificationConfig()
        self.multi = self.cc.multi_label
        if self.multi:
            self.metric, self.metric_label = "micro_f1", "micro-F1"
        self.hf_problem_type = (f"{'multi' if self.multi else 'single'}_label_classification",
                                "classification.multi_label")

    @classmethod
    def check_config(cls, cfg) -> None:
        """A multi-label task keeps every row (no ``data.skip_labels``) and is served with label sets, which
        FastDeploy's ernie_seqcls has no outputs for."""
        if not cfg.kind_settings.multi_label:
            return
        if cfg.data.skip_labels:
            raise ConfigError("data.skip_labels: a multi-label task keeps every row (a label it should not learn: "
                              "leave it out of labels:, and out of the data)")
        if cfg.package.api == "fastdeploy":
            raise ConfigError("package.api: fastdeploy: FastDeploy's ernie_seqcls answers one label per text; a "
                              "multi-label classifier is packaged with package.api ernie-bundle")

    def feature_params(self, cfg) -> dict:
        """A table's format and column names decide which of its cells are texts and labels: the same bytes read with
        other ``data.columns`` are other examples (JSON lines: none beyond the shared text fields, so their cached
        results stay)."""
        from pipeline.data import TABLE_DELIMITERS

        # other targets, loss and decisions (a setting left unset is left out: adding one keeps the cached results)
        params = {"multi_label": {k: v for k, v in asdict(self.cc).items() if v is not None}} if self.multi else {}
        if cfg.data.format not in TABLE_DELIMITERS:
            return params
        return {**params, "table": {"format": cfg.data.format, "columns": cfg.data.columns,
                                    "label_field": cfg.data.label_field}}

    def baseline_details(self, ev, fs: FeatureSet, labels) -> tuple[dict, str]:
        """Macro-F1, the majority class's accuracy (what a model that learned nothing scores) and per-class recall;
        multi-label: every metric and each label's F1."""
        if self.multi:
            details, line = super().baseline_details(ev, fs, labels)
            targets = np.array([f.target for f in fs.features], dtype=np.int64).reshape(len(fs), -1) == 1
            logits = ev.flat()
            by_threshold = {t: set_micro_f1(logits > math.log(t / (1 - t)), targets) for t in SCANNED_THRESHOLDS}
            best = max(by_threshold, key=lambda t: (by_threshold[t], -abs(t - self.cc.threshold)))
            if by_threshold[best] > ev.score.value:
                line += (f"; at classification.threshold {best} it would be {by_threshold[best]:.4f} (chosen on this "
                         "dev set, so an optimistic number)")
            details = {**details, "per_label_f1": dict(zip(labels, label_f1s(logits > self.cc.cut, targets))),
                       "micro_f1_by_threshold": {str(t): f for t, f in by_threshold.items()}}
            levels = self.level_scores(self.predictions(ev.outputs, fs), fs.examples, labels)
            if levels is not None:  # one path for FP32's levels here and the shipped form's in validate
                details.update(levels)
                line += "; " + ", ".join(f"level {d} micro-F1 {v['micro_f1']:.4f}" for d, v in levels["per_level"].items())
                if levels["texts_with_orphans"]:
                    line += (f"; {levels['texts_with_orphans']} dev texts are given a label without its parent (each "
                             "label is its own decision, as PaddleNLP's)")
            return details, line
        targets = np.array([f.target for f in fs.features], dtype=np.int64)
        pred = ev.flat().argmax(-1)
        majority = float(max((targets == c).mean() for c in range(len(labels))))
        recall = [float((pred[targets == c] == c).mean()) if (targets == c).any() else None for c in range(len(labels))]
        details = {"macro_f1": ev.score.metrics["macro_f1"], "majority_class_accuracy": majority,
                   "per_class_recall": dict(zip(labels, recall))}
        return details, f" (macro-F1 {ev.score.metrics['macro_f1']:.4f}, majority class {majority:.4f})"

    def manifest_sections(self, cfg) -> dict:
        """A pair task's served model takes ``text`` and ``text_pair`` (meta.json ``text_pair``), and a field that holds
        a list (CSL's keywords) was joined with ``text_pair_join``: clients send it joined the same way.  A multi-label
        one answers label sets cut at ``multi_label.threshold``."""
        pair = {"text_pair": True, "text_pair_join": cfg.data.join} if cfg.data.text_b else {}
        if not self.multi:
            return pair
        tree = {"hierarchy_separator": self.cc.hierarchy_separator} if self.cc.hierarchy_separator else {}
        return {**pair, "multi_label": {"threshold": self.cc.threshold, **tree}}

    def load(self, cfg):
        from pipeline.data import load_classification_data

        return load_classification_data(cfg, self.cc.label_separator if self.multi else None, self.cc.hierarchy_separator)

    def featurize(self, tokenizer, examples: Sequence, cfg=None) -> FeatureSet:
        feats, cut = [], 0
        for start in range(0, len(examples), ENCODE_CHUNK):
            chunk = examples[start : start + ENCODE_CHUNK]
            enc = tokenizer.encode([e.text_a for e in chunk], [e.text_b for e in chunk])
            cut += enc.truncated
            for j, e in enumerate(chunk):
                n = int(enc.lengths[j])
                feats.append(Feature(enc.input_ids[j, :n].copy(), enc.token_type_ids[j, :n].copy(),
                                     np.asarray(e.label, dtype=np.int64), start + j))
        return FeatureSet(self, feats, examples, tokenizer.pad_id, truncated=cut)

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

        if self.multi:  # a sigmoid per label
            return F.binary_cross_entropy_with_logits(logits, paddle.to_tensor(batch.targets.astype(np.float32)))
        return F.cross_entropy(logits, paddle.to_tensor(batch.targets))

    def decisions(self, output: np.ndarray) -> np.ndarray:
        """The class; multi-label: each label's yes or no."""
        return output > self.cc.cut if self.multi else super().decisions(output)

    def distill_loss(self, student_logits, teacher_logits, input_ids, pad_id: int):
        """Soft cross-entropy (DynaBERT); multi-label: each label's binary cross-entropy against the teacher's
        probability of it."""
        if not self.multi:
            return super().distill_loss(student_logits, teacher_logits, input_ids, pad_id)
        import paddle.nn.functional as F

        return F.binary_cross_entropy_with_logits(student_logits, F.sigmoid(teacher_logits))

    def score(self, outputs, fs: FeatureSet) -> Score:
        if self.multi:
            return self._score_sets(outputs, fs)
        logits = np.stack(outputs) if len(outputs) else np.zeros((0, 0), np.float32)
        labels = np.array([f.target for f in fs.features], dtype=np.int64)
        pred = logits.argmax(-1) if len(logits) else np.zeros(0, np.int64)
        acc = float((pred == labels).mean()) if len(labels) else 0.0
        classes = np.arange(logits.shape[-1] if logits.ndim == 2 else 0)
        return Score("accuracy", acc, {"accuracy": acc, "macro_f1": macro_f1(pred[:, None] == classes, labels[:, None] == classes)})

    def _score_sets(self, outputs, fs: FeatureSet) -> Score:
        """Micro-F1 over every (text, label) decision (PaddleNLP's multi_label metric), macro-F1 over the labels any
        dev text has or any is given, and the share of texts whose whole set is right."""
        width = len(fs.features[0].target) if len(fs) else 0
        targets = np.array([f.target for f in fs.features], dtype=np.int64).reshape(len(fs), width) == 1
        pred = (np.stack(outputs) if len(outputs) else np.zeros((0, width), np.float32)) > self.cc.cut
        micro = set_micro_f1(pred, targets)
        exact = float((pred == targets).all(axis=1).mean()) if len(fs) else 0.0
        return Score("micro_f1", micro, {"micro_f1": micro, "macro_f1": macro_f1(pred, targets), "exact_match": exact})

    def predictions(self, outputs, fs: FeatureSet) -> list:
        if self.multi:
            return [tuple(int(i) for i in np.flatnonzero(o > self.cc.cut)) for o in outputs]
        return [int(np.argmax(o)) for o in outputs]

    def level_scores(self, predictions, examples, labels) -> dict | None:
        if self.cc.hierarchy_separator is None:
            return None
        pred = np.zeros((len(predictions), len(labels)), dtype=bool)
        for i, chosen in enumerate(predictions):
            pred[i, list(chosen)] = True
        targets = np.array([e.label for e in examples], dtype=bool).reshape(len(examples), len(labels))
        return hierarchy_scores(pred, targets, labels, self.cc.hierarchy_separator)

    def _gold(self, example):
        return tuple(i for i, v in enumerate(example.label) if v) if self.multi else example.label

    def metric_parts(self, example, prediction) -> tuple[float, ...]:
        """(right, 1): accuracy; multi-label: (labels right, labels given, labels it has) for micro-F1."""
        if not self.multi:
            return (float(prediction == example.label), 1.0)
        gold = set(self._gold(example))
        return (float(len(gold & set(prediction))), float(len(prediction)), float(len(gold)))

    def metric_of(self, sums: np.ndarray) -> np.ndarray:
        return f1_of(sums, nothing=1.0) if self.multi else mean_of(sums)  # as set_micro_f1 scores no labels at all

    def shown(self, example, labels) -> dict:
        pair = {"text_pair": example.text_b} if example.text_b is not None else {}
        return {"text": example.text_a, **pair, "gold": self.shown_answer(example, self._gold(example), labels)}

    def answer_counts(self, predictions, labels) -> dict[str, int]:
        counts = dict.fromkeys(labels, 0)
        for p in predictions:
            for i in (p if self.multi else (p,)):
                counts[labels[i]] += 1
        return counts

    def shown_answer(self, example, prediction, labels):
        return [labels[i] for i in prediction] if self.multi else labels[prediction]

    def is_right(self, example, prediction) -> bool:
        return prediction == self._gold(example)


# the thresholds finetune-check scores the FP32 model's dev sets at, beside classification.threshold's
SCANNED_THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def set_micro_f1(pred: np.ndarray, targets: np.ndarray) -> float:
    """F1 over every (text, label) decision (``pred``, ``targets``: bool [N, C]); 1.0 when no text has or is given any."""
    tp, fp, fn = float((pred & targets).sum()), float((pred & ~targets).sum()), float((~pred & targets).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


def label_f1s(pred: np.ndarray, targets: np.ndarray) -> list[float | None]:
    """Each label's F1 over texts (``pred``, ``targets``: bool/0-1 [N, C]); None where no text has it or is given it."""
    pred, targets = pred.astype(bool), targets.astype(bool)
    tp, fp, fn = ((pred & targets).sum(0), (pred & ~targets).sum(0), (~pred & targets).sum(0))
    return [float(2 * t / (2 * t + p + n)) if t + p + n else None for t, p, n in zip(tp, fp, fn)]


def hierarchy_scores(pred: np.ndarray, targets: np.ndarray, labels: Sequence[str], separator: str) -> dict:
    """PaddleNLP's per-level report for a hierarchy (``pred``, ``targets``: bool [N, C]; a label's level is its
    depth, ``A##B`` is 2): each level's micro-F1, macro-F1 and exact match over that level's labels alone, and how many
    texts were given a label whose parent they were not given."""
    depth = np.array([len(label.split(separator)) for label in labels])
    per_level = {}
    for d in sorted(set(depth.tolist())):
        cols = depth == d
        p, t = pred[:, cols], targets[:, cols]
        per_level[str(d)] = {"labels": int(cols.sum()), "micro_f1": set_micro_f1(p, t), "macro_f1": macro_f1(p, t),
                             "exact_match": float((p == t).all(axis=1).mean()) if len(p) else 0.0}
    index = {label: i for i, label in enumerate(labels)}
    parent = [(i, index[up]) for i, label in enumerate(labels) if (up := label.rpartition(separator)[0]) in index]
    orphans = np.zeros(len(pred), dtype=bool)
    for child, up in parent:
        orphans |= pred[:, child] & ~pred[:, up]
    return {"per_level": per_level, "texts_with_orphans": int(orphans.sum())}


def macro_f1(pred: np.ndarray, targets: np.ndarray) -> float:
    """The mean of ``label_f1s`` over the labels some text has or is given (``pred``, ``targets``: bool [N, C]; one
    label per text is its one-hot row)."""
    f1s = [f for f in label_f1s(pred, targets) if f is not None]
    return float(np.mean(f1s)) if f1s else 0.0


KIND = Classification  # what pipeline.kinds.kind_class finds in the module named after the kind
