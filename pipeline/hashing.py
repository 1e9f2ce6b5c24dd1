"""Content hashes for stage cache keys (content, never mtimes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` for every file under ``root`` (a file hashes as itself)."""
    root = Path(root)
    if root.is_file():
        return {root.name: file_sha256(root)}
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def tree_sha256(root: Path) -> str:
    return json_sha256(tree_hashes(root))


def json_sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def stage_key(name: str, params: dict, inputs: dict[str, str], code_version: str) -> str:
    return json_sha256([name, code_version, params, inputs])
