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


def encode_padded(tok, texts):
    """``input_ids``, ``token_type_ids`` (int64 [N, longest]) of ``texts`` in one ``encode_batch`` of a tokenizer
    built with ``pad=True``: the padding is the tokenizer's own (Rust), one list per row is all Python does."""
    import numpy as np

    encodings = tok.encode_batch(list(texts))
    return (np.array([e.ids for e in encodings], dtype=np.int64), np.array([e.type_ids for e in encodings], dtype=np.int64),
            encodings)


def pad_rows(rows, pad_id: int):
    """[(ids, type_ids)] -> ``input_ids``, ``token_type_ids`` (int64 [N, longest]), padded with ``pad_id`` / 0."""
    import numpy as np

    width = max((len(ids) for ids, _ in rows), default=0)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for r, (row_ids, row_types) in enumerate(rows):
        ids[r, : len(row_ids)] = row_ids
        types[r, : len(row_types)] = row_types
    return ids, types


def wordpiece_module(folder: Path):
    """The copy of ``pipeline/wordpiece.py`` in ``folder``, compiled from the source file itself (never a
    ``__pycache__`` entry: the code that runs is the code bundle.json covers)."""
    import types as _types

    module = _types.ModuleType("ernie_bundle_wordpiece")
    source = Path(folder) / "wordpiece.py"
    exec(compile(source.read_bytes(), str(source), "exec"), module.__dict__)
    return module


def wordpiece_options(folder: Path, module=None) -> dict:
    """``build``'s settings from the bundle's tokenizer_config.json (``wordpiece.options`` of the copy in ``folder``,
    or of ``module``, that copy already loaded): lower case, CJK isolation, accents and whose rules (PaddleNLP's, or
    HF's for an imported model)."""
    cfg = Path(folder) / "tokenizer_config.json"
    config = json.loads(cfg.read_text(encoding="utf-8")) if cfg.is_file() else {}
    return (module or wordpiece_module(folder)).options(config)


def wordpiece(folder: Path, max_seq_len: int | None = None, pad: bool = False, module=None):
    """The bundle's WordPiece (vocab.txt, settings from tokenizer_config.json), built by the copy of
    ``pipeline/wordpiece.py`` in ``folder`` (the model's tokenization).  With ``max_seq_len``, truncated as
    offline (``pipeline.tokenizer``): [CLS] + the first max_seq_len - 2 tokens + [SEP].  With ``pad``, a batch is
    padded with [PAD] to its longest text (``encode_padded``)."""
    folder = Path(folder)
    module = module or wordpiece_module(folder)
    tok = module.build(folder / "vocab.txt", **wordpiece_options(folder, module))
    if max_seq_len:
        tok.enable_truncation(max_length=int(max_seq_len))
    if pad:
        tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    return tok
