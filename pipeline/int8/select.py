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
    log(f"[int8] {Path(source).stem}: recipe {result.chosen.recipe.name}, held-out drop {result.chosen.drop_points:+.2f} pts "
        f"({'within' if result.within_budget else 'OUTSIDE'} the {result.budget_points:g} pt budget)")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.chosen.path, out_path)
    return result
