"""Stage ``finetune``: make sure there is a classifier for the task's labels.

* model has a head with the task's labels: nothing to train, the model is passed on as it is (a Hugging Face
  head's rows put in the task's label order; one whose labels are LABEL_i placeholders checked on dev first);
  a head that is not the task's is refused, never dropped, unless ``model.head: replace``;
* model without a head (a pretrained encoder), or ``model.head: replace``: a head is trained, with the encoder;
* no model: a small ERNIE is created from scratch with a character vocabulary from the training
  text and trained.
Training is resumable (see ``pipeline.training``); the best dev-accuracy epoch is kept.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from pipeline import dev_outputs, hf_heads, hf_import
from pipeline.stage import Stage
from pipeline.extraction.checkpoint import convert_uie_checkpoint, is_paddlenlp_uie
from pipeline.config import PRETRAINED_LEARNING_RATE, SCRATCH_LEARNING_RATE, TaskConfig
from pipeline.hashing import tree_sha256
from pipeline.data import data_hashes
from pipeline.kinds import get_kind, load_task_data
from pipeline.contract import LABELS_FILE
from pipeline.errors import ModelError
from pipeline.modeling import (
    check_head,
    check_head_class,
    check_positions,
    create_scratch_classifier,
    inspect_model,
    load_classifier,
    resolve_model_dir,
    save_classifier,
    write_reordered_head,
)
from pipeline.tokenizer import Tokenizer, build_char_vocab, write_vocab
from pipeline.training import finetune as train_loop


HF_HEAD_VERSION = "2"  # a HF head mapped to the task's labels or refused (was: dropped when not the task's)
ASSUMED_ORDER_DEV_EXAMPLES = 4000  # dev examples the assumed order of a LABEL_i head is checked on


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
        **get_kind(cfg).feature_params(cfg),
    }
    if not cfg.model.name_or_path:
        p["scratch"] = dataclasses.asdict(cfg.model.scratch)
    if cfg.model.head != "keep":  # only when set, so configs without it keep their cached results
        p["head"] = cfg.model.head
    loss_version = get_kind(cfg).loss_version
    if loss_version:
        p["loss"] = loss_version
    return p


def inputs(cfg: TaskConfig) -> dict[str, str]:
    out = data_hashes(cfg)
    model_dir = resolve_model_dir(cfg.model)
    if model_dir is not None:
        # Fail fast on a broken model dir, before anything runs; ``status`` comes here too, so the weights are not
        # read (a pickle is code: run() reads them, through the allow-list, before any work).
        if hf_import.is_hugging_face(model_dir):
            hf_import.inspect(model_dir, cfg.model.allow_pickled_weights)
            out["hf_head"] = HF_HEAD_VERSION  # how a HF head is taken (mapped, refused, checked on dev)
        else:
            inspect_model(model_dir, weights=False)
        out["model"] = tree_sha256(model_dir)
    return out


def run(ctx) -> "StageResult":  # noqa: F821 - imported lazily to keep the graph import-light
    """Take the model as it is when it already has the task's head (or is a PaddleNLP UIE checkpoint: converted);
    otherwise fine-tune one: the given encoder with a new head, or the small ERNIE from scratch."""
    cfg = ctx.cfg
    model_dir = resolve_model_dir(cfg.model)
    if model_dir is not None and get_kind(cfg).uses_uie_checkpoints and is_paddlenlp_uie(model_dir):
        return _convert_uie(ctx, model_dir)
    data = load_task_data(cfg)
    if data.labels_from:
        shown = ", ".join(data.labels[:8]) + (f", ... {len(data.labels) - 8} more" if len(data.labels) > 8 else "")
        listed = [p.name for p in sorted(Path(data.labels_from).parent.glob("label*.txt"))]
        hint = f"; the data dir has {listed[0]}: data.labels_file: {listed[0]} reads it" if listed else ""
        ctx.log(f"[data] labels: the {len(data.labels)} in {data.labels_from}, sorted (no labels.json, and the task "
                f"config lists none; `labels:` in it fixes their order{hint}): {shown}")
    if model_dir is not None and hf_import.is_hugging_face(model_dir):
        model_dir, ready = _imported(ctx, model_dir, data)
        if ready is not None:
            return ready
    elif model_dir is not None:
        ready = _model_as_is(ctx, model_dir, data)
        if ready is not None:
            return ready
    _report_data(ctx, data)
    model, tokenizer, vocab_dir = _model_to_train(ctx, model_dir, data)
    return _train(ctx, model, tokenizer, vocab_dir, data)


def _convert_uie(ctx, model_dir: Path):
    from pipeline.records import StageResult

    convert_uie_checkpoint(model_dir, ctx.out_dir / "model")
    ctx.log(f"[finetune] {model_dir} is a PaddleNLP UIE checkpoint: converted (heads merged), no training needed")
    return StageResult(artifacts={"model_dir": "model"}, message="converted a PaddleNLP UIE checkpoint",
                       metrics={"trained": 0, "converted": 1})


def _imported(ctx, hf_dir: Path, data):
    """A Hugging Face checkpoint, converted once into work/ (``hf_import.converted``): (the converted directory to
    train from, None), or (its folder in out/, the result) when it has a head.  Its head is mapped to the task's
    labels by ids or names (rows reordered), taken in index order when its labels are LABEL_i placeholders (checked
    on dev: ``_check_assumed_order``), and refused otherwise; ``model.head: replace`` leaves it out of the
    conversion and fine-tunes a new one, as for an encoder."""
    from pipeline.records import StageResult

    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    allow = cfg.model.allow_pickled_weights
    ckpt = hf_import.inspect(hf_dir, allow)
    if ckpt.head is None:
        model_dir = hf_import.converted(hf_dir, ctx.work_dir, allow, ctx.log)
        check_positions(inspect_model(model_dir), cfg.max_seq_len)
        return model_dir, None
    if cfg.model.head == "replace":
        model_dir = hf_import.converted(hf_dir, ctx.work_dir, allow, ctx.log, keep_head=False)
        check_positions(inspect_model(model_dir), cfg.max_seq_len)
        return model_dir, None
    hf_heads.check_head_kind(ckpt, kind.model_class().__name__, kind.name)
    hf_heads.check_problem_type(ckpt, *kind.hf_problem_type)
    model_dir = hf_import.converted(hf_dir, ctx.work_dir, allow, ctx.log, labels=data.labels,
                                    label_names=data.label_names)
    info = inspect_model(model_dir)
    check_positions(info, cfg.max_seq_len)  # no head makes up for too few positions
    if not check_head(info, data.labels, cfg.max_seq_len, kind.model_class().__name__):  # mapped: the task's labels
        return model_dir, None
    mapping = hf_import.head_mapping(model_dir)
    if mapping and mapping["by"] == "assumed":
        _check_assumed_order(ctx, hf_dir, model_dir, data)
    architecture = hf_import.source_architecture(model_dir)
    shutil.move(str(model_dir), str(ctx.out_dir / "model"))
    ctx.log(f"[finetune] {hf_dir} already has the task's {len(data.labels)}-output head: converted, no training needed")
    return None, StageResult(artifacts={"model_dir": "model"}, metrics={"trained": 0, "converted": 1},
                             message=f"converted a Hugging Face {architecture} with the task's head: no training")


def _check_assumed_order(ctx, hf_dir: Path, model_dir: Path, data) -> None:
    """A head taken in index order (LABEL_i) on the converted model's dev predictions: the best assignment of its
    outputs to the task's labels must be the index order (``hf_heads.assumed_order_verdict``), else refused."""
    from pipeline.evaluation import dygraph_forward, run_outputs

    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    tokenizer = Tokenizer.from_model_dir(model_dir, cfg.max_seq_len)
    model = load_classifier(model_dir, len(data.labels), kind.model_class())  # in eval mode
    dev = kind.featurize(tokenizer, data.dev.examples[:ASSUMED_ORDER_DEV_EXAMPLES], cfg)
    outputs = run_outputs(dygraph_forward(model), dev, cfg.finetune.eval_batch_size, "finetune (assumed head order, dev)")
    confusion = hf_heads.dev_confusion(outputs, [f.target for f in dev.features], len(data.labels))
    ctx.log(f"[finetune] {hf_dir}: " + hf_heads.assumed_order_verdict(confusion, data.labels, data.label_names, hf_dir))


