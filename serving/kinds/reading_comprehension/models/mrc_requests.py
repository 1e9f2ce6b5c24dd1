"""What a served reading-comprehension request is, for every python model that reads one: the ensemble's
pre-processing (``mrc_tokenizer.py``) and layout fused's ``reader.py`` check questions and contexts here; the fused
model runs windows -> engine -> best spans here; both answering models build their four outputs here.  So each
refusal, the reading and each answer are spelled once.  numpy only; copied beside those models
(``serving/kinds/reading_comprehension/bundle.py``) and loaded with ``model_support.sibling``.
"""

import numpy as np


def windowing_setup(model, params: dict) -> None:
    """What a model that checks and windows requests reads of its parameters: the text checks and WordPiece, the
    windows' stride and the longest question kept."""
    model.text_setup(params)  # no truncation, no padding: make_windows slices and pads itself
    model.doc_stride = int(params["doc_stride"])
    model.max_query_len = int(params["max_query_len"])
    model.truncates = True  # a question over max_query_len tokens is cut (counted on /metrics)


def decoding_setup(model, params: dict) -> None:
    """What a model that picks the answers reads: the longest answer in tokens, the starts and ends paired."""
    model.max_answer_len = int(params["max_answer_len"])
    model.n_best = int(params.get("n_best", "20"))


def setup(model, params: dict) -> None:
    """The one-model form's windowing and decoding settings, and its engine (``model.runner_engine``)."""
    windowing_setup(model, params)
    decoding_setup(model, params)
    model.engine = model.runner_engine(params)


def questions_and_contexts(model, raw_questions, raw_contexts):
    """A request's ``question`` [N] and ``context`` [N] items checked and decoded: (questions, contexts).  ``model``
    is the python model reading them (its ``texts``, ``max_items`` and ``text_input``).  Refused
    (``text_input.BadText``): counts that differ, no question, more than ``max_items`` pairs, non-UTF-8, an empty
    question or context, an item over ``max_text_bytes``."""
    bad = model.text_input.BadText
    if len(raw_questions) != len(raw_contexts):
        raise bad(f"{len(raw_questions)} questions but {len(raw_contexts)} contexts: send one context per question")
    if not len(raw_questions):
        raise bad("no questions in the request")
    if model.max_items and len(raw_questions) > model.max_items:
        raise bad(f"{len(raw_questions)} questions in one request, over the limit of {model.max_items} (max_batch_size)")
    return model.texts(raw_questions, "question"), model.texts(raw_contexts, "context")


def make_windows(model, questions, contexts) -> list:
    """Every question's ``[CLS] question [SEP] context_slice [SEP]`` windows (``windows.make_windows``); the questions
    cut to ``max_query_len`` are counted (``ernie_bundle_truncated_items_total``)."""
    wins = model.windows.make_windows(model.tok, questions, contexts, max_seq_len=model.max_seq_len,
                                      doc_stride=model.doc_stride, max_query_len=model.max_query_len)
    model.metrics.count("truncated", model.windows.questions_cut(wins))
    return wins


def read(model, questions, contexts) -> list:
    """The best span of each question, in the offline evaluation's code: its windows, all of a request's windows
    in one engine call, ``spans.best_spans`` over each question's windows."""
    wins = make_windows(model, questions, contexts)
    ids, types = model.windows.pad_windows(wins, model.pad_id)
    logits = np.asarray(model.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
    return model.spans.best_spans(list(logits), wins, contexts, max_answer_len=model.max_answer_len, n_best=model.n_best)


def answers(found) -> dict:
    """The outputs per question: ``answer`` (text), ``start``/``end`` (char offsets into the context, end exclusive)
    and ``score`` (start + end logit); a question with no valid span answers "", -1, -1, -inf."""
    n = len(found)
    return {"answer": np.array([(s.text if s else "").encode("utf-8") for s in found], dtype=np.object_).reshape(n),
            "start": np.array([s.start if s else -1 for s in found], dtype=np.int64).reshape(n),
            "end": np.array([s.end if s else -1 for s in found], dtype=np.int64).reshape(n),
            "score": np.array([s.score if s else -np.inf for s in found], dtype=np.float32).reshape(n)}
