"""Progress bars for long loops (training, evaluation, calibration); the time a stage spends per phase
(``PhaseClock``: its record and ``ernie-bundle status`` show it) and the estimate line before a long loop
(``StepEstimate``).

tqdm on a terminal; in CI logs (no TTY) the bar is redrawn at most every 30 s so logs stay short.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Sequence, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

_quiet = 0  # > 0 inside ``quiet()``


@contextmanager
def quiet():
    """No bars inside: a tool that re-runs one short loop many times (the smoke test's padded-width check) would
    otherwise leave a bar per run."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1


def progress(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", initial: int = 0, unit: str = "it"):
    tty = sys.stderr.isatty()
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        initial=initial,
        unit=unit,
        dynamic_ncols=True,
        mininterval=0.5 if tty else 30.0,
        leave=tty,
        file=sys.stderr,
        disable=_quiet > 0,
    )


def log(message: str) -> None:
    """Print a line without breaking an active progress bar."""
    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()


def duration(seconds: float) -> str:
    """``38m04s`` from a minute on, ``7.5s`` below."""
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


class PhaseClock:
    """Seconds per phase of one stage run, measured with ``time.monotonic``: what a stage's record and
    ``ernie-bundle status`` show (``with clock.phase("distillation"): ...``).

    A phase entered inside another pauses the outer one, so every second is charged to one phase only and the phases
    sum to at most the stage's total (the rest is the stage's own glue).  A name entered again adds up: scoring runs
    once per candidate.  Phases are kept in the order they were first entered."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._open: list[str] = []
        self._since = 0.0

    def _charge(self) -> None:
        now = time.monotonic()
        if self._open:
            self._seconds[self._open[-1]] += now - self._since
        self._since = now

    @contextmanager
    def phase(self, name: str):
        self._charge()
        self._open.append(name)
        self._seconds.setdefault(name, 0.0)
        try:
            yield
        finally:
            self._charge()
            self._open.pop()

    def seconds(self) -> dict[str, float]:
        """{phase: seconds} so far (a phase still open, as when a stage crashed inside it, counts up to now); each
        rounded down to the millisecond, so the sum never exceeds the time measured."""
        self._charge()
        return {k: math.floor(v * 1000) / 1000 for k, v in self._seconds.items()}


class StepEstimate:
    """One line, once, after the first steps of a long loop: how many steps, the seconds per step measured over
    ``after`` steps (the first ``skip`` left out: they build kernels and warm caches), and about how long all of them
    take.  Call ``step()`` as each step starts.  ``cap``: ``total`` is a most (the loop may stop earlier), said as
    such.  ``costs``: each of the ``total`` steps' work in the order they run, named ``cost_name`` (training: its
    batch's padded tokens); the measured seconds are then spread by work, not by count, since a few length-bucketed
    batches can be far shorter or longer than the loop's mean (MEASUREMENTS.md, "How long make bundle takes")."""

    def __init__(self, what: str, total: int, log: Callable[[str], None], *, after: int = 5, skip: int = 1, cap: str = "",
                 costs: Sequence[float] | None = None, cost_name: str = "work"):
        self.what, self.total, self.log, self.after, self.skip, self.cap = what, total, log, after, skip, cap
        self.cost_name = cost_name
        # a plan of another length than the loop's (it cannot be one of these steps' work) is not used
        self.costs = list(costs) if costs is not None and len(costs) == total else None
        self.started = 0
        self._t0: float | None = None
        self.per_step: float | None = None

    def step(self) -> None:
        self.started += 1
        if self.per_step is not None:
            return
        if self.started == self.skip + 1:
            self._t0 = time.monotonic()
        elif self._t0 is not None and self.started == self.skip + 1 + self.after:
            seconds = time.monotonic() - self._t0
            done = self.started - 1  # steps begun before this one
            measured = self.costs[self.skip:done] if self.costs else None
            if measured and sum(measured) > 0:
                per_work = seconds / sum(measured)
                self.per_step = per_work * sum(self.costs) / self.total
                left_s, how = per_work * sum(self.costs[done:]), f", scaled by each step's {self.cost_name}"
            else:
                self.per_step = seconds / self.after
                left_s, how = self.per_step * (self.total - done), ""
            most = "at most " if self.cap else ""
            self.log(f"{self.what}: {most}{self.total} steps x {self.per_step:.2f} s/step (measured over steps "
                     f"{self.skip + 1}-{self.skip + self.after}{how}): {most or 'about '}{duration(self.per_step * self.total)} "
                     f"in all, {duration(left_s)} left" + (f" ({self.cap})" if self.cap else ""))
