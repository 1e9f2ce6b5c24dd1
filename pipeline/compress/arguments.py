"""Compression arguments (the ``compress:`` section of a task config).  Owned by the compress stage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompressConfig:
    strategy: str = "dynabert+ptq"
