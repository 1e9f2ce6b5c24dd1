"""``<task>_model`` on the python backend: the model run in-process by the bundle's engine (``engine.py`` beside,
copied from the engine's folder in the pipeline: ONNX Runtime, OpenVINO or Paddle Inference).

Requests of different lengths arrive together (the config allows ragged batching); they are
re-padded with the vocabulary's [PAD] id into one array and run in one call, then split back
(per-token logits [B, T, C] are also cut back to each request's own T).
ERNIE masks [PAD] positions, so the extra padding does not change a request's logits beyond float
rounding.
"""

from __future__ import annotations  # `str | None` below: Python 3.8 (FastDeploy's serving image) runs this file too

import sys
from pathlib import Path

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


def make_engine(folder: Path, params: dict, gpu: bool, max_rows: int = 0):
    """The in-process engine of the ``engine.py`` copied beside (the bundle's engine, ``ServedEngine`` in the
    pipeline), over the config's ``model_file`` with its ``threads``; also used by the fused classifier, which loads
    this file as its ``runner.py``.  Warmed for batches of up to ``max_rows`` rows of up to the ``max_seq_len``
    parameter's width where the engine warms (OpenVINO)."""
    engine = model_support.sibling(folder, "engine").Engine(folder / params["model_file"],
                                                            int(params.get("threads", "0") or 0), gpu, params)
    if max_rows and hasattr(engine, "warm") and int(params.get("max_seq_len", "0") or 0):
        engine.warm(max_rows, int(params["max_seq_len"]))
    return engine


class TritonPythonModel(model_support.Batched):
    folder, what = HERE, "inference"

    def setup(self, params):
        self.pad_id = int(params.get("pad_id", "0"))
        self.max_seq_len = int(params.get("max_seq_len", "0") or 0)
        self.vocab_size = int(params.get("vocab_size", "0") or 0)
        self.engine = make_engine(HERE, params, self.gpu, self.max_rows)

    def problem(self, ids: np.ndarray, types: np.ndarray) -> str | None:
        """What is wrong with one request's arrays (None: nothing), checked before it may join a batch."""
        if ids.ndim != 2 or types.shape != ids.shape or 0 in ids.shape:
            return f"input_ids {list(ids.shape)} and token_type_ids {list(types.shape)} must be one non-empty [texts, tokens] shape"
        if self.max_seq_len and ids.shape[1] > self.max_seq_len:
            return f"{ids.shape[1]} tokens per text is over this model's max_seq_len {self.max_seq_len}"
        if ids.min() < 0 or (self.vocab_size and ids.max() >= self.vocab_size):
            return f"input_ids must be vocabulary ids in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}"
        if types.min() < 0 or types.max() > 1:
            return f"token_type_ids must be 0 or 1, got {types.min()}..{types.max()}"
        return None

    def take(self, request):
        ids, types = self.tensor(request, "input_ids"), self.tensor(request, "token_type_ids")
        problem = self.problem(ids, types)
        if problem:  # answered alone; its batch mates still run
            raise model_support.Refused(problem)
        return ids, types

    def run(self, parts):
        width = max(ids.shape[1] for ids, _ in parts)
        total = sum(ids.shape[0] for ids, _ in parts)
        ids = np.full((total, width), self.pad_id, dtype=np.int64)
        types = np.zeros((total, width), dtype=np.int64)
        for rows, (a, b) in zip(model_support.slices([a for a, _ in parts]), parts):
            ids[rows, : a.shape[1]] = a
            types[rows, : b.shape[1]] = b
        return np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)

    def split(self, logits, parts):
        for rows, (a, _) in zip(model_support.slices([a for a, _ in parts]), parts):
            part = logits[rows]
            if part.ndim == 3:  # per-token logits (token classification, reading comprehension): back to this request's width
                part = np.ascontiguousarray(part[:, : a.shape[1]])
            yield {"logits": part}
