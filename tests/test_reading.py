"""pipeline/reading: SQuAD reader, passage split, windows, span decoding and the CMRC2018 metric.

Real code on a tiny hand-written vocabulary (no shared data, no model): each CJK char is one token, so
char offsets and token indices are easy to reason about.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import wordpiece
from pipeline.errors import DataError
from pipeline.reading.metric import QAScores, cmrc_scores, mixed_segmentation, remove_punctuation
from pipeline.reading.spans import Span, best_spans
from pipeline.reading.squad import Answer, QAExample, read_squad, split_by_context
from pipeline.reading.windows import Window, make_windows, pad_windows

CJK = [chr(0x4E00 + k) for k in range(200)]  # 一丁丂七... one token each


def cjk(start: int, n: int) -> str:
    return "".join(CJK[start : start + n])


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    words = ["hello", "world", "34", "元", "价", "格", "ab", "cd", "##5"] + list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CJK, *words]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    return wordpiece.build(path)  # what the pipeline and the served bundle use


# ---------------------------------------------------------------- squad.py


def squad_file(tmp_path, paragraphs, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "v1.0", "data": [{"paragraphs": paragraphs}]}, ensure_ascii=False), "utf-8")
    return path


def qa(qid, question, *answers):
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}


def test_read_squad_good_file(tmp_path):
    context = "北京是中国的首都。上海是最大的城市。"
    path = squad_file(
        tmp_path,
        [
            {
                "id": "P0",
                "context": context,
                "qas": [qa("Q0", "首都是哪里？", ("北京", 0), ("北京", 0)), qa("Q1", "最大城市？", ("上海", 9))],
            }
        ],
    )
    split = read_squad(path)
    assert split.source == str(path)
    assert split.skipped == {}
    assert split.examples == (
        QAExample("Q0", "首都是哪里？", context, (Answer("北京", 0), Answer("北京", 0))),
        QAExample("Q1", "最大城市？", context, (Answer("上海", 9),)),
    )


def test_read_squad_repairs_and_counts_bad_questions(tmp_path):
    context = "甲乙丙甲乙丙丁"
    path = squad_file(
        tmp_path,
        [
            {
                "context": context,
                "qas": [
                    qa("blank", "  \n", ("甲乙", 0)),
                    qa("moved", "q1", ("甲乙", 4)),  # really at 0 and 3: the nearest is 3
                    qa("partly", "q2", ("戊", 2), ("丙丁", 5)),  # first answer is nowhere in the context
                    qa("none", "q3", ("戊", 0)),
                    qa("empty", "q4"),
                ],
            }
        ],
    )
    split = read_squad(path)
    assert [ex.id for ex in split.examples] == ["moved", "partly"]
    assert split.examples[0].answers == (Answer("甲乙", 3),)
    assert split.examples[1].answers == (Answer("丙丁", 5),)
    assert split.skipped == {"empty_question": 1, "answer_start_fixed": 1, "answer_not_in_context": 2, "no_answer": 2}


def test_read_squad_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(DataError, match="broken.json"):
        read_squad(path)
    with pytest.raises(DataError, match="missing.json"):
        read_squad(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "bad, expected",
    [
        ({"id": "Q7", "answers": []}, r"question Q7: missing key 'question'"),
        ({"id": "Q8", "question": "x"}, r"question Q8: missing key 'answers'"),
        ({"id": "Q9", "question": "x", "answers": [{"text": "甲"}]}, r"question Q9 answers\[0\]: missing key 'answer_start'"),
        ({"id": "Q10", "question": "x", "answers": [{"text": "甲", "answer_start": "0"}]}, r"question Q10 .*must be int"),
        ({"question": "x", "answers": []}, r"data\[0\]\.paragraphs\[0\]\.qas\[1\]: missing key 'id'"),
    ],
)
def test_read_squad_missing_keys_name_path_and_question(tmp_path, bad, expected):
    path = squad_file(tmp_path, [{"context": "甲乙", "qas": [qa("ok", "q", ("甲", 0)), bad]}])
    with pytest.raises(DataError, match=expected) as info:
        read_squad(path)
    assert str(path) in str(info.value)


def test_read_squad_missing_context_names_paragraph(tmp_path):
    path = squad_file(tmp_path, [{"qas": []}])
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[0\]: missing key 'context'"):
        read_squad(path)


def make_examples(n_contexts=20, per_context=3):
    return tuple(
        QAExample(f"C{c}_Q{q}", f"问{q}", cjk(c, 5), (Answer(CJK[c], 0),))
        for c in range(n_contexts)
        for q in range(per_context)
    )


def test_split_by_context_is_deterministic_and_keeps_passages_together():
    examples = make_examples()
    train, held = split_by_context(examples, 0.25, seed=42)
    assert split_by_context(examples, 0.25, seed=42) == (train, held)
    assert split_by_context(examples, 0.25, seed=7) != (train, held)  # the seed matters
    assert not {ex.context for ex in train} & {ex.context for ex in held}
    assert len({ex.context for ex in held}) == 5  # the fraction counts passages
    assert sorted(ex.id for ex in train + held) == sorted(ex.id for ex in examples)
    order = {ex.id: i for i, ex in enumerate(examples)}  # each side keeps the input order
    assert [order[ex.id] for ex in held] == sorted(order[ex.id] for ex in held)


def test_split_by_context_rejects_impossible_splits():
    with pytest.raises(ValueError):
        split_by_context(make_examples(), 1.0, seed=0)
    with pytest.raises(DataError, match="at least 2"):
        split_by_context(make_examples(n_contexts=1), 0.5, seed=0)
    train, held = split_by_context(make_examples(n_contexts=2), 0.01, seed=0)  # never an empty side
    assert len(train) == len(held) == 3


# ---------------------------------------------------------------- windows.py


def context_span(window: Window) -> tuple[int, int]:
    ctx = window.offsets[window.offsets[:, 0] >= 0]
    return int(ctx[0, 0]), int(ctx[-1, 1])


def test_windows_stride_overlap_and_coverage(tok):
    context = cjk(0, 50)
    windows = make_windows(tok, [cjk(100, 3)], [context], max_seq_len=20, doc_stride=5, max_query_len=64)
    # room = 20 - 3 - 3 = 14 context tokens; starts 0, 5, ..., 40 and the last one ends at the passage end.
    assert [context_span(w) for w in windows] == [(s, min(s + 14, 50)) for s in range(0, 41, 5)]
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    q_ids = tok.encode(cjk(100, 3), add_special_tokens=False).ids
    c_ids = tok.encode(context, add_special_tokens=False).ids
    for w in windows:
        assert w.example_index == 0 and w.input_ids.dtype == np.int64 and w.offsets.shape == (len(w.input_ids), 2)
        assert len(w.input_ids) <= 20
        s, e = context_span(w)
        assert w.input_ids.tolist() == [cls_id, *q_ids, sep_id, *c_ids[s:e], sep_id]
        assert w.token_type_ids.tolist() == [0] * 5 + [1] * (e - s + 1)
        assert (w.offsets[:5] == -1).all() and (w.offsets[-1] == -1).all()
        assert (w.start_position, w.end_position) == (0, 0)  # no answers given


def test_windows_short_context_is_one_window_and_stride_never_skips(tok):
    one = make_windows(tok, ["一"], [cjk(0, 4)], max_seq_len=32, doc_stride=8, max_query_len=8)
    assert len(one) == 1 and context_span(one[0]) == (0, 4)
    # A stride larger than the window must not leave context tokens out.
    wide = make_windows(tok, ["一"], [cjk(0, 30)], max_seq_len=14, doc_stride=100, max_query_len=8)
    assert [context_span(w) for w in wide] == [(0, 10), (10, 20), (20, 30)]


def test_windows_answer_positions(tok):
    context = cjk(0, 50)
    windows = make_windows(
        tok, ["问"], [context], max_seq_len=20, doc_stride=5, max_query_len=64, answers=[(14, 17)]
    )  # room 16: slices [0, 16), [5, 21), [10, 26), ...; the first cuts the answer's last char off
    inside = []
    for w in windows:
        s, e = context_span(w)
        if s <= 14 and 17 <= e:
            inside.append(s)
            assert w.offsets[w.start_position, 0] == 14 and w.offsets[w.end_position, 1] == 17
            assert w.input_ids[w.start_position] == tok.token_to_id(CJK[14])
        else:  # not in the window or cut by its edge
            assert (w.start_position, w.end_position) == (0, 0)
    assert inside == [5, 10]


def test_windows_answer_token_boundaries(tok):
    # "34" is one token: an answer starting inside it maps to that token; leading whitespace is skipped.
    context = "价格34元 ab cd"  # tokens 价 格 34 元 ab cd at chars 0 1 2-4 4 6-8 9-11
    answers = [(3, 5), (8, 11), (8, 9)]  # "4元"; " cd"; the bare space between ab and cd
    windows = make_windows(tok, ["问"] * 3, [context] * 3, max_seq_len=32, doc_stride=8, max_query_len=8, answers=answers)
    first, second, space = windows
    assert first.offsets[[first.start_position, first.end_position]].tolist() == [[2, 4], [4, 5]]
    assert second.offsets[[second.start_position, second.end_position]].tolist() == [[9, 11], [9, 11]]
    assert (space.start_position, space.end_position) == (0, 0)


def test_windows_question_truncation_and_token_types(tok):
    windows = make_windows(tok, [cjk(100, 20)], [cjk(0, 6)], max_seq_len=64, doc_stride=8, max_query_len=5)
    (w,) = windows
    q_ids = tok.encode(cjk(100, 5), add_special_tokens=False).ids
    assert w.input_ids[1:6].tolist() == q_ids and w.input_ids[6] == tok.token_to_id("[SEP]")
    assert w.token_type_ids.tolist() == [0] * 7 + [1] * 7
    assert len(w.input_ids) == 1 + 5 + 1 + 6 + 1


def test_windows_empty_context_and_bad_arguments(tok):
    (w,) = make_windows(tok, ["问"], [""], max_seq_len=16, doc_stride=4, max_query_len=8, answers=[None])
    assert len(w.input_ids) == 4 and (w.start_position, w.end_position) == (0, 0)
    with pytest.raises(ValueError, match="no room"):
        make_windows(tok, [cjk(0, 10)], ["一"], max_seq_len=12, doc_stride=4, max_query_len=10)
    tok.enable_truncation(8)
    try:
        with pytest.raises(ValueError, match="truncation"):
            make_windows(tok, ["问"], ["一"], max_seq_len=16, doc_stride=4, max_query_len=8)
    finally:
        tok.no_truncation()


def test_pad_windows(tok):
    windows = make_windows(tok, ["问", "问"], [cjk(0, 3), cjk(0, 6)], max_seq_len=32, doc_stride=8, max_query_len=8)
    ids, types = pad_windows(windows, pad_id=0)
    assert ids.shape == types.shape == (2, 10) and ids.dtype == types.dtype == np.int64
    assert ids[0, :7].tolist() == windows[0].input_ids.tolist() and (ids[0, 7:] == 0).all()
    assert types[0].tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert pad_windows([], pad_id=0)[0].shape == (0, 0)


# ---------------------------------------------------------------- spans.py


def token_at(window: Window, char: int, side: int = 0) -> int:
    """Index of the window token whose start (side 0) or end (side 1) is at this context char."""
    return int(np.nonzero(window.offsets[:, side] == char)[0][0])


def test_best_spans_picks_best_window_and_skips_question_tokens(tok):
    contexts = [cjk(0, 40), cjk(50, 8), ""]
    windows = make_windows(tok, [cjk(100, 4)] * 3, contexts, max_seq_len=24, doc_stride=6, max_query_len=8)
    logits = [np.zeros((24, 2), dtype=np.float32) for _ in windows]  # padded rows are ignored
    for lg, w in zip(logits, windows):  # huge scores on [CLS], the question and both [SEP]s: never chosen
        lg[:6] = 100.0
        lg[len(w.input_ids) - 1] = 100.0
    first = [k for k, w in enumerate(windows) if w.example_index == 0]
    for k, (s, e, value) in ((first[0], (2, 4, 1.0)), (first[-1], (30, 33, 2.0))):  # the later, better one wins
        logits[k][token_at(windows[k], s, 0), 0] = value
        logits[k][token_at(windows[k], e, 1), 1] = value
    (k1,) = [k for k, w in enumerate(windows) if w.example_index == 1]
    logits[k1][token_at(windows[k1], 1, 0), 0] = 0.5
    logits[k1][token_at(windows[k1], 3, 1), 1] = 0.5
    spans = best_spans(logits, windows, contexts, max_answer_len=10)
    assert spans[0] == Span(0, contexts[0][30:33], 30, 33, pytest.approx(4.0))
    assert spans[1] == Span(1, contexts[1][1:3], 1, 3, pytest.approx(1.0))
    assert spans[2] is None  # empty context: no valid span


def test_best_spans_length_limit_and_order(tok):
    contexts = [cjk(0, 12)]
    windows = make_windows(tok, ["问"], contexts, max_seq_len=32, doc_stride=8, max_query_len=8)
    (w,) = windows
    lg = np.full((len(w.input_ids), 2), -1e9)
    lg[[token_at(w, 0), token_at(w, 6), token_at(w, 10)], 0] = [5.0, 1.0, 50.0]  # 50: after every good end
    lg[[token_at(w, 7), token_at(w, 9)], 1] = [1.0, 5.0]
    found = {n: best_spans([lg], windows, contexts, max_answer_len=n)[0] for n in (10, 4, 3)}
    assert (found[10].start, found[10].end, found[10].text, found[10].score) == (0, 10, contexts[0][:10], 10.0)
    assert (found[4].start, found[4].end, found[4].score) == (6, 10, 6.0)
    assert (found[3].start, found[3].end, found[3].score) == (6, 8, 2.0)


def test_best_spans_pairs_only_the_n_best_starts_and_ends(tok):
    contexts = [cjk(0, 12)]
    windows = make_windows(tok, ["问"], contexts, max_seq_len=32, doc_stride=8, max_query_len=8)
    (w,) = windows
    lg = np.full((len(w.input_ids), 2), -1e9)
    lg[[token_at(w, 5), token_at(w, 1)], 0] = [10.0, 9.0]
    lg[[token_at(w, 3), token_at(w, 0)], 1] = [10.0, 9.0]
    assert best_spans([lg], windows, contexts, max_answer_len=30, n_best=1) == [None]  # (5, 3): start > end
    (span,) = best_spans([lg], windows, contexts, max_answer_len=30, n_best=2)
    assert (span.start, span.end, span.score) == (1, 4, 19.0)
    with pytest.raises(ValueError):
        best_spans([lg], windows, contexts[:0], max_answer_len=5)  # window of a missing example
    with pytest.raises(ValueError):
        best_spans([np.zeros((3, 2))], windows, contexts, max_answer_len=5)  # fewer rows than tokens


# ---------------------------------------------------------------- metric.py


def test_mixed_segmentation_and_punctuation():
    text = "《iPhone 6》发布于2014年"
    assert mixed_segmentation(text) == ["《", "iphone", "6", "》", "发", "布", "于", "2014", "年"]
    assert mixed_segmentation(text, rm_punc=True) == ["iphone", "6", "发", "布", "于", "2014", "年"]
    # Listed punctuation is dropped before segmenting, so it joins the run it sat in; other ASCII splits.
    assert mixed_segmentation("ω-force, 3.5 (1)", rm_punc=True) == ["ωforce", ",", "3.5", "(", "1", ")"]
    assert remove_punctuation(" 《战国：无双-3》！ ") == "战国无双3"


@pytest.mark.parametrize(
    "prediction, answers, em, f1",
    [
        ("北京大学", ["北京"], 0.0, 2 / 3),  # P 2/4, R 2/2
        ("iPhone 6发布于2014年", ["2014年"], 0.0, 4 / 9),  # 7 segments, LCS 2
        ("《战国无双3》", ["战国无双3"], 1.0, 1.0),
        ("ω-force", ["ωforce"], 1.0, 1.0),
        ("北京", ["上海", "北京市"], 0.0, 0.8),  # max over the gold answers
        ("北京上海", ["北上"], 0.0, 1 / 3),  # LCS is contiguous: 1, not 2
        ("the big apple", ["Big Apple"], 0.0, 0.8),
        ("NBA", ["nba"], 1.0, 1.0),
        ("(1)", ["1"], 0.0, 0.5),  # ASCII brackets are not in the official list
        ("好…", ["好"], 0.0, 2 / 3),  # the official "……" entry never matches one "…"
        ("", ["好"], 0.0, 0.0),
    ],
)
def test_cmrc_scores_single_question(prediction, answers, em, f1):
    scores = cmrc_scores([prediction], [answers])
    assert scores == QAScores(em=em, f1=pytest.approx(f1), count=1)


def test_cmrc_scores_averages_and_counts_unanswered():
    scores = cmrc_scores(["北京", None, "北京大学"], [["北京"], ["上海"], ["北京"]])
    assert scores.count == 3
    assert scores.em == pytest.approx(1 / 3)
    assert scores.f1 == pytest.approx((1 + 0 + 2 / 3) / 3)
    with pytest.raises(ValueError):
        cmrc_scores(["a"], [])
    with pytest.raises(ValueError):
        cmrc_scores(["a"], [[]])
