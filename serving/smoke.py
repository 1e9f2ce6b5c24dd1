"""Smoke test of a running server: the whole dev set through the server must give the offline predictions.

Offline predictions come from the bundle's own model file run through the pipeline's tokenizer
(``serving.offline``); served ones from the ensemble over HTTP or gRPC.  Passes only when every
prediction is the same (hence the same accuracy), not merely close numbers.

    python -m serving.smoke --task tnews [--repository model_repository] [--url 127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from serving.client import ClassifierClient, ClientError
from serving.integrity import BundleIntegrityError
from serving.offline import BundleModel, offline_logits


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


def _dev_set(task: str, data_dir: str | None) -> tuple[list[str], list[int], tuple[str, ...]]:
    from pipeline.config import load_task_config
    from pipeline.data import load_task_data

    cfg = load_task_config(task, {"data.dir": data_dir} if data_dir else None)
    data = load_task_data(cfg)
    if any(e.text_b is not None for e in data.dev.examples):
        raise SystemExit(f"error: task {task} has text pairs; the served ensemble takes single texts")
    return [e.text_a for e in data.dev.examples], [e.label for e in data.dev.examples], data.labels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.smoke", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--repository", default="model_repository")
    p.add_argument("--data-dir", help="dev data dir (default: the task config's)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--url", help="host:port (default 127.0.0.1:8000 / :8001)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--json-out", help="also write the result here")
    args = p.parse_args(argv)
    import pipeline  # noqa: F401  (process setup before anything imports paddle)

    try:
        repo = Path(args.repository)
        bundle = BundleModel.open(repo / args.task if (repo / args.task / "bundle.json").is_file() else repo)
        texts, gold, data_labels = _dev_set(args.task, args.data_dir)
        if tuple(bundle.labels()) != tuple(data_labels):
            print(f"error: the bundle's labels {bundle.labels()[:5]}... differ from the dev data's", file=sys.stderr)
            return 2
        client = ClassifierClient(args.url, args.protocol, bundle.manifest["task"])
        client.wait_ready(30)
        result = run_smoke(bundle, client, texts, gold, args.batch_size)
    except (ClientError, BundleIntegrityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"smoke {args.task}: {result.examples} dev examples via {args.protocol}")
    print(f"  served accuracy   {result.served_accuracy:.4f}")
    print(f"  offline accuracy  {result.offline_accuracy:.4f}  (same model file, pipeline tokenizer)")
    if result.validated_accuracy is not None:
        print(f"  validated accuracy {result.validated_accuracy:.4f}  (validate stage, {bundle.manifest['validated'].get('backend')})")
    print(f"  predictions differing: {result.mismatches}; max |prob diff| {result.max_prob_diff:.2e}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**asdict(result), "ok": result.ok}, indent=2))
    print("PASS" if result.ok else "FAIL: served predictions or accuracy differ from the offline/validated model's")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
