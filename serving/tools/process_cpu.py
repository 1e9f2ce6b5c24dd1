"""CPU time by process, from /proc: where the cores went while ``make perf`` measured a level.

A snapshot reads ``utime + stime`` of tritonserver, each of its python backend stubs (named by the model instance
they run, e.g. ``tnews_0_0``) and the client; two snapshots give each process's CPU seconds over the window
between them (threads included: OpenVINO's and ONNX Runtime's pools count to the stub that owns them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from serving.procfs import cmdline, processes, read_stat

TICKS = os.sysconf("SC_CLK_TCK")
STUB = "triton_python_backend_stub"


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads) in seconds; None when it is gone."""
    stat = read_stat(pid)
    return None if stat is None else stat.cpu_ticks / TICKS


def stub_processes(server_pid: int) -> dict[str, int]:
    """Model instance name (``tnews_0_0``) -> pid of each python backend stub the server started: the stubs in the
    process group ``server_pid`` leads (the launcher starts tritonserver in a group of its own)."""
    out = {}
    for stat in processes():
        if stat.pgrp != server_pid:
            continue
        args = cmdline(stat.pid)
        # the stub's arguments: model.py, shm region, sizes, parent pid, backend dir, ..., instance name, kind
        if args and Path(args[0].decode(errors="replace")).name == STUB and len(args) > 8:
            out[args[8].decode(errors="replace")] = stat.pid
    return out


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic()
    cpu: dict[str, float]  # process label -> CPU seconds so far


def snapshot(processes: dict[str, int]) -> Snapshot:
    """CPU seconds of each labelled pid now (a process that is gone counts 0)."""
    return Snapshot(time.monotonic(), {label: cpu_seconds(pid) or 0.0 for label, pid in processes.items()})


def cores(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """Cores each process used between two snapshots (CPU seconds / wall seconds)."""
    wall = max(after.at - before.at, 1e-9)
    return {label: max(0.0, after.cpu.get(label, 0.0) - before.cpu.get(label, 0.0)) / wall for label in after.cpu}


def server_processes(server_pid: int, models: tuple[str, ...] | None = None) -> dict[str, int]:
    """``tritonserver`` and ``stub <instance>`` for each stub (only those of ``models``, when given) -> pid."""
    stubs = stub_processes(server_pid)
    if models is not None:
        stubs = {k: v for k, v in stubs.items() if any(k.startswith(f"{m}_") and k[len(m) + 1 :].replace("_", "").isdigit()
                                                       for m in models)}
    return {"tritonserver": server_pid, **{f"stub {k}": v for k, v in sorted(stubs.items())}}
