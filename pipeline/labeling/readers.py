"""Reading NER data: CLUENER2020 JSON lines and MSRA-style BIO files into entities with char spans.

Every problem is a ``DataError`` naming ``<path>:<line>``.  Spans become Python str indices with an
exclusive end (CLUENER's inclusive ends are converted here).  Deliberate drops are counted in
``LabelingSplit.skipped``, never silent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.errors import DataError
from pipeline.labeling.bio import Entity, entities_from_tags

OVERLAPPING = "overlapping_entity"
_PADDLENLP_SEP = "\x02"  # paddlenlp msra_ner: chars and tags joined by \x02, TAB between them
_PADDLENLP_HEADER = "text_a\tlabel"


@dataclass(frozen=True)
class LabelingExample:
    text: str
    entities: tuple[Entity, ...]  # sorted by start, non-overlapping


@dataclass(frozen=True)
class LabelingSplit:
    examples: tuple[LabelingExample, ...]
    source: str  # file path
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count (entities or rows dropped)


def entity_types(splits: Iterable[LabelingSplit]) -> list[str]:
    """Sorted entity types seen in the splits (the tag order a model is trained with)."""
    return sorted({e.type for split in splits for example in split.examples for e in example.entities})


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for lineno, line in enumerate(handle, start=1):
                yield lineno, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


# ---------------------------------------------------------------------------------------------- CLUENER


def read_cluener(path: Path, require_labels: bool = True, keep_overlapping: bool = False) -> LabelingSplit:
    """CLUENER2020 JSON lines: {"text": ..., "label": {type: {entity_text: [[start, end_inclusive], ...]}}}.

    ``require_labels=False`` reads unlabeled rows (test.json) as examples without entities.
    ``keep_overlapping``: keep every span (UIE asks one prompt per type, so spans of other types may overlap).
    Overlapping spans: the first by start (then the longer) is kept, the rest counted as skipped.
    """
    examples: list[LabelingExample] = []
    overlapping = 0
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: malformed JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        text = row.get("text")
        if not isinstance(text, str):
            raise DataError(f"{where}: field 'text' missing or not a string")
        if "label" not in row or row["label"] is None:
            if require_labels:
                raise DataError(f"{where}: field 'label' missing")
            examples.append(LabelingExample(text, ()))
            continue
        entities = _cluener_entities(row["label"], text, where)
        kept = sorted(entities, key=lambda e: (e.start, e.end, e.type)) if keep_overlapping else _drop_overlaps(entities)
        overlapping += len(entities) - len(kept)
        examples.append(LabelingExample(text, tuple(kept)))
    return LabelingSplit(tuple(examples), str(path), {OVERLAPPING: overlapping})


def _cluener_entities(label: object, text: str, where: str) -> list[Entity]:
    if not isinstance(label, dict):
        raise DataError(f"{where}: field 'label' must be an object {{type: {{entity: [[start, end], ...]}}}}")
    entities = []
    for entity_type, mentions in label.items():
        if not isinstance(mentions, dict):
            raise DataError(f"{where}: label {entity_type!r} must map entity text to spans")
        for entity_text, spans in mentions.items():
            if not isinstance(spans, list):
                raise DataError(f"{where}: spans of {entity_type} {entity_text!r} must be a list of [start, end]")
            for span in spans:
                if (
                    not isinstance(span, list)
                    or len(span) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                ):
                    raise DataError(f"{where}: span {span!r} of {entity_type} {entity_text!r} is not [start, end]")
                start, end = span[0], span[1] + 1  # CLUENER ends are inclusive
                if not 0 <= start < end <= len(text):
                    raise DataError(
                        f"{where}: span {span!r} of {entity_type} {entity_text!r} lies outside the text "
                        f"(length {len(text)})"
                    )
                if text[start:end] != entity_text:
                    raise DataError(
                        f"{where}: span {span!r} of {entity_type} is {text[start:end]!r}, not the entity {entity_text!r}"
                    )
                entities.append(Entity(entity_type, start, end, entity_text))
    return entities


def _drop_overlaps(entities: list[Entity]) -> list[Entity]:
    # BIO can tag each token once: keep the first (by start, then longer, then type for determinism).
    kept: list[Entity] = []
    for entity in sorted(entities, key=lambda e: (e.start, -(e.end - e.start), e.type)):
        if kept and entity.start < kept[-1].end:
            continue
        kept.append(entity)
    return kept


# ------------------------------------------------------------------------------------------------- MSRA


def read_msra_bio(path: Path) -> LabelingSplit:
    """MSRA-style BIO: "char<whitespace>TAG" per line, blank line between sentences (CoNLL style), or
    paddlenlp's msra_ner format: one sentence per line, "chars joined by \\x02<TAB>tags joined by \\x02".

    Tags are O, B-<type>, I-<type>; an I-<type> without a preceding B-<type> starts an entity (as
    conlleval counts it).  Tokens are joined without separators into the text (Chinese); a multi-char
    token keeps its chars and its entity spans cover all of them.
    """
    lines = list(_lines(path))
    # The format is decided per file: a one-char sentence in paddlenlp's format ("X\tO") has no \x02
    # and would otherwise read as one CoNLL token line.
    if any(_PADDLENLP_SEP in line or line == _PADDLENLP_HEADER for _, line in lines):
        examples = [
            _paddlenlp_line(line, f"{path}:{lineno}")
            for lineno, line in lines
            if line.strip() and not (lineno == 1 and line == _PADDLENLP_HEADER)
        ]
        return LabelingSplit(tuple(examples), str(path), {})

    examples: list[LabelingExample] = []
    tokens: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        if tokens:
            examples.append(_bio_example(tokens, tags))
        tokens.clear()
        tags.clear()

    for lineno, line in lines:
        where = f"{path}:{lineno}"
        fields = line.split()
        if not fields:
            flush()
            continue
        if len(fields) != 2:
            raise DataError(f"{where}: expected 'char TAG', got {len(fields)} field(s): {line.strip()!r}")
        _check_tag(fields[1], where)
        tokens.append(fields[0])
        tags.append(fields[1])
    flush()
    return LabelingSplit(tuple(examples), str(path), {})


def _paddlenlp_line(line: str, where: str) -> LabelingExample:
    parts = line.split("\t")
    if len(parts) != 2:
        raise DataError(f"{where}: expected 'chars<TAB>tags' joined by \\x02, got {len(parts)} TAB-separated field(s)")
    tokens, tags = parts[0].split(_PADDLENLP_SEP), parts[1].split(_PADDLENLP_SEP)
    if len(tokens) != len(tags):
        raise DataError(f"{where}: {len(tokens)} chars but {len(tags)} tags")
    for token in tokens:
        if not token:
            raise DataError(f"{where}: empty char between \\x02 separators")
    for tag in tags:
        _check_tag(tag, where)
    return _bio_example(tokens, tags)


def _check_tag(tag: str, where: str) -> None:
    if tag == "O":
        return
    prefix, sep, entity_type = tag.partition("-")
    if prefix not in ("B", "I") or not sep or not entity_type:
        raise DataError(f"{where}: malformed tag {tag!r} (expected O, B-<type> or I-<type>)")


def _bio_example(tokens: list[str], tags: list[str]) -> LabelingExample:
    ends = np.cumsum([len(token) for token in tokens], dtype=np.int64)
    offsets = np.stack([ends - np.asarray([len(t) for t in tokens], dtype=np.int64), ends], axis=1)
    text = "".join(tokens)
    return LabelingExample(text, tuple(entities_from_tags(tags, offsets, text)))
