"""Classification in the serving tools: single texts (or, for a pair classifier, (text, text_pair) tuples) in, a label
out (smoke: accuracy and every label equal to the offline one, probabilities within float noise); a multi-label
classifier's label sets (smoke: micro-F1 and every set equal to the offline one)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeline.contract import TaskKind
from serving.kinds.classification.models.class_outputs import log_odds, sigmoid, softmax
from serving.tools.kinds.base import ToolKind, Validated, text_row, validated

if TYPE_CHECKING:
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel

# loadtest's texts when there is no dev set to draw from
SAMPLE_TEXTS = ("国足今晚出战世预赛", "央行宣布下调存款准备金率", "新款手机搭载自研芯片", "这部电影票房突破十亿",
                "房价连续三个月下跌", "高考志愿填报指南发布", "新能源汽车销量创新高", "航母编队完成远海训练")


@dataclass(frozen=True)
class SmokeResult:
    examples: int
    served_accuracy: float
    offline_accuracy: float
    mismatches: int  # examples whose served label differs from the offline one
    max_prob_diff: float  # largest |served prob - offline softmax| over all examples and classes
    validated: Validated  # bundle.json "validated": validate's accuracy for the packaged model file

    @property
    def ok(self) -> bool:
        return (self.mismatches == 0 and self.served_accuracy == self.offline_accuracy
                and self.validated.agrees(self.served_accuracy))


def run_smoke(bundle: "BundleModel", client: "BundleClient", texts: Sequence, gold: Sequence[int], batch_size: int = 32) -> SmokeResult:
    from pipeline.progress import progress
    from serving.tools.offline import offline_logits

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
    probs = softmax(logits).astype(np.float32)  # the served post-processing's own softmax, rounded as it answers
    gold_arr = np.asarray(gold)
    return SmokeResult(
        examples=len(texts),
        served_accuracy=float((served == gold_arr).mean()),
        offline_accuracy=float((offline == gold_arr).mean()),
        mismatches=int((served != offline).sum()),
        max_prob_diff=float(np.abs(served_probs - probs).max()) if len(texts) else 0.0,
        validated=validated(bundle.manifest),
    )


@dataclass(frozen=True)
class SetSmokeResult:
    """A multi-label classifier's smoke result: micro-F1 over (text, label) decisions, served and offline."""

    examples: int
    served_f1: float
    offline_f1: float
    mismatches: int  # examples whose served label set differs from the offline one
    max_prob_diff: float  # largest |served prob - offline sigmoid| over all examples and labels
    validated: Validated

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.served_f1 == self.offline_f1 and self.validated.agrees(self.served_f1)


def threshold(bundle: "BundleModel") -> float | None:
    """A multi-label bundle's threshold (bundle.json ``multi_label``); None for one label per text."""
    section = bundle.manifest.get("multi_label")
    return float(section["threshold"]) if isinstance(section, dict) else None


def run_set_smoke(bundle: "BundleModel", client: "BundleClient", texts: Sequence, gold: Sequence, batch_size: int = 32) -> SetSmokeResult:
    from pipeline.kinds.classification import set_micro_f1 as micro_f1  # the pipeline's score, served and offline
    from pipeline.progress import progress
    from serving.tools.offline import offline_logits

    labels = bundle.labels()
    index = {v: i for i, v in enumerate(labels)}
    served = np.zeros((len(texts), len(labels)), dtype=bool)
    served_probs = np.zeros((len(texts), len(labels)), dtype=np.float32)
    for start in progress(range(0, len(texts), batch_size), desc="served", unit="batch"):
        for j, p in enumerate(client.classify_batch(list(texts[start : start + batch_size]))):
            served[start + j, [index[lab] for lab in p.labels]] = True
            served_probs[start + j, [index[lab] for lab, _ in p.ranked]] = [prob for _, prob in p.ranked]
    logits = offline_logits(bundle, texts)
    offline = logits > log_odds(threshold(bundle))
    gold_arr = np.asarray(gold, dtype=np.int64).reshape(len(texts), len(labels)) == 1
    return SetSmokeResult(
        examples=len(texts), served_f1=micro_f1(served, gold_arr), offline_f1=micro_f1(offline, gold_arr),
        mismatches=int((served != offline).any(axis=1).sum()),
        max_prob_diff=float(np.abs(served_probs - sigmoid(logits).astype(np.float32)).max()) if len(texts) else 0.0,
        validated=validated(bundle.manifest))


