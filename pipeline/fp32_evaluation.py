"""The FP32 evaluation of a dygraph model (finetune-check's, fine-tune's after each epoch, distillation's held-out
checks): OpenVINO runs the model's saved program in a child process when dygraph would take longer than the child's
start costs; dygraph otherwise.

Why: Paddle's dygraph over TNEWS's 10,000 dev titles took 72 s of a cold ~9-minute run (Zen 4, both cores). OpenVINO
in FP32 (``INFERENCE_PRECISION_HINT f32``, as every OpenVINO session here) reads the same weights'
``paddle.jit.save`` program and gives their logits within 7e-6 (no answer differs) in ~33 s with the child's start.
A child process, because an engine run inside the training process changes the training after it: Paddle
Inference's predictor left the dygraph training that followed it 15-22% slower (MEASUREMENTS.md); whatever an engine
does to threads and allocators ends with the child.

What the child returns is checked: dygraph's outputs on the first evaluation batch must equal it within ``ATOL``.
When they do not, or the child fails, the evaluation runs in dygraph as before and the log says why.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.backends.registry import program_engine
from pipeline.batching import eval_batch_order, iter_batches
from pipeline.evaluation import Evaluation, dygraph_forward, evaluate_dygraph, scatter_outputs
from pipeline.kinds.base import FeatureSet

# Dygraph's estimated seconds for the whole set above which the child pays: its start (a Python with paddle and
# OpenVINO imported, the program saved and compiled) costs ~8 s on 2 cores, and OpenVINO then runs ~2.5x dygraph's pace.
CHILD_ABOVE_S = 15.0
# OpenVINO's FP32 kernels against dygraph's: 7.3e-6 at most over TNEWS's 10,000 titles (logits up to 4.7); a program
# that is not the model's moves them by far more.
ATOL = 1e-4


def evaluate(model, fs: FeatureSet, batch_size: int, desc: str, log: Callable[[str], None]) -> tuple[Evaluation, str]:
    """(``model``'s evaluation over ``fs`` in ``eval_batch_order(fs, batch_size)``, how it was made: "" in dygraph)."""
    order = eval_batch_order(fs, batch_size)
    if not order:
        return evaluate_dygraph(model, fs, batch_size, desc), ""
    was_training = model.training
    model.eval()
    try:
        return _evaluate(model, fs, batch_size, desc, log, order)
    finally:
        if was_training:
            model.train()


def _evaluate(model, fs: FeatureSet, batch_size: int, desc: str, log: Callable[[str], None],
              order: list[np.ndarray]) -> tuple[Evaluation, str]:
    forward = dygraph_forward(model)
    first = fs.batch(order[0])
    start = time.perf_counter()
    reference = np.asarray(forward(first.input_ids, first.token_type_ids), np.float32)
    estimate = (time.perf_counter() - start) * _padded_tokens(fs, order) / max(1, first.input_ids.size)
    engine = program_engine()
    if estimate < CHILD_ABOVE_S or engine is None:
        return evaluate_dygraph(model, fs, batch_size, desc), ""
    try:
        outputs = _in_child(model, fs, order, desc)
    except Exception as exc:  # the child's error, or its death (BrokenProcessPool): dygraph still gives the answer
        log(f"[{desc}] not evaluated in a child process ({type(exc).__name__}: {exc}); evaluating in dygraph")
        return evaluate_dygraph(model, fs, batch_size, desc), ""
    if outputs[0].shape != reference.shape or not np.allclose(outputs[0], reference, atol=ATOL, rtol=0):
        diff = float(np.max(np.abs(outputs[0] - reference))) if outputs[0].shape == reference.shape else float("inf")
        log(f"[{desc}] the child's {engine.name} outputs differ from dygraph's on the first batch (max {diff:.3g} > {ATOL:g}); "
            "evaluating in dygraph")
        return evaluate_dygraph(model, fs, batch_size, desc), ""
    ev_outputs = scatter_outputs(fs, order, outputs)
    how = (f"{engine.name} FP32 of the saved program in a child process, checked against dygraph on {len(order[0])} "
           f"features; dygraph would have taken ~{estimate:.0f} s")
    return Evaluation(ev_outputs, fs.score(ev_outputs), atol=ATOL), how


def _padded_tokens(fs: FeatureSet, order: list[np.ndarray]) -> int:
    lengths = fs.lengths()
    return int(sum(len(idx) * int(lengths[idx].max()) for idx in order if len(idx)))


def _in_child(model, fs: FeatureSet, order: list[np.ndarray], desc: str) -> list[np.ndarray]:
    """Each batch's raw outputs, from OpenVINO on ``model``'s saved program in a spawned process (a fork would carry
    this process's Paddle threads and locks into it)."""
    import concurrent.futures
    import multiprocessing
    import tempfile

    from pipeline.backends.forms import MODEL_FILE
    from pipeline.backends.paddle.convert import export_static

    batches = [(b.input_ids, b.token_type_ids) for b in iter_batches(fs, order)]
    with tempfile.TemporaryDirectory(prefix="ernie-bundle-fp32-") as tmp:
        export_static(model, Path(tmp))
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            return pool.submit(_run_program, str(Path(tmp) / MODEL_FILE), batches, desc).result()


def _run_program(program: str, batches: list, desc: str) -> list[np.ndarray]:
    """In the child: the program engine's FP32 session over the batches, one after another."""
    from pipeline.backends.registry import program_engine
    from pipeline.progress import progress

    run = program_engine().open(Path(program), "fp32", {}).run
    return [run(ids, types) for ids, types in progress(batches, desc=desc, unit="batch")]
