"""The ``package:`` section of a task config.  Owned by the package stage / serving."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PackageConfig:
    runtime: str = "python-onnxruntime"
