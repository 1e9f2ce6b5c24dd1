"""DynaBERT width and depth pruning that works on Paddle 2.6, exporting a physically smaller ERNIE.

The steps are DynaBERT's (and PaddleNLP ``Trainer.compress()``'s):

1. Importance on held-out training rows (upstream uses dev; here dev only scores candidates), from
   gradients of the task loss: per head, |d loss / d head_mask|; per FFN
   neuron, |sum(w1 * grad w1) + b1 * grad b1| + |sum(w2 * grad w2)| (paddlenlp's
   ``compute_neuron_head_importance``).  Upstream gets the head-mask gradient by monkey-patching paddle's
   attention/encoder forwards (importing ``paddleslim.nas.ofa.utils.nlp_utils`` even patches them for the
   whole process).  Here a forward pre-hook on each ``out_proj`` multiplies every head's context by its
   mask entry instead: the same gradient (attention output is linear in the per-head weights), no patching.
2. Reorder heads and neurons by importance with paddlenlp's ``reorder_head``/``reorder_neuron`` (they work
   on plain paddle layers).  A permutation: the model computes exactly the same function.
3. Width-adaptive training with distillation from the unpruned teacher: soft cross-entropy on logits plus
   0.1 x MSE of the embedding output and of every layer's output (upstream's ``lambda_distill``).
   Upstream trains this through paddleslim OFA's super-layers, whose ``SuperLayerNorm`` is broken on
   Paddle 2.6 (``_C_ops.layer_norm`` returns one tensor; OFA unpacks three).  OFA at width ``w`` slices the
   first heads/neurons of every layer, and only that slice gets gradients; so for one width per call
   (the compress stage prunes each width of ``--width_mult_list`` separately) it is the same thing to
   slice first and train the physically smaller student directly.  That is what this module does:
   no super-layers at all.  Depth (DynaBERT's ``depth_mult``; PaddleNLP's compress has width only): the student
   keeps layers ``floor(i / depth_mult)`` (``kept_layers``) and each kept layer's output is matched to the output of
   the teacher layer it was copied from.
4. Export: the student is already the smaller network; it is saved as a PaddleNLP ERNIE directory whose
   config says e.g. 9 heads and intermediate 1152 (see ``pipeline.ernie_models`` for why the
   config also carries ``attention_head_size``), with the tokenizer files and labels.json copied.

Head counts are ``floor(heads * width)`` (at least 1; 2/3 of 12 is 8, not 7), FFN sizes ``round``.
"""

from __future__ import annotations

import copy
import math
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np

from pipeline.batching import eval_batch_order, iter_batches
from pipeline.ernie_models import narrow_attention, narrow_ffn, prune_config
from pipeline.modeling import load_classifier
from pipeline.training import CheckpointDir, Plateau, make_optimizer, plan_steps, step_estimate, train_loop
from pipeline.kinds.base import FeatureSet
from pipeline.errors import ConfigError, ModelError
from pipeline.modeling import LABELS_FILE, VOCAB_FILE, inspect_model
from pipeline.progress import progress

COPIED_FILES = (VOCAB_FILE, "tokenizer_config.json", "special_tokens_map.json", LABELS_FILE)
LAMBDA_DISTILL = 0.1  # weight of the hidden-state MSE, as upstream's DistillConfig(lambda_distill=0.1)
EVAL_BATCH = 64


@dataclass(frozen=True)
class Importance:
    heads: np.ndarray  # [num_layers, num_heads]
    neurons: list[np.ndarray]  # per layer, [intermediate_size]


def pruned_sizes(num_heads: int, intermediate_size: int, width_mult: float) -> tuple[int, int]:
    """Heads and FFN neurons kept per layer at ``width_mult``."""
    check_width(width_mult)
    heads = max(1, math.floor(num_heads * width_mult + 1e-6))
    neurons = max(1, int(round(intermediate_size * width_mult)))
    return heads, neurons


def check_width(width_mult: float) -> None:
    if not 0.0 < width_mult <= 1.0:
        raise ConfigError(f"width_mult_list: {width_mult} is outside (0, 1]")


