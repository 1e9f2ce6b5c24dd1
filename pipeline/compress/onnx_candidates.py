"""Candidates on the CPU engines that run ONNX (``compress.runtime: onnxruntime``): ONNX Runtime and OpenVINO.

Paddle PTQ/QAT programs are not what ships on CPU (paddle2onnx keeps their weights float and the result
runs 3x slower than FP32), and judging ORT INT8 by Paddle's oneDNN int8 picked the wrong candidates.  So
each width's FP32 program becomes an FP32 ONNX, and with ``ptq`` in the strategy each engine of
``compress.engines`` gives its batch-independent INT8 form: ONNX Runtime's from the recipe search of
``pipeline.backends.onnxruntime.int8``, OpenVINO's from NNCF (``pipeline.backends.openvino.quantize``).  Every form is a candidate,
scored and timed in its own engine in the same interleaved rounds: the engine is chosen by measurement on
this CPU.  Both searches are cached under ``runs/<task>/cache/int8`` and compress repeats them for the
selected width (cache hits), so the shipped INT8 files are the measured ones.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Sequence

from pipeline.backends.engine import CpuEngine
from pipeline.compress.candidates import Candidate

ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class EngineSearch:
    """One engine's INT8 candidates as this task makes them."""

    engine: CpuEngine
    search: Callable  # (fp32 onnx, out path, unpruned fp32 | None) -> SearchResult
    settings: dict = field(default_factory=dict)  # what its candidates are timed with, kept in their settings
    embeddings_int8: bool = True  # whether its INT8 form quantizes the word-embedding table


def onnx_candidates(sources: Sequence, out_dir: Path, *, searches: Sequence[EngineSearch], quantize_unpruned: bool,
                    opset: int = 13, log: Callable[[str], None] = print,
                    phase: Callable[[str], ContextManager] | None = None) -> Iterator[Candidate]:
    """For every source (``build.Source``: width, dygraph dir, static program): its FP32 ONNX candidate, then one
    INT8 candidate per engine of ``searches``.  The first source is the unpruned baseline.  ``phase(name)``: charged
    with the conversions (``conversion``) and the INT8 searches (``search``); never held across a ``yield``."""
    from pipeline.backends.onnxruntime.convert import export_onnx

    phase = phase or (lambda name: nullcontext())

    baseline_onnx = None
    for src in sources:
        t0 = time.monotonic()
        name = src.prefix.rstrip("-") or "fp32"
        with phase("conversion"):
            fp32 = export_onnx(src.infer_dir, Path(out_dir) / "candidates" / name / ONNX_FILE, opset)
        baseline_onnx = baseline_onnx or fp32
        settings = {"width_mult": src.width}
        yield _done(Candidate(name, src.width, "none", False, src.infer_dir, src.model_dir, dict(settings),
                              runtime="onnxruntime", model_path=fp32), t0)
        if src.width >= 1.0 and not quantize_unpruned:
            continue
        baseline = baseline_onnx if fp32 != baseline_onnx else None
        for es in searches:
            engine, t0 = es.engine, time.monotonic()
            int8_name = f"{src.prefix}{engine.int8_suffix}"
            log(f"[compress] {int8_name}: {engine.name} INT8 recipe search on {name}")
            path = Path(out_dir) / "candidates" / int8_name / engine.candidate_file
            with phase("search"):
                result = es.search(fp32, path, baseline)
            recipe = result.chosen.recipe
            log(f"[compress] {int8_name}: recipe {recipe.name}")
            yield _done(Candidate(int8_name, src.width, engine.quantization, es.embeddings_int8, src.infer_dir, src.model_dir,
                                  {**settings, "int8_recipe": recipe.as_dict(), "heldout_drop_points": result.chosen.drop_points,
                                   "recipe_within_budget": result.within_budget, **es.settings},
                                  runtime=engine.name, model_path=path), t0)


def _done(c: Candidate, started: float) -> Candidate:
    c.build_seconds = round(time.monotonic() - started, 2)
    return c
