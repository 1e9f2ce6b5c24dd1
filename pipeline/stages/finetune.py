"""Stage ``finetune``: make sure there is a classifier for the task's labels.

* model has a head with the task's labels: nothing to train, the model is passed on as it is;
* model without a head (a pretrained encoder): a head is trained, with the encoder;
* no model: a small ERNIE is created from scratch with a character vocabulary from the training
  text and trained.
Training is resumable (see ``pipeline.training``); the best dev-accuracy epoch is kept.
"""

from __future__ import annotations

import dataclasses
import shutil

from pipeline.stage import Stage
from pipeline.extraction.checkpoint import convert_uie_checkpoint, is_paddlenlp_uie
from pipeline.config import PRETRAINED_LEARNING_RATE, SCRATCH_LEARNING_RATE, TaskConfig
from pipeline.kinds import load_task_data
from pipeline.hashing import tree_sha256
from pipeline.kinds import get_kind
from pipeline.modeling import (
    check_head,
    create_scratch_classifier,
    inspect_model,
    load_classifier,
    resolve_model_dir,
    save_classifier,
)
from pipeline.tokenizer import Tokenizer, build_char_vocab, write_vocab
from pipeline.training import finetune as train_loop


def learning_rate(cfg: TaskConfig) -> float:
    if cfg.finetune.learning_rate:
        return cfg.finetune.learning_rate
    return SCRATCH_LEARNING_RATE if not cfg.model.name_or_path else PRETRAINED_LEARNING_RATE


def params(cfg: TaskConfig) -> dict:
    p = {
        "model": cfg.model.name_or_path,
        "labels": list(cfg.labels),
        "max_seq_len": cfg.max_seq_len,
        "finetune": dataclasses.asdict(dataclasses.replace(cfg.finetune, learning_rate=learning_rate(cfg))),
        "text_fields": [cfg.data.text_a, cfg.data.text_b, cfg.data.join],
        **kind_params(cfg),
    }
    if not cfg.model.name_or_path:
        p["scratch"] = dataclasses.asdict(cfg.model.scratch)
    loss_version = get_kind(cfg).loss_version
    if loss_version:
        p["loss"] = loss_version
    return p


def kind_params(cfg: TaskConfig) -> dict:
    """What changes the features of a non-classification task (part of every data-reading stage's key)."""
    if cfg.type == "classification":
        return {}
    out = {"type": cfg.type, "format": cfg.data.format, "files": [cfg.data.train_file, cfg.data.dev_file]}
    if cfg.type == "reading_comprehension":
        out["reading"] = dataclasses.asdict(cfg.reading)
    if cfg.type == "uie":
        out["uie"] = dataclasses.asdict(cfg.uie)
        out["labels"] = list(cfg.labels)
    return out


def data_inputs(cfg: TaskConfig) -> dict[str, str]:
    """Content hashes of the data files (no parsing: cheap enough for ``status``)."""
    from pipeline.errors import DataError
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


def inputs(cfg: TaskConfig) -> dict[str, str]:
    out = data_inputs(cfg)
    model_dir = resolve_model_dir(cfg.model)
    if model_dir is not None:
        # Fail fast on a broken model dir, before anything runs; ``status`` comes here too, so the weights are not
        # read (a pickle is code: run() reads them, through the allow-list, before any work).
        inspect_model(model_dir, weights=False)
        out["model"] = tree_sha256(model_dir)
    return out


