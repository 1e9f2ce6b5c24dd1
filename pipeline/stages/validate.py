"""Stage ``validate``: parity against the FP32 dygraph reference, benchmarks per backend, gates.

Every runtime of ``pipeline.backends.registry`` that can run here (GPU ones whenever a GPU with their libraries
is present) runs the full dev set (accuracy, argmax agreement, logit differences vs finetune-check's
``dev_logits.npy``) and the benchmark grid; the FP32 model of each runtime is measured in the same run,
so throughput is also a ratio.  Runtimes that cannot run here are recorded ``skipped: <reason>``.
Writes gates.json, metrics.json, report.md and accuracy_vs_throughput.png.
"""

from __future__ import annotations

import json

from pipeline.stage import Stage
from pipeline.config import TaskConfig

METRICS_FILE = "metrics.json"  # pipeline.handoffs.Validation reads it
ANCHOR = "anchor"  # ORT quantize_dynamic(per_channel=True) of the FP32 ONNX: timed beside the CPU engines
INTERLEAVED = ("onnxruntime", "openvino")  # the CPU engines timed in the same interleaved rounds


def params(cfg: TaskConfig) -> dict:
    v, g = cfg.validate, cfg.gates
    return {"validate": {k: getattr(v, k) for k in v.__dataclass_fields__},
            "gates": {"max_accuracy_drop": g.max_accuracy_drop, "min_throughput_ratio": g.min_throughput_ratio,
                      "max_p99_latency_ms": g.max_p99_latency_ms, "min_anchor_ratio": g.min_anchor_ratio},
            "max_seq_len": cfg.max_seq_len,
            # the backend is chosen among those on the bundle's device (named only for GPU: CPU keys stay as they were)
            **({"package_kind": cfg.package.kind} if cfg.package.kind != "CPU" else {})}


def inputs(cfg: TaskConfig) -> dict[str, str]:
    from pipeline.stages.finetune import data_inputs

    return data_inputs(cfg)


def choose_backend(rows: list[dict], requested: str, max_drop: float) -> str:
    by_name = {r["backend"]: r for r in rows}
    if requested != "auto":
        if requested not in by_name:
            from pipeline.errors import ConfigError

            raise ConfigError(f"validate.chosen_backend {requested!r} was not measured; measured: {', '.join(by_name)}")
        return requested
    quantized = [r for r in rows if r["quantized"] and r.get("sentences_per_s") and not r.get("reference")]
    good = [r for r in quantized if r["accuracy_drop_points"] <= max_drop]
    pool = good or quantized or rows
    return max(pool, key=lambda r: r.get("sentences_per_s") or 0.0)["backend"]


