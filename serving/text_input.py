"""Per-request text checks shared by the python pre-processing models of every task kind.

Standard library only: this file is copied next to the pre-processing models of the token
classification and reading comprehension bundles (as ``text_input.py``) and loaded there with the
models' ``_sibling`` loader, so a bad item is refused with the same message whatever the kind.
"""

from __future__ import annotations


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
