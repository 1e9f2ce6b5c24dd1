"""NNCF post-training INT8 for OpenVINO, and its held-out recipe search.

``build`` turns the FP32 ONNX into an INT8 OpenVINO model with ``nncf.quantize`` (``model_type=TRANSFORMER``:
NNCF's rules for attention blocks): FakeQuantize nodes with **fixed** activation scales calibrated on training
sentences, int8 weights per output channel (the word-embedding table included).  Fixed scales make a text's
answer independent of its batch mates, as for the ONNX Runtime form.

Calibration sentences are fed one at a time, unpadded: NNCF's statistics would otherwise include the hidden
states at [PAD] positions, which reach values real tokens never do (ORT's calibrator has the same flaw; see
``pipeline.backends.onnxruntime.int8.stats``).

The recipe search is ``pipeline.quantization.search`` with this engine's form (``nncf_form``): each SmoothQuant
strength (NNCF's ``smooth_quant_alphas.matmul``; ``None`` turns it off) is built and scored on the held-out
training rows (dev only reports and gates); when none is within the budget, the most sensitive MatMuls are kept in FP32 one by
one (NNCF's ``ignored_scope``), the same greedy fallback as ONNX Runtime's.  Every built model is cached
in the run cache beside the ONNX Runtime ones (``runs/<task>/cache/int8``: compress measures, and ships, the same file).
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pipeline.backends.openvino.attention import pad_attention
from pipeline.backends.openvino.convert import IR_SUFFIX, copy_ir, move_ir, read_model, save_ir
from pipeline.errors import ModelError
from pipeline.quantization.recipe import Int8Recipe
from pipeline.quantization.search import EngineForm

FORM = "openvino"
# Bumped when ``build`` makes a different model for the same recipe (a cached candidate's key holds it).
FORM_VERSION = 1


def calibration_items(feeds: Sequence[dict[str, np.ndarray]], pad_id: int) -> list[dict[str, np.ndarray]]:
    """The padded calibration batches as one unpadded sentence each (real tokens only)."""
    items = []
    for feed in feeds:
        ids, types = feed["input_ids"], feed["token_type_ids"]
        for row in range(len(ids)):
            real = np.flatnonzero(ids[row] != pad_id)
            n = int(real[-1]) + 1 if len(real) else 1
            items.append({"input_ids": np.ascontiguousarray(ids[row : row + 1, :n], np.int64),
                          "token_type_ids": np.ascontiguousarray(types[row : row + 1, :n], np.int64)})
    return items


def build(fp32_path: Path, out_path: Path, calibration: Sequence[dict[str, np.ndarray]], recipe: Int8Recipe, *,
          width_independent: bool = False) -> Path:
    """``recipe`` (SmoothQuant strength, FP32 MatMuls) applied by NNCF to ``fp32_path``, written as IR ``out_path``.
    ``width_independent`` (the task's ``openvino.width_independent``): its attention padded to whole 16-column blocks
    (``attention.pad_attention``), so that a text's answer does not depend on its batch's width."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    nncf.set_log_level(logging.WARNING)
    model = read_model(fp32_path)
    alpha = recipe.smooth_alpha if recipe.smooth_alpha else -1  # -1: SmoothQuant off
    # NNCF draws a rich progress bar per step on stdout, between the stage's own log lines: kept out of it.
    with contextlib.redirect_stdout(io.StringIO()):
        quantized = nncf.quantize(
            model, nncf.Dataset(list(calibration)), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration),
            ignored_scope=nncf.IgnoredScope(names=list(recipe.fp32_matmuls)) if recipe.fp32_matmuls else None,
            advanced_parameters=AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha)))
    # After NNCF: its quantizers and SmoothQuant see the model as exported (the padding is masked).
    if width_independent and not pad_attention(quantized):
        raise ModelError(f"{fp32_path}: openvino.width_independent: no attention block of the encoder's pattern "
                         "(MatMul, mask Add, Softmax, MatMul) to pad; set it false for this model")
    return save_ir(quantized, out_path)


def nncf_form(rows, properties=None, width_independent: bool = False) -> EngineForm:
    """OpenVINO's INT8 form: NNCF's IR calibrated on ``rows``' sentences (fed one at a time, unpadded), scored in
    OpenVINO sessions with ``properties`` (``CpuProperties``; the defaults when None) on the held-out slice;
    ``width_independent``: ``build``'s."""
    import nncf

    from pipeline.backends.openvino.config import CpuProperties
    from pipeline.backends.openvino.session import session
    from pipeline.evaluation import evaluate_session

    calibration = calibration_items(rows.feeds, rows.pad_id)
    properties = properties or CpuProperties()

    def evaluate(path: Path):
        ev = evaluate_session(session(path, precision="int8" if path.suffix == IR_SUFFIX else "fp32", properties=properties),
                              rows.held, 64, desc=f"openvino int8 search {path.stem[:24]}")
        return ev.score.value, ev.outputs

    def builder(fp32, out, _ranges, recipe, *, embeddings=True):
        return build(fp32, out, calibration, recipe, width_independent=width_independent)

    # Every session property, defaults too (a precision hint or the plugin's code generation changes the scores).
    record = {"builder": FORM_VERSION, "nncf": nncf.__version__,
              "properties": dict(properties.as_dict(), INFERENCE_NUM_THREADS=0),
              **({"width_independent": True} if width_independent else {})}  # absent when off: earlier caches stay valid
    return EngineForm(FORM, builder, evaluate, record, suffix=IR_SUFFIX, promote=move_ir, copy=copy_ir)


def search_recipe(source: Path, out_path: Path, rows, qcfg, budget_points: float, cache_dir: Path, *,
                  baseline: Path | None = None, log: Callable[[str], None] = print, properties=None,
                  width_independent: bool = False):
    """Search NNCF recipes for ``source`` (an FP32 ONNX) on ``rows`` (``pipeline.quantization.select.SearchRows``) and
    copy the chosen IR to ``out_path`` (``.xml``, its ``.bin`` beside it).  ``baseline``: the unpruned FP32 ONNX
    when ``source`` is pruned (drops count from it).  ``properties``: the sessions' ``CpuProperties`` (the task's
    ``openvino:`` section); ``width_independent``: ``build``'s.  Returns the ``SearchResult``."""
    from pipeline.quantization import search

    bases = [Int8Recipe(alpha) for alpha in [None, *qcfg.openvino_smooth_alphas]]
    return search.search_recipe(source, out_path, nncf_form(rows, properties, width_independent), rows, bases, budget_points,
                                qcfg.int8_max_fp32_matmuls, cache_dir, baseline=baseline, log=log)


__all__ = ["FORM", "build", "calibration_items", "nncf_form", "search_recipe"]
