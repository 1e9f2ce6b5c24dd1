"""The candidates table: every compressed model evaluated the same way, and the selection rule.

Each candidate runs in the runtime it would be served with: a CPU engine (``compress.candidate_format: onnx``, the
CPU bundle: FP32 ONNX per architecture and each engine's searched INT8 form) or Paddle Inference
(``paddle``: static programs, oneDNN int8 kernels for PTQ/QAT).  Accuracy is on the *full* dev set;
throughput comes from interleaved rounds over every candidate (dev lengths, dynamic padding), so machine
noise hits all alike: the median and the min-max of the per-round ratios to FP32 are reported.
Selection: the highest median throughput among candidates at most ``max_accuracy_drop`` points below the
FP32 baseline; a candidate whose rounds disagree with it on which is faster is timed against it alone (a duel), and
those no duel tells apart are within noise: the most accurate of them wins.  None qualifying is reported plainly,
with the best one found.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pipeline.compress.architecture import Architecture
from pipeline.kinds.base import FeatureSet
from pipeline.validation.gates import meets



@dataclass
class Candidate:
    name: str
    width_mult: float
    quantization: str  # none | ptq | qat | ort (ONNX Runtime's INT8 recipe search) | nncf (OpenVINO's)
    embeddings_int8: bool
    infer_dir: Path  # Paddle static program (for an onnxruntime candidate: the FP32 program of its width)
    source_model_dir: Path | None  # FP32 dygraph dir it was made from (None for a static input model)
    settings: dict = field(default_factory=dict)
    runtime: str = "paddle"  # paddle | onnxruntime | openvino: where it is evaluated, and would be served
    model_path: Path | None = None  # the ONNX file (OpenVINO: IR .xml, .bin beside it) of an ONNX-engine candidate
    source_onnx: Path | None = None  # the FP32 ONNX of its width that an ONNX-engine candidate was made from
    accuracy: float | None = None
    accuracy_drop_points: float | None = None
    throughput: float | None = None  # sentences/s at throughput_batch_size, median of the interleaved rounds
    throughput_ratio: float | None = None  # vs the FP32 candidate: median of the per-round ratios
    throughput_ratio_range: list[float] | None = None  # [min, max] of the per-round ratios
    size_bytes: int | None = None
    build_seconds: float = 0.0
    kept: bool = True  # False: its infer dir was deleted after selection (keep_all_candidates: false)
    depth_mult: float = 1.0  # the share of encoder layers it keeps

    @property
    def architecture(self) -> Architecture:
        return Architecture(self.width_mult, self.depth_mult)

    def within(self, max_accuracy_drop: float) -> bool:
        """Scored, and at most ``max_accuracy_drop`` points below the FP32 baseline: the selection's budget."""
        return self.accuracy_drop_points is not None and meets(self.accuracy_drop_points, max_accuracy_drop, "max")

    @property
    def is_program(self) -> bool:
        """A Paddle static program (judged in Paddle Inference), not an ONNX-engine form."""
        return self.model_path is None

    @property
    def artifact(self) -> Path:
        """What is measured and shipped: the ONNX file, or the static program's directory."""
        return self.model_path if self.model_path is not None else self.infer_dir

    @property
    def files(self) -> list[Path]:
        """Every file of the artifact (an OpenVINO IR is its .xml and its .bin)."""
        if self.model_path is not None and self.model_path.suffix == ".xml":
            return [self.model_path, self.model_path.with_suffix(".bin")]
        return [self.artifact]

    @property
    def precision(self) -> str:
        return "fp32" if self.quantization == "none" else "int8"

    def row(self) -> dict:
        d = asdict(self)
        d["infer_dir"] = str(self.infer_dir)
        d["source_model_dir"] = str(self.source_model_dir) if self.source_model_dir else None
        d["model_path"] = str(self.model_path) if self.model_path else None
        d["source_onnx"] = str(self.source_onnx) if self.source_onnx else None
        d["precision"] = self.precision
        return d


