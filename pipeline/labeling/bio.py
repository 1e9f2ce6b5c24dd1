"""BIO tags over wordpiece tokens: text -> token ids + char offsets, entities -> tag ids, tag ids -> entities.

Imports only the standard library and numpy: serving/bundle/repository.py copies this file verbatim into the
Triton python-backend model folders, so the served pre/post-processing and the offline evaluation run
the very same code.  Do not import ``pipeline.`` here.

``tok`` is an HF ``tokenizers`` tokenizer (e.g. ``BertWordPieceTokenizer(vocab, lowercase=True,
handle_chinese_chars=True)``) with truncation disabled; offsets are Python str indices, end exclusive.

Token granularity: with a char-level CJK vocabulary every Chinese character is one token, but Latin
words and digit runs become one or more wordpieces ("CSOL" -> "cs", "##ol").  A tag belongs to a whole
token, so an entity boundary that falls INSIDE a token cannot be represented: the entity snaps outward
to the tokens it touches (its start becomes the start of the token containing it, its end the end of
its last token).  Such entities cannot round-trip exactly; CLUENER has a handful of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100  # label id the loss ignores ([CLS], [SEP], padding)
SPECIAL_OFFSET = -1  # offsets of [CLS]/[SEP]/padding: never mistaken for char 0


@dataclass(frozen=True)
class Entity:
    type: str
    start: int
    end: int  # exclusive
    text: str


@dataclass(frozen=True)
class TokenizedText:
    input_ids: np.ndarray  # int64 [L]: [CLS] tokens [SEP]
    offsets: np.ndarray  # int64 [L, 2]: char (start, end exclusive); (-1, -1) for special tokens
    truncated: bool = False  # its tokens did not all fit in max_seq_len (the served model counts these)


def tag_names(entity_types: Sequence[str]) -> list[str]:
    """["O", "B-<t1>", "I-<t1>", "B-<t2>", "I-<t2>", ...] in the given type order."""
    if len(set(entity_types)) != len(entity_types):
        raise ValueError(f"duplicate entity types in {list(entity_types)}")
    names = ["O"]
    for entity_type in entity_types:
        names += [f"B-{entity_type}", f"I-{entity_type}"]
    return names


def _special_id(tok, token: str) -> int:
    token_id = tok.token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer vocabulary has no {token} token")
    return int(token_id)


def encode_token(tok, text: str, max_seq_len: int) -> TokenizedText:
    """[CLS] + tokens[: max_seq_len - 2] + [SEP], with char offsets into ``text``."""
    return encode_tokens(tok, [text], max_seq_len)[0]


def encode_tokens(tok, texts: Sequence[str], max_seq_len: int) -> list[TokenizedText]:
    """``encode_token`` of each text, in one ``encode_batch`` call (the served pre-processing tokenizes a whole
    dynamic batch at once)."""
    if max_seq_len < 2:
        raise ValueError(f"max_seq_len must be at least 2 (room for [CLS] and [SEP]), got {max_seq_len}")
    if getattr(tok, "truncation", None) is not None:
        # The tokenizer's own truncation would drop tokens silently and count [CLS]/[SEP] its own way.
        raise ValueError("tokenizer truncation must be disabled (tok.no_truncation())")
    if getattr(tok, "padding", None) is not None:
        raise ValueError("tokenizer padding must be disabled (pad_batch pads)")
    return [_with_specials(tok, encoding, max_seq_len) for encoding in tok.encode_batch(list(texts), add_special_tokens=False)]


def _with_specials(tok, encoding, max_seq_len: int) -> TokenizedText:
    keep = max_seq_len - 2
    ids = [_special_id(tok, "[CLS]"), *encoding.ids[:keep], _special_id(tok, "[SEP]")]
    offsets = np.full((len(ids), 2), SPECIAL_OFFSET, dtype=np.int64)
    body = encoding.offsets[:keep]
    if body:
        offsets[1:-1] = np.asarray(body, dtype=np.int64).reshape(-1, 2)
    return TokenizedText(input_ids=np.asarray(ids, dtype=np.int64), offsets=offsets, truncated=len(encoding.ids) > keep)


def pad_batch(items: Sequence[TokenizedText], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad to the longest item: input_ids [B, T] (pad_id), token_type_ids [B, T] (zeros),
    offsets [B, T, 2] (-1, so padding decodes like a special token)."""
    width = max((len(item.input_ids) for item in items), default=0)
    input_ids = np.full((len(items), width), pad_id, dtype=np.int64)
    offsets = np.full((len(items), width, 2), SPECIAL_OFFSET, dtype=np.int64)
    for row, item in enumerate(items):
        n = len(item.input_ids)
        input_ids[row, :n] = item.input_ids
        offsets[row, :n] = item.offsets
    return input_ids, np.zeros_like(input_ids), offsets