def compute_importance(model, examples: FeatureSet, batch_size: int) -> Importance:
    """Gradient-based head and FFN-neuron importance over ``examples`` (model left unchanged, in eval mode)."""
    import paddle

    layers = list(model.ernie.encoder.layers)
    num_heads, head_dim = layers[0].self_attn.num_heads, layers[0].self_attn.head_dim
    head_mask = paddle.ones([len(layers), num_heads], dtype="float32")
    head_mask.stop_gradient = False

    def mask_hook(index: int):
        def hook(_layer, inputs):
            # out_proj's input is the heads' contexts side by side: scale head h's block by mask[h].
            scale = paddle.repeat_interleave(head_mask[index], head_dim)
            return (inputs[0] * scale,)

        return hook

    handles = [layer.self_attn.out_proj.register_forward_pre_hook(mask_hook(i)) for i, layer in enumerate(layers)]
    heads = np.zeros([len(layers), num_heads], dtype=np.float64)
    neurons = [np.zeros([layer.linear1.weight.shape[1]], dtype=np.float64) for layer in layers]
    model.eval()  # deterministic: no dropout
    order = eval_batch_order(examples, batch_size)
    try:
        for batch in progress(iter_batches(examples, order), total=len(order), desc="importance", unit="batch"):
            logits = model(paddle.to_tensor(batch.input_ids), token_type_ids=paddle.to_tensor(batch.token_type_ids))
            loss = examples.kind.loss(logits, batch, examples.pad_id)
            loss.backward()
            heads += np.abs(head_mask.grad.numpy())
            for layer, acc in zip(layers, neurons):
                w1, b1, w2 = layer.linear1.weight, layer.linear1.bias, layer.linear2.weight
                acc += np.abs((w1.numpy() * w1.grad.numpy()).sum(0) + b1.numpy() * b1.grad.numpy())
                acc += np.abs((w2.numpy() * w2.grad.numpy()).sum(1))
            model.clear_gradients()
            head_mask.clear_gradient()
    finally:
        for h in handles:
            h.remove()
    return Importance(heads.astype(np.float32), [n.astype(np.float32) for n in neurons])


def importance_once(heldout: FeatureSet) -> Callable[[object], Importance]:
    """``compute_importance`` on ``heldout``, as ``prune`` takes it: computed on the first call and kept.  It is the
    unpruned model's, whatever the architecture, so the widths and depths of one compress run share it (a second
    width, the fallback when a faster one misses the budget, does not pay 37-63 s for it again; Zen 4)."""
    kept: list[Importance] = []

    def importance(model) -> Importance:
        if not kept:
            kept.append(compute_importance(model, heldout, batch_size=EVAL_BATCH))
        return kept[0]

    return importance


def reorder_by_importance(model, importance: Importance) -> None:
    """Sort every layer's heads and FFN neurons by decreasing importance (same function, new order)."""
    import paddle
    from paddlenlp.transformers.ofa_utils import reorder_head, reorder_neuron

    for i, layer in enumerate(model.ernie.encoder.layers):
        # stable sort: ties (e.g. all-zero importance) keep their original order
        head_idx = paddle.to_tensor(np.argsort(-importance.heads[i], kind="stable").astype(np.int64))
        reorder_head(layer.self_attn, head_idx)
        neuron_idx = paddle.to_tensor(np.argsort(-importance.neurons[i], kind="stable").astype(np.int64))
        reorder_neuron(layer.linear1, neuron_idx, dim=1)
        reorder_neuron(layer.linear2, neuron_idx, dim=0)


def kept_layers(num_layers: int, depth_mult: float) -> list[int]:
    """The encoder layers DynaBERT keeps at ``depth_mult``: ``floor(i / depth_mult)`` for the first
    ``round(depth_mult * num_layers)`` i (6 layers at 2/3 keep 0, 1, 3, 4; at 1/2 keep 0, 2, 4)."""
    if not 0.0 < depth_mult <= 1.0:
        raise ConfigError(f"depth_mult_list: {depth_mult} is outside (0, 1]")
    depth = max(1, int(round(depth_mult * num_layers + 1e-6)))
    return [min(num_layers - 1, math.floor(i / depth_mult + 1e-6)) for i in range(depth)]


def drop_layers(model, keep: list[int]) -> None:
    """Keep only the encoder layers ``keep`` of ``model`` (in place; the config says the new depth)."""
    import paddle

    encoder = model.ernie.encoder
    encoder.layers = paddle.nn.LayerList([encoder.layers[i] for i in keep])
    encoder.num_layers = len(keep)
    model.config.num_hidden_layers = len(keep)
    model.ernie.config = model.config


def shrink(model, arch) -> tuple[object, list[int]]:
    """A physically smaller copy of ``model`` of architecture ``arch`` (``architecture.Architecture``): the first
    heads and neurons of every layer (``narrow_model``), then the layers DynaBERT keeps at its depth; and those
    layers' indices in ``model`` (each student layer is distilled towards the teacher layer it came from)."""
    cfg = model.config
    heads, neurons = pruned_sizes(cfg.num_attention_heads, cfg.intermediate_size, arch.width)
    student = narrow_model(model, heads, neurons)
    keep = kept_layers(cfg.num_hidden_layers, arch.depth)
    if len(keep) < cfg.num_hidden_layers:
        drop_layers(student, keep)
    return student, keep


