"""Turning examples into padded numpy batches, with length bucketing for speed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from pipeline.data import Example
from pipeline.tokenizer import Tokenizer


@dataclass(frozen=True)
class Batch:
    indices: np.ndarray  # positions of these examples in the split
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    labels: np.ndarray


def encode_batch(tokenizer: Tokenizer, examples: Sequence[Example], indices: np.ndarray) -> Batch:
    chosen = [examples[i] for i in indices]
    enc = tokenizer.encode([e.text_a for e in chosen], [e.text_b for e in chosen])
    labels = np.array([e.label for e in chosen], dtype=np.int64)
    return Batch(np.asarray(indices), enc.input_ids, enc.token_type_ids, labels)


def train_batch_order(examples: Sequence[Example], batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Deterministic per (seed, epoch): shuffle, sort by length inside chunks of 50 batches, shuffle batches.

    Bucketing cuts padding (and CPU time) a lot on short texts while keeping batches random; the
    order is reproducible so a resumed run can skip exactly the batches it already trained on.
    """
    rng = np.random.RandomState((seed * 1_000_003 + epoch) % (2**32))
    order = rng.permutation(len(examples))
    chunk = batch_size * 50
    lengths = np.array([len(e.text_a) + len(e.text_b or "") for e in examples])
    parts = [order[i : i + chunk] for i in range(0, len(order), chunk)]
    order = np.concatenate([p[np.argsort(lengths[p], kind="stable")] for p in parts])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def eval_batch_order(examples: Sequence[Example], batch_size: int) -> list[np.ndarray]:
    """Sorted by length (less padding); callers scatter results back by ``Batch.indices``."""
    lengths = np.array([len(e.text_a) + len(e.text_b or "") for e in examples])
    order = np.argsort(lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def iter_batches(tokenizer: Tokenizer, examples: Sequence[Example], order: list[np.ndarray]) -> Iterator[Batch]:
    for idx in order:
        yield encode_batch(tokenizer, examples, idx)
