"""Bundle integrity: ``bundle.json`` lists the SHA-256 of every file; loading checks them all.

Standard library only: this file is also copied next to each python model in the repository
(as ``bundle_integrity.py``) so the models verify their bundle inside any Triton, where neither
``serving`` nor ``pipeline`` is installed.

Checked: the manifest's own hash (``manifest_sha256`` over the rest of the manifest, so an
edited bundle.json is caught, not only edited files), each listed file's hash, missing files, and
files and directories that are in the repository but not in the manifest (a model version dropped in
by hand, a hidden model directory, a ``.pyc`` that would run instead of its source).
This catches corruption and accidental edits; it is not a signature against a deliberate attacker.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

MANIFEST = "bundle.json"


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
    """Every file of the bundle except the manifest itself, as sorted posix paths relative to ``root``.

    Nothing is skipped: a hidden directory is loaded by Triton like any other model, and a ``__pycache__``
    file is code Python may run instead of its source."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() != MANIFEST)


def bundle_dirs(root: Path) -> list[str]:
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())


def _bytecode_of_listed_source(rel: str, listed) -> bool:
    """``m/1/__pycache__/model.cpython-310.pyc`` for a listed ``m/1/model.py``: what Python writes when it imports
    a listed module in an interpreter that writes bytecode (Triton's python stubs do, whatever the environment)."""
    parts = rel.split("/")
    if len(parts) < 2 or parts[-2] != "__pycache__" or not parts[-1].endswith(".pyc"):
        return False
    source = "/".join(parts[:-2] + [parts[-1].split(".", 1)[0] + ".py"])
    return source in listed


def _hash_based(path: Path) -> bool:
    """A ``.pyc`` whose header says it is checked by a hash of its source, or not checked at all (PEP 552): Python
    runs an unchecked one whatever the source says.  Triton's stubs write timestamp-based ones only."""
    try:
        with open(path, "rb") as f:
            header = f.read(8)
    except OSError:
        return True
    return len(header) < 8 or int.from_bytes(header[4:8], "little") != 0


def engine_version_note(manifest: dict) -> "str | None":
    """One line when the engine installed in this interpreter is not the version that validated the bundle
    (bundle.json ``engine_needs``: ``distribution``, ``validated_version``); None when they are equal, when the
    bundle records no version (packaged before it did) or when the engine is not installed (said elsewhere)."""
    from importlib import metadata

    needs = manifest.get("engine_needs")
    if not isinstance(needs, dict) or not needs.get("distribution") or not needs.get("validated_version"):
        return None
    dist, validated = str(needs["distribution"]), str(needs["validated_version"])
    try:
        served = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    if served == validated:
        return None
    return (f"this bundle was validated with {dist} {validated} and is served with {dist} {served} "
            f"(Python {sys.version_info[0]}.{sys.version_info[1]}): its answers may differ from the validated ones; "
            "make smoke compares them")


def clear_bytecode(root: Path) -> int:
    """Remove the ``__pycache__`` directories that hold only bytecode of listed sources; returns how many.

    Triton's python backend stub runs an isolated interpreter (PYTHONDONTWRITEBYTECODE does not reach it) that
    caches every model.py it loads.  The launcher clears those caches before it serves, so the code that runs is
    compiled from the listed sources, never from a cache entry someone may have put there."""
    import shutil

    root = Path(root)
    try:
        listed = json.loads((root / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # verify_bundle says what is wrong with the manifest
    count = 0
    for cache in sorted(root.rglob("__pycache__")):
        files = [p for p in cache.rglob("*")]
        if cache.is_dir() and all(p.is_file() and _bytecode_of_listed_source(p.relative_to(root).as_posix(), listed) for p in files):
            shutil.rmtree(cache)
            count += 1
    return count


def verify_bundle(root: Path, *, allow_bytecode: bool = False) -> dict:
    """Return the manifest when every check passes; raise ``BundleIntegrityError`` naming the problem.

    Every file must be listed and match, and every directory must be listed.  ``allow_bytecode`` lets through
    bytecode caches of listed sources, which Triton's python stubs write as they load the models (see
    ``clear_bytecode``): for checks of a bundle that is or was served (the models' own check, the package stage's
    "still intact", ``make manifests``, offline readers); never a hash-based one, which Python would run without
    looking at its source.  The launchers (``python -m serving.server``, the image's ``start.py``) clear them and
    then check strictly."""
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
    extra = [rel for rel in bundle_files(root) if rel not in listed
             and not (allow_bytecode and _bytecode_of_listed_source(rel, listed) and not _hash_based(root / rel))]
    if extra:
        tip = " (Python bytecode; the launcher, python -m serving.server, clears caches of listed sources only)" \
            if "__pycache__" in extra[0] else ""
        raise BundleIntegrityError(f"{root / extra[0]}: not listed in {MANIFEST} ({len(extra)} unlisted file(s)){tip}; {hint}")
    dirs = manifest.get("directories")
    if not isinstance(dirs, list):
        raise BundleIntegrityError(f"{path}: no 'directories' list (packaged by an older version); {hint}")
    for rel in dirs:
        if not (root / rel).is_dir():
            raise BundleIntegrityError(f"{root / rel}: directory listed in {MANIFEST} but missing; {hint}")
    listed_dirs = set(dirs)
    stray = [d for d in bundle_dirs(root) if d not in listed_dirs
             and not (allow_bytecode and d.rsplit("/", 1)[-1] == "__pycache__")]
    if stray:
        raise BundleIntegrityError(f"{root / stray[0]}: directory not in {MANIFEST} ({len(stray)} unlisted); {hint}")
    return manifest

