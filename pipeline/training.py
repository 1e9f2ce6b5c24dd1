"""Fine-tuning loop: AdamW, linear warmup then linear decay, dev evaluation each epoch, best kept.

Resumable: every ``checkpoint_steps`` steps and at each epoch end the model, optimizer, scheduler,
step counter and best-so-far are saved into ``work_dir`` (written to a temp name, then renamed).
A killed run (Ctrl-C or kill -9) restarts from the last checkpoint and, because batch order is a
pure function of (seed, epoch), skips exactly the batches it had already trained on.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.batching import train_batch_order
from pipeline.config import FinetuneConfig
from pipeline.evaluation import Evaluation, evaluate_dygraph
from pipeline.kinds.base import FeatureSet
from pipeline.progress import log as _log
from pipeline.progress import progress


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0  # current epoch (0-based)
    step_in_epoch: int = 0  # batches of the current epoch already trained
    best_accuracy: float = -1.0  # the task's primary dev metric (accuracy, entity F1, reading F1)
    best_epoch: int = -1
    history: list[dict] = field(default_factory=list)  # one entry per finished epoch


@dataclass(frozen=True)
class TrainResult:
    best_accuracy: float
    best_epoch: int
    steps: int
    history: list[dict]
    resumed_from_step: int


def _subset(fs: FeatureSet, n: int, seed: int) -> FeatureSet:
    if n <= 0 or n >= len(fs):
        return fs
    return fs.subset(np.sort(np.random.RandomState(seed).choice(len(fs), n, replace=False)))


def finetune(
    model,
    train: FeatureSet,
    dev: FeatureSet,
    cfg: FinetuneConfig,
    work_dir: Path,
    save_best: Callable[[object], None],
    log: Callable[[str], None] = _log,
) -> TrainResult:
    import paddle

    train = _subset(train, cfg.max_train_samples, cfg.seed)
    steps_per_epoch = (len(train) + cfg.batch_size - 1) // cfg.batch_size
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps > 0:
        total_steps = min(total_steps, cfg.max_steps)
    warmup = int(cfg.warmup_ratio * total_steps)
    decay = paddle.optimizer.lr.PolynomialDecay(cfg.learning_rate, decay_steps=max(1, total_steps - warmup), end_lr=0.0)
    sched = paddle.optimizer.lr.LinearWarmup(decay, warmup_steps=max(warmup, 0), start_lr=0.0, end_lr=cfg.learning_rate) if warmup > 0 else decay
    # No weight decay on biases and LayerNorm weights, as BERT/ERNIE fine-tuning recipes do.
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    opt = paddle.optimizer.AdamW(
        learning_rate=sched,
        parameters=model.parameters(),
        weight_decay=cfg.weight_decay,
        apply_decay_param_fun=lambda name: name not in no_decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )

    ckpt = CheckpointDir(Path(work_dir))
    state = ckpt.load(model, opt, sched) or TrainState()
    resumed_from = state.step
    if resumed_from:
        log(f"resuming fine-tune from step {state.step}/{total_steps} (epoch {state.epoch + 1}, best dev acc {state.best_accuracy:.4f})")

    model.train()
    kind = train.kind
    last_ckpt = time.time()
    bar = progress(total=total_steps, initial=state.step, desc="fine-tune", unit="step")
    try:
        while state.epoch < cfg.epochs and state.step < total_steps:
            order = train_batch_order(train, cfg.batch_size, cfg.seed, state.epoch)
            running, n = 0.0, 0
            for idx in order[state.step_in_epoch :]:
                if state.step >= total_steps:
                    break
                b = train.batch(idx)
                logits = model(paddle.to_tensor(b.input_ids), token_type_ids=paddle.to_tensor(b.token_type_ids))
                loss = kind.loss(logits, b, train.pad_id)
                loss.backward()
                opt.step()
                opt.clear_grad()
                sched.step()
                state.step += 1
                state.step_in_epoch += 1
                running += float(loss)
                n += 1
                bar.update(1)
                if n % 20 == 0:
                    bar.set_postfix(loss=f"{running / n:.3f}", lr=f"{sched.get_lr():.2e}")
                if state.step % cfg.checkpoint_steps == 0 or time.time() - last_ckpt > 300:
                    ckpt.save(model, opt, sched, state)
                    last_ckpt = time.time()
            epoch_done = state.step_in_epoch >= len(order)
            ev: Evaluation = evaluate_dygraph(model, dev, cfg.eval_batch_size, desc=f"dev eval (epoch {state.epoch + 1})")
            entry = {"epoch": state.epoch + 1, "step": state.step, "train_loss": running / max(n, 1),
                     f"dev_{kind.metric}": ev.metric, **{f"dev_{k}": v for k, v in ev.score.metrics.items()}}
            state.history.append(entry)
            improved = ev.metric > state.best_accuracy
            log(
                f"epoch {state.epoch + 1}/{cfg.epochs}: step {state.step}, train loss {entry['train_loss']:.4f}, "
                f"dev {kind.describe(ev.score)}" + ("  (best so far, kept)" if improved else "")
            )
            if improved:
                state.best_accuracy, state.best_epoch = ev.metric, state.epoch + 1
                save_best(model)
            model.train()
            if epoch_done:
                state.epoch += 1
                state.step_in_epoch = 0
            ckpt.save(model, opt, sched, state)
            last_ckpt = time.time()
            if not epoch_done:
                break  # stopped by max_steps mid-epoch
    finally:
        bar.close()
    return TrainResult(state.best_accuracy, state.best_epoch, state.step, state.history, resumed_from)


class CheckpointDir:
    """One resumable checkpoint, replaced atomically (a directory rename)."""

    def __init__(self, root: Path):
        self.root = root
        self.current = root / "checkpoint"

    def save(self, model, opt, sched, state: TrainState) -> None:
        import paddle

        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".checkpoint-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        paddle.save(model.state_dict(), str(tmp / "model.pdparams"))
        paddle.save(opt.state_dict(), str(tmp / "optimizer.pdopt"))
        paddle.save(sched.state_dict(), str(tmp / "scheduler.pdparams"))
        (tmp / "state.json").write_text(json.dumps(asdict(state)), encoding="utf-8")
        old = self.root / f".old-{os.getpid()}"
        if self.current.exists():
            self.current.rename(old)
        tmp.rename(self.current)
        shutil.rmtree(old, ignore_errors=True)

    def load(self, model, opt, sched) -> TrainState | None:
        import paddle

        if not (self.current / "state.json").is_file():
            return None
        try:
            state = TrainState(**json.loads((self.current / "state.json").read_text(encoding="utf-8")))
            model.set_state_dict(paddle.load(str(self.current / "model.pdparams")))
            opt.set_state_dict(paddle.load(str(self.current / "optimizer.pdopt")))
            sched.set_state_dict(paddle.load(str(self.current / "scheduler.pdparams")))
        except Exception:  # a checkpoint from an incompatible run: start over rather than crash
            return None
        return state
