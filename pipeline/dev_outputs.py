"""The fine-tuned weights' own dev outputs, kept beside them so that finetune-check need not run the model over dev
again: fine-tune's evaluation that made these weights the best has just done it.  In dygraph that pass is minutes
(CMRC2018's 800 questions, ~2,600 windows of 256 tokens: ~6 minutes on 2 cores, Zen 4).

What is reused is checked first: the dev features must be the ones the outputs were made on (a hash of every
feature's ids), and the reloaded weights must give the kept outputs on the first evaluation batch.  Anything else
and finetune-check evaluates as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.batching import eval_batch_order
from pipeline.evaluation import Evaluation, run_outputs
from pipeline.kinds.base import FeatureSet

FILE = "dev_outputs.npz"
# The reloaded weights' outputs on the checked batch against the kept ones: equal but for float noise (a batch
# padded otherwise moves logits by ~1e-7); other weights move them by far more.
ATOL = 1e-5


def features_key(fs: FeatureSet) -> str:
    """A hash of every feature's input and segment ids, in order: what the outputs are outputs of."""
    h = hashlib.sha256()
    for f in fs.features:
        h.update(np.asarray(f.input_ids, np.int64).tobytes() + b"|")
        h.update(np.asarray(f.token_type_ids, np.int64).tobytes() + b";")
    return h.hexdigest()


def save(path: Path, ev: Evaluation, fs: FeatureSet) -> None:
    with open(path, "wb") as f:  # np.savez adds ".npz" to a name without it; a file object keeps the name
        np.savez(f, outputs=ev.flat(), features=np.array(features_key(fs)))


def reuse(path: Path, fs: FeatureSet, forward: Callable[[np.ndarray, np.ndarray], np.ndarray],
          batch_size: int) -> tuple[Evaluation | None, str]:
    """(the evaluation the kept outputs give, how they were checked), or (None, why they cannot stand in).
    ``forward(input_ids, token_type_ids) -> outputs``: the reloaded model."""
    from pipeline.validation.parity import reference_rows, split_reference

    try:
        with np.load(path) as kept:
            flat, key = kept["outputs"], str(kept["features"])
    except Exception as exc:  # a missing or damaged file: evaluate instead
        return None, f"{path.name} unreadable ({type(exc).__name__})"
    if key != features_key(fs):
        return None, "the dev features differ from those fine-tune evaluated"
    if flat.ndim != 2 or flat.shape[0] != reference_rows(fs):
        return None, f"{path.name} holds {flat.shape[0]} output rows for {reference_rows(fs)}"
    outputs = split_reference(flat, fs)
    first = eval_batch_order(fs, batch_size)[0]
    got = run_outputs(forward, fs.subset(first), batch_size, "finetune-check (kept dev outputs, one batch)")
    for i, out in zip(first, got):
        if np.shape(out) != np.shape(outputs[int(i)]) or not np.allclose(out, outputs[int(i)], atol=ATOL, rtol=0):
            return None, f"the weights do not give the kept outputs (feature {int(i)})"
    return Evaluation(outputs, fs.score(outputs)), f"fine-tune's evaluation of these weights, checked on {len(first)} features"
