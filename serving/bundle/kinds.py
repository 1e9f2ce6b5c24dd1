"""What a bundle is made of, per task kind: one object per kind (``pipeline.contract.TaskKind``), looked up once from
meta.json's ``task_type`` with ``bundle_kind``.  ``serving/bundle/repository.py`` and the Triton configs ask it;
nothing else in serving/bundle compares kind names.

    tokenizer_source, postprocess_source  python models of <task>_tokenizer / _postprocess (serving/triton/models)
    fused_source, fused_model(pc)         the one python model of layout fused (None: the kind has no fused form)
    tokenizer_pure, postprocess_pure      the pipeline's pure modules copied beside them (served == offline code)
    tokenizer_helpers(pc), postprocess_helpers(pc)   serving/triton helpers copied beside the pre- / post-processing model
    layout(pc)                            ensemble or fused, for these package settings
    one_model(pc)                         FastDeploy's uie: one python model runs all three steps
    label_problem(rows)                   what is wrong with labels.json's rows for this kind (None: nothing)
    serving_defaults(pc)                  instances x threads where make tune has not measured the bundle here
    meta_section                          meta.json's section of its windowing / decoding settings (reading, uie)
    shape_fields(meta), meta_sections(meta)   what of it goes into the Triton configs and into bundle.json
    configs(shape, pc)                    its Triton model configs (``all_configs``: by model name)
    card_lines, fastdeploy_card_lines     the model card's "What it is" lines; describes, unit, client_example
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pipeline.contract import TaskKind, kind_table, lookup_kind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig, _config_error
from serving.bundle.model_config import BundleShape, ModelNames
from serving.triton import class_outputs, entity_outputs, fastdeploy_payloads, mrc_requests, uie_requests


class BundleKind:
    """Base: what every kind shares unless it says otherwise (JSON label rows, no fused layout)."""

    kind: TaskKind
    tokenizer_source: str
    postprocess_source: str
    fused_source: str | None = None
    # pipeline modules (stdlib + numpy [+ tokenizers] only), relative to pipeline/, copied verbatim next to the
    # (tokenizer, postprocess) models; the python models load them with model_support.sibling()
    tokenizer_pure: tuple[str, ...] = ("wordpiece.py",)
    postprocess_pure: tuple[str, ...] = ()
    meta_section: str | None = None  # meta.json's section of this kind's windowing / decoding settings
    token_level: bool = True  # the model's logits are per token ([T, C]), not per text ([C])
    fusable: bool = False  # layout auto: fused on a python runtime (the three steps fit one python model)
    # model card
    describes: str = ""
    unit: str = "logits per token"
    client_example: str = ""
    fastdeploy_io: str = ""  # package.api fastdeploy: the served tensors, as FastDeploy's example client reads them
    post_steps: str = ""  # what the post-processing does, for a fused bundle's card ("softmax")

    @property
    def name(self) -> str:
        return self.kind.value

    # -- layout ---------------------------------------------------------------------------------------------------
    @property
    def fastdeploy(self) -> fd.Example | None:
        """FastDeploy's serving example for this kind (None: it has none)."""
        return fd.EXAMPLES.get(self.name)

    def one_model(self, pc: PackageConfig) -> bool:
        """package.api fastdeploy with a kind FastDeploy serves as one python model (its uie)."""
        return pc.api == fd.API and self.fastdeploy is not None and self.fastdeploy.one_model

    def layout(self, pc: PackageConfig) -> str:
        """``package.layout``, or with auto fused where the kind's three steps fit one python model
        (``fusable``, on a python runtime) and ensemble otherwise.  FastDeploy's uie (api fastdeploy) is one
        python model: fused (serving.bundle.fastdeploy_api refuses an explicit ensemble)."""
        if self.one_model(pc):
            return "fused"
        if pc.layout != "auto":
            return pc.layout
        return "fused" if self.fusable and pc.backend == "python" else "ensemble"

    # -- files ----------------------------------------------------------------------------------------------------
    def fused_model(self, pc: PackageConfig) -> str | None:
        """The python model (serving/triton/models) of layout fused for these package settings."""
        return self.fused_source

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        """serving/triton modules the pre-processing model loads beside it (``text_input.py`` always goes)."""
        return []

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        """serving/triton modules the post-processing model loads beside it: FastDeploy's payloads (token
        classification rows, UIE results) with package.api fastdeploy."""
        return [Path(fastdeploy_payloads.__file__)] if pc.api == fd.API else []

    def label_problem(self, rows: list[str]) -> str | None:
        """What is wrong with labels.json's rows for the served post-processing (see the export contract)."""
        try:
            names = [str(json.loads(line)["label"]) for line in rows]
        except (json.JSONDecodeError, KeyError, TypeError):
            return "rows must be JSON objects with a 'label'"
        return self.tag_problem(names)

    def tag_problem(self, names: list[str]) -> str | None:
        return None

    # -- serving settings -----------------------------------------------------------------------------------------
    def serving_defaults(self, pc: PackageConfig) -> tuple[PackageConfig, str | None]:
        """(package config, why) for a bundle make tune has not measured here, when the config left instances and
        threads to be chosen: ``pc`` as it is (None) unless the kind knows better."""
        return pc, None

    # -- meta.json ------------------------------------------------------------------------------------------------
    def meta_sections(self, meta: dict) -> dict[str, Any]:
        """The meta.json sections bundle.json carries for this kind (what the tools window and decode with)."""
        return {self.meta_section: meta[self.meta_section]} if self.meta_section else {}

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        """The BundleShape fields meta.json gives this kind beyond the shared ones."""
        return {}

    # -- Triton configs -------------------------------------------------------------------------------------------
    def configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        if self.layout(pc) == "fused":
            return self.fused_configs(shape, pc)
        return self.ensemble_configs(shape, pc)

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        raise _config_error(f"package.layout: fused is for {fused_kinds()} bundles, not {self.name}")

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        raise NotImplementedError

    # -- model card -----------------------------------------------------------------------------------------------
    def card_lines(self, names: ModelNames, pc: PackageConfig, meta: dict, model_line: str, batching: str,
                   choice) -> list[str]:
        """The "What it is" lines of the model card (``model_line``, ``batching``: the shared ones)."""
        raise NotImplementedError

    def fastdeploy_card_lines(self, names: ModelNames, pc: PackageConfig, meta: dict, engine: str) -> list[str]:
        """The "What it is" lines of a package.api fastdeploy bundle (FastDeploy's ERNIE 3.0 example interface)."""
        kind = "ensemble" if not names.fused else f"python, runtime `{pc.runtime}`, layout fused"
        return [f"- `{names.ensemble}` ({kind}; FastDeploy's ERNIE 3.0 serving interface): {self.fastdeploy_io}.",
                f"- Models: `{names.tokenizer}` (WordPiece, max_seq_len {meta['max_seq_len']}), `{names.model}` ({engine}), "
                f"`{names.postprocess}`." if not names.fused else f"- Inside: WordPiece, {engine}, {self.post_steps}.",
                f"- Batching: max_batch_size {pc.max_batch_size}; {pc.instances} {pc.kind} instance(s) per model."]


