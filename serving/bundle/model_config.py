"""Triton ``config.pbtxt``, built as ``ModelConfig`` protobufs: what every task kind's configs share.

Every config goes through ``tritonclient.grpc model_config_pb2`` and ``text_format``, never string templates, so a
config that Triton would reject for its structure cannot be written.  A bundle has four models (or one, layout fused):

    <task>              ensemble: the kind's inputs -> tokenizer -> model -> postprocess -> the kind's outputs
    <task>_tokenizer    python backend: WordPiece over the bundle's vocab.txt (the kind's pre-processing)
    <task>_model        the model; runtime chosen at package time (serving.bundle.config.runtimes): ``model_config``
    <task>_postprocess  python backend: the kind's post-processing

Here: the model step, the one-text tokenizer (classification and NER), the windowed kinds' tokenizer and package
settings (``windowed_package``), the ensemble's chain, a fused model's engine parameters, and the pieces each kind's
builders use.  A kind's own configs (its tensors, its ensemble, its fused model) are built by its object,
``serving/kinds/<kind>/bundle.py``; ``serving.bundle.kinds.all_configs`` asks it.  With package.api fastdeploy the
names clients see are FastDeploy's (serving/bundle/fastdeploy_api.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle.config import FASTDEPLOY, TRITON_ORT, PackageConfig

TEXT = "text"
TEXT_PAIR = "text_pair"  # a pair classifier's second text, one per text (OCNLI's hypothesis, AFQMC's second question)
INPUT_IDS = "input_ids"
TOKEN_TYPE_IDS = "token_type_ids"
LOGITS = "logits"
OFFSETS = "offsets"  # [T, 2] char offsets per token: the token-level kinds' pre-processing hands them on
WINDOW_EXAMPLE = "window_example"  # [W]: which item each window belongs to (the windowed kinds)
VERSION = "1"


@dataclass(frozen=True)
class ModelNames:
    task: str
    fused: bool = False  # package.layout fused: one model, named like the ensemble, does all three steps

    @property
    def ensemble(self) -> str:
        return self.task

    @property
    def tokenizer(self) -> str:
        return self.task if self.fused else f"{self.task}_tokenizer"

    @property
    def model(self) -> str:
        return self.task if self.fused else f"{self.task}_model"

    @property
    def postprocess(self) -> str:
        return self.task if self.fused else f"{self.task}_postprocess"

    def all(self) -> tuple[str, ...]:
        return (self.task,) if self.fused else (self.ensemble, self.tokenizer, self.model, self.postprocess)


@dataclass(frozen=True)
class BundleShape:
    """What the configs need to know about the bundle besides the package settings."""

    task: str
    num_labels: int
    max_seq_len: int
    model_file: str  # inside 1/ of <task>_model: model.onnx, or model.pdmodel (+ model.pdiparams)
    pad_id: int = 0  # the vocabulary's [PAD] id: the python runner re-pads merged requests with it
    vocab_size: int = 0  # the python runner refuses ids outside it (0: not checked)
    task_type: str = TaskKind.CLASSIFICATION.value  # a TaskKind value; num_labels = tags (NER) or 2 (MRC: start, end)
    # The engine's own settings as validated (OpenVINO: its CPU properties, JSON; threads come from the package)
    engine_properties: str = ""
    # The model file's output tensor: native backends (onnxruntime, fastdeploy) match config names to the file's
    # (serving/bundle/model_io.py reads it); python runners always answer "logits".
    model_output: str = LOGITS
    # The kind's own settings from meta.json (its object's shape_fields: a pair classifier's text_pair, the windowed
    # kinds' doc_stride, ...): only the kind's builders read them.
    settings: Mapping[str, Any] = field(default_factory=dict)


def _tensor(cls, name: str, dtype: int, dims: list[int], max_batch_size: int):
    # With max_batch_size 0 the batch dimension is not implicit: it must be part of dims.
    return cls(name=name, data_type=dtype, dims=dims if max_batch_size else [-1, *dims])


def input_tensor(name, dtype, dims, pc: PackageConfig, **kw) -> mc.ModelInput:
    t = _tensor(mc.ModelInput, name, dtype, dims, pc.max_batch_size)
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def output_tensor(name, dtype, dims, pc: PackageConfig) -> mc.ModelOutput:
    return _tensor(mc.ModelOutput, name, dtype, dims, pc.max_batch_size)


def schedule(cfg: mc.ModelConfig, pc: PackageConfig, *, scheduled: bool = True) -> None:
    cfg.max_batch_size = pc.max_batch_size
    if pc.version_policy == "all":
        cfg.version_policy.all.SetInParent()
    else:
        cfg.version_policy.latest.num_versions = 1
    if not scheduled:
        return  # ensembles have no instances and no batcher of their own
    if pc.max_batch_size:
        cfg.dynamic_batching.preferred_batch_size.append(pc.preferred_batch_size)
        cfg.dynamic_batching.max_queue_delay_microseconds = pc.max_queue_delay_microseconds
    group = cfg.instance_group.add()
    group.count = pc.instances
    group.kind = mc.ModelInstanceGroup.KIND_GPU if pc.device == "GPU" else mc.ModelInstanceGroup.KIND_CPU


def param(cfg: mc.ModelConfig, key: str, value) -> None:
    cfg.parameters[key].string_value = str(value)


def text_pair_input(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig, python: bool = True) -> None:
    """A pair classifier's second input.  Optional where the python model reads it: a request without it reaches
    the model, which refuses it alone naming ``text_pair`` (Triton's own refusal would not name the field)."""
    if shape.settings.get("text_pair"):
        cfg.input.append(input_tensor(TEXT_PAIR, mc.TYPE_STRING, [1], pc, optional=python))
        if python:
            param(cfg, "text_pair", "true")


def tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.tokenizer, backend="python")
    cfg.input.append(input_tensor(TEXT, mc.TYPE_STRING, [1], pc))
    text_pair_input(cfg, shape, pc)
    cfg.output.extend([output_tensor(INPUT_IDS, mc.TYPE_INT64, [-1], pc), output_tensor(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc)])
    schedule(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU  # tokenization is CPU work whatever the model runs on
    param(cfg, "max_seq_len", shape.max_seq_len)
    param(cfg, "max_text_bytes", pc.max_text_bytes)
    return cfg


def model_config(shape: BundleShape, pc: PackageConfig, per_token: bool = False) -> mc.ModelConfig:
    """The model step; ``per_token``: its logits are [T, C] (every kind but classification), not [C]."""
    names = ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.model)
    # The python runner re-pads requests of different lengths into one batch itself, so Triton may
    # batch them together (ragged); native backends need equal shapes per batch.
    ragged = pc.backend == "python"
    cfg.input.extend([
        input_tensor(INPUT_IDS, mc.TYPE_INT64, [-1], pc, allow_ragged_batch=ragged and bool(pc.max_batch_size)),
        input_tensor(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc, allow_ragged_batch=ragged and bool(pc.max_batch_size)),
    ])
    cfg.output.append(output_tensor(model_output_name(shape, pc), mc.TYPE_FP32, [-1, shape.num_labels] if per_token else [shape.num_labels], pc))
    schedule(cfg, pc)
    if pc.backend == "python":
        cfg.backend = "python"
        param(cfg, "engine", pc.engine)
        param(cfg, "model_file", shape.model_file)
        param(cfg, "threads", pc.engine_threads)
        if shape.engine_properties:
            param(cfg, "engine_properties", shape.engine_properties)
        param(cfg, "pad_id", shape.pad_id)
        # each request is checked against these before it joins a batch (one bad request fails only itself)
        param(cfg, "max_seq_len", shape.max_seq_len)
        param(cfg, "vocab_size", shape.vocab_size)
    elif pc.backend == TRITON_ORT:
        cfg.backend = TRITON_ORT
        cfg.platform = "onnxruntime_onnx"
        cfg.default_model_filename = shape.model_file
        param(cfg, "intra_op_thread_count", pc.engine_threads)
        if pc.accelerator != "none":
            acc = cfg.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
            acc.parameters["precision_mode"] = "INT8" if pc.accelerator == "tensorrt-int8" else "FP16"
            acc.parameters["max_workspace_size_bytes"] = str(1 << 30)
            acc.parameters["trt_engine_cache_enable"] = "1"
    elif pc.backend == "fastdeploy":
        cfg.backend = "fastdeploy"
        accs = cfg.optimization.execution_accelerators
        target = accs.gpu_execution_accelerator if pc.device == "GPU" else accs.cpu_execution_accelerator
        acc = target.add(name=pc.fastdeploy_engine)
        acc.parameters.update(FASTDEPLOY[pc.fastdeploy_engine].parameters(pc))
    else:  # pragma: no cover - PackageConfig validates runtime
        raise AssertionError(pc.runtime)
    return cfg


