"""One run per task's runs directory at a time: an exclusive ``flock`` on ``runs/<task>/.ernie-bundle.lock``.

The lock file is also what marks a directory as a runs directory this project made (``is_runs_dir``): every run
creates it before its first stage, and ``clean`` removes only a folder that holds it.  A folder's other entries
say nothing: a user's project may well have an ``export/`` or a ``cache/`` (and ``/var`` has one).

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

LOCK_NAME = ".ernie-bundle.lock"  # the runs directory's marker too: clean removes only a folder holding it
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


def is_runs_dir(path: Path) -> bool:
    """``path`` holds the run lock as a regular file: a runs directory made by ``ernie-bundle run`` (not a link)."""
    try:
        return stat.S_ISREG(os.stat(Path(path) / LOCK_NAME, follow_symlinks=False).st_mode)
    except OSError:
        return False


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
