"""The dynamic shapes a TensorRT engine is built for, from the dev lengths: its own module so that the sessions
(``onnxruntime/session.py``, ``paddle/session.py``) and the registry that opens them need not import each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShapeRange:
    """The dynamic shapes a TensorRT engine is built for (Paddle's TensorRT subgraph, ONNX Runtime's TensorRT
    provider): min/opt/max sequence lengths come from the dev set's token-length distribution
    (``from_lengths``): min 1, opt the 95th percentile, max the task's max_seq_len."""

    min_batch: int
    opt_batch: int
    max_batch: int
    min_seq: int
    opt_seq: int
    max_seq: int

    @classmethod
    def from_lengths(cls, lengths: np.ndarray, max_seq_len: int, opt_batch: int = 32, max_batch: int = 64) -> "ShapeRange":
        lengths = np.asarray(lengths)
        opt = int(np.percentile(lengths, 95)) if lengths.size else max_seq_len
        return cls(1, opt_batch, max_batch, 1, max(1, min(opt, max_seq_len)), max_seq_len)

    def shapes(self) -> tuple[dict, dict, dict]:
        mins = {n: [self.min_batch, self.min_seq] for n in ("input_ids", "token_type_ids")}
        opts = {n: [self.opt_batch, self.opt_seq] for n in ("input_ids", "token_type_ids")}
        maxs = {n: [self.max_batch, self.max_seq] for n in ("input_ids", "token_type_ids")}
        return mins, maxs, opts


def of_options(opts) -> ShapeRange:
    """The dynamic-shape profile of a GPU session opened with ``opts`` (``engine.RunOptions``): from its dev lengths."""
    return ShapeRange.from_lengths(opts.seq_lens if opts.seq_lens is not None else np.array([]), opts.max_seq_len)
