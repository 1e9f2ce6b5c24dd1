"""Per-request text checks and tokenizer set-up shared by the python pre-processing models.

Standard library only (numpy where it pads): this file is copied next to every pre-processing model and
the fused models (as ``text_input.py``) and loaded there by ``model_support.PythonModel.text_setup``, so a
bad item is refused with the same message whatever the kind.
"""

from __future__ import annotations

import json
from pathlib import Path


class BadText(ValueError):
    """One item of a request cannot be served; the message names the input and the item."""


def decode_item(item, field: str, j: int, max_bytes: int) -> str:
    """``item`` (bytes from a TYPE_STRING tensor) -> str, or ``BadText`` naming ``field[j]``.

    Refused: not bytes, over ``max_bytes`` (checked before decoding, so a huge item costs nothing),
    not valid UTF-8, empty or whitespace-only.
    """
    if isinstance(item, str):
        item = item.encode("utf-8")
    if not isinstance(item, bytes):
        raise BadText(f"{field}[{j}]: expected bytes, got {type(item).__name__}")
    if len(item) > max_bytes:
        raise BadText(f"{field}[{j}]: {len(item)} bytes, over the limit of {max_bytes}")
    try:
        text = item.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadText(f"{field}[{j}]: not valid UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise BadText(f"{field}[{j}]: empty {field}")
    return text


def pad_encodings(encodings, pad_id: int):
    """HF encodings -> ``input_ids``, ``token_type_ids`` (int64 [N, longest]), padded with ``pad_id``."""
    import numpy as np

    width = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), width), pad_id, dtype=np.int64)
    types = np.zeros((len(encodings), width), dtype=np.int64)
    for r, e in enumerate(encodings):
        ids[r, : len(e.ids)] = e.ids
        types[r, : len(e.type_ids)] = e.type_ids
    return ids, types


def wordpiece(folder: Path, max_seq_len: int | None = None):
    """The bundle's WordPiece (vocab.txt, lowercase from tokenizer_config.json), built by the copy of
    ``pipeline/wordpiece.py`` in ``folder`` (PaddleNLP's tokenization); no padding.  With ``max_seq_len``,
    truncated as offline (``pipeline.tokenizer``): [CLS] + the first max_seq_len - 2 tokens + [SEP]."""
    import types as _types

    folder = Path(folder)
    module = _types.ModuleType("ernie_bundle_wordpiece")
    source = folder / "wordpiece.py"
    # From the source file itself, never a __pycache__ entry: the code that runs is the code bundle.json covers.
    exec(compile(source.read_bytes(), str(source), "exec"), module.__dict__)
    lowercase = True
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        lowercase = bool(json.loads(cfg.read_text(encoding="utf-8")).get("do_lower_case", True))
    tok = module.build(folder / "vocab.txt", lowercase=lowercase)
    if max_seq_len:
        tok.enable_truncation(max_length=int(max_seq_len))
    return tok
