"""ONNX Runtime's recipe searches: ``pipeline.quantization.search`` with this engine's forms (``fixed_scale_form``).

:func:`search_recipe` is the fixed-scale form (``recipe.build``), each recipe scored in an ONNX Runtime session on
the held-out training rows; which recipes are tried depends on this CPU (``reduce_range_options``).
:func:`search_qdq` is the TensorRT (QDQ) form (``recipe.build_qdq``), starting from the recipe the first search
chose.  Both cache their candidates in the run cache (``pipeline.run_cache``: ``runs/<task>/cache/int8``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pipeline.quantization.search import EngineForm, SearchResult
from pipeline.validation.gates import meets

if TYPE_CHECKING:  # annotations only: select reads the task's data, which reads the config, which lists the engines
    from pipeline.quantization.select import SearchRows


def reduce_range_options(setting, cpu) -> list[bool]:
    """7-bit weights to try: as configured, or (auto) both where u8s8 can saturate (no VNNI)."""
    if setting == "auto":
        return [False, True] if cpu.int8_saturates else [False]
    return [bool(setting)]


def fixed_scale_form(rows: SearchRows, ranges: dict, embeddings: bool, name: str = "onnxruntime", build=None) -> EngineForm:
    """ONNX Runtime's fixed-scale INT8 form (``recipe.build``; ``build`` another of its builders, the QDQ one),
    scored in ONNX Runtime sessions on ``rows``' held-out slice."""
    from importlib import metadata

    from pipeline.backends.onnxruntime.int8 import recipe
    from pipeline.backends.onnxruntime.session import session
    from pipeline.evaluation import evaluate_session

    def evaluate(path: Path):
        ev = evaluate_session(session(path), rows.held, 64, desc=f"{name} int8 search {path.stem[:24]}")
        return ev.score.value, ev.outputs

    record = {"builder": recipe.FORM_VERSION, "onnxruntime": metadata.version("onnxruntime")}
    return EngineForm(name, build or recipe.build, evaluate, record, ranges, embeddings)


def search_recipe(source: Path, out_path: Path, rows: SearchRows, qcfg, budget_points: float, cpu, cache_dir: Path, *,
                  baseline: Path | None = None, ranges: dict | None = None,
                  log: Callable[[str], None] = print) -> SearchResult:
    """Search the recipes for ``source`` (an FP32 ONNX) and copy the chosen one to ``out_path``.

    ``baseline``: the unpruned FP32 ONNX when ``source`` is pruned (drops count from it).  ``ranges``: the
    source's activation ranges over ``rows.feeds`` when the caller already measured them."""
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges
    from pipeline.quantization import search
    from pipeline.quantization.recipe import Int8Recipe

    ranges = ranges if ranges is not None else activation_ranges(source, rows.feeds, rows.pad_id)
    bases = [Int8Recipe(alpha, rr) for rr in reduce_range_options(qcfg.int8_reduce_range, cpu)
             for alpha in [None, *qcfg.int8_smooth_alphas]]
    log(f"[onnxruntime] CPU {cpu.summary()}")
    return search.search_recipe(source, out_path, fixed_scale_form(rows, ranges, qcfg.int8_embeddings), rows, bases,
                                budget_points, qcfg.int8_max_fp32_matmuls, cache_dir, baseline=baseline, log=log)


def search_qdq(source: Path, out_path: Path, rows: SearchRows, qcfg, int8: SearchResult, cache_dir: Path, ranges: dict,
               log: Callable[[str], None] = print) -> SearchResult:
    """The TensorRT (QDQ) form's recipe: the ONNX Runtime search's own (its SmoothQuant migration and FP32
    MatMuls) when that is within ``quantization.qdq_budget_points`` of FP32 on the held-out slice; otherwise each
    SmoothQuant strength is tried for it (QDQ has no 7-bit weights: the symmetric int8 activations are what
    differ), and the best is kept: within the budget, the closest to FP32's decisions; else the smallest drop."""
    from pipeline.backends.onnxruntime.int8.recipe import build_qdq
    from pipeline.quantization.recipe import Int8Recipe
    from pipeline.quantization.search import Search

    def build(src, out, rngs, recipe, *, embeddings=True):
        return build_qdq(src, out, rngs, recipe, rows.feeds, embeddings=embeddings)

    first = Int8Recipe(int8.chosen.recipe.smooth_alpha, False, int8.chosen.recipe.fp32_matmuls)
    prior = int8.search
    form = fixed_scale_form(rows, ranges, qcfg.int8_embeddings, "qdq", build)
    search = Search(source, form, cache_dir, log=log, cache_key=rows.content_key(), decide=prior.decide,
                    reference=(prior.fp32_metric, prior.reference), baseline_metric=prior.baseline_metric)
    budget = qcfg.qdq_budget_points
    scored = [search.score(first)[0]]
    log(f"[{form.name}] {first.name}: held-out drop {scored[0].drop_points:+.2f} pts, agreement {scored[0].agreement:.4f}")
    if not meets(scored[0].drop_points, budget, "max"):
        for alpha in [None, *qcfg.int8_smooth_alphas]:
            recipe = Int8Recipe(alpha, False, first.fp32_matmuls)
            if recipe != first:
                s = search.score(recipe)[0]
                scored.append(s)
                log(f"[{form.name}] {recipe.name}: held-out drop {s.drop_points:+.2f} pts, agreement {s.agreement:.4f}")
    ok = [s for s in scored if meets(s.drop_points, budget, "max")]
    chosen = max(ok, key=lambda s: (s.agreement, -s.drop_points)) if ok else min(scored, key=lambda s: s.drop_points)
    log(f"[{form.name}] QDQ form: recipe {chosen.recipe.name}, held-out drop {chosen.drop_points:+.2f} pts "
        f"({'within' if ok else 'OUTSIDE'} the {budget:g} pt target)")
    form.copy(Path(chosen.path), Path(out_path))
    return SearchResult(chosen, bool(ok), budget, search.baseline_metric, scored)
