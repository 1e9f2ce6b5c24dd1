"""Token classification (NER) in the serving tools: single texts in, entities out (smoke: entity chunk F1,
``pipeline.labeling.metric.chunk_f1``, and every text's entities equal to the offline ones)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeline.contract import TaskKind
from serving.tools.kinds.base import ToolKind, Validated, text_row, validated

if TYPE_CHECKING:
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel


@dataclass(frozen=True)
class SmokeResult:
    examples: int
    served_f1: float  # entity chunk F1 (fraction) of the served entities against the gold ones
    served_precision: float
    served_recall: float
    offline_f1: float
    mismatches: int  # texts whose served entities (type, start, end, text) differ from the offline ones
    validated: Validated

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.served_f1 == self.offline_f1 and self.validated.agrees(self.served_f1)


def offline_entities(bundle: "BundleModel", texts: Sequence[str], batch_size: int = 32, threads: int = 0) -> list[list]:
    """Entities (``pipeline.labeling.bio.Entity``) per text: bio.encode_token + pad_batch, the model, argmax, bio.decode_tags."""
    from pipeline.labeling import bio
    from pipeline.progress import progress
    from serving.tools.offline import request_groups

    tok = bundle.wordpiece()
    pad_id = tok.token_to_id("[PAD]")
    tags = bundle.labels()
    run = bundle.session(threads)
    out: list[list] = []
    for group in progress(request_groups(len(texts), batch_size), desc="offline model", unit="batch"):
        batch = [texts[i] for i in group]
        ids, types, offsets = bio.pad_batch([bio.encode_token(tok, t, bundle.max_seq_len) for t in batch], pad_id)
        tag_ids = np.asarray(run(ids, types))[:, : offsets.shape[1]].argmax(-1)
        out.extend(bio.decode_tags(tag_ids[r], offsets[r], text, tags) for r, text in enumerate(batch))
    return out


def run_smoke(bundle: "BundleModel", client: "BundleClient", examples: Sequence, batch_size: int = 32) -> SmokeResult:
    """``examples``: ``pipeline.labeling.readers.LabelingExample`` (text, entities)."""
    from pipeline.labeling.metric import chunk_f1
    from pipeline.progress import progress

    texts = [e.text for e in examples]
    served: list = []
    for start in progress(range(0, len(texts), batch_size), desc="served", unit="batch"):
        served.extend(client.extract_entities_batch(texts[start : start + batch_size]))
    offline = offline_entities(bundle, texts, batch_size)
    key = lambda ents: sorted((e.type, e.start, e.end, e.text) for e in ents)  # noqa: E731
    gold = [e.entities for e in examples]
    s, o = chunk_f1(gold, served), chunk_f1(gold, offline)
    return SmokeResult(
        examples=len(texts), served_f1=s.f1, served_precision=s.precision, served_recall=s.recall, offline_f1=o.f1,
        mismatches=sum(key(a) != key(b) for a, b in zip(served, offline)), validated=validated(bundle.manifest),
    )


def _entities_key(entities) -> tuple:
    return tuple(sorted((e.type, e.start, e.end, e.text) for e in entities))


class TokenClassification(ToolKind):
    kind = TaskKind.TOKEN_CLASSIFICATION
    command = "extract"
    output = "entities"
    smoke = staticmethod(run_smoke)  # (bundle, client, dev examples, batch size): this module's smoke test

    def items(self, examples: Sequence) -> list:
        return [e.text for e in examples]

    def ask(self, client, item):
        return client.extract_entities_batch([item])[0]

    def send(self, client, batch: Sequence) -> None:
        client.extract_entities_batch(batch)

    def answer_key(self, served) -> tuple:
        return _entities_key(served)

    def offline_keys(self, bundle: "BundleModel", items: Sequence) -> list[tuple]:
        return [_entities_key(o) for o in offline_entities(bundle, list(items), batch_size=1)]

    def smoke_report(self, r: SmokeResult) -> tuple[str, str, str, str]:
        return (f"{r.examples} dev texts", f"entity F1   {r.served_f1:.4f}  (P {r.served_precision:.4f}, R {r.served_recall:.4f})",
                f"entity F1  {r.offline_f1:.4f}  (same model file, pipeline bio.py)",
                f"texts whose entities differ: {r.mismatches}")

    def perf_input(self, item) -> dict:
        return text_row(item)

    def print_served(self, client, texts, args) -> None:
        for text, ents in zip(texts, client.extract_entities(texts, args.batch_size)):
            if args.json:
                print(json.dumps({"text": text, "entities": [asdict(e) for e in ents]}, ensure_ascii=False))
            else:
                spans = " ".join(f"{e.type}:{e.text}[{e.start},{e.end})" for e in ents) or "-"
                print(f"{spans}\t{text}")


KIND = TokenClassification()  # what serving.tools.kinds finds in the kind folder's tools.py
