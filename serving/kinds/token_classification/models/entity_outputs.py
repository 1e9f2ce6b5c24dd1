"""Token classification's answer from per-token logits: the entities of each text, as JSON (ours) or as FastDeploy's
ernie_tokencls rows.

Standard library and numpy only: copied next to the ensemble's post-processing model and the fused tagger (as
``entity_outputs.py``), so both answer with this code.  The tag of each token is ``argmax(logits)`` over the tags of
labels.json (model output order); ``bio.decode_tags`` (the pipeline's, copied verbatim beside) turns tags into
entities exactly as the offline evaluation does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def entities_json(entities) -> bytes:
    """Our row: a JSON list of ``{"type", "text", "start", "end"}`` (char offsets, end exclusive)."""
    rows = [{"type": e.type, "text": e.text, "start": int(e.start), "end": int(e.end)} for e in entities]
    return json.dumps(rows, ensure_ascii=False).encode("utf-8")


class Entities:
    """labels.json's BIO tags in model output order, and how a text's entities are answered: ours, ``entities_json``
    [N, 1]; with FastDeploy's API (``fastdeploy_payloads``, the module copied beside), its ``token_entities`` rows,
    [N], as FastDeploy's client reads them."""

    def __init__(self, labels: Path, bio, fastdeploy_payloads=None):
        rows = [json.loads(line) for line in Path(labels).read_text(encoding="utf-8").splitlines() if line.strip()]
        self.tags = [str(r["label"]) for r in rows]
        self.bio = bio
        self.payload = entities_json if fastdeploy_payloads is None else fastdeploy_payloads.token_entities
        self.shape = (-1, 1) if fastdeploy_payloads is None else (-1,)

    @property
    def types(self) -> list[str]:
        """The entity types of labels.json's tags, in order (the ``label`` of ``ernie_bundle_answers_total``)."""
        return list(dict.fromkeys(tag[2:] for tag in self.tags if tag[:2] in ("B-", "I-")))

    def rows(self, logits: np.ndarray, offsets: np.ndarray, texts, counts: dict | None = None) -> np.ndarray:
        """One payload per text (object array, ``shape``) from ``logits`` [N, T', C] and ``offsets`` [N, T, 2]
        (T' >= T: the model may have run the texts padded wider); ValueError when the arrays do not fit labels.json.
        ``counts`` (type -> n), where given, gains one per entity found."""
        if logits.shape[-1] != len(self.tags):
            raise ValueError(f"logits have {logits.shape[-1]} tags, labels.json has {len(self.tags)}")
        width = offsets.shape[1]
        if logits.shape[1] < width:
            raise ValueError(f"logits cover {logits.shape[1]} tokens, offsets {width}")
        tag_ids = logits[:, :width].argmax(axis=-1)
        out = np.empty(len(texts), dtype=np.object_)
        for i, text in enumerate(texts):
            entities = self.bio.decode_tags(tag_ids[i], offsets[i], text, self.tags)
            if counts is not None:
                for e in entities:
                    counts[e.type] = counts.get(e.type, 0) + 1
            out[i] = self.payload(entities)
        return out.reshape(self.shape)
