"""Reading SQuAD v1-format JSON (CMRC2018 ships in it) into typed examples.

Problems that make the file unusable (bad JSON, missing keys) raise ``DataError`` naming the file and the
question id.  Problems with single questions or answers are repaired or skipped and counted in
``QASplit.skipped`` so the caller can report them; nothing is dropped silently.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pipeline.errors import DataError


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # char offset into the context; the answer is context[start:start + len(text)]


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class QASplit:
    examples: tuple[QAExample, ...]
    source: str
    skipped: dict[str, int] = field(default_factory=dict)
    # Reasons: "empty_question", "no_answer" (questions dropped); "answer_start_fixed",
    # "answer_not_in_context" (single answers repaired / dropped).


def read_squad(path: Path) -> QASplit:
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None

    skipped: dict[str, int] = {}
    examples: list[QAExample] = []
    articles = _get(raw, "data", list, path, "top level")
    for a, article in enumerate(articles):
        for p, para in enumerate(_get(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _get(para, "context", str, path, where)
            for q, qa in enumerate(_get(para, "qas", list, path, where)):
                qwhere = f"{where}.qas[{q}]"
                qid = _get(qa, "id", (str, int), path, qwhere)
                qwhere = f"question {qid}"
                question = _get(qa, "question", str, path, qwhere)
                answers_raw = _get(qa, "answers", list, path, qwhere)
                if not question.strip():
                    _count(skipped, "empty_question")
                    continue
                answers = []
                for n, ans in enumerate(answers_raw):
                    text = _get(ans, "text", str, path, f"{qwhere} answers[{n}]")
                    start = _get(ans, "answer_start", int, path, f"{qwhere} answers[{n}]")
                    fixed = _locate(context, text, start)
                    if fixed is None:
                        _count(skipped, "answer_not_in_context")
                        continue
                    if fixed != start:
                        _count(skipped, "answer_start_fixed")
                    answers.append(Answer(text=text, start=fixed))
                if not answers:
                    _count(skipped, "no_answer")
                    continue
                examples.append(QAExample(id=str(qid), question=question, context=context, answers=tuple(answers)))
    return QASplit(examples=tuple(examples), source=str(path), skipped=skipped)


def split_by_context(
    examples: Sequence[QAExample], held_out_fraction: float, seed: int
) -> tuple[tuple[QAExample, ...], tuple[QAExample, ...]]:
    """Deterministic (train_part, eval_part) split by passage.

    All questions about one passage go to the same side: questions on a shared passage are near-duplicates
    for the model, so splitting them would leak the answers into evaluation.  The fraction counts passages.
    """
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    contexts = list(dict.fromkeys(ex.context for ex in examples))  # first-appearance order: input-order stable
    if len(contexts) < 2:
        raise DataError(f"cannot hold out part of {len(contexts)} passage(s): need at least 2 distinct contexts")
    random.Random(seed).shuffle(contexts)
    n_eval = min(max(round(held_out_fraction * len(contexts)), 1), len(contexts) - 1)
    held_out = set(contexts[:n_eval])
    train = tuple(ex for ex in examples if ex.context not in held_out)
    evaluation = tuple(ex for ex in examples if ex.context in held_out)
    return train, evaluation


def _locate(context: str, text: str, start: int) -> int | None:
    """Where the answer really is: ``start`` when it matches, else the nearest occurrence, else None."""
    if not text:
        return None
    if 0 <= start and context.startswith(text, start):
        return start
    best = None
    pos = context.find(text)
    while pos != -1:
        if best is None or abs(pos - start) < abs(best - start):
            best = pos
        pos = context.find(text, pos + 1)
    return best


def _get(obj: Any, key: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(obj, dict):
        raise DataError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{path}: {where}: missing key {key!r}")
    value = obj[key]
    # bool is an int subclass; an answer_start of true is a data bug, not offset 1.
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"{path}: {where}: {key!r} must be {names}, got {type(value).__name__}")
    return value


def _count(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1
