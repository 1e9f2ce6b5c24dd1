"""Smoke test of a running server: the whole dev set through the server must give the offline predictions.

Offline predictions come from the bundle's own model file run through the pipeline's tokenizer
(``serving.tools.offline``); served ones from the ensemble over HTTP or gRPC.  Passes only when every
prediction is the same (hence the same accuracy), not merely close numbers.

Token classification bundles are scored with entity chunk F1 (``pipeline.labeling.metric.chunk_f1``),
reading comprehension bundles with CMRC2018 EM/F1 (``pipeline.reading.metric.cmrc_scores``); both
are held to the offline run of the same bundle (every example's entities / answer span identical)
and to bundle.json "validated" ({"metric": "entity_f1" | "f1" | "accuracy", "value": ...}).

    python -m serving.tools.smoke --task tnews [--repository model_repository] [--url 127.0.0.1:8000] [--concurrency 16]

``--concurrency N`` then sends every dev item alone from N clients at once: Triton's dynamic batcher mixes
them with whatever else is in flight, and each answer must equal the offline answer of that item run alone
(label, entities or answer span, exactly): batch independence under real load.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from serving.tools.client import ClassifierClient, ClientError
from serving.triton.integrity import BundleIntegrityError
from serving.tools.offline import BundleModel, offline_answers, offline_entities, offline_extractions, offline_logits


@dataclass(frozen=True)
class SmokeResult:
    examples: int
    served_accuracy: float
    offline_accuracy: float
    mismatches: int  # examples whose served label differs from the offline one
    max_prob_diff: float  # largest |served prob - offline softmax| over all examples and classes
    validated_accuracy: float | None  # bundle.json "validated": validate's accuracy for the packaged model file

    @property
    def ok(self) -> bool:
        same_as_validated = self.validated_accuracy is None or abs(self.served_accuracy - self.validated_accuracy) < 1e-9
        return self.mismatches == 0 and self.served_accuracy == self.offline_accuracy and same_as_validated


def run_smoke(bundle: BundleModel, client: ClassifierClient, texts: Sequence[str], gold: Sequence[int], batch_size: int = 32) -> SmokeResult:
    from pipeline.progress import progress

    labels = bundle.labels()
    index = {v: i for i, v in enumerate(labels)}
    served = np.zeros(len(texts), dtype=np.int64)
    served_probs = np.zeros((len(texts), len(labels)), dtype=np.float32)
    for start in progress(range(0, len(texts), batch_size), desc="served", unit="batch"):
        preds = client.classify_batch(list(texts[start : start + batch_size]))
        for j, p in enumerate(preds):
            served[start + j] = index[p.label]
            served_probs[start + j] = p.probs
    logits = offline_logits(bundle, texts)
    offline = logits.argmax(-1)
    z = np.exp(logits - logits.max(-1, keepdims=True))
    probs = z / z.sum(-1, keepdims=True)
    gold_arr = np.asarray(gold)
    validated = bundle.manifest.get("validated", {}).get("accuracy")  # validate's number for this very model file
    return SmokeResult(
        examples=len(texts),
        served_accuracy=float((served == gold_arr).mean()),
        offline_accuracy=float((offline == gold_arr).mean()),
        mismatches=int((served != offline).sum()),
        max_prob_diff=float(np.abs(served_probs - probs).max()) if len(texts) else 0.0,
        validated_accuracy=float(validated) if isinstance(validated, (int, float)) else None,
    )


def _validated(manifest: dict) -> tuple[str | None, float | None]:
    """bundle.json "validated" -> (metric name, value); (None, None) when validation left no number."""
    v = manifest.get("validated") or {}
    value = v.get("value", v.get("accuracy"))
    if not isinstance(value, (int, float)):
        return None, None
    return str(v.get("metric", "accuracy")), float(value)


def _same(a: float, b: float | None) -> bool:
    return b is None or abs(a - b) < 1e-9


@dataclass(frozen=True)
class NerSmokeResult:
    examples: int
    served_f1: float  # entity chunk F1 (fraction) of the served entities against the gold ones
    served_precision: float
    served_recall: float
    offline_f1: float
    mismatches: int  # texts whose served entities (type, start, end, text) differ from the offline ones
    validated_metric: str | None
    validated_value: float | None

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.served_f1 == self.offline_f1 and _same(self.served_f1, self.validated_value)


@dataclass(frozen=True)
class QaSmokeResult:
    examples: int
    served_em: float  # CMRC2018 exact match (fraction)
    served_f1: float  # CMRC2018 character F1 (fraction)
    offline_em: float
    offline_f1: float
    mismatches: int  # questions whose served answer (text, start, end) differs from the offline one
    max_score_diff: float  # largest |served score - offline score| over questions with an answer
    validated_metric: str | None
    validated_value: float | None

    @property
    def ok(self) -> bool:
        served = self.served_em if self.validated_metric == "em" else self.served_f1
        return (self.mismatches == 0 and (self.served_em, self.served_f1) == (self.offline_em, self.offline_f1)
                and _same(served, self.validated_value))


def run_ner_smoke(bundle: BundleModel, client: ClassifierClient, examples: Sequence, batch_size: int = 32) -> NerSmokeResult:
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
    metric, value = _validated(bundle.manifest)
    return NerSmokeResult(
        examples=len(texts), served_f1=s.f1, served_precision=s.precision, served_recall=s.recall, offline_f1=o.f1,
        mismatches=sum(key(a) != key(b) for a, b in zip(served, offline)), validated_metric=metric, validated_value=value,
    )


def run_mrc_smoke(bundle: BundleModel, client: ClassifierClient, examples: Sequence, batch_size: int = 32) -> QaSmokeResult:
    """``examples``: ``pipeline.reading.squad.QAExample`` (id, question, context, answers)."""
    from pipeline.progress import progress
    from pipeline.reading.metric import cmrc_scores

    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    served: list = []
    for start in progress(range(0, len(questions), batch_size), desc="served", unit="batch"):
        served.extend(client.answer_batch(questions[start : start + batch_size], contexts[start : start + batch_size]))
    offline = offline_answers(bundle, questions, contexts, batch_size)
    gold = [[a.text for a in e.answers] for e in examples]
    s = cmrc_scores([a.text for a in served], gold)
    o = cmrc_scores([sp.text if sp else "" for sp in offline], gold)
    mismatches, diff = 0, 0.0
    for a, sp in zip(served, offline):
        if (a.text, a.start, a.end) != ((sp.text, sp.start, sp.end) if sp else ("", -1, -1)):
            mismatches += 1
        elif sp is not None:
            diff = max(diff, abs(a.score - sp.score))
    metric, value = _validated(bundle.manifest)
    return QaSmokeResult(examples=len(examples), served_em=s.em, served_f1=s.f1, offline_em=o.em, offline_f1=o.f1,
                         mismatches=mismatches, max_score_diff=diff, validated_metric=metric, validated_value=value)


@dataclass(frozen=True)
class UieSmokeResult:
    examples: int  # (text, prompt) pairs
    texts: int
    requests: int
    served_f1: float  # span F1 (fraction) of the served spans against the gold ones
    served_precision: float
    served_recall: float
    offline_f1: float
    mismatches: int  # pairs whose served spans (start, end, text) differ from the offline ones
    max_prob_diff: float  # largest |served - offline probability| over spans found by both
    validated_metric: str | None
    validated_value: float | None

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.served_f1 == self.offline_f1 and _same(self.served_f1, self.validated_value)


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


def run_uie_smoke(bundle: BundleModel, client: ClassifierClient, examples: Sequence, batch_size: int = 32) -> UieSmokeResult:
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
    metric, value = _validated(bundle.manifest)
    return UieSmokeResult(examples=len(examples), texts=sum(len(t) for t, _, _ in requests), requests=len(requests),
                          served_f1=s.f1, served_precision=s.precision, served_recall=s.recall, offline_f1=o.f1,
                          mismatches=mismatches, max_prob_diff=diff, validated_metric=metric, validated_value=value)


def _print_uie(task: str, protocol: str, r: UieSmokeResult, backend: str | None) -> None:
    print(f"smoke {task}: {r.examples} dev (text, prompt) pairs ({r.texts} texts, {r.requests} requests) via {protocol}")
    print(f"  served span F1   {r.served_f1:.4f}  (P {r.served_precision:.4f}, R {r.served_recall:.4f})")
    print(f"  offline span F1  {r.offline_f1:.4f}  (same model file, pipeline windows.py + extraction/spans.py)")
    if r.validated_value is not None:
        print(f"  validated {r.validated_metric} {r.validated_value:.4f}  (validate stage, {backend})")
    print(f"  pairs whose spans differ: {r.mismatches}; max |probability diff| {r.max_prob_diff:.2e}")


@dataclass(frozen=True)
class ConcurrentResult:
    """Every item sent alone, from ``concurrency`` clients at once, so Triton's dynamic batcher merges it with
    whatever else is in flight; held to the offline answer of the same item run alone (batch of one)."""
    items: int
    concurrency: int
    mismatches: int
    examples: list  # up to 5 differing items: (index, served, offline)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def _answer_key(task_type: str, served) -> tuple:
    """What must be identical: the label; the entities (type, start, end, text); the answer span."""
    if task_type == "token_classification":
        return tuple(sorted((e.type, e.start, e.end, e.text) for e in served))
    if task_type == "reading_comprehension":
        return (served.text, served.start, served.end)
    if task_type == "uie":
        return tuple((p, s.start, s.end, s.text) for p, spans in served.items() for s in spans)
    return (served.label,)


def _offline_key(task_type: str, offline, labels: Sequence[str] | None = None) -> tuple:
    if task_type == "token_classification":
        return tuple(sorted((e.type, e.start, e.end, e.text) for e in offline))
    if task_type == "reading_comprehension":
        return (offline.text, offline.start, offline.end) if offline else ("", -1, -1)
    if task_type == "uie":  # offline: (schema, [spans per prompt])
        schema, found = offline
        return tuple((p, s.start, s.end, s.text) for p, spans in zip(schema, found) for s in spans)
    return (labels[int(offline)],)


def offline_keys(bundle: BundleModel, items: Sequence) -> list[tuple]:
    """The offline answer of each item run alone (batch of one), in the form ``_answer_key`` gives served ones."""
    task_type = bundle.task_type
    if task_type == "token_classification":
        return [_offline_key(task_type, o) for o in offline_entities(bundle, list(items), batch_size=1)]
    if task_type == "reading_comprehension":
        qs, cs = [q for q, _ in items], [c for _, c in items]
        return [_offline_key(task_type, o) for o in offline_answers(bundle, qs, cs, batch_size=1)]
    if task_type == "uie":  # items: (text, schema)
        found = offline_extractions(bundle, [([t], list(schema)) for t, schema in items])
        return [_offline_key(task_type, (schema, f[0])) for (_, schema), f in zip(items, found)]
    labels = bundle.labels()
    return [_offline_key(task_type, i, labels) for i in offline_logits(bundle, list(items), batch_size=1).argmax(-1)]


def dev_items(task: str, bundle_dir: Path, data_dir: str | None = None) -> list:
    """The task's dev items as requests carry them: texts, or (question, context) pairs."""
    bundle = BundleModel.open(bundle_dir)
    task_type = bundle.task_type
    if task_type == "classification":
        return _dev_set(task, data_dir, manifest=bundle.manifest)[0]
    examples = _dev_examples(task, data_dir, task_type, manifest=bundle.manifest)
    if task_type == "token_classification":
        return [e.text for e in examples]
    if task_type == "uie":
        return [(t, tuple(schema)) for texts, schema, _ in uie_requests(examples, 1) for t in texts]
    return [(e.question, e.context) for e in examples]


