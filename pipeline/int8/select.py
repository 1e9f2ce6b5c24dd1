"""The INT8 recipe search as the stages call it: which training rows calibrate, which are held out, where
candidates are cached, which recipes are tried on this CPU.

Both ``compress`` (one search per width, to select width x recipe in ONNX Runtime) and ``export`` (the
selected width, a cache hit) call :func:`search_recipe` with the same rows and the same cache directory,
so the model export ships is byte-for-byte the one compress measured.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pipeline.data import heldout_examples
from pipeline.int8.search import SearchResult
from pipeline.kinds.base import FeatureSet

CACHE_DIR = "int8_candidates"  # under runs/<task>/, shared by compress and export


@dataclass(frozen=True)
class SearchRows:
    """Calibration feeds (the first ``export.calibration_sentences`` training rows) and the held-out slice
    (the last ``export.int8_search_sentences``) that scores every recipe.  Dev is never used here."""

    feeds: list[dict[str, np.ndarray]]
    held: FeatureSet
    pad_id: int

    def content_key(self) -> str:
        """What decides a candidate's score besides the model: the calibration rows and the held-out rows."""
        h = hashlib.sha256()
        for feed in self.feeds:
            for name in sorted(feed):
                h.update(feed[name].tobytes())
        for f in self.held.features:
            h.update(f.input_ids.tobytes() + f.token_type_ids.tobytes() + np.asarray(f.target).tobytes())
        return h.hexdigest()


def search_rows(cfg, tokenizer, train_examples: Sequence, kind) -> SearchRows:
    from pipeline.backends.onnxruntime import calibration_feeds

    ecfg = cfg.export
    calib = kind.featurize(tokenizer, list(train_examples[: ecfg.calibration_sentences]), cfg)
    held = kind.featurize(tokenizer, heldout_examples(train_examples, ecfg.calibration_sentences, ecfg.int8_search_sentences), cfg)
    return SearchRows(calibration_feeds(calib, ecfg.calibration_batch_size), held, tokenizer.pad_id)


def search_params(cfg) -> dict:
    """Every setting that decides what the search builds and picks (part of both stages' cache keys)."""
    e = cfg.export
    return {"alphas": e.int8_smooth_alphas, "reduce_range": e.int8_reduce_range, "sentences": e.int8_search_sentences,
            "max_fp32_matmuls": e.int8_max_fp32_matmuls, "budget_points": cfg.gates.max_accuracy_drop,
            "calibration_sentences": e.calibration_sentences, "calibration_batch_size": e.calibration_batch_size,
            "embeddings": e.int8_embeddings, "opset": e.opset}


def openvino_params(cfg) -> dict | None:
    """What decides the OpenVINO forms (None when OpenVINO is not one of the engines)."""
    if cfg.compress.runtime != "onnxruntime" or "openvino" not in cfg.compress.engines:
        return None
    from importlib import metadata

    versions = {}
    for package in ("openvino", "nncf"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"alphas": cfg.export.openvino_smooth_alphas, **versions}


def reduce_range_options(setting, cpu) -> list[bool]:
    """7-bit weights to try: as configured, or (auto) both where u8s8 can saturate (no VNNI)."""
    if setting == "auto":
        return [False, True] if cpu.int8_saturates else [False]
    return [bool(setting)]


