"""Start/end pointer probabilities -> extracted spans, as PaddleNLP's UIE decodes them.

A token starts a span when its start probability reaches ``position_prob``, ends one when its end
probability does; each end is paired with the closest start at or before it (PaddleNLP's ``get_span``);
a pair is a span of the content with probability ``p_start * p_end``.  Over the windows of one (content,
prompt) pair spans are mapped to characters and merged (the best probability of a repeated span kept).

Imports only stdlib and numpy: serving copies this file verbatim into a Triton python-backend model
folder, so the served post-processing is this very code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class ExtractedSpan:
    text: str
    start: int  # char offset into the content
    end: int  # exclusive
    probability: float

    def as_dict(self) -> dict:
        return {"text": self.text, "start": self.start, "end": self.end, "probability": round(self.probability, 6)}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def pair_pointers(starts: Sequence[int], ends: Sequence[int]) -> list[tuple[int, int]]:
    """PaddleNLP ``get_span``: walk both sorted lists; each end takes the latest start not after it."""
    starts, ends = sorted(starts), sorted(ends)
    pairs: dict[int, int] = {}
    i = j = 0
    while i < len(starts) and j < len(ends):
        if starts[i] <= ends[j]:
            pairs[ends[j]] = starts[i]
            i += 1
            if starts[i - 1] == ends[j]:
                j += 1
        else:
            j += 1
    return sorted((s, e) for e, s in pairs.items())


def decode_spans(
    logits: Sequence[np.ndarray],
    windows: Sequence,
    contents: Sequence[str],
    *,
    position_prob: float,
    max_span_len: int,
) -> list[list[ExtractedSpan]]:
    """Spans of every example (one per content/prompt pair) over all of its windows, sorted by position.

    ``logits[k]`` is ``[L_k, 2]`` (start, end; before the sigmoid) for window k, rows past its length ignored;
    ``windows[k]`` needs ``example_index`` and ``offsets`` ([L_k, 2] char offsets, (-1, -1) outside the content).
    """
    if len(logits) != len(windows):
        raise ValueError(f"{len(logits)} logit arrays for {len(windows)} windows")
    found: list[dict[tuple[int, int], float]] = [{} for _ in contents]
    for k, (window_logits, window) in enumerate(zip(logits, windows)):
        ex = int(window.example_index)
        if not 0 <= ex < len(contents):
            raise ValueError(f"window {k} belongs to example {ex}, but there are {len(contents)} contents")
        offsets = np.asarray(window.offsets).reshape(-1, 2)
        scores = np.asarray(window_logits, dtype=np.float64)
        if scores.ndim != 2 or scores.shape[1] != 2 or len(scores) < len(offsets):
            raise ValueError(f"window {k}: logits of shape {scores.shape}, expected [{len(offsets)}, 2]")
        probs = sigmoid(scores[: len(offsets)])
        in_content = offsets[:, 0] >= 0
        starts = np.nonzero(in_content & (probs[:, 0] >= position_prob))[0]
        ends = np.nonzero(in_content & (probs[:, 1] >= position_prob))[0]
        for s, e in pair_pointers(starts.tolist(), ends.tolist()):
            if e - s + 1 > max_span_len:
                continue
            span = (int(offsets[s, 0]), int(offsets[e, 1]))
            p = float(probs[s, 0] * probs[e, 1])
            if p > found[ex].get(span, -1.0):
                found[ex][span] = p
    return [[ExtractedSpan(contents[i][a:b], a, b, p) for (a, b), p in sorted(spans.items())]
            for i, spans in enumerate(found)]
