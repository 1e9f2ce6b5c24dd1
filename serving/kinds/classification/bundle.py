"""The bundle side of text classification (one text, or a text pair, -> label, probabilities, top-k; a multi-label
classifier's text -> its labels ranked by probability and how many of them it predicts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig, _config_error
from serving.bundle.kinds.base import BundleKind, PythonModels
from serving.bundle.model_config import BundleShape

# The ensemble's outputs, in the order clients see them.
LABEL, LABEL_DESC, CONFIDENCE, PROBS, TOPK_LABEL, TOPK_PROB = "label", "label_desc", "confidence", "probs", "topk_label", "topk_prob"
# A multi-label classifier's (meta.json multi_label): the labels ranked, their descriptions and probabilities, how many
# of the first are predicted, and every label's probability in labels.json order.
LABELS, LABEL_DESCS, LABEL_PROBS, COUNT = "labels", "label_descs", "label_probs", "count"


class Classification(BundleKind):
    kind = TaskKind.CLASSIFICATION
    files = PythonModels("tokenizer.py", "postprocess.py", "classifier.py")
    token_level = False
    describes = "text classifier"
    post_steps = "softmax"
    unit = "labels"
    client_example = "classify --model {task} '今天股市大涨'"
    fastdeploy = fd.Example(
        "ernie_seqcls", "seq_cls_grpc_client.py",
        io=("input `INPUT` (TYPE_STRING [B, 1]) -> `label` (TYPE_INT64: the class index in labels.json order) and "
            "`confidence` (TYPE_FP32), answered as [B] each, as FastDeploy's seq_cls_grpc_client.py reads them"))

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / "class_outputs.py"]  # label mapping and top-k, both APIs

    def label_problem(self, rows: list[str]) -> str | None:
        return None

    def meta_problem(self, meta: dict) -> str | None:
        """A multi-label classifier's section: the threshold its label sets are cut at, a probability."""
        if "multi_label" not in meta:
            return None
        t = meta["multi_label"].get("threshold") if isinstance(meta["multi_label"], dict) else None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
            return f"multi_label.threshold must be a number between 0 and 1, got {t!r}"
        tree = meta["multi_label"].get("hierarchy_separator")
        if tree is not None and (not isinstance(tree, str) or not tree):
            return f"multi_label.hierarchy_separator must be a non-empty string, got {tree!r}"
        return None

    def meta_sections(self, meta: dict) -> dict[str, Any]:
        sets = {}
        if "multi_label" in meta:  # the hierarchy's separator, when there is one: how a client reads a label's path
            tree = meta["multi_label"].get("hierarchy_separator")
            sets = {"multi_label": {"threshold": float(meta["multi_label"]["threshold"]),
                                    **({"hierarchy_separator": tree} if tree else {})}}
        if not meta.get("text_pair"):
            return sets
        return {"text_pair": True, "text_pair_join": str(meta.get("text_pair_join", "")), **sets}

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        threshold = float(meta["multi_label"]["threshold"]) if "multi_label" in meta else None
        return {"text_pair": bool(meta.get("text_pair")), "threshold": threshold}

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (ensemble_config(shape, pc), mcfg.tokenizer_config(shape, pc), mcfg.model_config(shape, pc, self.token_level),
                postprocess_config(shape, pc))

    def card_lines(self, names, pc, meta, model_line, batching, choice) -> list[str]:
        k = min(pc.top_k, int(meta['num_labels']))
        pair = (" and `text_pair` (TYPE_STRING, the second text of each pair, one per text)" if meta.get("text_pair")
                else "")
        io = (f"input `text` (TYPE_STRING, a batch of UTF-8 texts){pair} -> outputs `label` (label id), `label_desc`, "
              "`confidence` (FP32), `probs` (all classes), `topk_label`/`topk_prob`.")
        steps = f"softmax, label mapping, top-{k}"
        if "multi_label" in meta:
            t = meta["multi_label"]["threshold"]
            io = (f"input `text` (TYPE_STRING, a batch of UTF-8 texts){pair} -> outputs `labels`, `label_descs` and "
                  "`label_probs` (every label, most probable first), `count` (INT32: the text's labels are the first "
                  f"`count`, those above probability {t}), `probs` (FP32, labels.json order).")
            steps = f"a sigmoid per label, labels ranked, those above {t} counted"
            tree = meta["multi_label"].get("hierarchy_separator")
            if tree:
                io += (f" Labels are paths in a hierarchy (`A{tree}B` is under `A`); each is its own decision, so a text "
                       "may be given a label without its parent.")
        if self.layout(pc) == "fused":
            return [
                f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: tokenizer, model and "
                f"post-processing in one process): {io}",
                f"- Inside: PaddleNLP WordPiece (max_seq_len {meta['max_seq_len']}), the {choice.precision} model from "
                f"`{choice.form}`, {steps}.",
                batching,
            ]
        return [
            f"- Ensemble `{names.ensemble}`: {io}",
            f"- `{names.tokenizer}` (python): WordPiece, max_seq_len {meta['max_seq_len']}, padding to the longest text of a request.",
            model_line,
            f"- `{names.postprocess}` (python): {steps}.",
            batching,
        ]


