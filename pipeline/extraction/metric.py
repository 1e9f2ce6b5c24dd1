"""Span-level precision, recall and F1 over (content, prompt) pairs, as UIE's ``SpanEvaluator`` counts them:
a predicted span is correct when its start and end equal a gold span's; micro-averaged over all pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class SpanScores:
    precision: float
    recall: float
    f1: float
    correct: int
    predicted: int
    gold: int


def span_scores(predicted: Sequence[Sequence[tuple[int, int]]], gold: Sequence[Sequence[tuple[int, int]]]) -> SpanScores:
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} examples")
    correct = sum(len(set(p) & set(g)) for p, g in zip(predicted, gold))
    n_pred = sum(len(set(p)) for p in predicted)
    n_gold = sum(len(set(g)) for g in gold)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return SpanScores(precision, recall, f1, correct, n_pred, n_gold)
