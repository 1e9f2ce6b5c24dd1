"""One run per task's runs directory at a time: an exclusive ``flock`` on ``runs/<task>/.ernie-bundle.lock``; and the
mark of a runs directory a run made, the only kind ``clean`` removes.

The mark is ``.ernie-bundle-runs``, written (atomically, with a first line no empty or hand-made file has by chance)
when a run creates the folder, or finds it empty or holding only what runs write (``foreign_entry``): never into a
folder that holds anything else, which a run refuses in one line instead (``claim_runs_dir``).  ``clean`` removes a
folder only when it is marked (this mark, or the lock file a run of the previous version left: it marked them then)
*and* everything in it is what runs write: a forged mark, or a user's ``train.json`` beside a real one, keeps it.
A folder's stage-named entries alone say nothing: a user's project may well have an ``export/`` or a ``cache/``
(and ``/var`` has one).

Two runs on one directory delete each other's unfinished attempts (``.tmp-*``, ``work/``) and can record a stage
OK whose outputs the other run removed.  The second one is refused at once (it does not wait), naming the pid
that holds the lock.  The kernel releases a flock when its holder dies, so ``kill -9`` leaves no stale lock; the
pid written into the file is only there to be named.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pipeline.errors import UserInputError

LOCK_NAME = ".ernie-bundle.lock"  # the previous version's mark of a runs directory as well (then empty, or a pid)
MARKER_NAME = ".ernie-bundle-runs"  # the mark of a runs directory a run made (its first line: MARKER_HEAD)
MARKER_HEAD = "ernie-bundle runs directory v1"
_MARKER_MAX = 4096
# What runs write beside the stage folders (make smoke / loadtest / replicas / perf / bench / manifests' defaults).
TOOL_OUTPUTS = frozenset({"smoke.json", "loadtest.json", "replicas.json", "perf.json", "bench.json", "bench.md"})
TOOL_FOLDERS = frozenset({"deploy"})
STAGE_ENTRIES = frozenset({"record.json", "stage.log", "out", "work"})  # what the runner writes in a stage's folder
# `status` probes the lock with a brief shared lock; a run that starts at that instant retries this long.
_RETRY_S = 1.0


def _open(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """The lock file, opened without following a link and without blocking (a FIFO planted at its place would
    block ``open`` until a writer came); anything but a regular file is refused in one line."""
    try:  # O_NOFOLLOW: a link planted at the lock's place is refused, never followed
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise UserInputError(f"cannot open the run lock {path}: {why}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserInputError(f"cannot open the run lock {path}: it is not a regular file (move it away)")
    return fd


def _read_small(path: Path, limit: int = _MARKER_MAX) -> str | None:
    """A small regular file's text (not through a link, never blocking on a FIFO); None when it is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def is_marked(path: Path) -> bool:
    """``path`` carries the mark a run writes when it makes a runs directory (a regular file, not a link, whose first
    line is MARKER_HEAD: an empty or hand-made file is no mark)."""
    text = _read_small(Path(path) / MARKER_NAME)
    return text is not None and text.split("\n", 1)[0] == MARKER_HEAD


def _legacy_marked(path: Path) -> bool:
    """The mark of the previous version: its lock file, a regular file that is empty or holds a pid."""
    text = _read_small(Path(path) / LOCK_NAME, 64)
    return text is not None and (text.strip() == "" or text.strip().isdigit())


def is_runs_dir(path: Path) -> bool:
    """``path`` is marked as a runs directory a run made: this version's mark, or the previous version's lock file.
    (``clean`` also wants everything in it to be what runs write: ``foreign_entry``.)"""
    return is_marked(path) or _legacy_marked(path)