class Classification(BundleKind):
    kind = TaskKind.CLASSIFICATION
    tokenizer_source, postprocess_source, fused_source = "tokenizer.py", "postprocess.py", "classifier.py"
    token_level = False
    fusable = True
    describes = "text classifier"
    post_steps = "softmax"
    unit = "labels"
    client_example = "classify --model {task} '今天股市大涨'"
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


class _Windowed(BundleKind):
    """Reading comprehension and UIE: an item becomes a varying number of windows (max_batch_size 0 everywhere,
    model_config.windowed_package), and the model answers start/end logits per token."""

    def batching_line(self, pc: PackageConfig, items: str, fused: bool) -> str:
        """The model card's batching line: nothing batched by Triton; ``items`` per request, instances."""
        return (f"- Batching: none by Triton (max_batch_size 0: windows per request vary); up to "
                f"{pc.max_batch_size or 'any number of'} {items} per request, {pc.instances} {pc.kind} instance(s)"
                f"{'' if fused else ' per model'}.")

    def serving_defaults(self, pc: PackageConfig) -> tuple[PackageConfig, str | None]:
        """Two instances with every core each, on CPU with an engine whose one request uses every core (OpenVINO).
        Nothing batches whole requests, so at one instance each request's python (windowing, decoding, the
        hand-offs) runs while the engine waits; a second instance runs its engine meanwhile.  Every make tune of a
        windowed bundle chose this (CMRC2018 on Intel: 1.29x at c16, level at c1; UIE fused and ensemble on AMD:
        1.11x and 1.09x at c16, level at c1; MEASUREMENTS.md), and two instances x one thread lost c1 by 0.6x."""
        if pc.instance_count or pc.threads or pc.kind != "CPU" or not pc.engine_takes_every_core:
            return pc, None
        cores = pc.engine_threads  # one instance's: every core
        return (dataclasses.replace(pc, instance_count=2, threads=cores),
                f"{self.name}: 2 instances x {cores} threads (whole requests: one instance's python overlaps the "
                "other's engine)")

    def tag_problem(self, names: list[str]) -> str | None:
        if names != ["start", "end"]:
            return f"{self.name} needs the two rows 'start', 'end', got {names[:5]}"
        return None


