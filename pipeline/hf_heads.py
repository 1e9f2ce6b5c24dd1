"""A trained head's labels matched to the task's: a trained head is kept, never silently dropped or misread.

``match_labels``, the one rule for every checkpoint: by the task's label ids or names, in any order (a PaddleNLP
checkpoint's labels.json gives ids and, as ``label_desc``, names; the finetune stage reorders its rows in a copy).

``map_head``: the head's ``id2label`` (``label2id`` must agree with it) is matched to the task's labels by their ids
or by their names (``label_names``; BIO tags for a tagger) in any order, and the head's rows are put in the task's
order.  transformers' placeholders ``LABEL_0 .. LABEL_{n-1}`` (nobody named the labels) are taken in index order
when the count is the task's, said, and checked on dev by the finetune stage (``dev_confusion``,
``assumed_order_verdict``: the dev confusion matrix's best assignment must be the index order).  Anything else
(other labels, another count, ``label2id`` disagreeing with ``id2label``) is refused in one line naming both label
sets and ``REPLACE_FLAG``, which fine-tunes a new head on the encoder instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from pipeline.errors import ModelError, shown_json

LABELLED_HEADS = ("ErnieForSequenceClassification", "ErnieForTokenClassification")  # heads whose outputs are labels
REPLACE_FLAG = "--set model.head=replace"


class Checkpoint(Protocol):
    """What the matching reads of a checkpoint (``hf_import.HFCheckpoint``, which calls it while converting)."""

    path: Path
    architecture: str  # the HF class named in config.json
    head: str | None  # this project's head class
    config: dict  # config.json as read


@dataclass(frozen=True)
class HeadMapping:
    """How a checkpoint's head outputs map to the task's labels."""

    order: tuple[int, ...]  # order[i]: the checkpoint's output (row of its classifier) for the task's label i
    by: str  # "ids" | "names" (the task's label ids or names, any order) | "assumed" (LABEL_i taken in index order)
    note: str  # the one line said about it


def _brief(values: Sequence[str], n: int = 6) -> str:
    """A label list in a message: its first ``n``, then how many more."""
    shown = ", ".join(map(str, values[:n]))
    return f"[{shown}{f', ... {len(values) - n} more' if len(values) > n else ''}]"


def check_head_kind(ckpt: Checkpoint, needed: str, kind: str) -> None:
    """Refuse a trained head of another kind than the task's (say a tagger given to a sentence classifier)."""
    if ckpt.head and ckpt.head != needed:
        raise ModelError(f"{ckpt.path}: its {ckpt.architecture} head is not the kind a {kind} task needs "
                         f"(...{needed.replace('Ernie', '', 1)}): not dropping a trained head; {REPLACE_FLAG} "
                         "fine-tunes a new one on its encoder")


def check_problem_type(ckpt: Checkpoint, needed: str | None, setting: str) -> None:
    """Refuse a sequence classifier trained for one label per text given to a multi-label task, or the other way
    (config.json's ``problem_type``, when it says): a softmax head read as sigmoids, or sigmoids as a softmax, answers
    what it was never trained to.  ``setting`` is the task config's key that says which the task is."""
    given = ckpt.config.get("problem_type")
    kinds = ("single_label_classification", "multi_label_classification")
    if needed is None or given not in kinds or given == needed:
        return
    raise ModelError(f"{ckpt.path}: config.json problem_type is {given!r} but the task's {setting} makes it "
                     f"{needed!r}: not reading a trained head as what it was not trained for; set {setting} to match "
                     f"the model, or {REPLACE_FLAG} fine-tunes a new head on its encoder")