def _model_as_is(ctx, model_dir: Path, data):
    """The model already has the task's head: nothing to train (None otherwise).  Its labels (labels.json, or
    config.json's id2label) are matched to the task's by ids or by names in any order, as a Hugging Face head's are
    (``hf_heads.match_labels``: labels.json's ``label_desc`` are names); in another order, a copy with its rows in
    the task's order is written to out/ (``_reordered``)."""
    from pipeline.records import StageResult

    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    info = inspect_model(model_dir)
    if cfg.model.head == "replace" and info.head_classes is not None:
        check_positions(info, cfg.max_seq_len)
        return None
    if (info.labels is not None and info.head_classes == len(data.labels) == len(info.labels)
            and tuple(info.labels) != tuple(data.labels)):
        return _reordered(ctx, model_dir, info, data)
    if not check_head(info, data.labels, cfg.max_seq_len, kind.model_class().__name__):
        return None
    ctx.log(f"[finetune] {model_dir} already has the task's {len(data.labels)}-output head: no training needed")
    return StageResult(artifacts={"model_dir": str(model_dir)}, external_outputs={str(model_dir): tree_sha256(model_dir)},
                       message="skipped training: model already has the task's head", metrics={"trained": 0})


def _reordered(ctx, model_dir: Path, info, data):
    """A trained head whose labels are the task's ids or names in another order (or its names in the task's order):
    written to out/model with its rows in the task's order and the task's labels; refused in one line when its
    labels match the task's in no way."""
    from pipeline.records import StageResult

    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    check_positions(info, cfg.max_seq_len)
    check_head_class(info, kind.model_class().__name__)
    mapping = hf_heads.match_labels(info.labels, info.label_names, data.labels, data.label_names)
    if mapping is None:
        names = f" (names {list(info.label_names)[:5]}...)" if info.label_names else ""
        source = LABELS_FILE if (model_dir / LABELS_FILE).is_file() else "config.json (id2label)"
        raise ModelError(f"model {model_dir}/{source}: its head's labels {list(info.labels)[:5]}...{names} match "
                         f"neither the ids nor the names of the task's {list(data.labels)[:5]}..., in any order: not "
                         f"dropping a trained head; {hf_heads.REPLACE_FLAG} fine-tunes a new one on its encoder")
    write_reordered_head(model_dir, ctx.out_dir / "model", mapping.order, data.labels, data.label_names)
    ctx.log(f"[finetune] {model_dir}: {mapping.note}")
    return StageResult(artifacts={"model_dir": "model"}, metrics={"trained": 0, "converted": 1},
                       message=f"kept the model's head, its labels mapped to the task's by {mapping.by}: no training")