def token_tags(offsets: np.ndarray, entities: Sequence[Entity], tag_index: Mapping[str, int]) -> np.ndarray:
    """Tag id per token: -100 for special tokens, B-<type> on an entity's first token, I-<type> on the
    tokens after it that start inside the entity, O elsewhere.

    "First token" is the token containing entity.start (or, if that char belongs to no token, e.g.
    whitespace, the first token starting inside the entity): the entity start snaps to the token.
    Tokens cut off by truncation are simply absent.  Overlapping entities: the earlier one in
    ``entities`` keeps the tokens it already has.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    special = starts < 0
    tags = np.full(len(offsets), tag_index["O"], dtype=np.int64)
    tags[special] = IGNORE_INDEX
    taken = special.copy()
    for entity in entities:
        begin, inside = tag_index[f"B-{entity.type}"], tag_index[f"I-{entity.type}"]
        # A token belongs to the entity if it overlaps [start, end); a zero-width token if it lies in it.
        covered = ~taken & (starts < entity.end) & ((ends > entity.start) | ((ends == starts) & (starts >= entity.start)))
        positions = np.flatnonzero(covered)
        if len(positions) == 0:
            continue
        tags[positions[0]] = begin
        tags[positions[1:]] = inside
        taken[positions] = True
    return tags


def entities_from_tags(tags: Sequence[str | None], offsets: np.ndarray, text: str) -> list[Entity]:
    """conlleval-style chunking of per-token tag strings; ``None`` marks a special token.

    B-x starts an entity; I-x continues an open x; I-x after O or after another type starts a new x
    (lenient, as conlleval counts it); O and special tokens close any open entity.
    Entity span = first token's start .. last token's end.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if len(tags) != len(offsets):
        raise ValueError(f"{len(tags)} tags for {len(offsets)} offsets")
    found: list[Entity] = []
    open_type: str | None = None
    open_start = open_end = 0

    def close() -> None:
        if open_type is not None:
            found.append(Entity(open_type, open_start, open_end, text[open_start:open_end]))

    for tag, (start, end) in zip(tags, offsets.tolist()):
        if tag is None or start < 0 or tag == "O":
            close()
            open_type = None
            continue
        prefix, entity_type = _split_tag(tag)
        if prefix == "I" and open_type == entity_type:
            open_end = max(open_end, end)
            continue
        close()
        open_type, open_start, open_end = entity_type, start, end
    close()
    return found


def decode_tags(tag_ids: np.ndarray, offsets: np.ndarray, text: str, tags: Sequence[str]) -> list[Entity]:
    """Entities from per-token tag ids (e.g. the argmax of the model's logits over ``tags``).

    Tokens with offsets (-1, -1) ([CLS], [SEP], padding) or a negative tag id (-100) are skipped and
    close any open entity, so a padded row from ``pad_batch`` decodes the same as the unpadded one.
    """
    tag_ids = np.asarray(tag_ids).reshape(-1)
    names: list[str | None] = []
    for tag_id in tag_ids.tolist():
        if tag_id < 0:
            names.append(None)
        elif tag_id >= len(tags):
            raise ValueError(f"tag id {tag_id} out of range for {len(tags)} tags")
        else:
            names.append(tags[tag_id])
    return entities_from_tags(names, offsets, text)


def _split_tag(tag: str) -> tuple[str, str]:
    prefix, sep, entity_type = tag.partition("-")
    if prefix not in ("B", "I") or not sep or not entity_type:
        raise ValueError(f"malformed BIO tag {tag!r} (expected O, B-<type> or I-<type>)")
    return prefix, entity_type
