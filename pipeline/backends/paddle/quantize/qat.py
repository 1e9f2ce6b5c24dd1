"""Quantization-aware training (paddleslim dygraph QAT) of an ERNIE classifier, saved as a static int8 model.

paddleslim's ``QAT`` wraps every ``Linear`` in fake-quant layers (``moving_average_abs_max`` activations,
PACT clipping when asked).  On these pins ERNIE's own forward then breaks: without an attention mask it
builds one with ``self.pooler.dense.weight.dtype``, and the wrapped pooler has no ``weight``
(``AttributeError: 'MAOutputScaleLayer' object has no attribute 'weight'``).  Upstream PaddleNLP works
around it by monkey-patching ERNIE's forward; here the classifier is wrapped in ``MaskedClassifier``,
which always builds the mask the way ERNIE does (pad positions get -1e4) and passes it in.  The wrapper is
also what gets exported, so the static model takes exactly ``input_ids`` and ``token_type_ids``.

Training is the fine-tune recipe (AdamW, linear warmup then linear decay, no decay on biases/LayerNorm,
dev accuracy each epoch, best epoch kept); the best weights are saved with
``QAT.save_quantized_model`` as ``model.pdmodel``/``model.pdiparams``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline.backends.paddle import convert
from pipeline.modeling import load_classifier
from pipeline.training import make_optimizer, plan_steps, train_loop
from pipeline.kinds.base import FeatureSet
from pipeline.errors import ConfigError, ModelError
from pipeline.evaluation import evaluate_dygraph
from pipeline.modeling import inspect_model

MODEL_PREFIX = "model"  # out_dir/model.pdmodel + model.pdiparams, as pipeline.backends.forms defines them
WEIGHT_TYPES = ("abs_max", "channel_wise_abs_max")
ACTIVATION_TYPES = ("moving_average_abs_max",)  # the only activation type paddleslim's dygraph QAT trains
EVAL_BATCH = 64


def _masked_classifier_class():
    import paddle

    class MaskedClassifier(paddle.nn.Layer):
        """``model(input_ids, token_type_ids)`` with ERNIE's padding mask built outside the quantized model."""

        def __init__(self, model, pad_token_id: int):
            super().__init__()
            self.model = model
            self.pad_token_id = pad_token_id

        def forward(self, input_ids, token_type_ids):
            mask = paddle.unsqueeze((input_ids == self.pad_token_id).astype("float32") * -1e4, axis=[1, 2])
            return self.model(input_ids, token_type_ids=token_type_ids, attention_mask=mask)

    return MaskedClassifier


def quant_config(*, use_pact: bool, moving_rate: float, weight_quantize_type: str, activation_quantize_type: str) -> dict:
    """paddleslim QAT config, with upstream PaddleNLP's choices (int8 weights and activations, Linear only)."""
    if weight_quantize_type not in WEIGHT_TYPES:
        raise ConfigError(f"weight_quantize_type: {weight_quantize_type!r} is not one of {', '.join(WEIGHT_TYPES)}")
    if activation_quantize_type not in ACTIVATION_TYPES:
        raise ConfigError(
            f"activation_quantize_type: {activation_quantize_type!r} is not supported by QAT (use {', '.join(ACTIVATION_TYPES)})"
        )
    if not 0.0 < float(moving_rate) < 1.0:
        raise ConfigError(f"moving_rate: {moving_rate} is outside (0, 1)")
    return {
        "weight_preprocess_type": "PACT" if use_pact else None,
        "activation_preprocess_type": "PACT" if use_pact else None,
        "weight_quantize_type": weight_quantize_type,
        "activation_quantize_type": activation_quantize_type,
        "weight_bits": 8,
        "activation_bits": 8,
        "dtype": "int8",
        "window_size": 10000,
        "quantizable_layer_type": ["Linear"],
        "moving_rate": float(moving_rate),
        "onnx_format": False,
    }


@dataclass
class QatRun:
    """A finished QAT training: the quantized dygraph model (best weights loaded) and what was measured."""

    model: object  # MaskedClassifier with fake-quant layers, eval mode
    quanter: object  # the paddleslim QAT that wrapped it (needed to save it)
    fp32_accuracy: float
    best_accuracy: float
    best_epoch: int
    steps: int
    history: list = field(default_factory=list)