@dataclass(frozen=True)
class Selection:
    selected: Candidate | None
    best: Candidate | None  # most accurate candidate (reported when nothing qualifies)
    qualifying: int
    message: str
    within_noise: tuple[str, ...] = ()  # qualifying candidates the timing could not tell from the fastest


def path_size(path: Path) -> int:
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


PADDLE_WHERE = "Paddle Inference on CPU (oneDNN; int8 where quantized)"


def _where(runtime: str) -> str:
    """The report's line for a runtime: a CPU engine's own, else Paddle's."""
    from pipeline.backends.registry import cpu_engine

    engine = cpu_engine(runtime)
    return engine.where if engine is not None else PADDLE_WHERE


def make_session(cand: Candidate):
    """A session in the candidate's own runtime: a CPU engine's (with the settings it records), else Paddle's."""
    from pipeline.backends.registry import cpu_engine

    engine = cpu_engine(cand.runtime)
    if engine is not None:
        return engine.open(cand.model_path, cand.precision, cand.settings)
    from pipeline.backends.paddle.session import session

    return session(cand.infer_dir, precision=cand.precision)


def evaluate(
    cand: Candidate,
    dev: FeatureSet,
    *,
    baseline_accuracy: float,
    eval_batch_size: int,
    log: Callable[[str], None] = print,
    accuracy_fn: Callable | None = None,
):
    """Fill in accuracy (full dev), drop vs baseline and size; throughput comes from :func:`time_candidates`.
    Returns the dev evaluation (``pipeline.evaluation.Evaluation``; validate may reuse it), None with ``accuracy_fn``.

    ``accuracy_fn(session) -> float`` replaces the built-in dev accuracy (the API's custom_evaluate).
    """
    from pipeline.evaluation import evaluate_session

    sess, ev = make_session(cand), None
    if accuracy_fn is not None:
        accuracy = float(accuracy_fn(sess))
    else:
        ev = evaluate_session(sess, dev, eval_batch_size, desc=f"compress eval {cand.name}")
        accuracy = ev.metric
    cand.accuracy = accuracy
    cand.accuracy_drop_points = round(100.0 * (baseline_accuracy - accuracy), 4)
    cand.size_bytes = sum(path_size(f) for f in cand.files)
    log(f"[compress] {cand.name}: {dev.kind.metric_label} {accuracy:.4f} (drop {cand.accuracy_drop_points:+.2f} pts vs FP32), "
        f"{cand.size_bytes / 2**20:.1f} MiB ({sess.name})")
    return ev


def time_candidates(cands: Sequence[Candidate], dev: FeatureSet, *, batch_size: int, batches: int, rounds: int,
                    log: Callable[[str], None] = print):
    """Interleaved rounds over every candidate (the first is FP32): median sent/s and paired ratios.  Returns the
    rounds and ``duel(a, b)`` (``evaluation.duels``: two of these sessions alone, for ``select``)."""
    from pipeline.evaluation import duels, interleaved_throughput

    sessions = {c.name: make_session(c) for c in cands}
    timing = interleaved_throughput(sessions, dev, batch_size, rounds=rounds, max_batches=batches)
    for c in cands:
        c.throughput = timing.median(c.name)
        med, lo, hi = timing.ratio(c.name)
        c.throughput_ratio, c.throughput_ratio_range = med, [lo, hi]
        log(f"[compress] {c.name}: {c.throughput:.0f} sent/s (median of {rounds} rounds, batch {batch_size}), "
            f"{med:.2f}x FP32 [{lo:.2f}-{hi:.2f}]")
    return timing, duels(sessions, dev, batch_size=batch_size, batches=batches, rounds=rounds, log=log,
                         label="[compress] ")


