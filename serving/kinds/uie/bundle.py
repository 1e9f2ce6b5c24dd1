"""The bundle side of UIE (texts x schema prompts -> spans), FastDeploy's one-model uie included."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import PythonModels, WindowedCard, WindowedKind
from serving.bundle.model_config import BundleShape

SCHEMA, RESULTS = "schema", "results"


class UniversalExtraction(WindowedKind):
    kind = TaskKind.UIE
    files = PythonModels("uie_tokenizer.py", "uie_postprocess.py", "extractor.py",
                         tokenizer_pure=("wordpiece.py", "reading/windows.py"), postprocess_pure=("extraction/spans.py",))
    meta_section = "uie"
    describes = "schema-prompted information extractor (UIE)"
    client_example = "ie --model {task} --schema 姓名 --schema 公司 '浙商银行企业信贷部叶老桂博士'"
    fastdeploy = fd.Example("uie", "grpc_client.py", one_model=True)
    meta_keys = ("doc_stride", "max_prompt_len", "max_span_len")
    inputs = to_post = (mcfg.TEXT, SCHEMA)
    requests_helper = "uie_requests.py"

    def fused_model(self, pc: PackageConfig) -> str | None:
        return "uie_fastdeploy.py" if self.one_model(pc) else self.files.fused

    def meta_problem(self, meta: dict) -> str | None:
        problem = super().meta_problem(meta)
        prob = None if problem else meta[self.meta_section].get("position_prob")
        if problem is None and (isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0 < prob < 1):
            return f"{self.meta_section}.position_prob must be in (0, 1), got {prob!r}"
        return problem

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        u = meta.get(self.meta_section, {})
        return {**super().shape_fields(meta), "position_prob": float(u.get("position_prob", 0.5)),
                "schema": tuple(u.get("schema", ()))}

    def outputs(self, pc0: PackageConfig) -> list[mc.ModelOutput]:
        return [mcfg.output_tensor(RESULTS, mc.TYPE_STRING, [-1], pc0)]

    def decode_params(self, shape: BundleShape) -> dict[str, Any]:
        return {"position_prob": shape.settings["position_prob"], "max_span_len": shape.settings["max_span_len"]}

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        if self.one_model(pc):
            return (self.fastdeploy_config(shape, pc),)
        return super().fused_configs(shape, pc)

    def fastdeploy_config(self, shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
        """package.api fastdeploy: FastDeploy's ``uie``, one python model (max_batch_size 1, INPUT_0 / INPUT_1 ->
        OUTPUT_0, dims [1]) that windows, runs the engine in-process and decodes; a relation schema needs the spans of
        one level before it can ask the next, which an ensemble cannot loop over."""
        names = mcfg.ModelNames(shape.task, fused=True)
        pc1 = dataclasses.replace(pc, max_batch_size=fd.UIE_MAX_BATCH_SIZE, preferred_batch_size=1)
        cfg = mc.ModelConfig(name=names.ensemble, backend="python")
        cfg.input.extend([mcfg.input_tensor(fd.UIE_TEXTS, mc.TYPE_STRING, [1], pc1),
                          mcfg.input_tensor(fd.UIE_SCHEMA, mc.TYPE_STRING, [1], pc1)])
        cfg.output.append(mcfg.output_tensor(fd.UIE_RESULTS, mc.TYPE_STRING, [1], pc1))
        mcfg.schedule(cfg, pc1)
        cfg.ClearField("dynamic_batching")  # as FastDeploy's: one request at a time (nothing to merge at batch size 1)
        self.all_steps(cfg, shape, pc)
        mcfg.param(cfg, "schema", json.dumps(list(shape.settings["schema"]), ensure_ascii=False))
        return cfg

    def card(self, meta: dict) -> WindowedCard:
        u = meta[self.meta_section]
        return WindowedCard(
            io=(f"inputs `text` [N] and `schema` [P] (TYPE_STRING: texts, and prompts such as "
                f"{'、'.join(u.get('schema', [])[:3]) or '姓名'}) -> output `results` [N, P] (TYPE_STRING: per text and prompt "
                "a JSON list of {\"text\", \"start\", \"end\", \"probability\"}, char offsets, end exclusive)."),
            items="texts", post_step="decoding",
            windowing=(f"every text x every prompt, windows.make_windows (max_seq_len {meta['max_seq_len']}, doc_stride "
                       f"{u['doc_stride']}, prompts of at most {u['max_prompt_len']} tokens)"),
            decoding=(f"spans.decode_spans over all windows of a (text, prompt) pair (start/end sigmoid >= "
                      f"{u['position_prob']}, UIE's pairing, spans of at most {u['max_span_len']} tokens)"))

    def fastdeploy_card_lines(self, names, pc, meta, engine) -> list[str]:
        u = meta[self.meta_section]
        return [
            f"- `{names.ensemble}` (python, FastDeploy's UIE serving interface, max_batch_size 1): inputs `INPUT_0` (a JSON "
            "list of texts) and `INPUT_1` (a JSON schema: prompts, {prompt: [child prompts]} for relations, or [] for the "
            "schema sent last), TYPE_STRING [1, 1] -> `OUTPUT_0` [N]: per text the Python literal of {prompt: [{'start', "
            "'end', 'probability', 'text'[, 'relation']}]}, as FastDeploy's grpc_client.py reads it (ast.literal_eval).",
            f"- Inside: WordPiece windows (max_seq_len {meta['max_seq_len']}, doc_stride {u['doc_stride']}, prompts of at "
            f"most {u['max_prompt_len']} tokens), {engine} in-process, spans.decode_spans (>= {u['position_prob']}).",
            f"- {pc.instances} {pc.device} instance(s), {pc.engine_threads} engine thread(s) each; the schema sent last is "
            "remembered per instance, as FastDeploy's UIEModel.set_schema.",
        ]


KIND = UniversalExtraction()  # what serving.bundle.kinds finds in the kind folder's bundle.py
