"""Extractive reading comprehension (CMRC2018, SQuAD format); CMRC2018's character-level EM and F1.

Long passages are cut into overlapping windows (``reading.doc_stride``); the model scores start and end
positions in every window; the best span over all windows of a question (at most
``reading.max_answer_len`` tokens) is mapped back to the passage through token offsets.  Windowing
and span selection are ``pipeline.reading.windows``/``spans``, the very code the served pre- and
post-processing models run.

CMRC2018's official train split is not available offline: ``reading.dev_for_training`` of the dev
set's *passages* (all questions of a passage on the same side) join trial.json for fine-tuning, the
rest is the evaluation set.  Scores are therefore on a part of dev, not the official dev number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from pipeline.config_checks import number
from pipeline.errors import ConfigError
from pipeline.kinds.base import (Feature, FeatureSet, Score, PipelineKind, masked_positions, mean_of,
                                 request_shaped_batches, span_feature_params, with_some_negatives)

LABELS = ("start", "end")


@dataclass
class ReadingConfig:
    """Reading comprehension only: windows over long passages and span limits (CMRC2018 defaults)."""

    doc_stride: int = 128  # consecutive windows start this many context tokens apart
    max_query_len: int = 64  # question tokens kept
    max_answer_len: int = 64  # longest answer span, in tokens (CMRC2018 answers reach 85; 30 cuts 5%)
    # CMRC2018's train split is not available offline: this fraction of the dev passages is used for
    # fine-tuning (with trial.json), the rest is the evaluation set.
    dev_for_training: float = 0.5
    split_seed: int = 42
    # Fine-tuning sees every window holding its answer and this fraction of the others (taught to point
    # at [CLS]); most windows of a long passage hold no answer, so this cuts training time ~3x.
    negative_window_ratio: float = 0.2
    max_eval_questions: int = 0  # > 0: evaluate on the first N held-out questions only (reported)

    def __post_init__(self) -> None:
        for name in ("doc_stride", "max_query_len", "max_answer_len"):
            number(f"reading.{name}", getattr(self, name), minimum=1, integer=True)
        number("reading.negative_window_ratio", self.negative_window_ratio, minimum=0.0, maximum=1.0)
        number("reading.max_eval_questions", self.max_eval_questions, minimum=0, integer=True)
        number("reading.dev_for_training", self.dev_for_training, above=0.0)
        if self.dev_for_training >= 1:
            raise ConfigError(f"reading.dev_for_training must be < 1 (the rest is the evaluation set), got {self.dev_for_training}")


class ReadingComprehension(PipelineKind):
    name = "reading_comprehension"
    metric = "f1"
    metric_label = "F1"
    data_formats = ("squad",)
    first_segment = ("max_query_len", "passage")
    truncated_what = "questions cut to max_query_len"  # passages are windowed, never cut
    settings = ("reading", ReadingConfig)  # the task config's reading: section
    token_level_outputs = True


    def manifest_sections(self, cfg) -> dict:
        r = cfg.kind_settings
        return {"reading": {"doc_stride": r.doc_stride, "max_query_len": r.max_query_len, "max_answer_len": r.max_answer_len}}

    def feature_params(self, cfg) -> dict:
        """The data format and files plus ``reading:`` (part of every data-reading stage's key)."""
        import dataclasses

        return {**span_feature_params(cfg), "reading": dataclasses.asdict(cfg.kind_settings)}

    def __init__(self, cfg):
        self.rc = cfg.kind_settings

    def load(self, cfg):
        from pipeline.data import Split, TaskDataset, data_fingerprint, resolve_local_dir
        from pipeline.errors import ConfigError, DataError
        from pipeline.reading.squad import read_squad, split_by_context

        if cfg.data.format != "squad":
            raise ConfigError(f"data.format: {cfg.data.format!r}: reading comprehension reads 'squad'")
        data_dir = resolve_local_dir(cfg)
        paths = {n: data_dir / f for n, f in (("train", cfg.data.train_file), ("dev", cfg.data.dev_file))}
        for name, path in paths.items():
            if not path.is_file():
                raise DataError(f"{path}: split {name!r} not found in data dir {data_dir}")
        train, dev = read_squad(paths["train"]), read_squad(paths["dev"])
        train_part, eval_part = split_by_context(dev.examples, self.rc.dev_for_training, self.rc.split_seed)
        held_out = len(eval_part)
        if self.rc.max_eval_questions and len(eval_part) > self.rc.max_eval_questions:
            eval_part = eval_part[: self.rc.max_eval_questions]
        if not eval_part:
            raise DataError(f"{paths['dev']}: no questions left for evaluation (reading.dev_for_training {self.rc.dev_for_training})")
        train_split = Split("train", tuple(train.examples) + tuple(train_part),
                            f"{paths['train']} + {len(train_part)} questions of {paths['dev']}", dict(train.skipped))
        dev_split = Split("dev", tuple(eval_part), f"{paths['dev']} ({len(eval_part)} of {held_out} held-out questions, "
                          f"{len(train_part)} others used for training)", dict(dev.skipped))
        fp = data_fingerprint(list(paths.values()), extra=f"{self.rc.dev_for_training}:{self.rc.split_seed}")
        return TaskDataset(LABELS, LABELS, train_split, dev_split, fp)

    def featurize(self, tokenizer, examples: Sequence, cfg) -> FeatureSet:
        from pipeline.reading.windows import make_windows, questions_cut

        answers = [(e.answers[0].start, e.answers[0].start + len(e.answers[0].text)) if e.answers else None for e in examples]
        wins = make_windows(tokenizer.raw, [e.question for e in examples], [e.context for e in examples],
                            max_seq_len=cfg.max_seq_len, doc_stride=self.rc.doc_stride, max_query_len=self.rc.max_query_len,
                            answers=answers)
        feats = [Feature(w.input_ids, w.token_type_ids, np.array([w.start_position, w.end_position], dtype=np.int64),
                         w.example_index) for w in wins]
        return FeatureSet(self, feats, examples, tokenizer.pad_id, wins, truncated=questions_cut(wins))

    def for_training(self, fs: FeatureSet, seed: int) -> FeatureSet:
        """Every window with its answer, plus ``reading.negative_window_ratio`` of the others (deterministic)."""
        return with_some_negatives(fs, lambda f: f.target[0] > 0 or f.target[1] > 0, self.rc.negative_window_ratio, seed)

    def eval_batches(self, fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
        # Shaped like the served requests (data order, ``batch_size`` items each): with a per-batch INT8
        # form (quantization.batch_independent_int8: false) validated, offline and served numbers stay equal.
        return request_shaped_batches(fs, batch_size)

    def training_texts(self, examples) -> Iterator[str]:
        seen = set()
        for e in examples:
            yield e.question
            if e.context not in seen:
                seen.add(e.context)
                yield e.context

    def model_class(self):
        from pipeline.ernie_models import ErnieForQuestionAnswering

        return ErnieForQuestionAnswering

    def loss(self, logits, batch, pad_id: int):
        import paddle
        import paddle.nn.functional as F

        # padding must not win the softmax over positions
        mask = masked_positions(paddle.to_tensor(batch.input_ids), pad_id)
        t = paddle.to_tensor(batch.targets)
        start = F.cross_entropy(logits[:, :, 0] + mask, t[:, 0])
        end = F.cross_entropy(logits[:, :, 1] + mask, t[:, 1])
        return (start + end) / 2

    def decisions(self, output: np.ndarray) -> np.ndarray:
        """The start and the end position of a window ([T, 2] -> [2]): argmax over tokens, not over the pair
        (which would compare a token's start logit with its end logit), and past [CLS]: its logits are the
        window's no-answer score, the largest in every window of the CMRC model (so every recipe agreed
        100%), and never a span the decoder can pick."""
        return np.argmax(output[1:], axis=0) + 1

    def distill_loss(self, student_logits, teacher_logits, input_ids, pad_id: int):
        import paddle.nn.functional as F

        mask = masked_positions(input_ids, pad_id).unsqueeze(-1)
        s, t = student_logits + mask, teacher_logits + mask
        # distributions over positions (axis 1), separately for start and end
        return -(F.log_softmax(s, axis=1) * F.softmax(t, axis=1)).sum(1).mean()

    def spans(self, outputs, fs: FeatureSet):
        from pipeline.reading.spans import best_spans

        return best_spans(list(outputs), fs.extras, [e.context for e in fs.examples], max_answer_len=self.rc.max_answer_len)

    def score(self, outputs, fs: FeatureSet) -> Score:
        from pipeline.reading.metric import cmrc_scores

        spans = self.spans(outputs, fs)
        s = cmrc_scores([sp.text if sp else "" for sp in spans], [[a.text for a in e.answers] for e in fs.examples])
        return Score("f1", s.f1, {"f1": s.f1, "em": s.em, "questions": s.count})

    def predictions(self, outputs, fs: FeatureSet) -> list:
        return [(sp.start, sp.end) if sp else None for sp in self.spans(outputs, fs)]

    def shown(self, example, labels) -> dict:
        return {"id": example.id, "question": example.question, "gold": [[a.text, a.start] for a in example.answers]}

    def shown_answer(self, example, prediction, labels):
        """The span as [its text, its first character's offset] (the same text may stand elsewhere); None: no answer."""
        return [example.context[prediction[0]:prediction[1]], prediction[0]] if prediction else None

    def is_right(self, example, prediction) -> bool:
        """CMRC2018's exact match (its normalization) with any gold answer's text."""
        from pipeline.reading.metric import em_score

        text = example.context[prediction[0]:prediction[1]] if prediction else ""
        return em_score(text, [a.text for a in example.answers]) == 1.0

    def metric_parts(self, example, prediction) -> tuple[float, ...]:
        """(CMRC2018's F1 of the question, 1): ``cmrc_scores``' F1 is their mean (no answer is "", as ``score`` reads
        it: 0)."""
        from pipeline.reading.metric import f1_score

        text = example.context[prediction[0]:prediction[1]] if prediction else ""
        return (f1_score(text, [a.text for a in example.answers]), 1.0)

    def metric_of(self, sums: np.ndarray) -> np.ndarray:
        return mean_of(sums)


KIND = ReadingComprehension  # what pipeline.kinds.kind_class finds in the module named after the kind