class ReadingComprehension(_Windowed):
    kind = TaskKind.READING_COMPREHENSION
    tokenizer_source, postprocess_source, fused_source = "mrc_tokenizer.py", "mrc_postprocess.py", "reader.py"
    tokenizer_pure = ("wordpiece.py", "reading/windows.py")
    postprocess_pure = ("reading/spans.py",)
    fusable = True
    meta_section = "reading"
    describes = "extractive reading comprehension model"
    client_example = "answer --model {task} --question '谁发明了造纸术？' --context '蔡伦改进了造纸术。'"

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        r = meta.get(self.meta_section, {})
        return {"doc_stride": int(r.get("doc_stride", 0)), "max_query_len": int(r.get("max_query_len", 0)),
                "max_answer_len": int(r.get("max_answer_len", 0))}

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(mrc_requests.__file__)]  # the request checks, shared with the fused model

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(mrc_requests.__file__), *super().postprocess_helpers(pc)]  # the answers

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.mrc_fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.mrc_ensemble_config(shape, pc), mcfg.mrc_tokenizer_config(shape, pc),
                mcfg.model_config(shape, mcfg.windowed_package(pc), self.token_level), mcfg.mrc_postprocess_config(shape, pc))

    def card_lines(self, names, pc, meta, model_line, batching, choice) -> list[str]:
        r = meta[self.meta_section]
        io = ("inputs `question`, `context` (TYPE_STRING, [N] each) -> outputs `answer` (TYPE_STRING), `start`, `end` "
              "(INT64 char offsets into the context, end exclusive), `score` (FP32), [N] each.")
        if self.layout(pc) == "fused":
            return [
                f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: windowing, model and answer "
                f"picking in one process): {io}",
                f"- Inside: windows.make_windows (max_seq_len {meta['max_seq_len']}, doc_stride {r['doc_stride']}, "
                f"max_query_len {r['max_query_len']}), the {choice.precision} model from `{choice.form}` on all of a "
                f"request's windows in one call, spans.best_spans over each question's windows (max_answer_len "
                f"{r['max_answer_len']}).",
                self.batching_line(pc, "questions", fused=True),
            ]
        return [
            f"- Ensemble `{names.ensemble}`: {io}",
            f"- `{names.tokenizer}` (python): windows.make_windows, max_seq_len {meta['max_seq_len']}, doc_stride "
            f"{r['doc_stride']}, max_query_len {r['max_query_len']}; one question becomes one or more windows.",
            model_line,
            f"- `{names.postprocess}` (python): spans.best_spans over all windows of a question, max_answer_len {r['max_answer_len']}.",
            self.batching_line(pc, "questions", fused=False),
        ]


