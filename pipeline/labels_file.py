"""Reading a ``labels.json`` in the shapes people actually write, or refusing it in one line.

Accepted (the label is the ``label`` field of an object, or the value itself):

* JSON lines, one label per line: ``{"label": "100", "label_desc": "news_story"}`` or ``"100"``;
* one JSON array, on one line or many: ``["100", "101"]`` or ``[{"index": 0, "label": "100"}, ...]``
  (objects that all carry an integer ``index`` are put in that order);
* a model's ``config.json`` ``id2label`` map (``{"0": "100", ...}``), through :func:`labels_from_id2label`;
* a ``.txt`` file, one label per line as plain text (PaddleNLP's text_classification applications' ``label.txt``).

Anything else raises the caller's error type naming the file and the line (JSON lines) or the item (array).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any


NAME_FIELDS = ("label_desc", "label_des")  # a label's name beside it: TNEWS's labels.json, IFLYTEK's


def read_labels(path: Path, error: type[Exception], text: str | None = None) -> list[str]:
    """The labels in ``path`` in order (``text``: its content, when the caller already read it)."""
    return read_label_file(path, error, text)[0]


def read_label_file(path: Path, error: type[Exception], text: str | None = None) -> tuple[list[str], list[str] | None]:
    """(the labels in ``path`` in order, the name written beside each: CLUE's ``label_desc``, ``news_story`` beside
    TNEWS's ``100``, IFLYTEK's ``label_des``; None unless every label has one, a name that is no string counting as
    none), from one reading of the file."""
    entries = _entries(Path(path), error, text)
    labels = [_label(obj, error, where) for obj, where in entries]
    if not labels:
        raise error(f"{path}: no labels")
    dup = sorted(x for x, n in Counter(labels).items() if n > 1)  # one pass: 100,000 labels are counted at once
    if dup:
        raise error(f"{path}: duplicate labels {dup[:5]}")
    names = [next((obj[k] for k in NAME_FIELDS if k in obj), None) if isinstance(obj, dict) else None
             for obj, _ in entries]
    return labels, ([str(n) for n in names] if all(isinstance(n, str) and n for n in names) else None)


def _entries(path: Path, error: type[Exception], text: str | None) -> list[tuple[Any, str]]:
    """Each entry of a labels file (an object or a bare value) with where it is, in label order."""
    text = path.read_text(encoding="utf-8", errors="replace") if text is None else text
    body = text.strip()
    if not body:
        raise error(f"{path}: no labels")
    if path.suffix == ".txt":  # plain text: each non-blank line is a label, the spaces around it not part of it
        return [(line.strip(), f"{path}:{lineno}") for lineno, line in enumerate(text.splitlines(), 1) if line.strip()]
    if body.startswith("["):
        try:
            items = json.loads(body)
        except json.JSONDecodeError as exc:
            raise error(f"{path}: malformed JSON array (line {exc.lineno}: {exc.msg})") from None
        return _from_array(path, items, error)
    return [(obj, f"{path}:{lineno}") for lineno, obj in
            json_lines(text, path, error, "; expected one label per line or one JSON array")]


def json_lines(text: str, path: Path, error: type[Exception], hint: str = ""):
    """(line number, parsed value) for each non-blank line of a JSON-lines text; a malformed line raises ``error``
    naming the file, line and column."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno}){hint}") from None


def labels_from_id2label(path: Path, id2label: Any, error: type[Exception]) -> list[str]:
    """``config.json``'s ``id2label`` (keys are ids as strings) as a list ordered by id: 0..n-1, no gaps."""
    if not isinstance(id2label, dict) or not id2label:
        raise error(f"{path}: id2label must be a non-empty mapping of id to label")
    try:
        ids = sorted(int(k) for k in id2label)
    except (TypeError, ValueError):
        raise error(f"{path}: id2label keys must be integer ids, got {sorted(map(str, id2label))[:3]}") from None
    if ids != list(range(len(ids))):
        raise error(f"{path}: id2label ids must be 0..{len(ids) - 1} without gaps, got {ids[:5]}...")
    by_id = {int(k): v for k, v in id2label.items()}
    return [_label(by_id[i], error, f"{path}: id2label[{i}]") for i in ids]


def placeholder_id2label(id2label: Any) -> bool:
    """``{"0": "LABEL_0", ...}``: what transformers/PaddleNLP write when nobody named the labels (says nothing)."""
    return isinstance(id2label, dict) and all(str(v) == f"LABEL_{k}" for k, v in id2label.items())


def _from_array(path: Path, items: Any, error: type[Exception]) -> list[tuple[Any, str]]:
    if not isinstance(items, list):
        raise error(f"{path}: expected a JSON array of labels")
    if items and all(isinstance(o, dict) and isinstance(o.get("index"), int) and not isinstance(o.get("index"), bool)
                     for o in items):
        items = sorted(items, key=lambda o: o["index"])
    return [(obj, f"{path}: item {i}") for i, obj in enumerate(items)]


def _label(obj: Any, error: type[Exception], where: str) -> str:
    value = obj.get("label") if isinstance(obj, dict) else obj
    if isinstance(obj, dict) and value is None:
        raise error(f"{where}: field 'label' missing (keys: {', '.join(sorted(map(str, obj))) or 'none'})")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise error(f"{where}: a label must be a string or a number, got {value!r}")
    return str(value)
