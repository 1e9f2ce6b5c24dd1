"""Research probe (issue 60 item 2): does a shallower student (DynaBERT depth) pay on this CPU?

    .venv/bin/python scripts/depth_probe.py --speed            # architectures only: untrained, timed, ~2 min
    .venv/bin/python scripts/depth_probe.py --train 0.6667:4   # distil width 2/3 at 4 layers, score FP32 on dev
    .venv/bin/python scripts/depth_probe.py --train 0.6667:6 --set compress.learning_rate=1e-4 --set compress.max_steps=200
                                                               # the same under other distillation settings
    .venv/bin/python scripts/depth_probe.py --train 0.6667:5 --keep 0 1 2 3 5
                                                               # a 5-layer student keeping those teacher layers

Speed: every (width, layers) architecture's FP32 ONNX, untrained, and each engine's ``speed_form`` INT8 of it, timed
in compress's interleaved rounds against the unpruned FP32 (the screen's method).  Accuracy: the architecture
distilled as compress distils it (``dynabert.prune`` itself: importance order, narrowing, the layers DynaBERT keeps,
each student layer matched to the teacher layer it came from, compress's plateau rule), scored in ONNX Runtime FP32
on all of dev.
Prints ratios and writes JSON (``--out``).  Not part of the product: a one-off measurement kept for its method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline  # noqa: E402,F401  (before paddle)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="tnews")
    ap.add_argument("--model_dir", type=Path, default=Path("../shared/models/tnews-e5mini6-ft"))
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--archs", nargs="+", default=["1:6", "0.6667:6", "0.5:6", "1:4", "0.6667:4", "0.5:4", "0.6667:3"])
    ap.add_argument("--engines", nargs="+", default=["onnxruntime", "openvino"])
    ap.add_argument("--train", nargs="*", default=[], help="width:layers to distil and score")
    ap.add_argument("--work_dir", type=Path, default=Path("runs/depth_probe"))
    ap.add_argument("--out", type=Path, default=Path("runs/depth_probe/depth_probe.json"))
    ap.add_argument("--keep", nargs="+", type=int, default=None, metavar="LAYER",
                    help="the teacher layers a student of that many layers keeps, instead of DynaBERT's floor(i / depth)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a task config override, as the pipeline's --set (e.g. compress.learning_rate=5e-5)")
    args = ap.parse_args(argv)

    from pipeline.backends.onnxruntime.convert import export_onnx
    from pipeline.backends.paddle.convert import export_static
    from pipeline.backends.registry import cpu_engine
    from pipeline.compress.architecture import Architecture
    from pipeline.compress.build import distillation_schedule
    from pipeline.compress.dynabert import prune
    from pipeline.compress.screen import narrowed_onnx
    from pipeline.config import load_task_config, parse_override
    from pipeline.evaluation import evaluate_session, interleaved_throughput
    from pipeline.kinds import get_kind, load_task_data
    from pipeline.modeling import load_classifier
    from pipeline.quantization.select import search_rows
    from pipeline.tokenizer import Tokenizer

    def arch_of(text: str) -> tuple[Architecture, int]:
        """"0.6667:4" -> (width 2/3 at 4 of the model's layers, 4)."""
        layers = int(text.split(":")[1])
        return Architecture(float(text.split(":")[0]), layers / total_layers), layers

    cfg = load_task_config(args.task, dict(parse_override(text) for text in args.set))
    if args.keep:  # a probe's question, not the product's rule: prune looks kept_layers up when it shrinks a model
        from pipeline.compress import dynabert

        dynabert_rule = dynabert.kept_layers
        dynabert.kept_layers = lambda n, d: args.keep if round(d * n) == len(args.keep) else dynabert_rule(n, d)
    variant = [*args.set, *([f"keep{'_'.join(map(str, args.keep))}"] if args.keep else [])]
    kind, data = get_kind(cfg), load_task_data(cfg)
    tok = Tokenizer.from_model_dir(args.model_dir, cfg.max_seq_len)
    dev = kind.featurize(tok, data.dev.examples, cfg)
    rows = search_rows(cfg, tok, data.train.examples, kind)
    n_labels = len(data.labels)
    total_layers = load_classifier(args.model_dir, n_labels).config.num_hidden_layers
    unpruned = args.work_dir / "unpruned"
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    args.work_dir.mkdir(parents=True, exist_ok=True)

    if args.speed:
        sessions = {}
        fp32_onnx = lambda: export_onnx(export_static(load_classifier(args.model_dir, n_labels), unpruned / "infer"),  # noqa: E731
                                        unpruned / "model.onnx")
        for arch in args.archs:
            a, _ = arch_of(arch)
            fp32 = narrowed_onnx(args.model_dir, n_labels, a, args.work_dir, "int64", 13, fp32_onnx)
            if arch == args.archs[0]:
                sessions[f"{arch} fp32"] = cpu_engine("onnxruntime").open(fp32, "fp32", {})
            for e in args.engines:
                engine = cpu_engine(e)
                path = args.work_dir / a.name / e / engine.candidate_file
                path.parent.mkdir(parents=True, exist_ok=True)
                engine.speed_form(fp32, path, rows, cfg)
                sessions[f"{arch} {e}-int8"] = engine.open(path, "int8", engine.settings(cfg))
        timing = interleaved_throughput(sessions, dev, 32, rounds=5, max_batches=8)
        result["speed"] = {}
        for name in sessions:
            med, lo, hi = timing.ratio(name)
            result["speed"][name] = [med, lo, hi]
            print(f"{name:24s} {med:5.2f}x FP32 [{lo:.2f}-{hi:.2f}]")

    for arch in args.train:
        a, n = arch_of(arch)
        t0 = time.monotonic()
        c = cfg.compress
        logs = []
        out = prune(args.model_dir, a, kind.for_training(kind.featurize(tok, data.train.examples, cfg), c.seed), rows.held,
                    distillation_schedule(c), out_dir=args.work_dir / "-".join([f"trained-{a.name}", *variant]),
                    log=lambda m: (logs.append(m), print(m)))
        best = float(logs[-1].rsplit(" ", 1)[1])  # prune's last line: "dynabert <arch>: best held-out accuracy 0.5230"
        fp32 = export_onnx(export_static(load_classifier(out, n_labels), out / "infer"), out / "model.onnx")
        acc = evaluate_session(cpu_engine("onnxruntime").open(fp32, "fp32", {}), dev, 64).metric
        result.setdefault("trained", {})[" ".join([arch, *variant])] = {
            "architecture": a.name, "layers": n, "settings": args.set, "keep": args.keep, "heldout": best, "dev": acc,
            "seconds": time.monotonic() - t0}
        print(f"{a.name} ({n} layers): held-out {best:.4f}, dev {acc:.4f}, {time.monotonic() - t0:.0f} s")
        args.out.write_text(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