class UniversalExtraction(_Windowed):
    kind = TaskKind.UIE
    tokenizer_source, postprocess_source, fused_source = "uie_tokenizer.py", "uie_postprocess.py", "extractor.py"
    tokenizer_pure = ("wordpiece.py", "reading/windows.py")
    postprocess_pure = ("extraction/spans.py",)
    fusable = True
    meta_section = "uie"
    describes = "schema-prompted information extractor (UIE)"
    client_example = "ie --model {task} --schema 姓名 --schema 公司 '浙商银行企业信贷部叶老桂博士'"

    def fused_model(self, pc: PackageConfig) -> str | None:
        return "uie_fastdeploy.py" if self.one_model(pc) else self.fused_source

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(uie_requests.__file__)]  # the request checks, shared with the fused models

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [Path(uie_requests.__file__), *super().postprocess_helpers(pc)]  # the answer rows

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        u = meta.get(self.meta_section, {})
        return {"doc_stride": int(u.get("doc_stride", 0)), "max_prompt_len": int(u.get("max_prompt_len", 0)),
                "position_prob": float(u.get("position_prob", 0.5)), "max_span_len": int(u.get("max_span_len", 0)),
                "schema": tuple(u.get("schema", ()))}

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        if self.one_model(pc):
            return (mcfg.uie_fastdeploy_config(shape, pc),)
        return (mcfg.uie_fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (mcfg.uie_ensemble_config(shape, pc), mcfg.uie_tokenizer_config(shape, pc),
                mcfg.model_config(shape, mcfg.windowed_package(pc), self.token_level), mcfg.uie_postprocess_config(shape, pc))

    def card_lines(self, names, pc, meta, model_line, batching, choice) -> list[str]:
        u = meta[self.meta_section]
        io = (f"inputs `text` [N] and `schema` [P] (TYPE_STRING: texts, and prompts such as "
              f"{'、'.join(u.get('schema', [])[:3]) or '姓名'}) -> output `results` [N, P] (TYPE_STRING: per text and prompt a JSON "
              "list of {\"text\", \"start\", \"end\", \"probability\"}, char offsets, end exclusive).")
        if self.layout(pc) == "fused":
            return [
                f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: windowing, model and decoding "
                f"in one process): {io}",
                f"- Inside: every text x every prompt, windows.make_windows (max_seq_len {meta['max_seq_len']}, doc_stride "
                f"{u['doc_stride']}, prompts of at most {u['max_prompt_len']} tokens), the {choice.precision} model from "
                f"`{choice.form}` on all of a request's windows in one call, spans.decode_spans (start/end sigmoid >= "
                f"{u['position_prob']}, spans of at most {u['max_span_len']} tokens).",
                self.batching_line(pc, "texts", fused=True),
            ]
        return [
            f"- Ensemble `{names.ensemble}`: {io}",
            f"- `{names.tokenizer}` (python): every text x every prompt, windows.make_windows, max_seq_len {meta['max_seq_len']}, "
            f"doc_stride {u['doc_stride']}, prompts of at most {u['max_prompt_len']} tokens.",
            model_line,
            f"- `{names.postprocess}` (python): spans.decode_spans (start/end sigmoid >= {u['position_prob']}, UIE's pairing, "
            f"spans of at most {u['max_span_len']} tokens) over all windows of a pair.",
            self.batching_line(pc, "texts", fused=False),
        ]

    def fastdeploy_card_lines(self, names, pc, meta, engine) -> list[str]:
        u = meta[self.meta_section]
        return [
            f"- `{names.ensemble}` (python, FastDeploy's UIE serving interface, max_batch_size 1): inputs `INPUT_0` (a JSON "
            "list of texts) and `INPUT_1` (a JSON schema: prompts, {prompt: [child prompts]} for relations, or [] for the "
            "schema sent last), TYPE_STRING [1, 1] -> `OUTPUT_0` [N]: per text the Python literal of {prompt: [{'start', "
            "'end', 'probability', 'text'[, 'relation']}]}, as FastDeploy's grpc_client.py reads it (ast.literal_eval).",
            f"- Inside: WordPiece windows (max_seq_len {meta['max_seq_len']}, doc_stride {u['doc_stride']}, prompts of at "
            f"most {u['max_prompt_len']} tokens), {engine} in-process, spans.decode_spans (>= {u['position_prob']}).",
            f"- {pc.instances} {pc.kind} instance(s), {pc.engine_threads} engine thread(s) each; the schema sent last is "
            "remembered per instance, as FastDeploy's UIEModel.set_schema.",
        ]


KINDS: dict[str, BundleKind] = kind_table((Classification(), TokenClassification(), ReadingComprehension(),
                                           UniversalExtraction()), "serving/bundle/kinds.py")


def fused_kinds() -> str:
    """The kinds with a fused layout of their own, for messages ("classification, token_classification or uie")."""
    names = [k.name for k in KINDS.values() if k.fusable]
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def bundle_kind(task_type: str | TaskKind) -> BundleKind:
    """The kind object of a meta.json / bundle.json ``task_type`` (a TaskKind value)."""
    return lookup_kind(KINDS, task_type, _config_error)


def all_configs(shape: BundleShape, pc: PackageConfig) -> dict:
    """Every Triton model config of the bundle, by model name (``BundleShape.task_type`` picks the kind)."""
    return {c.name: c for c in bundle_kind(shape.task_type).configs(shape, pc)}
