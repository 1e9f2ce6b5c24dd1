"""The selected candidate's shipped forms, made by compress where it was selected: export only assembles them.

Under ``compress/out/shipped/`` in the export contract's layout (``pipeline.contract.ExportLayout``):

    onnx/fp32.onnx          the unpruned FP32 ONNX (every ratio's base; validate's anchor is built from it)
    onnx/int8.onnx          ONNX Runtime's INT8 of the selected architecture: the recipe search's pick (fixed scales), or
                            with ``quantization.batch_independent_int8: false`` the per-batch dynamic form
    onnx/int8_qdq.onnx      the TensorRT (QDQ) form of the same architecture, from that recipe
                            (these two unless the selected candidate runs in an engine with a form of its own and
                            nothing asks for them: ``registry.onnx_int8_forms_ship``)
    openvino/int8.{xml,bin} an engine's own form (``CpuEngine.form``: OpenVINO's INT8 IR from NNCF's search) of the
                            same architecture, when the selected candidate runs in it or package.runtime names it
                            (``registry.shipped_own_form_engines``)
    int8_search.json        the CPU and every search's result (what meta.json reports)

Each search is the one compress ran per architecture (``pipeline.run_cache``, ``runs/<task>/cache/int8``): for the
selected one it is a cache hit, so the shipped file is the one compress measured.  With ``compress.candidate_format: paddle``
the architectures were judged in Paddle, and their FP32 ONNX is converted here first.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.backends import registry
from pipeline.backends.registry import onnx_int8_forms_ship, shipped_own_form_engines
from pipeline.contract import ExportLayout

SHIPPED_DIR = "shipped"


@dataclass(frozen=True)
class FormSearch:
    """How one shipped INT8 form was made: its search's result as written (``SearchResult.as_dict()``: ``chosen``,
    ``within_budget``, every scored recipe), or, for a form nothing searched, its ``recipe`` name."""

    record: dict

    @property
    def recipe(self) -> str:
        return (self.record.get("chosen") or {}).get("name") or str(self.record.get("recipe", "?"))

    @property
    def searched(self) -> bool:
        return "chosen" in self.record

    @property
    def heldout_drop_points(self) -> float | None:
        return (self.record.get("chosen") or {}).get("drop_points")

    @property
    def within_budget(self) -> bool | None:
        return self.record.get("within_budget")


@dataclass(frozen=True)
class ShippedSearches:
    """``int8_search.json``, typed: the CPU the recipes were chosen on and each shipped INT8 form's search (ONNX
    Runtime's, its QDQ form's, and each engine's own form's, by engine name: OpenVINO's when it is an engine).  The
    file keeps its layout (meta.json's ``int8``, ``int8_qdq`` and ``openvino`` sections are these records as they
    are)."""

    cpu: dict
    onnxruntime: FormSearch  # empty when the ONNX INT8 forms do not ship (registry.onnx_int8_forms_ship)
    qdq: FormSearch
    own: dict[str, FormSearch] = field(default_factory=dict)  # engine name -> its own form's search

    def as_dict(self) -> dict:
        return {"cpu": self.cpu, **self.onnxruntime.record, "qdq": self.qdq.record,
                **{name: search.record for name, search in self.own.items()}}

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> "ShippedSearches":
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        engines = [e.name for e in registry.CPU_ENGINES if e.form is not None]
        top = {k: v for k, v in d.items() if k not in ("cpu", "qdq", *engines)}
        return cls(dict(d.get("cpu") or {}), FormSearch(top), FormSearch(dict(d.get("qdq") or {})),
                   {name: FormSearch(d[name]) for name in engines if isinstance(d.get(name), dict)})


@dataclass(frozen=True)
class ShippedInputs:
    fp32_onnx: Path  # the unpruned FP32 ONNX
    source_onnx: Path  # the FP32 ONNX of the selected architecture (== fp32_onnx when unpruned)
    pruned: bool


def fp32_sources(cands, chosen, out_dir: Path, work_dir: Path, opset: int, log: Callable[[str], None]) -> ShippedInputs:
    """The unpruned FP32 ONNX and the selected width's: compress's own ONNX candidates, or (Paddle runtime) converted
    from the static programs (a pruned width from its dygraph directory, whose head decides the label count)."""
    from pipeline.backends.onnxruntime.convert import export_onnx

    fp32 = cands[0]
    pruned = chosen.architecture.pruned
    width_fp32 = next((c for c in cands if c.quantization == "none" and c.architecture == chosen.architecture), None)
    if fp32.model_path is not None and chosen.source_onnx is not None:  # the ONNX route: what it was made from
        return ShippedInputs(fp32.model_path, chosen.source_onnx, pruned)
    log("[compress] Paddle static -> ONNX (FP32 baseline)")
    base = export_onnx(fp32.infer_dir, Path(work_dir) / "shipped_sources" / "fp32.onnx", opset)
    if not pruned:
        return ShippedInputs(base, base, False)
    source = export_onnx(width_fp32.infer_dir if width_fp32 is not None else chosen.infer_dir,
                         Path(work_dir) / "shipped_sources" / "selected_fp32.onnx", opset)
    return ShippedInputs(base, source, True)


def make(out_dir: Path, sources: ShippedInputs, rows, cfg, cpu, cache_dir: Path, log: Callable[[str], None],
         selected_runtime: str) -> ExportLayout:
    """Write every shipped form of the selected architecture into ``out_dir/shipped`` (see the module docstring);
    ``selected_runtime``: the engine the selected candidate was measured in."""
    from pipeline.backends.onnxruntime import quantize as ort_quantize
    from pipeline.backends.onnxruntime.int8.search import search_qdq, search_recipe
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges

    qcfg, budget = cfg.quantization, cfg.gates.max_accuracy_drop
    layout = ExportLayout(Path(out_dir) / SHIPPED_DIR)
    fp32, source = layout.path("onnx_fp32"), sources.source_onnx
    fp32.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sources.fp32_onnx, fp32)
    baseline = fp32 if sources.pruned else None
    which = "the pruned" if sources.pruned else "the"
    ort_search = qdq_search = FormSearch({})
    if not onnx_int8_forms_ship(cfg, selected_runtime):
        log(f"[compress] ONNX INT8 forms (int8.onnx, int8_qdq.onnx) not built: the selected candidate runs in "
            f"{selected_runtime}'s own form and nothing asks for them (package.runtime auto, package.device CPU, "
            "validate.backends shipped)")
    elif qcfg.batch_independent_int8:
        log(f"[compress] INT8 ONNX of the selected architecture: the recipe search from {which} FP32 ONNX (cached)")
        ranges = activation_ranges(source, rows.feeds, rows.pad_id)  # measured once: both ORT forms use them
        int8 = search_recipe(source, layout.path("onnx_int8"), rows, qcfg, budget, cpu, cache_dir, baseline=baseline,
                             ranges=ranges, log=log)
        log(f"[compress] INT8 QDQ ONNX (TensorRT form) from recipe {int8.chosen.recipe.name}, scored on the same held-out rows")
        qdq = search_qdq(source, layout.path("onnx_int8_qdq"), rows, qcfg, int8, cache_dir, ranges, log=log)
        ort_search, qdq_search = FormSearch(int8.as_dict()), FormSearch(qdq.as_dict())
    else:
        log(f"[compress] INT8 ONNX (dynamic per-channel, per-batch scales) from {which} FP32 ONNX")
        ort_quantize.dynamic_int8(source, layout.path("onnx_int8"), qcfg)  # the form compress measured
        n_calib = sum(len(f["input_ids"]) for f in rows.feeds)
        log(f"[compress] INT8 QDQ ONNX (static per-channel, {n_calib} calibration sequences)")
        ort_quantize.quantize_int8_qdq(source, layout.path("onnx_int8_qdq"), rows.feeds, embeddings=qcfg.int8_embeddings)
        ort_search = FormSearch({"recipe": ort_quantize.DynamicRecipe().name, "batch_independent": False})
        qdq_search = FormSearch({"recipe": "static-minmax"})
    forms = {}  # each engine's own form (OpenVINO's IR): its search for this architecture, a cache hit of compress's
    for engine in shipped_own_form_engines(cfg, selected_runtime) if qcfg.batch_independent_int8 else ():
        log(f"[compress] {engine.name} INT8 of the selected architecture: its recipe search from {which} FP32 ONNX (cached)")
        forms[engine.name] = FormSearch(engine.search(source, layout.path(engine.form), rows, cfg, cache_dir, baseline,
                                                      log).as_dict())
    ShippedSearches(cpu.as_dict(), ort_search, qdq_search, forms).write(layout.int8_search)
    return layout
