"""Accuracy-aware choice of the INT8 recipe, judged on held-out training sentences (never on dev).

1. Every base recipe (SmoothQuant strength x weight range) is built and scored on the held-out slice.
2. When none is within the budget, mixed precision: each weight MatMul's sensitivity is measured (the
   base recipe with that one MatMul kept in FP32: how much of the output error disappears), and the most
   sensitive are kept in FP32 one by one until the held-out drop is within budget or ``max_fp32`` is hit.
3. The pick: within budget, fewest FP32 MatMuls (they are what costs speed), then the highest agreement
   with the source model's answers, then the smallest drop.
   No candidate within budget: the smallest drop is returned with ``within_budget`` false, so the gates
   fail loudly downstream instead of a silent FP32 fallback.

Every built candidate is cached in ``work_dir`` by recipe name and source hash, so a re-run with another
budget or another alpha list rebuilds nothing it already scored.

One search for every engine: an engine comes in as an ``EngineForm`` (``build``: one recipe -> one model file;
``evaluate``: a model file -> its held-out outputs; ``record``: what else decides a candidate), made by ONNX
Runtime's (``pipeline.backends.onnxruntime.int8.search``) and OpenVINO's (``pipeline.backends.openvino.quantize``)
modules, and ``search_recipe`` runs it.  A candidate's cache key is the hash of a record (the source file, the
held-out rows, the CPU's instruction sets, the form's record), never a hand-kept version string.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pipeline.quantization.recipe import Int8Recipe, weight_matmuls
from pipeline.validation.gates import meets


@dataclass(frozen=True)
class Scored:
    recipe: Int8Recipe
    metric: float  # task metric on the held-out slice (fraction)
    drop_points: float  # FP32 held-out metric minus this, in points
    agreement: float  # fraction of held-out rows whose decisions (PipelineKind.decisions) equal FP32's
    path: str  # the scored file, in the run's cache: not recorded (a machine's path in meta.json and gates.json)

    def as_dict(self) -> dict:
        return {**self.recipe.as_dict(), "metric": self.metric, "drop_points": self.drop_points,
                "agreement": self.agreement}


@dataclass
class SearchResult:
    chosen: Scored
    within_budget: bool
    budget_points: float
    fp32_metric: float  # the unpruned FP32 baseline's held-out metric, which drops are counted from
    candidates: list[Scored] = field(default_factory=list)
    sensitivity: dict[str, float] = field(default_factory=dict)  # MatMul name -> error share removed when FP32
    search: "Search | None" = field(default=None, repr=False, compare=False)  # what scored them (reusable)

    def as_dict(self) -> dict:
        return {"chosen": self.chosen.as_dict(), "within_budget": self.within_budget,
                "budget_points": self.budget_points, "fp32_metric": self.fp32_metric,
                "candidates": [c.as_dict() for c in self.candidates], "sensitivity": self.sensitivity}


Evaluate = Callable[[Path], tuple[float, list[np.ndarray]]]  # model path -> (metric, per-row outputs)


Decide = Callable[[np.ndarray], np.ndarray]  # one row's outputs -> what the model decides (PipelineKind.decisions)


def _argmax(output: np.ndarray) -> np.ndarray:
    return np.argmax(output, axis=-1)


def _agreement(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], decide: Decide = _argmax) -> float:
    same = [np.array_equal(decide(o), decide(r)) for o, r in zip(outputs, reference)]
    return float(np.mean(same)) if same else 1.0


def _error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    return float(np.mean([np.mean((np.asarray(o) - np.asarray(r)) ** 2) for o, r in zip(outputs, reference)]))


Build = Callable[..., Path]  # (fp32_path, out_path, ranges, recipe, *, embeddings) -> out_path


def _copy_file(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(src, dst))


def _move_file(src: Path, dst: Path) -> Path:
    return Path(src).replace(dst)


@dataclass(frozen=True)
class EngineForm:
    """One engine's INT8 form as the search builds, scores and caches it (each engine's quantize module makes its
    own: ONNX Runtime's fixed-scale and QDQ forms, OpenVINO's NNCF IR)."""

    name: str  # "onnxruntime", "qdq", "openvino": the log lines' prefix and the cache files' first word
    build: Build
    evaluate: Evaluate
    # What else decides a built candidate and its score (the builder's version, library versions, session
    # properties): part of every cache key, so a change to any of them re-scores instead of reusing.
    record: dict
    ranges: dict = field(default_factory=dict)  # the builder's calibration (ONNX Runtime's activation ranges)
    embeddings: bool = True  # the word-embedding table quantized too
    suffix: str = ".onnx"  # the built file's suffix
    promote: Callable[[Path, Path], object] = _move_file  # a finished build into the cache (an IR is two files)
    copy: Callable[[Path, Path], object] = _copy_file  # the chosen candidate out of the cache


class Search:
    """Scores ``form``'s recipes on the held-out rows and caches every candidate in ``work_dir``.  ``cache_key``:
    what the held-out rows and calibration are (``SearchRows.content_key``).  ``reference`` and
    ``baseline_metric`` reuse another search's FP32 evaluation."""

    def __init__(self, fp32_path: Path, form: EngineForm, work_dir: Path, *, log: Callable[[str], None] = print,
                 cache_key: str = "", baseline: Path | None = None, decide: Decide = _argmax,
                 reference: tuple[float, list[np.ndarray]] | None = None, baseline_metric: float | None = None):
        import hashlib

        from pipeline.contract import cpu_key
        from pipeline.hashing import file_sha256

        self.fp32_path, self.form = Path(fp32_path), form
        self.work_dir, self.log, self.decide = Path(work_dir), log, decide
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # The CPU's instruction sets: an engine's INT8 kernels, so its scores, differ between them.
        record = {"source": file_sha256(self.fp32_path), "rows": cache_key, "embeddings": form.embeddings,
                  "form": form.name, "cpu": cpu_key(), **form.record}
        self.key = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:12]
        self.fp32_metric, self.reference = reference if reference is not None else form.evaluate(self.fp32_path)
        # A pruned source already spent part of the budget: drops count from the unpruned baseline's metric,
        # agreement from the source's own outputs.
        if baseline_metric is not None:
            self.baseline_metric = baseline_metric
        else:
            self.baseline_metric = form.evaluate(Path(baseline))[0] if baseline else self.fp32_metric
        self.pruned = baseline is not None or (baseline_metric is not None and baseline_metric != self.fp32_metric)

    def _cache(self, recipe: Int8Recipe) -> tuple[Path, Path]:
        import hashlib

        tag = hashlib.sha256(json.dumps(recipe.as_dict(), sort_keys=True).encode()).hexdigest()[:10]
        # Names carry dots (static-sq0.5): never Path.with_suffix, which would cut them at "sq0".
        stem = f"{self.form.name}-{recipe.name}-{tag}-{self.key}"
        return self.work_dir / f"{stem}{self.form.suffix}", self.work_dir / f"{stem}.json"

    @staticmethod
    def _outputs_file(record: Path) -> Path:
        return record.parent / (record.name[: -len(".json")] + ".npz")

    def score(self, recipe: Int8Recipe) -> tuple[Scored, list[np.ndarray]]:
        model, record = self._cache(recipe)
        if model.is_file() and record.is_file():
            cached = json.loads(record.read_text())
            with np.load(self._outputs_file(record), allow_pickle=False) as saved:
                outputs = [np.asarray(saved[f"arr_{i}"], np.float32) for i in range(len(saved.files))]
            # Drop and agreement are recomputed: the same candidate may be judged against another baseline,
            # or with another notion of what the model decides.
            drop = 100.0 * (self.baseline_metric - cached["metric"])
            return Scored(recipe, cached["metric"], drop, _agreement(outputs, self.reference, self.decide), str(model)), outputs
        suffix = self.form.suffix
        partial = model.with_name(f"{model.name[: -len(suffix)]}.partial{suffix}")
        self.form.build(self.fp32_path, partial, self.form.ranges, recipe, embeddings=self.form.embeddings)
        self.form.promote(partial, model)
        metric, outputs = self.form.evaluate(model)
        scored = Scored(recipe, metric, 100.0 * (self.baseline_metric - metric), _agreement(outputs, self.reference, self.decide), str(model))
        np.savez(self._outputs_file(record), *outputs)
        record.write_text(json.dumps(scored.as_dict()))
        return scored, outputs

    def run(self, bases: Sequence[Int8Recipe], budget_points: float, max_fp32: int) -> SearchResult:
        scored = []
        for recipe in bases:
            s, _ = self.score(recipe)
            scored.append(s)
            self.log(f"[{self.form.name}] {recipe.name}: held-out drop {s.drop_points:+.2f} pts, agreement {s.agreement:.4f}")
        ok = [s for s in scored if meets(s.drop_points, budget_points, "max")]
        sensitivity: dict[str, float] = {}
        source_drop = 100.0 * (self.baseline_metric - self.fp32_metric)
        if not ok and self.pruned and not meets(source_drop, budget_points, "max"):
            # A pruned source already lost more than the budget in FP32: no FP32 MatMul can win it back.
            self.log(f"[{self.form.name}] the FP32 source is itself {source_drop:+.2f} pts below the baseline: mixed precision skipped")
        elif not ok and max_fp32 > 0:
            best = min(scored, key=lambda s: s.drop_points)
            extra, sensitivity = self._mixed_precision(best.recipe, budget_points, max_fp32)
            scored += extra
            ok = [s for s in scored if meets(s.drop_points, budget_points, "max")]
        if ok:
            # Fewest FP32 MatMuls (speed), then the closest to the source model's own answers: on a slice of a
            # few thousand rows agreement is a steadier signal than the metric, which moves by tenths of a point.
            chosen = min(ok, key=lambda s: (len(s.recipe.fp32_matmuls), -s.agreement, s.drop_points))
        else:
            chosen = min(scored, key=lambda s: s.drop_points)
        return SearchResult(chosen, bool(ok), budget_points, self.baseline_metric, scored, sensitivity, search=self)

    def _mixed_precision(self, base: Int8Recipe, budget_points: float, max_fp32: int):
        import onnx

        names = [n.name for n in weight_matmuls(onnx.load(str(self.fp32_path)))]
        _, base_out = self.score(base)
        base_err = _error(base_out, self.reference)
        sensitivity = {}
        for name in names:
            _, out = self.score(Int8Recipe(base.smooth_alpha, base.reduce_range, (name,)))
            sensitivity[name] = (base_err - _error(out, self.reference)) / max(base_err, 1e-12)
        ranked = sorted(names, key=lambda n: -sensitivity[n])
        self.log(f"[{self.form.name}] most sensitive MatMuls: " + ", ".join(f"{n} {sensitivity[n]:.2f}" for n in ranked[:5]))
        extra = []
        for k in range(1, min(max_fp32, len(ranked)) + 1):
            s, _ = self.score(Int8Recipe(base.smooth_alpha, base.reduce_range, tuple(ranked[:k])))
            extra.append(s)
            self.log(f"[{self.form.name}] {s.recipe.name}: held-out drop {s.drop_points:+.2f} pts")
            if meets(s.drop_points, budget_points, "max"):
                break
        return extra, sensitivity


