"""A server's process group and shared memory: who is in it, and ending what a server leaves behind.

tritonserver runs in a process group of its own, with its python backend stubs; a killed server leaves its stubs
running and its /dev/shm regions behind.  ``reap_group`` ends exactly those (only tritonserver and stub programs
of the group, only regions of the prefix the launcher gave it); ``die_with_parent_preexec`` ties a child's life to
the process that started it.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import time
from pathlib import Path

from serving.procfs import cmdline, processes, read_stat


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, its identity
    (a pid is reused; a pid and its start time are not)."""
    proc = read_stat(pid)
    return None if proc is None or proc.exited else proc.start_time


def group_members(pgid: int) -> list[int]:
    """The live processes of group ``pgid`` (a zombie has exited: nothing left to end)."""
    return [s.pid for s in processes() if s.pgrp == pgid and not s.exited]


# What a server of ours runs: a recorded group is only ever reaped of these (a state file can be forged or stale,
# and a process group id is reused once its leader and members are gone).
SERVER_PROGRAMS = ("tritonserver", "triton_python_backend_stub")
# The python backend's shared-memory prefix exactly as start_server makes it: nothing in it globs.
SHM_PREFIX = re.compile(r"ernie_bundle_[0-9]{1,10}_[0-9a-f]{8}_")


def _program(pid: int) -> str:
    args = cmdline(pid)
    return Path(args[0].decode("utf-8", "replace")).name if args else ""


def server_members(pgid: int) -> list[int]:
    """The tritonserver and python stub processes of process group ``pgid`` (anything else in it is left alone)."""
    return [pid for pid in group_members(pgid) if _program(pid) in SERVER_PROGRAMS]


def shm_regions(shm_prefix: str) -> list[Path]:
    """The /dev/shm regions a server started with ``shm_prefix`` made: regular files of this user whose names start
    with it.  A prefix not of start_server's form gives none."""
    if not SHM_PREFIX.fullmatch(shm_prefix or ""):
        return []
    out = []
    for region in Path("/dev/shm").iterdir():
        if region.name.startswith(shm_prefix):
            try:
                st = region.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                out.append(region)
    return out


def reap_group(pgid: int, shm_prefix: str, timeout: float = 5.0) -> None:
    """SIGKILL the server processes left in the server's process group (its python stubs outlive a killed server)
    and remove its shared-memory regions, which nothing removes after a kill."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        members = server_members(pgid)
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for region in shm_regions(shm_prefix):
        region.unlink(missing_ok=True)


def die_with_parent_preexec():
    """A ``preexec_fn``: the child gets SIGTERM when the process starting it dies (kill -9 included), and exits at
    once when that process died already between fork and prctl (the signal would never come).  tritonserver on
    SIGTERM unloads its models, ends its python stubs and removes their shared memory; perf_analyzer and haproxy
    exit."""
    import ctypes

    # Resolved here, in the parent: between fork and exec the child (of a process with threads: gRPC's) only makes
    # the two system calls.
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return preexec
