"""Triton ``config.pbtxt`` for the four models of a task's bundle, built as ``ModelConfig`` protobufs.

Every config goes through ``tritonclient.grpc.model_config_pb2`` and ``text_format``, never string
templates, so a config that Triton would reject for its structure cannot be written.

    <task>              ensemble: text -> tokenizer -> model -> postprocess -> label, label_desc, confidence, probs, top-k
    <task>_tokenizer    python backend: WordPiece over the bundle's vocab.txt
    <task>_model        the classifier; runtime chosen at package time (serving.bundle.config.runtimes)
    <task>_postprocess  python backend: softmax, label mapping, top-k

That is the classification bundle.  The other task kinds (``BundleShape.task_type``) keep the four
model names, with other tensors (which builders make a kind's configs: its object in serving/bundle/kinds/,
``all_configs`` there):

    token_classification (NER), batched like classification (max_batch_size from package):
      <task>              text -> entities (JSON list of {type, text, start, end} per text)
      <task>_tokenizer    text -> input_ids, token_type_ids [T], offsets [T, 2]  (bio.encode_token + pad_batch)
      <task>_model        -> logits [T, num_tags]
      <task>_postprocess  logits + offsets + text -> entities  (argmax, bio.decode_tags)

    reading_comprehension (MRC), max_batch_size 0 everywhere (see windowed_package for why):
      <task>              question [N], context [N] -> answer [N], start [N], end [N], score [N]  (layout fused:
                          one python model, reader.py, runs all three steps)
      <task>_tokenizer    -> input_ids, token_type_ids [W, T], offsets [W, T, 2], window_example [W]
      <task>_model        -> logits [W, T, 2]
      <task>_postprocess  logits + offsets + window_example + context -> answer, start, end, score  (spans.best_spans)

    uie (schema-prompted extraction), max_batch_size 0 like MRC (N texts x P prompts become W windows):
      <task>              text [N], schema [P] -> results [N, P] (JSON list of {text, start, end, probability})
      <task>_tokenizer    -> input_ids, token_type_ids [W, T], offsets [W, T, 2], window_example [W]  (pair n * P + p)
      <task>_model        -> logits [W, T, 2]
      <task>_postprocess  logits + offsets + window_example + text + schema -> results  (spans.decode_spans)

With package.api fastdeploy the names clients see are FastDeploy's (serving/bundle/fastdeploy_api.py): the models are
named after ernie_seqcls / ernie_tokencls (BundleShape.task is that name), the ensembles' own tensors are INPUT ->
label + confidence / OUTPUT, and uie is one python model (INPUT_0, INPUT_1 -> OUTPUT_0) running the engine itself.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle.config import PackageConfig

TEXT = "text"
TEXT_PAIR = "text_pair"  # a pair classifier's second text, one per text (OCNLI's hypothesis, AFQMC's second question)
INPUT_IDS = "input_ids"
TOKEN_TYPE_IDS = "token_type_ids"
LOGITS = "logits"
# token classification
OFFSETS, ENTITIES = "offsets", "entities"
# reading comprehension
QUESTION, CONTEXT, WINDOW_EXAMPLE = "question", "context", "window_example"
ANSWER, START, END, SCORE = "answer", "start", "end", "score"
# uie
SCHEMA, RESULTS = "schema", "results"
# Ensemble outputs, in the order clients see them.
LABEL, LABEL_DESC, CONFIDENCE, PROBS, TOPK_LABEL, TOPK_PROB = "label", "label_desc", "confidence", "probs", "topk_label", "topk_prob"
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
    # reading comprehension only (meta.json "reading")
    doc_stride: int = 0
    max_query_len: int = 0
    max_answer_len: int = 0
    n_best: int = 20
    # uie only (meta.json "uie"; doc_stride above is shared)
    max_prompt_len: int = 0
    position_prob: float = 0.5
    max_span_len: int = 0
    # The engine's own settings as validated (OpenVINO: its CPU properties, JSON; threads come from the package)
    engine_properties: str = ""
    # The model file's output tensor: native backends (onnxruntime, fastdeploy) match config names to the file's
    # (serving/bundle/model_io.py reads it); python runners always answer "logits".
    model_output: str = LOGITS
    schema: tuple[str, ...] = ()  # uie: the prompts the model was trained with (FastDeploy api: the first schema)
    text_pair: bool = False  # classification of text pairs: inputs text and text_pair (meta.json "text_pair")


def _tensor(cls, name: str, dtype: int, dims: list[int], max_batch_size: int):
    # With max_batch_size 0 the batch dimension is not implicit: it must be part of dims.
    return cls(name=name, data_type=dtype, dims=dims if max_batch_size else [-1, *dims])


def _inp(name, dtype, dims, pc: PackageConfig, **kw) -> mc.ModelInput:
    t = _tensor(mc.ModelInput, name, dtype, dims, pc.max_batch_size)
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def _out(name, dtype, dims, pc: PackageConfig) -> mc.ModelOutput:
    return _tensor(mc.ModelOutput, name, dtype, dims, pc.max_batch_size)


def _common(cfg: mc.ModelConfig, pc: PackageConfig, *, scheduled: bool = True) -> None:
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
    group.kind = mc.ModelInstanceGroup.KIND_GPU if pc.kind == "GPU" else mc.ModelInstanceGroup.KIND_CPU


def _param(cfg: mc.ModelConfig, key: str, value) -> None:
    cfg.parameters[key].string_value = str(value)


def _text_pair(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig, python: bool = True) -> None:
    """A pair classifier's second input.  Optional where the python model reads it: a request without it reaches
    the model, which refuses it alone naming ``text_pair`` (Triton's own refusal would not name the field)."""
    if shape.text_pair:
        cfg.input.append(_inp(TEXT_PAIR, mc.TYPE_STRING, [1], pc, optional=python))
        if python:
            _param(cfg, "text_pair", "true")


def tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.tokenizer, backend="python")
    cfg.input.append(_inp(TEXT, mc.TYPE_STRING, [1], pc))
    _text_pair(cfg, shape, pc)
    cfg.output.extend([_out(INPUT_IDS, mc.TYPE_INT64, [-1], pc), _out(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc)])
    _common(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU  # tokenization is CPU work whatever the model runs on
    _param(cfg, "max_seq_len", shape.max_seq_len)
    _param(cfg, "max_text_bytes", pc.max_text_bytes)
    return cfg


def model_config(shape: BundleShape, pc: PackageConfig, per_token: bool = False) -> mc.ModelConfig:
    """The model step; ``per_token``: its logits are [T, C] (every kind but classification), not [C]."""
    names = ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.model)
    # The python runner re-pads requests of different lengths into one batch itself, so Triton may
    # batch them together (ragged); native backends need equal shapes per batch.
    ragged = pc.backend == "python"
    cfg.input.extend([
        _inp(INPUT_IDS, mc.TYPE_INT64, [-1], pc, allow_ragged_batch=ragged and bool(pc.max_batch_size)),
        _inp(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc, allow_ragged_batch=ragged and bool(pc.max_batch_size)),
    ])
    cfg.output.append(_out(_model_output(shape, pc), mc.TYPE_FP32, [-1, shape.num_labels] if per_token else [shape.num_labels], pc))
    _common(cfg, pc)
    if pc.backend == "python":
        cfg.backend = "python"
        _param(cfg, "engine", pc.engine)
        _param(cfg, "model_file", shape.model_file)
        _param(cfg, "threads", pc.engine_threads)
        if shape.engine_properties:
            _param(cfg, "engine_properties", shape.engine_properties)
        _param(cfg, "pad_id", shape.pad_id)
        # each request is checked against these before it joins a batch (one bad request fails only itself)
        _param(cfg, "max_seq_len", shape.max_seq_len)
        _param(cfg, "vocab_size", shape.vocab_size)
    elif pc.backend == "onnxruntime":
        cfg.backend = "onnxruntime"
        cfg.platform = "onnxruntime_onnx"
        cfg.default_model_filename = shape.model_file
        _param(cfg, "intra_op_thread_count", pc.engine_threads)
        if pc.accelerator != "none":
            acc = cfg.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
            acc.parameters["precision_mode"] = "INT8" if pc.accelerator == "tensorrt-int8" else "FP16"
            acc.parameters["max_workspace_size_bytes"] = str(1 << 30)
            acc.parameters["trt_engine_cache_enable"] = "1"
    elif pc.backend == "fastdeploy":
        cfg.backend = "fastdeploy"
        accs = cfg.optimization.execution_accelerators
        target = accs.gpu_execution_accelerator if pc.kind == "GPU" else accs.cpu_execution_accelerator
        acc = target.add(name=pc.fastdeploy_engine)
        if pc.fastdeploy_engine == "tensorrt":
            acc.parameters["precision"] = "trt_fp16"  # a quantized (QDQ) model switches to int8 by itself
        else:
            acc.parameters["cpu_threads"] = str(pc.engine_threads)
        if pc.fastdeploy_engine == "paddle":
            acc.parameters["use_mkldnn"] = "1"
        if pc.fastdeploy_engine == "openvino":
            # FastDeploy's openvino takes cpu_threads as the total over all instances (serving/docs/EN/
            # model_configuration-en.md), num_streams one per instance
            acc.parameters["cpu_threads"] = str(pc.engine_threads * pc.instances)
            acc.parameters["num_streams"] = str(pc.instances)
    else:  # pragma: no cover - PackageConfig validates runtime
        raise AssertionError(pc.runtime)
    return cfg


