"""Tokenization shared by training, evaluation, export checks and serving.

One implementation everywhere: PaddleNLP's BERT/ERNIE WordPiece over the model's ``vocab.txt`` (the
format ERNIE and bert-base-chinese use), rebuilt from HF ``tokenizers`` parts by ``pipeline.wordpiece``
so the ids are the ones the model was fine-tuned with.  The served pre-processing models load a copy
of that module, so served and offline token ids cannot drift apart.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_CONFIG = {
    "do_lower_case": True,
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
    "tokenizer_class": "ErnieTokenizer",
}


@dataclass(frozen=True)
class Encoded:
    input_ids: np.ndarray  # int64 [batch, seq], padded with pad_id to the longest item
    token_type_ids: np.ndarray  # int64 [batch, seq]
    lengths: np.ndarray  # int64 [batch]
    truncated: int = 0  # how many items were cut to max_seq_len


class Tokenizer:
    def __init__(self, vocab_file: Path, lowercase: bool = True, max_seq_len: int = 128, *, chinese_chars: bool = True,
                 strip_accents: bool | None = None, rules: str = "paddlenlp"):
        from pipeline import wordpiece

        self.vocab_file = Path(vocab_file)
        self.max_seq_len = max_seq_len
        self.lowercase = lowercase
        self.rules = rules  # whose WordPiece: PaddleNLP's, or HF's for an imported model (wordpiece.options)
        options = dict(lowercase=lowercase, chinese_chars=chinese_chars, strip_accents=strip_accents, rules=rules)
        self._raw = wordpiece.build(self.vocab_file, **options)
        self.pad_id = self._raw.token_to_id("[PAD]")
        self.vocab_size = self._raw.get_vocab_size()
        self._single = wordpiece.build(self.vocab_file, **options)
        # A single text keeps [CLS] + its first max_seq_len - 2 tokens + [SEP], as PaddleNLP's (and HF's).
        self._single.enable_truncation(max_length=max_seq_len)

    @property
    def raw(self):
        """The tokenizer without truncation: NER and reading comprehension place special tokens,
        truncate and window themselves (``pipeline.labeling.bio``, ``pipeline.reading.windows``)."""
        return self._raw

    @classmethod
    def from_model_dir(cls, model_dir: Path, max_seq_len: int) -> "Tokenizer":
        """The model's tokenizer: ``vocab.txt`` with the settings of its ``tokenizer_config.json``
        (``wordpiece.options``)."""
        from pipeline import wordpiece
        from pipeline.errors import ModelError

        model_dir = Path(model_dir)
        cfg_path = model_dir / "tokenizer_config.json"
        config = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        try:
            options = wordpiece.options(config)
        except ValueError as exc:
            raise ModelError(f"{cfg_path}: {exc}") from None
        return cls(model_dir / "vocab.txt", max_seq_len=max_seq_len, **options)

    def encode(self, texts_a: Sequence[str], texts_b: Sequence[str | None] | None = None) -> Encoded:
        if texts_b is not None and any(t is not None for t in texts_b):
            rows, cut = self._pairs(texts_a, texts_b)
        else:
            encodings = self._single.encode_batch(list(texts_a))
            rows, cut = [(e.ids, e.type_ids) for e in encodings], sum(1 for e in encodings if e.overflowing)
        lengths = np.array([len(ids) for ids, _ in rows], dtype=np.int64)
        width = int(lengths.max()) if len(rows) else 0
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for i, (row_ids, row_types) in enumerate(rows):
            ids[i, : len(row_ids)] = row_ids
            types[i, : len(row_types)] = row_types
        return Encoded(ids, types, lengths, cut)

    def _pairs(self, texts_a: Sequence[str], texts_b: Sequence[str | None]) -> tuple[list[tuple[list[int], list[int]]], int]:
        """``[CLS] a [SEP] b [SEP]`` cut by the model's ``longest_first`` rule (``wordpiece.encode_pairs``, the code the
        served pre-processing runs), and how many pairs were cut."""
        from pipeline.wordpiece import encode_pairs

        return encode_pairs(self._raw, texts_a, [b or "" for b in texts_b], self.max_seq_len, self.rules)


def build_char_vocab(texts: Iterable[str], min_freq: int = 2) -> list[str]:
    """A character vocabulary for the from-scratch model, built the way WordPiece will split text.

    CJK characters are isolated by BERT's pre-tokenizer, so they need only their plain form; other
    words (Latin, digits) are split by WordPiece into a first character and ``##``-continuations,
    so both forms of those characters are kept.  Ordered by frequency, ties by character.
    """
    from pipeline import wordpiece

    norm, pre = wordpiece.normalizer(lowercase=True), wordpiece.pre_tokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        for word, _ in pre.pre_tokenize_str(norm.normalize_str(text)):
            counts[word[0]] += 1
            for ch in word[1:]:
                counts["##" + ch] += 1
    pieces = sorted((p for p, n in counts.items() if n >= min_freq), key=lambda p: (-counts[p], p))
    return list(SPECIAL_TOKENS) + [p for p in pieces if p not in SPECIAL_TOKENS]


def write_vocab(vocab: list[str], model_dir: Path, config: dict = TOKENIZER_CONFIG) -> None:
    """vocab.txt (a token a line), ``config`` as tokenizer_config.json and its special tokens' map."""
    model_dir = Path(model_dir)
    (model_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    special = {k: v for k, v in config.items() if k.endswith("_token")}
    (model_dir / "special_tokens_map.json").write_text(json.dumps(special), encoding="utf-8")