def narrow_model(model, num_heads: int, intermediate_size: int):
    """A physically smaller copy of ``model`` keeping the first heads/neurons of every layer."""
    student = copy.deepcopy(model)
    for layer in student.ernie.encoder.layers:
        if num_heads < layer.self_attn.num_heads:
            narrow_attention(layer.self_attn, num_heads)
        if intermediate_size < layer.linear1.weight.shape[1]:
            narrow_ffn(layer, intermediate_size)
    config = prune_config(model.config, num_heads, intermediate_size)
    student.config = config
    student.ernie.config = config
    return student


@dataclass(frozen=True)
class Schedule:
    """How long and how fast a distillation trains (compress.num_train_epochs, learning_rate,
    per_device_train_batch_size, max_steps, seed; ``plateau``: the held-out stopping rule, None for the whole budget)."""

    epochs: int
    learning_rate: float
    batch_size: int
    max_steps: int
    seed: int
    plateau: Plateau | None = None


def distill(
    student,
    teacher,
    train: FeatureSet,
    heldout: FeatureSet,
    schedule: Schedule,
    *,
    log: Callable[[str], None] = print,
    desc: str = "dynabert",
    teacher_layers: list[int] | None = None,
    resume: Resume | None = None,
) -> float:
    """Train ``student`` to match ``teacher``; leaves the weights that score best on ``heldout`` in ``student``.
    ``schedule.plateau``: checked on ``heldout`` every ``plateau.eval_steps`` steps, distillation stops when it stalls.
    ``teacher_layers``: the teacher layer each student layer was taken from (a shallower student); its output is
    matched to that layer's.  ``resume``: where the run's checkpoint and best weights are kept, so that an interrupted
    distillation goes on from its last checkpoint instead of from the start."""
    import paddle
    import paddle.nn.functional as F

    plateau = schedule.plateau
    plan = plan_steps(len(train), schedule.batch_size, schedule.epochs, schedule.max_steps)
    opt, sched = make_optimizer(student, schedule.learning_rate, plan.total_steps)
    state = resume.load(student, opt, sched, log) if resume is not None else None
    if state is not None:
        log(f"{desc}: resuming distillation from step {state.step}/{plan.total_steps} "
            f"(best held-out {heldout.kind.metric_label} {state.best_accuracy:.4f} so far)")
    teacher.eval()
    cap = (f"it stops once {plateau.patience} held-out checks every {plateau.eval_steps} steps gain no more than "
           f"{100 * plateau.min_delta:g} points"
           if plateau is not None else "")
    estimate = step_estimate(f"{desc}: distillation", train, schedule.batch_size, schedule.seed, plan,
                             state.step if state else 0, log, cap)

    def step_loss(b):
        estimate.step()  # each training step computes its loss once, first
        ids, types = paddle.to_tensor(b.input_ids), paddle.to_tensor(b.token_type_ids)
        with paddle.no_grad():
            t_out = teacher(ids, token_type_ids=types, output_hidden_states=True, return_dict=True)
        s_out = student(ids, token_type_ids=types, output_hidden_states=True, return_dict=True)
        t_states = t_out.hidden_states if teacher_layers is None else \
            [t_out.hidden_states[0]] + [t_out.hidden_states[i + 1] for i in teacher_layers]
        rep = sum(F.mse_loss(s, t) for s, t in zip(s_out.hidden_states, t_states))
        return train.kind.distill_loss(s_out.logits, t_out.logits, ids, train.pad_id) + LAMBDA_DISTILL * rep

    state = train_loop(student, train, heldout, step_loss, opt, sched, epochs=plan.epochs, total_steps=plan.total_steps,
                       batch_size=schedule.batch_size, seed=schedule.seed, eval_batch_size=EVAL_BATCH, desc=desc, loss_name="distill loss",
                       eval_name="held-out", plateau=plateau, log=log, state=state,
                       **(resume.loop_args() if resume is not None else {}))
    if resume is not None:
        resume.restore_best(student)
    return state.best_accuracy


