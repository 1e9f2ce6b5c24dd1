"""The run cache: what a stage keeps across runs beyond its own record, so that a changed gate or an added width
rebuilds nothing already made.  One place, ``runs/<task>/cache/``, shown by ``ernie-bundle status`` and removed by
``ernie-bundle clean --cache`` (or with the whole task by ``clean``).

    cache/int8/       every INT8 candidate a recipe search built and scored (both engines), by source and recipe
                      (``pipeline.quantization.search``): compress searches per width, and its selected width's
                      shipped forms are cache hits
    cache/dynabert/   every DynaBERT-pruned model, by the model, data and distillation settings that made it
                      (``pipeline.compress.build``): about 10 minutes of distillation each

Entries are content-keyed, so stale ones are never reused, only left taking space.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CACHE = "cache"
PARTS = {"int8": "INT8 candidates (recipe searches)", "dynabert": "pruned models (DynaBERT)"}
# Where the two caches lived before they were one (runs made before 2026-11-25 keep their entries: moved once).
FORMER = {"int8": "int8_candidates", "dynabert": "dynabert_cache"}


@dataclass(frozen=True)
class CachePart:
    name: str
    path: Path
    entries: int
    bytes: int

    def line(self) -> str:
        return f"{self.name:<9} {self.entries:>4} entries {self.bytes / 2**20:>9.1f} MiB  {PARTS[self.name]}"


class RunCache:
    def __init__(self, runs_dir: Path):
        self.runs_dir = Path(runs_dir)
        self.root = self.runs_dir / CACHE

    def part(self, name: str) -> Path:
        """The directory of one part (``int8`` or ``dynabert``), its former place's entries moved in first."""
        path = self.root / name
        former = self.runs_dir / FORMER[name]
        if former.is_dir() and not former.is_symlink() and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            former.rename(path)
        return path

    @property
    def int8(self) -> Path:
        return self.part("int8")

    @property
    def dynabert(self) -> Path:
        return self.part("dynabert")

    def summary(self) -> list[CachePart]:
        out = []
        for name in PARTS:
            path = self.root / name
            if not path.is_dir():
                continue
            files = [p for p in path.rglob("*") if p.is_file()]
            # a model dir, or a scored candidate; not a dot-named one (a model being made, a distillation's checkpoint)
            entries = sum(1 for p in path.iterdir() if (p.is_dir() or p.suffix == ".json") and not p.name.startswith("."))
            out.append(CachePart(name, path, entries, sum(p.stat().st_size for p in files)))
        return out

    def clear(self) -> bool:
        """Remove the whole cache; False when there was none."""
        if not self.root.is_dir() or self.root.is_symlink():
            return False
        shutil.rmtree(self.root)
        return True
