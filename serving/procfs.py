"""What the kernel says about a process (Linux ``/proc/<pid>/stat`` and ``cmdline``), read in one place: the launcher's clean-up of
a server's process group, ``make perf``'s CPU time by process, and the tests that check nothing is left running."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    name: str  # the command name (comm, at most 15 characters; it may hold spaces and parentheses)
    state: str  # R running, S sleeping, Z zombie, ...
    ppid: int
    pgrp: int  # the process group
    cpu_ticks: int  # utime + stime, all threads, in clock ticks
    start_time: int  # clock ticks since boot: with the pid, the process's identity (a pid is reused, the pair is not)

    @property
    def exited(self) -> bool:
        """A zombie: it has exited, and only its parent's wait is missing."""
        return self.state == "Z"


def parse_stat(text: str) -> ProcStat:
    """A ``/proc/<pid>/stat`` line.  The command name sits in parentheses and may hold both, so the fields after it are
    found from the last ``)``."""
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(pid=int(text[: text.index("(")]), name=text[text.index("(") + 1 : text.rindex(")")], state=fields[0],
                    ppid=int(fields[1]), pgrp=int(fields[2]), cpu_ticks=int(fields[11]) + int(fields[12]),
                    start_time=int(fields[19]))


def read_stat(pid: int) -> ProcStat | None:
    """``pid``'s stat now; None when it is gone."""
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError):
        return None


def cmdline(pid: int) -> list[bytes] | None:
    """``pid``'s arguments as the kernel holds them (``/proc/<pid>/cmdline``, program first); None when it is gone."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def processes() -> Iterator[ProcStat]:
    """Every process there is now (one that ends while it is read is left out)."""
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name))) is not None:
            yield stat