# -- its Triton configs (serving/bundle/model_config.py: what every kind's share) ---------------------------


def postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = mcfg.ModelNames(shape.task)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    cfg.input.append(mcfg.input_tensor(mcfg.LOGITS, mc.TYPE_FP32, [shape.num_labels], pc))
    cfg.output.extend(_outputs(shape, pc, k))
    mcfg.schedule(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    mcfg.param(cfg, "top_k", k)
    _threshold_param(cfg, shape)
    mcfg.api_params(cfg, pc)
    return cfg


def _threshold_param(cfg: mc.ModelConfig, shape: BundleShape) -> None:
    """A multi-label classifier's threshold: its post-processing answers label sets (class_outputs.label_outputs)."""
    if shape.settings.get("threshold") is not None:
        mcfg.param(cfg, "threshold", shape.settings["threshold"])


def _outputs(shape: BundleShape, pc: PackageConfig, k: int) -> list[mc.ModelOutput]:
    if pc.api == fd.API:  # FastDeploy's ernie_seqcls: the class index and its probability
        if shape.settings.get("threshold") is not None:
            raise _config_error("package.api: fastdeploy: FastDeploy's ernie_seqcls answers one label per text; a "
                                "multi-label classifier is packaged with package.api ernie-bundle")
        return [mcfg.output_tensor(LABEL, mc.TYPE_INT64, [1], pc), mcfg.output_tensor(CONFIDENCE, mc.TYPE_FP32, [1], pc)]
    if shape.settings.get("threshold") is not None:
        n = shape.num_labels
        return [mcfg.output_tensor(LABELS, mc.TYPE_STRING, [n], pc), mcfg.output_tensor(LABEL_DESCS, mc.TYPE_STRING, [n], pc),
                mcfg.output_tensor(LABEL_PROBS, mc.TYPE_FP32, [n], pc), mcfg.output_tensor(COUNT, mc.TYPE_INT32, [1], pc),
                mcfg.output_tensor(PROBS, mc.TYPE_FP32, [n], pc)]
    return [
        mcfg.output_tensor(LABEL, mc.TYPE_STRING, [1], pc),
        mcfg.output_tensor(LABEL_DESC, mc.TYPE_STRING, [1], pc),
        mcfg.output_tensor(CONFIDENCE, mc.TYPE_FP32, [1], pc),
        mcfg.output_tensor(PROBS, mc.TYPE_FP32, [shape.num_labels], pc),
        mcfg.output_tensor(TOPK_LABEL, mc.TYPE_STRING, [k], pc),
        mcfg.output_tensor(TOPK_PROB, mc.TYPE_FP32, [k], pc),
    ]


def ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = mcfg.ModelNames(shape.task)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.append(mcfg.input_tensor(_text_input(pc), mc.TYPE_STRING, [1], pc))
    mcfg.text_pair_input(cfg, shape, pc, python=False)  # an ensemble's inputs are all required: Triton refuses a request without it
    cfg.output.extend(_outputs(shape, pc, k))
    mcfg.schedule(cfg, pc, scheduled=False)
    inputs = (mcfg.TEXT, mcfg.TEXT_PAIR) if shape.settings.get("text_pair") else (mcfg.TEXT,)
    mcfg.chain(cfg, names, inputs, (), (), tuple(o.name for o in cfg.output), mcfg.model_output_name(shape, pc), {mcfg.TEXT: _text_input(pc)})
    return cfg


def _text_input(pc: PackageConfig) -> str:
    """The text input's name where clients send it: ``text``, FastDeploy's ``INPUT``."""
    return fd.INPUT if pc.api == fd.API else mcfg.TEXT


def fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's inputs and outputs on one python model (tokenizer + model +
    post-processing in one process), batched and instanced like the model."""
    names = mcfg.ModelNames(shape.task, fused=True)
    k = min(pc.top_k, shape.num_labels)
    cfg = mc.ModelConfig(name=names.ensemble, backend="python")
    cfg.input.append(mcfg.input_tensor(_text_input(pc), mc.TYPE_STRING, [1], pc))
    mcfg.text_pair_input(cfg, shape, pc)
    cfg.output.extend(_outputs(shape, pc, k))
    mcfg.schedule(cfg, pc)
    mcfg.api_params(cfg, pc)
    if pc.api == fd.API:
        mcfg.param(cfg, "text_input", fd.INPUT)
    mcfg.param(cfg, "top_k", k)
    _threshold_param(cfg, shape)
    mcfg.fused_steps(cfg, shape, pc)
    return cfg


KIND = Classification()  # what serving.bundle.kinds finds in the kind folder's bundle.py
