"""What differs between task kinds, in one place: features, loss, metric and the model head.

Every kind turns its examples into **features** (one model input row each: a text, a sentence pair,
or one window of a long passage), and its model maps ``input_ids``/``token_type_ids`` to ONE output
``logits``:

* classification           ``[B, C]``
* token_classification     ``[B, T, num_tags]``
* reading_comprehension    ``[B, T, 2]`` (start, end; softmax over positions)
* uie                      ``[B, T, 2]`` (start, end; a sigmoid per token)

So training loops, PTQ calibration, export, every backend session and the benchmarks are the same
code for all kinds; only :class:`PipelineKind` knows how to read the data, what the targets are, which
loss to train with and how raw outputs become the task's metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np


@dataclass(frozen=True)
class Feature:
    input_ids: np.ndarray  # int64 [L], no padding
    token_type_ids: np.ndarray  # int64 [L]
    target: np.ndarray  # classification: int64 [] (label); tokens: int64 [L] (-100 = ignored); reading: int64 [2];
    # uie: int64 [L, 2] (1 where a span starts / ends)
    example_index: int  # the example this row belongs to (several windows share one for long passages)


@dataclass(frozen=True)
class Batch:
    indices: np.ndarray  # feature positions in the FeatureSet
    input_ids: np.ndarray  # int64 [B, T], padded with the vocabulary's [PAD]
    token_type_ids: np.ndarray
    targets: np.ndarray  # stacked targets; token targets padded with -100


@dataclass(frozen=True)
class Score:
    """A task's result on a split: ``value`` is the primary metric (a fraction), ``metrics`` all of them."""

    name: str  # accuracy | entity_f1 | f1
    value: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class FeatureSet:
    """The features of one split plus what scoring needs (the examples, per-feature extras)."""

    kind: "PipelineKind"
    features: Sequence[Feature]
    examples: Sequence[Any]
    pad_id: int
    extras: Sequence[Any] = ()  # per feature: token offsets (NER) or the window (reading)
    truncated: int | None = None  # items cut (the kind's truncated_what: texts to max_seq_len, questions to
    # max_query_len); None where a kind cuts none (UIE refuses a prompt over max_prompt_len, and windows its texts)

    def __len__(self) -> int:
        return len(self.features)

    def lengths(self) -> np.ndarray:
        return np.array([len(f.input_ids) for f in self.features], dtype=np.int64)

    def batch(self, indices: Sequence[int]) -> Batch:
        chosen = [self.features[i] for i in indices]
        width = max((len(f.input_ids) for f in chosen), default=0)
        ids = np.full((len(chosen), width), self.pad_id, dtype=np.int64)
        types = np.zeros((len(chosen), width), dtype=np.int64)
        for j, f in enumerate(chosen):
            ids[j, : len(f.input_ids)] = f.input_ids
            types[j, : len(f.token_type_ids)] = f.token_type_ids
        if self.kind.token_level_targets:
            # [L] per feature (a tag per token) or [L, k] (UIE: start/end flags per token)
            extra = tuple(chosen[0].target.shape[1:]) if chosen else ()
            targets = np.full((len(chosen), width, *extra), -100, dtype=np.int64)
            for j, f in enumerate(chosen):
                targets[j, : len(f.target)] = f.target
        else:
            targets = np.array([f.target for f in chosen], dtype=np.int64)
        return Batch(np.asarray(indices), ids, types, targets)

    def subset(self, indices: Sequence[int]) -> "FeatureSet":
        """Some features (for calibration); scoring a subset is not meaningful and not offered."""
        return FeatureSet(self.kind, [self.features[i] for i in indices], self.examples, self.pad_id,
                          [self.extras[i] for i in indices] if self.extras else ())

    def score(self, outputs: Sequence[np.ndarray]) -> Score:
        return self.kind.score(outputs, self)

    def predictions(self, outputs: Sequence[np.ndarray]) -> list:
        return self.kind.predictions(outputs, self)


