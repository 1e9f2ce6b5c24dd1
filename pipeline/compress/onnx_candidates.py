"""Candidates on the CPU engines that run ONNX (``compress.candidate_format: onnx``): ONNX Runtime and OpenVINO.

Paddle PTQ/QAT programs are not what ships on CPU (paddle2onnx keeps their weights float and the result
runs 3x slower than FP32), and judging ORT INT8 by Paddle's oneDNN int8 picked the wrong candidates.  So
each architecture's (width x depth) FP32 program becomes an FP32 ONNX, and with ``ptq`` in the strategy each engine of
``compress.engines`` gives its batch-independent INT8 form: ONNX Runtime's from the recipe search of
``pipeline.backends.onnxruntime.int8``, OpenVINO's from NNCF (``pipeline.backends.openvino.quantize``).  Every form is a
candidate (``plan``), scored and timed in its own engine in the same interleaved rounds: the engine is chosen by
measurement on this CPU.  Which of them are built at all, the speed-first screen decides (``pipeline.compress.screen``).
Both searches are cached under ``runs/<task>/cache/int8`` and compress repeats them for the selected architecture (cache
hits), so the shipped INT8 files are the measured ones.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Sequence

from pipeline.backends.engine import CpuEngine
from pipeline.compress.architecture import UNPRUNED, Architecture
from pipeline.compress.candidates import Candidate

ONNX_FILE = "model.onnx"
FIRST_TOKEN_DIR = "first_token"  # under candidates/fp32/: the unpruned network its INT8 candidates are made from
FP32_RUNTIME = "onnxruntime"  # where every architecture's FP32 ONNX is scored and timed (the ratios' base)


@dataclass(frozen=True)
class EngineSearch:
    """One engine's INT8 candidates as this task makes them."""

    engine: CpuEngine
    search: Callable  # (fp32 onnx, out path, unpruned fp32 | None) -> SearchResult
    settings: dict = field(default_factory=dict)  # what its candidates are timed with, kept in their settings
    embeddings_int8: bool = True  # whether its INT8 form quantizes the word-embedding table
    # (fp32 onnx, out path): writes its fastest INT8 form of that architecture there, unscored: what the speed-first
    # screen times (``CpuEngine.speed_form``, or the per-batch form); None: the engine is never screened out
    speed: Callable[[Path, Path], object] | None = None


@dataclass(frozen=True)
class Planned:
    """A candidate compress may build: an architecture's FP32 ONNX (``search`` None) or one engine's INT8 form of it."""

    name: str
    arch: Architecture
    search: EngineSearch | None = None

    @property
    def runtime(self) -> str:
        return self.search.engine.name if self.search is not None else FP32_RUNTIME

    @property
    def quantization(self) -> str:
        return self.search.engine.quantization if self.search is not None else "none"


def plan(archs: Sequence[Architecture], searches: Sequence[EngineSearch], quantize_unpruned: bool) -> list[Planned]:
    """Every candidate, architectures in order (the first is the unpruned baseline): its FP32 ONNX, then one INT8 form
    per engine of ``searches`` (none for the unpruned architecture without ``quantize_unpruned``)."""
    out = []
    for arch in archs:
        out.append(Planned(arch.name, arch))
        if arch.pruned or quantize_unpruned:
            prefix = arch.name + "-" if arch.pruned else ""
            out += [Planned(f"{prefix}{es.engine.int8_suffix}", arch, es) for es in searches]
    return out


class OnnxBuilder:
    """Builds planned candidates on demand: an architecture's FP32 ONNX once (from its static program, ``source(arch)``,
    which may distil it first), each engine's INT8 form by its recipe search.  ``baseline``: the stock unpruned network,
    the "fp32" candidate every ratio counts from, when ``source(UNPRUNED)`` is another network (its last layer cut to
    the first token: ``build._Candidates.first_token``).  ``phase(name)``: charged with the conversions
    (``conversion``) and the INT8 searches (``search``)."""

    def __init__(self, source: Callable[[Architecture], object], out_dir: Path, *, baseline=None, opset: int = 13,
                 log: Callable[[str], None] = print, phase: Callable[[str], ContextManager] | None = None):
        self.source, self.out_dir, self.opset, self.log = source, Path(out_dir), opset, log
        self.baseline = baseline
        self.phase = phase or (lambda name: nullcontext())
        self._onnx: dict[Path, Path] = {}

    def fp32(self, arch: Architecture) -> Path:
        """The FP32 ONNX the architecture's candidates are made from (candidates/<its name>/model.onnx; the unpruned
        first-token network's in candidates/fp32/first_token/)."""
        return self._convert(self.source(arch))

    def baseline_fp32(self) -> Path:
        """The stock unpruned FP32 ONNX (candidates/fp32/model.onnx): the "fp32" candidate, every drop's and ratio's base."""
        return self._convert(self._baseline())

    def _baseline(self):
        return self.baseline or self.source(UNPRUNED)

    def _convert(self, src) -> Path:
        from pipeline.backends.onnxruntime.convert import export_onnx

        if src.infer_dir not in self._onnx:
            folder = self.out_dir / "candidates" / src.arch.name
            if src.first_token_only and not src.arch.pruned:
                folder = folder / FIRST_TOKEN_DIR
            with self.phase("conversion"):
                self._onnx[src.infer_dir] = export_onnx(src.infer_dir, folder / ONNX_FILE, self.opset)
        return self._onnx[src.infer_dir]

    def build(self, p: Planned) -> Candidate:
        is_baseline = p.search is None and not p.arch.pruned
        # distilled first when pruned: that time is the architecture's, not this candidate's
        src = self._baseline() if is_baseline else self.source(p.arch)
        t0 = time.monotonic()
        fp32 = self._convert(src)
        settings = {"width_mult": p.arch.width, "depth_mult": p.arch.depth}
        if src.first_token_only:
            settings["first_token_only"] = True
        if p.search is None:
            return _done(Candidate(p.name, p.arch.width, "none", False, src.infer_dir, src.model_dir, settings,
                                   runtime=FP32_RUNTIME, model_path=fp32, source_onnx=fp32, depth_mult=p.arch.depth), t0)
        es, engine = p.search, p.search.engine
        baseline = self.baseline_fp32() if p.arch.pruned else None  # a pruned one's drops count from the unpruned FP32
        self.log(f"[compress] {p.name}: {engine.name} INT8 recipe search on {p.arch.name}")
        path = self.out_dir / "candidates" / p.name / engine.candidate_file
        with self.phase("search"):
            result = es.search(fp32, path, baseline)
        recipe = result.chosen.recipe
        self.log(f"[compress] {p.name}: recipe {recipe.name}")
        return _done(Candidate(p.name, p.arch.width, engine.quantization, es.embeddings_int8, src.infer_dir, src.model_dir,
                               {**settings, "int8_recipe": recipe.as_dict(), "heldout_drop_points": result.chosen.drop_points,
                                "recipe_within_budget": result.within_budget, **es.settings},
                               runtime=engine.name, model_path=path, source_onnx=fp32, depth_mult=p.arch.depth), t0)


def _done(c: Candidate, started: float) -> Candidate:
    c.build_seconds = round(time.monotonic() - started, 2)
    return c
