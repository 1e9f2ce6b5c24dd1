"""Benchmark: PTQ grid + (optionally) pruned + INT8 vs FP32 on Paddle Inference (CPU, oneDNN), side by side.

    .venv/bin/python scripts/bench_compress.py --model_dir runs/tnews/finetune/out/model \\
        --data_dir ../shared/data/tnews --task tnews --algo_list mse hist avg --out bench_compress.json
    # pruned + int8: --pruned_model_dir <dir from the compress stage> or --prune_width 3/4 --prune_steps 200
    # smoke: --limit 200

Every model is evaluated on the same dev examples (all of them unless --limit) and timed at
--batch_size (32) in interleaved rounds (FP32, INT8, ... then again), so machine noise hits all alike;
throughput is the median over rounds.  Prints ratios to FP32 and the PTQ grid wall time; writes JSON.
--compare_default_int8 also runs the best PTQ model with Paddle's default oneDNN int8 op set (every op
with a scale), the configuration that loses accuracy on ERNIE (see pipeline/backends/paddle/session.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline  # noqa: E402,F401  (before paddle)
from pipeline.backends.paddle.convert import export_static  # noqa: E402
from pipeline.backends.paddle.quantize.embeddings import quantize_embeddings  # noqa: E402
from pipeline.backends.paddle.quantize.ptq import PTQSettings, calibration_examples, check_calibration, quantize_static  # noqa: E402
from pipeline.backends.paddle.session import ONEDNN_INT8_OPS, session  # noqa: E402
from pipeline.compress.arguments import parse_width  # noqa: E402
from pipeline.config import load_task_config  # noqa: E402
from pipeline.kinds import load_task_data  # noqa: E402
from pipeline.evaluation import evaluate_session, measure_throughput  # noqa: E402
from pipeline.kinds import featurize  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402


def _arguments(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_dir", required=True, type=Path, help="fine-tuned PaddleNLP classifier dir")
    ap.add_argument("--data_dir", required=True, type=Path)
    ap.add_argument("--task", default="tnews")
    ap.add_argument("--algo_list", nargs="+", default=["mse", "hist", "avg"])
    ap.add_argument("--batch_size_list", nargs="+", type=int, default=[32])
    ap.add_argument("--batch_num_list", nargs="+", type=int, default=[4])
    ap.add_argument("--weight_quantize_type", default="channel_wise_abs_max")
    ap.add_argument("--pruned_model_dir", type=Path, help="an already pruned classifier dir (e.g. compress/out/candidates/w0.75/model)")
    ap.add_argument("--prune_width", help="prune here with DynaBERT (e.g. 3/4); needs --prune_steps")
    ap.add_argument("--prune_steps", type=int, default=200)
    ap.add_argument("--embeddings", action="store_true", help="also measure int8 embeddings on the best INT8 model")
    ap.add_argument("--compare_default_int8", action="store_true")
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timed_batches", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--limit", type=int, default=0, help="use only this many dev (and train) examples: smoke runs")
    ap.add_argument("--work_dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench_compress.json"))
    return ap.parse_args(argv)


class Bench:
    """The models under test (name -> (static dir, precision)), their dev results and the interleaved rates."""

    def __init__(self, a: argparse.Namespace, dev):
        self.a, self.dev = a, dev
        self.models: dict[str, tuple[Path, str]] = {}
        self.results: dict[str, dict] = {}

    def evaluate(self) -> None:
        """Dev accuracy and size of every model not yet evaluated."""
        for name, (d, prec) in self.models.items():
            if name not in self.results:
                acc = evaluate_session(session(d, precision=prec, threads=self.a.threads), self.dev, 64, desc=name).accuracy
                self.results[name] = {"accuracy": acc, "precision": prec,
                                      "size_bytes": sum(p.stat().st_size for p in d.iterdir())}

    def sessions(self, best: str) -> dict:
        a = self.a
        sessions = {name: session(d, precision=prec, threads=a.threads) for name, (d, prec) in self.models.items()}
        if a.compare_default_int8:
            name = f"{best}@default-int8-ops"
            sessions[name] = session(self.models[best][0], precision="int8", threads=a.threads, int8_ops=set())
            self.results[name] = {"accuracy": evaluate_session(sessions[name], self.dev, 64, desc=name).accuracy,
                                  "precision": "int8-all-ops", "size_bytes": self.results[best]["size_bytes"]}
        return sessions

    def time(self, sessions: dict) -> None:
        """Interleaved rounds (FP32, INT8, ..., FP32, INT8, ...): each model's median rate, p50 and ratio to FP32."""
        import numpy as np

        rates: dict[str, list[float]] = {n: [] for n in sessions}
        p50: dict[str, list[float]] = {n: [] for n in sessions}
        for _ in range(self.a.rounds):
            for n, sess in sessions.items():
                tp = measure_throughput(sess, self.dev, self.a.batch_size, warmup=2, repeats=1,
                                        max_batches=self.a.timed_batches)
                rates[n].append(tp.sentences_per_s)
                p50[n].append(tp.latency_ms_p50)
        base_acc, base_tp = self.results["fp32"]["accuracy"], float(np.median(rates["fp32"]))
        for n in sessions:
            r = self.results[n]
            r.update(throughput=float(np.median(rates[n])), throughput_rounds=rates[n],
                     latency_ms_p50=float(np.median(p50[n])))
            r.update(speedup=r["throughput"] / base_tp, accuracy_drop_points=100 * (base_acc - r["accuracy"]))


