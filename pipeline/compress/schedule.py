"""Step budget and optimizer for the compress stage's training loops (DynaBERT distillation, QAT).

Upstream semantics (PaddleNLP ``TrainingArguments``): ``max_steps > 0`` sets the number of optimizer
steps and overrides ``num_train_epochs`` (epochs become ``ceil(max_steps / steps_per_epoch)``).
The optimizer is the fine-tune recipe: AdamW, linear warmup then linear decay to 0, no weight decay on
biases and LayerNorm weights, global-norm clipping at 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StepPlan:
    epochs: int
    total_steps: int


def plan_steps(num_examples: int, batch_size: int, epochs: int, max_steps: int) -> StepPlan:
    per_epoch = max(1, math.ceil(num_examples / batch_size))
    if max_steps > 0:
        return StepPlan(math.ceil(max_steps / per_epoch), max_steps)
    epochs = max(1, epochs)
    return StepPlan(epochs, per_epoch * epochs)


def make_optimizer(model, learning_rate: float, total_steps: int, warmup_ratio: float = 0.0, weight_decay: float = 0.0):
    """(optimizer, scheduler); call ``scheduler.step()`` after every optimizer step."""
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
