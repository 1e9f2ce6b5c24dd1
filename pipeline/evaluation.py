"""Evaluating a classifier on a split: logits for every example and accuracy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipeline.batching import eval_batch_order, iter_batches
from pipeline.data import Example
from pipeline.progress import progress
from pipeline.tokenizer import Tokenizer


@dataclass(frozen=True)
class Evaluation:
    logits: np.ndarray  # [n, num_labels], in split order
    labels: np.ndarray  # [n]

    @property
    def predictions(self) -> np.ndarray:
        return self.logits.argmax(-1)

    @property
    def accuracy(self) -> float:
        return float((self.predictions == self.labels).mean())

    def per_class_recall(self, num_labels: int) -> list[float | None]:
        out: list[float | None] = []
        for c in range(num_labels):
            mask = self.labels == c
            out.append(float((self.predictions[mask] == c).mean()) if mask.any() else None)
        return out

    def macro_f1(self, num_labels: int) -> float:
        f1s = []
        for c in range(num_labels):
            tp = float(((self.predictions == c) & (self.labels == c)).sum())
            fp = float(((self.predictions == c) & (self.labels != c)).sum())
            fn = float(((self.predictions != c) & (self.labels == c)).sum())
            if tp + fp + fn == 0:
                continue
            f1s.append(2 * tp / (2 * tp + fp + fn))
        return float(np.mean(f1s)) if f1s else 0.0


def evaluate_dygraph(model, tokenizer: Tokenizer, examples: Sequence[Example], batch_size: int, desc: str = "eval") -> Evaluation:
    """Run a paddle dygraph classifier over ``examples`` without gradients."""
    import paddle

    was_training = model.training
    model.eval()
    logits = None
    order = eval_batch_order(examples, batch_size)
    with paddle.no_grad():
        for batch in progress(iter_batches(tokenizer, examples, order), total=len(order), desc=desc, unit="batch"):
            out = model(paddle.to_tensor(batch.input_ids), token_type_ids=paddle.to_tensor(batch.token_type_ids))
            out = out.numpy()
            if logits is None:
                logits = np.zeros((len(examples), out.shape[-1]), dtype=np.float32)
            logits[batch.indices] = out
    if was_training:
        model.train()
    labels = np.array([e.label for e in examples], dtype=np.int64)
    return Evaluation(logits if logits is not None else np.zeros((0, 0), np.float32), labels)


def evaluate_session(session, tokenizer: Tokenizer, examples: Sequence[Example], batch_size: int, desc: str = "eval") -> Evaluation:
    """Evaluate any backend session (``.run(input_ids, token_type_ids) -> logits``) over ``examples``."""
    logits = None
    order = eval_batch_order(examples, batch_size)
    for batch in progress(iter_batches(tokenizer, examples, order), total=len(order), desc=desc, unit="batch"):
        out = np.asarray(session.run(batch.input_ids, batch.token_type_ids))
        if logits is None:
            logits = np.zeros((len(examples), out.shape[-1]), dtype=np.float32)
        logits[batch.indices] = out
    labels = np.array([e.label for e in examples], dtype=np.int64)
    return Evaluation(logits if logits is not None else np.zeros((0, 0), np.float32), labels)


@dataclass(frozen=True)
class ThroughputResult:
    batch_size: int
    sentences_per_s: float  # median over repeats
    latency_ms_p50: float  # per batch
    latency_ms_p95: float
    latency_ms_p99: float
    batches: int  # distinct batches timed per repeat


def measure_throughput(
    session,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    batch_size: int,
    *,
    warmup: int = 2,
    repeats: int = 5,
    max_batches: int | None = None,
) -> ThroughputResult:
    """Throughput on real examples with dynamic padding (the dev length distribution), batch by batch.

    Batches are pre-tokenized so only the model is timed.  Each repeat runs the same batches; the
    reported throughput is the median over repeats (machines here are shared and noisy), latencies are
    percentiles over every timed batch.
    """
    import time

    rng = np.random.RandomState(0)
    idx = rng.permutation(len(examples))
    batches = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    batches = [b for b in batches if len(b) == batch_size] or batches[:1]
    if max_batches:
        batches = batches[:max_batches]
    from pipeline.batching import encode_batch

    encoded = [encode_batch(tokenizer, examples, b) for b in batches]
    for b in encoded[: max(warmup, 0)]:
        session.run(b.input_ids, b.token_type_ids)
    rates, lat = [], []
    for _ in range(max(repeats, 1)):
        n, t_total = 0, 0.0
        for b in encoded:
            t0 = time.perf_counter()
            session.run(b.input_ids, b.token_type_ids)
            dt = time.perf_counter() - t0
            lat.append(dt * 1000)
            t_total += dt
            n += len(b.labels)
        rates.append(n / t_total if t_total > 0 else 0.0)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return ThroughputResult(batch_size, float(np.median(rates)), float(p50), float(p95), float(p99), len(encoded))
