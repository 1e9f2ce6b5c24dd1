"""Stage ``finetune-check``: the FP32 baseline every later gate compares against.

Evaluates the model from ``finetune`` on the full dev set (when fine-tune trained it, the outputs of fine-tune's own
evaluation of those weights stand in, once ``pipeline.dev_outputs`` has checked them; otherwise
``pipeline.fp32_evaluation`` runs it, in a child process where that is faster than dygraph) and fails the run when accuracy is below
the task's ``gates.min_accuracy``, when it is further than ``gates.origin_metric_tolerance`` points from
the ``gates.origin_metric`` the user expects (PaddleSlim ACT's ``TrainConfig.origin_metric``), or when the head
does not match the task's labels: compressing the wrong or an un-fine-tuned model is caught here, before hours
are spent on it.
"""

from __future__ import annotations


from pipeline.stage import Stage
from pipeline.config import TaskConfig
from pipeline.kinds import get_kind, load_task_data
from pipeline.handoffs import Baseline
from pipeline.modeling import check_head, inspect_model, load_classifier
from pipeline.data import data_hashes
from pipeline.tokenizer import Tokenizer

BASELINE_FILE = Baseline.FILE


def params(cfg: TaskConfig) -> dict:
    return {
        "min_accuracy": cfg.gates.min_accuracy,
        # only when set, so configs without it keep their cached results
        **({"origin_metric": cfg.gates.origin_metric, "origin_metric_tolerance": cfg.gates.origin_metric_tolerance}
           if cfg.gates.origin_metric is not None else {}),
        "max_seq_len": cfg.max_seq_len,
        "labels": list(cfg.labels),
        "text_fields": [cfg.data.text_a, cfg.data.text_b, cfg.data.join],
        **get_kind(cfg).feature_params(cfg),
    }


def inputs(cfg: TaskConfig) -> dict[str, str]:
    return data_hashes(cfg)


def run(ctx):
    import numpy as np

    from pipeline import fp32_evaluation
    from pipeline.records import StageResult

    cfg = ctx.cfg
    kind = get_kind(cfg)
    model_dir = ctx.artifact("finetune", "model_dir")
    data = load_task_data(cfg)
    info = inspect_model(model_dir)
    if not check_head(info, data.labels, cfg.max_seq_len, kind.model_class().__name__):
        from pipeline.errors import ModelError

        raise ModelError(f"model {model_dir} has no {kind.name} head; run the finetune stage")
    tokenizer = Tokenizer.from_model_dir(model_dir, cfg.max_seq_len)
    model = load_classifier(model_dir, len(data.labels), kind.model_class())
    dev = kind.featurize(tokenizer, data.dev.examples, cfg)
    ev, how = _kept_outputs(ctx, model, dev)
    if ev is None:
        ev, how = fp32_evaluation.evaluate(model, dev, cfg.finetune.eval_batch_size, "finetune-check (FP32 dev)", ctx.log)
    baseline = Baseline(
        task=cfg.task, type=cfg.type, metric=kind.metric, metric_label=kind.metric_label,
        value=ev.metric,  # the task's primary metric (accuracy, entity F1 or reading F1; named by metric)
        metrics=ev.score.metrics, dev_examples=len(data.dev.examples), dev_features=len(dev),
        # rows dropped on purpose while reading (bad spans, overlaps, answers not in the passage, ...)
        skipped={split.name: {"count": split.skipped, **split.skip_reasons} for split in (data.train, data.dev) if split.skipped},
        labels=list(data.labels), model_dir=str(model_dir), max_seq_len=cfg.max_seq_len)
    baseline.classification, detail = kind.baseline_details(ev, dev, data.labels)
    (ctx.out_dir / BASELINE_FILE).write_text(baseline.to_json(), encoding="utf-8")
    np.save(ctx.out_dir / "dev_logits.npy", ev.flat())  # the FP32 reference for later parity checks
    ctx.log(f"[finetune-check] FP32 dev {kind.metric_label} {ev.metric:.4f} on {len(data.dev.examples)} examples{detail}"
            + (f" ({how})" if how else ""))
    metrics = {"accuracy": ev.metric, "metric": kind.metric, **{k: v for k, v in ev.score.metrics.items()},
               "dev_examples": len(data.dev.examples)}
    gate = gate_error(ev.metric, kind.metric_label, cfg.gates, cfg.task)
    return StageResult(metrics=metrics, artifacts={"baseline": BASELINE_FILE, "dev_logits": "dev_logits.npy"}, gate_error=gate,
                       message=f"FP32 dev {kind.metric_label} {ev.metric:.4f}")


def _kept_outputs(ctx, model, dev):
    """(the fine-tune's own dev evaluation of these weights, how it was checked) when fine-tune kept one that
    ``pipeline.dev_outputs`` accepts, else (None, None): finetune-check then evaluates."""
    from pipeline import dev_outputs
    from pipeline.evaluation import dygraph_forward

    path = ctx.optional_artifact("finetune", "dev_outputs")
    if path is None:
        return None, None
    model.eval()
    ev, how = dev_outputs.reuse(path, dev, dygraph_forward(model), ctx.cfg.finetune.eval_batch_size)
    if ev is None:
        ctx.log(f"[finetune-check] fine-tune's dev outputs not reused: {how}")
        return None, None
    return ev, how


def gate_error(value: float, metric_label: str, gates, task: str) -> str | None:
    """Why the measured FP32 dev metric ``value`` fails this stage's gates (``GateConfig``), or None."""
    if value < gates.min_accuracy:
        return (f"FP32 dev {metric_label} {value:.4f} is below gates.min_accuracy {gates.min_accuracy:.4f} "
                f"(by {100 * (gates.min_accuracy - value):.2f} points): wrong model, or not fine-tuned for {task}?")
    # rounded: 0.7573 vs 0.7473 is 1.0000000000000009 points in floats, and a tolerance of 1 means 1.00 passes
    if gates.origin_metric is not None and round(abs(value - gates.origin_metric) * 100, 6) > gates.origin_metric_tolerance:
        return (f"FP32 dev {metric_label} {value:.4f} is {100 * abs(value - gates.origin_metric):.2f} points from "
                f"gates.origin_metric {gates.origin_metric:.4f} (tolerance gates.origin_metric_tolerance "
                f"{gates.origin_metric_tolerance:g} points): another model, other data or another evaluation than expected?")
    return None


STAGE = Stage(
    name="finetune-check",
    description="evaluate the FP32 model on the full dev set (accuracy, entity F1 or EM/F1); baseline for every later gate",
    requires=("finetune",),
    params=params,
    inputs=inputs,
    run=run,
    version="1",
)
