"""Batch orders over a FeatureSet (see ``pipeline.kinds``), with length bucketing for speed."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from pipeline.kinds.base import Batch, FeatureSet

__all__ = ["Batch", "eval_batch_order", "iter_batches", "train_batch_order"]


def train_batch_order(fs: FeatureSet, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Deterministic per (seed, epoch): shuffle, sort by length inside chunks of 50 batches, shuffle batches.

    Bucketing cuts padding (and CPU time) a lot on short texts while keeping batches random; the
    order is reproducible so a resumed run can skip exactly the batches it already trained on.
    """
    rng = np.random.RandomState((seed * 1_000_003 + epoch) % (2**32))
    order = rng.permutation(len(fs))
    chunk = batch_size * 50
    lengths = fs.lengths()
    parts = [order[i : i + chunk] for i in range(0, len(order), chunk)]
    order = np.concatenate([p[np.argsort(lengths[p], kind="stable")] for p in parts]) if parts else order
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def eval_batch_order(fs: FeatureSet, batch_size: int) -> list[np.ndarray]:
    """The kind's evaluation batches (length-sorted, or shaped like served requests); callers scatter
    results back by ``Batch.indices``."""
    return fs.kind.eval_batches(fs, batch_size)


def iter_batches(fs: FeatureSet, order: list[np.ndarray]) -> Iterator[Batch]:
    for idx in order:
        yield fs.batch(idx)