class PipelineKind:
    """What the pipeline does differently for one task kind: the base of the ``KIND`` class of each
    ``pipeline.kinds.<kind>`` module.  Not the list of kinds (``pipeline.contract.TaskKind``, whose values are the
    config's ``type``): serving's sides of a kind are ``serving.bundle.kinds.BundleKind`` and
    ``serving.tools.kinds.ToolKind``."""

    name: str = ""
    metric: str = ""  # key of the primary metric in Score.metrics
    metric_label: str = ""  # how reports name it
    token_level_outputs: bool = False  # outputs are per token ([T, C]) rather than per row ([C])
    token_level_targets: bool = False
    # Names a change to ``loss`` that makes earlier fine-tunes stale; non-empty, it joins the finetune stage's key
    # (a stage version bump would re-train every kind's models).
    loss_version: str = ""

    # -- config ---------------------------------------------------------------------------------------
    # the ``data.format`` values this kind reads (the task config refuses others, naming these)
    data_formats: tuple[str, ...] = ()
    # its own section of the task config: the YAML key and the dataclass it builds (checked in its __post_init__ like
    # every section), held as ``cfg.kind_settings``; None: the kind has no settings of its own
    settings: tuple[str, type] | None = None
    # for kinds whose model input is a first segment (question, prompt) followed by windows of a text: the key of
    # ``settings`` capping the first segment ([CLS] first [SEP] text [SEP] must leave the text room), and what the
    # text is called; None: no first segment
    first_segment: tuple[str, str] | None = None
    # what ``FeatureSet.truncated`` counts, as the model card and the alerts say it
    truncated_what: str = "texts cut to max_seq_len"

    def __init__(self, cfg=None):
        """A kind that reads nothing of the task config beyond what each call is given."""

    @classmethod
    def check_config(cls, cfg) -> None:
        """What the task config (``TaskConfig.__post_init__``) is refused for by this kind beyond its own section's
        checks, naming the key: nothing by default."""

    # (Hugging Face config.json's problem_type a trained head must have when it says one, the task config key that
    # decides it): a sequence classifier's single- or multi-label; (None, "") for kinds it does not apply to
    hf_problem_type: tuple[str | None, str] = (None, "")

    # -- data ---------------------------------------------------------------------------------------
    uses_uie_checkpoints: bool = False  # finetune takes a PaddleNLP UIE checkpoint directory as is (converted)

    def feature_params(self, cfg) -> dict:
        """The config values that change this kind's features beyond the shared ones (part of the cache key of every
        stage that reads the data): none for classification."""
        return {}

    def baseline_details(self, ev, fs: FeatureSet, labels) -> tuple[dict, str]:
        """(what finetune-check's baseline adds for this kind, the log line's detail): every metric by default."""
        return {}, " (" + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in ev.score.metrics.items()) + ")"

    def manifest_sections(self, cfg) -> dict:
        """What meta.json carries for this kind's served pre/post-processing beyond the model contract (the windowing
        and decoding it was evaluated with): none for classification."""
        return {}

    def load(self, cfg) -> "Any":  # -> pipeline.data.TaskDataset
        raise NotImplementedError

    def featurize(self, tokenizer, examples: Sequence[Any], cfg) -> FeatureSet:
        raise NotImplementedError

    def eval_batches(self, fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
        """Evaluation batches: sorted by length (least padding); results are scattered back by index."""
        order = np.argsort(fs.lengths(), kind="stable")
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def for_training(self, fs: FeatureSet, seed: int) -> FeatureSet:
        """The features a training loop should see (all of them, unless the kind says otherwise)."""
        return fs

    def training_texts(self, examples: Sequence[Any]) -> Iterator[str]:
        """All text a character vocabulary for the from-scratch model should cover."""
        raise NotImplementedError

    # -- model --------------------------------------------------------------------------------------
    def model_class(self):
        raise NotImplementedError

    def loss(self, logits, batch: Batch, pad_id: int):
        raise NotImplementedError

    def decisions(self, output: np.ndarray) -> np.ndarray:
        """What the model decides for one feature's output (the INT8 search counts rows whose decisions
        equal FP32's): the class, or the tag of every token."""
        return np.argmax(output, axis=-1)

    def distill_loss(self, student_logits, teacher_logits, input_ids, pad_id: int):
        """Soft cross-entropy between student and teacher distributions (DynaBERT)."""
        import paddle.nn.functional as F

        return -(F.log_softmax(student_logits, axis=-1) * F.softmax(teacher_logits, axis=-1)).sum(-1).mean()

    # -- scoring ------------------------------------------------------------------------------------
    def score(self, outputs: Sequence[np.ndarray], fs: FeatureSet) -> Score:
        raise NotImplementedError

    def predictions(self, outputs: Sequence[np.ndarray], fs: FeatureSet) -> list:
        """One comparable prediction per example (parity between backends counts equal ones)."""
        raise NotImplementedError

    # -- an example as a person reads it (validate's changed.jsonl: the answers compression changed) --------------
    def shown(self, example, labels: Sequence[str]) -> dict:
        """The example's input and its gold answer (``gold``), in words."""
        raise NotImplementedError

    def shown_answer(self, example, prediction, labels: Sequence[str]):
        """One of ``predictions``' items for ``example``, in words (as ``shown`` gives the gold)."""
        raise NotImplementedError

    def is_right(self, example, prediction) -> bool:
        """Whether a prediction is the example's gold answer whole (the class, the label set, every entity, the span)."""
        raise NotImplementedError

    # -- the metric example by example (validate resamples dev examples for the drop's interval) -------------
    def metric_parts(self, example, prediction) -> tuple[float, ...]:
        """What one example adds to the primary metric, as numbers that add over examples: ``metric_of`` of their sums
        over a split is ``score``'s value on it (accuracy: right and one; F1: correct, predicted and gold)."""
        raise NotImplementedError

    def metric_of(self, sums: np.ndarray) -> np.ndarray:
        """The primary metric of ``metric_parts`` summed over examples: ``sums`` [..., k] -> [...] (fractions)."""
        raise NotImplementedError

    def describe(self, score: Score) -> str:
        return f"{self.metric_label} {score.value:.4f}"

    def answer_counts(self, predictions: Sequence, labels: Sequence[str]) -> dict[str, int] | None:
        """How often ``predictions`` (one per dev example) give each answer label, counted as the served model counts
        ``ernie_bundle_answers_total`` (serving/triton/served_metrics.py); None: this kind's model counts none."""
        return None

    def level_scores(self, predictions: Sequence, examples: Sequence, labels: Sequence[str]) -> dict | None:
        """Scores of ``predictions`` (one per dev example) by level of a label hierarchy, as finetune-check reports them
        for FP32 (validate reports the shipped form's beside them); None: the task has no hierarchy."""
        return None


def mean_of(sums: np.ndarray) -> np.ndarray:
    """``metric_of`` for a metric that is a mean over examples, parts (its value, 1): accuracy, CMRC2018's F1."""
    sums = np.asarray(sums, dtype=np.float64)
    return np.divide(sums[..., 0], sums[..., 1], out=np.zeros(sums.shape[:-1]), where=sums[..., 1] > 0)


def f1_of(sums: np.ndarray, nothing: float = 0.0) -> np.ndarray:
    """``metric_of`` for a micro-F1, parts (correct, predicted, gold): 2 correct / (predicted + gold); ``nothing``
    where no example has or is given anything (entity and span F1 score it 0, multi-label's micro-F1 1)."""
    sums = np.asarray(sums, dtype=np.float64)
    both = sums[..., 1] + sums[..., 2]
    return np.divide(2 * sums[..., 0], both, out=np.full(sums.shape[:-1], nothing), where=both > 0)


def span_feature_params(cfg) -> dict:
    """What changes the features of every kind but classification: its type, data format and files."""
    return {"type": cfg.type, "format": cfg.data.format, "files": [cfg.data.train_file, cfg.data.dev_file]}


def with_some_negatives(fs: FeatureSet, positive, ratio: float, seed: int) -> FeatureSet:
    """Every window ``positive(feature)`` holds for, plus ``ratio`` of the others, drawn with ``seed`` in feature
    order (the span kinds' training sets: windows without a span teach the model to answer nothing)."""
    rng = np.random.RandomState(seed)
    keep = [i for i, f in enumerate(fs.features) if positive(f) or rng.random_sample() < ratio]
    return fs.subset(keep) if len(keep) < len(fs) else fs


def request_shaped_batches(fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
    """``batch_size`` examples per batch in data order, all features (windows) of an example together.

    Exactly the batches a client sending ``batch_size`` items per request in data order makes the served
    model run, so even an INT8 model whose activation scales are taken per batch (ORT's dynamic
    quantization) gives the offline and the served runs the same numbers.
    """
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(fs.features):
        by_example.setdefault(f.example_index, []).append(i)
    keys = sorted(by_example)
    return [np.array([i for k in keys[j : j + batch_size] for i in by_example[k]], dtype=np.int64)
            for j in range(0, len(keys), batch_size)]


def trim_outputs(kind: PipelineKind, out: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Split a padded batch output into per-feature arrays (token-level outputs cut to each length)."""
    if kind.token_level_outputs:
        return [out[j, : int(n)] for j, n in enumerate(lengths)]
    return [out[j] for j in range(len(lengths))]


def masked_positions(input_ids, pad_id: int):
    """float32 [B, T]: 0 for real tokens, -1e4 for padding (added to logits before a softmax over T)."""
    return (input_ids == pad_id).astype("float32") * -1e4

