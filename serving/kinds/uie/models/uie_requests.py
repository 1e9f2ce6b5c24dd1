"""What a served UIE request is, for every python model that reads one: the ensemble's pre-processing
(``uie_tokenizer.py``), layout fused's ``extractor.py`` and FastDeploy's ``uie`` (``uie_fastdeploy.py``) check texts
and prompts here; the two one-model forms run windows -> engine -> spans here; our two answering models build their
``results`` rows here.  So each refusal, the extraction and each answer are spelled once.  numpy only; copied beside
those models (``serving/kinds/uie/bundle.py``) and loaded with ``model_support.sibling``.
"""

import json

import numpy as np


def prompt_problem(tok, prompt: str, max_prompt_len: int, name: str):
    """Why ``prompt`` cannot be asked (None: it can): no tokens, or more than ``max_prompt_len`` (cutting a prompt
    would ask another question).  ``name`` says which one, as the refusal should ("schema item 2")."""
    n = len(tok.encode(prompt, add_special_tokens=False).ids)
    if not n:
        return f"{name} is empty"
    if n > max_prompt_len:
        return f"{name} is {n} tokens, over the bundle's max_prompt_len {max_prompt_len}"
    return None


def windowing_setup(model, params: dict) -> None:
    """What a model that checks and windows requests reads of its parameters: the text checks and WordPiece, the
    windows' stride and the longest prompt."""
    model.text_setup(params)  # no truncation, no padding: make_windows does both
    model.doc_stride = int(params["doc_stride"])
    model.max_prompt_len = int(params["max_prompt_len"])


def setup(model, params: dict) -> None:
    """A one-model form's windowing and decoding settings, and its engine (``model.runner_engine``)."""
    windowing_setup(model, params)
    model.position_prob = float(params["position_prob"])
    model.max_span_len = int(params["max_span_len"])
    model.engine = model.runner_engine(params)


def extract(model, prompts, contents) -> list:
    """The spans of each (prompt, content) pair, in the offline evaluation's code: ``windows.make_windows``, all
    windows in one engine call, ``spans.decode_spans`` over each pair's windows."""
    wins = model.windows.make_windows(model.tok, prompts, contents, max_seq_len=model.max_seq_len,
                                      doc_stride=model.doc_stride, max_query_len=model.max_prompt_len)
    ids, types = model.windows.pad_windows(wins, model.pad_id)
    logits = np.asarray(model.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
    return model.spans.decode_spans(list(logits), wins, contents, position_prob=model.position_prob,
                                    max_span_len=model.max_span_len)


def texts_and_schema(model, raw_texts, raw_schema):
    """A request's ``text`` [N] and ``schema`` [P] items checked and decoded: (texts, prompts).  ``model`` is the
    python model reading them (its ``texts``, ``tok``, ``max_items``, ``max_prompt_len`` and ``text_input``).
    Refused (``text_input.BadText``): no text or no prompt, more than ``max_items`` texts, non-UTF-8, an empty text
    or prompt, a text over ``max_text_bytes``, a prompt over ``max_prompt_len`` tokens, a repeated prompt."""
    bad = model.text_input.BadText
    if not len(raw_texts):
        raise bad("no texts in the request")
    if not len(raw_schema):
        raise bad("no prompts in the schema: send one or more, e.g. 姓名")
    if model.max_items and len(raw_texts) > model.max_items:
        raise bad(f"{len(raw_texts)} texts in one request, over the limit of {model.max_items} (max_batch_size)")
    texts = model.texts(raw_texts, "text")
    schema = [prompt.strip() for prompt in model.texts(raw_schema, "schema")]
    if len(set(schema)) != len(schema):
        raise bad("schema: a prompt is repeated")
    for j, prompt in enumerate(schema):
        problem = prompt_problem(model.tok, prompt, model.max_prompt_len, f"schema item {j}")
        if problem:
            raise bad(problem)
    return texts, schema


def pairs(texts, schema):
    """(prompts, contents) of every (text, prompt) pair in the served order: text n, prompt p -> pair n * P + p."""
    return [p for _ in texts for p in schema], [t for t in texts for _ in schema]


def results(found, n_texts: int, n_prompts: int) -> np.ndarray:
    """``results`` [N, P]: per text and prompt a JSON list of {"text", "start", "end", "probability"} (the spans
    ``spans.decode_spans`` found for pair n * P + p)."""
    rows = [json.dumps([s.as_dict() for s in spans], ensure_ascii=False).encode("utf-8") for spans in found]
    return np.array(rows, dtype=np.object_).reshape(n_texts, n_prompts)
