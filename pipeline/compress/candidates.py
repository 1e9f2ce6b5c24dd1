"""The candidates table: every compressed model evaluated the same way, and the selection rule.

Each candidate is a static Paddle inference model, run through Paddle Inference on CPU (oneDNN;
int8 kernels for quantized ones) over the *full* dev set, with its size on disk and a short
throughput measurement.  Selection: the highest throughput among candidates whose accuracy is at
most ``max_accuracy_drop`` points below the FP32 baseline (finetune-check); none qualifying is
reported plainly, with the best one found.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pipeline.backends import paddle_inference
from pipeline.kinds.base import FeatureSet

QUANTIZATIONS = ("none", "ptq", "qat")


@dataclass
class Candidate:
    name: str
    width_mult: float
    quantization: str  # none | ptq | qat
    embeddings_int8: bool
    infer_dir: Path
    source_model_dir: Path | None  # FP32 dygraph dir it was made from (None for a static input model)
    settings: dict = field(default_factory=dict)
    accuracy: float | None = None
    accuracy_drop_points: float | None = None
    throughput: float | None = None  # sentences/s at throughput_batch_size
    latency_ms_p50: float | None = None
    size_bytes: int | None = None
    build_seconds: float = 0.0
    kept: bool = True  # False: its infer dir was deleted after selection (keep_all_candidates: false)

    @property
    def precision(self) -> str:
        return "fp32" if self.quantization == "none" else "int8"

    def row(self) -> dict:
        d = asdict(self)
        d["infer_dir"] = str(self.infer_dir)
        d["source_model_dir"] = str(self.source_model_dir) if self.source_model_dir else None
        d["precision"] = self.precision
        return d


@dataclass(frozen=True)
class Selection:
    selected: Candidate | None
    best: Candidate | None  # most accurate candidate (reported when nothing qualifies)
    qualifying: int
    message: str


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def evaluate(
    cand: Candidate,
    dev: FeatureSet,
    *,
    baseline_accuracy: float,
    eval_batch_size: int,
    throughput_batch_size: int,
    throughput_batches: int,
    threads: int | None = None,
    log: Callable[[str], None] = print,
    accuracy_fn: Callable | None = None,
) -> Candidate:
    """Fill in accuracy (full dev), drop vs baseline, size and throughput.

    ``accuracy_fn(session) -> float`` replaces the built-in dev accuracy (the API's custom_evaluate).
    """
    from pipeline.evaluation import evaluate_session, measure_throughput

    sess = paddle_inference.session(cand.infer_dir, precision=cand.precision, threads=threads)
    if accuracy_fn is not None:
        accuracy = float(accuracy_fn(sess))
    else:
        accuracy = evaluate_session(sess, dev, eval_batch_size, desc=f"compress eval {cand.name}").metric
    tp = measure_throughput(sess, dev, throughput_batch_size, warmup=2, repeats=3, max_batches=throughput_batches)
    cand.accuracy = accuracy
    cand.accuracy_drop_points = round(100.0 * (baseline_accuracy - accuracy), 4)
    cand.throughput = tp.sentences_per_s
    cand.latency_ms_p50 = tp.latency_ms_p50
    cand.size_bytes = dir_size(cand.infer_dir)
    log(
        f"[compress] {cand.name}: {dev.kind.metric_label} {accuracy:.4f} (drop {cand.accuracy_drop_points:+.2f} pts vs FP32), "
        f"{tp.sentences_per_s:.0f} sent/s at batch {throughput_batch_size} ({sess.name}), {cand.size_bytes / 2**20:.1f} MiB"
    )
    return cand


def select(cands: Sequence[Candidate], max_accuracy_drop: float) -> Selection:
    evaluated = [c for c in cands if c.accuracy is not None]
    if not evaluated:
        return Selection(None, None, 0, "no candidate was evaluated")
    best = max(evaluated, key=lambda c: (c.accuracy, c.throughput or 0.0))
    ok = [c for c in evaluated if c.accuracy_drop_points <= max_accuracy_drop + 1e-9]
    if not ok:
        return Selection(
            None, best, 0,
            f"no candidate is within {max_accuracy_drop:g} accuracy points of the FP32 baseline; the best found is "
            f"{best.name} (accuracy {best.accuracy:.4f}, {best.accuracy_drop_points:.2f} points below)",
        )
    chosen = max(ok, key=lambda c: (c.throughput or 0.0, c.accuracy))
    return Selection(
        chosen, best, len(ok),
        f"selected {chosen.name}: {chosen.throughput:.0f} sent/s, accuracy {chosen.accuracy:.4f} "
        f"(drop {chosen.accuracy_drop_points:+.2f} pts vs FP32; {len(ok)}/{len(evaluated)} candidates within {max_accuracy_drop:g})",
    )


def write_table(out_dir: Path, cands: Sequence[Candidate], selection: Selection, baseline: dict, max_accuracy_drop: float) -> None:
    out_dir = Path(out_dir)
    fp32 = next((c for c in cands if c.name == "fp32"), None)
    payload = {
        "baseline_accuracy": baseline.get("accuracy"),
        "max_accuracy_drop_points": max_accuracy_drop,
        "selected": selection.selected.name if selection.selected else None,
        "message": selection.message,
        "candidates": [_relative(c.row(), out_dir) for c in cands],
    }
    (out_dir / "candidates.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False), encoding="utf-8")
    base_tp = fp32.throughput if fp32 and fp32.throughput else None
    base_size = fp32.size_bytes if fp32 and fp32.size_bytes else None
    metric = baseline.get("metric_label", "accuracy")  # entity F1 / F1 for the span kinds
    lines = [
        "# Compression candidates",
        "",
        f"FP32 baseline (finetune-check): {metric} {baseline.get('accuracy', float('nan')):.4f}; budget: "
        f"at most {max_accuracy_drop:g} points below.  Paddle Inference on CPU (oneDNN; int8 where quantized).",
        "",
        f"| candidate | width | quant | emb int8 | {metric} | drop (pts) | sent/s | x FP32 | size MiB | x smaller | within budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cands:
        within = c.accuracy_drop_points is not None and c.accuracy_drop_points <= max_accuracy_drop + 1e-9
        mark = " **selected**" if selection.selected is c else ""
        lines.append(
            f"| {c.name}{mark} | {c.width_mult:.3g} | {c.quantization} | {'yes' if c.embeddings_int8 else 'no'} | "
            f"{_f(c.accuracy, 4)} | {_f(c.accuracy_drop_points, 2)} | {_f(c.throughput, 0)} | "
            f"{_f(c.throughput / base_tp if base_tp and c.throughput else None, 2)} | {_f(c.size_bytes / 2**20 if c.size_bytes else None, 1)} | "
            f"{_f(base_size / c.size_bytes if base_size and c.size_bytes else None, 2)} | {'yes' if within else 'no'} |"
        )
    lines += ["", selection.message, ""]
    (out_dir / "candidates.md").write_text("\n".join(lines), encoding="utf-8")


def selected_json(c: Candidate) -> dict:
    return {
        "name": c.name,
        "width_mult": c.width_mult,
        "quantization": c.quantization,
        "embeddings_int8": c.embeddings_int8,
        "accuracy": c.accuracy,
        "accuracy_drop_points": c.accuracy_drop_points,
        "throughput": c.throughput,
        "size_bytes": c.size_bytes,
        "settings": c.settings,
    }


def _relative(row: dict, root: Path) -> dict:
    for key in ("infer_dir", "source_model_dir"):
        if row.get(key):
            try:
                row[key] = str(Path(row[key]).relative_to(root))
            except ValueError:
                pass
    return row


def _f(v, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