def foreign_entry(task_dir: Path, within: Path | None = None, any_type: bool = False) -> Path | None:
    """The first entry under ``within`` (``task_dir`` itself, one of its stage folders or its cache) that no run
    writes; None when all of it is what runs write: the stage folders (their record, log, ``out/``, ``work/`` and
    unfinished ``.tmp-*``), the run cache, the lock and the mark, and the make targets' reports (TOOL_OUTPUTS,
    ``deploy/``).  Inside ``out/``, ``work/``, the cache's parts and ``deploy/`` anything goes: runs write there.
    ``any_type``: a file where a run's folder belongs counts as the run's (a run about to refuse it in its own words),
    not as foreign; ``clean`` never passes it."""
    from pipeline.graph import STAGE_NAMES
    from pipeline.run_cache import CACHE, FORMER, PARTS

    task_dir = Path(task_dir)
    within = task_dir if within is None else Path(within)

    def real_dir(p: Path) -> bool:
        return p.is_dir() and not p.is_symlink()

    def stage_ok(p: Path) -> bool:
        n = p.name
        return n in STAGE_ENTRIES or n.startswith(".tmp-") or (
            n.endswith(".tmp") and (n.startswith(".record.json.") or n.startswith(".stage.log.")))

    def cache_ok(p: Path) -> bool:
        return p.name in PARTS and real_dir(p)

    def top_ok(p: Path) -> Path | None:  # None: p and what it holds are a run's; else the first foreign path
        n = p.name
        if n in (LOCK_NAME, MARKER_NAME) or n.startswith(".write-probe-") or \
                (n.startswith(f"{MARKER_NAME}.") and n.endswith(".tmp")):
            return None
        if n in STAGE_NAMES and real_dir(p):
            return next((c for c in sorted(p.iterdir()) if not stage_ok(c)), None)
        if n == CACHE and real_dir(p):
            return next((c for c in sorted(p.iterdir()) if not cache_ok(c)), None)
        if (n in FORMER.values() or n in TOOL_FOLDERS) and real_dir(p):
            return None
        if any_type and (n in STAGE_NAMES or n == CACHE or n in FORMER.values() or n in TOOL_FOLDERS) and \
                not real_dir(p):
            return None
        if n in TOOL_OUTPUTS and not p.is_dir():
            return None
        return p

    if within == task_dir:
        for entry in sorted(task_dir.iterdir()):
            bad = top_ok(entry)
            if bad is not None:
                return bad
        return None
    return top_ok(within)


def claim_runs_dir(path: Path) -> None:
    """Make ``path`` (``<runs-dir>/<task>``) a runs directory before a run writes anything in it: created with its
    mark; an existing one marked, or marked now when it is empty or holds only what runs write; anything else
    (a user's folder, the data dir given as --runs-dir) refused in one line, nothing written into it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"output dir {path} is not writable ({exc.strerror or exc})") from None
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise UserInputError(f"{path} is a file, not a runs directory: move it away or choose another --runs-dir")
        if is_marked(path):
            return
        try:
            foreign = foreign_entry(path, any_type=True)  # a file at a stage's place: the runner says so itself
        except OSError as exc:
            raise UserInputError(f"output dir {path} cannot be read ({exc.strerror or exc})") from None
        if foreign is not None:
            raise UserInputError(
                f"{path} exists and is not a runs directory made by ernie-bundle (it holds "
                f"{foreign.relative_to(path)}, which no run writes): not writing into it; choose another --runs-dir "
                "(or move what is there away)")
    except OSError as exc:
        raise UserInputError(f"output dir {path} is not writable ({exc.strerror or exc})") from None
    _write_marker(path)


def _write_marker(path: Path) -> None:
    import datetime as _dt
    import tempfile

    text = (f"{MARKER_HEAD}\nmade by ernie-bundle run (pid {os.getpid()}) at "
            f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}; `ernie-bundle clean` removes this "
            "folder only while everything in it is what runs write\n")
    try:
        fd, tmp = tempfile.mkstemp(dir=path, prefix=f"{MARKER_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path / MARKER_NAME)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UserInputError(f"cannot mark {path} as a runs directory ({exc.strerror or exc})") from None


@contextmanager
def run_lock(runs_dir: Path, doing: str = "run") -> Iterator[None]:
    """Hold ``runs_dir``'s lock for the block; UserInputError (exit 2) when another process holds it."""
    path = Path(runs_dir) / LOCK_NAME
    deadline = time.monotonic() + _RETRY_S
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            pid = _read_pid(path)
            raise UserInputError(f"cannot {doing}: another ernie-bundle run (pid {pid or 'unknown'}) is using "
                                 f"{runs_dir}; not waiting for it: try again when it has finished") from None
        # `clean` may have removed the directory while we waited: a lock on a deleted file guards nothing.
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            os.ftruncate(fd, 0)  # a lock file with a pid in it and no holder would mislead `status`
        except OSError:
            pass
        os.close(fd)


def lock_holder(runs_dir: Path) -> int | None:
    """The pid of the run holding ``runs_dir``'s lock (0: held, pid unknown); None when it is free.  Never waits."""
    path = Path(runs_dir) / LOCK_NAME
    try:
        fd = _open(path, os.O_RDONLY)
    except UserInputError:  # absent, a link, a FIFO ...: no run holds a lock there
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(path) or 0
    finally:
        os.close(fd)  # also releases the shared lock, when it was taken
    return None


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
