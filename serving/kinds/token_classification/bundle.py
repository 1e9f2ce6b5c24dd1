"""The bundle side of token classification (NER: text -> entities with char offsets)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import BundleKind, PythonModels
from serving.bundle.model_config import BundleShape

ENTITIES = "entities"  # per text: a JSON list of {type, text, start, end}


class TokenClassification(BundleKind):
    kind = TaskKind.TOKEN_CLASSIFICATION
    files = PythonModels("ner_tokenizer.py", "ner_postprocess.py", "tagger.py",
                         tokenizer_pure=("wordpiece.py", "labeling/bio.py"), postprocess_pure=("labeling/bio.py",))
    describes = "named entity recognizer"
    post_steps = "argmax over the BIO tags, bio.decode_tags"
    unit = "tags"
    client_example = "extract --model {task} '浙商银行企业信贷部叶老桂博士'"
    fastdeploy = fd.Example(
        "ernie_tokencls", "token_cls_grpc_client.py",
        io=("input `INPUT` (TYPE_STRING [B, 1]) -> `OUTPUT` (TYPE_STRING, answered as [B]): per text the Python literal of "
            "[{'pos': [start, end], 'label': type}], character offsets with an inclusive end, as FastDeploy's "
            "token_cls_grpc_client.py reads them (ast.literal_eval)"))

    def tag_problem(self, names: list[str]) -> str | None:
        bad = [n for n in names if n != "O" and not (n[:2] in ("B-", "I-") and len(n) > 2)]
        if not names or names[0] != "O" or bad:
            return f"token classification needs BIO tags with 'O' first, got {names[:5]}"
        return None

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / "entity_outputs.py", *super().postprocess_helpers(pc)]  # tags -> entities, both APIs

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (ensemble_config(shape, pc), tokenizer_config(shape, pc),
                mcfg.model_config(shape, pc, self.token_level), postprocess_config(shape, pc))

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


# -- its Triton configs (serving/bundle/model_config.py: what every kind's share) ---------------------------


def tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    cfg = mcfg.tokenizer_config(shape, pc)
    cfg.output.append(mcfg.output_tensor(mcfg.OFFSETS, mc.TYPE_INT64, [-1, 2], pc))
    return cfg


def postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = mcfg.ModelNames(shape.task)
    cfg = mc.ModelConfig(name=names.postprocess, backend="python")
    # Each request keeps its own token count T; the python model gets requests one by one, so the
    # batcher may merge requests of different T (ragged).
    ragged = bool(pc.max_batch_size)
    cfg.input.extend([
        mcfg.input_tensor(mcfg.LOGITS, mc.TYPE_FP32, [-1, shape.num_labels], pc, allow_ragged_batch=ragged),
        mcfg.input_tensor(mcfg.OFFSETS, mc.TYPE_INT64, [-1, 2], pc, allow_ragged_batch=ragged),
        mcfg.input_tensor(mcfg.TEXT, mc.TYPE_STRING, [1], pc),  # the ensemble's input: entity text is cut from it
    ])
    cfg.output.append(mcfg.output_tensor(ENTITIES, mc.TYPE_STRING, [1], pc))
    mcfg.schedule(cfg, pc)
    cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    mcfg.api_params(cfg, pc)  # fastdeploy: FastDeploy's {'pos', 'label'} rows, [B]
    return cfg


def ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    names = mcfg.ModelNames(shape.task)
    public = {mcfg.TEXT: fd.INPUT, ENTITIES: fd.OUTPUT} if pc.api == fd.API else {}
    cfg = mc.ModelConfig(name=names.ensemble, platform="ensemble")
    cfg.input.append(mcfg.input_tensor(public.get(mcfg.TEXT, mcfg.TEXT), mc.TYPE_STRING, [1], pc))
    cfg.output.append(mcfg.output_tensor(public.get(ENTITIES, ENTITIES), mc.TYPE_STRING, [1], pc))
    mcfg.schedule(cfg, pc, scheduled=False)
    mcfg.chain(cfg, names, (mcfg.TEXT,), (mcfg.OFFSETS,), (mcfg.TEXT,), (ENTITIES,), mcfg.model_output_name(shape, pc), public)
    return cfg


def fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's input and output on one python model (``tagger.py``), batched and
    instanced like the model."""
    public = {mcfg.TEXT: fd.INPUT, ENTITIES: fd.OUTPUT} if pc.api == fd.API else {}
    cfg = mc.ModelConfig(name=mcfg.ModelNames(shape.task, fused=True).ensemble, backend="python")
    cfg.input.append(mcfg.input_tensor(public.get(mcfg.TEXT, mcfg.TEXT), mc.TYPE_STRING, [1], pc))
    cfg.output.append(mcfg.output_tensor(public.get(ENTITIES, ENTITIES), mc.TYPE_STRING, [1], pc))
    mcfg.schedule(cfg, pc)
    mcfg.api_params(cfg, pc)
    if public:
        mcfg.param(cfg, "text_input", public[mcfg.TEXT])
        mcfg.param(cfg, "entities_output", public[ENTITIES])
    mcfg.fused_steps(cfg, shape, pc)
    return cfg


KIND = TokenClassification()  # what serving.bundle.kinds finds in the kind folder's bundle.py
