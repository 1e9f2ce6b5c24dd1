"""Stage ``export``: assembles the deployable artifacts; it searches and builds nothing (compress made every form of
the selected candidate: ``pipeline.compress.shipped``).

Output (the export contract, ``pipeline.contract.ExportLayout``; the package stage consumes exactly this)::

    paddle_fp32/{model.pdmodel, model.pdiparams}   FP32 baseline (unpruned)
    paddle_int8/{...}                              selected candidate, only when it is a quantized Paddle program
    onnx/fp32.onnx                                 FP32 baseline, cleaned (see pipeline.backends.onnxruntime.convert)
    onnx/int8.onnx                                 fast CPU INT8 (MatMulIntegerToFloat, per-channel weights, calibrated
                                                   activation scales, int8 embeddings)
    onnx/int8_qdq.onnx                             static QDQ per-channel INT8 (TensorRT explicit quantization)
                                                   (these two unless OpenVINO's IR ships and nothing asks for them:
                                                   ``registry.onnx_int8_forms_ship``)
    openvino/int8.{xml,bin}                        OpenVINO INT8 (NNCF, fixed scales), when the selected candidate
                                                   runs in OpenVINO or package.runtime names it
    tokenizer/{vocab.txt, tokenizer_config.json, special_tokens_map.json}
    labels.json, meta.json, int8_search.json

Every INT8 form is built from the FP32 ONNX of the model the selected candidate was made from (pruned when the
candidate is pruned), never from paddle2onnx's conversion of a PTQ program, which keeps float weights and runs 3x
slower.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.compress.shipped import ShippedSearches
from pipeline.stage import Stage
from pipeline.config import TaskConfig
from pipeline.errors import ModelError
from pipeline.contract import LABELS_FILE, META_FILE, TOKENIZER_DIR, ExportLayout, form
from pipeline.backends.paddle.convert import copy_static
from pipeline.backends.registry import cpu_engine
from pipeline.handoffs import CompressOutputs, ExportManifest, SelectedCandidate
from pipeline.modeling import write_labels
from pipeline.kinds import get_kind


def params(cfg: TaskConfig) -> dict:
    # What export itself decides; every form it copies comes from compress (whose outputs are part of this key).
    return {"opset": cfg.export.opset, "max_int8_size_ratio": cfg.gates.max_int8_size_ratio, "max_seq_len": cfg.max_seq_len,
            "labels": list(cfg.labels), "label_names": list(cfg.label_names), **get_kind(cfg).feature_params(cfg),
            **get_kind(cfg).manifest_sections(cfg)}


def inputs(cfg: TaskConfig) -> dict[str, str]:
    from pipeline.data import data_hashes

    return data_hashes(cfg)  # calibration sentences come from the training split


def write_tokenizer(src_dir: Path, dst: Path) -> bool:
    from pipeline.tokenizer import TOKENIZER_CONFIG

    dst.mkdir(parents=True, exist_ok=True)
    if not (src_dir / "vocab.txt").is_file():
        raise ModelError(f"model dir {src_dir}: missing vocab.txt")
    shutil.copyfile(src_dir / "vocab.txt", dst / "vocab.txt")
    cfg = dict(TOKENIZER_CONFIG)
    if (src_dir / "tokenizer_config.json").is_file():
        cfg.update(json.loads((src_dir / "tokenizer_config.json").read_text(encoding="utf-8")))
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
    special = {k: v for k, v in cfg.items() if k.endswith("_token") and isinstance(v, str)}
    (dst / "special_tokens_map.json").write_text(json.dumps(special, indent=2), encoding="utf-8")
    return bool(cfg.get("do_lower_case", True))


def run(ctx):
    """Assemble: the Paddle programs, compress's shipped forms, the tokenizer, labels and meta.json; then check every
    ONNX/OpenVINO form loads and answers in the contract's shape, and the INT8 file's size."""
    from pipeline.kinds import load_task_data
    from pipeline.records import StageResult

    cfg, layout = ctx.cfg, ExportLayout(ctx.out_dir)
    selected = ctx.handoff("compress", SelectedCandidate)
    compressed = ctx.handoff("compress", CompressOutputs)
    compress_out = ctx.artifact("compress", CompressOutputs.ROLE).parent  # its paths are relative to its own file
    shipped = ExportLayout(compress_out / compressed.shipped_dir)
    data, kind = load_task_data(cfg), get_kind(cfg)

    copy_static(compress_out / compressed.fp32_infer_dir, layout.path("paddle_fp32"))
    if compressed.quantized_program:
        copy_static(compress_out / compressed.selected_infer_dir, layout.path("paddle_int8"))
    for f in shipped.present():
        for src, dst in zip(shipped.files(f.name), layout.files(f.name)):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    shutil.copyfile(shipped.int8_search, layout.int8_search)
    searches = ShippedSearches.read(layout.int8_search)
    do_lower = write_tokenizer(compress_out / compressed.selected_model_dir, layout.tokenizer_dir)
    write_labels(layout.labels, data.labels, data.label_names)
    stats = check_forms(layout, kind, cfg, data)
    meta = manifest(cfg, kind, data, selected, searches, stats, do_lower)
    ExportManifest.from_dict(meta).write(layout.meta)  # checked as written
    artifacts = {f.name: f.path for f in layout.present()}
    artifacts.update({"tokenizer_dir": TOKENIZER_DIR, "labels": LABELS_FILE, "meta": META_FILE})
    sized = _shipped_int8_form(layout, selected)  # the INT8 form the size gate reads: the one that ships
    ratio = layout.bytes(sized) / stats["fp32"].file_bytes
    metrics = {"onnx_fp32_mb": stats["fp32"].file_bytes / 2**20, "int8_size_ratio": ratio, "int8_size_form": sized,
               "selected": selected.name, "pruned": selected.pruned}
    if "int8" in stats:
        metrics.update(onnx_int8_mb=stats["int8"].file_bytes / 2**20, onnx_int8_qdq_mb=stats["int8_qdq"].file_bytes / 2**20,
                       int8_initializers=stats["int8"].int8_initializers, int8_recipe=searches.onnxruntime.recipe)
    for name, search in searches.own.items():  # each engine's own form (OpenVINO's IR): openvino_recipe, ...
        metrics.update({f"{name}_recipe": search.recipe, f"{name}_heldout_drop_points": search.heldout_drop_points,
                        f"{name}_int8_mb": layout.bytes(cpu_engine(name).form) / 2**20})
    if searches.onnxruntime.searched:
        metrics.update(int8_heldout_drop_points=searches.onnxruntime.heldout_drop_points,
                       int8_within_budget=searches.onnxruntime.within_budget, qdq_recipe=searches.qdq.recipe,
                       qdq_heldout_drop_points=searches.qdq.heldout_drop_points)
    gate = None
    limit = cfg.gates.max_int8_size_ratio
    if limit is not None and ratio > limit:
        gate = (f"{form(sized).path} is {100 * ratio:.1f}% of {form('onnx_fp32').path}, above gates.max_int8_size_ratio "
                f"{100 * limit:.0f}% by {100 * (ratio - limit):.1f} points")
    sizes = ([f"INT8 {metrics['onnx_int8_mb']:.1f} MB", f"QDQ {metrics['onnx_int8_qdq_mb']:.1f} MB"] if "int8" in stats else
             ["no ONNX INT8 forms (the selected engine's own form ships)"])
    sizes += [f"{name} INT8 {metrics[f'{name}_int8_mb']:.1f} MB" for name in searches.own]
    ctx.log(f"[export] ONNX FP32 {metrics['onnx_fp32_mb']:.1f} MB, {', '.join(sizes)}; {form(sized).path} is "
            f"{100 * ratio:.0f}% of FP32")
    return StageResult(metrics=metrics, artifacts=artifacts, gate_error=gate,
                       message=f"{form(sized).path} {layout.bytes(sized) / 2**20:.1f} MB ({100 * ratio:.0f}% of FP32)")


def _shipped_int8_form(layout: ExportLayout, selected: SelectedCandidate) -> str:
    """The INT8 form of the selected candidate's engine: its own form (OpenVINO's IR) when it has one, else
    ONNX Runtime's int8.onnx (also for an FP32 or Paddle selection: the ONNX INT8 forms always ship then)."""
    engine = cpu_engine(selected.runtime)
    if engine is not None and engine.form is not None and layout.has(engine.form):
        return engine.form
    return "onnx_int8"


