"""Classification outputs from logits: label, description, confidence, probabilities and top-k; a multi-label
classifier's label sets (``LabelSets``).

Standard library and numpy only: copied next to the post-processing model and the fused classifier (as
``class_outputs.py``), so both answer with this code.  Softmax is computed in float64 and the label is the
argmax of the logits, so the served label is exactly the offline prediction; a label set is the labels whose
logit is above the threshold's log-odds, the comparison offline scoring makes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (the served confidences are these, rounded to float32 once)."""
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise sigmoid in float64, without overflow for any logit."""
    return 0.5 * (1.0 + np.tanh(0.5 * logits.astype(np.float64)))


def log_odds(threshold: float) -> float:
    """The logit above which a multi-label classifier predicts a label (0.0 exactly at 0.5)."""
    return math.log(threshold / (1 - threshold))


class Labels:
    """labels.json (JSON lines ``{"label", "label_desc"}``) in model output order, as byte strings."""

    def __init__(self, path: Path):
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        self.labels = np.array([str(r["label"]).encode("utf-8") for r in rows], dtype=np.object_)
        self.descs = np.array([str(r.get("label_desc", r["label"])).encode("utf-8") for r in rows], dtype=np.object_)
        self.names = [str(r["label"]) for r in rows]  # as str: the label of ernie_bundle_answers_total

    def __len__(self) -> int:
        return len(self.labels)

    def answer_counts(self, logits: np.ndarray) -> dict[str, int]:
        """How many of ``logits``' rows [B, C] are answered with each label (the argmax)."""
        return dict(zip(self.names, np.bincount(logits.argmax(axis=-1), minlength=len(self)).tolist()))

    def outputs(self, logits: np.ndarray, top_k: int, wanted=None) -> dict[str, np.ndarray]:
        """Output tensor name -> array for ``logits`` [B, C]: only the names in ``wanted`` (None: all six)."""
        def want(name: str) -> bool:
            return wanted is None or name in wanted

        best = logits.argmax(axis=-1)
        rows = np.arange(len(best))
        out = {}
        if want("label"):
            out["label"] = self.labels[best].reshape(-1, 1)
        if want("label_desc"):
            out["label_desc"] = self.descs[best].reshape(-1, 1)
        if not (want("confidence") or want("probs") or want("topk_label") or want("topk_prob")):
            return out
        probs = softmax(logits)
        if want("confidence"):
            out["confidence"] = probs[rows, best].astype(np.float32).reshape(-1, 1)
        if want("probs"):
            out["probs"] = probs.astype(np.float32)
        if want("topk_label") or want("topk_prob"):
            top = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]
            if want("topk_label"):
                out["topk_label"] = self.labels[top]
            if want("topk_prob"):
                out["topk_prob"] = np.take_along_axis(probs, top, axis=-1).astype(np.float32)
        return out


class LabelSets(Labels):
    """A multi-label classifier's answers: every label ranked by its probability (a sigmoid each), and how many of the
    first are predicted (``count``: those above ``threshold``).  A request's texts have one tensor each, so a set of
    varying size is the first ``count`` of the ranked labels."""

    def __init__(self, path: Path, threshold: float):
        super().__init__(path)
        self.cut = log_odds(threshold)

    def answer_counts(self, logits: np.ndarray) -> dict[str, int]:
        """How many of ``logits``' rows [B, C] have each label in their set."""
        return dict(zip(self.names, (logits > self.cut).sum(axis=0).tolist()))

    def outputs(self, logits: np.ndarray, top_k: int = 0, wanted=None) -> dict[str, np.ndarray]:
        """Output tensor name -> array for ``logits`` [B, C]: ``labels``, ``label_descs`` and ``label_probs`` ranked
        [B, C], ``count`` [B, 1], ``probs`` in labels.json order [B, C]; only the names in ``wanted`` (None: all)."""
        def want(name: str) -> bool:
            return wanted is None or name in wanted

        ranked = np.argsort(-logits, axis=-1, kind="stable")
        out = {}
        if want("labels"):
            out["labels"] = self.labels[ranked]
        if want("label_descs"):
            out["label_descs"] = self.descs[ranked]
        if want("count"):
            out["count"] = (logits > self.cut).sum(axis=-1).astype(np.int32).reshape(-1, 1)
        if want("label_probs") or want("probs"):
            probs = sigmoid(logits)
            if want("label_probs"):
                out["label_probs"] = np.take_along_axis(probs, ranked, axis=-1).astype(np.float32)
            if want("probs"):
                out["probs"] = probs.astype(np.float32)
        return out


def label_outputs(path: Path, params: dict) -> Labels:
    """The outputs a classifier's post-processing answers: a label set per text when its Triton config gives a
    ``threshold`` (multi-label), else one label."""
    return LabelSets(path, float(params["threshold"])) if "threshold" in params else Labels(path)


def index_outputs(logits: np.ndarray) -> dict[str, np.ndarray]:
    """``package.api: fastdeploy`` (ernie_seqcls): ``label``, the class index in labels.json order (int64 [B]), and
    ``confidence``, its softmax probability (float32 [B]).  [B], not [B, 1]: FastDeploy's post-processing answers
    argmax(-1) and its client compares ``labels == ret["label"]`` element by element."""
    probs = softmax(logits)
    best = logits.argmax(axis=-1)
    return {"label": best.astype(np.int64), "confidence": probs[np.arange(len(best)), best].astype(np.float32)}