def select(cands: Sequence[Candidate], max_accuracy_drop: float, timing=None, duel=None) -> Selection:
    """Fastest median within the budget.  With ``timing`` (the interleaved rounds), a candidate whose rounds disagree
    with the fastest's on which is faster is timed against it alone (``duel``, when given: ``evaluation.duels``), and
    one a duel shows faster, as surely as by every one of the rounds, is the fastest.  Those neither the rounds nor a
    duel can tell from the fastest are within noise, and the most accurate of them is chosen (then the smallest).

    Accuracy before size: TNEWS on Zen 4 tied w1/2 ONNX Runtime INT8 (0.44 points below FP32, 13.5 MiB) with w2/3
    OpenVINO INT8 (0.11 below, 15.5 MiB, the faster median), and size would have shipped the worse answers for 2 MiB.
    The duel before accuracy: TNEWS w7/12 in ONNX Runtime and OpenVINO INT8 (Zen 4) tied in the rounds of every
    candidate, the more accurate (by 0.09 points) ONNX Runtime form shipped, and validate had it 1.87x the anchor;
    OpenVINO's form was faster in 28 of 35 rounds timed beside it (MEASUREMENTS.md)."""
    evaluated = [c for c in cands if c.accuracy is not None]
    if not evaluated:
        return Selection(None, None, 0, "no candidate was evaluated")
    best = max(evaluated, key=lambda c: (c.accuracy, c.throughput or 0.0))
    ok = [c for c in evaluated if c.within(max_accuracy_drop)]
    if not ok:
        return Selection(
            None, best, 0,
            f"no candidate is within {max_accuracy_drop:g} accuracy points of the FP32 baseline; the best found is "
            f"{best.name} (accuracy {best.accuracy:.4f}, {best.accuracy_drop_points:.2f} points below)",
        )
    fastest = max(ok, key=lambda c: (c.throughput or 0.0, c.accuracy))
    close = [c for c in ok if c is not fastest and timing is not None and timing.within_noise(c.name, fastest.name)]
    tied, told = [fastest, *close], []
    if duel is not None and close:
        rounds = len(timing.rates[timing.base])  # as sure as every one of the rounds
        contenders = tied
        for c in close:
            if duel(c.name, fastest.name).surely_faster(c.name, fastest.name, rounds):
                fastest = c
        tied = [fastest]
        for c in contenders:
            if c is not fastest:
                d = duel(fastest.name, c.name)
                if d.surely_faster(fastest.name, c.name, rounds):
                    told.append(_told(d, fastest.name, c.name))
                else:
                    tied.append(c)
    chosen = min(tied, key=lambda c: (-c.accuracy, c.size_bytes or 0))
    noise = "".join(f"; {line}" for line in told)
    if len(tied) > 1:
        others = ", ".join(c.name for c in tied if c is not chosen)
        noise += f"; within timing noise of {others}: the most accurate is chosen (then the smallest)"
    ratio = f" ({chosen.throughput_ratio:.2f}x FP32 [{chosen.throughput_ratio_range[0]:.2f}-{chosen.throughput_ratio_range[1]:.2f}])" \
        if chosen.throughput_ratio_range else ""
    return Selection(
        chosen, best, len(ok),
        f"selected {chosen.name}: {chosen.throughput:.0f} sent/s{ratio}, accuracy {chosen.accuracy:.4f} "
        f"(drop {chosen.accuracy_drop_points:+.2f} pts vs FP32; {len(ok)}/{len(evaluated)} candidates within {max_accuracy_drop:g}){noise}",
        tuple(c.name for c in tied if c is not chosen),
    )


def _told(d, a: str, b: str) -> str:
    return f"{a} is {d.ratio(a, b)[0]:.2f}x {b} timed alone {d.spread(a, b)}"