def check_forms(layout: ExportLayout, kind, cfg, data) -> dict:
    """Every ONNX and OpenVINO form loads, has int8 weights where it should, and answers a few dev examples in the
    contract's shape, before anything is packaged; returns the ONNX forms' weight statistics."""
    from pipeline.backends.onnxruntime import convert as ort_convert, quantize as ort_quantize
    from pipeline.backends.registry import RunOptions, is_cpu_engine_form, runtimes
    from pipeline.tokenizer import Tokenizer

    names = ("fp32", "int8", "int8_qdq") if layout.has("onnx_int8") else ("fp32",)  # registry.onnx_int8_forms_ship
    stats = {name: ort_quantize.weight_stats(layout.path(f"onnx_{name}")) for name in names}
    for name in names[1:]:
        ort_convert.check_onnx(layout.path(f"onnx_{name}"))
        if stats[name].int8_initializers == 0:
            raise ModelError(f"{layout.path(f'onnx_{name}')}: no int8 weight initializers were written")
    tokenizer = Tokenizer.from_model_dir(layout.tokenizer_dir, cfg.max_seq_len)
    probe_fs = kind.featurize(tokenizer, data.dev.examples[:4], cfg)
    probe = probe_fs.batch(range(min(4, len(probe_fs))))
    n, width = probe.input_ids.shape
    expected = (n, width, len(data.labels)) if kind.token_level_outputs else (n, len(data.labels))
    forms = [rt for rt in runtimes() if is_cpu_engine_form(rt) and layout.has(rt.form)]
    for rt in forms:  # every form a CPU engine runs, opened as validate opens it
        logits = rt.session(layout.path(rt.form), RunOptions(threads=1, engine_settings=cfg.engine_settings)).run(probe.input_ids,
                                                                                                  probe.token_type_ids)
        if logits.shape != expected:
            raise ModelError(f"{layout.path(rt.form)}: logits shape {logits.shape}, expected {expected} for a {kind.name} model")
    return stats


