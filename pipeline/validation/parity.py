"""Parity of a backend against the FP32 dygraph reference outputs (finetune-check's ``dev_logits.npy``).

The reference holds every output row stacked (``Evaluation.flat()``): [examples, C] for classification,
[total tokens, C] for token-level kinds.  ``accuracy`` fields hold the task's primary metric.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import DataError


@dataclass(frozen=True)
class Parity:
    backend: str
    accuracy: float
    reference_accuracy: float
    accuracy_drop_points: float  # (reference - backend) * 100; negative = better than FP32
    argmax_agreement: float  # fraction of examples with the same prediction (class, entity set, answer span)
    max_abs_logit_diff: float
    mean_abs_logit_diff: float
    examples: int

    def as_dict(self) -> dict:
        return asdict(self)


def load_reference(path: Path, n_examples: int, num_labels: int) -> np.ndarray:
    """``n_examples``: rows of the stacked reference (examples, or tokens for token-level kinds)."""
    """The FP32 reference logits, checked against the dev set it must describe."""
    path = Path(path)
    try:
        ref = np.load(path)
    except Exception as exc:
        raise DataError(f"{path}: cannot read reference logits ({type(exc).__name__}: {exc})") from None
    if ref.shape != (n_examples, num_labels):
        raise DataError(f"{path}: reference outputs have shape {ref.shape}, expected ({n_examples}, {num_labels}): "
                        "the dev set or label set changed since finetune-check")
    return ref.astype(np.float32)


@dataclass(frozen=True)
class Reference:
    """The FP32 reference, scored once: every backend is compared with it."""

    flat: np.ndarray  # stacked outputs, as finetune-check saved them
    outputs: list  # per feature
    score: object  # pipeline.kinds.Score
    predictions: list  # per example


def reference_for(flat: np.ndarray, fs) -> Reference:
    outputs = split_reference(flat, fs)
    return Reference(flat, outputs, fs.score(outputs), fs.predictions(outputs))


def compare_outputs(backend: str, ev, ref: Reference, fs, pred: list | None = None) -> Parity:
    """Parity of an ``Evaluation`` over ``fs`` with the reference: metric, predictions (``pred``, when the caller
    has them already: decoding spans costs), raw outputs."""
    flat = ev.flat()
    if flat.shape != ref.flat.shape:
        from pipeline.errors import ModelError

        raise ModelError(f"{backend}: outputs shape {flat.shape} != the FP32 reference's {ref.flat.shape} (finetune-check)")
    pred = fs.predictions(ev.outputs) if pred is None else pred
    agree = float(np.mean([a == b for a, b in zip(pred, ref.predictions)])) if pred else 1.0
    diff = np.abs(flat.astype(np.float64) - ref.flat)
    return Parity(backend, ev.metric, ref.score.value, 100.0 * (ref.score.value - ev.metric), agree,
                  float(diff.max()) if diff.size else 0.0, float(diff.mean()) if diff.size else 0.0, len(fs.examples))


def reference_rows(fs) -> int:
    return int(fs.lengths().sum()) if fs.kind.token_level_outputs else len(fs)


def split_reference(reference: np.ndarray, fs) -> list[np.ndarray]:
    """The stacked reference cut back into per-feature outputs."""
    if not fs.kind.token_level_outputs:
        return list(reference)
    ends = np.cumsum(fs.lengths())
    return list(np.split(reference, ends[:-1])) if len(ends) else []
