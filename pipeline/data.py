"""Reading task data: CLUE-format JSON lines, or CSV/TSV tables, from a local directory, or paddlenlp's CLUE loader
online.

Every problem is reported as a ``DataError`` naming the file and the line or field, before any
training starts.  Labels are mapped to ids through ``labels.json`` order when the data directory has
one (CLUE ships it for TNEWS and IFLYTEK), otherwise through the task config's ``labels``.  A multi-label
classifier's row holds a set of labels: a JSON list, or one string cut at a separator (a table's cell).
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from pipeline.env import is_online
from pipeline.errors import DataError, shown_json
from pipeline.labels_file import json_lines, read_label_file

# data.format -> the delimiter of a table; every other classification format is JSON lines
TABLE_DELIMITERS = {"csv": ",", "tsv": "\t"}
# labels read from the train split (none listed): more distinct values than this share of its rows is no label column
MAX_INFERRED_LABEL_SHARE = 0.5


class TaskConfigView(Protocol):
    """What this module reads of a task config (``pipeline.config.TaskConfig``, not imported: the config checks a
    kind's data formats, and the kinds read their data here)."""

    task: str
    labels: Sequence[str]
    data: Any  # pipeline.config.DataConfig

    def data_dir(self) -> Path | None: ...


@dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    # index into TaskDataset.labels; a multi-label row's set: 0/1 per label, in TaskDataset.labels order
    label: int | tuple[int, ...]
    where: str = field(default="", compare=False, repr=False)  # file:line it was read from (smoke names it)


@dataclass(frozen=True)
class Split:
    name: str
    examples: tuple[Any, ...]  # Example; LabelingExample (NER); QAExample (reading comprehension)
    source: str  # file path or "paddlenlp:clue/<name>/<split>"
    # rows dropped on purpose, by reason (data.skip_labels, overlapping spans, ...): reported, never silent
    skip_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        return sum(self.skip_reasons.values())


@dataclass(frozen=True)
class TaskDataset:
    labels: tuple[str, ...]  # label values as in the data, in id order
    label_names: tuple[str, ...]
    train: Split
    dev: Split
    fingerprint: str  # content hash of everything read; part of the stage cache keys
    labels_from: str = ""  # said where the labels were read from the train split (none listed): the file


def data_hashes(cfg: TaskConfigView) -> dict[str, str]:
    """Content hashes of the task's data files (no parsing: cheap enough for ``status``): an input of every stage
    that reads the data."""
    from pipeline.hashing import file_sha256

    d = cfg.data_dir()
    if d is not None and d.is_dir():
        out = {}
        for name in (cfg.data.train_file, cfg.data.dev_file, cfg.data.labels_file):
            if name and (d / name).is_file():
                out[f"data:{name}"] = file_sha256(d / name)
        return out
    if d is not None and d.exists():
        raise DataError(f"data dir is not a directory: {d}")
    return {"data": f"paddlenlp:clue/{cfg.data.clue_name}"}


def resolve_local_dir(cfg: TaskConfigView) -> Path:
    """The local data directory of a task whose format has no online fallback."""
    data_dir = cfg.data_dir()
    if data_dir is None:
        raise DataError(f"task {cfg.task!r}: no data dir: pass DATA_DIR=<dir> (make) or --data-dir <dir>")
    if not data_dir.exists():
        raise DataError(f"data dir not found: {data_dir} (set DATA_DIR=... or --data-dir to the {cfg.data.format} files)")
    if not data_dir.is_dir():
        raise DataError(f"data dir is not a directory: {data_dir}")
    return data_dir


def data_fingerprint(paths: Sequence[Path], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for p in paths:
        digest.update(Path(p).name.encode())
        digest.update(Path(p).read_bytes())
    return digest.hexdigest()


def load_classification_data(cfg: TaskConfigView, separator: str | None = None,
                             hierarchy: str | None = None) -> TaskDataset:
    """A classifier's splits: one label per row, or with ``separator`` a set per row (multi-label: a JSON list, or a
    string cut at ``separator``; an empty one is no label).  With ``hierarchy`` (``##``) a label is a path, and a text
    with ``A##B`` has ``A`` too (``with_ancestors``)."""
    data_dir = cfg.data_dir()
    explicit = cfg.data.dir is not None
    if data_dir is not None and data_dir.exists():
        return _load_local(cfg, data_dir, separator, hierarchy)
    if data_dir is not None and explicit and not _is_default_dir(cfg):
        raise DataError(f"data dir not found: {data_dir} (set DATA_DIR=... or --data-dir to {_format_words(cfg)})")
    if separator is not None:
        raise DataError(f"task {cfg.task}: no local data{f' ({data_dir} does not exist)' if data_dir else ''}: a "
                        "multi-label task's data is read from local files (DATA_DIR=<dir> or --data-dir <dir>)")
    return _load_online(cfg, data_dir)


def _format_words(cfg: TaskConfigView) -> str:
    fmt = cfg.data.format
    return f"{fmt.upper()} files with a header row (data.format: {fmt})" if fmt in TABLE_DELIMITERS else "CLUE JSON lines"


def _is_default_dir(cfg: TaskConfigView) -> bool:
    # The task YAMLs point at ../shared/data/<task> for development machines; on other machines that
    # directory is simply absent and the online loader is the right fallback, not an error.
    return cfg.data.dir is not None and cfg.data.dir.startswith("../shared/")


def _load_online(cfg: TaskConfigView, tried: Path | None) -> TaskDataset:
    hint = (
        f"no local data for task {cfg.task!r}"
        + (f" ({tried} does not exist)" if tried else "")
        + f": pass DATA_DIR=<dir> (make) or --data-dir <dir> with {cfg.data.train_file} and "
        f"{cfg.data.dev_file} in {_format_words(cfg)}"
    )
    if not cfg.data.clue_name:
        raise DataError(hint)
    if not is_online():
        raise DataError(hint + "; the machine is offline, so paddlenlp's CLUE download is not possible")
    from paddlenlp.datasets import load_dataset  # heavy; only on this path

    labels = tuple(cfg.labels)
    if not labels:
        raise DataError(f"task {cfg.task}: the config lists no labels and there is no labels.json to read")
    index = _label_index(labels)
    splits = {}
    for split_name in ("train", "dev"):
        ds = load_dataset("clue", cfg.data.clue_name, splits=split_name)
        label_list = [str(x) for x in (ds.label_list or [])]
        examples, skipped = [], 0
        for i, row in enumerate(ds):
            raw_label = row.get("label")
            value = label_list[raw_label] if label_list and isinstance(raw_label, int) else str(raw_label)
            where = f"paddlenlp:clue/{cfg.data.clue_name}/{split_name}#{i}"
            ex = _example(cfg, row, value, index, where)
            if ex is None:
                skipped += 1
            else:
                examples.append(ex)
        splits[split_name] = Split(split_name, tuple(examples), f"paddlenlp:clue/{cfg.data.clue_name}/{split_name}",
                                  _skip_labels(skipped))
    fp = hashlib.sha256(f"paddlenlp:clue/{cfg.data.clue_name}:{len(splits['train'].examples)}".encode()).hexdigest()
    return TaskDataset(labels, _names(cfg, labels), splits["train"], splits["dev"], fp)


def _load_local(cfg: TaskConfigView, data_dir: Path, separator: str | None, hierarchy: str | None) -> TaskDataset:
    if not data_dir.is_dir():
        raise DataError(f"data dir is not a directory: {data_dir}")
    digest = hashlib.sha256()
    labels, file_names = _read_labels(cfg, data_dir, digest)
    if labels is not None and hierarchy is not None:
        listed = data_dir / cfg.data.labels_file if cfg.data.labels_file else None
        _check_hierarchy(labels, hierarchy, listed if listed is not None and listed.is_file() else None)
    splits, labels_from = {}, ""
    for split_name, file_name in (("train", cfg.data.train_file), ("dev", cfg.data.dev_file)):
        path = data_dir / file_name
        if not path.is_file():
            raise DataError(f"{path}: split {split_name!r} not found in data dir {data_dir} "
                            f"(data.{split_name}_file names it{_other_forms(path, split_name)})")
        rows = split_rows(cfg, path, digest)
        if labels is None:  # neither a labels.json nor the config lists them: the train split's, sorted
            labels, labels_from = _labels_in(cfg, rows, path, separator, hierarchy), str(path)
        splits[split_name] = split_examples(cfg, path, split_name, rows, labels, labels_from, separator, hierarchy)
    names = _names(cfg, labels) if cfg.label_names or not file_names else tuple(file_names)
    return TaskDataset(labels, names, splits["train"], splits["dev"], digest.hexdigest(), labels_from)


def _other_forms(path: Path, split_name: str) -> str:
    """What the data dir holds under the split file's name in another form (train.tsv beside a missing train.json):
    the settings that read it."""
    for other in sorted(path.parent.glob(f"{path.stem}.*")):
        fmt = {".csv": "csv", ".tsv": "tsv", ".json": "clue", ".jsonl": "clue"}.get(other.suffix)
        if fmt and other.is_file():
            return f"; the dir has {other.name}: data.format: {fmt}, data.{split_name}_file: {other.name}"
    return ""


def _labels_in(cfg: TaskConfigView, rows: list[tuple[int, dict]], path: Path, separator: str | None,
               hierarchy: str | None = None) -> tuple[str, ...]:
    """The label values of the train split's rows, sorted (``sorted_labels``; ``data.skip_labels`` left out; with
    ``hierarchy``, every label's ancestors too): the ids are their order, the same whatever order the rows come in.
    Nobody checked them against a list, so two that differ only in spaces (``positive`` and ``positive `` would be two
    classes) and a column of mostly distinct values (a text named as the label field) are refused naming the file."""
    field_name = cfg.data.label_field
    first: dict[str, int] = {}
    for lineno, row in rows:
        if field_name in row:
            where = f"{path}:{lineno}"
            for value in with_ancestors(row_labels(row[field_name], separator, where, field_name), hierarchy, where):
                first.setdefault(value, lineno)
    labels = sorted_labels(set(first) - set(cfg.data.skip_labels))
    by_stripped: dict[str, str] = {}
    for label in labels:
        other = by_stripped.setdefault(label.strip(), label)
        if other != label:
            a, b = sorted((other, label), key=first.get)
            raise DataError(f"{path}:{first[b]}: label {b!r} differs from {a!r} (line {first[a]}) only in spaces: fix "
                            "the data, or list the task's labels in its config (labels:)")
    if len(labels) > MAX_INFERRED_LABEL_SHARE * len(rows) and len(labels) > 100:
        raise DataError(f"{path}: field {field_name!r} holds {len(labels)} distinct values in {len(rows)} rows: not a "
                        "label column? (data.label_field names it; labels: in the config lists the labels)")
    return tuple(labels)


def sorted_labels(values) -> list[str]:
    """Labels in the order their ids take: as numbers when every one is an integer (``2`` before ``10``: ids that
    follow a dataset's own numbering), else as strings."""
    values = list(values)
    if values and all(v.strip().lstrip("-").isdigit() and v == v.strip() for v in values):
        return sorted(values, key=lambda v: (int(v), v))
    return sorted(values)


def _read_labels(cfg: TaskConfigView, data_dir: Path, digest) -> tuple[tuple[str, ...] | None, list[str] | None]:
    """(the labels in labels.json's order, else the config's, None when neither lists them: the train split's, then;
    the names labels.json gives them, its ``label_desc``, the labels' names where the config gives none)."""
    path = data_dir / cfg.data.labels_file if cfg.data.labels_file else None
    if path is None or not path.is_file():
        return (tuple(cfg.labels) if cfg.labels else None), None
    raw = path.read_bytes()
    digest.update(raw)
    text = raw.decode("utf-8", errors="replace")
    labels, names = read_label_file(path, DataError, text)
    if cfg.labels and set(cfg.labels) != set(labels):
        extra = sorted(set(labels) - set(cfg.labels))
        missing = sorted(set(cfg.labels) - set(labels))
        raise DataError(
            f"{path}: label set does not match task {cfg.task!r} config "
            f"({len(labels)} vs {len(cfg.labels)} labels; only in file: {extra[:5]}, only in config: {missing[:5]})"
        )
    return tuple(labels), names


def split_rows(cfg: TaskConfigView, path: Path, digest=None) -> list[tuple[int, dict]]:
    """(line, row) for each row of a split's file, JSON lines or a CSV/TSV table (``data.format``)."""
    raw = path.read_bytes()
    if digest is not None:
        digest.update(path.name.encode())
        digest.update(raw)
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (what spreadsheet programs write) is not part of line 1
    except UnicodeDecodeError as exc:
        lineno = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{lineno}: not valid UTF-8") from None
    fmt = cfg.data.format
    if fmt in TABLE_DELIMITERS:
        return list(table_rows(text, path, TABLE_DELIMITERS[fmt], cfg.data.columns, _fields_named(cfg)))
    return list(_json_rows(text, path))


def split_examples(cfg: TaskConfigView, path: Path, split_name: str, rows: list[tuple[int, dict]],
                   labels: tuple[str, ...], labels_from: str = "", separator: str | None = None,
                   hierarchy: str | None = None) -> Split:
    """The examples of a split's rows, each label looked up in ``labels`` (``labels_from``: the file they were read
    from, when neither labels.json nor the config lists them; ``separator``: a row holds a set of labels); a bad row
    raises naming file:line and field."""
    examples, skipped, index = [], 0, _label_index(labels)
    known = f"read from {labels_from}: no labels.json or config labels" if labels_from else "labels.json / config"
    for lineno, row in rows:
        if cfg.data.label_field not in row:
            raise DataError(f"{path}:{lineno}: field {cfg.data.label_field!r} missing")
        where, value = f"{path}:{lineno}", row[cfg.data.label_field]
        if separator is not None:
            values = with_ancestors(row_labels(value, separator, where, cfg.data.label_field), hierarchy, where)
            examples.append(_labeled_set(cfg, row, values, index, where, known))
            continue
        ex = _example(cfg, row, row_labels(value, None, where, cfg.data.label_field)[0], index, where, known)
        if ex is None:
            skipped += 1
        else:
            examples.append(ex)
    if not examples:
        raise DataError(f"{path}: split {split_name!r} is empty")
    return Split(split_name, tuple(examples), str(path), _skip_labels(skipped))


def _json_rows(text: str, path: Path):
    for lineno, row in json_lines(text, path, DataError):
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def _fields_named(cfg: TaskConfigView) -> list[str]:
    """The columns a classification row is read from: text_a's, text_b's and the label's."""
    named = []
    for spec in (cfg.data.text_a, cfg.data.text_b, cfg.data.label_field):
        named.extend([spec] if isinstance(spec, str) else spec or [])
    return named


def table_rows(text: str, path: Path, delimiter: str, columns: Sequence[str] | None, needed: Sequence[str]):
    """(line, {column: value}) for each row of a CSV or TSV text.  The first non-blank line names the columns, unless
    ``columns`` does (a file without a header).  CSV quotes as RFC 4180 does (a quoted field may hold commas and line
    breaks; the line given is the row's first); TSV has no quoting, as PaddleNLP's TSV datasets have none (a text may
    hold a ``"``), so a tab inside a text shows as a row with a column too many, refused naming its line."""
    kind = "TSV" if delimiter == "\t" else "CSV"
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    header, header_line, last_line = (list(columns) if columns else None), 0, 0
    if header is not None:
        _check_header(f"{path}: data.columns", header, needed, kind)
    while True:
        limit = csv.field_size_limit(len(text) + 1)  # the csv module's 128 KiB cap is no rule of ours: a long text is
        try:                                          # cut to max_seq_len tokens like any other
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{path}:{reader.line_num}: malformed {kind} ({exc})") from None
        finally:
            csv.field_size_limit(limit)  # a process-wide setting: put back before anything else reads a CSV
        first_line, last_line = last_line + 1, reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # a blank line
        if header is None:
            header, header_line = row, first_line
            _check_header(f"{path}:{header_line}: the {kind} header", header, needed, kind)
            continue
        if len(row) != len(header):
            said = f"the header (line {header_line})" if header_line else "data.columns"
            hint = ": a tab inside a text?" if delimiter == "\t" and len(row) > len(header) else ""
            raise DataError(f"{path}:{first_line}: {len(row)} columns where {said} has {len(header)}{hint}")
        yield first_line, dict(zip(header, row))


def _check_header(where: str, header: list[str], needed: Sequence[str], kind: str) -> None:
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        raise DataError(f"{where} repeats column(s) {dup}")
    missing = [c for c in needed if c not in header]
    if missing:
        raise DataError(f"{where} {header[:8]} has no column {missing[0]!r} (the task's data.text_a / text_b / "
                        f"label_field name columns; a {kind} file without a header: data.columns lists them)")


def _skip_labels(count: int) -> dict[str, int]:
    return {"data.skip_labels": count} if count else {}


def _label_index(labels: Sequence[str]) -> dict[str, int]:
    """label value -> id: one dict, so that a row's label is found at once however many labels there are."""
    return {v: i for i, v in enumerate(labels)}


def row_labels(value: Any, separator: str | None, where: str, field_name: str) -> list[str]:
    """A row's label values: the one value (``separator`` None), or a multi-label row's set: a JSON list's items, or a
    string cut at ``separator`` with the spaces around each part cut off (an empty string: no label)."""
    if separator is None:
        if isinstance(value, list):
            raise DataError(f"{where}: field {field_name!r} holds a list {shown_json(value)}: several labels per text? "
                            "classification.multi_label: true reads it as a set (one label per text: a single value)")
        return [str(value)]
    if isinstance(value, list):
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            raise DataError(f"{where}: field {field_name!r}: a label list holds labels (strings or integers), got "
                            f"{shown_json(value)}")
        parts = [str(v) for v in value]
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        parts = [p.strip() for p in str(value).split(separator)] if str(value).strip() else []
    else:
        raise DataError(f"{where}: field {field_name!r} must be a list of labels or a string of them, got "
                        f"{type(value).__name__}")
    if any(not p.strip() for p in parts):
        raise DataError(f"{where}: field {field_name!r}: an empty label in {value!r} (separator {separator!r})")
    return parts


def with_ancestors(values: list[str], hierarchy: str | None, where: str) -> list[str]:
    """A row's labels and, with ``hierarchy``, each one's ancestors (``A##B##C``: ``A``, ``A##B``, ``A##B##C``), each
    once, in the order met: PaddleNLP's hierarchical data lists them all, a row that names only its leaf means them
    too.  An empty level (``A####B``, ``##B``) is refused naming the row."""
    if hierarchy is None:
        return values
    out: dict[str, None] = {}
    for value in values:
        parts = value.split(hierarchy)
        if any(not p.strip() for p in parts):
            raise DataError(f"{where}: label {value!r} has an empty level (classification.hierarchy_separator "
                            f"{hierarchy!r})")
        for depth in range(1, len(parts) + 1):
            out.setdefault(hierarchy.join(parts[:depth]))
    return list(out)


def _check_hierarchy(labels: Sequence[str], hierarchy: str, path: Path | None) -> None:
    """Listed labels (a labels file, the config's ``labels:``) include every label's parent: a text with ``A##B`` has
    ``A``, so ``A`` needs an id of its own."""
    where = str(path) if path is not None else "labels: (the task config)"
    listed = set(labels)
    for label in labels:
        for parent in with_ancestors([label], hierarchy, where)[:-1]:
            if parent not in listed:
                raise DataError(f"{where}: label {label!r}: its parent {parent!r} is not listed (classification."
                                f"hierarchy_separator {hierarchy!r}: a text with {label!r} has {parent!r} too)")


def _labeled_set(cfg: TaskConfigView, row: dict, values: list[str], index: dict[str, int], where: str,
                 known: str) -> Example:
    """A multi-label row: its texts and its set of labels as 0/1 per label (none is a row too: a text no label fits)."""
    unknown = [v for v in values if v not in index]
    if unknown:
        raise DataError(f"{where}: field {cfg.data.label_field!r}: label {unknown[0]!r} is not one of the task's "
                        f"{len(index)} labels ({known})")
    chosen = [0] * len(index)
    for v in values:
        chosen[index[v]] = 1
    return Example(*_texts(cfg, row, where), tuple(chosen), where)


def _example(cfg: TaskConfigView, row: dict, label_value: str, index: dict[str, int], where: str,
             known: str = "labels.json / config") -> Example | None:
    if label_value in cfg.data.skip_labels:
        return None
    if label_value not in index:
        raise DataError(
            f"{where}: field {cfg.data.label_field!r}: label {label_value!r} is not one of the task's "
            f"{len(index)} labels ({known})"
        )
    return Example(*_texts(cfg, row, where), index[label_value], where)


def _texts(cfg: TaskConfigView, row: dict, where: str) -> tuple[str, str | None]:
    """A classifier row's text and, for a pair task, its second text."""
    text_a = _text(row, cfg.data.text_a, cfg.data.join, where)
    return text_a, (_text(row, cfg.data.text_b, cfg.data.join, where) if cfg.data.text_b else None)


def served_text_problem(text: str) -> str | None:
    """Why the served model would refuse ``text`` as a request's ``text`` or ``text_pair`` (None: it takes it): the
    one rule training data is held to as well, so that no example is trained on or scored that is never served
    (``serving.triton.text_input.decode_item`` refuses the same)."""
    if not text.strip():
        return "is empty" if not text else "is only whitespace"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not encodable as UTF-8 (character {exc.start}: a lone surrogate)"
    return None


def _text(row: dict, spec: str | list[str], join: str, where: str) -> str:
    """A text field of a row, refused (file:line and field) when the served model would refuse it: empty, whitespace
    only (a keyword list ``[]`` included), not UTF-8."""
    text = _field(row, spec, join, where)
    problem = served_text_problem(text)
    if problem:
        name = spec if isinstance(spec, str) else "+".join(spec)
        raise DataError(f"{where}: field {name!r} {problem}: the served model refuses such a text, so it is neither "
                        "trained on nor scored; fix or remove the row")
    return text


def _field(row: dict, spec: str | list[str], join: str, where: str) -> str:
    if isinstance(spec, list):
        return join.join(_field(row, s, join, where) for s in spec)
    node = row
    for part in ([spec] if spec in row else spec.split(".")):  # a key with a dot in it (a table's column) is one key
        if not isinstance(node, dict) or part not in node:
            raise DataError(f"{where}: field {spec!r} missing")
        node = node[part]
    if isinstance(node, list):
        return join.join(str(x) for x in node)
    if not isinstance(node, str):
        raise DataError(f"{where}: field {spec!r} must be text, got {type(node).__name__}")
    return node


def _names(cfg: TaskConfigView, labels: tuple[str, ...]) -> tuple[str, ...]:
    if cfg.label_names and len(cfg.label_names) == len(cfg.labels):
        by_value = dict(zip(cfg.labels, cfg.label_names))
        return tuple(by_value.get(v, v) for v in labels)
    return labels