def map_head(ckpt: Checkpoint, outputs: int, labels: Sequence[str], label_names: Sequence[str]) -> HeadMapping:
    """How the checkpoint's ``outputs`` head outputs map to the task's ``labels`` (``label_names``: their names),
    read from ``id2label`` (``label2id`` must agree with it): by ids or by names in any order, or LABEL_i placeholders
    taken in index order (``by`` "assumed": to be checked on dev); anything else is refused, naming both label sets
    and the flag that replaces the head."""
    from pipeline.labels_file import placeholder_id2label

    labels, label_names = [str(v) for v in labels], [str(v) for v in label_names]
    task = f"{len(labels)} labels {_brief(labels)}" + (f" (names {_brief(label_names)})" if label_names != labels else "")
    refuse = f"not dropping a trained head; {REPLACE_FLAG} fine-tunes a new one on its encoder"
    by_id = _head_labels(ckpt, outputs)
    head = [by_id[i] for i in range(len(by_id))]
    if outputs != len(labels):
        raise ModelError(f"{ckpt.path}: its {ckpt.architecture} head has {outputs} outputs {_brief(head)} but the task "
                         f"has {task}: {refuse}")
    mapping = match_labels(head, None, labels, label_names)
    if mapping is not None:
        return mapping
    if placeholder_id2label(by_id):
        note = (f"its head's labels are transformers' placeholders LABEL_0..LABEL_{outputs - 1}: assumed to be the "
                f"task's {_brief(label_names)} in that order (checked on dev); {REPLACE_FLAG} fine-tunes a new "
                "head instead")
        return HeadMapping(tuple(range(outputs)), "assumed", note)
    match = "match neither the ids nor the names of" if label_names != labels else "do not match"
    raise ModelError(f"{ckpt.path}: its {ckpt.architecture} head's labels {_brief(head)} (config.json id2label) "
                     f"{match} the task's {task}, in any order: {refuse}")


def match_labels(head: Sequence[str], head_names: Sequence[str] | None, labels: Sequence[str],
                 label_names: Sequence[str]) -> HeadMapping | None:
    """How a head whose outputs are ``head`` (``head_names``: the names written beside them, a PaddleNLP
    checkpoint's labels.json ``label_desc``) maps to the task's ``labels`` (``label_names``: their names): by ids
    or by names, in any order; None when no way matches.  One rule for every checkpoint a trained head comes in."""
    head, labels, label_names = [str(v) for v in head], [str(v) for v in labels], [str(v) for v in label_names]
    ways = [("ids", head, labels)] if label_names == labels else [("ids", head, labels), ("names", head, label_names)]
    if head_names is not None and list(head_names) != head:
        ways += [("names", [str(v) for v in head_names], labels), ("names", [str(v) for v in head_names], label_names)]
    for by, have, wanted in ways:
        if len(set(wanted)) == len(wanted) == len(have) and sorted(have) == sorted(wanted):
            order = tuple(have.index(label) for label in wanted)
            by = by if label_names != labels or head_names is not None else "labels"
            if list(order) == list(range(len(order))):
                note = f"its head's labels are the task's {by} in the task's order: kept"
            else:
                moved = [f"{wanted[i]} <- output {o}" for i, o in enumerate(order) if o != i]
                note = (f"its head's labels are the task's {by} in another order: its rows reordered to the task's "
                        f"({len(moved)} moved: {', '.join(moved[:6])}{', ...' if len(moved) > 6 else ''})")
            return HeadMapping(order, by, note)
    return None


def _head_labels(ckpt: Checkpoint, outputs: int) -> dict[int, str]:
    """config.json's ``id2label`` (LABEL_i placeholders when absent) as output index -> label, checked: indices
    0..n-1 without gaps, ``label2id`` (where given) its inverse, one label per output of the head."""
    where = ckpt.path / "config.json"
    id2label = ckpt.config.get("id2label")
    if id2label is None:
        id2label = {str(i): f"LABEL_{i}" for i in range(outputs)}
    if not isinstance(id2label, dict) or not id2label:
        raise ModelError(f"{where}: field 'id2label' must be a non-empty mapping of output index to label, got "
                         f"{shown_json(id2label)}")
    by_id: dict[int, str] = {}
    for key, value in id2label.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            index = -1
        if index < 0 or str(index) != str(key).strip() or isinstance(value, (dict, list)) or value is None:
            raise ModelError(f"{where}: id2label entry {shown_json(key)}: {shown_json(value)}: expected an output index and a "
                             "label")
        by_id[index] = str(value)
    if sorted(by_id) != list(range(len(by_id))):
        raise ModelError(f"{where}: id2label's output indices must be 0..{len(by_id) - 1} without gaps, got "
                         f"{_brief([str(i) for i in sorted(by_id)])}")
    head = [by_id[i] for i in range(len(by_id))]
    label2id = ckpt.config.get("label2id")
    if label2id is not None:
        if not isinstance(label2id, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in label2id.values()):
            raise ModelError(f"{where}: field 'label2id' must be a mapping of label to output index, got "
                             f"{shown_json(label2id)}")
        inverse = {str(k): v for k, v in label2id.items()}
        if label2id and inverse != {label: i for i, label in enumerate(head)}:
            first = next((i for i, label in enumerate(head) if inverse.get(label) != i), None)
            detail = (f"id2label[{first}] is {head[first]!r} but label2id[{head[first]!r}] is "
                      f"{inverse.get(head[first], 'missing')}" if first is not None else
                      f"label2id names {_brief(sorted(set(inverse) - set(head)))}, which id2label does not")
            raise ModelError(f"{where}: label2id disagrees with id2label ({detail}): which output is which label is "
                             f"unknown; make them agree, or {REPLACE_FLAG} fine-tunes a new head on its encoder")
    if len(head) != outputs:
        raise ModelError(f"{where}: id2label names {len(head)} labels but the {ckpt.architecture} head has {outputs} "
                         "outputs")
    return by_id


