"""What a CPU engine that runs the exported ONNX is to compress: one object per engine folder (its ``engine.py``),
listed by ``pipeline.backends.registry.CPU_ENGINES``.  Compress, its config check and validate's interleaved rounds
read an engine's name, files and steps from here instead of comparing engine names.

The object holds functions, not state: each imports its engine's libraries when called, so listing the engines
imports neither ONNX Runtime nor OpenVINO.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class CpuEngine:
    name: str  # compress.engines' entry, a candidate's ``runtime``, the log lines' prefix
    int8_suffix: str  # an INT8 candidate's name: <width prefix><int8_suffix> ("int8", "ov-int8")
    quantization: str  # a candidate's ``quantization`` for this engine's INT8 form ("ort", "nncf")
    candidate_file: str  # the file an INT8 candidate is written to under candidates/<name>/
    where: str  # the candidates report's line for the engine
    # (fp32 onnx, out path, rows, task config, cache dir, unpruned fp32 or None, log) -> SearchResult: its INT8
    # recipe search, cached per width in the run's cache
    search: Callable[..., object]
    # (model path, precision, candidate settings) -> session with ``run`` and ``name``: how compress measures it
    open: Callable[[Path, str, dict], object]
    # the task config -> what its candidates are timed with, kept in each candidate's settings
    settings: Callable[[object], dict] = lambda cfg: {}
    # the task config -> whether its INT8 form quantizes the word-embedding table
    int8_embeddings: Callable[[object], bool] = lambda cfg: True
    # the task config -> None, or raises ConfigError naming why the engine cannot run as configured here
    check: Callable[[object], None] = lambda cfg: None
    # (fp32 onnx, out path, task config) -> the per-batch INT8 form (quantization.batch_independent_int8: false);
    # None: the engine has only fixed-scale INT8, so it has no candidate in that mode
    per_batch_int8: Callable[..., object] | None = None