def search_recipe(source: Path, out_path: Path, rows: SearchRows, ecfg, budget_points: float, cpu, cache_dir: Path, *,
                  baseline: Path | None = None, ranges: dict | None = None,
                  log: Callable[[str], None] = print) -> SearchResult:
    """Search the recipes for ``source`` (an FP32 ONNX) and copy the chosen one to ``out_path``.

    ``baseline``: the unpruned FP32 ONNX when ``source`` is pruned (drops count from it).  ``ranges``: the
    source's activation ranges over ``rows.feeds`` when the caller already measured them."""
    from pipeline.backends import onnxruntime as ortb
    from pipeline.evaluation import evaluate_session
    from pipeline.int8.recipe import Int8Recipe
    from pipeline.int8.search import Search
    from pipeline.int8.stats import activation_ranges

    ranges = ranges if ranges is not None else activation_ranges(source, rows.feeds, rows.pad_id)

    def evaluate(path: Path):
        ev = evaluate_session(ortb.session(path), rows.held, 64, desc=f"int8 search {path.stem[:24]}")
        return ev.score.value, ev.outputs

    search = Search(source, ranges, evaluate, cache_dir, embeddings=ecfg.int8_embeddings, log=log,
                    cache_key=rows.content_key(), baseline=baseline, decide=rows.held.kind.decisions)
    bases = [Int8Recipe(alpha, rr) for rr in reduce_range_options(ecfg.int8_reduce_range, cpu)
             for alpha in [None, *ecfg.int8_smooth_alphas]]
    log(f"[int8] CPU {cpu.summary()}; {len(bases)} recipes on {len(rows.held)} held-out training rows")
    result = search.run(bases, budget_points, ecfg.int8_max_fp32_matmuls)
    # A pruned source's drops count from the unpruned baseline: say how much of that the pruning itself cost, or
    # "OUTSIDE the budget" reads as an INT8 failure when the FP32 width alone is as far off on this slice.
    pruned = (f"; the pruned FP32 source alone {100.0 * (search.baseline_metric - search.fp32_metric):+.2f}"
              if search.pruned else "")
    log(f"[int8] {Path(source).stem}: recipe {result.chosen.recipe.name}, held-out drop {result.chosen.drop_points:+.2f} pts "
        f"({'within' if result.within_budget else 'OUTSIDE'} the {result.budget_points:g} pt budget{pruned})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.chosen.path, out_path)
    return result


def search_qdq(source: Path, out_path: Path, rows: SearchRows, ecfg, int8: SearchResult, cache_dir: Path, ranges: dict,
               log: Callable[[str], None] = print) -> SearchResult:
    """The TensorRT (QDQ) form's recipe: the ONNX Runtime search's own (its SmoothQuant migration and FP32
    MatMuls) when that is within ``export.qdq_budget_points`` of FP32 on the held-out slice; otherwise each
    SmoothQuant strength is tried for it (QDQ has no 7-bit weights: the symmetric int8 activations are what
    differ), and the best is kept: within the budget, the closest to FP32's decisions; else the smallest drop."""
    from pipeline.int8.recipe import Int8Recipe, build_qdq
    from pipeline.int8.search import Search

    def build(src, out, rngs, recipe, *, embeddings=True):
        return build_qdq(src, out, rngs, recipe, rows.feeds, embeddings=embeddings)

    first = Int8Recipe(int8.chosen.recipe.smooth_alpha, False, int8.chosen.recipe.fp32_matmuls)
    prior = int8.search
    search = Search(source, ranges, prior.evaluate, cache_dir, embeddings=ecfg.int8_embeddings, log=log,
                    cache_key=rows.content_key(), decide=prior.decide, build=build, form="qdq",
                    reference=(prior.fp32_metric, prior.reference), baseline_metric=prior.baseline_metric)
    budget = ecfg.qdq_budget_points
    scored = [search.score(first)[0]]
    log(f"[int8] QDQ {first.name}: held-out drop {scored[0].drop_points:+.2f} pts, agreement {scored[0].agreement:.4f}")
    if scored[0].drop_points > budget:
        for alpha in [None, *ecfg.int8_smooth_alphas]:
            recipe = Int8Recipe(alpha, False, first.fp32_matmuls)
            if recipe != first:
                s = search.score(recipe)[0]
                scored.append(s)
                log(f"[int8] QDQ {recipe.name}: held-out drop {s.drop_points:+.2f} pts, agreement {s.agreement:.4f}")
    ok = [s for s in scored if s.drop_points <= budget]
    chosen = max(ok, key=lambda s: (s.agreement, -s.drop_points)) if ok else min(scored, key=lambda s: s.drop_points)
    log(f"[int8] QDQ form: recipe {chosen.recipe.name}, held-out drop {chosen.drop_points:+.2f} pts "
        f"({'within' if ok else 'OUTSIDE'} the {budget:g} pt target)")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chosen.path, out_path)
    return SearchResult(chosen, bool(ok), budget, search.baseline_metric, scored)
