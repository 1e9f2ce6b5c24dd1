"""Stage ``finetune-check``: the FP32 baseline every later gate compares against.

Evaluates the model from ``finetune`` on the full dev set and fails the run when accuracy is below
the task's ``gates.min_accuracy`` or the head does not match the task's labels: compressing the
wrong or an un-fine-tuned model is caught here, before hours are spent on it.
"""

from __future__ import annotations

import json

from pipeline.config import TaskConfig
from pipeline.data import load_task_data
from pipeline.modeling import check_head, inspect_model, load_classifier
from pipeline.stages.finetune import data_inputs
from pipeline.tokenizer import Tokenizer

BASELINE_FILE = "baseline.json"


def params(cfg: TaskConfig) -> dict:
    return {
        "min_accuracy": cfg.gates.min_accuracy,
        "max_seq_len": cfg.max_seq_len,
        "labels": list(cfg.labels),
        "text_fields": [cfg.data.text_a, cfg.data.text_b, cfg.data.join],
    }


def inputs(cfg: TaskConfig) -> dict[str, str]:
    return data_inputs(cfg)


def run(ctx):
    from pipeline.evaluation import evaluate_dygraph
    from pipeline.runner import StageResult

    cfg = ctx.cfg
    model_dir = ctx.artifact("finetune", "model_dir")
    data = load_task_data(cfg)
    info = inspect_model(model_dir)
    if not check_head(info, data.labels, cfg.max_seq_len):
        from pipeline.errors import ModelError

        raise ModelError(f"model {model_dir} has no classification head; run the finetune stage")
    tokenizer = Tokenizer.from_model_dir(model_dir, cfg.max_seq_len)
    model = load_classifier(model_dir, len(data.labels))
    ev = evaluate_dygraph(model, tokenizer, data.dev.examples, cfg.finetune.eval_batch_size, desc="finetune-check (FP32 dev)")
    num_labels = len(data.labels)
    majority = float(max((ev.labels == c).mean() for c in range(num_labels)))
    baseline = {
        "task": cfg.task,
        "metric": "accuracy",
        "accuracy": ev.accuracy,
        "macro_f1": ev.macro_f1(num_labels),
        "dev_examples": int(len(ev.labels)),
        "majority_class_accuracy": majority,
        "labels": list(data.labels),
        "per_class_recall": dict(zip(data.labels, ev.per_class_recall(num_labels))),
        "model_dir": str(model_dir),
        "max_seq_len": cfg.max_seq_len,
    }
    (ctx.out_dir / BASELINE_FILE).write_text(json.dumps(baseline, indent=2, ensure_ascii=False), encoding="utf-8")
    import numpy as np

    np.save(ctx.out_dir / "dev_logits.npy", ev.logits)  # the FP32 reference for later parity checks
    ctx.log(f"[finetune-check] FP32 dev accuracy {ev.accuracy:.4f} on {len(ev.labels)} examples (macro-F1 {baseline['macro_f1']:.4f}, majority class {majority:.4f})")
    metrics = {"accuracy": ev.accuracy, "macro_f1": baseline["macro_f1"], "dev_examples": int(len(ev.labels))}
    gate = None
    if ev.accuracy < cfg.gates.min_accuracy:
        gate = (
            f"FP32 dev accuracy {ev.accuracy:.4f} is below gates.min_accuracy {cfg.gates.min_accuracy:.4f} "
            f"(by {100 * (cfg.gates.min_accuracy - ev.accuracy):.2f} points): wrong model, or not fine-tuned for {cfg.task}?"
        )
    return StageResult(metrics=metrics, artifacts={"baseline": BASELINE_FILE, "dev_logits": "dev_logits.npy"}, gate_error=gate,
                       message=f"FP32 dev accuracy {ev.accuracy:.4f}")
