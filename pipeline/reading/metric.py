"""CMRC2018 official evaluation (EM / F1), reimplemented without nltk.

Follows cmrc2018_evaluate.py (the CLUE / HFL release):
- ``mixed_segmentation``: lowercase and strip; every CJK char (U+4E00..U+9FA5) and every char of the
  punctuation list below is its own token; runs of other chars (English words, digits, ...) are
  word-tokenized.  With ``rm_punc`` the listed punctuation is dropped *before* segmentation, so it does
  not split the run it sat in ("ω-force" -> "ωforce"), exactly like the official script.
- ``remove_punctuation``: lowercase, strip, drop the listed punctuation.
- F1: longest common *contiguous* run (``find_lcs``) of the two segmented token lists, punctuation removed;
  EM: equality after ``remove_punctuation``.  Both are the max over a question's gold answers.
- A question without a prediction (None) scores 0 on both, as the official script counts it.

The official script word-tokenizes the non-CJK runs with nltk.word_tokenize.  ``_word_tokenize`` is a
small stand-in: split on whitespace and split off ASCII punctuation, keeping '.' and ',' between
alphanumerics ("3.5", "1,000").  It differs from nltk only in rare English cases (nltk splits "don't"
into "do" "n't", we into "don" "'" "t"), which CMRC's Chinese answers almost never contain.

Imports only stdlib and numpy, like the other pure modules of this package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

# The official list, verbatim (its "……" is two chars and so never matches a single char: kept as is).
PUNCTUATION = frozenset(
    [
        "-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=",
        "，", "。", "：", "？", "！", "“", "”", "；", "’", "《", "》", "……", "·", "、",
        "「", "」", "（", "）", "－", "～", "『", "』",
    ]
)  # fmt: skip

_CJK = re.compile(r"[\u4e00-\u9fa5]")
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
_WORD = re.compile(rf"[^\s{_ASCII_PUNCT}]+(?:[.,][^\s{_ASCII_PUNCT}]+)*|[{_ASCII_PUNCT}]")


@dataclass(frozen=True)
class QAScores:
    em: float  # fraction 0..1
    f1: float  # fraction 0..1
    count: int  # questions scored


def cmrc_scores(predictions: Sequence[str | None], gold: Sequence[Sequence[str]]) -> QAScores:
    """Mean EM and F1 over questions; ``gold[i]`` holds every gold answer text of question i."""
    if len(predictions) != len(gold):
        raise ValueError(f"{len(predictions)} predictions for {len(gold)} questions")
    em = f1 = 0.0
    for i, (prediction, answers) in enumerate(zip(predictions, gold)):
        if not answers:
            raise ValueError(f"question {i} has no gold answers")
        if prediction is None:
            continue
        em += em_score(prediction, answers)
        f1 += f1_score(prediction, answers)
    n = len(gold)
    return QAScores(em=em / n if n else 0.0, f1=f1 / n if n else 0.0, count=n)


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    pred_segs = mixed_segmentation(prediction, rm_punc=True)
    best = 0.0
    for answer in answers:
        ans_segs = mixed_segmentation(answer, rm_punc=True)
        lcs_len = find_lcs(ans_segs, pred_segs)
        if lcs_len == 0:
            continue
        precision = lcs_len / len(pred_segs)
        recall = lcs_len / len(ans_segs)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def em_score(prediction: str, answers: Sequence[str]) -> float:
    pred = remove_punctuation(prediction)
    return 1.0 if any(remove_punctuation(answer) == pred for answer in answers) else 0.0


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    segs: list[str] = []
    run = ""
    for char in str(text).lower().strip():
        if rm_punc and char in PUNCTUATION:
            continue
        if _CJK.match(char) or char in PUNCTUATION:
            if run:
                segs.extend(_word_tokenize(run))
                run = ""
            segs.append(char)
        else:
            run += char
    if run:
        segs.extend(_word_tokenize(run))
    return segs


def remove_punctuation(text: str) -> str:
    return "".join(char for char in str(text).lower().strip() if char not in PUNCTUATION)


def find_lcs(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous run of tokens (the official find_lcs, length only)."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                if current[j + 1] > best:
                    best = current[j + 1]
        previous = current
    return best


def _word_tokenize(text: str) -> list[str]:
    return _WORD.findall(text)
