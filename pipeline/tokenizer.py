"""Tokenization shared by training, evaluation, export checks and serving.

One implementation everywhere: HF ``tokenizers``' BERT WordPiece over the model's ``vocab.txt``
(the format ERNIE and bert-base-chinese use).  The served pre-processing model loads the same
vocabulary with the same class, so served and offline token ids cannot drift apart.
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


class Tokenizer:
    def __init__(self, vocab_file: Path, lowercase: bool = True, max_seq_len: int = 128):
        from tokenizers import BertWordPieceTokenizer

        self.vocab_file = Path(vocab_file)
        self.max_seq_len = max_seq_len
        self._tok = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase, handle_chinese_chars=True)
        self._tok.enable_truncation(max_length=max_seq_len, strategy="longest_first")
        self.pad_id = self._tok.token_to_id("[PAD]")
        if self.pad_id is None:
            raise ValueError(f"{vocab_file}: vocabulary has no [PAD] token")
        self.vocab_size = self._tok.get_vocab_size()
        self.lowercase = lowercase
        self._raw = None

    @property
    def raw(self):
        """The HF tokenizer without truncation: NER and reading comprehension place special tokens,
        truncate and window themselves (``pipeline.labeling.bio``, ``pipeline.reading.windows``)."""
        if self._raw is None:
            from tokenizers import BertWordPieceTokenizer

            self._raw = BertWordPieceTokenizer(str(self.vocab_file), lowercase=self.lowercase, handle_chinese_chars=True)
        return self._raw

    @classmethod
    def from_model_dir(cls, model_dir: Path, max_seq_len: int) -> "Tokenizer":
        model_dir = Path(model_dir)
        lowercase = True
        cfg_path = model_dir / "tokenizer_config.json"
        if cfg_path.is_file():
            lowercase = bool(json.loads(cfg_path.read_text(encoding="utf-8")).get("do_lower_case", True))
        return cls(model_dir / "vocab.txt", lowercase=lowercase, max_seq_len=max_seq_len)

    def encode(self, texts_a: Sequence[str], texts_b: Sequence[str | None] | None = None) -> Encoded:
        if texts_b is not None and any(t is not None for t in texts_b):
            encs = self._tok.encode_batch([(a, b or "") for a, b in zip(texts_a, texts_b)])
        else:
            encs = self._tok.encode_batch(list(texts_a))
        lengths = np.array([len(e.ids) for e in encs], dtype=np.int64)
        width = int(lengths.max()) if len(encs) else 0
        ids = np.full((len(encs), width), self.pad_id, dtype=np.int64)
        types = np.zeros((len(encs), width), dtype=np.int64)
        for i, e in enumerate(encs):
            ids[i, : len(e.ids)] = e.ids
            types[i, : len(e.type_ids)] = e.type_ids
        return Encoded(ids, types, lengths)


def build_char_vocab(texts: Iterable[str], min_freq: int = 2) -> list[str]:
    """A character vocabulary for the from-scratch model, built the way WordPiece will split text.

    CJK characters are isolated by BERT's pre-tokenizer, so they need only their plain form; other
    words (Latin, digits) are split by WordPiece into a first character and ``##``-continuations,
    so both forms of those characters are kept.  Ordered by frequency, ties by character.
    """
    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=True, clean_text=True)
    pre = pre_tokenizers.BertPreTokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        for word, _ in pre.pre_tokenize_str(norm.normalize_str(text)):
            counts[word[0]] += 1
            for ch in word[1:]:
                counts["##" + ch] += 1
    pieces = sorted((p for p, n in counts.items() if n >= min_freq), key=lambda p: (-counts[p], p))
    return list(SPECIAL_TOKENS) + [p for p in pieces if p not in SPECIAL_TOKENS]


def write_vocab(vocab: list[str], model_dir: Path) -> None:
    model_dir = Path(model_dir)
    (model_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (model_dir / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2), encoding="utf-8")
    special = {k: v for k, v in TOKENIZER_CONFIG.items() if k.endswith("_token")}
    (model_dir / "special_tokens_map.json").write_text(json.dumps(special), encoding="utf-8")