def model_output_name(shape: BundleShape, pc: PackageConfig) -> str:
    """The model step's output tensor name (see BundleShape.model_output)."""
    return LOGITS if pc.backend == "python" else shape.model_output


def api_params(cfg: mc.ModelConfig, pc: PackageConfig) -> None:
    if pc.api != "ernie-bundle":  # the python models default to ours: configs of our API stay as they were
        param(cfg, "api", pc.api)


def chain(cfg: mc.ModelConfig, names: "ModelNames", inputs: tuple[str, ...], extras: tuple[str, ...],
           to_post: tuple[str, ...], outputs: tuple[str, ...], model_output: str = LOGITS,
           public: dict[str, str] | None = None) -> None:
    """The ensemble's steps: tokenizer(inputs) -> model(ids, types) -> postprocess(logits, extras, to_post).

    ``extras``: pre-processing outputs only the post-processing reads (token offsets, window owners);
    ``to_post``: ensemble inputs the post-processing also reads (the original text or passage);
    ``model_output``: the model step's output tensor; ``public``: step tensor -> the ensemble's own name where they
    differ (FastDeploy's API: text is INPUT, entities are OUTPUT).
    """
    public = public or {}
    steps = cfg.ensemble_scheduling.step
    tok = steps.add(model_name=names.tokenizer, model_version=-1)
    for name in inputs:
        tok.input_map[name] = public.get(name, name)
    for name in (INPUT_IDS, TOKEN_TYPE_IDS, *extras):
        tok.output_map[name] = f"_{name}"
    run = steps.add(model_name=names.model, model_version=-1)
    run.input_map[INPUT_IDS] = f"_{INPUT_IDS}"
    run.input_map[TOKEN_TYPE_IDS] = f"_{TOKEN_TYPE_IDS}"
    run.output_map[model_output] = f"_{LOGITS}"
    post = steps.add(model_name=names.postprocess, model_version=-1)
    post.input_map[LOGITS] = f"_{LOGITS}"
    for name in extras:
        post.input_map[name] = f"_{name}"
    for name in to_post:
        post.input_map[name] = public.get(name, name)
    for name in outputs:
        post.output_map[name] = public.get(name, name)


