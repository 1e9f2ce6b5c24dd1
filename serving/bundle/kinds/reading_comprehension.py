"""The bundle side of extractive reading comprehension (question, context -> answer span)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.contract import TaskKind
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import WindowedKind
from serving.bundle.model_config import BundleShape
from serving.triton import mrc_requests


class ReadingComprehension(WindowedKind):
    kind = TaskKind.READING_COMPREHENSION
    tokenizer_source, postprocess_source, fused_source = "mrc_tokenizer.py", "mrc_postprocess.py", "reader.py"
    tokenizer_pure = ("wordpiece.py", "reading/windows.py")
    postprocess_pure = ("reading/spans.py",)
    fusable = True
    meta_section = "reading"
    meta_keys = ("doc_stride", "max_query_len", "max_answer_len")
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


KIND = ReadingComprehension()  # what serving.bundle.kinds finds in the module named after the kind
