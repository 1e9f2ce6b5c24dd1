"""Question + passage -> fixed-size model windows (the sliding-window scheme of BERT's SQuAD code).

Each window is ``[CLS] question [SEP] context_slice [SEP]``.  Passages longer than one window are covered by
overlapping slices whose starts are ``doc_stride`` tokens apart; the last slice reaches the end of the passage,
so every context token is in at least one window.

Imports only stdlib, numpy and tokenizers: serving copies this file verbatim into a Triton python-backend
model folder, so the served preprocessing is this very code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

NO_OFFSET = (-1, -1)  # offsets of [CLS], question and [SEP] tokens: never mistaken for context char 0


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays do not compare to a single bool
class Window:
    example_index: int
    input_ids: np.ndarray  # int64 [L]
    token_type_ids: np.ndarray  # int64 [L]: 0 for [CLS] question [SEP], 1 for context and the final [SEP]
    offsets: np.ndarray  # int64 [L, 2]: char offsets into the CONTEXT, end exclusive; (-1, -1) outside it
    start_position: int  # token index of the answer start in this window; 0 ([CLS]) when not fully inside
    end_position: int  # token index of the answer end (inclusive); 0 ([CLS]) when not fully inside
    question_cut: bool = False  # its question was longer than max_query_len tokens: the model reads its start only


def make_windows(
    tok,
    questions: Sequence[str],
    contexts: Sequence[str],
    *,
    max_seq_len: int,
    doc_stride: int,
    max_query_len: int,
    answers: Sequence[tuple[int, int] | None] | None = None,
) -> list[Window]:
    """Windows for every (question, context) pair, in example order.

    ``tok`` is an HF ``tokenizers`` tokenizer with truncation and padding disabled.  ``answers[i]`` is the
    answer's (char_start, char_end_exclusive) in ``contexts[i]``, or None.
    """
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    if answers is not None and len(answers) != len(contexts):
        raise ValueError(f"{len(answers)} answers but {len(contexts)} contexts")
    if doc_stride < 1 or max_query_len < 1:
        raise ValueError(f"doc_stride and max_query_len must be >= 1, got {doc_stride}, {max_query_len}")
    _check_plain(tok)
    cls_id, sep_id = _special_id(tok, "[CLS]"), _special_id(tok, "[SEP]")

    # One batch call per side (the tokenizer parallelises internally).  Each distinct passage is encoded
    # once, however many questions ask about it and however many windows it is cut into.
    q_encs = tok.encode_batch(list(questions), add_special_tokens=False)
    unique = list(dict.fromkeys(contexts))
    encoded = {
        text: (np.asarray(enc.ids, dtype=np.int64), np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2))
        for text, enc in zip(unique, tok.encode_batch(unique, add_special_tokens=False))
    }

    windows: list[Window] = []
    for i, q_enc in enumerate(q_encs):
        q_ids = q_enc.ids[:max_query_len]
        cut = len(q_enc.ids) > max_query_len
        room = max_seq_len - len(q_ids) - 3
        if room < 1:
            raise ValueError(
                f"max_seq_len {max_seq_len} leaves no room for context after a {len(q_ids)}-token question"
            )
        c_ids, c_offsets = encoded[contexts[i]]
        answer_tokens = _answer_tokens(c_offsets, answers[i] if answers is not None else None)

        head = np.asarray([cls_id, *q_ids, sep_id], dtype=np.int64)
        windows.extend(_slide(i, head, sep_id, c_ids, c_offsets, room, doc_stride, answer_tokens, cut))
    return windows


def questions_cut(windows: Sequence[Window]) -> int:
    """How many of the examples ``windows`` cover had their question cut to ``max_query_len`` tokens (what a served
    reading-comprehension model counts as ``ernie_bundle_truncated_items_total``, and validate on dev)."""
    return len({w.example_index for w in windows if w.question_cut})


def _slide(example: int, head: np.ndarray, sep_id: int, c_ids: np.ndarray, c_offsets: np.ndarray, room: int,
           doc_stride: int, answer_tokens: tuple[int, int] | None, question_cut: bool) -> list[Window]:
    """One example's windows: ``head`` ([CLS] question [SEP]), then ``room`` context tokens from each stride's start,
    then [SEP]; the answer's token positions in the window that holds it whole (0, 0 elsewhere)."""
    head_offsets = np.full((len(head), 2), -1, dtype=np.int64)
    n_ctx, start, out = len(c_ids), 0, []
    while True:
        length = min(room, n_ctx - start)
        ids = np.concatenate([head, c_ids[start : start + length], [sep_id]]).astype(np.int64)
        offsets = np.concatenate([head_offsets, c_offsets[start : start + length], [NO_OFFSET]]).astype(np.int64)
        token_types = np.zeros(len(ids), dtype=np.int64)
        token_types[len(head) :] = 1
        s_pos = e_pos = 0
        if answer_tokens is not None:
            a_start, a_end = answer_tokens
            if start <= a_start and a_end < start + length:
                s_pos, e_pos = a_start - start + len(head), a_end - start + len(head)
        out.append(Window(example, ids, token_types, offsets, s_pos, e_pos, question_cut))
        if start + length >= n_ctx:
            return out
        # min(): a stride longer than the window would otherwise skip context tokens.
        start += min(doc_stride, length)


