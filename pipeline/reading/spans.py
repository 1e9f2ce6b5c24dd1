"""Start/end logits of every window -> the best answer span per example.

Imports only stdlib and numpy: serving copies this file verbatim into a Triton python-backend model
folder, so the served postprocessing is this very code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Span:
    example_index: int
    text: str
    start: int  # char offset into the context
    end: int  # exclusive
    score: float  # start_logit + end_logit


def best_spans(
    logits: Sequence[np.ndarray],
    windows: Sequence,
    contexts: Sequence[str],
    *,
    max_answer_len: int,
    n_best: int = 20,
) -> list[Span | None]:
    """The highest-scoring valid span of each example over all of its windows.

    ``logits[k]`` is ``[L_k, 2]`` (start, end) for window k; rows past the window's length (padding) are
    ignored.  ``windows[k]`` needs ``example_index`` and ``offsets`` ([L_k, 2], (-1, -1) outside the
    context).  Valid: both tokens in the context, start <= end, at most ``max_answer_len`` tokens.  Like
    BERT's SQuAD code only the ``n_best`` best starts and ends of each window are paired.  One entry per
    example index 0..len(contexts)-1; None when an example has no valid span (e.g. an empty context).
    """
    if len(logits) != len(windows):
        raise ValueError(f"{len(logits)} logit arrays for {len(windows)} windows")
    if max_answer_len < 1 or n_best < 1:
        raise ValueError(f"max_answer_len and n_best must be >= 1, got {max_answer_len}, {n_best}")
    best: list[tuple[float, int, int, int] | None] = [None] * len(contexts)  # (score, window, start, end)
    for k, (window_logits, window) in enumerate(zip(logits, windows)):
        ex = int(window.example_index)
        if not 0 <= ex < len(contexts):
            raise ValueError(f"window {k} belongs to example {ex}, but there are {len(contexts)} contexts")
        offsets = np.asarray(window.offsets).reshape(-1, 2)
        scores = np.asarray(window_logits, dtype=np.float64)
        if scores.ndim != 2 or scores.shape[1] != 2 or len(scores) < len(offsets):
            raise ValueError(f"window {k}: logits of shape {scores.shape}, expected [{len(offsets)}, 2]")
        scores = scores[: len(offsets)]
        in_context = np.nonzero(offsets[:, 0] >= 0)[0]
        if len(in_context) == 0:
            continue
        starts = _top(in_context, scores[in_context, 0], n_best)
        ends = _top(in_context, scores[in_context, 1], n_best)
        # All n_best x n_best pairs at once; invalid pairs get -inf.
        s, e = np.meshgrid(starts, ends, indexing="ij")
        pair = scores[s, 0] + scores[e, 1]
        pair = np.where((s <= e) & (e - s + 1 <= max_answer_len), pair, -np.inf)
        flat = int(np.argmax(pair))  # first maximum: ties go to the better-ranked start
        score = float(pair.flat[flat])
        if not np.isfinite(score):
            continue
        current = best[ex]
        if current is None or score > current[0]:
            best[ex] = (score, k, int(s.flat[flat]), int(e.flat[flat]))

    spans: list[Span | None] = []
    for ex, found in enumerate(best):
        if found is None:
            spans.append(None)
            continue
        score, k, s_tok, e_tok = found
        offsets = np.asarray(windows[k].offsets).reshape(-1, 2)
        char_start, char_end = int(offsets[s_tok, 0]), int(offsets[e_tok, 1])
        spans.append(Span(ex, contexts[ex][char_start:char_end], char_start, char_end, score))
    return spans


def _top(indices: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    # Stable sort: equal logits keep token order, so results are deterministic.
    order = np.argsort(-values, kind="stable")[:n]
    return indices[order]
