"""UIE (universal information extraction): a prompt asks for one kind of span in a content.

Each (content, prompt) pair is windowed like reading comprehension (``[CLS] prompt [SEP] content_slice
[SEP]``, ``uie.doc_stride``, the very ``pipeline.reading.windows`` code) and the model scores every token as
a span start and a span end, each with its own sigmoid: a prompt may have no span, one or several.
The targets are ``[L, 2]`` 0/1; the loss binary cross-entropy; decoding ``pipeline.extraction.spans``
(the served post-processing runs the same file); the metric span F1 over all pairs.

Evaluation asks every prompt of the schema for every dev content (what serving does with the full schema);
training sees every pair with a result and ``uie.negative_ratio`` of those without.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from pipeline.config_checks import number
from pipeline.errors import ConfigError
from pipeline.kinds.base import (Feature, FeatureSet, Score, PipelineKind, f1_of, request_shaped_batches,
                                 span_feature_params, with_some_negatives)

LABELS = ("start", "end")


# CLUENER's entity types as UIE prompts (PaddleNLP's UIE examples name them in Chinese).
CLUENER_PROMPTS = {"address": "地址", "book": "书名", "company": "公司", "game": "游戏", "government": "政府",
                   "movie": "电影", "name": "姓名", "organization": "组织机构", "position": "职位", "scene": "景点"}


@dataclass
class UIEConfig:
    """UIE (schema-prompted extraction) only: windows, span decoding and how CLUENER becomes prompts."""

    doc_stride: int = 128  # long contents are cut into windows this many tokens apart (reading's windowing)
    max_prompt_len: int = 16  # prompt tokens; a longer prompt is refused, never cut (a cut prompt asks another question)
    position_prob: float = 0.5  # a token starts/ends a span when its sigmoid probability reaches this (UIE's default)
    max_span_len: int = 64  # tokens; longer start-end pairs are not spans
    # Training sees every prompt with a result and this fraction of the prompts without one (negatives:
    # the model must learn to answer nothing); evaluation and serving ask every prompt of the schema.
    negative_ratio: float = 0.3
    # Fine-tune loss weight of the tokens that do start/end a span (about 1 in 25 of the pointer targets).  1.0 is
    # PaddleNLP's UIE loss (plain mean BCE), made for uie-base, a checkpoint that already extracts; from a plain
    # encoder the pointers then stay below position_prob for a long time (measured: see tasks/uie.yaml).  The loss
    # shifts the logits by ln(positive_weight), so the weight does not bias the learned probabilities.
    positive_weight: float = 1.0
    max_eval_texts: int = 0  # > 0: evaluate on the first N dev contents only (every prompt each; reported)
    # data.format cluener: entity type -> prompt; the task's `labels` pick which types become prompts
    prompts: dict[str, str] = field(default_factory=lambda: dict(CLUENER_PROMPTS))

    def __post_init__(self) -> None:
        for name in ("doc_stride", "max_prompt_len", "max_span_len"):
            number(f"uie.{name}", getattr(self, name), minimum=1, integer=True)
        number("uie.position_prob", self.position_prob, above=0.0)
        if self.position_prob >= 1:
            raise ConfigError(f"uie.position_prob must be below 1, got {self.position_prob}")
        number("uie.negative_ratio", self.negative_ratio, minimum=0.0, maximum=1.0)
        number("uie.positive_weight", self.positive_weight, above=0.0)
        number("uie.max_eval_texts", self.max_eval_texts, minimum=0, integer=True)
        # Setting one prompt keeps the others (the task's `labels` choose which are asked anyway).
        self.prompts = {**CLUENER_PROMPTS, **self.prompts}
        for key, prompt in self.prompts.items():
            if not str(prompt).strip():
                raise ConfigError(f"uie.prompts.{key}: empty prompt")


class UniversalExtraction(PipelineKind):
    name = "uie"
    metric = "f1"
    metric_label = "span F1"
    # PaddleNLP's UIE JSON lines, or CLUENER converted (one prompt per entity type, uie.prompts)
    data_formats = ("uie", "cluener")
    first_segment = ("max_prompt_len", "content")
    settings = ("uie", UIEConfig)  # the task config's uie: section
    token_level_outputs = True
    token_level_targets = True
    loss_version = "logit-adjusted"  # uie.positive_weight shifts the logits by its log (see loss)


    uses_uie_checkpoints = True

    def manifest_sections(self, cfg) -> dict:
        u = cfg.kind_settings
        return {"uie": {"doc_stride": u.doc_stride, "max_prompt_len": u.max_prompt_len, "position_prob": u.position_prob,
                        "max_span_len": u.max_span_len, "schema": [u.prompts[t] for t in cfg.labels if t in u.prompts]}}

    def feature_params(self, cfg) -> dict:
        """The data format and files plus ``uie:`` (part of every data-reading stage's key)."""
        import dataclasses

        return {**span_feature_params(cfg), "uie": dataclasses.asdict(cfg.kind_settings), "labels": list(cfg.labels)}

    def __init__(self, cfg):
        self.uc = cfg.kind_settings
        self.entity_types = list(cfg.labels)

    # -- data ---------------------------------------------------------------------------------------
    def load(self, cfg):
        from pipeline.data import Split, TaskDataset, data_fingerprint, resolve_local_dir
        from pipeline.errors import ConfigError, DataError
        from pipeline.extraction.examples import from_labeled_texts, read_uie_lines
        from pipeline.labeling.readers import read_cluener

        data_dir = resolve_local_dir(cfg)
        paths = {n: data_dir / f for n, f in (("train", cfg.data.train_file), ("dev", cfg.data.dev_file))}
        for name, path in paths.items():
            if not path.is_file():
                raise DataError(f"{path}: split {name!r} not found in data dir {data_dir}")
        splits = {}
        for name, path in paths.items():
            skipped: dict[str, int] = {}
            if cfg.data.format == "uie":
                examples = read_uie_lines(path)
            else:  # cluener: every text asked the prompt of every entity type in `labels`
                if not self.entity_types:
                    raise ConfigError(f"task {cfg.task}: labels: list the entity types that become prompts (e.g. [name, company])")
                missing = [t for t in self.entity_types if t not in self.uc.prompts]
                if missing:
                    raise ConfigError(f"uie.prompts: no prompt for entity type {missing[0]!r} (labels lists it)")
                texts = read_cluener(path, keep_overlapping=True)
                unknown = sorted({e.type for ex in texts.examples for e in ex.entities} - set(self.entity_types))
                if unknown:
                    raise DataError(f"{path}: entity type {unknown[0]!r} is not one of the task's labels {self.entity_types}")
                if name == "dev" and self.uc.max_eval_texts and len(texts.examples) > self.uc.max_eval_texts:
                    skipped["beyond uie.max_eval_texts"] = len(texts.examples) - self.uc.max_eval_texts
                    texts = type(texts)(texts.examples[: self.uc.max_eval_texts], texts.source, texts.skipped)
                examples = from_labeled_texts(texts.examples, self.uc.prompts, self.entity_types, str(path))
            if not examples:
                raise DataError(f"{path}: split {name!r} is empty")
            splits[name] = Split(name, tuple(examples), str(path), skipped)
        fp = data_fingerprint(list(paths.values()), extra=f"{cfg.data.format}:{self.entity_types}:{sorted(self.uc.prompts.items())}")
        return TaskDataset(LABELS, LABELS, splits["train"], splits["dev"], fp)

    def featurize(self, tokenizer, examples: Sequence, cfg) -> FeatureSet:
        from pipeline.errors import DataError
        from pipeline.reading.windows import make_windows

        raw = tokenizer.raw
        for prompt in sorted({e.prompt for e in examples}):
            n = len(raw.encode(prompt, add_special_tokens=False).ids)
            if n > self.uc.max_prompt_len:
                where = next(e.source for e in examples if e.prompt == prompt)
                raise DataError(f"{where}: prompt {prompt!r} is {n} tokens, over uie.max_prompt_len {self.uc.max_prompt_len}")
        wins = make_windows(raw, [e.prompt for e in examples], [e.content for e in examples], max_seq_len=cfg.max_seq_len,
                            doc_stride=self.uc.doc_stride, max_query_len=self.uc.max_prompt_len)
        feats = [Feature(w.input_ids, w.token_type_ids, pointer_targets(w.offsets, examples[w.example_index].spans),
                         w.example_index) for w in wins]
        return FeatureSet(self, feats, examples, tokenizer.pad_id, wins)

    def for_training(self, fs: FeatureSet, seed: int) -> FeatureSet:
        """Every window holding a span, plus ``uie.negative_ratio`` of the others (deterministic)."""
        return with_some_negatives(fs, lambda f: f.target.any(), self.uc.negative_ratio, seed)

    def eval_batches(self, fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
        return request_shaped_batches(fs, batch_size)

    def training_texts(self, examples) -> Iterator[str]:
        seen = set()
        for e in examples:
            for text in (e.prompt, e.content):
                if text not in seen:
                    seen.add(text)
                    yield text

    # -- model --------------------------------------------------------------------------------------
    def model_class(self):
        from pipeline.ernie_models import ErnieForUIE

        return ErnieForUIE

    def loss(self, logits, batch, pad_id: int):
        import paddle
        import paddle.nn.functional as F

        targets = paddle.to_tensor(batch.targets)
        real = (targets >= 0).astype("float32")  # padding rows are -100
        gold = targets.clip(min=0).astype("float32")
        w = self.uc.positive_weight
        # Weight w on the positive terms alone would teach the heads odds w times the true ones: position_prob
        # 0.5 would then decide at a true 1/(1+w) (4.2 span-F1 points lost on CLUENER-UIE, see tasks/uie.yaml).
        # Adding ln w to the logits inside the loss (logit adjustment, Menon et al. 2021) moves that factor out of
        # the model: its own logits stay calibrated, so 0.5 means 0.5 in training's evaluation, in compress's
        # distillation targets and in served probabilities.  w = 1 is PaddleNLP's loss exactly.
        per_token = F.binary_cross_entropy_with_logits(logits + math.log(w), gold, reduction="none")
        weight = real * (1.0 + (w - 1.0) * gold)  # uie.positive_weight on span starts/ends
        return (per_token * weight).sum() / real.sum().clip(min=1.0)

    def decisions(self, output: np.ndarray) -> np.ndarray:
        """Which tokens start and end spans ([T, 2] booleans at probability 0.5, i.e. logit 0)."""
        return np.asarray(output) >= 0

    def distill_loss(self, student_logits, teacher_logits, input_ids, pad_id: int):
        import paddle.nn.functional as F

        real = (input_ids != pad_id).astype("float32").unsqueeze(-1)
        per_token = F.binary_cross_entropy_with_logits(student_logits, F.sigmoid(teacher_logits), reduction="none")
        return (per_token * real).sum() / (real.sum() * 2).clip(min=1.0)

    # -- scoring ------------------------------------------------------------------------------------
    def spans(self, outputs, fs: FeatureSet):
        from pipeline.extraction.spans import decode_spans

        return decode_spans(list(outputs), fs.extras, [e.content for e in fs.examples],
                            position_prob=self.uc.position_prob, max_span_len=self.uc.max_span_len)

    def score(self, outputs, fs: FeatureSet) -> Score:
        from pipeline.extraction.metric import span_scores

        found = self.spans(outputs, fs)
        s = span_scores([[(sp.start, sp.end) for sp in spans] for spans in found], [e.spans for e in fs.examples])
        return Score("f1", s.f1, {"f1": s.f1, "precision": s.precision, "recall": s.recall, "pairs": len(fs.examples),
                                  "gold_spans": s.gold})

    def predictions(self, outputs, fs: FeatureSet) -> list:
        return [tuple((sp.start, sp.end) for sp in spans) for spans in self.spans(outputs, fs)]

    def shown(self, example, labels) -> dict:
        return {"prompt": example.prompt, "content": example.content,
                "gold": self.shown_answer(example, example.spans, labels)}

    def shown_answer(self, example, prediction, labels):
        """Each span as [its text, its first character's offset]."""
        return [[example.content[s:e], s] for s, e in prediction]

    def is_right(self, example, prediction) -> bool:
        return set(prediction) == set(example.spans)

    def metric_parts(self, example, prediction) -> tuple[float, ...]:
        """(spans right, spans given, spans it has), each a set as ``span_scores`` counts them."""
        gold, given = set(example.spans), set(prediction)
        return (float(len(gold & given)), float(len(given)), float(len(gold)))

    def metric_of(self, sums: np.ndarray) -> np.ndarray:
        return f1_of(sums)


def pointer_targets(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """int64 [L, 2]: 1 where a gold span starts (column 0) or ends (column 1) inside this window's content part.
    A span is marked only when both its first and last characters fall in the window (like MRC's answers)."""
    offsets = np.asarray(offsets).reshape(-1, 2)
    target = np.zeros((len(offsets), 2), dtype=np.int64)
    inside = np.nonzero(offsets[:, 0] >= 0)[0]
    if not len(inside):
        return target
    starts, ends = offsets[inside, 0], offsets[inside, 1]
    for a, b in spans:
        first = int(np.searchsorted(ends, a, side="right"))  # first token ending after char a
        last = int(np.searchsorted(starts, b, side="left")) - 1  # last token starting before char b
        if first >= len(inside) or last < first or starts[first] > a or ends[last] < b:
            continue  # the span's edges are not both in this window
        target[inside[first], 0] = 1
        target[inside[last], 1] = 1
    return target


KIND = UniversalExtraction  # what pipeline.kinds.kind_class finds in the module named after the kind