def manifest(cfg, kind, data, selected: SelectedCandidate, searches: ShippedSearches, stats: dict, do_lower: bool) -> dict:
    """meta.json: the model contract (inputs, outputs, labels), how each INT8 form was made, the CPU it was chosen
    on, and what the kind's served pre/post-processing needs (``PipelineKind.manifest_sections``)."""
    from pipeline.backends.onnxruntime.convert import INPUT_NAMES, OUTPUT_NAME

    meta = {
        "task": cfg.task,
        "task_type": cfg.type,
        "metric": kind.metric,
        "max_seq_len": cfg.max_seq_len,
        "do_lower_case": do_lower,
        "inputs": [{"name": n, "dtype": "int64", "shape": [-1, -1]} for n in INPUT_NAMES],
        "outputs": [{"name": OUTPUT_NAME, "dtype": "float32",
                     "shape": [-1, -1, len(data.labels)] if kind.token_level_outputs else [-1, len(data.labels)]}],
        "num_labels": len(data.labels),
        "labels": list(data.labels),
        "label_names": list(data.label_names),
        "selected_candidate": selected.as_dict(),
        "onnx": {name: s.as_dict() for name, s in stats.items()},
        "opset": cfg.export.opset,
        "cpu": searches.cpu,
        "int8": searches.onnxruntime.record,
        "int8_qdq": searches.qdq.record,
        **kind.manifest_sections(cfg),
    }
    for name, search in searches.own.items():  # each engine's own form, its section named after it ("openvino")
        engine = cpu_engine(name)
        # its form_params' "properties" (OpenVINO's): every property the served engine compiles with
        meta[name] = {**search.record, **engine.form_params(cfg), "file": form(engine.form).path}
    return meta


STAGE = Stage(
    name="export",
    description="assemble the deployable forms compress made (Paddle programs, FP32/INT8 ONNX, OpenVINO IR) with tokenizer, labels, meta.json",
    requires=("compress", "finetune-check"),
    params=params,
    inputs=inputs,
    run=run,
    version="8",  # the last bump: it assembles compress's shipped forms, no search of its own (earlier: git log)
)
