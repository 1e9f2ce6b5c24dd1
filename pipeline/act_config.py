"""PaddleSlim auto-compression (ACT) YAML -> this pipeline's task-config overrides (``--act-config PATH``).

Users of PaddleSlim's ``AutoCompression`` examples (``example/auto_compression/nlp``, its UIE one) have a YAML
with ``Global``, ``Distillation``, ``QuantAware`` (older: ``Quantization``), ``QuantPost``, ``Prune`` /
``TransformerPrune``, ``HyperParameterOptimization`` and ``TrainConfig`` sections (key names as in
``paddleslim/auto_compression/strategy_config.py`` and the examples' ``run.py``).  :func:`translate` turns one
into the dotted overrides ``--set`` takes; the CLI applies them first, so ``--set`` and the flags win.  Every key
is mapped onto the nearest key here or refused by name with the reason: a setting this pipeline would not
honour is never dropped silently.

How sections become ``compress.strategy``:

* ``Prune`` (``prune_algo: transformer_pruner``) or ``TransformerPrune``: ``dynabert``.  Both remove attention
  heads and FFN neurons by importance and distill from the unpruned model, as DynaBERT does here; width is
  ``1 - pruned_ratio``.  ``Distillation`` and ``TrainConfig``'s training keys apply to that distillation.
* ``QuantAware`` / ``Quantization`` / ``QuantPost`` / ``HyperParameterOptimization``: ``ptq``, not ``qat``.
  ACT's quant-aware training distills from the FP32 model, but ``pipeline.compress.qat`` trains on task labels
  only (no teacher), needs ``compress.candidate_format: paddle`` (a Paddle int8 program), and only takes models with a
  ``classifier`` head.  And the CPU bundle's ``onnx/int8.onnx`` is built by export from FP32 weights with the
  INT8 recipe search either way, so QAT-trained weights would not reach it.  ``ptq`` in ONNX Runtime is that
  search, judged on held-out training rows within ``gates.max_accuracy_drop``: ACT's aim (an INT8 model within
  the metric budget) in the runtime that ships, for every task kind.  QAT-only settings (PACT, moving-average
  statistics) are therefore refused, and so are training keys when no pruning is asked for (nothing trains).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import yaml_input

from pipeline.errors import ConfigError
from pipeline.modeling import CONFIG_FILES, VOCAB_FILE, WEIGHTS_FILE

QUANT_SECTIONS = ("QuantAware", "Quantization", "QuantPost")
PRUNE_SECTIONS = ("Prune", "TransformerPrune")
HPO = "HyperParameterOptimization"
REFUSED_SECTIONS = {
    "UnstructurePrune": "unstructured pruning is not supported here (use Prune with prune_algo: transformer_pruner, "
                        "or TransformerPrune: whole heads and FFN neurons go, so the model gets smaller and faster; "
                        "zeroed weights do not speed up dense MatMuls)",
    "ASPPrune": "2:4 sparsity is not supported here (it needs sparse tensor cores; use TransformerPrune)",
    "ChannelPrune": "channel pruning is for convolutions (use TransformerPrune: heads and FFN neurons of ERNIE)",
    "MultiTeacherDistillation": "one teacher only here: the model being compressed (use Distillation)",
}
READ = ("Global", "Distillation", *PRUNE_SECTIONS, *QUANT_SECTIONS, HPO, "TrainConfig")

PADDLENLP_DIR = (f"{WEIGHTS_FILE} + {CONFIG_FILES[-1]} (or {' or '.join(CONFIG_FILES[:-1])}) + {VOCAB_FILE}, as "
                 "PaddleNLP's save_pretrained writes")
# ACT's default quantize_op_types; conv ops are absent from ERNIE, so listing them asks for nothing more
ACT_OP_TYPES = ("conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2")
QUANTIZED_OP = "matmul_v2"  # every ERNIE Linear in a Paddle 2.x program: the MatMuls INT8 quantizes here
TRAINS_HERE = "DynaBERT's distillation (pipeline.compress.dynabert)"
POST_TRAINING = "INT8 here is post-training (the ONNX Runtime recipe search, ptq)"
NOT_QAT = "only quant-aware training uses it; " + POST_TRAINING
SEARCH = ("the INT8 search here tries SmoothQuant strengths (quantization.int8_smooth_alphas) and FP32 MatMuls "
          "(quantization.int8_max_fp32_matmuls), not Paddle's PTQ algorithms")
FIXED_DISTILL = (f"{TRAINS_HERE} has a fixed loss: the task loss on the teacher's logits + 0.1 x MSE of every "
                 "layer's output; nodes of a static program do not apply")
# Keys ACT knows that have no counterpart here, with why (per section; anything else is an unknown key).
NOT_HERE = {
    "Distillation": dict.fromkeys(("node", "distill_node_pair", "distill_loss", "distill_lambda", "merge_feed"),
                                  FIXED_DISTILL),
    "Prune": {"prune_params_name": "every layer's heads and FFN neurons are pruned here (DynaBERT width)",
              "criterion": "importance is DynaBERT's gradient-based head and neuron importance here"},
    "Quant": {"moving_rate": NOT_QAT, "window_size": NOT_QAT, "algo": SEARCH, "hist_percent": SEARCH,
              **dict.fromkeys(("lr", "epochs", "regions", "region_weights_names", "recon_level",
                               "simulate_activation_quant"), "reconstruction (AdaRound-style) PTQ is not done here"),
              "skip_tensor_list": "FP32 MatMuls are chosen by the INT8 search here (quantization.int8_max_fp32_matmuls)"},
    HPO: dict.fromkeys(("ptq_algo", "bias_correct", "weight_quantize_type", "hist_percent", "batch_num",
                        "max_quant_count"), SEARCH),
    "TrainConfig": {
        "eval_iter": "training here evaluates on held-out rows after each epoch and keeps the best epoch",
        "logging_iter": "progress is logged by the pipeline's own progress bar",
        **dict.fromkeys(("amp_config", "recompute_config", "sharding_config", "use_fleet"),
                        "mixed-precision and distributed training are not supported here"),
        "sparse_model": REFUSED_SECTIONS["UnstructurePrune"],
    },
    "optimizer_builder": {"regularizer": "AdamW's weight decay is the only regularizer here",
                          "grad_clip": "gradients are clipped by global norm 1.0 here (fixed)",
                          "apply_decay_param_fun": "biases and LayerNorm weights are never decayed here (fixed)"},
}


class _Section:
    """One mapping of the ACT file; keys are taken one by one, and whatever is left at the end is refused."""

    def __init__(self, where: str, name: str, raw: Any):
        if raw is None:
            raw = {}  # `Distillation:` with nothing under it: the section with its defaults, as ACT reads it
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: {name}: expected a mapping of keys, got {yaml_input.short(raw)}")
        self.where, self.name, self.keys, self.read = where, name, dict(raw), []

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.where}: {self.name}.{key}: {reason}")

    def take(self, key: str) -> Any:
        self.read.append(key)
        return self.keys.pop(key, None)  # `key: null` is the same as leaving it out

    def only(self, key: str, allowed: tuple, reason: str) -> Any:
        value = self.take(key)
        if value is not None and value not in allowed:
            raise self.error(key, f"{yaml_input.short(value)} is not supported: {reason}")
        return value

    def number(self, key: str, *, integer: bool = False, minimum: float | None = None,
               above: float | None = None, maximum: float | None = None) -> Any:
        value = self.take(key)
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
            raise self.error(key, f"expected {'an integer' if integer else 'a number'}, got {yaml_input.short(value)}")
        if minimum is not None and not value >= minimum:  # `not >=`: NaN fails too
            raise self.error(key, f"must be >= {minimum}, got {yaml_input.short(value)}")
        if above is not None and not value > above:
            raise self.error(key, f"must be > {above}, got {yaml_input.short(value)}")
        if maximum is not None and not value <= maximum:
            raise self.error(key, f"must be <= {maximum}, got {yaml_input.short(value)}")
        return int(value) if integer else value

    def finish(self, not_here: dict[str, str] | None = None) -> None:
        for key in self.keys:
            known = ", ".join(self.read) or "none"
            raise self.error(key, (not_here or {}).get(key) or f"unknown key (read here: {known})")


def translate(path: str | Path, task: str | None = None) -> dict[str, object]:
    """Dotted overrides (``{"compress.strategy": "dynabert+ptq", ...}``) for the ACT YAML at ``path``.

    ``task``: the task name or task YAML it will apply to; ``Global.task_name`` must then name the same task."""
    return _Translation(Path(path), task).run()


class _Translation:
    def __init__(self, path: Path, task: str | None):
        self.path, self.where, self.task = path, path.name, _task_name(task)
        self.base = path.resolve().parent  # relative paths in the file are relative to it
        self.out: dict[str, object] = {}
        self.training: list[str] = []  # keys that only mean something when a model is trained (pruning)

    def run(self) -> dict[str, object]:
        if not self.path.is_file():
            raise ConfigError(f"ACT config not found: {self.path}")
        raw = yaml_input.load_file(self.path, self.where)
        if not isinstance(raw, dict) or not raw:
            raise ConfigError(f"{self.where}: expected a mapping of ACT sections ({', '.join(READ)})")
        for name in raw:
            if name in REFUSED_SECTIONS:
                raise ConfigError(f"{self.where}: {name}: {REFUSED_SECTIONS[name]}")
            if name not in READ:
                raise ConfigError(f"{self.where}: {name}: unknown section (read here: {', '.join(READ)})")
        sec = {name: _Section(self.where, name, value) for name, value in raw.items()}
        for group in (PRUNE_SECTIONS, QUANT_SECTIONS):
            given = [n for n in group if n in sec]
            if len(given) > 1:
                raise ConfigError(f"{self.where}: {given[1]}: give one of {', '.join(group)}, not {' and '.join(given)}")
        pruning = next((sec[n] for n in PRUNE_SECTIONS if n in sec), None)
        quant = next((sec[n] for n in QUANT_SECTIONS if n in sec), None)
        parts = (["dynabert"] if pruning else []) + (["ptq"] if quant or HPO in sec else [])  # pruning first
        if parts:
            self.out["compress.strategy"] = "+".join(parts)

        model = self.global_(sec["Global"]) if "Global" in sec else None
        if "Distillation" in sec:
            self.distillation(sec["Distillation"], model)
        if pruning:
            self.prune(pruning)
        if quant:
            self.quantization(quant)
        if HPO in sec:
            sec[HPO].finish(NOT_HERE[HPO])  # `HyperParameterOptimization:` alone asks for the search; any key is Paddle's
        if "TrainConfig" in sec:
            self.train_config(sec["TrainConfig"])
        if self.training and not pruning:
            raise ConfigError(f"{self.where}: {self.training[0]}: nothing is trained here without pruning (quantization "
                              f"is post-training, ptq); it applies to {TRAINS_HERE}: add Prune (transformer_pruner) "
                              "or TransformerPrune, or remove the key")
        return self.out

    # ----------------------------------------------------------------------------------------------- sections

    def global_(self, g: _Section) -> str | None:
        model = self.model_dir(g, "model_dir", ("model_filename", "params_filename"))
        if model:
            self.out["model.name_or_path"] = model
        task_name = g.take("task_name")
        if task_name is not None and self.task is not None and str(task_name) != self.task:
            raise g.error("task_name", f"{yaml_input.short(task_name)} but the task is {self.task!r} (--task)")
        g.only("dataset", ("clue",), "the task's own data is read here (data.dir: CLUE JSON lines, or a CSV/TSV "
                                     "table: data.format)")
        batch = g.number("batch_size", integer=True, minimum=1)
        if batch is not None:  # ACT's loaders train and evaluate with it
            self.out["compress.per_device_train_batch_size"] = self.out["compress.eval_batch_size"] = batch
        seq = g.number("max_seq_length", integer=True, minimum=8, maximum=512)
        if seq is not None:
            self.out["max_seq_len"] = seq
        self.data_files(g)
        g.finish()
        return model

    def distillation(self, d: _Section, model: str | None) -> None:
        teacher = self.model_dir(d, "teacher_model_dir", ("teacher_model_filename", "teacher_params_filename"))
        if teacher and model and teacher != model:
            raise d.error("teacher_model_dir", f"{teacher} differs from Global.model_dir {model}: the teacher here "
                                               "is the model being compressed (finetune's FP32 model)")
        if teacher:
            self.out["model.name_or_path"] = teacher
        for key, default in (("alpha", 1.0), ("loss", "l2")):  # ACT's defaults; our fixed loss has an L2 part at weight 1
            if d.only(key, (default,), FIXED_DISTILL) is not None:
                self.training.append(f"Distillation.{key}")
        d.finish(NOT_HERE["Distillation"])

    def prune(self, p: _Section) -> None:
        if p.name == "Prune":
            algo = p.take("prune_algo")
            if algo != "transformer_pruner":
                why = {"prune": "channel pruning is for convolutions", "asp": "2:4 sparsity needs sparse tensor cores",
                       None: "it is required"}.get(algo, f"{yaml_input.short(algo)} is not supported")
                raise p.error("prune_algo", f"{why}; use transformer_pruner (heads and FFN neurons, DynaBERT width)")
        ratio = p.take("pruned_ratio")
        if ratio is not None:
            ratios = ratio if isinstance(ratio, list) else [ratio]
            if not ratios or any(isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < 1 for r in ratios):
                raise p.error("pruned_ratio", f"expected a fraction in (0, 1) or a list of them, got {yaml_input.short(ratio)}")
            self.out["compress.width_mult_list"] = [round(1 - r, 6) for r in ratios]  # widths kept
        p.finish(NOT_HERE["Prune"])

    def quantization(self, q: _Section) -> None:
        for key in ("weight_bits", "activation_bits"):
            q.only(key, (8,), "only 8-bit quantization here (INT8)")
        ops = q.take("quantize_op_types")
        if ops is not None:
            if not isinstance(ops, list) or QUANTIZED_OP not in ops:
                raise q.error("quantize_op_types", f"must include {QUANTIZED_OP} (ERNIE's Linear layers: the MatMuls "
                                                   f"INT8 quantizes here), got {yaml_input.short(ops)}")
            other = [op for op in ops if op not in ACT_OP_TYPES]
            if other:
                raise q.error("quantize_op_types", f"{yaml_input.short(other[0])} is not supported: only MatMuls are quantized here")
        q.only("weight_quantize_type", ("channel_wise_abs_max",), "INT8 weights here are per channel (channel_wise_abs_max)")
        q.only("activation_quantize_type", ("moving_average_abs_max", "range_abs_max"),
               "activation scales here are fixed, calibrated on training sentences (abs_max would set them per batch)")
        q.only("use_pact", (False,), "PACT learns clipping ranges in quant-aware training; " + POST_TRAINING)
        q.only("is_full_quantize", (False,), "only MatMuls are quantized here")
        q.only("not_quant_pattern", (["skip_quant"], []), "FP32 MatMuls are chosen by the INT8 search here "
                                                          "(quantization.int8_max_fp32_matmuls)")
        q.only("onnx_format", (True,), "the bundle's INT8 models are ONNX (onnx/int8.onnx, onnx/int8_qdq.onnx)")
        q.only("dtype", ("int8",), "INT8 only here")
        q.only("for_tensorrt", (True, False), "true or false (export always writes the TensorRT QDQ form too)")
        if q.name == "QuantPost":
            q.only("bias_correction", (False,), "bias correction is not done by the INT8 search here")
            batch = q.number("batch_size", integer=True, minimum=1)
            batches = q.number("batch_nums", integer=True, minimum=1)
            if batch is not None:
                self.out["quantization.calibration_batch_size"] = batch
            if batches is not None:  # calibration examples = batch_size x batch_nums (ACT's batch_size default: 32)
                self.out["quantization.calibration_sentences"] = (batch or 32) * batches
        q.finish(NOT_HERE["Quant"])

    def train_config(self, t: _Section) -> None:
        for key, target, kwargs in (("epochs", "compress.num_train_epochs", {"integer": True, "minimum": 1}),
                                    ("train_iter", "compress.max_steps", {"integer": True, "minimum": 1})):
            value = t.number(key, **kwargs)
            if value is not None:
                self.out[target] = value
                self.training.append(f"TrainConfig.{key}")
        if isinstance(t.keys.get("learning_rate"), dict):
            raise t.error("learning_rate", "a schedule is not supported: training here decays linearly from one number")
        lr = t.number("learning_rate", above=0.0)
        if lr is not None:
            self.out["compress.learning_rate"] = float(lr)
            self.training.append("TrainConfig.learning_rate")
        adamw = "training here uses AdamW"
        t.only("optimizer", ("AdamW",), adamw)  # older ACT: optimizer: AdamW, optim_args: {weight_decay: ...}
        for key in ("optimizer_builder", "optim_args"):
            raw = t.take(key)
            if isinstance(raw, str):  # optimizer_builder may name the optimizer alone
                raw = {"optimizer": {"type": raw}}
            if raw is not None:
                self.optimizer(_Section(self.where, f"TrainConfig.{key}", raw), adamw)
        origin = t.number("origin_metric", minimum=0.0)
        if origin is not None:
            if origin > 1:
                raise t.error("origin_metric", f"expected a fraction (0.7473, not 74.73), got {yaml_input.short(origin)}")
            self.out["gates.origin_metric"] = float(origin)
        target = t.number("target_metric", minimum=0.0)
        if target is not None:  # the compressed model's floor, as a drop from the FP32 metric: our accuracy budget
            if origin is None or target > origin:
                raise t.error("target_metric", "needs TrainConfig.origin_metric, and at most that (the compressed "
                                               "model's floor, read as gates.max_accuracy_drop)")
            self.out["gates.max_accuracy_drop"] = round((origin - target) * 100, 4)
        t.finish(NOT_HERE["TrainConfig"])

    def optimizer(self, b: _Section, adamw: str) -> None:
        if "optimizer" in b.keys:
            opt = _Section(self.where, f"{b.name}.optimizer", b.take("optimizer"))
            opt.only("type", ("AdamW",), adamw)
            opt.finish(dict.fromkeys(opt.keys, f"AdamW's settings are fixed here ({TRAINS_HERE})"))
        decay = b.number("weight_decay", minimum=0.0)
        if decay:  # make_optimizer is called without it there
            raise b.error("weight_decay", f"{TRAINS_HERE} trains without weight decay; remove it or set 0")
        b.finish(NOT_HERE["optimizer_builder"])

    # ------------------------------------------------------------------------------------------------ paths

    def resolve(self, value: str) -> Path:
        p = Path(value).expanduser()
        return (p if p.is_absolute() else self.base / p).resolve()

    def model_dir(self, s: _Section, dir_key: str, file_keys: tuple[str, ...]) -> str | None:
        """``Global.model_dir`` / ``Distillation.teacher_model_dir``: a PaddleNLP model directory, resolved."""
        value = s.take(dir_key)
        files = {key: name for key in file_keys if (name := s.take(key)) is not None}
        if value is None:
            if files:
                raise s.error(next(iter(files)), f"names a file but {s.name}.{dir_key} is not given")
            return None
        if not isinstance(value, str) or not value.strip():
            raise s.error(dir_key, f"expected a directory path, got {yaml_input.short(value)}")
        d = self.resolve(value)
        if not d.is_dir():
            raise s.error(dir_key, f"{d} is not a directory")
        for key, name in files.items():
            if not (d / str(name)).is_file():
                raise s.error(key, f"{name} is not in {d}: a PaddleNLP model directory is expected ({PADDLENLP_DIR})")
        missing = [n for n, ok in ((WEIGHTS_FILE, (d / WEIGHTS_FILE).is_file()),
                                   (" or ".join(CONFIG_FILES), any((d / c).is_file() for c in CONFIG_FILES)),
                                   (VOCAB_FILE, (d / VOCAB_FILE).is_file())) if not ok]
        if missing:
            raise s.error(dir_key, f"{d} has no {', '.join(missing)}: a PaddleNLP model directory is expected "
                                   f"({PADDLENLP_DIR}); ACT's static inference model cannot be fine-tuned or pruned here")
        return str(d)

    def data_files(self, g: _Section) -> None:
        """``Global.train_data`` / ``dev_data`` (ACT's UIE example): files of one directory, ``data.dir``."""
        found = {}
        for key, target in (("train_data", "data.train_file"), ("dev_data", "data.dev_file")):
            value = g.take(key)
            if value is None:
                continue
            p = self.resolve(str(value))
            if not p.is_file():
                raise g.error(key, f"{p} is not a file")
            if found and p.parent != Path(self.out["data.dir"]):
                raise g.error(key, f"{p} is not in {self.out['data.dir']} (Global.train_data's directory): data.dir holds both")
            found[key] = p
            self.out["data.dir"], self.out[target] = str(p.parent), p.name


def _task_name(task: str | None) -> str | None:
    """The task's name: ``task`` itself, or the ``task:`` of a task YAML file (None when it cannot be read)."""
    from pipeline.config import is_task_yaml

    if task is None or not is_task_yaml(task):
        return task
    try:
        raw = yaml_input.load_file(Path(task))
    except ConfigError:
        return None  # load_task_config reports it
    return str(raw["task"]) if isinstance(raw, dict) and raw.get("task") is not None else None
