"""The ``export:`` and ``validate:`` sections of a task config.  Owned by the export/validate stages."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ExportConfig:
    opset: int = 13


@dataclass
class ValidateConfig:
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8, 32])
