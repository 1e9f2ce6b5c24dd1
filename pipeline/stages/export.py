"""Stage ``export``: deployable artifacts of the selected candidate and the FP32 baseline.

Output (the package stage consumes exactly this)::

    paddle_fp32/{model.pdmodel, model.pdiparams}   FP32 baseline (unpruned)
    paddle_int8/{...}                              selected candidate, only when it is quantized
    onnx/fp32.onnx                                 FP32 baseline, cleaned (see pipeline.backends.onnxruntime)
    onnx/int8.onnx                                 fast CPU INT8 (MatMulIntegerToFloat, per-channel weights, calibrated
                                                   activation scales, int8 embeddings)
    onnx/int8_qdq.onnx                             static QDQ per-channel INT8 (TensorRT explicit quantization)
    openvino/int8.{xml,bin}                        OpenVINO INT8 (NNCF, fixed scales), when openvino is one of
                                                   compress.engines
    tokenizer/{vocab.txt, tokenizer_config.json, special_tokens_map.json}
    labels.json, meta.json

Both INT8 ONNX files are built from the FP32 ONNX of the model the selected candidate was made from
(pruned when the candidate is pruned), never from paddle2onnx's conversion of a PTQ program, which
keeps float weights and runs 3x slower.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.stage import Stage
from pipeline.config import TaskConfig
from pipeline.errors import ModelError
from pipeline.handoffs import ExportManifest, SelectedCandidate
from pipeline.stages.finetune import kind_params

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
OPENVINO_INT8 = "openvino/int8.xml"  # its weights beside it, openvino/int8.bin


def params(cfg: TaskConfig) -> dict:
    from pipeline.quantization.select import openvino_params, search_params

    e = cfg.export
    return {"opset": e.opset, "calibration_sentences": e.calibration_sentences,
            "calibration_batch_size": e.calibration_batch_size, "int8_embeddings": e.int8_embeddings,
            "ort_transformer_optimize": e.ort_transformer_optimize, "max_int8_size_ratio": cfg.gates.max_int8_size_ratio,
            "batch_independent_int8": e.batch_independent_int8,
            "int8_search": search_params(cfg), "qdq_budget_points": e.qdq_budget_points, "openvino": openvino_params(cfg),
            "max_seq_len": cfg.max_seq_len, "labels": list(cfg.labels), "label_names": list(cfg.label_names),
            **kind_params(cfg)}


def inputs(cfg: TaskConfig) -> dict[str, str]:
    from pipeline.stages.finetune import data_inputs

    return data_inputs(cfg)  # calibration sentences come from the training split


def copy_static(src: Path, dst: Path) -> Path:
    from pipeline.backends.forms import MODEL_FILE, PARAMS_FILE, check_static_dir

    check_static_dir(src)
    dst.mkdir(parents=True, exist_ok=True)
    for name in (MODEL_FILE, PARAMS_FILE):
        shutil.copyfile(src / name, dst / name)
    return dst


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


def fp32_onnx_files(ctx, selected: SelectedCandidate, fp32_path: Path, opset: int) -> tuple[Path, Path, bool]:
    """(the FP32 baseline ONNX, the FP32 ONNX the INT8 forms are built from, whether that one is pruned).

    When compress selected in ONNX Runtime it already converted both: they are copied, so the INT8 search
    finds its cached candidates and export ships exactly what compress measured.  Otherwise they are
    converted here (the pruned one from its dygraph directory)."""
    from pipeline.backends.onnxruntime.convert import export_onnx

    pruned = selected.pruned
    arts = ctx.upstream["compress"].artifacts
    if "fp32_onnx" in arts:
        fp32_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ctx.artifact("compress", "fp32_onnx"), fp32_path)
        if not pruned:
            return fp32_path, fp32_path, False
        source = ctx.work_dir / "selected_fp32.onnx"
        shutil.copyfile(ctx.artifact("compress", "selected_fp32_onnx"), source)
        return fp32_path, source, True
    ctx.log("[export] Paddle static -> ONNX (FP32 baseline)")
    fp32 = export_onnx(ctx.out_dir / "paddle_fp32", fp32_path, opset)
    if not pruned:
        return fp32, fp32, False
    from pipeline.backends.paddle.convert import export_static
    from pipeline.modeling import load_classifier

    model_dir = ctx.artifact("compress", "selected_fp32_model_dir")
    model = load_classifier(model_dir, _num_labels(model_dir))  # the head decides (NER: tags, not entity types)
    work = ctx.work_dir / "selected_fp32"
    export_static(model, work / "static")
    return fp32, export_onnx(work / "static", work / "selected_fp32.onnx", opset), True


def _num_labels(model_dir: Path) -> int:
    from pipeline.modeling import inspect_model

    info = inspect_model(model_dir)
    if info.head_classes is None:
        raise ModelError(f"model dir {model_dir}: no classification head")
    return info.head_classes


def run(ctx):
    from pipeline.backends.onnxruntime import convert as ort_convert, quantize as ort_quantize, session as ort_session
    from pipeline.cpu import detect as detect_cpu
    from pipeline.kinds import load_task_data
    from pipeline.backends.onnxruntime.int8.search import search_recipe
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges
    from pipeline.quantization.select import CACHE_DIR, openvino_params, search_rows
    from pipeline.kinds import get_kind
    from pipeline.modeling import write_labels
    from pipeline.records import StageResult
    from pipeline.tokenizer import Tokenizer

    cfg, out = ctx.cfg, ctx.out_dir
    ecfg = cfg.export
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    selected = ctx.handoff("compress", SelectedCandidate)
    quantized = selected.paddle_int8
    data = load_task_data(cfg)
    kind = get_kind(cfg)

    copy_static(ctx.artifact("compress", "fp32_infer_dir"), out / "paddle_fp32")
    artifacts = {"paddle_fp32": "paddle_fp32"}
    if quantized:
        copy_static(ctx.artifact("compress", "selected_infer_dir"), out / "paddle_int8")
        artifacts["paddle_int8"] = "paddle_int8"

    fp32_onnx, source, pruned = fp32_onnx_files(ctx, selected, out / "onnx" / "fp32.onnx", ecfg.opset)
    model_src = ctx.artifact("compress", "selected_fp32_model_dir")
    do_lower = write_tokenizer(model_src, out / "tokenizer")
    tokenizer = Tokenizer.from_model_dir(out / "tokenizer", cfg.max_seq_len)
    rows = search_rows(cfg, tokenizer, data.train.examples, kind)
    feeds = rows.feeds
    int8_search, cpu = None, detect_cpu()
    if ecfg.batch_independent_int8:
        ctx.log(f"[export] INT8 ONNX: accuracy-aware search from {'the pruned' if pruned else 'the'} FP32 ONNX")
        int8 = out / "onnx" / "int8.onnx"
        ranges = activation_ranges(source, feeds, rows.pad_id)  # measured once: the search and the QDQ form use them
        int8_search = search_recipe(source, int8, rows, ecfg, cfg.gates.max_accuracy_drop, cpu,
                                    ctx.runs_dir / CACHE_DIR, baseline=fp32_onnx if pruned else None, ranges=ranges,
                                    log=ctx.log)
    else:
        ctx.log(f"[export] INT8 ONNX (dynamic per-channel, per-batch scales) from {'the pruned' if pruned else 'the'} FP32 ONNX")
        int8 = ort_quantize.quantize_int8_dynamic(source, out / "onnx" / "int8.onnx", optimize=ecfg.ort_transformer_optimize,
                                                  embeddings=ecfg.int8_embeddings)
    n_calib = sum(len(f["input_ids"]) for f in feeds)
    if int8_search:  # the searched recipe's migration and FP32 MatMuls carry over to the TensorRT form
        from pipeline.backends.onnxruntime.int8.search import search_qdq

        ctx.log(f"[export] INT8 QDQ ONNX (static per-channel, {n_calib} calibration sequences): from recipe "
                f"{int8_search.chosen.recipe.name}, scored on the same held-out rows")
        qdq_search = search_qdq(source, out / "onnx" / "int8_qdq.onnx", rows, ecfg, int8_search, ctx.runs_dir / CACHE_DIR,
                                ranges, log=ctx.log)
        qdq = out / "onnx" / "int8_qdq.onnx"
        (out / "int8_search.json").write_text(json.dumps({"cpu": cpu.as_dict(), **int8_search.as_dict(),
                                                          "qdq": qdq_search.as_dict()}, indent=2))
    else:
        ctx.log(f"[export] INT8 QDQ ONNX (static per-channel, {n_calib} calibration sequences)")
        qdq = ort_quantize.quantize_int8_qdq(source, out / "onnx" / "int8_qdq.onnx", feeds, embeddings=ecfg.int8_embeddings)

    openvino = None
    if ecfg.batch_independent_int8 and openvino_params(cfg) is not None:
        from pipeline.backends.openvino.quantize import search_recipe as openvino_search

        ctx.log(f"[export] OpenVINO INT8 (NNCF): recipe search from {'the pruned' if pruned else 'the'} FP32 ONNX")
        openvino = openvino_search(source, out / OPENVINO_INT8, rows, ecfg, cfg.gates.max_accuracy_drop, ctx.runs_dir / CACHE_DIR,
                                   baseline=fp32_onnx if pruned else None, log=ctx.log)
    stats = {name: ort_quantize.weight_stats(p) for name, p in (("fp32", fp32_onnx), ("int8", int8), ("int8_qdq", qdq))}
    for name in ("int8", "int8_qdq"):
        ort_convert.check_onnx(out / "onnx" / f"{name}.onnx")
        if stats[name].int8_initializers == 0:
            raise ModelError(f"onnx/{name}.onnx: no int8 weight initializers were written")
    # Both sessions must load and agree in shape with the reference before anything is packaged.
    probe_fs = kind.featurize(tokenizer, data.dev.examples[:4], cfg)
    probe = probe_fs.batch(range(min(4, len(probe_fs))))
    n, width = probe.input_ids.shape
    expected = (n, width, len(data.labels)) if kind.token_level_outputs else (n, len(data.labels))
    sessions = [ort_session.session(p, threads=1) for p in (fp32_onnx, int8, qdq)]
    if openvino is not None:
        from pipeline.backends.openvino.session import session as openvino_session

        sessions.append(openvino_session(out / OPENVINO_INT8, precision="int8", threads=1))
    for sess in sessions:
        logits = sess.run(probe.input_ids, probe.token_type_ids)
        if logits.shape != expected:
            raise ModelError(f"{sess.model_path}: logits shape {logits.shape}, expected {expected} for a {kind.name} model")

    write_labels(out / "labels.json", data.labels, data.label_names)
    meta = {
        "task": cfg.task,
        "task_type": cfg.type,
        "metric": kind.metric,
        "max_seq_len": cfg.max_seq_len,
        "do_lower_case": do_lower,
        "inputs": [{"name": n, "dtype": "int64", "shape": [-1, -1]} for n in ort_convert.INPUT_NAMES],
        "outputs": [{"name": ort_convert.OUTPUT_NAME, "dtype": "float32",
                     "shape": [-1, -1, len(data.labels)] if kind.token_level_outputs else [-1, len(data.labels)]}],
        "num_labels": len(data.labels),
        "labels": list(data.labels),
        "label_names": list(data.label_names),
        "selected_candidate": selected.as_dict(),
        "onnx": {name: s.as_dict() for name, s in stats.items()},
        "opset": ecfg.opset,
        "cpu": cpu.as_dict(),
        "int8": int8_search.as_dict() if int8_search else {"recipe": "dynamic-per-batch", "batch_independent": False},
        "int8_qdq": qdq_search.as_dict() if int8_search else {"recipe": "static-minmax"},
    }
    if openvino is not None:
        from pipeline.backends.openvino.session import CpuProperties

        meta["openvino"] = {**openvino.as_dict(), **openvino_params(cfg), "file": OPENVINO_INT8,
                            "properties": {k: v for k, v in CpuProperties().as_dict().items() if k != "INFERENCE_NUM_THREADS"}}
    if cfg.type == "reading_comprehension":
        meta["reading"] = {"doc_stride": cfg.reading.doc_stride, "max_query_len": cfg.reading.max_query_len,
                           "max_answer_len": cfg.reading.max_answer_len}
    if cfg.type == "token_classification":
        meta["entity_types"] = list(cfg.labels)
    if cfg.type == "uie":  # what the served pre/post-processing need to window and decode as evaluated
        meta["uie"] = {"doc_stride": cfg.uie.doc_stride, "max_prompt_len": cfg.uie.max_prompt_len,
                       "position_prob": cfg.uie.position_prob, "max_span_len": cfg.uie.max_span_len,
                       "schema": [cfg.uie.prompts[t] for t in cfg.labels if t in cfg.uie.prompts]}
    (out / ExportManifest.FILE).write_text(ExportManifest.from_dict(meta).to_json(), encoding="utf-8")  # checked as written
    artifacts.update({"onnx_fp32": "onnx/fp32.onnx", "onnx_int8": "onnx/int8.onnx", "onnx_int8_qdq": "onnx/int8_qdq.onnx",
                      "tokenizer_dir": "tokenizer", "labels": "labels.json", "meta": "meta.json"})
    if openvino is not None:
        artifacts["openvino_int8"] = OPENVINO_INT8
    ratio = stats["int8"].file_bytes / stats["fp32"].file_bytes
    metrics = {"onnx_fp32_mb": stats["fp32"].file_bytes / 2**20, "onnx_int8_mb": stats["int8"].file_bytes / 2**20,
               "onnx_int8_qdq_mb": stats["int8_qdq"].file_bytes / 2**20, "int8_size_ratio": ratio,
               "int8_initializers": stats["int8"].int8_initializers, "selected": selected.name, "pruned": pruned,
               "int8_recipe": int8_search.chosen.recipe.name if int8_search else "dynamic-per-batch"}
    if openvino is not None:
        metrics.update(openvino_recipe=openvino.chosen.recipe.name, openvino_heldout_drop_points=openvino.chosen.drop_points,
                       openvino_int8_mb=sum(f.stat().st_size for f in (out / OPENVINO_INT8, (out / OPENVINO_INT8).with_suffix(".bin"))) / 2**20)
    if int8_search:
        metrics.update(int8_heldout_drop_points=int8_search.chosen.drop_points, int8_within_budget=int8_search.within_budget,
                       qdq_recipe=qdq_search.chosen.recipe.name, qdq_heldout_drop_points=qdq_search.chosen.drop_points)
    gate = None
    limit = cfg.gates.max_int8_size_ratio
    if ratio > limit:
        gate = (f"onnx/int8.onnx is {100 * ratio:.1f}% of onnx/fp32.onnx, above gates.max_int8_size_ratio "
                f"{100 * limit:.0f}% by {100 * (ratio - limit):.1f} points")
    ctx.log(f"[export] ONNX FP32 {metrics['onnx_fp32_mb']:.1f} MB, INT8 {metrics['onnx_int8_mb']:.1f} MB ({100 * ratio:.0f}%), "
            f"QDQ {metrics['onnx_int8_qdq_mb']:.1f} MB")
    return StageResult(metrics=metrics, artifacts=artifacts, gate_error=gate,
                       message=f"ONNX INT8 {metrics['onnx_int8_mb']:.1f} MB ({100 * ratio:.0f}% of FP32)")


STAGE = Stage(
    name="export",
    description="Paddle inference model and INT8 ONNX of the selected candidate and the FP32 baseline",
    requires=("compress", "finetune-check"),
    params=params,
    inputs=inputs,
    run=run,
    # 2: calibrated activation scales in onnx/int8.onnx; 3: fused MatMulIntegerToFloat; 4: QDQ on MatMul
    # inputs only; 5: QDQ activation scales from real tokens; 6: K^T folded into the score GEMM (int8.onnx);
    # 7: openvino/int8.xml (NNCF)
    version="7",
)