def run_concurrent(bundle: BundleModel, url: str | None, protocol: str, items: Sequence, concurrency: int) -> ConcurrentResult:
    """``items``: texts, (question, context) pairs for reading comprehension, (text, schema) for UIE."""
    from concurrent.futures import ThreadPoolExecutor
    import threading

    task_type, model = bundle.task_type, bundle.manifest["task"]
    local = threading.local()

    def ask(item):
        if not hasattr(local, "client"):
            local.client = ClassifierClient(url, protocol, model)
        c = local.client
        if task_type == "token_classification":
            return c.extract_entities_batch([item])[0]
        if task_type == "reading_comprehension":
            return c.answer_batch([item[0]], [item[1]])[0]
        if task_type == "uie":
            return c.extract_schema_batch([item[0]], list(item[1]))[0]
        return c.classify_batch([item])[0]

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        served = [_answer_key(task_type, a) for a in pool.map(ask, items)]
    offline = offline_keys(bundle, items)
    differing = [(i, s, o) for i, (s, o) in enumerate(zip(served, offline)) if s != o]
    return ConcurrentResult(len(items), concurrency, len(differing), differing[:5])


def _batch_size(bundle: BundleModel, wanted: int | None) -> int:
    """Items per request: by default the batch size validate evaluated with (an INT8 form with per-batch
    activation scales then sees the very same batches), at most the bundle's max_batch_size."""
    if wanted is None:
        summary = (bundle.manifest.get("metrics") or {}).get("summary") or {}
        wanted = int(summary.get("dev_batch_size") or 32)
    limit = int((bundle.manifest.get("package") or {}).get("max_batch_size") or 0)
    return min(wanted, limit) if limit > 0 else wanted