def _model_to_train(ctx, model_dir: Path | None, data):
    """(model, tokenizer, vocabulary dir): the given encoder with the kind's head, or the scratch ERNIE with a
    character vocabulary from the training text (kept in work/, so a resumed run tokenizes the same)."""
    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    if model_dir is not None:
        import paddle

        paddle.seed(cfg.finetune.seed)
        replaced = cfg.model.head == "replace"
        model = load_classifier(model_dir, len(data.labels), kind.model_class(), drop_head=replaced)
        ctx.log(f"[finetune] {model_dir}" + (f": fine-tuning a new {kind.name} head (model.head: replace)" if replaced
                                             else f" has no {kind.name} head for the task: fine-tuning one"))
        return model, Tokenizer.from_model_dir(model_dir, cfg.max_seq_len), model_dir
    vocab_dir = ctx.work_dir / "vocab"
    if not (vocab_dir / "vocab.txt").is_file():
        vocab_dir.mkdir(parents=True, exist_ok=True)
        write_vocab(build_char_vocab(kind.training_texts(data.train.examples), cfg.model.scratch.min_char_freq), vocab_dir)
    tokenizer = Tokenizer.from_model_dir(vocab_dir, cfg.max_seq_len)
    model = create_scratch_classifier(cfg.model.scratch, tokenizer.vocab_size, len(data.labels), cfg.finetune.seed,
                                      kind.model_class())
    s = cfg.model.scratch
    ctx.log(f"[finetune] no model given: training a {s.num_hidden_layers}-layer, {s.hidden_size}-hidden ERNIE from scratch "
            f"(vocabulary {tokenizer.vocab_size} characters from the training text)")
    return model, tokenizer, vocab_dir


def _train(ctx, model, tokenizer, vocab_dir: Path, data):
    """The training loop (resumable from work/), keeping the best epoch on dev; its model is the stage's output."""
    from pipeline.records import StageResult

    cfg, kind = ctx.cfg, get_kind(ctx.cfg)
    lr = learning_rate(cfg)
    train_cfg = dataclasses.replace(cfg.finetune, learning_rate=lr)
    ctx.log(f"[finetune] {cfg.finetune.epochs} epoch(s), batch {cfg.finetune.batch_size}, learning rate {lr:g}")
    best_dir = ctx.work_dir / "best"

    def save_best(m, ev=None) -> None:
        tmp = ctx.work_dir / ".best-tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_classifier(m, tmp, vocab_dir, data.labels, data.label_names)
        if ev is not None:  # its dev outputs, with the weights they are of: finetune-check reuses them
            dev_outputs.save(tmp / dev_outputs.FILE, ev, dev_fs, train_cfg.eval_batch_size)
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
    shutil.copytree(best_dir, ctx.out_dir / "model", ignore=shutil.ignore_patterns(dev_outputs.FILE))
    artifacts = {"model_dir": "model"}
    if (best_dir / dev_outputs.FILE).is_file():
        shutil.copyfile(best_dir / dev_outputs.FILE, ctx.out_dir / dev_outputs.FILE)
        artifacts["dev_outputs"] = dev_outputs.FILE
    metrics = {f"best_dev_{kind.metric}": result.best_accuracy, "best_epoch": result.best_epoch, "steps": result.steps,
               "trained": 1, "train_examples": len(data.train.examples)}
    if result.resumed_from_step:
        metrics["resumed_from_step"] = result.resumed_from_step
    return StageResult(metrics=metrics, artifacts=artifacts,
                       message=f"best dev {kind.metric_label} {result.best_accuracy:.4f} at epoch {result.best_epoch}")


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
