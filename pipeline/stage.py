"""What a stage declares about itself: ``Stage``.  Each module in ``pipeline/stages/`` ends with its own
``STAGE = Stage(...)`` beside the code it describes; ``pipeline.graph`` only puts them in order and checks
that every ``requires`` names an earlier stage.

A stage's cache key is the hash of its name, its ``version``, the config values ``params`` returns and
the content hashes of its inputs (external files ``inputs`` names plus the outputs of the stages it
``requires``).  Change any of them and the stage, and everything after it, runs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pipeline.config import TaskConfig


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    requires: tuple[str, ...]
    params: Callable[["TaskConfig"], dict]
    inputs: Callable[["TaskConfig"], dict[str, str]]  # external inputs -> content hash (cheap: no parsing)
    run: Callable  # (StageContext) -> StageResult
    version: str = "1"  # bump when the stage's logic changes what it produces
    # Raises UserInputError when the config cannot work for this stage; called for every selected
    # stage before the first one runs, so a run never fails at its end on something knowable at its start.
    check: Callable[["TaskConfig"], None] | None = None
    # Outputs that live outside the stage's out/ (the package stage's bundle): True when the record's
    # external outputs are still in place and unchanged; a stage whose outputs were removed reruns.
    external_intact: Callable[["TaskConfig", dict[str, str]], bool] | None = None