def _overrides(data_dir, sets) -> dict:
    from pipeline.config import parse_override

    out = dict(parse_override(x) for x in (sets or []))
    if data_dir:
        out["data.dir"] = str(Path(data_dir).expanduser().resolve())  # as the pipeline's --data-dir: from here
    return out


def recorded_data_dir(manifest: dict | None) -> str:
    """The data dir the bundle was built and validated from (bundle.json ``source.data_dir``); "" when unrecorded."""
    value = ((manifest or {}).get("source") or {}).get("data_dir")
    return value if isinstance(value, str) else ""


def dev_data_dir(data_dir: str | Path | None, manifest: dict | None) -> str | None:
    """The dev data to read: ``--data-dir``; else the dir the bundle was built from, while it is there; else None
    (the task config's ``data.dir``)."""
    if data_dir:
        return str(data_dir)
    recorded = recorded_data_dir(manifest)
    return recorded if recorded and Path(recorded).is_dir() else None


def _load_dev(task: str, data_dir, sets, manifest: dict | None):
    """(task config, task data) for the dev set, with the bundle's own data dir unless ``--data-dir`` says
    otherwise; a data error says which dir was tried and how to point at another (one line)."""
    from pipeline.config import load_task_config
    from pipeline.errors import DataError
    from pipeline.kinds import load_task_data

    chosen = dev_data_dir(data_dir, manifest)
    if chosen and not data_dir:
        print(f"dev data: {chosen} (the bundle was built from it; --data-dir for another)", file=sys.stderr)
    try:
        cfg = load_task_config(task, _overrides(chosen, sets))
        return cfg, load_task_data(cfg)
    except DataError as exc:
        if data_dir:
            raise
        recorded = recorded_data_dir(manifest)
        built = (f"the bundle was built from {recorded}, which is not there" if recorded
                 else "the bundle does not record the data it was built from")
        how = "" if "--data-dir" in str(exc) else ": pass --data-dir DIR (make: DATA_DIR=DIR)"
        raise DataError(f"{exc}; {built}{how}") from None


