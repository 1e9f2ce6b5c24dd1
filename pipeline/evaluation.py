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
