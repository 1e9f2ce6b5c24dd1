"""Bundle integrity: ``bundle.json`` lists the SHA-256 of every file; loading checks them all.

Standard library only: this file is also copied next to each python model in the repository
(as ``bundle_integrity.py``) so the models verify their bundle inside any Triton, where neither
``serving`` nor ``pipeline`` is installed.

Checked: the manifest's own hash (``manifest_sha256`` over the rest of the manifest, so an
edited bundle.json is caught, not only edited files), each listed file's hash, missing files, and
files that are in the repository but not in the manifest (e.g. a model version dropped in by hand).
This catches corruption and accidental edits; it is not a signature against a deliberate attacker.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "bundle.json"
# Written by Python or Triton while serving; never part of what was packaged.
_IGNORED_PARTS = ("__pycache__",)


class BundleIntegrityError(ValueError):
    """The bundle on disk is not the one that was packaged."""


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_sha256(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def bundle_files(root: Path) -> list[str]:
    """Every file of the bundle except the manifest itself, as sorted posix paths relative to ``root``."""
    root = Path(root)
    out = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if p.is_file() and rel.as_posix() != MANIFEST and not any(part in _IGNORED_PARTS or part.startswith(".") for part in rel.parts):
            out.append(rel.as_posix())
    return sorted(out)


def verify_bundle(root: Path) -> dict:
    """Return the manifest when every check passes; raise ``BundleIntegrityError`` naming the problem."""
    root = Path(root)
    path = root / MANIFEST
    hint = "the bundle was modified after packaging; re-run the package stage"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleIntegrityError(f"{path}: missing; not a packaged bundle") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleIntegrityError(f"{path}: unreadable ({exc}); {hint}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise BundleIntegrityError(f"{path}: no 'files' table; {hint}")
    if manifest.get("manifest_sha256") != manifest_sha256(manifest):
        raise BundleIntegrityError(f"{path}: manifest_sha256 does not match its content; {hint}")
    listed = manifest["files"]
    for rel, expected in sorted(listed.items()):
        f = root / rel
        if not f.is_file():
            raise BundleIntegrityError(f"{f}: listed in {MANIFEST} but missing; {hint}")
        if file_sha256(f) != expected:
            raise BundleIntegrityError(f"{f}: SHA-256 differs from {MANIFEST}; {hint}")
    extra = sorted(set(bundle_files(root)) - set(listed))
    if extra:
        raise BundleIntegrityError(f"{root / extra[0]}: not listed in {MANIFEST} ({len(extra)} unlisted file(s)); {hint}")
    return manifest