def run(ctx):
    from pipeline.backends.onnxruntime import quantize as ort_quantize, session as ort_session
    from pipeline.backends.registry import RunOptions, by_name, plan
    from pipeline.kinds import load_task_data
    from pipeline.evaluation import evaluate_session
    from pipeline.handoffs import ExportManifest
    from pipeline.kinds import get_kind
    from pipeline.records import StageResult
    from pipeline.tokenizer import Tokenizer
    from pipeline.validation import gates as G
    from pipeline.cpu import detect as detect_cpu
    from pipeline.evaluation import interleaved_throughput
    from pipeline.validation.benchmark import BenchmarkSettings, benchmark_backend, path_bytes, ratio
    from pipeline.validation.parity import compare_outputs, load_reference, reference_for, reference_rows
    from pipeline.validation.report import PLOT_FILE, plot_accuracy_vs_throughput, write_report

    cfg, out = ctx.cfg, ctx.out_dir
    vcfg, gcfg = cfg.validate, cfg.gates
    export_dir = ctx.artifact("export", "meta").parent
    meta = ctx.handoff("export", ExportManifest)
    data = load_task_data(cfg)
    kind = get_kind(cfg)
    tokenizer = Tokenizer.from_model_dir(export_dir / "tokenizer", cfg.max_seq_len)
    dev = kind.featurize(tokenizer, data.dev.examples, cfg)
    reference = reference_for(load_reference(ctx.artifact("finetune-check", "dev_logits"), reference_rows(dev), len(data.labels)), dev)
    fp32_score = reference.score
    fp32_accuracy = fp32_score.value
    threads = vcfg.threads or None
    settings = BenchmarkSettings(list(vcfg.batch_sizes), list(vcfg.seq_lens), vcfg.warmup, vcfg.repeats,
                                 vcfg.throughput_batch_size, vcfg.dev_benchmark_limit)

    # Every runtime of the registry that can run here is measured, GPU ones included; the rest are skipped with why.
    runtimes, skipped = plan(export_dir)
    opts = RunOptions(threads, dev.lengths(), cfg.max_seq_len)
    make = {rt.name: (lambda rt=rt: rt.open(rt.artifact(export_dir), opts)) for rt in runtimes}
    # ONNX Runtime's CPU forms are also timed in interleaved rounds (paired ratios to ORT FP32; median and spread):
    # one sample per backend decided selections before, and the same form measured 0.95x and 1.31x in two runs.
    # Before any Paddle backend runs (its OpenMP threads slow ORT down; the registry lists ORT first).
    # OpenVINO's forms and the anchor (ORT's one-liner on the same FP32 ONNX, gates.min_anchor_ratio) in the same rounds.
    timed = dev.subset(range(min(vcfg.dev_benchmark_limit or len(dev), len(dev))))
    anchor = ort_session.session(ort_quantize.quantize_anchor(export_dir / "onnx" / "fp32.onnx", ctx.work_dir / "anchor.onnx"), threads=threads)
    anchor.name = ANCHOR
    paired = interleaved_throughput({**{rt.name: make[rt.name]() for rt in runtimes if rt.runtime in INTERLEAVED and rt.device == "cpu"},
                                     ANCHOR: anchor},
                                    timed, vcfg.throughput_batch_size, rounds=vcfg.repeats, max_batches=32, warmup=vcfg.warmup)
    anchor_score = evaluate_session(anchor, dev, vcfg.dev_batch_size, desc="parity anchor").score
    del anchor
    rows, grids, benches = [], {}, {}
    for rt in runtimes:
        ctx.log(f"[validate] {rt.name} ({rt.device}): parity on {len(data.dev.examples)} dev examples, then benchmark")
        bench = benchmark_backend(rt.name, make[rt.name], tokenizer.vocab_size, dev, settings, rt.artifact(export_dir),
                                  dev_timing=paired.result(rt.name) if rt.name in paired.rates else None)
        session = make[rt.name]()
        ev = evaluate_session(session, dev, vcfg.dev_batch_size, desc=f"parity {rt.name}")
        del session
        par = compare_outputs(rt.name, ev, reference, dev)
        benches[rt.name] = bench
        grids[rt.name] = [c.__dict__ for c in bench.grid]
        b1 = [c for c in bench.grid if c.batch_size == 1 and c.seq_len <= cfg.max_seq_len] or \
             [c for c in bench.grid if c.batch_size == 1]
        rows.append({**par.as_dict(), "metric": kind.metric, "metrics": ev.score.metrics, "runtime": rt.runtime,
                     "device": rt.device, "form": rt.form, "precision": rt.precision, "quantized": rt.quantized,
                     "sentences_per_s": bench.dev.sentences_per_s if bench.dev else None,
                     "latency_ms_p50": bench.dev.latency_ms_p50 if bench.dev else None,
                     "latency_ms_p95": bench.dev.latency_ms_p95 if bench.dev else None,
                     "latency_ms_p99": bench.dev.latency_ms_p99 if bench.dev else None,
                     "batch1_p99_ms": max(b1, key=lambda c: c.seq_len).latency_ms_p99 if b1 else None,
                     "dev_batch1_p99_ms": bench.dev_batch1.latency_ms_p99 if bench.dev_batch1 else None,
                     "peak_rss_mb": bench.peak_rss_mb, "model_mb": bench.model_bytes / 2**20})
    # The ratio's base: FP32 of the same runtime on the same device, else on the CPU (a GPU runtime's speed-up
    # over what the CPU bundle would serve).
    base = {(r["runtime"], r["device"]): r for r in rows if r["precision"] == "fp32"}
    named = {r["backend"]: r for r in rows}
    for r in rows:
        ratio_base = by_name(r["backend"]).ratio_base
        b = named.get(ratio_base) if ratio_base else base.get((r["runtime"], r["device"])) or base.get((r["runtime"], "cpu"))
        r["throughput_ratio"] = ratio(r["sentences_per_s"], b["sentences_per_s"] if b else None)
        if r["backend"] in paired.rates and b and b["backend"] in paired.rates:
            med, lo, hi = paired.ratio(r["backend"], b["backend"])
            r.update(throughput_ratio=med, throughput_ratio_range=[lo, hi], sentences_per_s=paired.median(r["backend"]),
                     throughput_rounds=len(paired.rates[r["backend"]]))
        if r["backend"] in paired.rates:
            med, lo, hi = paired.ratio(r["backend"], ANCHOR)
            r.update(anchor_ratio=med, anchor_ratio_range=[lo, hi])
        bb = benches.get(b["backend"]) if b else None
        r["grid_ratios"] = {f"b{c.batch_size}_s{c.seq_len}": ratio(c.sentences_per_s, bb.cell(c.batch_size, c.seq_len).sentences_per_s)
                            for c in benches[r["backend"]].grid if bb and bb.cell(c.batch_size, c.seq_len)}
    device = "gpu" if cfg.package.kind == "GPU" else "cpu"  # chosen among what the bundle will run on
    chosen = choose_backend([r for r in rows if r["device"] == device] or rows, vcfg.chosen_backend, gcfg.max_accuracy_drop)
    crow = next(r for r in rows if r["backend"] == chosen)

    gate_list = [
        G.check("max_accuracy_drop", gcfg.max_accuracy_drop, crow["accuracy_drop_points"], kind="max", unit=" points",
                detail=f"{chosen} {crow['accuracy']:.4f} vs FP32 {fp32_accuracy:.4f}"),
        G.check("min_throughput_ratio", gcfg.min_throughput_ratio, crow["throughput_ratio"], kind="min", unit="x",
                detail=f"{chosen} vs {crow['runtime']} FP32, dev lengths, batch {vcfg.throughput_batch_size}"),
    ]
    anchor_range = crow.get("anchor_ratio_range") or [None, None]
    gate_list.append(G.check(
        "min_anchor_ratio", gcfg.min_anchor_ratio, crow.get("anchor_ratio"), kind="min", unit="x",
        detail=f"{chosen} vs ORT quantize_dynamic(per_channel) of the same FP32 ONNX, {vcfg.repeats} interleaved rounds"
               + (f" [{anchor_range[0]:.2f}-{anchor_range[1]:.2f}]" if anchor_range[0] is not None else "")))
    if gcfg.max_p99_latency_ms is not None:
        gate_list.append(G.check("max_p99_latency_ms", gcfg.max_p99_latency_ms, crow["batch1_p99_ms"], kind="max",
                                 unit=" ms", detail=f"{chosen}, batch 1"))
    # Reported, not gated: gates.max_bundle_mb is the whole served bundle, which only the package stage sees.
    model_files_bytes = path_bytes(by_name(chosen).artifact(export_dir)) + \
        path_bytes(export_dir / "tokenizer") + path_bytes(export_dir / "labels.json") + path_bytes(export_dir / "meta.json")
    summary = {"accuracy": crow["accuracy"], "fp32_accuracy": fp32_accuracy, "accuracy_drop_points": crow["accuracy_drop_points"],
               "sentences_per_s": crow["sentences_per_s"], "throughput_ratio": crow["throughput_ratio"],
               "batch_size": vcfg.throughput_batch_size, "batch1_p99_ms": crow["batch1_p99_ms"],
               "model_files_mib": model_files_bytes / 2**20,  # chosen model + tokenizer + labels + meta
               "dev_examples": len(data.dev.examples), "dev_features": len(dev),
               "metric": kind.metric, "metric_label": kind.metric_label, "metrics": crow["metrics"],
               "dev_batch_size": vcfg.dev_batch_size,  # the smoke test batches requests the same way
               "fp32_metrics": fp32_score.metrics, "cpu": detect_cpu().as_dict(),
               "throughput_ratio_range": crow.get("throughput_ratio_range"),
               "anchor_ratio": crow.get("anchor_ratio"), "anchor_ratio_range": crow.get("anchor_ratio_range"),
               "anchor": {"what": "onnxruntime quantize_dynamic(per_channel=True) of onnx/fp32.onnx",
                          "accuracy": anchor_score.value, "accuracy_drop_points": 100.0 * (fp32_accuracy - anchor_score.value),
                          "throughput_ratio": paired.ratio(ANCHOR, "onnxruntime-cpu-fp32")[0]
                          if "onnxruntime-cpu-fp32" in paired.rates else None},
               "engine": by_name(chosen).runtime if by_name(chosen) else None,
               "int8_recipe": meta.int8_recipe}
    report = G.GateReport(cfg.task, chosen, gate_list, summary)
    report.write(out)
    sizes = {p.relative_to(export_dir).as_posix(): path_bytes(p) for p in
             [export_dir / "paddle_fp32", export_dir / "paddle_int8", export_dir / "onnx" / "fp32.onnx",
              export_dir / "onnx" / "int8.onnx", export_dir / "onnx" / "int8_qdq.onnx", export_dir / "openvino",
              export_dir / "tokenizer"] if p.exists()}
    metrics_doc = {"format_version": G.FORMAT_VERSION, "kind": "ernie-bundle-metrics", "task": cfg.task,
                   "chosen_backend": chosen, "summary": summary, "backends": rows, "skipped": skipped,
                   "benchmarks": {k: b.as_dict() for k, b in benches.items()}, "sizes": sizes,
                   "selected_candidate": meta.selected_candidate}
    (out / METRICS_FILE).write_text(json.dumps(metrics_doc, indent=2, ensure_ascii=False), encoding="utf-8")
    plot_accuracy_vs_throughput(rows, out / PLOT_FILE, fp32_accuracy, vcfg.throughput_batch_size, kind.metric_label)
    write_report(out, task=cfg.task, gates=gate_list, rows=rows, skipped=skipped, grid=grids, sizes=sizes,
                 selected=meta.selected_candidate, chosen=chosen, fp32_accuracy=fp32_accuracy,
                 batch_size=vcfg.throughput_batch_size, metric_label=kind.metric_label)
    for name, reason in skipped.items():
        ctx.log(f"[validate] {name}: skipped: {reason}")
    metrics = {"chosen_backend": chosen, "accuracy": crow["accuracy"], "accuracy_drop_points": crow["accuracy_drop_points"],
               "throughput_ratio": crow["throughput_ratio"], "sentences_per_s": crow["sentences_per_s"],
               "gates_passed": report.passed, "skipped": {k: f"skipped: {v}" for k, v in skipped.items()}}
    return StageResult(metrics=metrics, gate_error=G.failure_message(gate_list),
                       artifacts={"gates": G.GATES_FILE, "report": "report.md", "metrics": METRICS_FILE, "plot": PLOT_FILE},
                       message=f"{chosen}: {kind.metric_label} {crow['accuracy']:.4f} (drop {crow['accuracy_drop_points']:+.2f} pts vs FP32), "
                               f"{(crow['throughput_ratio'] or 0):.2f}x FP32")


STAGE = Stage(
    name="validate",
    description="parity and benchmarks per backend; regression gates",
    requires=("export", "finetune-check"),
    params=params,
    inputs=inputs,
    run=run,
    # 2: 2048 timed dev examples; ONNX Runtime measured before Paddle. 3: ORT CPU dev-length timing once (interleaved);
    # 4: OpenVINO and the anchor in the interleaved rounds, gates.min_anchor_ratio
    version="4",
)
