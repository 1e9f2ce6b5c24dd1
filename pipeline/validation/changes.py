"""The dev answers compression changed: the shipped form's prediction against the FP32 model's, example by example.

Parity's ``argmax_agreement`` says how many answers agree; a user deciding whether to ship wants the others: which
texts, what FP32 answered, what ships answers, and which way each went (fixed or broken).  validate writes them to
``changed.jsonl`` (one JSON object per changed example, in dev order) and their counts to its summary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

CHANGES_FILE = "changed.jsonl"


@dataclass(frozen=True)
class AnswerChanges:
    examples: int
    rows: tuple[dict, ...]  # each changed example: where it is, its input and gold, both answers, which are right

    @property
    def now_right(self) -> int:
        """FP32 answered wrong, the shipped form right."""
        return sum(1 for r in self.rows if r["shipped_right"] and not r["fp32_right"])

    @property
    def now_wrong(self) -> int:
        """FP32 answered right, the shipped form wrong."""
        return sum(1 for r in self.rows if r["fp32_right"] and not r["shipped_right"])

    def summary(self) -> dict:
        return {"examples": self.examples, "changed": len(self.rows), "now_right": self.now_right,
                "now_wrong": self.now_wrong, "file": CHANGES_FILE}

    def line(self) -> str:
        if not self.rows:
            return f"every one of {self.examples} dev answers is FP32's"
        right = sum(1 for r in self.rows if r["shipped_right"] and r["fp32_right"])  # another right answer (MRC)
        wrong = len(self.rows) - self.now_right - self.now_wrong - right
        either = (f", {right} right either way" if right else "") + (f", {wrong} wrong either way" if wrong else "")
        return (f"{len(self.rows)} of {self.examples} dev answers differ from FP32's: {self.now_right} now right, "
                f"{self.now_wrong} now wrong{either} ({CHANGES_FILE})")

    def write(self, path: Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for row in self.rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def answer_changes(kind, examples: Sequence, labels: Sequence[str], fp32: Sequence, shipped: Sequence) -> AnswerChanges:
    """The examples whose shipped prediction is not FP32's (``fp32``, ``shipped``: ``kind.predictions`` of each, one
    per example), each as ``kind.shown`` reads it."""
    rows = []
    for i, (example, a, b) in enumerate(zip(examples, fp32, shipped)):
        if a == b:
            continue
        where = getattr(example, "where", "") or getattr(example, "source", "")  # file:line where the reader kept it
        rows.append({"example": i, **({"where": where} if where else {}), **kind.shown(example, labels),
                     "fp32": kind.shown_answer(example, a, labels), "shipped": kind.shown_answer(example, b, labels),
                     "fp32_right": kind.is_right(example, a), "shipped_right": kind.is_right(example, b)})
    return AnswerChanges(len(examples), tuple(rows))
