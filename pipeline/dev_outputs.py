"""A model's dev outputs kept beside it, so that a later stage need not run the same model over dev again, after the
stage that made them has just done it:

- fine-tune's evaluation that made its weights the best stands in for finetune-check's (in dygraph that pass is
  minutes: CMRC2018's 800 questions, ~2,600 windows of 256 tokens, ~6 minutes on 2 cores, Zen 4);
- compress's scoring of its FP32 ONNX and of the selected candidate stands in for validate's parity of the same files
  (~45 s of a 10-minute cold TNEWS run on an AVX2 proxy; the anchor, which compress never runs, is evaluated there).

What is reused is checked first: the dev features must be the ones the outputs were made on (a hash of every
feature's ids), in the same batches (an INT8 form with per-batch activation ranges answers per batch), of the same
model (for an exported form: the same bytes, ``form_key``), and the model as the reusing stage opens it must give the
kept outputs on the first evaluation batch.  Anything else and that stage evaluates as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pipeline.batching import eval_batch_order
from pipeline.evaluation import Evaluation, run_outputs
from pipeline.kinds.base import FeatureSet

FILE = "dev_outputs.npz"
# The reloaded weights' outputs on the checked batch against the kept ones: equal but for float noise (a batch
# padded otherwise moves logits by ~1e-7); other weights move them by far more.  Outputs an engine made in dygraph's
# place (``Evaluation.atol``: fine-tune's evaluation in a child process) are kept with that wider tolerance.
ATOL = 1e-5


def features_key(fs: FeatureSet) -> str:
    """A hash of every feature's input and segment ids, in order: what the outputs are outputs of."""
    h = hashlib.sha256()
    for f in fs.features:
        h.update(np.asarray(f.input_ids, np.int64).tobytes() + b"|")
        h.update(np.asarray(f.token_type_ids, np.int64).tobytes() + b";")
    return h.hexdigest()


def form_key(files: Sequence[Path]) -> str:
    """A hash of a model's files' contents, in order (a directory: its files by name), not of their names: compress's
    ``candidates/w0.5833-int8/model.onnx`` and the export's ``onnx/int8.onnx`` are the same model when their bytes are."""
    from pipeline.hashing import json_sha256, tree_hashes

    return json_sha256([list(tree_hashes(f).values()) for f in files])


def save(path: Path, ev: Evaluation, fs: FeatureSet, batch_size: int, form: str = "") -> None:
    """Keep ``ev`` (made over ``fs`` in ``eval_batch_order(fs, batch_size)``); ``form``: the model's ``form_key``."""
    with open(path, "wb") as f:  # np.savez adds ".npz" to a name without it; a file object keeps the name
        np.savez(f, outputs=ev.flat(), features=np.array(features_key(fs)), batch_size=np.array(batch_size),
                 form=np.array(form), atol=np.array(max(ATOL, ev.atol)))


def kept_form(path: Path) -> str:
    """The ``form_key`` a kept file was saved with ("" when none, or unreadable)."""
    try:
        with np.load(path) as kept:
            return str(kept["form"]) if "form" in kept.files else ""
    except Exception:  # a damaged file is no one's outputs
        return ""


def reuse(path: Path, fs: FeatureSet, forward: Callable[[np.ndarray, np.ndarray], np.ndarray],
          batch_size: int, made_by: str = "fine-tune's evaluation of these weights",
          desc: str = "finetune-check (kept dev outputs, one batch)") -> tuple[Evaluation | None, str]:
    """(the evaluation the kept outputs give, how they were checked), or (None, why they cannot stand in).
    ``forward(input_ids, token_type_ids) -> outputs``: the model as the reusing stage opened it; ``made_by``: whose
    evaluation the kept outputs are, for the message."""
    from pipeline.validation.parity import reference_rows, split_reference

    try:
        with np.load(path) as kept:
            flat, key = kept["outputs"], str(kept["features"])
            kept_batch = int(kept["batch_size"]) if "batch_size" in kept.files else None
            atol = float(kept["atol"]) if "atol" in kept.files else ATOL
    except Exception as exc:  # a missing or damaged file: evaluate instead
        return None, f"{path.name} unreadable ({type(exc).__name__})"
    if key != features_key(fs):
        return None, "the dev features differ from those the kept outputs were made on"
    if kept_batch is not None and kept_batch != batch_size:
        return None, f"the kept outputs were made in batches of {kept_batch}, this evaluation's are {batch_size}"
    if flat.ndim != 2 or flat.shape[0] != reference_rows(fs):
        return None, f"{path.name} holds {flat.shape[0]} output rows for {reference_rows(fs)}"
    outputs = split_reference(flat, fs)
    first = eval_batch_order(fs, batch_size)[0]
    got = run_outputs(forward, fs.subset(first), batch_size, desc)
    for i, out in zip(first, got):
        if np.shape(out) != np.shape(outputs[int(i)]) or not np.allclose(out, outputs[int(i)], atol=atol, rtol=0):
            return None, f"the model does not give the kept outputs (feature {int(i)})"
    return Evaluation(outputs, fs.score(outputs)), f"{made_by}, checked on {len(first)} features"