class Resume:
    """An interrupted distillation's way back (``root``): the training checkpoint (``training.CheckpointDir``: student,
    AdamW, schedule, step), saved every ``steps`` steps and every 5 minutes, and the best held-out weights so far,
    which the loop would otherwise hold only in memory.  The caller keys ``root`` by what decides the distillation
    (compress: the run cache's key), so a checkpoint is only ever resumed by the same settings."""

    BEST = "best.pdparams"

    def __init__(self, root: Path, steps: int):
        self.root, self.steps = Path(root), steps
        self.checkpoint = CheckpointDir(self.root)

    def load(self, student, opt, sched, log: Callable[[str], None]):
        saved = self.checkpoint.state()
        if saved is not None and saved.history and not (self.root / self.BEST).is_file():
            log(f"checkpoint {self.checkpoint.current}: the best held-out weights ({self.BEST}) are gone; "
                "training from the start")
            return None
        return self.checkpoint.load(student, opt, sched, log)

    def loop_args(self) -> dict:
        return {"checkpoint": self.checkpoint, "checkpoint_steps": self.steps, "on_best": self._save_best}

    def _save_best(self, model, ev=None) -> None:
        import paddle

        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{self.BEST}.tmp"
        paddle.save(model.state_dict(), str(tmp))
        tmp.replace(self.root / self.BEST)

    def restore_best(self, student) -> None:
        from pipeline.safe_weights import load

        student.set_state_dict(load(self.root / self.BEST))
        student.eval()


def prune(
    model_dir: Path,
    arch,
    train: FeatureSet,
    heldout: FeatureSet,
    schedule: Schedule,
    *,
    out_dir: Path,
    log: Callable[[str], None] = print,
    phase: Callable[[str], ContextManager] | None = None,
    resume: Resume | None = None,
    importance: Callable[[object], Importance] | None = None,
) -> Path:
    """Prune ``model_dir`` to architecture ``arch`` (``architecture.Architecture``: its width of the heads/FFN neurons,
    its depth of the layers), distil, save to ``out_dir``; returns it.  ``phase(name)``: charged with ``importance``
    (with the reordering and narrowing) and ``distillation``.  ``resume``: see ``distill``.  ``importance(model)``: the
    unpruned model's head/neuron importance (default: computed here on ``heldout``); compress passes one
    ``importance_once`` for every width and depth it distils."""
    import paddle

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    info = _check_inputs(model_dir, arch, train, heldout)
    paddle.seed(schedule.seed)
    np.random.seed(schedule.seed)
    teacher = load_classifier(model_dir, info.head_classes)
    cfg = teacher.config
    heads, neurons = pruned_sizes(cfg.num_attention_heads, cfg.intermediate_size, arch.width)
    keep = kept_layers(cfg.num_hidden_layers, arch.depth)
    log(
        f"dynabert {arch.name}: {cfg.num_attention_heads} -> {heads} heads, intermediate {cfg.intermediate_size} -> "
        f"{neurons}, {cfg.num_hidden_layers} -> {len(keep)} layers"
        + (f" (keeping {', '.join(map(str, keep))})" if len(keep) < cfg.num_hidden_layers else "")
    )

    phase = phase or (lambda name: nullcontext())
    with phase("importance"):
        model = load_classifier(model_dir, info.head_classes)
        reorder_by_importance(model, (importance or importance_once(heldout))(model))
        student, keep = shrink(model, arch)
        del model
    paddle.seed(schedule.seed)
    with phase("distillation"):
        best = distill(student, teacher, train, heldout, schedule, log=log, desc=f"dynabert {arch.name}",
                       teacher_layers=keep, resume=resume)
    log(f"dynabert {arch.name}: best held-out {heldout.kind.metric_label} {best:.4f}")
    save_pruned(student, model_dir, out_dir)
    return out_dir


def _check_inputs(model_dir: Path, arch, train: FeatureSet, heldout: FeatureSet):
    """What ``prune`` refuses before any work (one line naming the setting); the model's ``ModelInfo``."""
    check_width(arch.width)
    if not heldout:
        raise ConfigError("dynabert: no held-out training rows (head/neuron importance needs labelled data)")
    if not train:
        raise ConfigError("dynabert: the training set is empty")
    info = inspect_model(model_dir)
    if info.head_classes is None:
        raise ModelError(f"model dir {model_dir}: has no classification head to prune")
    return info


def save_pruned(model, source_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for name in COPIED_FILES:
        src = Path(source_dir) / name
        if src.is_file():
            shutil.copyfile(src, out_dir / name)


__all__ = [
    "Importance",
    "Schedule",
    "compute_importance",
    "distill",
    "narrow_model",
    "drop_layers",
    "kept_layers",
    "prune",
    "shrink",
    "pruned_sizes",
    "reorder_by_importance",
]