def _dev_examples(task: str, data_dir: str | Path | None, task_type: str, sets: list[str] | None = None,
                  manifest: dict | None = None) -> list:
    """The dev examples validate scored (LabelingExample / QAExample), read by the pipeline's own loader.

    For reading comprehension that is the held-out part of dev (``reading.dev_for_training``), so
    the served metric is comparable with the validated one.  ``manifest``: the bundle's, whose recorded data
    dir is read when ``data_dir`` is not given.
    """
    from pipeline.errors import ConfigError

    cfg, data = _load_dev(task, data_dir, sets, manifest)
    if cfg.type != task_type:
        raise ConfigError(f"task {task}: the bundle serves {task_type} but the task config says {cfg.type}")
    return list(data.dev.examples)


def _print_ner(task: str, protocol: str, r: NerSmokeResult, backend: str | None) -> None:
    print(f"smoke {task}: {r.examples} dev texts via {protocol}")
    print(f"  served entity F1   {r.served_f1:.4f}  (P {r.served_precision:.4f}, R {r.served_recall:.4f})")
    print(f"  offline entity F1  {r.offline_f1:.4f}  (same model file, pipeline bio.py)")
    if r.validated_value is not None:
        print(f"  validated {r.validated_metric} {r.validated_value:.4f}  (validate stage, {backend})")
    print(f"  texts whose entities differ: {r.mismatches}")