def search_recipe(source: Path, out_path: Path, form: EngineForm, rows, bases: Sequence[Int8Recipe], budget_points: float,
                  max_fp32: int, cache_dir: Path, *, baseline: Path | None = None,
                  log: Callable[[str], None] = print) -> SearchResult:
    """Search ``bases`` (then mixed precision) for ``source`` (an FP32 ONNX) in ``form`` on ``rows``
    (``pipeline.quantization.select.SearchRows``), and copy the chosen candidate to ``out_path``.  ``baseline``: the
    unpruned FP32 ONNX when ``source`` is pruned (drops count from it)."""
    search = Search(source, form, cache_dir, log=log, cache_key=rows.content_key(), baseline=baseline,
                    decide=rows.held.kind.decisions)
    log(f"[{form.name}] {len(bases)} INT8 recipes on {len(rows.held)} held-out training rows")
    result = search.run(bases, budget_points, max_fp32)
    # A pruned source's drops count from the unpruned baseline: say how much of that the pruning itself cost, or
    # "OUTSIDE the budget" reads as an INT8 failure when the FP32 width alone is as far off on this slice.
    pruned = (f"; the pruned FP32 source alone {100.0 * (search.baseline_metric - search.fp32_metric):+.2f}"
              if search.pruned else "")
    log(f"[{form.name}] {Path(source).stem}: recipe {result.chosen.recipe.name}, held-out drop "
        f"{result.chosen.drop_points:+.2f} pts ({'within' if result.within_budget else 'OUTSIDE'} the "
        f"{result.budget_points:g} pt budget{pruned})")
    form.copy(Path(result.chosen.path), Path(out_path))
    return result
