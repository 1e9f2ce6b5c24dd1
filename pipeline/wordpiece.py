"""PaddleNLP's BERT/ERNIE WordPiece, built from HF ``tokenizers``' Rust parts (fast, and it gives char offsets).

A model fine-tuned with PaddleNLP saw the ids of ``BertTokenizer``/``ErnieTokenizer`` (``BasicTokenizer`` +
``WordpieceTokenizer``).  HF's ``BertWordPieceTokenizer`` is the same algorithm except for three rules; the
first changed the ids of 22 of 10,000 TNEWS dev titles, the last those of 79 of 3,219 CMRC pairs cut at 64:

* PaddleNLP's ``_run_split_on_punc`` isolates **symbols** (Unicode category S*, plus ``²``, ``º``, ``〇``,
  ``µ``, ``Ø``, ``ŋ``, ``Ʊ``) as well as punctuation: ``广州｜D2`` -> ``｜ d2``, not ``｜ ##d ##2``;
  ``7×9`` -> ``7 × 9``; ``17.4℃`` -> ``4 ℃``.  HF splits punctuation only, so a ``Split`` on that class
  is added to its pre-tokenizer (``pre_tokenizer``).
* its CJK ranges start extension C at U+2B820 where HF's start at U+2B920; those code points are isolated
  by the same ``Split``.
* pairs are cut the way PaddleNLP's ``longest_first`` loop cuts them (one token at a time from the longer
  side, ties from the second), not HF's balanced cut: ``truncate_pair``.

A model imported from Hugging Face (``pipeline.hf_import``) was fine-tuned with HF's own ids instead: its
``tokenizer_config.json`` says ``"wordpiece_rules": "huggingface"`` and ``options`` turns the three rules off (no
symbol ``Split``; pairs cut as ``tokenizers``' ``longest_first``: ``truncate_pair_balanced``), with HF's
``tokenize_chinese_chars`` and ``strip_accents`` settings read from the same file.

Imports only the standard library and ``tokenizers``: serving copies this file next to the python
pre-processing models, so the served tokenizer is this code.  ``tests/test_tokenizer_parity.py`` pins it
against PaddleNLP's own tokenizer.
"""

from __future__ import annotations

# What PaddleNLP's _is_symbol adds to _is_punctuation, and the CJK code points only it isolates.
SYMBOLS = r"[\p{S}\x{00B2}\x{00BA}\x{3007}\x{00B5}\x{00D8}\x{014B}\x{01B1}\x{2B820}-\x{2B91F}]"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
RULES_KEY = "wordpiece_rules"  # tokenizer_config.json: whose WordPiece the model was fine-tuned with
RULES = ("paddlenlp", "huggingface")


def options(config: dict) -> dict:
    """``build``'s settings from a ``tokenizer_config.json`` object: ``do_lower_case`` (default true),
    ``tokenize_chinese_chars`` (true), ``strip_accents`` (null: with lower case) and ``wordpiece_rules``
    (``paddlenlp``, or ``huggingface`` for an imported HF model)."""
    rules = config.get(RULES_KEY, "paddlenlp")
    if rules not in RULES:
        raise ValueError(f"{RULES_KEY} {rules!r} is not one of {', '.join(RULES)}")
    accents = config.get("strip_accents")
    return {"lowercase": bool(config.get("do_lower_case", True)),
            "chinese_chars": bool(config.get("tokenize_chinese_chars", True)),
            "strip_accents": None if accents is None else bool(accents), "rules": rules}


def build(vocab_file, lowercase: bool = True, *, chinese_chars: bool = True, strip_accents: bool | None = None,
          rules: str = "paddlenlp"):
    """An HF ``tokenizers.Tokenizer`` giving the model's ids for ``vocab_file`` (PaddleNLP's, or HF's with
    ``rules="huggingface"``): ``[CLS] a [SEP] (b [SEP])`` with special tokens, no truncation or padding (callers cut
    and pad; see ``encode_pairs``)."""
    from tokenizers import Tokenizer, decoders, models, processors

    vocab = _read_vocab(vocab_file)
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in vocab]
    if missing:
        raise ValueError(f"{vocab_file}: vocabulary has no {', '.join(missing)} token")
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizer(lowercase, chinese_chars, strip_accents)
    tok.pre_tokenizer = pre_tokenizer(symbols=rules == "paddlenlp")
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    tok.decoder = decoders.WordPiece()
    # Literal "[CLS]" etc. in a text become the special token, as in PaddleNLP (its no-split trie) and HF.
    tok.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])
    return tok


