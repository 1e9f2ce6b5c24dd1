"""Entity-level (chunk) precision / recall / F1, as conlleval and the CLUENER leaderboard count them.

An entity is correct only if its (type, start, end) matches a gold entity exactly.  Imports only the
standard library and numpy (copied verbatim into Triton model folders with bio.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class _EntityLike(Protocol):
    type: str
    start: int
    end: int


@dataclass(frozen=True)
class ChunkScores:
    precision: float  # fractions 0..1
    recall: float
    f1: float
    gold: int
    predicted: int
    correct: int
    per_type: dict[str, dict[str, float]] = field(default_factory=dict)  # type -> precision/recall/f1/gold


def _prf(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def chunk_f1(gold: Sequence[Iterable[_EntityLike]], pred: Sequence[Iterable[_EntityLike]]) -> ChunkScores:
    """Micro-averaged scores over examples; gold[i] and pred[i] are the entities of example i."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold examples but {len(pred)} predicted")
    gold_count: Counter[str] = Counter()
    pred_count: Counter[str] = Counter()
    correct_count: Counter[str] = Counter()
    for gold_entities, pred_entities in zip(gold, pred):
        # Sets: an entity predicted twice is one prediction, as a span can only be tagged once.
        gold_keys = {(e.type, e.start, e.end) for e in gold_entities}
        pred_keys = {(e.type, e.start, e.end) for e in pred_entities}
        gold_count.update(key[0] for key in gold_keys)
        pred_count.update(key[0] for key in pred_keys)
        correct_count.update(key[0] for key in gold_keys & pred_keys)
    per_type: dict[str, dict[str, float]] = {}
    for entity_type in sorted(set(gold_count) | set(pred_count)):
        p, r, f = _prf(correct_count[entity_type], pred_count[entity_type], gold_count[entity_type])
        per_type[entity_type] = {"precision": p, "recall": r, "f1": f, "gold": gold_count[entity_type]}
    total_gold, total_pred, total_correct = sum(gold_count.values()), sum(pred_count.values()), sum(correct_count.values())
    precision, recall, f1 = _prf(total_correct, total_pred, total_gold)
    return ChunkScores(precision, recall, f1, total_gold, total_pred, total_correct, per_type)