def _print_mrc(task: str, protocol: str, r: QaSmokeResult, backend: str | None) -> None:
    print(f"smoke {task}: {r.examples} dev questions via {protocol}")
    print(f"  served EM {r.served_em:.4f}  F1 {r.served_f1:.4f}")
    print(f"  offline EM {r.offline_em:.4f}  F1 {r.offline_f1:.4f}  (same model file, pipeline windows.py + spans.py)")
    if r.validated_value is not None:
        print(f"  validated {r.validated_metric} {r.validated_value:.4f}  (validate stage, {backend})")
    print(f"  answers differing: {r.mismatches}; max |score diff| {r.max_score_diff:.2e}")


def _dev_set(task: str, data_dir: str | None, sets: list[str] | None = None,
             manifest: dict | None = None) -> tuple[list[str], list[int], tuple[str, ...]]:
    from pipeline.errors import ConfigError

    cfg, data = _load_dev(task, data_dir, sets, manifest)
    if cfg.type != "classification":
        raise ConfigError(f"task {task}: the bundle serves classification but the task config says {cfg.type}")
    if any(e.text_b is not None for e in data.dev.examples):
        raise ConfigError(f"task {task} has text pairs; the served ensemble takes single texts")
    return [e.text_a for e in data.dev.examples], [e.label for e in data.dev.examples], data.labels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.smoke", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--repository", default="model_repository")
    p.add_argument("--data-dir", help="dev data dir (default: the task config's)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--url", help="host:port (default 127.0.0.1:8000 / :8001)")
    p.add_argument("--batch-size", type=int, default=None, help="items per request (default: validate's batch size)")
    p.add_argument("--json-out", help="also write the result here")
    p.add_argument("--concurrency", type=int, default=0,
                   help="then also send every dev item alone from this many clients at once (dynamic batching "
                        "mixes them): each answer must equal the offline answer of the item run alone")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="task config override, as given to the pipeline run (so the same dev set is scored)")
    args = p.parse_args(argv)
    import pipeline  # noqa: F401  (process setup before anything imports paddle)
    from pipeline.errors import UserInputError

    try:
        check_args(args)
        repo = Path(args.repository)
        bundle = BundleModel.open(repo / args.task if (repo / args.task / "bundle.json").is_file() else repo)
        if bundle.manifest.get("api", "ernie-bundle") != "ernie-bundle":
            raise ClientError(f"{bundle.root}: packaged with package.api {bundle.manifest['api']} (model "
                              f"{bundle.names.ensemble}); the smoke test speaks package.api ernie-bundle: package it with "
                              "that to smoke-test the model, or call it with FastDeploy's example client")
        if bundle.task_type != "classification":
            return _main_span_kinds(args, bundle)
        texts, gold, data_labels = _dev_set(args.task, args.data_dir, args.set, bundle.manifest)
        if tuple(bundle.labels()) != tuple(data_labels):
            print(f"error: the bundle's labels {bundle.labels()[:5]}... differ from the dev data's", file=sys.stderr)
            return 2
        client = ClassifierClient(args.url, args.protocol, bundle.manifest["task"])
        client.wait_ready(30)
        result = run_smoke(bundle, client, texts, gold, _batch_size(bundle, args.batch_size))
        print(f"smoke {args.task}: {result.examples} dev examples via {args.protocol}")
        print(f"  served accuracy   {result.served_accuracy:.4f}")
        print(f"  offline accuracy  {result.offline_accuracy:.4f}  (same model file, pipeline tokenizer)")
        if result.validated_accuracy is not None:
            print(f"  validated accuracy {result.validated_accuracy:.4f}  (validate stage, {bundle.manifest['validated'].get('backend')})")
        print(f"  predictions differing: {result.mismatches}; max |prob diff| {result.max_prob_diff:.2e}")
        concurrent = _concurrent(args, bundle, texts)
        _write(args, result, concurrent)
    except (ClientError, BundleIntegrityError, UserInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("PASS" if result.ok else "FAIL: served predictions or accuracy differ from the offline/validated model's")
    return 0 if result.ok and (concurrent is None or concurrent.ok) else 1


def check_out_file(path: str | None, flag: str = "--json-out") -> None:
    """Before a run: where its report goes can be written (a directory there, or a folder that cannot be made,
    would fail only after the whole run).  ClientError, one line."""
    if not path:
        return
    import os

    out = Path(path)
    if out.is_dir():
        raise ClientError(f"{flag} {out}: a directory; give a file path")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # what the run would do at its end
    except OSError as exc:
        raise ClientError(f"{flag} {out}: cannot make its folder ({exc.strerror})") from None
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ClientError(f"{flag} {out}: not writable")


def check_args(args) -> None:
    """The numbers and paths a smoke run takes, before it starts (one line each)."""
    if args.batch_size is not None and args.batch_size < 1:
        raise ClientError(f"--batch-size {args.batch_size}: items per request, must be >= 1")
    if args.concurrency < 0:
        raise ClientError(f"--concurrency {args.concurrency}: clients, must be >= 0 (0: no concurrent pass)")
    check_out_file(args.json_out)


def _concurrent(args, bundle: BundleModel, items: Sequence) -> ConcurrentResult | None:
    if args.concurrency <= 0:
        return None
    r = run_concurrent(bundle, args.url, args.protocol, items, args.concurrency)
    print(f"  concurrent: {r.items} items sent one per request from {r.concurrency} clients; "
          f"answers differing from the offline single-item run: {r.mismatches}")
    for i, served, offline in r.examples:
        print(f"    item {i}: served {served} offline {offline}")
    return r


def _write(args, result, concurrent: ConcurrentResult | None) -> None:
    if args.json_out:
        out = {**asdict(result), "ok": result.ok}
        if concurrent is not None:
            out["concurrent"] = {**asdict(concurrent), "examples": [list(map(str, e)) for e in concurrent.examples],
                                 "ok": concurrent.ok}
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2))