class Classification(ToolKind):
    kind = TaskKind.CLASSIFICATION
    command = "classify"
    output = "label"
    sample_texts = SAMPLE_TEXTS
    smoke_failure = "served predictions or accuracy differ from the offline/validated model's"

    def items(self, examples: Sequence) -> list:
        """Texts; for a pair task (text, text_pair) tuples."""
        if any(e.text_b is not None for e in examples):
            return [(e.text_a, e.text_b or "") for e in examples]
        return [e.text_a for e in examples]

    def smoke_problem(self, bundle: "BundleModel", data) -> str | None:
        if tuple(bundle.labels()) != tuple(data.labels):
            return f"the bundle's labels {bundle.labels()[:5]}... differ from the dev data's"
        return None

    def ask(self, client, item):
        return client.classify_batch([item])[0]

    def send(self, client, batch: Sequence) -> None:
        client.classify_raw(batch)

    def answer_key(self, served) -> tuple:
        """The label; a multi-label classifier's: its set (in label order: two labels equally probable may rank either
        way)."""
        return (tuple(sorted(served.labels)),) if hasattr(served, "labels") else (served.label,)

    def offline_keys(self, bundle: "BundleModel", items: Sequence) -> list[tuple]:
        from serving.tools.offline import offline_logits

        labels, t = bundle.labels(), threshold(bundle)
        logits = offline_logits(bundle, list(items), batch_size=1)
        if t is not None:
            return [(tuple(sorted(labels[int(j)] for j in np.flatnonzero(row > log_odds(t)))),) for row in logits]
        return [(labels[int(i)],) for i in logits.argmax(-1)]

    def smoke(self, bundle, client, examples: Sequence, batch_size: int) -> SmokeResult | SetSmokeResult:
        run = run_set_smoke if threshold(bundle) is not None else run_smoke
        return run(bundle, client, self.items(examples), [e.label for e in examples], batch_size)

    def smoke_report(self, r: SmokeResult | SetSmokeResult) -> tuple[str, str, str, str]:
        if isinstance(r, SetSmokeResult):
            return (f"{r.examples} dev examples", f"micro-F1   {r.served_f1:.4f}",
                    f"micro-F1  {r.offline_f1:.4f}  (same model file, pipeline tokenizer)",
                    f"label sets differing: {r.mismatches}; max |prob diff| {r.max_prob_diff:.2e}")
        return (f"{r.examples} dev examples", f"accuracy   {r.served_accuracy:.4f}",
                f"accuracy  {r.offline_accuracy:.4f}  (same model file, pipeline tokenizer)",
                f"predictions differing: {r.mismatches}; max |prob diff| {r.max_prob_diff:.2e}")

    def perf_input(self, item) -> dict:
        if isinstance(item, tuple):  # a pair: both inputs, one item each
            return {**text_row(item[0]), "text_pair": {"content": [item[1]], "shape": [1]}}
        return text_row(item)

    def print_served(self, client, texts, args) -> None:
        for pr in client.classify(texts, args.batch_size):
            if args.json:
                print(json.dumps({k: v for k, v in asdict(pr).items() if k != "text_pair" or v is not None}, ensure_ascii=False))
            elif hasattr(pr, "labels"):  # a multi-label classifier: its labels (none: "-") and their probabilities
                pair = "" if pr.text_pair is None else f"\t{pr.text_pair}"
                probs = ",".join(f"{p:.3f}" for p in pr.probs) or "-"
                print(f"{','.join(pr.labels) or '-'}\t{','.join(pr.label_descs) or '-'}\t{probs}\t{pr.text}{pair}")
            else:
                pair = "" if pr.text_pair is None else f"\t{pr.text_pair}"
                print(f"{pr.label}\t{pr.label_desc}\t{pr.confidence:.3f}\t{pr.text}{pair}")


KIND = Classification()  # what serving.tools.kinds finds in the kind folder's tools.py