def dev_confusion(outputs: Sequence, targets: Sequence, n: int):
    """[n, n] counts of (true label, predicted output) over dev features (per token for a tagger, -100 skipped; for a
    multi-label text, each of its labels against each output above 0, a probability above 0.5)."""
    import numpy as np

    confusion = np.zeros((n, n), dtype=np.int64)
    for out, target in zip(outputs, targets):
        out, target = np.asarray(out), np.asarray(target)
        if out.ndim == 1 and target.ndim == 1:  # a label set: 0/1 per label
            confusion[np.ix_(np.flatnonzero(target[:n] == 1), np.flatnonzero(out[:n] > 0))] += 1
            continue
        pred = out.argmax(-1)
        if target.ndim == 0:
            true, pred = target.reshape(1), pred.reshape(1)
        else:
            k = min(len(target), len(pred))
            true, pred = target[:k], pred[:k]
        keep = (true >= 0) & (true < n)
        np.add.at(confusion, (true[keep], pred[keep]), 1)
    return confusion


def assumed_order_verdict(confusion, labels: Sequence[str], label_names: Sequence[str], where: Path) -> str:
    """The dev check of a head taken in index order (LABEL_i): the best one-to-one assignment of outputs to labels
    on dev (Hungarian, on the confusion matrix) must be the index order (a tie with it passes).  Returns the line
    said; raises naming the assignment found."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    confusion = np.asarray(confusion)
    total = int(confusion.sum())
    rows, cols = linear_sum_assignment(confusion, maximize=True)
    best, kept = int(confusion[rows, cols].sum()), int(np.trace(confusion))
    if not total:
        raise ModelError(f"{where}: its LABEL_i head's order cannot be checked: no dev example has a label; "
                         f"{REPLACE_FLAG} fine-tunes a new head instead")
    if best <= kept:
        return (f"the assumed order checked on {total} dev predictions: the index order is their best assignment of "
                f"outputs to labels (agreement {kept / total:.4f})")
    names = [str(n) if str(n) == str(label) else f"{label} ({n})" for label, n in zip(labels, label_names)]
    moved = [f"{names[r]} is output {c}" for r, c in zip(rows, cols) if r != c and confusion[r].sum()]
    raise ModelError(f"{where}: its LABEL_i head is not in the task's order: on {total} dev predictions the best "
                     f"assignment of outputs to labels is {'; '.join(moved[:8])}{'; ...' if len(moved) > 8 else ''} "
                     f"(agreement {best / total:.4f} so, {kept / total:.4f} in index order): give config.json an "
                     f"id2label naming each output's label, or {REPLACE_FLAG} fine-tunes a new head")


def named_labels(config: dict) -> list[str] | None:
    """``id2label`` in id order when it names real labels (not LABEL_0, LABEL_1, ...)."""
    from pipeline.labels_file import placeholder_id2label

    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label or placeholder_id2label(id2label):
        return None
    try:
        return [str(id2label.get(str(i), id2label.get(i))) for i in range(len(id2label))]
    except (TypeError, ValueError):
        return None
