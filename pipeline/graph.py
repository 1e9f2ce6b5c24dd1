"""The stage graph, in order:

    finetune -> finetune-check -> compress -> export -> validate -> package

Each stage declares itself (name, what it requires, version, params, inputs) at the end of its module in
``pipeline/stages/``; this module only composes them and checks, at import, that every stage requires
only stages before it.  The runner (``pipeline.runner``) does the rest: cache keys, records, resume.
"""

from __future__ import annotations

from pipeline.stage import Stage
from pipeline.stages import compress, export, finetune, finetune_check, package, validate

STAGES: tuple[Stage, ...] = tuple(m.STAGE for m in (finetune, finetune_check, compress, export, validate, package))


def check_order(stages: tuple[Stage, ...]) -> None:
    """Refuse a graph where a stage requires one that is unknown or comes later (a cycle or a typo)."""
    seen: set[str] = set()
    for s in stages:
        if s.name in seen:
            raise ValueError(f"stage {s.name!r} is declared twice")
        missing = [r for r in s.requires if r not in seen]
        if missing:
            raise ValueError(f"stage {s.name!r} requires {', '.join(missing)}, not declared before it")
        seen.add(s.name)


check_order(STAGES)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def get_stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(name)