def pad_windows(windows: Sequence[Window], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, token_type_ids), int64 [W, T] with T the longest window; padded with pad_id / 0."""
    width = max((len(w.input_ids) for w in windows), default=0)
    input_ids = np.full((len(windows), width), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((len(windows), width), dtype=np.int64)
    for k, w in enumerate(windows):
        input_ids[k, : len(w.input_ids)] = w.input_ids
        token_type_ids[k, : len(w.token_type_ids)] = w.token_type_ids
    return input_ids, token_type_ids


def window_arrays(windows: Sequence[Window], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a served pre-processing model emits for its windows: ``pad_windows``' (input_ids, token_type_ids), plus
    offsets int64 [W, T, 2] ((-1, -1) outside the context and on padding) and the example of each window [W]."""
    ids, types = pad_windows(windows, pad_id)
    offsets = np.full((len(windows), ids.shape[1], 2), -1, dtype=np.int64)
    for k, w in enumerate(windows):
        offsets[k, : len(w.offsets)] = w.offsets
    return ids, types, offsets, np.array([w.example_index for w in windows], dtype=np.int64)


def _answer_tokens(offsets: np.ndarray, answer: tuple[int, int] | None) -> tuple[int, int] | None:
    """Context token indices (first, last) covering the answer chars, or None.

    First = first token ending after char_start, last = last token starting before char_end: the tokens
    that contain the answer's first and last chars, and still right when the answer starts or ends on a
    char the tokenizer drops (whitespace, control chars).
    """
    if answer is None or len(offsets) == 0:
        return None
    char_start, char_end = answer
    if char_end <= char_start:
        return None
    first = int(np.searchsorted(offsets[:, 1], char_start, side="right"))
    last = int(np.searchsorted(offsets[:, 0], char_end, side="left")) - 1
    if first >= len(offsets) or last < first:
        return None  # the answer is only dropped chars, or lies past the last token
    return first, last


def _special_id(tok, token: str) -> int:
    token_id = tok.token_to_id(token)
    if token_id is None:
        raise ValueError(f"the tokenizer's vocabulary has no {token} token")
    return int(token_id)


def _check_plain(tok) -> None:
    # Truncation would silently cut passages (answers lost without a trace); padding would add [PAD]s
    # as if they were context.  Windows do both explicitly, so the tokenizer must do neither.
    if getattr(tok, "truncation", None) or getattr(tok, "padding", None):
        raise ValueError("make_windows needs a tokenizer with truncation and padding disabled")
