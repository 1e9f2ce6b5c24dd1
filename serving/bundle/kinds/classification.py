"""The bundle side of text classification (one text, or a text pair, -> label, probabilities, top-k)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import BundleKind
from serving.bundle.model_config import BundleShape
from serving.triton import class_outputs


class Classification(BundleKind):
    kind = TaskKind.CLASSIFICATION
    tokenizer_source, postprocess_source, fused_source = "tokenizer.py", "postprocess.py", "classifier.py"
    token_level = False
    fusable = True
    describes = "text classifier"
    post_steps = "softmax"
    unit = "labels"
    client_example = "classify --model {task} '今天股市大涨'"
    fastdeploy = fd.Example("ernie_seqcls", "seq_cls_grpc_client.py")
    fastdeploy_io = ("input `INPUT` (TYPE_STRING [B, 1]) -> `label` (TYPE_INT64: the class index in labels.json order) and "
                     "`confidence` (TYPE_FP32), answered as [B] each, as FastDeploy's seq_cls_grpc_client.py reads them")

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(class_outputs.__file__)]  # label mapping and top-k, both APIs

    def label_problem(self, rows: list[str]) -> str | None:
        return None

    def meta_sections(self, meta: dict) -> dict[str, Any]:
        if not meta.get("text_pair"):
            return {}
        return {"text_pair": True, "text_pair_join": str(meta.get("text_pair_join", ""))}

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        return {"text_pair": bool(meta.get("text_pair"))}

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.ensemble_config(shape, pc), mcfg.tokenizer_config(shape, pc), mcfg.model_config(shape, pc, self.token_level),
                mcfg.postprocess_config(shape, pc))

    def card_lines(self, names, pc, meta, model_line, batching, choice) -> list[str]:
        k = min(pc.top_k, int(meta['num_labels']))
        pair = (" and `text_pair` (TYPE_STRING, the second text of each pair, one per text)" if meta.get("text_pair")
                else "")
        io = (f"input `text` (TYPE_STRING, a batch of UTF-8 texts){pair} -> outputs `label` (label id), `label_desc`, "
              "`confidence` (FP32), `probs` (all classes), `topk_label`/`topk_prob`.")
        if self.layout(pc) == "fused":
            return [
                f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: tokenizer, model and "
                f"post-processing in one process): {io}",
                f"- Inside: PaddleNLP WordPiece (max_seq_len {meta['max_seq_len']}), the {choice.precision} model from "
                f"`{choice.form}`, softmax, label mapping, top-{k}.",
                batching,
            ]
        return [
            f"- Ensemble `{names.ensemble}`: {io}",
            f"- `{names.tokenizer}` (python): WordPiece, max_seq_len {meta['max_seq_len']}, padding to the longest text of a request.",
            model_line,
            f"- `{names.postprocess}` (python): softmax, label mapping, top-{k}.",
            batching,
        ]


KIND = Classification()  # what serving.bundle.kinds finds in the module named after the kind
