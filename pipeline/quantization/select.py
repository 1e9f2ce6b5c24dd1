"""The INT8 recipe searches as the stages set them up: which training rows calibrate, which are held out, where
candidates are cached, which settings decide them.

Both ``compress`` (one search per width and engine, to select width x recipe x engine) and ``export`` (the
selected width, a cache hit) call each engine's ``search_recipe`` (``pipeline.backends.onnxruntime.int8.search``,
``pipeline.backends.openvino.quantize``) with the same rows and the same cache directory, so the model export
ships is byte-for-byte the one compress measured.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipeline.kinds.base import FeatureSet


@dataclass(frozen=True)
class SearchRows:
    """Calibration feeds (the first ``quantization.calibration_sentences`` training rows) and the held-out slice
    (the last ``quantization.int8_search_sentences``) that scores every recipe.  Dev is never used here."""

    feeds: list[dict[str, np.ndarray]]
    held: FeatureSet
    pad_id: int

    def content_key(self) -> str:
        """What decides a candidate's score besides the model: the calibration rows and the held-out rows."""
        h = hashlib.sha256()
        for feed in self.feeds:
            for name in sorted(feed):
                h.update(feed[name].tobytes())
        for f in self.held.features:
            h.update(f.input_ids.tobytes() + f.token_type_ids.tobytes() + np.asarray(f.target).tobytes())
        return h.hexdigest()


def calibration_feeds(features, batch_size: int = 16) -> list[dict[str, np.ndarray]]:
    """Padded batches of a ``FeatureSet`` (in order) as calibration feeds: ``SearchRows.feeds``, what every engine
    calibrates on (ONNX Runtime's ``quantize_int8_qdq`` takes them as they are; OpenVINO feeds them unpadded)."""
    feeds = []
    for i in range(0, len(features), batch_size):
        b = features.batch(range(i, min(i + batch_size, len(features))))
        feeds.append({"input_ids": b.input_ids, "token_type_ids": b.token_type_ids})
    return feeds


def heldout_examples(train: Sequence, skip: int, n: int) -> list:
    """The last ``n`` training rows, never overlapping the first ``skip`` (the calibration rows), unless the
    data is too small to have both (tiny test data: the calibration rows are all there is)."""
    start = max(skip, len(train) - n)
    return list(train[start:]) or list(train[:n])


def search_rows(cfg, tokenizer, train_examples: Sequence, kind) -> SearchRows:
    qcfg = cfg.quantization
    calib = kind.featurize(tokenizer, list(train_examples[: qcfg.calibration_sentences]), cfg)
    held = kind.featurize(tokenizer, heldout_examples(train_examples, qcfg.calibration_sentences, qcfg.int8_search_sentences), cfg)
    return SearchRows(calibration_feeds(calib, qcfg.calibration_batch_size), held, tokenizer.pad_id)


def search_params(cfg) -> dict:
    """Every setting that decides what ONNX Runtime's search builds and picks, with the rows and budget every
    engine's search shares (part of both stages' cache keys)."""
    q = cfg.quantization
    return {"alphas": q.int8_smooth_alphas, "reduce_range": q.int8_reduce_range, "sentences": q.int8_search_sentences,
            "max_fp32_matmuls": q.int8_max_fp32_matmuls, "budget_points": cfg.gates.max_accuracy_drop,
            "calibration_sentences": q.calibration_sentences, "calibration_batch_size": q.calibration_batch_size,
            "embeddings": q.int8_embeddings, "opset": cfg.export.opset}
