"""Progress bars for long loops (training, evaluation, calibration).

tqdm on a terminal; in CI logs (no TTY) the bar is redrawn at most every 30 s so logs stay short.
"""

from __future__ import annotations

import sys
from typing import Iterable, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


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
    )


def log(message: str) -> None:
    """Print a line without breaking an active progress bar."""
    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()
