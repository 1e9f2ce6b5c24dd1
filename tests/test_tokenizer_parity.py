"""The tokenizer gives PaddleNLP's ids: PaddleNLP's own ErnieTokenizer / BertTokenizer are the oracle.

The pinned strings are the TNEWS dev titles on which HF's BertWordPieceTokenizer (used before) disagreed
with PaddleNLP (22 of 10,000; ``scripts/tokenizer_parity.py`` counts every dev example of tnews, cluener and
cmrc2018), plus the classes of text behind them.
"""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

import pipeline  # noqa: F401  (numpy before paddle)
from pipeline import wordpiece
from pipeline.labeling.bio import encode_token
from pipeline.tokenizer import Tokenizer, build_char_vocab

# Titles where the old tokenizer gave other ids than PaddleNLP (fullwidth bar, times sign, degree sign).
PINNED = ["广州｜D2 神奇动物在哪里？", "在英国全班只有我算出7×9，但为何我笑不出来？", "夏日平均气温为17.4℃，非常凉爽！",
          "汉军V5｜武汉卓尔，从胜利走向胜利！"]
HARD = [
    "约16100＄的票房", "a²b ³ º 〇号 µm Øre", "Café naïve ÉCOLE", "１２３ＡＢＣ ｄｏｔａ", "e=mc^2 $5+3 ^_^ ~x|y",
    "tab\there\nnew\rline\u3000ideographic space", "zero\u200bwidth soft\u00adhyphen ctrl\x07bell", "😀 emoji ©®™ ♥",
    "ひらがな カタカナ русский ελληνικά", "[UNK] [CLS] 字面 [sep] [MASK]x", "x" * 120 + " long word",
    "  leading and trailing  ", "石田三成（いしだ みつなり）", "𠀀𪜀 rare CJK extension",
]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    texts = PINNED + HARD
    vocab = build_char_vocab(texts * 2)
    # continuation forms the old pre-tokenizer needed, so both tokenizers can spell every word
    extra = ["##" + c for t in texts for c in t if not c.isspace()] + ["d2", "##5", "co", "##de"]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(vocab + extra)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=["ErnieTokenizer", "BertTokenizer"])
def oracle(request, vocab_file):
    """PaddleNLP's tokenizer as a user gets it, ``AutoTokenizer.from_pretrained(model_dir)`` (constructed
    directly, it would not keep literal "[CLS]" etc. whole)."""
    import json
    import shutil

    from paddlenlp.transformers import AutoTokenizer

    model_dir = vocab_file.parent / request.param
    model_dir.mkdir(exist_ok=True)
    shutil.copyfile(vocab_file, model_dir / "vocab.txt")
    config = {"do_lower_case": True, "tokenizer_class": request.param}
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert type(tok).__name__ == request.param
    return tok


def paddle_body(oracle, text: str) -> list[int]:
    return oracle(text, add_special_tokens=False)["input_ids"]


def test_pinned_titles_give_paddlenlp_ids_and_the_old_tokenizer_did_not(vocab_file, oracle):
    ours = wordpiece.build(vocab_file)
    old = BertWordPieceTokenizer(str(vocab_file), lowercase=True, handle_chinese_chars=True)
    for text in PINNED:
        want = paddle_body(oracle, text)
        assert ours.encode(text, add_special_tokens=False).ids == want, text
        assert old.encode(text, add_special_tokens=False).ids != want, text  # the oracle sees the bug


def test_symbols_are_split_as_paddlenlp_splits_them(vocab_file, oracle):
    tokens = wordpiece.build(vocab_file).encode("广州｜D2 7×9 17.4℃", add_special_tokens=False).tokens
    assert tokens == oracle.tokenize("广州｜D2 7×9 17.4℃")
    assert tokens[2:4] == ["｜", "d2"] and "×" in tokens and "℃" in tokens


@pytest.mark.parametrize("text", HARD)
def test_hard_text_gives_paddlenlp_ids(vocab_file, oracle, text):
    assert wordpiece.build(vocab_file).encode(text, add_special_tokens=False).ids == paddle_body(oracle, text)