def _ptq_grid(bench: Bench, fp32: Path, grid, calib, work: Path) -> tuple[float, dict]:
    grid_times = {}
    t_grid = time.monotonic()
    for s in grid:
        t0 = time.monotonic()
        bench.models[s.name] = (quantize_static(fp32, work / s.name, calib, s), "int8")
        grid_times[s.name] = round(time.monotonic() - t0, 2)
    return time.monotonic() - t_grid, grid_times


def _pruned(a, cfg, train, dev, work: Path) -> Path | None:
    if a.prune_width and not a.pruned_model_dir:
        from pipeline.compress.architecture import Architecture
        from pipeline.compress.dynabert import Schedule, prune

        return prune(a.model_dir, Architecture(parse_width(a.prune_width)), train, dev,
                     Schedule(epochs=1, learning_rate=2e-5, batch_size=32, max_steps=a.prune_steps, seed=42),
                     out_dir=work / "pruned")
    return a.pruned_model_dir


def main(argv=None) -> int:
    a = _arguments(argv)
    cfg = load_task_config(a.task, {"data.dir": str(a.data_dir.resolve())})
    data = load_task_data(cfg)
    dev, train = list(data.dev.examples), list(data.train.examples)
    if a.limit:
        dev, train = dev[: a.limit], train[: max(a.limit, 4 * max(a.batch_size_list) * max(a.batch_num_list))]
    grid = [PTQSettings(al, bs, bn, weight_quantize_type=a.weight_quantize_type)
            for al in a.algo_list for bs in a.batch_size_list for bn in a.batch_num_list]
    check_calibration(len(train), grid)
    tok = Tokenizer.from_model_dir(a.model_dir, cfg.max_seq_len)
    train, dev = featurize(cfg, tok, train), featurize(cfg, tok, dev)
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="bench-compress-"))
    from pipeline.compress.build import load_classifier

    bench = Bench(a, dev)
    fp32 = export_static(load_classifier(a.model_dir, len(data.labels)), work / "fp32")
    bench.models["fp32"] = (fp32, "fp32")
    calib = calibration_examples(train, max(s.calibration_examples for s in grid), 0)
    grid_wall, grid_times = _ptq_grid(bench, fp32, grid, calib, work)
    pruned_dir = _pruned(a, cfg, train, dev, work)
    bench.evaluate()
    best = max((n for n in bench.models if n != "fp32"), key=lambda n: bench.results[n]["accuracy"])
    if pruned_dir:
        pf = export_static(load_classifier(pruned_dir, len(data.labels)), work / "pruned-fp32")
        s = next(g for g in grid if g.name == best)
        bench.models["pruned-fp32"] = (pf, "fp32")
        bench.models[f"pruned-{best}"] = (quantize_static(pf, work / f"pruned-{best}", calib, s), "int8")
    if a.embeddings:
        for base in [best] + ([f"pruned-{best}"] if pruned_dir else []):
            quantize_embeddings(bench.models[base][0], work / f"{base}+emb")
            bench.models[f"{base}+emb"] = (work / f"{base}+emb", "int8")
    bench.evaluate()
    sessions = bench.sessions(best)
    bench.time(sessions)

    print(f"\n{len(dev)} dev examples, batch {a.batch_size}, threads {a.threads or 'OMP default'}, "
          f"PTQ grid of {len(grid)}: {grid_wall:.1f}s wall ({grid_times})")
    print(f"{'model':<40}{'accuracy':>10}{'drop pts':>10}{'sent/s':>10}{'x FP32':>8}{'MiB':>8}")
    for n in sessions:
        r = bench.results[n]
        print(f"{n:<40}{r['accuracy']:>10.4f}{r['accuracy_drop_points']:>10.2f}{r['throughput']:>10.0f}{r['speedup']:>8.2f}{r['size_bytes'] / 2**20:>8.1f}")
    payload = {"model_dir": str(a.model_dir), "pruned_model_dir": str(pruned_dir) if pruned_dir else None, "dev_examples": len(dev),
               "batch_size": a.batch_size, "threads": a.threads, "ptq_grid_wall_s": grid_wall, "ptq_grid_s": grid_times,
               "int8_ops": sorted(ONEDNN_INT8_OPS), "results": bench.results, "versions": pipeline.env.versions()}
    a.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
