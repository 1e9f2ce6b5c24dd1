"""UIE for the serving tools: requests of texts x a schema of prompts, answered per text and prompt with the spans
found (smoke: span F1, ``pipeline.extraction.metric.span_scores``, and every (text, prompt) pair's spans equal to the
offline ones)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeline.contract import TaskKind
from serving.tools.kinds.base import ToolKind, Validated, validated

if TYPE_CHECKING:
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel, ModelOnly


@dataclass(frozen=True)
class SmokeResult:
    examples: int  # (text, prompt) pairs
    texts: int
    requests: int
    served_f1: float  # span F1 (fraction) of the served spans against the gold ones
    served_precision: float
    served_recall: float
    offline_f1: float
    mismatches: int  # pairs whose served spans (start, end, text) differ from the offline ones
    max_prob_diff: float  # largest |served - offline probability| over spans found by both
    validated: Validated

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.served_f1 == self.offline_f1 and self.validated.agrees(self.served_f1)


def uie_requests(examples: Sequence, batch_size: int) -> list[tuple[list[str], list[str], list[list[int]]]]:
    """Dev pairs as UIE requests: (texts, schema, example index of each [text][prompt]).

    A text item is a run of consecutive pairs with the same content (CLUENER converted: one text, every
    prompt); consecutive items asking the same prompts share a request, up to ``batch_size`` texts."""
    items: list[tuple[str, list[str], list[int]]] = []
    for i, e in enumerate(examples):
        if items and items[-1][0] == e.content and e.prompt not in items[-1][1]:
            items[-1][1].append(e.prompt)
            items[-1][2].append(i)
        else:
            items.append((e.content, [e.prompt], [i]))
    requests: list[tuple[list[str], list[str], list[list[int]]]] = []
    for content, schema, idx in items:
        last = requests[-1] if requests else None
        if last and last[1] == schema and len(last[0]) < batch_size:
            last[0].append(content)
            last[2].append(idx)
        else:
            requests.append(([content], list(schema), [idx]))
    return requests


def offline_extractions(bundle: "BundleModel", requests: Sequence[tuple[Sequence[str], Sequence[str]]], threads: int = 0) -> list:
    """UIE: for each request (texts, schema), per text and prompt the spans (``pipeline.extraction.spans.ExtractedSpan``),
    ``[request][text][prompt]``: every text x prompt windowed with make_windows as the served pre-processing does (pair
    n * P + p), the model on all windows of the request at once, decode_spans."""
    from pipeline.extraction import spans
    from pipeline.progress import progress
    from serving.tools.offline import windower

    u = bundle.manifest["uie"]
    window = windower(bundle, "uie", "max_prompt_len")
    run = bundle.session(threads)
    out: list = []
    for texts, schema in progress(requests, desc="offline model", unit="request"):
        prompts = [p for _ in texts for p in schema]
        contents = [t for t in texts for _ in schema]
        wins, ids, types = window(prompts, contents)
        logits = np.asarray(run(ids, types), dtype=np.float32)
        found = spans.decode_spans(list(logits), wins, contents, position_prob=float(u["position_prob"]),
                                   max_span_len=int(u["max_span_len"]))
        out.append([found[n * len(schema) : (n + 1) * len(schema)] for n in range(len(texts))])
    return out


def schema_batches(bundle: "BundleModel", items: Sequence[tuple[str, Sequence[str]]]) -> "ModelOnly":
    """UIE: each text asked its whole schema, every (text, prompt) window of it as one batch: what the served model
    executes for a one-text request (``max_batch_size`` 0, no Triton batching)."""
    from serving.tools.offline import window_batches, windower

    return window_batches(bundle, windower(bundle, "uie", "max_prompt_len"),
                          [(list(schema), [text] * len(schema)) for text, schema in items])


def run_smoke(bundle: "BundleModel", client: "BundleClient", examples: Sequence, batch_size: int = 32) -> SmokeResult:
    """``examples``: ``pipeline.extraction.examples.ExtractionExample`` (content, prompt, gold spans)."""
    from pipeline.extraction.metric import span_scores
    from pipeline.progress import progress

    requests = uie_requests(examples, batch_size)
    served: list = [None] * len(examples)
    for texts, schema, idx in progress(requests, desc="served", unit="request"):
        for n, by_prompt in enumerate(client.extract_schema_batch(texts, schema)):
            for p, prompt in enumerate(schema):
                served[idx[n][p]] = [(s.start, s.end, s.text, s.probability) for s in by_prompt[prompt]]
    offline: list = [None] * len(examples)
    for (texts, schema, idx), found in zip(requests, offline_extractions(bundle, [(t, s) for t, s, _ in requests])):
        for n, row in enumerate(found):
            for p, spans in enumerate(row):
                offline[idx[n][p]] = [(s.start, s.end, s.text, s.probability) for s in spans]
    gold = [e.spans for e in examples]
    s = span_scores([[(a, b) for a, b, _, _ in x] for x in served], gold)
    o = span_scores([[(a, b) for a, b, _, _ in x] for x in offline], gold)
    mismatches, diff = 0, 0.0
    for a, b in zip(served, offline):
        if [x[:3] for x in a] != [x[:3] for x in b]:
            mismatches += 1
        else:
            diff = max([diff, *(abs(x[3] - y[3]) for x, y in zip(a, b))])
    return SmokeResult(examples=len(examples), texts=sum(len(t) for t, _, _ in requests), requests=len(requests),
                       served_f1=s.f1, served_precision=s.precision, served_recall=s.recall, offline_f1=o.f1,
                       mismatches=mismatches, max_prob_diff=diff, validated=validated(bundle.manifest, len(examples), "pairs"))


class UniversalExtraction(ToolKind):
    kind = TaskKind.UIE
    command = "ie"
    output = "results"
    smoke = staticmethod(run_smoke)  # (bundle, client, dev examples, batch size): this module's smoke test
    windowed = True

    def items(self, examples: Sequence) -> list:
        """(text, schema): one text with every prompt the dev set asks it (CLUENER converted: the whole schema)."""
        return [(t, tuple(schema)) for texts, schema, _ in uie_requests(examples, 1) for t in texts]

    def ask(self, client, item):
        return client.extract_schema_batch([item[0]], list(item[1]))[0]

    def send(self, client, batch: Sequence) -> None:
        # items (text, schema); a request asks the first item's schema of every text
        client.extract_schema_batch([t for t, _ in batch], list(batch[0][1]))

    def answer_key(self, served) -> tuple:
        return tuple((p, s.start, s.end, s.text) for p, spans in served.items() for s in spans)

    def offline_keys(self, bundle: "BundleModel", items: Sequence) -> list[tuple]:
        found = offline_extractions(bundle, [([t], list(schema)) for t, schema in items])
        return [tuple((p, s.start, s.end, s.text) for p, spans in zip(schema, f[0]) for s in spans)
                for (_, schema), f in zip(items, found)]

    def smoke_report(self, r: SmokeResult) -> tuple[str, str, str, str]:
        return (f"{r.examples} dev (text, prompt) pairs ({r.texts} texts, {r.requests} requests)",
                f"span F1   {r.served_f1:.4f}  (P {r.served_precision:.4f}, R {r.served_recall:.4f})",
                f"span F1  {r.offline_f1:.4f}  (same model file, pipeline windows.py + extraction/spans.py)",
                f"pairs whose spans differ: {r.mismatches}; max |probability diff| {r.max_prob_diff:.2e}")

    def perf_input(self, item) -> dict:
        text, schema = item
        return {"text": {"content": [text], "shape": [1]}, "schema": {"content": list(schema), "shape": [len(schema)]}}

    def model_only(self, bundle: "BundleModel", items: Sequence, items_per_request: int, alone: bool = False):
        # One request is one text with its schema: every (text, prompt) window runs as one batch, as served.
        return schema_batches(bundle, items)

    def model_only_batch(self, bundle: "BundleModel", items_per_request: int) -> str:
        return "one text's windows, every prompt"

    def perf_note(self, items: Sequence) -> str:
        return f" (a text asked its whole schema, {len(items[0][1]) if items else 0} prompts: req/s are texts/s)"

    def check_cli(self, args) -> None:
        if not args.schema:
            raise ValueError("--schema: give at least one prompt, e.g. --schema 姓名")

    def print_served(self, client, texts, args) -> None:
        for text, by_prompt in zip(texts, client.extract_schema(texts, args.schema, args.batch_size)):
            if args.json:
                print(json.dumps({"text": text, "results": {p: [asdict(s) for s in spans] for p, spans in by_prompt.items()}},
                                 ensure_ascii=False))
            else:
                cells = " ".join(f"{p}:{s.text}[{s.start},{s.end})" for p, spans in by_prompt.items() for s in spans) or "-"
                print(f"{cells}\t{text}")


KIND = UniversalExtraction()  # what serving.tools.kinds finds in the kind folder's tools.py
