"""The bundle side of UIE (texts x schema prompts -> spans), FastDeploy's one-model uie included."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import WindowedKind
from serving.bundle.model_config import BundleShape

SCHEMA, RESULTS = "schema", "results"


class UniversalExtraction(WindowedKind):
    kind = TaskKind.UIE
    tokenizer_source, postprocess_source, fused_source = "uie_tokenizer.py", "uie_postprocess.py", "extractor.py"
    tokenizer_pure = ("wordpiece.py", "reading/windows.py")
    postprocess_pure = ("extraction/spans.py",)
    fusable = True
    meta_section = "uie"
    describes = "schema-prompted information extractor (UIE)"
    client_example = "ie --model {task} --schema 姓名 --schema 公司 '浙商银行企业信贷部叶老桂博士'"
    fastdeploy = fd.Example("uie", "grpc_client.py", one_model=True)
    meta_keys = ("doc_stride", "max_prompt_len", "max_span_len")

    def fused_model(self, pc: PackageConfig) -> str | None:
        return "uie_fastdeploy.py" if self.one_model(pc) else self.fused_source

    def meta_problem(self, meta: dict) -> str | None:
        problem = super().meta_problem(meta)
        prob = None if problem else meta[self.meta_section].get("position_prob")
        if problem is None and (isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0 < prob < 1):
            return f"{self.meta_section}.position_prob must be in (0, 1), got {prob!r}"
        return problem

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / "uie_requests.py"]  # the request checks, shared with the fused models

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / "uie_requests.py", *super().postprocess_helpers(pc)]  # the answer rows

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        u = meta.get(self.meta_section, {})
        return {"doc_stride": int(u.get("doc_stride", 0)), "max_prompt_len": int(u.get("max_prompt_len", 0)),
                "position_prob": float(u.get("position_prob", 0.5)), "max_span_len": int(u.get("max_span_len", 0)),
                "schema": tuple(u.get("schema", ()))}

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        if self.one_model(pc):
            return (fastdeploy_config(shape, pc),)
        return (fused_config(shape, pc),)

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (ensemble_config(shape, pc), tokenizer_config(shape, pc),
                mcfg.model_config(shape, mcfg.windowed_package(pc), self.token_level), postprocess_config(shape, pc))

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


# -- its Triton configs (serving/bundle/model_config.py: what every kind's share) ---------------------------


def tokenizer_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    # texts x prompts -> a varying number of windows: no Triton batching (see mcfg.windowed_package)
    return mcfg.windowing_tokenizer_config(shape, pc, (mcfg.TEXT, SCHEMA),
                                           {"max_prompt_len": shape.settings["max_prompt_len"]})


def postprocess_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    return mcfg.windowed_postprocess_config(shape, pc, (mcfg.TEXT, SCHEMA), _outputs(mcfg.windowed_package(pc)),
                                            {"position_prob": shape.settings["position_prob"],
                                             "max_span_len": shape.settings["max_span_len"]})


def _outputs(pc0: PackageConfig) -> list[mc.ModelOutput]:
    return [mcfg.output_tensor(RESULTS, mc.TYPE_STRING, [-1], pc0)]


def ensemble_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    return mcfg.windowed_ensemble_config(shape, pc, (mcfg.TEXT, SCHEMA), (mcfg.TEXT, SCHEMA),
                                         _outputs(mcfg.windowed_package(pc)))


def fastdeploy_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.api fastdeploy: FastDeploy's ``uie``, one python model (max_batch_size 1, INPUT_0 / INPUT_1 -> OUTPUT_0,
    dims [1]) that windows, runs the engine in-process and decodes; a relation schema needs the spans of one level
    before it can ask the next, which an ensemble cannot loop over."""
    names = mcfg.ModelNames(shape.task, fused=True)
    pc1 = dataclasses.replace(pc, max_batch_size=fd.UIE_MAX_BATCH_SIZE, preferred_batch_size=1)
    cfg = mc.ModelConfig(name=names.ensemble, backend="python")
    cfg.input.extend([mcfg.input_tensor(fd.UIE_TEXTS, mc.TYPE_STRING, [1], pc1), mcfg.input_tensor(fd.UIE_SCHEMA, mc.TYPE_STRING, [1], pc1)])
    cfg.output.append(mcfg.output_tensor(fd.UIE_RESULTS, mc.TYPE_STRING, [1], pc1))
    mcfg.schedule(cfg, pc1)
    cfg.ClearField("dynamic_batching")  # as FastDeploy's: one request at a time (nothing to merge at batch size 1)
    _steps(cfg, shape, pc)
    mcfg.param(cfg, "schema", json.dumps(list(shape.settings["schema"]), ensure_ascii=False))
    return cfg


def fused_config(shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
    """package.layout fused: the ensemble's inputs and output on one python model (``extractor.py``) that windows,
    runs the engine in-process and decodes; max_batch_size 0 as the ensemble's (windows per request vary)."""
    pc0 = mcfg.windowed_package(pc)
    cfg = mc.ModelConfig(name=mcfg.ModelNames(shape.task, fused=True).ensemble, backend="python")
    cfg.input.extend([mcfg.input_tensor(mcfg.TEXT, mc.TYPE_STRING, [], pc0), mcfg.input_tensor(SCHEMA, mc.TYPE_STRING, [], pc0)])
    cfg.output.append(mcfg.output_tensor(RESULTS, mc.TYPE_STRING, [-1], pc0))
    mcfg.schedule(cfg, pc0)
    _steps(cfg, shape, pc)
    return cfg


def _steps(cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig) -> None:
    """The parameters of a UIE model that runs all three steps: a fused model's, the windowing and the decoding."""
    mcfg.fused_steps(cfg, shape, pc)
    for key, value in (("doc_stride", shape.settings["doc_stride"]), ("max_prompt_len", shape.settings["max_prompt_len"]),
                       ("position_prob", shape.settings["position_prob"]), ("max_span_len", shape.settings["max_span_len"]),
                       ("max_items", pc.max_batch_size)):  # texts per request; 0: no limit
        mcfg.param(cfg, key, value)


KIND = UniversalExtraction()  # what serving.bundle.kinds finds in the kind folder's bundle.py