def normalizer(lowercase: bool = True, chinese_chars: bool = True, strip_accents: bool | None = None):
    """``_clean_text``, CJK isolation, lower case and accent stripping (``None``: with lower case)."""
    from tokenizers import normalizers

    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=chinese_chars, strip_accents=strip_accents,
                                      lowercase=lowercase)


def pre_tokenizer(symbols: bool = True):
    """Whitespace and punctuation splits, and (PaddleNLP's rules) its symbol splits.

    The symbol ``Split`` runs first, over the whole normalized text: after ``BertPreTokenizer`` it would search each
    of its pieces, and a Chinese text is a piece per character.  Both steps only isolate single characters (and the
    second drops whitespace), so the order changes no piece and no offset; it saves ~15% of the tokenizer's time
    (MEASUREMENTS.md)."""
    from tokenizers import Regex, pre_tokenizers

    if not symbols:
        return pre_tokenizers.BertPreTokenizer()
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SYMBOLS), behavior="isolated"),
                                    pre_tokenizers.BertPreTokenizer()])


def _read_vocab(vocab_file) -> dict[str, int]:
    """``vocab.txt`` -> {token: line number}; a repeated token keeps its last line, as PaddleNLP's loader."""
    vocab: dict[str, int] = {}
    with open(vocab_file, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            token = line.rstrip("\n")
            if token:
                vocab[token] = i
    return vocab


def encode_pairs(tok, texts_a, texts_b, max_seq_len: int,
                 rules: str = "paddlenlp") -> tuple[list[tuple[list[int], list[int]]], int]:
    """``[CLS] a [SEP] b [SEP]`` ids and segment ids of each pair, cut to ``max_seq_len`` by the model's
    ``longest_first`` rule (PaddleNLP's ``truncate_pair``, or HF's ``truncate_pair_balanced``); ``tok`` is ``build``'s
    tokenizer (no truncation, no padding).  The offline tokenizer (``pipeline.tokenizer``) and the served
    pre-processing both call this.  Also how many pairs were cut (the served model counts them on /metrics, validate
    counts dev's)."""
    cut = truncate_pair_balanced if rules == "huggingface" else truncate_pair
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    firsts = tok.encode_batch(list(texts_a), add_special_tokens=False)
    seconds = tok.encode_batch(list(texts_b), add_special_tokens=False)
    rows, n_cut = [], 0
    for a, b in zip(firsts, seconds):
        na, nb = cut(len(a.ids), len(b.ids), max_seq_len - 3)
        n_cut += na < len(a.ids) or nb < len(b.ids)
        rows.append(([cls_id, *a.ids[:na], sep_id, *b.ids[:nb], sep_id], [0] * (na + 2) + [1] * (nb + 1)))
    return rows, n_cut


def truncate_pair_balanced(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Token counts kept of a pair, as HF ``tokenizers``' ``longest_first`` (``truncate_encodings``): the shorter
    side whole when the longer can take the rest, else half the budget each (the odd token to the second)."""
    if len_a + len_b <= budget:
        return len_a, len_b
    short = min(len_a, len_b)
    keep_short, keep_long = short, (short if short > budget else max(short, budget - short))
    if keep_short + keep_long > budget:
        keep_short = budget // 2
        keep_long = keep_short + budget % 2
    keep_a, keep_b = (keep_long, keep_short) if len_a > len_b else (keep_short, keep_long)
    return min(len_a, keep_a), min(len_b, keep_b)


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Token counts kept of a pair when at most ``budget`` body tokens fit: PaddleNLP's ``longest_first``
    removes one token at a time from the longer side, from the second on a tie."""
    over = len_a + len_b - budget
    while over > 0:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
        over -= 1
    return max(len_a, 0), max(len_b, 0)
