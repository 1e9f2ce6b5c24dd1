"""Reading comprehension (MRC) in the serving tools: (question, context) pairs in, an answer span out (smoke:
CMRC2018 EM/F1, ``pipeline.reading.metric.cmrc_scores``, and every answer span equal to the offline one)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeline.contract import TaskKind
from serving.tools.kinds.base import ToolKind, Validated, validated

if TYPE_CHECKING:
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel, ModelOnly


@dataclass(frozen=True)
class SmokeResult:
    examples: int
    served_em: float  # CMRC2018 exact match (fraction)
    served_f1: float  # CMRC2018 character F1 (fraction)
    offline_em: float
    offline_f1: float
    mismatches: int  # questions whose served answer (text, start, end) differs from the offline one
    max_score_diff: float  # largest |served score - offline score| over questions with an answer
    validated: Validated

    @property
    def ok(self) -> bool:
        served = self.served_em if self.validated.metric == "em" else self.served_f1
        return (self.mismatches == 0 and (self.served_em, self.served_f1) == (self.offline_em, self.offline_f1)
                and self.validated.agrees(served))


def offline_answers(bundle: "BundleModel", questions: Sequence[str], contexts: Sequence[str], batch_size: int = 32,
                    threads: int = 0) -> list:
    """The best span (``pipeline.reading.spans.Span`` or None) per question: make_windows + pad_windows, the model, best_spans."""
    from pipeline.progress import progress
    from pipeline.reading import spans
    from serving.tools.offline import request_groups, windower

    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    window = windower(bundle, "reading", "max_query_len")
    run = bundle.session(threads)
    out: list = []
    for group in progress(request_groups(len(questions), batch_size), desc="offline model", unit="batch"):
        qs, cs = [questions[i] for i in group], [contexts[i] for i in group]
        wins, ids, types = window(qs, cs)
        logits = np.asarray(run(ids, types), dtype=np.float32)
        out.extend(spans.best_spans(list(logits), wins, cs,
                                    max_answer_len=int(bundle.manifest["reading"]["max_answer_len"])))
    return out


def question_batches(bundle: "BundleModel", pairs: Sequence[tuple[str, str]]) -> "ModelOnly":
    """Reading comprehension: each question's windows as one batch, what the served model executes per request
    (Triton does not batch them: windows per question vary)."""
    from serving.tools.offline import window_batches, windower

    return window_batches(bundle, windower(bundle, "reading", "max_query_len"), [([q], [c]) for q, c in pairs])


def run_smoke(bundle: "BundleModel", client: "BundleClient", examples: Sequence, batch_size: int = 32) -> SmokeResult:
    """``examples``: ``pipeline.reading.squad.QAExample`` (id, question, context, answers)."""
    from pipeline.progress import progress
    from pipeline.reading.metric import cmrc_scores

    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    served: list = []
    for start in progress(range(0, len(questions), batch_size), desc="served", unit="batch"):
        served.extend(client.answer_batch(questions[start : start + batch_size], contexts[start : start + batch_size]))
    offline = offline_answers(bundle, questions, contexts, batch_size)
    gold = [[a.text for a in e.answers] for e in examples]
    s = cmrc_scores([a.text for a in served], gold)
    o = cmrc_scores([sp.text if sp else "" for sp in offline], gold)
    mismatches, diff = 0, 0.0
    for a, sp in zip(served, offline):
        if (a.text, a.start, a.end) != ((sp.text, sp.start, sp.end) if sp else ("", -1, -1)):
            mismatches += 1
        elif sp is not None:
            diff = max(diff, abs(a.score - sp.score))
    return SmokeResult(examples=len(examples), served_em=s.em, served_f1=s.f1, offline_em=o.em, offline_f1=o.f1,
                       mismatches=mismatches, max_score_diff=diff,
                       validated=validated(bundle.manifest, len(examples), "questions"))


class ReadingComprehension(ToolKind):
    kind = TaskKind.READING_COMPREHENSION
    command = "answer"
    output = "answer"
    smoke = staticmethod(run_smoke)  # (bundle, client, dev examples, batch size): this module's smoke test
    windowed = True
    question_pairs = True
    # requests take 0.2-2 s: 5 s windows did not give perf_analyzer a stable measurement at concurrency 4 on CMRC2018
    perf_seconds = 10.0

    def items(self, examples: Sequence) -> list:
        return [(e.question, e.context) for e in examples]

    def ask(self, client, item):
        return client.answer_batch([item[0]], [item[1]])[0]

    def send(self, client, batch: Sequence) -> None:
        client.answer_batch([q for q, _ in batch], [c for _, c in batch])

    def answer_key(self, served) -> tuple:
        return (served.text, served.start, served.end)

    def offline_keys(self, bundle: "BundleModel", items: Sequence) -> list[tuple]:
        qs, cs = [q for q, _ in items], [c for _, c in items]
        return [(o.text, o.start, o.end) if o else ("", -1, -1) for o in offline_answers(bundle, qs, cs, batch_size=1)]

    def smoke_report(self, r: SmokeResult) -> tuple[str, str, str, str]:
        return (f"{r.examples} dev questions", f"EM {r.served_em:.4f}  F1 {r.served_f1:.4f}",
                f"EM {r.offline_em:.4f}  F1 {r.offline_f1:.4f}  (same model file, pipeline windows.py + spans.py)",
                f"answers differing: {r.mismatches}; max |score diff| {r.max_score_diff:.2e}")

    def perf_input(self, item) -> dict:
        q, c = item
        return {"question": {"content": [q], "shape": [1]}, "context": {"content": [c], "shape": [1]}}

    def model_only(self, bundle: "BundleModel", items: Sequence, items_per_request: int, alone: bool = False):
        # One request is one question; the model runs its windows as one batch (no Triton batching).
        return question_batches(bundle, items)

    def model_only_batch(self, bundle: "BundleModel", items_per_request: int) -> str:
        return "one question's windows"

    def print_served(self, client, pairs, args) -> None:
        questions, contexts = pairs
        for a in client.answer(questions, contexts, args.batch_size):
            if args.json:
                print(json.dumps(asdict(a), ensure_ascii=False))
            else:
                print(f"{a.text or '-'}\t[{a.start},{a.end})\t{a.score:.3f}\t{a.question}")


KIND = ReadingComprehension()  # what serving.tools.kinds finds in the kind folder's tools.py
