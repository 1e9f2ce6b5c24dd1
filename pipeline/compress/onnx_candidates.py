"""Candidates in ONNX Runtime, the runtime the CPU bundle ships (``compress.runtime: onnxruntime``).

Paddle PTQ/QAT programs are not what ships on CPU (paddle2onnx keeps their weights float and the result
runs 3x slower than FP32), and judging ORT INT8 by Paddle's oneDNN int8 picked the wrong candidates.  So
each width's FP32 program becomes an FP32 ONNX, and with ``ptq`` in the strategy the INT8 recipe search
(``pipeline.int8``) gives its batch-independent INT8 form; both are candidates, scored and timed in ORT.
The search is cached under ``runs/<task>/int8_candidates`` and export repeats it for the selected width
(a cache hit), so the shipped INT8 file is the measured one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from pipeline.compress.candidates import Candidate

ONNX_FILE = "model.onnx"


def onnx_candidates(sources: Sequence, out_dir: Path, *, quantize: Callable | None, quantize_unpruned: bool,
                    int8_embeddings: bool = True, opset: int = 13, log: Callable[[str], None] = print) -> Iterator[Candidate]:
    """For every source (``build.Source``: width, dygraph dir, static program): its FP32 ONNX candidate,
    then, with ``quantize``, its INT8 candidate.  The first source is the unpruned baseline."""
    from pipeline.backends.onnxruntime import export_onnx

    baseline_onnx = None
    for src in sources:
        t0 = time.monotonic()
        name = src.prefix.rstrip("-") or "fp32"
        fp32 = export_onnx(src.infer_dir, Path(out_dir) / "candidates" / name / ONNX_FILE, opset)
        baseline_onnx = baseline_onnx or fp32
        settings = {"width_mult": src.width}
        yield _done(Candidate(name, src.width, "none", False, src.infer_dir, src.model_dir, dict(settings),
                              runtime="onnxruntime", model_path=fp32), t0)
        if quantize is None or (src.width >= 1.0 and not quantize_unpruned):
            continue
        t0 = time.monotonic()
        int8_name = f"{src.prefix}int8"
        log(f"[compress] {int8_name}: INT8 recipe search on {name}")
        result = quantize(fp32, Path(out_dir) / "candidates" / int8_name / ONNX_FILE,
                          baseline_onnx if fp32 != baseline_onnx else None)
        recipe = result.chosen.recipe
        log(f"[compress] {int8_name}: recipe {recipe.name}")
        yield _done(Candidate(int8_name, src.width, "ort", int8_embeddings, src.infer_dir, src.model_dir,
                              {**settings, "int8_recipe": recipe.as_dict(), "heldout_drop_points": result.chosen.drop_points,
                               "recipe_within_budget": result.within_budget},
                              runtime="onnxruntime", model_path=Path(out_dir) / "candidates" / int8_name / ONNX_FILE), t0)


def _done(c: Candidate, started: float) -> Candidate:
    c.build_seconds = round(time.monotonic() - started, 2)
    return c