def quant_aware_train(
    model_dir: Path,
    train: FeatureSet,
    dev: FeatureSet,
    *,
    out_dir: Path,
    input_dtype: str = "int64",
    log: Callable[[str], None] = print,
    **settings: Any,
) -> Path:
    """QAT-train the classifier in ``model_dir`` (``settings``: train_quant_aware's keywords); save
    ``out_dir/model.pdmodel``+``.pdiparams``; return ``out_dir``."""
    if input_dtype not in convert.INPUT_DTYPES:
        raise ConfigError(f"input_dtype: {input_dtype!r} is not one of {', '.join(convert.INPUT_DTYPES)}")
    run = train_quant_aware(model_dir, train, dev, log=log, **settings)
    save_quantized(run, Path(out_dir), input_dtype)
    log(f"qat: best dev accuracy {run.best_accuracy:.4f} (FP32 {run.fp32_accuracy:.4f}); saved {Path(out_dir) / MODEL_PREFIX}.pdmodel")
    return Path(out_dir)


def train_quant_aware(
    model_dir: Path,
    train: FeatureSet,
    dev: FeatureSet,
    *,
    max_seq_len: int,
    use_pact: bool,
    moving_rate: float,
    weight_quantize_type: str,
    activation_quantize_type: str,
    epochs: int,
    learning_rate: float,
    batch_size: int,
    max_steps: int,
    seed: int,
    warmup_ratio: float,
    weight_decay: float,
    log: Callable[[str], None] = print,
) -> QatRun:
    import paddle
    from paddleslim import QAT

    model_dir = Path(model_dir)
    if not train:
        raise ConfigError("qat: the training set is empty")
    if not dev:
        raise ConfigError("qat: the dev set is empty (the best checkpoint is chosen on it)")
    config = quant_config(
        use_pact=use_pact, moving_rate=moving_rate, weight_quantize_type=weight_quantize_type,
        activation_quantize_type=activation_quantize_type,
    )
    info = inspect_model(model_dir)
    if info.head_classes is None:
        raise ModelError(f"model dir {model_dir}: has no classification head to train")

    paddle.seed(seed)
    np.random.seed(seed)
    inner = load_classifier(model_dir, info.head_classes)
    model = _masked_classifier_class()(inner, int(inner.config.pad_token_id or 0))
    fp32_acc = evaluate_dygraph(model, dev, EVAL_BATCH, desc="dev eval (fp32)").metric
    log(f"qat: FP32 dev {dev.kind.metric_label} before quantization {fp32_acc:.4f}")

    quanter = QAT(config=config)
    quanter.quantize(model)  # in place: Linear layers now fake-quantize weights and inputs

    plan = plan_steps(len(train), batch_size, epochs, max_steps)
    opt, sched = make_optimizer(model, learning_rate, plan.total_steps, warmup_ratio, weight_decay)

    def step_loss(b):
        logits = model(paddle.to_tensor(b.input_ids), paddle.to_tensor(b.token_type_ids))
        return train.kind.loss(logits, b, train.pad_id)

    state = train_loop(model, train, dev, step_loss, opt, sched, epochs=plan.epochs, total_steps=plan.total_steps,
                       batch_size=batch_size, seed=seed, eval_batch_size=EVAL_BATCH, desc="qat", log=log,
                       fp32_program=False)
    return QatRun(model, quanter, fp32_acc, state.best_accuracy, state.best_epoch, state.step, state.history)


def save_quantized(run: QatRun, out_dir: Path, input_dtype: str = "int64") -> Path:
    """Write the static quantized model (``model.pdmodel``/``.pdiparams``, output named ``logits``) and qat.json."""
    import paddle

    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = out_dir / MODEL_PREFIX
    specs = [paddle.static.InputSpec([-1, -1], input_dtype, name) for name in convert.INPUT_NAMES]
    try:
        run.quanter.save_quantized_model(run.model, str(prefix), input_spec=specs)
    finally:
        # with PACT, paddleslim's save switches the process to static-graph mode and leaves it there
        if not paddle.in_dynamic_mode():
            paddle.disable_static()
    for extra in out_dir.glob(f"{MODEL_PREFIX}.pdiparams.info"):
        extra.unlink()  # dygraph bookkeeping; inference does not read it
    convert.rename_output(out_dir, convert.OUTPUT_NAME)
    summary = {
        "fp32_dev_accuracy": run.fp32_accuracy,
        "qat_dev_accuracy": run.best_accuracy,
        "best_epoch": run.best_epoch,
        "steps": run.steps,
        "history": run.history,
        "input_dtype": input_dtype,
    }
    (out_dir / "qat.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return out_dir
