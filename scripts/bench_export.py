"""Benchmark the ONNX forms against the issue #4 targets (prints ratios, writes JSON).

    .venv/bin/python scripts/bench_export.py --model-dir runs/tnews/finetune/out/model \
        --data-dir ../shared/data/tnews --limit 2000 --out bench_export.json

Builds, from the FP32 dygraph model: FP32 ONNX, ORT's plain ``quantize_dynamic`` (the reference),
our per-batch INT8 (dynamic per-channel + int8 embeddings), the QDQ form, the shipped INT8 (per-batch
form with the QDQ calibration's activation scales: batch-independent) and optionally the fused variant;
measures dev accuracy and batch-32 throughput on real dev lengths in one process, so ratios are
comparable.  Targets: INT8 >= 2.5x FP32 and >= 1.2x quantize_dynamic at equal or better accuracy;
INT8 file <= 35% of FP32.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline  # noqa: F401,E402  (before paddle)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True, help="fine-tuned PaddleNLP classifier dir")
    p.add_argument("--data-dir", required=True, help="CLUE JSON lines with train.json/dev.json/labels.json")
    p.add_argument("--task", default="tnews")
    p.add_argument("--limit", type=int, default=0, help="> 0: only the first N dev examples")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--calibration", type=int, default=256)
    p.add_argument("--with-fused", action="store_true", help="also the ORT-transformer-optimized INT8 variant")
    p.add_argument("--work-dir", help="keep the models here (default: a temp dir)")
    p.add_argument("--out", default="bench_export.json")
    args = p.parse_args(argv)

    from pipeline.backends import onnxruntime as ortb
    from pipeline.backends.paddle_inference import export_static
    from pipeline.config import load_task_config
    from pipeline.data import load_task_data
    from pipeline.evaluation import evaluate_session, measure_throughput
    from pipeline.kinds import featurize
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    cfg = load_task_config(args.task, {"data.dir": str(Path(args.data_dir).resolve())})
    data = load_task_data(cfg)
    dev = list(data.dev.examples[: args.limit] if args.limit else data.dev.examples)
    tok = Tokenizer.from_model_dir(Path(args.model_dir), cfg.max_seq_len)
    dev = featurize(cfg, tok, dev)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_export-"))
    work.mkdir(parents=True, exist_ok=True)
    export_static(load_classifier(Path(args.model_dir), len(data.labels)), work / "static")
    fp32 = ortb.export_onnx(work / "static", work / "fp32.onnx")
    models = {"ort-fp32": fp32,
              "ort-quantize_dynamic": ortb.quantize_dynamic_plain(fp32, work / "qd_plain.onnx"),
              "ort-int8-per-batch": ortb.quantize_int8_dynamic(fp32, work / "int8_per_batch.onnx")}
    if args.with_fused:
        models["ort-int8-fused"] = ortb.quantize_int8_dynamic(fp32, work / "int8_fused.onnx", optimize=True)
    train = featurize(cfg, tok, list(data.train.examples[: args.calibration]))
    feeds = ortb.calibration_feeds(train)
    models["ort-int8-qdq"] = ortb.quantize_int8_qdq(fp32, work / "int8_qdq.onnx", feeds)
    # What the export stage ships as onnx/int8.onnx: the per-batch form with calibrated activation scales
    # (answers independent of batch mates; see ortb.static_activation_scales).
    import onnx

    shipped = onnx.load(str(models["ort-int8-per-batch"]))
    ortb.static_activation_scales(shipped, onnx.load(str(models["ort-int8-qdq"])), pad_id=tok.pad_id)
    onnx.save(shipped, str(work / "int8.onnx"))
    models["ort-int8"] = work / "int8.onnx"

    results = {}
    for name, path in models.items():
        s = ortb.session(path, threads=args.threads or None)
        ev = evaluate_session(s, dev, 64, desc=f"accuracy {name}")
        tp = measure_throughput(s, dev, args.batch_size, repeats=args.repeats)
        results[name] = {"accuracy": ev.accuracy, "sentences_per_s": tp.sentences_per_s, "p50_ms": tp.latency_ms_p50,
                         "p99_ms": tp.latency_ms_p99, "file_mb": path.stat().st_size / 2**20,
                         "int8_initializers": ortb.weight_stats(path).int8_initializers}
    base, qd = results["ort-fp32"], results["ort-quantize_dynamic"]
    print(f"{'model':<22}{'acc':>8}{'sent/s':>10}{'xFP32':>8}{'xQD':>7}{'MB':>8}{'%FP32':>7}")
    for name, r in results.items():
        r["x_fp32"] = r["sentences_per_s"] / base["sentences_per_s"]
        r["x_quantize_dynamic"] = r["sentences_per_s"] / qd["sentences_per_s"]
        r["size_ratio"] = r["file_mb"] / base["file_mb"]
        print(f"{name:<22}{r['accuracy']:>8.4f}{r['sentences_per_s']:>10.1f}{r['x_fp32']:>8.2f}{r['x_quantize_dynamic']:>7.2f}"
              f"{r['file_mb']:>8.1f}{100 * r['size_ratio']:>6.0f}%")
    i8 = results["ort-int8"]
    targets = {"int8_vs_fp32>=2.5": i8["x_fp32"] >= 2.5, "int8_vs_quantize_dynamic>=1.2": i8["x_quantize_dynamic"] >= 1.2,
               "int8_accuracy>=quantize_dynamic": i8["accuracy"] >= qd["accuracy"], "int8_size<=35%": i8["size_ratio"] <= 0.35}
    print("targets:", ", ".join(f"{k} {'MET' if v else 'NOT met'}" for k, v in targets.items()))
    Path(args.out).write_text(json.dumps({"dev_examples": len(dev), "batch_size": args.batch_size, "results": results,
                                          "targets": targets}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
