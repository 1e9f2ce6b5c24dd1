"""UIE training/evaluation examples: one (content, prompt, result spans) per row.

Two sources:

* PaddleNLP's UIE JSON lines, ``{"content": ..., "prompt": ..., "result_list": [{"text", "start", "end"}]}``
  (``end`` exclusive, as PaddleNLP's ``doccano.py`` writes them);
* CLUENER2020, converted: every text is asked every prompt of the schema (``uie.prompts``: entity type ->
  Chinese prompt such as 姓名), and an entity type the text does not contain is a prompt with an empty
  result (a negative example: the model must learn to answer nothing).

Every problem is a ``DataError`` naming ``<path>:<line>`` and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from pipeline.errors import DataError
from pipeline.labels_file import json_lines


@dataclass(frozen=True)
class ExtractionExample:
    content: str
    prompt: str
    spans: tuple[tuple[int, int], ...]  # (char start, char end exclusive) into content; sorted, unique
    source: str = field(default="", compare=False)  # <path>:<line>, for messages (not what the example is)


def read_uie_lines(path: Path) -> list[ExtractionExample]:
    """PaddleNLP UIE JSON lines, checked: every result span lies inside the content and its text equals the slice."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out = []
    for lineno, row in json_lines(text, path, DataError):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        content, prompt = row.get("content"), row.get("prompt")
        if not isinstance(content, str) or not content:
            raise DataError(f"{where}: field 'content' missing, empty or not a string")
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataError(f"{where}: field 'prompt' missing, empty or not a string")
        results = row.get("result_list", [])
        if not isinstance(results, list):
            raise DataError(f"{where}: field 'result_list' must be a list of {{text, start, end}}")
        spans = set()
        for k, r in enumerate(results):
            if not isinstance(r, dict) or not all(isinstance(r.get(f), int) and not isinstance(r.get(f), bool)
                                                 for f in ("start", "end")):
                raise DataError(f"{where}: result_list[{k}] must be {{\"text\": str, \"start\": int, \"end\": int}}")
            start, end, text = r["start"], r["end"], r.get("text")
            if not 0 <= start < end <= len(content):
                raise DataError(f"{where}: result_list[{k}] span [{start}, {end}) lies outside the content (length {len(content)})")
            if text != content[start:end]:
                raise DataError(f"{where}: result_list[{k}] text {text!r} differs from the content slice "
                                f"[{start}, {end}) {content[start:end]!r}")
            spans.add((start, end))
        out.append(ExtractionExample(content, prompt.strip(), tuple(sorted(spans)), where))
    return out


def from_labeled_texts(examples: Sequence, prompts: Mapping[str, str], types: Sequence[str], source: str) -> list[ExtractionExample]:
    """Every text (``LabelingExample``: text + typed entities) asked the prompt of every type in ``types``, in that
    order; a type without entities in the text becomes a prompt with an empty result."""
    out = []
    for i, ex in enumerate(examples):
        for t in types:
            spans = tuple(sorted({(e.start, e.end) for e in ex.entities if e.type == t}))
            out.append(ExtractionExample(ex.text, prompts[t], spans, f"{source}:{i + 1}"))
    return out