def write_table(out_dir: Path, cands: Sequence[Candidate], selection: Selection, baseline_value: float | None,
                max_accuracy_drop: float, metric: str = "accuracy", *, screen=None, skipped: Sequence = ()) -> None:
    """candidates.json and candidates.md; ``baseline_value`` is finetune-check's ``metric`` (its label: entity F1...).
    ``screen`` (``screen.Screen``) and ``skipped`` (``screen.Skipped``): the speed-first screen's figures and the
    candidates it left unbuilt, each with why."""
    out_dir = Path(out_dir)
    fp32 = next((c for c in cands if c.name == "fp32"), None)
    payload = {
        "baseline_accuracy": baseline_value,
        "max_accuracy_drop_points": max_accuracy_drop,
        "selected": selection.selected.name if selection.selected else None,
        "message": selection.message,
        "candidates": [_relative(c.row(), out_dir) for c in cands],
        "screen": screen.as_dict() if screen is not None else None,
        "skipped": [s.row() for s in skipped],
    }
    (out_dir / "candidates.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False), encoding="utf-8")
    base_tp = fp32.throughput if fp32 and fp32.throughput else None
    base_size = fp32.size_bytes if fp32 and fp32.size_bytes else None
    runtimes = sorted({c.runtime for c in cands})
    lines = [
        "# Compression candidates",
        "",
        f"FP32 baseline (finetune-check): {metric} {baseline_value if baseline_value is not None else float('nan'):.4f}; budget: "
        f"at most {max_accuracy_drop:g} points below.  {'; '.join(_where(r) for r in runtimes)}.  Throughput: median "
        "of interleaved rounds, dev lengths; x FP32 gives the median and [min-max] of the per-round ratios.",
        "",
        f"| candidate | runtime | width | depth | quant | emb int8 | {metric} | drop (pts) | sent/s | x FP32 | size MiB | x smaller | within budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cands:
        within = c.within(max_accuracy_drop)
        mark = " **selected**" if selection.selected is c else ""
        ratio = _f(c.throughput_ratio if c.throughput_ratio is not None else (c.throughput / base_tp if base_tp and c.throughput else None), 2)
        if c.throughput_ratio_range:
            ratio += f" [{c.throughput_ratio_range[0]:.2f}-{c.throughput_ratio_range[1]:.2f}]"
        lines.append(
            f"| {c.name}{mark} | {c.runtime} | {c.width_mult:.3g} | {c.depth_mult:.3g} | {c.quantization} | {'yes' if c.embeddings_int8 else 'no'} | "
            f"{_f(c.accuracy, 4)} | {_f(c.accuracy_drop_points, 2)} | {_f(c.throughput, 0)} | {ratio} | "
            f"{_f(c.size_bytes / 2**20 if c.size_bytes else None, 1)} | "
            f"{_f(base_size / c.size_bytes if base_size and c.size_bytes else None, 2)} | {'yes' if within else 'no'} |"
        )
    lines += ["", selection.message, ""]
    if screen is not None:
        lines += _screen_lines(screen, skipped)
    (out_dir / "candidates.md").write_text("\n".join(lines), encoding="utf-8")


def _screen_lines(screen, skipped: Sequence) -> list[str]:
    """candidates.md's speed-first section: every architecture's screened speed, and what was not built, and why."""
    why = {s.name: s.reason for s in skipped}
    lines = ["## Speed first", "",
             "Every candidate's architecture (untrained; each engine's all-INT8 form) timed on this CPU before any was "
             "built, in interleaved rounds; built fastest first, and a candidate that one built within the budget beat "
             "in every round was not built (compress.screen: false builds all).", "",
             "| candidate | screened sent/s | x FP32 | built |", "|---|---|---|---|"]
    for name, row in screen.as_dict().items():
        med, lo, hi = row["x_fp32"]
        lines.append(f"| {name} | {row['sent_per_s']:.0f} | {med:.2f} [{lo:.2f}-{hi:.2f}] | "
                     f"{'no: ' + why[name] if name in why else 'yes'} |")
    return lines + [""]


def selected_candidate(c: Candidate) -> "SelectedCandidate":
    """The hand-off to export (``selected.json``)."""
    from pipeline.handoffs import SelectedCandidate

    return SelectedCandidate(c.name, c.width_mult, c.quantization, c.embeddings_int8, c.accuracy, c.accuracy_drop_points,
                             c.throughput, c.size_bytes, c.settings, c.runtime, c.depth_mult)


def _relative(row: dict, root: Path) -> dict:
    for key in ("infer_dir", "source_model_dir", "model_path", "source_onnx"):
        if row.get(key):
            try:
                row[key] = str(Path(row[key]).relative_to(root))
            except ValueError:
                pass
    return row


def _f(v, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