def run(ctx) -> "StageResult":  # noqa: F821 - imported lazily to keep the graph import-light
    from pipeline.records import StageResult

    cfg = ctx.cfg
    kind = get_kind(cfg)
    model_dir = resolve_model_dir(cfg.model)
    if model_dir is not None and cfg.type == "uie" and is_paddlenlp_uie(model_dir):
        convert_uie_checkpoint(model_dir, ctx.out_dir / "model")
        ctx.log(f"[finetune] {model_dir} is a PaddleNLP UIE checkpoint: converted (heads merged), no training needed")
        return StageResult(artifacts={"model_dir": "model"}, message="converted a PaddleNLP UIE checkpoint",
                           metrics={"trained": 0, "converted": 1})
    if model_dir is not None:
        info = inspect_model(model_dir)
        data = load_task_data(cfg)
        if check_head(info, data.labels, cfg.max_seq_len, kind.model_class().__name__):
            ctx.log(f"[finetune] {model_dir} already has the task's {len(data.labels)}-output head: no training needed")
            return StageResult(
                artifacts={"model_dir": str(model_dir)},
                external_outputs={str(model_dir): tree_sha256(model_dir)},
                message="skipped training: model already has the task's head",
                metrics={"trained": 0},
            )
    else:
        data = load_task_data(cfg)
    _report_data(ctx, data)

    vocab_dir = ctx.work_dir / "vocab"
    if model_dir is None:
        if not (vocab_dir / "vocab.txt").is_file():
            vocab_dir.mkdir(parents=True, exist_ok=True)
            vocab = build_char_vocab(kind.training_texts(data.train.examples), cfg.model.scratch.min_char_freq)
            write_vocab(vocab, vocab_dir)
        tokenizer = Tokenizer.from_model_dir(vocab_dir, cfg.max_seq_len)
        model = create_scratch_classifier(cfg.model.scratch, tokenizer.vocab_size, len(data.labels), cfg.finetune.seed,
                                          kind.model_class())
        s = cfg.model.scratch
        ctx.log(
            f"[finetune] no model given: training a {s.num_hidden_layers}-layer, {s.hidden_size}-hidden ERNIE from scratch "
            f"(vocabulary {tokenizer.vocab_size} characters from the training text)"
        )
    else:
        vocab_dir = model_dir
        tokenizer = Tokenizer.from_model_dir(model_dir, cfg.max_seq_len)
        import paddle

        paddle.seed(cfg.finetune.seed)
        model = load_classifier(model_dir, len(data.labels), kind.model_class())
        ctx.log(f"[finetune] {model_dir} has no {kind.name} head for the task: fine-tuning one")

    lr = learning_rate(cfg)
    train_cfg = dataclasses.replace(cfg.finetune, learning_rate=lr)
    ctx.log(f"[finetune] {cfg.finetune.epochs} epoch(s), batch {cfg.finetune.batch_size}, learning rate {lr:g}")
    best_dir = ctx.work_dir / "best"

    def save_best(m) -> None:
        tmp = ctx.work_dir / ".best-tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_classifier(m, tmp, vocab_dir, data.labels, data.label_names)
        shutil.rmtree(best_dir, ignore_errors=True)
        tmp.rename(best_dir)

    all_train = kind.featurize(tokenizer, data.train.examples, cfg)
    train_fs = kind.for_training(all_train, cfg.finetune.seed)
    dev_fs = kind.featurize(tokenizer, data.dev.examples, cfg)
    if len(train_fs) != len(data.train.examples):
        ctx.log(f"[finetune] {len(data.train.examples)} training examples -> {len(all_train)} windows, "
                f"{len(train_fs)} trained on (all with a target, the configured fraction of the rest: reading.negative_window_ratio / uie.negative_ratio)")
    result = train_loop(model, train_fs, dev_fs, train_cfg, ctx.work_dir, save_best, ctx.log)
    if not (best_dir / "model_state.pdparams").is_file():
        save_best(model)
    shutil.copytree(best_dir, ctx.out_dir / "model")
    metrics = {
        f"best_dev_{kind.metric}": result.best_accuracy,
        "best_epoch": result.best_epoch,
        "steps": result.steps,
        "trained": 1,
        "train_examples": len(data.train.examples),
    }
    if result.resumed_from_step:
        metrics["resumed_from_step"] = result.resumed_from_step
    return StageResult(
        metrics=metrics,
        artifacts={"model_dir": "model"},
        message=f"best dev {kind.metric_label} {result.best_accuracy:.4f} at epoch {result.best_epoch}",
    )


def _report_data(ctx, data) -> None:
    for split in (data.train, data.dev):
        reasons = ", ".join(f"{k}: {v}" for k, v in split.skip_reasons.items() if v)
        skipped = f", {split.skipped} skipped ({reasons})" if split.skipped else ""
        ctx.log(f"[data] {split.name}: {len(split.examples)} examples from {split.source}{skipped}")


STAGE = Stage(
    name="finetune",
    description="train the task's head (classifier, BIO tagger or span extractor; and the scratch model) when the model has none",
    requires=(),
    params=params,
    inputs=inputs,
    run=run,
    version="1",
)
