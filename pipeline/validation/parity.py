"""Parity of a backend against the FP32 dygraph reference logits (finetune-check's ``dev_logits.npy``)."""

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
    argmax_agreement: float  # fraction of examples where backend and reference predict the same class
    max_abs_logit_diff: float
    mean_abs_logit_diff: float
    examples: int

    def as_dict(self) -> dict:
        return asdict(self)


def load_reference(path: Path, n_examples: int, num_labels: int) -> np.ndarray:
    """The FP32 reference logits, checked against the dev set it must describe."""
    path = Path(path)
    try:
        ref = np.load(path)
    except Exception as exc:
        raise DataError(f"{path}: cannot read reference logits ({type(exc).__name__}: {exc})") from None
    if ref.shape != (n_examples, num_labels):
        raise DataError(f"{path}: reference logits have shape {ref.shape}, expected ({n_examples}, {num_labels}): "
                        "the dev set or label set changed since finetune-check")
    return ref.astype(np.float32)


def compare(backend: str, logits: np.ndarray, reference: np.ndarray, labels: np.ndarray) -> Parity:
    if logits.shape != reference.shape:
        raise ValueError(f"{backend}: logits shape {logits.shape} != reference {reference.shape}")
    pred, ref_pred = logits.argmax(-1), reference.argmax(-1)
    acc, ref_acc = float((pred == labels).mean()), float((ref_pred == labels).mean())
    diff = np.abs(logits.astype(np.float64) - reference)
    return Parity(backend, acc, ref_acc, 100.0 * (ref_acc - acc), float((pred == ref_pred).mean()),
                  float(diff.max()) if diff.size else 0.0, float(diff.mean()) if diff.size else 0.0, int(len(labels)))
