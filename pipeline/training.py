"""The one training loop (fine-tune, DynaBERT distillation, QAT): AdamW, linear warmup then linear decay,
evaluation each epoch (and, with a ``Plateau``, every ``Plateau.eval_steps`` steps, stopping once the metric stops
improving), best kept.  Fine-tune's and distillation's evaluations run where ``pipeline.fp32_evaluation`` says (a
child process when dygraph would take long); QAT's in dygraph (its fake-quantized program is no FP32 model).

Resumable: every ``checkpoint_steps`` steps and at each epoch end the model, optimizer, scheduler,
step counter and best-so-far are saved into ``work_dir`` (written to a temp name, then renamed).
A killed run (Ctrl-C or kill -9) restarts from the last checkpoint and, because batch order is a
pure function of (seed, epoch), skips exactly the batches it had already trained on.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline import fp32_evaluation
from pipeline.batching import train_batch_order
from pipeline.config import FinetuneConfig
from pipeline.errors import ModelError
from pipeline.evaluation import Evaluation, evaluate_dygraph
from pipeline.kinds.base import FeatureSet
from pipeline.progress import log as _log
from pipeline.progress import StepEstimate, progress


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0  # current epoch (0-based)
    step_in_epoch: int = 0  # batches of the current epoch already trained
    best_accuracy: float = -1.0  # the task's primary dev metric (accuracy, entity F1, reading F1)
    best_epoch: int = -1
    history: list[dict] = field(default_factory=list)  # one entry per evaluation (each epoch's end, each plateau check)
    stale_evals: int = 0  # evaluations since the metric last improved by the plateau's min_delta (Plateau)
    plateau_end: int = 0  # the step the plateau rule moved the budget's end to (0: it has not)

    def end_epoch(self, batches: int) -> bool:
        """After an epoch's evaluation: moves to the next epoch when all ``batches`` were trained; False when the step
        budget (or the plateau rule's end) ended it mid-epoch."""
        if self.step_in_epoch < batches:
            return False
        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        return True


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


# ------------------------------------------------------------------------------------------------
# step budget and optimizer (PaddleNLP TrainingArguments semantics)


@dataclass(frozen=True)
class StepPlan:
    epochs: int
    total_steps: int


def plan_steps(num_examples: int, batch_size: int, epochs: int, max_steps: int) -> StepPlan:
    """``max_steps > 0`` sets the number of optimizer steps and overrides ``epochs`` (epochs become
    ``ceil(max_steps / steps_per_epoch)``), as PaddleNLP's ``TrainingArguments`` do (DynaBERT, QAT)."""
    per_epoch = max(1, math.ceil(num_examples / batch_size))
    if max_steps > 0:
        return StepPlan(math.ceil(max_steps / per_epoch), max_steps)
    epochs = max(1, epochs)
    return StepPlan(epochs, per_epoch * epochs)


def planned_tokens(train: FeatureSet, batch_size: int, seed: int, plan: StepPlan, start: int = 0) -> list[int]:
    """Padded tokens (items x widest item) of each step ``start``.. of ``plan``, in ``train_loop``'s batch order: the
    work a step does, for an estimate of how long the steps take."""
    lengths, tokens = train.lengths(), []
    for epoch in range(plan.epochs):
        if len(tokens) >= plan.total_steps:
            break
        tokens += [len(idx) * int(lengths[idx].max()) for idx in train_batch_order(train, batch_size, seed, epoch)]
    return tokens[start:plan.total_steps]


def step_estimate(what: str, train: FeatureSet, batch_size: int, seed: int, plan: StepPlan, start: int,
                  log: Callable[[str], None], cap: str = "") -> StepEstimate:
    """The estimate line for ``train_loop``'s steps ``start``.. of ``plan``, spread by each batch's padded tokens;
    held-out or dev evaluations and checkpoints come on top."""
    return StepEstimate(what, plan.total_steps - start, log, cap=cap, cost_name="padded tokens",
                        costs=planned_tokens(train, batch_size, seed, plan, start))


def make_optimizer(model, learning_rate: float, total_steps: int, warmup_ratio: float = 0.0, weight_decay: float = 0.0):
    """(optimizer, scheduler): AdamW, linear warmup then linear decay to 0, no weight decay on biases and
    LayerNorm weights (as BERT/ERNIE fine-tuning recipes do), global-norm clipping at 1.0."""
    import paddle

    warmup = int(warmup_ratio * total_steps)
    sched = paddle.optimizer.lr.PolynomialDecay(learning_rate, decay_steps=max(1, total_steps - warmup), end_lr=0.0)
    if warmup > 0:
        sched = paddle.optimizer.lr.LinearWarmup(sched, warmup_steps=warmup, start_lr=0.0, end_lr=learning_rate)
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    opt = paddle.optimizer.AdamW(
        learning_rate=sched,
        parameters=model.parameters(),
        weight_decay=weight_decay,
        apply_decay_param_fun=lambda name: name not in no_decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )
    return opt, sched


@dataclass(frozen=True)
class Plateau:
    """Stop when training stops paying: evaluate every ``eval_steps`` steps; after ``patience`` evaluations in a row that
    do not beat the best by more than ``min_delta`` (a fraction of the metric: 0.001 is 0.1 points), the budget ends
    ``eval_steps`` later, the learning rate decaying to 0 over them as it would have at the budget's end (the last
    steps at a falling rate are where a linear-decay schedule settles), then one last evaluation.  ``max_steps``
    stays the cap; the best evaluation's weights are kept either way."""

    eval_steps: int
    patience: int
    min_delta: float = 0.001

    def due(self, step: int, total_steps: int) -> bool:
        return step % self.eval_steps == 0 and step < total_steps

    def stalled(self, state: TrainState) -> bool:
        return state.stale_evals >= self.patience

    def new_end(self, state: TrainState, total_steps: int, desc: str, metric_label: str,
                log: Callable[[str], None]) -> int | None:
        """After a check: the step training now ends at (``eval_steps`` from here) when it stalled, else None."""
        if not self.stalled(state):
            return None
        end = min(total_steps, state.step + self.eval_steps)
        log(f"{desc}: held-out {metric_label} has not improved by more than {100 * self.min_delta:g} points in "
            f"{self.patience} checks of {self.eval_steps} steps: the learning rate decays to 0 over the next "
            f"{self.eval_steps} steps, then training stops (step {end} of {total_steps}), keeping the best")
        return end


# ------------------------------------------------------------------------------------------------
# the one training loop (fine-tune, DynaBERT distillation, QAT)


def _anneal(opt, sched, steps: int):
    """A schedule from ``sched``'s current learning rate linearly down to 0 over ``steps``, set on ``opt``."""
    import paddle

    annealed = paddle.optimizer.lr.PolynomialDecay(sched.get_lr(), decay_steps=max(1, steps), end_lr=0.0)
    opt.set_lr_scheduler(annealed)
    return annealed


def _train_step(step_loss: Callable, batch, opt, sched) -> float:
    """One optimizer step on ``batch``; its loss."""
    loss = step_loss(batch)
    loss.backward()
    opt.step()
    opt.clear_grad()
    sched.step()
    return float(loss)


def _record_epoch(state: TrainState, ev: Evaluation, kind, train_loss: float, eval_name: str, min_delta: float = 0.0) -> bool:
    """An evaluation's entry in ``state.history`` (an epoch's end, the step budget's last part, a plateau check); True,
    and the best moved there, when its metric beats the best so far.  Counts the evaluations that did not beat it by
    more than ``min_delta`` (``state.stale_evals``: the plateau rule's)."""
    key = eval_name.replace("-", "")  # history keys: dev_accuracy, heldout_f1, ...
    state.history.append({"epoch": state.epoch + 1, "step": state.step, "train_loss": train_loss,
                          f"{key}_{kind.metric}": ev.metric, **{f"{key}_{k}": v for k, v in ev.score.metrics.items()}})
    state.stale_evals = 0 if ev.metric > state.best_accuracy + min_delta else state.stale_evals + 1
    if ev.metric <= state.best_accuracy:
        return False
    state.best_accuracy, state.best_epoch = ev.metric, state.epoch + 1
    return True


class _Checkpoints:
    """Saves ``checkpoint`` every ``steps`` steps and every 5 minutes (``due``), and when asked (``save``)."""

    def __init__(self, checkpoint: "CheckpointDir | None", steps: int):
        self.checkpoint, self.steps, self.last = checkpoint, max(steps, 1), time.time()

    def save(self, model, opt, sched, state: TrainState, only_if_due: bool = False) -> None:
        if self.checkpoint is None or (only_if_due and state.step % self.steps and time.time() - self.last <= 300):
            return
        self.checkpoint.save(model, opt, sched, state)
        self.last = time.time()


def train_loop(model, train: FeatureSet, evaluate_on: FeatureSet, step_loss: Callable, opt, sched, *, epochs: int,
               total_steps: int, batch_size: int, seed: int, eval_batch_size: int, desc: str, loss_name: str = "train loss",
               eval_name: str = "dev", on_best: Callable[[object, Evaluation], None] | None = None, state: TrainState | None = None,
               checkpoint: "CheckpointDir | None" = None, checkpoint_steps: int = 0, plateau: Plateau | None = None,
               log: Callable[[str], None] = _log, fp32_program: bool = True) -> TrainState:
    """Train ``model`` on ``train`` with ``step_loss(batch) -> loss``, evaluating on ``evaluate_on`` after each epoch
    (and every ``plateau.eval_steps`` steps with a ``plateau``, stopping when it stalls).  Batch order is a pure
    function of (seed, epoch), so a run resumed from ``state`` skips exactly the batches it trained on.  The best
    evaluation is kept: ``on_best(model, evaluation)`` is called when the metric improves; without it the best weights are kept in
    memory and put back at the end.  ``checkpoint``: saved every ``checkpoint_steps`` steps, every 5 minutes and at
    each epoch end (resumable).  ``fp32_program``: the model's saved program is the FP32 model, so an evaluation
    may run it in a child process (``pipeline.fp32_evaluation``, which says how in the log line); False for QAT."""
    state = state or TrainState()
    best: dict = {}  # the best weights, when there is no on_best to keep them
    keep = on_best or (lambda m, ev: best.update(weights={k: v.numpy().copy() for k, v in m.state_dict().items()}))
    saver = _Checkpoints(checkpoint, checkpoint_steps)

    def evaluate(train_loss: float, where: str) -> None:
        what = f"{eval_name} eval ({desc} {where})"
        ev, how = (fp32_evaluation.evaluate(model, evaluate_on, eval_batch_size, what, log) if fp32_program
                   else (evaluate_dygraph(model, evaluate_on, eval_batch_size, what), ""))
        improved = _record_epoch(state, ev, train.kind, train_loss, eval_name, plateau.min_delta if plateau else 0.0)
        log(f"{desc} {where}: step {state.step}, {loss_name} {train_loss:.4f}, {eval_name} {train.kind.describe(ev.score)}"
            + ("  (best so far, kept)" if improved else "") + (f" [{how}]" if how else ""))
        if improved:
            keep(model, ev)
        model.train()

    model.train()
    bar = progress(total=total_steps, initial=state.step, desc=desc, unit="step")
    try:
        if state.plateau_end:  # resumed after the plateau rule moved the end
            total_steps, sched = state.plateau_end, _anneal(opt, sched, state.plateau_end - state.step)
        while state.epoch < epochs and state.step < total_steps:
            order = train_batch_order(train, batch_size, seed, state.epoch)
            running, n = 0.0, 0
            for idx in order[state.step_in_epoch :]:
                if state.step >= total_steps:
                    break
                running += _train_step(step_loss, train.batch(idx), opt, sched)
                state.step, state.step_in_epoch, n = state.step + 1, state.step_in_epoch + 1, n + 1
                bar.update(1)
                if n % 20 == 0:
                    bar.set_postfix(loss=f"{running / n:.3f}", lr=f"{sched.get_lr():.2e}")
                if plateau is not None and not state.plateau_end and plateau.due(state.step, total_steps) \
                        and state.step_in_epoch < len(order):
                    evaluate(running / max(n, 1), f"step {state.step}/{total_steps}")
                    end = plateau.new_end(state, total_steps, desc, train.kind.metric_label, log)
                    if end is not None:
                        state.plateau_end = total_steps = bar.total = end
                        sched = _anneal(opt, sched, total_steps - state.step)
                saver.save(model, opt, sched, state, only_if_due=True)  # after a check: a resumed run has its result
            evaluate(running / max(n, 1), f"epoch {state.epoch + 1}/{epochs}")
            epoch_done = state.end_epoch(len(order))
            saver.save(model, opt, sched, state)
            if not epoch_done:
                break  # the step budget (or the plateau rule's end) ended it mid-epoch
    finally:
        bar.close()
    if "weights" in best:
        model.set_state_dict(best["weights"])
    model.eval()
    return state


def finetune(
    model,
    train: FeatureSet,
    dev: FeatureSet,
    cfg: FinetuneConfig,
    work_dir: Path,
    save_best: Callable[[object, Evaluation], None],
    log: Callable[[str], None] = _log,
) -> TrainResult:
    import paddle

    train = _subset(train, cfg.max_train_samples, cfg.seed)
    steps_per_epoch = (len(train) + cfg.batch_size - 1) // cfg.batch_size
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps > 0:  # fine-tune: max_steps only shortens the configured epochs
        total_steps = min(total_steps, cfg.max_steps)
    opt, sched = make_optimizer(model, cfg.learning_rate, total_steps, cfg.warmup_ratio, cfg.weight_decay)
    ckpt = CheckpointDir(Path(work_dir))
    state = ckpt.load(model, opt, sched, log) or TrainState()
    resumed_from = state.step
    if resumed_from:
        log(f"resuming fine-tune from step {state.step}/{total_steps} (epoch {state.epoch + 1}, best dev acc {state.best_accuracy:.4f})")
    kind = train.kind
    estimate = step_estimate("fine-tune", train, cfg.batch_size, cfg.seed, StepPlan(cfg.epochs, total_steps), resumed_from, log)

    def step_loss(b):
        estimate.step()  # each training step computes its loss once, first
        logits = model(paddle.to_tensor(b.input_ids), token_type_ids=paddle.to_tensor(b.token_type_ids))
        return kind.loss(logits, b, train.pad_id)

    state = train_loop(model, train, dev, step_loss, opt, sched, epochs=cfg.epochs, total_steps=total_steps,
                       batch_size=cfg.batch_size, seed=cfg.seed, eval_batch_size=cfg.eval_batch_size, desc="fine-tune",
                       on_best=save_best, state=state, checkpoint=ckpt, checkpoint_steps=cfg.checkpoint_steps, log=log)
    return TrainResult(state.best_accuracy, state.best_epoch, state.step, state.history, resumed_from)


# Paddle keys an optimizer's state by its parameters' generated names ("linear_12.w_0_moment1_0"), which depend on how
# many layers the process made before: a distillation resumed after a different path through compress had other names,
# and AdamW failed at its first step.  The checkpoint keys the state by the parameter's position in the model instead.
_POSITION = re.compile(r"@param(\d+)_(.*)", re.S)


def _by_position(state: dict, model) -> dict:
    names = _param_names(model)
    longest_first = sorted(range(len(names)), key=lambda i: -len(names[i]))  # "w_0" is a prefix of "w_0_deepcopy_3"
    out = {}
    for key, value in state.items():
        i = next((i for i in longest_first if isinstance(key, str) and key.startswith(names[i] + "_")), None)
        out[key if i is None else f"@param{i}_{key[len(names[i]) + 1:]}"] = value
    return out


def _by_name(state: dict, model) -> dict:
    names = _param_names(model)
    out = {}
    for key, value in state.items():
        m = _POSITION.fullmatch(key) if isinstance(key, str) else None
        out[key if m is None or int(m[1]) >= len(names) else f"{names[int(m[1])]}_{m[2]}"] = value
    return out


def _param_names(model) -> list[str]:
    return [p.name for p in model.parameters()]


def _mismatch(model, weights: dict, opt_state: dict) -> str | None:
    """Why a checkpoint's model weights and (name-keyed) optimizer state cannot be ``model``'s, or None.  Paddle's
    ``set_state_dict`` only warns about a missing or misshapen weight and keeps the rest, and AdamW finds a
    misshapen moment only at its next step."""
    own = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    saved = {key: tuple(np.shape(value)) for key, value in weights.items()}
    if own.keys() != saved.keys():
        missing, extra = sorted(own.keys() - saved.keys()), sorted(saved.keys() - own.keys())
        return (f"made for another model ({len(missing)} of its weights missing, e.g. {missing[:1]}; "
                f"{len(extra)} unknown, e.g. {extra[:1]})")
    shapes = [key for key in own if own[key] != saved[key]]
    if shapes:
        return f"made for another model ({shapes[0]} is {list(saved[shapes[0]])}, the model's {list(own[shapes[0]])})"
    params = {p.name: tuple(p.shape) for p in model.parameters()}
    for key, value in opt_state.items():
        if isinstance(key, str) and _POSITION.fullmatch(key):
            return f"optimizer state for parameter {key} the model does not have"
        moment = re.fullmatch(r"(.+)_moment\d+_\d+", key) if isinstance(key, str) else None
        if moment and moment[1] in params and tuple(np.shape(value)) != params[moment[1]]:
            return f"optimizer state {key} is {list(np.shape(value))}, its parameter {list(params[moment[1]])}"
    return None


class CheckpointDir:
    """One resumable checkpoint, replaced atomically (a directory rename)."""

    def __init__(self, root: Path):
        self.root = root
        self.current = root / "checkpoint"

    def save(self, model, opt, sched, state: TrainState) -> None:
        import paddle

        self.root.mkdir(parents=True, exist_ok=True)
        self._recover()  # before the clean-up below, which would remove what a kill between the renames left
        # One run holds the runs dir (run_lock): any other partial checkpoint is an earlier try's, killed or out of
        # space; left there, ~25 MB each, they would keep the disk full for every later try.
        for stale in [*self.root.glob(".checkpoint-*"), *self.root.glob(".old-*")]:
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.root / f".checkpoint-{os.getpid()}"
        tmp.mkdir()
        try:
            paddle.save(model.state_dict(), str(tmp / "model.pdparams"))
            paddle.save(_by_position(opt.state_dict(), model), str(tmp / "optimizer.pdopt"))
            paddle.save(sched.state_dict(), str(tmp / "scheduler.pdparams"))
            (tmp / "state.json").write_text(json.dumps(asdict(state)), encoding="utf-8")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        old = self.root / f".old-{os.getpid()}"
        if self.current.exists():
            self.current.rename(old)
        tmp.rename(self.current)
        shutil.rmtree(old, ignore_errors=True)

    def _recover(self) -> None:
        """A kill between ``save``'s two renames leaves no ``checkpoint``: the new one complete under ``.checkpoint-PID``
        (its files are all written before the first rename) and the one it replaces under ``.old-PID``.  Put the new
        one in place (the old one, when the new one has no state.json: a first save killed while writing it)."""
        if self.current.exists() or not self.root.is_dir():
            return
        for pattern in (".checkpoint-*", ".old-*"):
            for found in sorted(self.root.glob(pattern)):
                if (found / "state.json").is_file():
                    found.rename(self.current)
                    return

    def state(self) -> TrainState | None:
        """The checkpoint's training state alone (None: none, or unreadable), nothing applied."""
        self._recover()
        try:
            return self._read_state()
        except (OSError, ValueError, TypeError):
            return None

    def _read_state(self) -> TrainState:
        return TrainState(**json.loads((self.current / "state.json").read_text(encoding="utf-8")))

    def load(self, model, opt, sched, log: Callable[[str], None] = _log) -> TrainState | None:
        """The checkpoint's state, its weights, optimizer and schedule set on ``model``, ``opt`` and ``sched``; None,
        touching none of them, when there is none or it cannot be this run's (unreadable, or made for another
        model: said with ``log``).  All three files are read and checked before any is applied: a half-applied
        checkpoint would train "from the start" from its weights."""
        from pipeline.safe_weights import UnsafeWeights, load

        self._recover()
        if not (self.current / "state.json").is_file():
            return None
        try:
            state = self._read_state()
            # Our own files, but a runs dir can be handed over: read through the allow-list, not paddle.load (a
            # pickle is code).  set_state_dict takes the numpy arrays as it takes paddle.load's tensors.
            weights = load(self.current / "model.pdparams")
            opt_state = _by_name(load(self.current / "optimizer.pdopt"), model)
            sched_state = load(self.current / "scheduler.pdparams")
            mismatch = _mismatch(model, weights, opt_state)
            why = mismatch and f"checkpoint {self.current}: {mismatch}"
        except UnsafeWeights as exc:  # not an incompatible run: a file that would run code; say so, delete nothing
            raise UnsafeWeights(f"{exc}; remove {self.current} to train from the start") from None
        except ModelError as exc:  # a weights file that cannot be read (it names itself)
            why = str(exc)
        except Exception as exc:  # a checkpoint from an incompatible run: start over rather than crash
            why = f"checkpoint {self.current}: unreadable ({type(exc).__name__}: {exc})"
        if why:
            log(f"{why}; training from the start")
            return None
        model.set_state_dict(weights)
        opt.set_state_dict(opt_state)
        sched.set_state_dict(sched_state)
        return state