def fused_steps(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig) -> None:
    """The parameters of a fused model's three steps: the tokenizer's limits and the model runner's engine."""
    for key, value in (("max_seq_len", shape.max_seq_len), ("max_text_bytes", pc.max_text_bytes),
                       ("engine", pc.engine), ("model_file", shape.model_file), ("threads", pc.engine_threads),
                       ("pad_id", shape.pad_id)):
        param(cfg, key, value)
    if shape.engine_properties:
        param(cfg, "engine_properties", shape.engine_properties)


def windowed_package(pc: PackageConfig) -> PackageConfig:
    """The package settings every model of a windowed kind's chain (MRC, UIE) runs with: max_batch_size 0.

    One question + context becomes W >= 1 windows, W known only after tokenizing.  Triton's batch
    dimension must mean the same thing in every model of an ensemble (it is split back per request
    by position), so a chain whose item count changes from N pairs to W windows cannot be batched
    by Triton.  Instead every model has max_batch_size 0 and explicit dims: the ensemble takes
    [N] questions and contexts, the pre-processing model emits [W, T] windows plus
    ``window_example`` [W] (which pair each window belongs to), the model runs all W windows of the
    request in one call, and the post-processing model folds them back to [N] answers.  Clients
    batch by sending several pairs per request (at most package.max_batch_size, checked by the
    pre-processing model); concurrent requests run side by side on package.instance_count instances (PackageConfig.instances).
    """
    return dataclasses.replace(pc, max_batch_size=0)


