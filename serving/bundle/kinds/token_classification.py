"""The bundle side of token classification (NER: text -> entities with char offsets)."""

from __future__ import annotations

from pathlib import Path

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import BundleKind
from serving.bundle.model_config import BundleShape
from serving.triton import entity_outputs


class TokenClassification(BundleKind):
    kind = TaskKind.TOKEN_CLASSIFICATION
    tokenizer_source, postprocess_source, fused_source = "ner_tokenizer.py", "ner_postprocess.py", "tagger.py"
    tokenizer_pure = ("wordpiece.py", "labeling/bio.py")
    postprocess_pure = ("labeling/bio.py",)
    fusable = True
    describes = "named entity recognizer"
    post_steps = "argmax over the BIO tags, bio.decode_tags"
    unit = "tags"
    client_example = "extract --model {task} '浙商银行企业信贷部叶老桂博士'"
    fastdeploy = fd.Example("ernie_tokencls", "token_cls_grpc_client.py")
    fastdeploy_io = ("input `INPUT` (TYPE_STRING [B, 1]) -> `OUTPUT` (TYPE_STRING, answered as [B]): per text the Python literal "
                     "of [{'pos': [start, end], 'label': type}], character offsets with an inclusive end, as FastDeploy's "
                     "token_cls_grpc_client.py reads them (ast.literal_eval)")

    def tag_problem(self, names: list[str]) -> str | None:
        bad = [n for n in names if n != "O" and not (n[:2] in ("B-", "I-") and len(n) > 2)]
        if not names or names[0] != "O" or bad:
            return f"token classification needs BIO tags with 'O' first, got {names[:5]}"
        return None

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(entity_outputs.__file__), *super().postprocess_helpers(pc)]  # tags -> entities, both APIs

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.ner_fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.ner_ensemble_config(shape, pc), mcfg.ner_tokenizer_config(shape, pc),
                mcfg.model_config(shape, pc, self.token_level), mcfg.ner_postprocess_config(shape, pc))

    def card_lines(self, names, pc, meta, model_line, batching, choice) -> list[str]:
        io = ("input `text` (TYPE_STRING, a batch of UTF-8 texts) -> output `entities` (TYPE_STRING per text: a JSON "
              "list of {\"type\", \"text\", \"start\", \"end\"}, char offsets, end exclusive).")
        if self.layout(pc) == "fused":
            return [
                f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: tokenizer, model and "
                f"post-processing in one process): {io}",
                f"- Inside: bio.encode_tokens (WordPiece with char offsets, max_seq_len {meta['max_seq_len']}), the "
                f"{choice.precision} model from `{choice.form}`, argmax over {meta['num_labels']} BIO tags, bio.decode_tags.",
                batching,
            ]
        return [
            f"- Ensemble `{names.ensemble}`: {io}",
            f"- `{names.tokenizer}` (python): bio.encode_token (WordPiece with char offsets), max_seq_len {meta['max_seq_len']}.",
            model_line,
            f"- `{names.postprocess}` (python): argmax over {meta['num_labels']} BIO tags, bio.decode_tags.",
            batching,
        ]


KIND = TokenClassification()  # what serving.bundle.kinds finds in the module named after the kind