def test_single_text_truncation_and_specials(vocab_file, oracle):
    tok = Tokenizer(vocab_file, max_seq_len=8)
    enc = tok.encode(PINNED)
    for row, text in enumerate(PINNED):
        want = oracle(text, max_length=8, truncation=True)["input_ids"]
        assert enc.input_ids[row, : enc.lengths[row]].tolist() == want
        assert (enc.input_ids[row, enc.lengths[row]:] == tok.pad_id).all()
    # the texts cut (what validate counts on dev and the served model on /metrics): those with over 6 tokens
    assert enc.truncated == sum(len(paddle_body(oracle, t)) > 6 for t in PINNED) > 0


@pytest.mark.parametrize("max_len", [7, 9, 12, 64])
def test_pairs_are_cut_like_paddlenlp_longest_first(vocab_file, oracle, max_len):
    """HF's own longest_first balances the two sides differently: (3, 6) tokens cut to 4 is (2, 2) in
    PaddleNLP, (3, 1) in HF."""
    tok = Tokenizer(vocab_file, max_seq_len=max_len)
    firsts = ["问题是", "夏日平均气温", "广州｜D2 神奇动物在哪里？", "a", "在英国全班只有我算出7×9"]
    seconds = ["上下文很长的", "非常凉爽", "x", "汉军V5｜武汉卓尔，从胜利走向胜利！", "在英国全班只有我算出7×9"]
    enc = tok.encode(firsts, seconds)
    for row, (a, b) in enumerate(zip(firsts, seconds)):
        want = oracle(a, b, max_length=max_len, truncation=True)
        n = enc.lengths[row]
        assert enc.input_ids[row, :n].tolist() == want["input_ids"], (a, b)
        assert enc.token_type_ids[row, :n].tolist() == want["token_type_ids"], (a, b)
    cut = sum(len(paddle_body(oracle, a)) + len(paddle_body(oracle, b)) > max_len - 3 for a, b in zip(firsts, seconds))
    assert enc.truncated == cut and (cut == 0) == (max_len == 64)


def test_truncate_pair_rule():
    assert wordpiece.truncate_pair(3, 6, 4) == (2, 2)
    assert wordpiece.truncate_pair(10, 10, 7) == (4, 3)
    assert wordpiece.truncate_pair(2, 3, 10) == (2, 3)
    assert wordpiece.truncate_pair(0, 9, 4) == (0, 4)


def test_ner_offsets_equal_paddlenlp_offsets(vocab_file, oracle):
    """Char offsets (what entity spans are cut at) equal PaddleNLP's, except where PaddleNLP starts an
    [UNK] that follows whitespace at the whitespace: ours start at the character itself."""
    ours = wordpiece.build(vocab_file)
    for text in PINNED + ["Café naïve ÉCOLE", "１２３ＡＢＣ ｄｏｔａ", "a²b ³ º 〇号"]:
        got = encode_token(ours, text, 128)
        want = oracle(text, max_length=128, truncation=True, return_offsets_mapping=True)
        assert got.input_ids.tolist() == want["input_ids"], text
        assert got.offsets[1:-1].tolist() == [list(o) for o in want["offset_mapping"][1:-1]], text
    unk_text = "有 ⿰字"  # ⿰ (an ideographic description character) is in no vocabulary
    got = encode_token(ours, unk_text, 128)
    unk = ours.token_to_id("[UNK]")
    (pos,) = np.flatnonzero(got.input_ids == unk)
    start, end = got.offsets[pos]
    assert unk_text[start:end] == "⿰"
    paddle_start, paddle_end = oracle(unk_text, return_offsets_mapping=True)["offset_mapping"][pos]
    assert unk_text[paddle_start:paddle_end] == " ⿰"  # the deviation kept: PaddleNLP's span takes the space


def test_vocab_without_special_tokens_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab.txt: vocabulary has no \[UNK\], \[CLS\], \[SEP\], \[PAD\]"):
        wordpiece.build(path)