def windowing_tokenizer_config(shape: BundleShape, pc: PackageConfig, inputs: tuple[str, ...], params: dict) -> mc.ModelConfig:
    """The pre-processing model of a windowed kind (MRC, UIE): string ``inputs`` [N] -> windows [W, T] + offsets +
    window_example, max_batch_size 0 (see windowed_package)."""
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.tokenizer, backend="python")
    cfg.input.extend([input_tensor(name, mc.TYPE_STRING, [], pc0) for name in inputs])
    cfg.output.extend([
        output_tensor(INPUT_IDS, mc.TYPE_INT64, [-1], pc0), output_tensor(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc0),
        output_tensor(OFFSETS, mc.TYPE_INT64, [-1, 2], pc0), output_tensor(WINDOW_EXAMPLE, mc.TYPE_INT64, [], pc0),
    ])
    schedule(cfg, pc0)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in {"max_seq_len": shape.max_seq_len, "doc_stride": shape.settings["doc_stride"], **params,
                       "max_text_bytes": pc.max_text_bytes,
                       "max_items": pc.max_batch_size}.items():  # max_items: pairs / texts per request; 0: no limit
        param(cfg, key, value)
    return cfg


def windowed_postprocess_config(shape: BundleShape, pc: PackageConfig, to_post: tuple[str, ...],
                                outputs: list[mc.ModelOutput], params: dict) -> mc.ModelConfig:
    """The post-processing model of a windowed kind (MRC, UIE): the W windows' logits, offsets and window_example,
    and the ensemble's string inputs ``to_post`` [N] (the passage, the texts and prompts) -> the kind's ``outputs``
    (built with ``windowed_package(pc)``); ``params``: its decoding settings.  max_batch_size 0 (see windowed_package)."""
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=ModelNames(shape.task).postprocess, backend="python")
    cfg.input.extend([
        input_tensor(LOGITS, mc.TYPE_FP32, [-1, 2], pc0), input_tensor(OFFSETS, mc.TYPE_INT64, [-1, 2], pc0),
        input_tensor(WINDOW_EXAMPLE, mc.TYPE_INT64, [], pc0), *(input_tensor(n, mc.TYPE_STRING, [], pc0) for n in to_post),
    ])
    cfg.output.extend(outputs)
    schedule(cfg, pc0)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in params.items():
        param(cfg, key, value)
    return cfg


def windowed_ensemble_config(shape: BundleShape, pc: PackageConfig, inputs: tuple[str, ...], to_post: tuple[str, ...],
                             outputs: list[mc.ModelOutput]) -> mc.ModelConfig:
    """The ensemble of a windowed kind: its string ``inputs`` [N] -> windowing tokenizer -> model -> post-processing
    (which also reads ``to_post``) -> ``outputs`` (built with ``windowed_package(pc)``)."""
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.extend([input_tensor(n, mc.TYPE_STRING, [], pc0) for n in inputs])
    cfg.output.extend(outputs)
    schedule(cfg, pc0, scheduled=False)
    chain(cfg, names, inputs, (OFFSETS, WINDOW_EXAMPLE), to_post, tuple(o.name for o in outputs),
          model_output_name(shape, pc))
    return cfg


def to_pbtxt(cfg: mc.ModelConfig) -> str:
    text = text_format.MessageToString(cfg)
    if cfg.max_batch_size == 0:
        # proto3 does not print zero scalars; say it anyway so a reader sees batching is off on purpose.
        text = "max_batch_size: 0\n" + text
    return text


def parse_pbtxt(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())