def _main_span_kinds(args, bundle: BundleModel) -> int:
    """Token classification and reading comprehension bundles."""
    from pipeline.errors import UserInputError

    try:
        examples = _dev_examples(args.task, args.data_dir, bundle.task_type, args.set, bundle.manifest)
        with ClassifierClient(args.url, args.protocol, bundle.manifest["task"]) as client:
            client.wait_ready(30)
            if bundle.task_type == "token_classification":
                result = run_ner_smoke(bundle, client, examples, _batch_size(bundle, args.batch_size))
            elif bundle.task_type == "uie":
                result = run_uie_smoke(bundle, client, examples, _batch_size(bundle, args.batch_size))
            else:
                result = run_mrc_smoke(bundle, client, examples, _batch_size(bundle, args.batch_size))
        backend = (bundle.manifest.get("validated") or {}).get("backend")
        printer = {"token_classification": _print_ner, "uie": _print_uie}.get(bundle.task_type, _print_mrc)
        printer(args.task, args.protocol, result, backend)
        if bundle.task_type == "token_classification":
            items = [e.text for e in examples]
        elif bundle.task_type == "uie":
            items = [(t, tuple(schema)) for texts, schema, _ in uie_requests(examples, 1) for t in texts]
        else:
            items = [(e.question, e.context) for e in examples]
        concurrent = _concurrent(args, bundle, items)
        _write(args, result, concurrent)
    except (ClientError, UserInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("PASS" if result.ok else "FAIL: served predictions or scores differ from the offline/validated model's")
    return 0 if result.ok and (concurrent is None or concurrent.ok) else 1


if __name__ == "__main__":
    sys.exit(main())
