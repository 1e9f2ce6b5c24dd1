"""The bundle side of extractive reading comprehension (question, context -> answer span)."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.kinds.base import PythonModels, WindowedCard, WindowedKind
from serving.bundle.model_config import BundleShape

QUESTION, CONTEXT = "question", "context"
ANSWER, START, END, SCORE = "answer", "start", "end", "score"
N_BEST = 20  # start and end candidates per window the post-processing pairs up


class ReadingComprehension(WindowedKind):
    kind = TaskKind.READING_COMPREHENSION
    files = PythonModels("mrc_tokenizer.py", "mrc_postprocess.py", "reader.py",
                         tokenizer_pure=("wordpiece.py", "reading/windows.py"), postprocess_pure=("reading/spans.py",))
    meta_section = "reading"
    meta_keys = ("doc_stride", "max_query_len", "max_answer_len")
    inputs, to_post = (QUESTION, CONTEXT), (CONTEXT,)
    requests_helper = "mrc_requests.py"
    describes = "extractive reading comprehension model"
    client_example = "answer --model {task} --question '谁发明了造纸术？' --context '蔡伦改进了造纸术。'"

    def outputs(self, pc0: PackageConfig) -> list[mc.ModelOutput]:
        return [mcfg.output_tensor(ANSWER, mc.TYPE_STRING, [], pc0), mcfg.output_tensor(START, mc.TYPE_INT64, [], pc0),
                mcfg.output_tensor(END, mc.TYPE_INT64, [], pc0), mcfg.output_tensor(SCORE, mc.TYPE_FP32, [], pc0)]

    def decode_params(self, shape: BundleShape) -> dict[str, Any]:
        return {"max_answer_len": shape.settings["max_answer_len"], "n_best": N_BEST}

    def card(self, meta: dict) -> WindowedCard:
        r = meta[self.meta_section]
        return WindowedCard(
            io=("inputs `question`, `context` (TYPE_STRING, [N] each) -> outputs `answer` (TYPE_STRING), `start`, `end` "
                "(INT64 char offsets into the context, end exclusive), `score` (FP32), [N] each."),
            items="questions", post_step="answer picking",
            windowing=(f"windows.make_windows (max_seq_len {meta['max_seq_len']}, doc_stride {r['doc_stride']}, "
                       f"max_query_len {r['max_query_len']}; a question becomes one or more windows)"),
            decoding=f"spans.best_spans over each question's windows (max_answer_len {r['max_answer_len']})")


KIND = ReadingComprehension()  # what serving.bundle.kinds finds in the kind folder's bundle.py