def _model_output(shape: BundleShape, pc: PackageConfig) -> str:
    """The model step's output tensor name (see BundleShape.model_output)."""
    return LOGITS if pc.backend == "python" else shape.model_output


def _api_params(cfg: mc.ModelConfig, pc: PackageConfig) -> None:
    if pc.api != "ernie-bundle":  # the python models default to ours: configs of our API stay as they were
        _param(cfg, "api", pc.api)


def postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    cfg.input.append(_inp(LOGITS, mc.TYPE_FP32, [shape.num_labels], pc))
    cfg.output.extend(_outputs(shape, pc, k))
    _common(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    _param(cfg, "top_k", k)
    _api_params(cfg, pc)
    return cfg


def _outputs(shape: BundleShape, pc: PackageConfig, k: int) -> list[mc.ModelOutput]:
    if pc.api == fd.API:  # FastDeploy's ernie_seqcls: the class index and its probability
        return [_out(LABEL, mc.TYPE_INT64, [1], pc), _out(CONFIDENCE, mc.TYPE_FP32, [1], pc)]
    return [
        _out(LABEL, mc.TYPE_STRING, [1], pc),
        _out(LABEL_DESC, mc.TYPE_STRING, [1], pc),
        _out(CONFIDENCE, mc.TYPE_FP32, [1], pc),
        _out(PROBS, mc.TYPE_FP32, [shape.num_labels], pc),
        _out(TOPK_LABEL, mc.TYPE_STRING, [k], pc),
        _out(TOPK_PROB, mc.TYPE_FP32, [k], pc),
    ]


def _chain(cfg: mc.ModelConfig, names: "ModelNames", inputs: tuple[str, ...], extras: tuple[str, ...],
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


def ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.append(_inp(_text_input(pc), mc.TYPE_STRING, [1], pc))
    _text_pair(cfg, shape, pc, python=False)  # an ensemble's inputs are all required: Triton refuses a request without it
    cfg.output.extend(_outputs(shape, pc, k))
    _common(cfg, pc, scheduled=False)
    inputs = (TEXT, TEXT_PAIR) if shape.text_pair else (TEXT,)
    _chain(cfg, names, inputs, (), (), tuple(o.name for o in cfg.output), _model_output(shape, pc), {TEXT: _text_input(pc)})
    return cfg


def _text_input(pc: PackageConfig) -> str:
    """The text input's name where clients send it: ``text``, FastDeploy's ``INPUT``."""
    return fd.INPUT if pc.api == fd.API else TEXT


def fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's inputs and outputs on one python model (tokenizer + model +
    post-processing in one process), batched and instanced like the model."""
    names = ModelNames(shape.task, fused=True)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.ensemble, backend="python")
    cfg.input.append(_inp(_text_input(pc), mc.TYPE_STRING, [1], pc))
    _text_pair(cfg, shape, pc)
    cfg.output.extend(_outputs(shape, pc, k))
    _common(cfg, pc)
    _api_params(cfg, pc)
    if pc.api == fd.API:
        _param(cfg, "text_input", fd.INPUT)
    _param(cfg, "top_k", k)
    _fused_steps(cfg, shape, pc)
    return cfg


def _fused_steps(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig) -> None:
    """The parameters of a fused model's three steps: the tokenizer's limits and the model runner's engine."""
    for key, value in (("max_seq_len", shape.max_seq_len), ("max_text_bytes", pc.max_text_bytes),
                       ("engine", pc.engine), ("model_file", shape.model_file), ("threads", pc.engine_threads),
                       ("pad_id", shape.pad_id)):
        _param(cfg, key, value)
    if shape.engine_properties:
        _param(cfg, "engine_properties", shape.engine_properties)


# -- token classification (NER) --------------------------------------------------------------


def ner_tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    cfg = tokenizer_config(shape, pc)
    cfg.output.append(_out(OFFSETS, mc.TYPE_INT64, [-1, 2], pc))
    return cfg


def ner_postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    # Each request keeps its own token count T; the python model gets requests one by one, so the
    # batcher may merge requests of different T (ragged).
    ragged = bool(pc.max_batch_size)
    cfg.input.extend([
        _inp(LOGITS, mc.TYPE_FP32, [-1, shape.num_labels], pc, allow_ragged_batch=ragged),
        _inp(OFFSETS, mc.TYPE_INT64, [-1, 2], pc, allow_ragged_batch=ragged),
        _inp(TEXT, mc.TYPE_STRING, [1], pc),  # the ensemble's input: entity text is cut from it
    ])
    cfg.output.append(_out(ENTITIES, mc.TYPE_STRING, [1], pc))
    _common(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    _api_params(cfg, pc)  # fastdeploy: FastDeploy's {'pos', 'label'} rows, [B]
    return cfg


def ner_ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    public = {TEXT: fd.INPUT, ENTITIES: fd.OUTPUT} if pc.api == fd.API else {}
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.append(_inp(public.get(TEXT, TEXT), mc.TYPE_STRING, [1], pc))
    cfg.output.append(_out(public.get(ENTITIES, ENTITIES), mc.TYPE_STRING, [1], pc))
    _common(cfg, pc, scheduled=False)
    _chain(cfg, names, (TEXT,), (OFFSETS,), (TEXT,), (ENTITIES,), _model_output(shape, pc), public)
    return cfg


def ner_fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's input and output on one python model (``tagger.py``), batched and
    instanced like the model."""
    public = {TEXT: fd.INPUT, ENTITIES: fd.OUTPUT} if pc.api == fd.API else {}
    cfg = mc.ModelConfig(name=ModelNames(shape.task, fused=True).ensemble, backend="python")
    cfg.input.append(_inp(public.get(TEXT, TEXT), mc.TYPE_STRING, [1], pc))
    cfg.output.append(_out(public.get(ENTITIES, ENTITIES), mc.TYPE_STRING, [1], pc))
    _common(cfg, pc)
    _api_params(cfg, pc)
    if public:
        _param(cfg, "text_input", public[TEXT])
        _param(cfg, "entities_output", public[ENTITIES])
    _fused_steps(cfg, shape, pc)
    return cfg


# -- reading comprehension (MRC) ---------------------------------------------------------------


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


def _windowing_tokenizer_config(shape: BundleShape, pc: PackageConfig, inputs: tuple[str, ...], params: dict) -> mc.ModelConfig:
    """The pre-processing model of a windowed kind (MRC, UIE): string ``inputs`` [N] -> windows [W, T] + offsets +
    window_example, max_batch_size 0 (see windowed_package)."""
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.tokenizer, backend="python")
    cfg.input.extend([_inp(name, mc.TYPE_STRING, [], pc0) for name in inputs])
    cfg.output.extend([
        _out(INPUT_IDS, mc.TYPE_INT64, [-1], pc0), _out(TOKEN_TYPE_IDS, mc.TYPE_INT64, [-1], pc0),
        _out(OFFSETS, mc.TYPE_INT64, [-1, 2], pc0), _out(WINDOW_EXAMPLE, mc.TYPE_INT64, [], pc0),
    ])
    _common(cfg, pc0)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in {"max_seq_len": shape.max_seq_len, "doc_stride": shape.doc_stride, **params,
                       "max_text_bytes": pc.max_text_bytes,
                       "max_items": pc.max_batch_size}.items():  # max_items: pairs / texts per request; 0: no limit
        _param(cfg, key, value)
    return cfg


def mrc_tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    return _windowing_tokenizer_config(shape, pc, (QUESTION, CONTEXT), {"max_query_len": shape.max_query_len})


def mrc_postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    cfg.input.extend([
        _inp(LOGITS, mc.TYPE_FP32, [-1, 2], pc0), _inp(OFFSETS, mc.TYPE_INT64, [-1, 2], pc0),
        _inp(WINDOW_EXAMPLE, mc.TYPE_INT64, [], pc0), _inp(CONTEXT, mc.TYPE_STRING, [], pc0),
    ])
    cfg.output.extend(_mrc_outputs(pc0))
    _common(cfg, pc0)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    _param(cfg, "max_answer_len", shape.max_answer_len)
    _param(cfg, "n_best", shape.n_best)
    return cfg


def _mrc_outputs(pc0: PackageConfig) -> list[mc.ModelOutput]:
    return [_out(ANSWER, mc.TYPE_STRING, [], pc0), _out(START, mc.TYPE_INT64, [], pc0),
            _out(END, mc.TYPE_INT64, [], pc0), _out(SCORE, mc.TYPE_FP32, [], pc0)]


def mrc_ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.extend([_inp(QUESTION, mc.TYPE_STRING, [], pc0), _inp(CONTEXT, mc.TYPE_STRING, [], pc0)])
    cfg.output.extend(_mrc_outputs(pc0))
    _common(cfg, pc0, scheduled=False)
    _chain(cfg, names, (QUESTION, CONTEXT), (OFFSETS, WINDOW_EXAMPLE), (CONTEXT,), (ANSWER, START, END, SCORE),
           _model_output(shape, pc))
    return cfg


def mrc_fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's inputs and outputs on one python model (``reader.py``) that windows,
    runs the engine in-process and picks the answers; max_batch_size 0 as the ensemble's (windows per question vary)."""
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=ModelNames(shape.task, fused=True).ensemble, backend="python")
    cfg.input.extend([_inp(QUESTION, mc.TYPE_STRING, [], pc0), _inp(CONTEXT, mc.TYPE_STRING, [], pc0)])
    cfg.output.extend(_mrc_outputs(pc0))
    _common(cfg, pc0)
    _fused_steps(cfg, shape, pc)
    for key, value in (("doc_stride", shape.doc_stride), ("max_query_len", shape.max_query_len),
                       ("max_answer_len", shape.max_answer_len), ("n_best", shape.n_best),
                       ("max_items", pc.max_batch_size)):  # questions per request; 0: no limit
        _param(cfg, key, value)
    return cfg


# -- uie ----------------------------------------------------------------------------------------


def uie_tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    # texts x prompts -> a varying number of windows: no Triton batching (see windowed_package)
    return _windowing_tokenizer_config(shape, pc, (TEXT, SCHEMA), {"max_prompt_len": shape.max_prompt_len})


def uie_postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    cfg.input.extend([
        _inp(LOGITS, mc.TYPE_FP32, [-1, 2], pc0), _inp(OFFSETS, mc.TYPE_INT64, [-1, 2], pc0),
        _inp(WINDOW_EXAMPLE, mc.TYPE_INT64, [], pc0), _inp(TEXT, mc.TYPE_STRING, [], pc0),
        _inp(SCHEMA, mc.TYPE_STRING, [], pc0),
    ])
    cfg.output.append(_out(RESULTS, mc.TYPE_STRING, [-1], pc0))
    _common(cfg, pc0)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    _param(cfg, "position_prob", shape.position_prob)
    _param(cfg, "max_span_len", shape.max_span_len)
    return cfg


def uie_ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = ModelNames(shape.task)
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.extend([_inp(TEXT, mc.TYPE_STRING, [], pc0), _inp(SCHEMA, mc.TYPE_STRING, [], pc0)])
    cfg.output.append(_out(RESULTS, mc.TYPE_STRING, [-1], pc0))
    _common(cfg, pc0, scheduled=False)
    _chain(cfg, names, (TEXT, SCHEMA), (OFFSETS, WINDOW_EXAMPLE), (TEXT, SCHEMA), (RESULTS,), _model_output(shape, pc))
    return cfg


def uie_fastdeploy_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.api fastdeploy: FastDeploy's ``uie``, one python model (max_batch_size 1, INPUT_0 / INPUT_1 -> OUTPUT_0,
    dims [1]) that windows, runs the engine in-process and decodes; a relation schema needs the spans of one level
    before it can ask the next, which an ensemble cannot loop over."""
    names = ModelNames(shape.task, fused=True)
    pc1 = dataclasses.replace(pc, max_batch_size=fd.UIE_MAX_BATCH_SIZE, preferred_batch_size=1)
    cfg = mc.ModelConfig(name=names.ensemble, backend="python")
    cfg.input.extend([_inp(fd.UIE_TEXTS, mc.TYPE_STRING, [1], pc1), _inp(fd.UIE_SCHEMA, mc.TYPE_STRING, [1], pc1)])
    cfg.output.append(_out(fd.UIE_RESULTS, mc.TYPE_STRING, [1], pc1))
    _common(cfg, pc1)
    cfg.ClearField("dynamic_batching")  # as FastDeploy's: one request at a time (nothing to merge at batch size 1)
    _uie_steps(cfg, shape, pc)
    _param(cfg, "schema", json.dumps(list(shape.schema), ensure_ascii=False))
    return cfg


def uie_fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's inputs and output on one python model (``extractor.py``) that windows,
    runs the engine in-process and decodes; max_batch_size 0 as the ensemble's (windows per request vary)."""
    pc0 = windowed_package(pc)
    cfg = mc.ModelConfig(name=ModelNames(shape.task, fused=True).ensemble, backend="python")
    cfg.input.extend([_inp(TEXT, mc.TYPE_STRING, [], pc0), _inp(SCHEMA, mc.TYPE_STRING, [], pc0)])
    cfg.output.append(_out(RESULTS, mc.TYPE_STRING, [-1], pc0))
    _common(cfg, pc0)
    _uie_steps(cfg, shape, pc)
    return cfg


def _uie_steps(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig) -> None:
    """The parameters of a UIE model that runs all three steps: a fused model's, the windowing and the decoding."""
    _fused_steps(cfg, shape, pc)
    for key, value in (("doc_stride", shape.doc_stride), ("max_prompt_len", shape.max_prompt_len),
                       ("position_prob", shape.position_prob), ("max_span_len", shape.max_span_len),
                       ("max_items", pc.max_batch_size)):  # texts per request; 0: no limit
        _param(cfg, key, value)


def to_pbtxt(cfg: mc.ModelConfig) -> str:
    text = text_format.MessageToString(cfg)
    if cfg.max_batch_size == 0:
        # proto3 does not print zero scalars; say it anyway so a reader sees batching is off on purpose.
        text = "max_batch_size: 0\n" + text
    return text


def parse_pbtxt(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())
