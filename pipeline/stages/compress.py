"""Stage ``compress``: DynaBERT width pruning, then quantization; every candidate evaluated where it ships.

``compress.runtime: onnxruntime`` (default, the CPU bundle): every width as FP32 ONNX plus its INT8 form
from the recipe search (``pipeline.compress.onnx_candidates``).  ``paddle``: Paddle Inference programs
(PTQ grid, QAT, int8 embeddings).  Every candidate is scored on the full dev set and timed in interleaved
rounds (see ``pipeline.compress.candidates``); the fastest median within ``gates.max_accuracy_drop``
points of the finetune-check baseline is selected, the smallest when timing cannot tell candidates apart.
When none qualifies the stage says so, names the best one found and fails at the gate (its table is
still written, so the numbers are there to look at).

Outputs (consumed by export): candidates.json, candidates.md, selected.json,
candidates/<name>/infer/model.pdmodel+.pdiparams (the FP32 baseline and the selected candidate are
always kept), candidates/<name>/model.onnx (onnxruntime), the FP32 dygraph PaddleNLP dir the selected
candidate was made from (selected_model/, or candidates/<width>/model for a pruned one).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from pipeline.stage import Stage
from pipeline.config import TaskConfig
from pipeline.kinds import load_task_data
from pipeline.stages.finetune import data_inputs, kind_params

SELECTED_MODEL_DIR = "selected_model"
PRUNED_CACHE = "dynabert_cache"  # under runs/<task>/: pruned models by content key (see compress.build)


def params(cfg: TaskConfig) -> dict:
    from pipeline.quantization.select import openvino_params, search_params

    return {
        "compress": dataclasses.asdict(cfg.compress),
        "int8_search": search_params(cfg) if cfg.compress.runtime == "onnxruntime" else None,
        "openvino": openvino_params(cfg),
        "max_seq_len": cfg.max_seq_len,
        "labels": list(cfg.labels),
        "max_accuracy_drop": cfg.gates.max_accuracy_drop,
        "text_fields": [cfg.data.text_a, cfg.data.text_b, cfg.data.join],
        **kind_params(cfg),
    }


def check(cfg: TaskConfig) -> None:
    """Before the first stage runs: every engine asked for can run here."""
    if cfg.compress.runtime == "onnxruntime" and "openvino" in cfg.compress.engines:
        from pipeline.backends.openvino import missing
        from pipeline.errors import ConfigError

        why = missing()
        if why:
            raise ConfigError(f"compress.engines: openvino cannot run here: {why} (or --set 'compress.engines=[onnxruntime]')")


def inputs(cfg: TaskConfig) -> dict[str, str]:
    out = data_inputs(cfg)
    static = cfg.compress.input_infer_model_path
    if static:
        from pipeline.backends.forms import check_static_dir
        from pipeline.hashing import tree_sha256

        out["input_infer_model"] = tree_sha256(check_static_dir(Path(static).expanduser()))
    return out


def run(ctx):
    from pipeline.compress.build import CompressInputs, build_and_evaluate, preflight
    from pipeline.compress.candidates import select, selected_candidate, write_table
    from pipeline.handoffs import Baseline
    from pipeline.cpu import detect as detect_cpu
    from pipeline.backends.onnxruntime.int8.search import search_recipe
    from pipeline.quantization.select import CACHE_DIR, search_rows
    from pipeline.kinds import get_kind
    from pipeline.records import StageResult
    from pipeline.tokenizer import Tokenizer

    cfg = ctx.cfg
    kind = get_kind(cfg)
    ccfg = cfg.compress
    model_dir = ctx.artifact("finetune", "model_dir")
    baseline = ctx.handoff("finetune-check", Baseline)
    data = load_task_data(cfg)
    static = Path(ccfg.input_infer_model_path).expanduser() if ccfg.input_infer_model_path else None
    vocab_dir = static if static is not None and (static / "vocab.txt").is_file() else model_dir
    tokenizer = Tokenizer.from_model_dir(vocab_dir, cfg.max_seq_len)
    train = kind.featurize(tokenizer, data.train.examples, cfg)
    preflight(ccfg, train_size=len(train), static_model_dir=static)  # bad input fails here, before any work
    ecfg = cfg.export
    # The INT8 search's calibration and held-out training rows; DynaBERT's importance and best epoch come from
    # the same held-out rows.
    rows = search_rows(cfg, tokenizer, data.train.examples, kind)
    inp = CompressInputs(
        model_dir=None if static is not None else model_dir,
        static_model_dir=static,
        tokenizer=tokenizer,
        train=kind.for_training(train, ccfg.seed),
        dev=kind.featurize(tokenizer, data.dev.examples, cfg),
        heldout=rows.held,
        pruned_cache=ctx.runs_dir / PRUNED_CACHE,
        # The model (finetune's outputs) and every data row and setting that shapes training and held-out rows.
        source_key=json.dumps([ctx.upstream["finetune"].output_hash, data.fingerprint, kind_params(cfg),
                               ecfg.calibration_sentences, ecfg.int8_search_sentences], sort_keys=True, default=str),
        num_labels=len(data.labels),
        max_seq_len=cfg.max_seq_len,
        baseline_accuracy=baseline.value,
    )
    ctx.log(f"[compress] strategy {ccfg.strategy} in {ccfg.runtime}: FP32 baseline {kind.metric_label} {inp.baseline_accuracy:.4f}, "
            f"budget {cfg.gates.max_accuracy_drop:g} points, {len(data.dev.examples)} dev examples ({len(inp.dev)} model inputs)")
    quantize_onnx = quantize_openvino = None
    if ccfg.runtime == "onnxruntime":
        cpu = detect_cpu()
        budget, cache = cfg.gates.max_accuracy_drop, ctx.runs_dir / CACHE_DIR
        if "onnxruntime" in ccfg.engines:
            def quantize_onnx(fp32, out_path, unpruned):
                return search_recipe(fp32, out_path, rows, ecfg, budget, cpu, cache, baseline=unpruned, log=ctx.log)
        if "openvino" in ccfg.engines:
            from pipeline.backends.openvino.quantize import search_recipe as openvino_search

            def quantize_openvino(fp32, out_path, unpruned):
                return openvino_search(fp32, out_path, rows, ecfg, budget, cache, baseline=unpruned, log=ctx.log)
    cands, timing = build_and_evaluate(ccfg, inp, ctx.out_dir, ctx.work_dir, log=ctx.log, quantize_onnx=quantize_onnx,
                                       quantize_openvino=quantize_openvino, int8_embeddings=ecfg.int8_embeddings,
                                       opset=ecfg.opset)
    selection = select(cands, cfg.gates.max_accuracy_drop, timing)
    chosen = selection.selected
    if not ccfg.keep_all_candidates:
        # Static models are cheap to remake; the pruned dygraph dirs (candidates/<w>/model) are the
        # product of training and stay.  ONNX candidates share their width's program and stay too.
        for c in cands:
            if c.name != "fp32" and c is not chosen and c.runtime == "paddle":
                shutil.rmtree(c.infer_dir, ignore_errors=True)
                if not any(c.infer_dir.parent.iterdir()):
                    c.infer_dir.parent.rmdir()
                c.kept = False
    write_table(ctx.out_dir, cands, selection, baseline.value, cfg.gates.max_accuracy_drop, baseline.metric_label)
    ctx.log(f"[compress] {selection.message}")
    fp32 = cands[0]
    metrics = {"candidates": len(cands), "fp32_accuracy": fp32.accuracy, "fp32_throughput": fp32.throughput}
    artifacts = {"candidates": "candidates.json", "fp32_infer_dir": str(fp32.infer_dir.relative_to(ctx.out_dir))}
    if fp32.model_path is not None:
        artifacts["fp32_onnx"] = str(fp32.model_path.relative_to(ctx.out_dir))
    if chosen is None:
        return StageResult(metrics=metrics, artifacts=artifacts, gate_error=selection.message, message=selection.message)
    (ctx.out_dir / "selected.json").write_text(selected_candidate(chosen).to_json(), encoding="utf-8")
    artifacts.update({"selected": "selected.json", "selected_infer_dir": str(chosen.infer_dir.relative_to(ctx.out_dir))})
    if chosen.model_path is not None:  # the FP32 ONNX of the selected width: export builds its INT8 from it
        width_fp32 = next(c for c in cands if c.quantization == "none" and c.width_mult == chosen.width_mult)
        artifacts["selected_fp32_onnx"] = str(width_fp32.model_path.relative_to(ctx.out_dir))
    if chosen.source_model_dir is not None:
        src = Path(chosen.source_model_dir)
        if src.is_relative_to(ctx.out_dir):  # a pruned model already lives under candidates/
            artifacts["selected_fp32_model_dir"] = str(src.relative_to(ctx.out_dir))
        else:
            shutil.copytree(src, ctx.out_dir / SELECTED_MODEL_DIR)
            artifacts["selected_fp32_model_dir"] = SELECTED_MODEL_DIR
    metrics = {
        "selected": chosen.name,
        "accuracy": chosen.accuracy,
        "accuracy_drop_points": chosen.accuracy_drop_points,
        "speedup": (chosen.throughput / fp32.throughput) if fp32.throughput else 0.0,
        "throughput": chosen.throughput,
        **metrics,
    }
    return StageResult(metrics=metrics, artifacts=artifacts, message=selection.message)


STAGE = Stage(
    name="compress",
    description="DynaBERT width pruning, then INT8; every candidate scored and timed in the runtime that ships",
    requires=("finetune", "finetune-check"),  # the model from finetune, the baseline from finetune-check
    params=params,
    inputs=inputs,
    run=run,
    check=check,
    # 2: INT8 candidates with fused MatMulIntegerToFloat (pipeline.int8.fusion); 3: and with K^T folded into the
    # attention-score GEMM (fold_key_transpose); 4: OpenVINO INT8 candidates (compress.engines)
    version="4",
)
