"""Builds and evaluates every compression candidate of a strategy: the one code path behind the
``compress`` stage and the Python API (``pipeline.compress.api``).

Order (pruning always before quantization):
  1. FP32 baseline as a static model (exported from the dygraph model, or the given static model);
  2. ``dynabert``: one physically pruned model per architecture, width x depth (``architecture``; the unpruned
     one is the baseline itself);
  3. ``compress.candidate_format: onnx`` (the CPU bundle's runtime): every architecture as FP32 ONNX and, with
     ``ptq``, each engine's INT8 form from its recipe search (``pipeline.compress.onnx_candidates``).  Speed
     first: every one's architecture is timed before any is built (``pipeline.compress.screen``), they are built
     fastest first, and those a faster candidate within the budget beats in every round of the screen (or as surely
     in a duel of the two) are never built (nor their architecture distilled, when none of its candidates can win).
     ``paddle``: ``ptq``: every grid point for every architecture;  ``qat``: one QAT model per architecture;
     ``embeddings``: an int8-embedding variant of every candidate so far.
  4. Every candidate built timed in interleaved rounds (``candidates.time_candidates``).
Unpruned models are quantized too when pruning is on (``quantize_unpruned``, default true): if pruning
costs too much accuracy, the unpruned int8 model can still pass the budget.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Sequence

from pipeline.backends.forms import MODEL_FILE, check_static_dir
from pipeline.backends.paddle.convert import copy_static, export_static, program_input_dtype
from pipeline.backends.paddle.quantize.embeddings import quantize_embeddings
from pipeline.backends.paddle.quantize.ptq import PTQSettings, calibration_examples, check_calibration, ptq_grid, quantize_static
from pipeline.compress.architecture import UNPRUNED, Architecture
from pipeline.compress.arguments import CompressConfig
from pipeline.compress.candidates import Candidate, evaluate, time_candidates
from pipeline.errors import ConfigError
from pipeline.kinds.base import FeatureSet
from pipeline.modeling import load_classifier
from pipeline.tokenizer import Tokenizer


def untimed(name: str, *args, **kwargs) -> ContextManager[None]:
    """The ``phase`` of a caller that keeps no phase times (the Python API, scripts)."""
    return nullcontext()


@dataclass(frozen=True)
class CompressInputs:
    model_dir: Path | None  # FP32 dygraph PaddleNLP classifier dir (None: compress static_model_dir)
    static_model_dir: Path | None  # --input_infer_model_path
    tokenizer: Tokenizer
    train: FeatureSet  # features of the training split (calibration, pruning/QAT training)
    dev: FeatureSet  # features of the dev split (every candidate is scored on it; nothing is tuned on it)
    heldout: FeatureSet  # held-out training rows: DynaBERT's importance and best-epoch choice
    num_labels: int
    max_seq_len: int
    baseline_accuracy: float | None  # None: the FP32 static model's own dev accuracy is the baseline
    # Where pruned models are kept across runs, with what identifies the model and data they came from (the
    # stage passes the finetune record's output hash and the data fingerprint).  None: under work_dir only.
    pruned_cache: Path | None = None
    source_key: str = ""


@dataclass(frozen=True)
class Built:
    """What ``build_and_evaluate`` made: the candidates (scored and timed), their interleaved rounds, and on the ONNX
    route the speed-first screen and the candidates it skipped."""

    candidates: list[Candidate]
    timing: object  # evaluation.Interleaved
    screen: object | None = None  # screen.Screen
    skipped: list = field(default_factory=list)  # screen.Skipped
    evaluations: dict = field(default_factory=dict)  # candidate name -> its full-dev Evaluation (not with accuracy_fn)
    duel: Callable | None = field(default=None, compare=False, repr=False)  # two candidates alone (evaluation.duels)


@dataclass(frozen=True)
class Source:
    arch: Architecture
    model_dir: Path | None  # dygraph FP32 dir (None for a static input)
    infer_dir: Path  # its FP32 static model
    prefix: str  # "" unpruned, "w0.75-" for pruned
    # its last layer computes the first token only (``ernie_models.first_token_only``): what the ONNX route's candidates
    # are made from; the FP32 baseline never is
    first_token_only: bool = False

    @property
    def width(self) -> float:
        return self.arch.width


def _pruned_dir(cfg: CompressConfig, inp: CompressInputs, arch: Architecture, default: Path) -> Path:
    """A pruned model is the product of minutes of distillation: keyed by everything that decides it, so
    adding an architecture, or changing a gate, retrains none of those already made."""
    if inp.pruned_cache is None:
        return default
    import hashlib
    import json

    depth = {"depth": arch.depth} if arch.depth < 1.0 else {}  # a full-depth key is what it was before depths existed
    s = distillation_schedule(cfg)
    # every field of the schedule (a new one cannot be left out), the plateau as a tuple: the keys of before
    schedule = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
    schedule["plateau"] = dataclasses.astuple(s.plateau) if s.plateau else None
    key = {"source": inp.source_key, "width": arch.width, **depth, **schedule,
           "max_seq_len": inp.max_seq_len, "train": len(inp.train), "heldout": len(inp.heldout)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return inp.pruned_cache / f"{arch.name}-{digest}"


def distillation_schedule(cfg: CompressConfig):
    """DynaBERT's distillation schedule (``dynabert.Schedule``) from compress's training settings; its stopping rule
    (``training.Plateau``) from compress.distill_*, none (the whole budget) when distill_patience is 0."""
    from pipeline.compress.dynabert import Schedule
    from pipeline.training import Plateau

    plateau = (Plateau(cfg.distill_eval_steps, cfg.distill_patience, cfg.distill_min_gain / 100.0)
               if cfg.distill_patience else None)
    return Schedule(cfg.num_train_epochs, cfg.learning_rate, cfg.per_device_train_batch_size, cfg.max_steps, cfg.seed,
                    plateau)


def preflight(cfg: CompressConfig, *, train_size: int, static_model_dir: Path | None) -> list[PTQSettings]:
    """Every check that can fail on bad input, before any long work; returns the PTQ grid."""
    parts = cfg.parts()
    cfg.architectures()
    grid = ptq_grid(cfg) if "ptq" in parts else []
    if grid:
        check_calibration(train_size, grid, source="training split")
    if static_model_dir is not None:
        check_static_dir(static_model_dir)
        if "dynabert" in parts or "qat" in parts:
            raise ConfigError("compress.input_infer_model_path: dynabert and qat need the dygraph model; use ptq and/or embeddings")
    return grid


def build_and_evaluate(
    cfg: CompressConfig,
    inp: CompressInputs,
    out_dir: Path,
    work_dir: Path,
    *,
    log: Callable[[str], None] = print,
    accuracy_fn: Callable | None = None,
    searches: Sequence = (),
    opset: int = 13,
    phase: Callable[[str], ContextManager] | None = None,
    max_accuracy_drop: float | None = None,
    min_throughput_ratio: float | None = None,
) -> Built:
    """Create every candidate under ``out_dir/candidates/<name>/``, evaluate each as it is made, then time
    them all in interleaved rounds.

    ``work_dir`` keeps the expensive trained models (pruned, QAT) so an interrupted run reuses them.
    ``searches``: each CPU engine's INT8 recipe search (``onnx_candidates.EngineSearch``), for ``compress.candidate_format:
    onnx`` with ``ptq``.  ``phase(name)``: a context manager charged with the time of each phase
    (``StageContext.phase``: screen, conversion, importance, distillation, search, scoring, timing; Paddle's
    quantization, qat).  ``max_accuracy_drop``: the budget the screen skips by (``compress.screen``; None: no skipping);
    ``min_throughput_ratio``: the speed gate the screen says, at once, that no candidate can meet.
    """
    parts = cfg.parts()
    grid = preflight(cfg, train_size=len(inp.train), static_model_dir=inp.static_model_dir)
    phase = phase or untimed
    b = _Candidates(cfg, inp, Path(out_dir), Path(work_dir), log, accuracy_fn, phase)
    sources = [b.baseline()]  # 1. the FP32 baseline
    if cfg.onnx_route:  # 2. and 3., speed first: widths distilled only where a candidate can win
        return _onnx_route(b, sources[0], searches if "ptq" in parts else (), opset, max_accuracy_drop, min_throughput_ratio)
    if "dynabert" in parts:  # 2. DynaBERT pruning
        sources += [b.pruned(a) for a in cfg.architectures() if a.pruned]
    # 3. Paddle quantization: the PTQ grid, QAT, then int8 word embeddings on top of every candidate
    if "dynabert" in parts and not cfg.quantize_unpruned and len(sources) > 1:
        sources = sources[1:]
    if grid:
        b.ptq(sources, grid)
    if "qat" in parts:
        b.qat(sources)
    if "embeddings" in parts:
        b.int8_embeddings()
    cands, timing, duel = b.timed()
    return Built(cands, timing, evaluations=b.evaluations, duel=duel)


def _onnx_route(b: "_Candidates", baseline: Source, searches: Sequence, opset: int, budget: float | None,
                min_ratio: float | None) -> Built:
    """Every architecture's FP32 ONNX and each engine's INT8 form of it, built fastest first where the screen ran; a
    candidate a built one within ``budget`` surely beats (every screened round, or a duel) is skipped (``screen.Screen.cannot_win``)."""
    from pipeline.compress import onnx_candidates as oc
    from pipeline.compress.screen import Skipped, narrowed_onnx, screen

    cfg, inp = b.cfg, b.inp
    archs = cfg.architectures()
    planned = oc.plan(archs, searches, cfg.quantize_unpruned or len(archs) == 1)
    sources: dict[Architecture, Source] = {}

    def source(a: Architecture) -> Source:  # made on first use: a pruned one is distilled then
        if a not in sources:
            sources[a] = b.pruned(a) if a.pruned else b.first_token(baseline)
        return sources[a]

    builder = oc.OnnxBuilder(source, b.out_dir, baseline=baseline, opset=opset, log=b.log, phase=b.phase)
    screened = None
    if cfg.screen and budget is not None and any(p.search is not None and p.search.speed is not None for p in planned):
        with b.phase("screen", f"timing the {len(planned)} candidates' architectures before building any"):
            work = b.work_dir / "screen"
            screened = screen(
                [p for p in planned if p.search is None or p.search.speed is not None],
                lambda a: narrowed_onnx(inp.model_dir, inp.num_labels, a, work, b.input_dtype, opset,
                                        lambda: builder.fp32(UNPRUNED)),
                inp.dev, work, batch_size=cfg.throughput_batch_size, batches=cfg.throughput_batches,
                rounds=cfg.timing_rounds, log=b.log, baseline=builder.baseline_fp32)
        short = screened.short_of(min_ratio) if min_ratio else None
        if short:
            b.log(f"[compress] WARNING: {short}")
    qualifying, skipped = [], []
    for p in screened.order(planned) if screened is not None else planned:
        reason = None
        if screened is not None:
            with b.phase("screen"):  # a duel, where the screen's rounds could not tell two apart
                reason = screened.cannot_win(p.name, qualifying)
        if reason:
            b.log(f"[compress] {p.name}: not built: {reason}")
            skipped.append(Skipped(p.name, p.arch, p.runtime, p.quantization, reason))
            continue
        c = builder.build(p)
        b.add(c, None)  # build_seconds set where it was built
        if budget is not None and c.within(budget):
            qualifying.append(c.name)
    if screened is not None:
        screened = dataclasses.replace(screened, duel=None)  # closes the screen's sessions
    b.cands.sort(key=lambda c: [x.name for x in planned].index(c.name))  # the table in plan order
    cands, timing, duel = b.timed()
    return Built(cands, timing, screened, skipped, b.evaluations, duel)


class _Candidates:
    """The candidates made so far, each evaluated on the full dev set as it is added (the first is the FP32
    baseline, unless the caller gave its accuracy)."""

    def __init__(self, cfg: CompressConfig, inp: CompressInputs, out_dir: Path, work_dir: Path, log, accuracy_fn,
                 phase: Callable[[str], ContextManager] | None = None):
        self.cfg, self.inp, self.out_dir, self.work_dir, self.log, self.accuracy_fn = cfg, inp, out_dir, work_dir, log, accuracy_fn
        self.phase = phase or untimed
        self.cands: list[Candidate] = []
        self.evaluations: dict = {}  # name -> Evaluation
        self.baseline_accuracy = inp.baseline_accuracy
        self.input_dtype = cfg.input_dtype

    def add(self, c: Candidate, started: float | None) -> None:
        if started is not None:
            c.build_seconds = round(time.monotonic() - started, 2)
        if self.cfg.onnx_route and c.is_program:  # only a source here: its ONNX forms are the candidates
            return
        with self.phase("scoring"):
            ev = evaluate(c, self.inp.dev, baseline_accuracy=self.baseline_accuracy if self.baseline_accuracy is not None else float("nan"),
                          eval_batch_size=self.cfg.eval_batch_size, log=self.log, accuracy_fn=self.accuracy_fn)
        if ev is not None:
            self.evaluations[c.name] = ev
        if self.baseline_accuracy is None:  # the first candidate is the FP32 baseline
            self.baseline_accuracy, c.accuracy_drop_points = c.accuracy, 0.0
        self.cands.append(c)

    def timed(self) -> tuple[list[Candidate], object, Callable]:
        cfg = self.cfg
        self.log(f"[compress] timing {len(self.cands)} candidates in {cfg.timing_rounds} interleaved rounds "
                 f"({cfg.throughput_batches} batches of {cfg.throughput_batch_size} each)")
        with self.phase("timing"):
            timing, duel = time_candidates(self.cands, self.inp.dev, batch_size=cfg.throughput_batch_size,
                                           batches=cfg.throughput_batches, rounds=cfg.timing_rounds, log=self.log)
        return self.cands, timing, duel

    def baseline(self) -> Source:
        """The FP32 baseline as a static program: exported from the dygraph model, or the given static model."""
        inp, t0 = self.inp, time.monotonic()
        fp32_dir = self.out_dir / "candidates" / "fp32" / "infer"
        with self.phase("conversion"):
            if inp.static_model_dir is not None:
                copy_static(inp.static_model_dir, fp32_dir)
                self.input_dtype = program_input_dtype(fp32_dir)
            else:
                export_static(load_classifier(inp.model_dir, inp.num_labels), fp32_dir, self.cfg.input_dtype)
        self.add(Candidate("fp32", 1.0, "none", False, fp32_dir, inp.model_dir, {"input_dtype": self.input_dtype}), t0)
        return Source(UNPRUNED, inp.model_dir, fp32_dir, "")

    def first_token(self, baseline: Source) -> Source:
        """The unpruned network the ONNX route's candidates are made from: the baseline with its last layer computing
        the first token only where the head reads nothing else (``ernie_models.first_token_only``); the baseline itself
        for a static input or a token-level head.  The baseline stays the stock network: every ratio, and validate's
        anchor, count from what a plain export gives."""
        from pipeline.compress.onnx_candidates import FIRST_TOKEN_DIR
        from pipeline.ernie_models import first_token_only

        if self.inp.model_dir is None:
            return baseline
        model = load_classifier(self.inp.model_dir, self.inp.num_labels)
        if not first_token_only(model):
            return baseline
        with self.phase("conversion"):
            infer = export_static(model, self.out_dir / "candidates" / UNPRUNED.name / FIRST_TOKEN_DIR / "infer",
                                  self.input_dtype)
        return dataclasses.replace(baseline, infer_dir=infer, first_token_only=True)

    @functools.cached_property
    def importance(self):
        """The unpruned model's head/neuron importance (``dynabert.importance_once``), shared by every architecture
        distilled in this run; computed when the first one needs it."""
        from pipeline.compress.dynabert import importance_once

        return importance_once(self.inp.heldout)

    def pruned(self, arch: Architecture) -> Source:
        """The physically pruned model of ``arch`` (DynaBERT distillation; kept in the run cache by what made it)."""
        from pipeline.compress.dynabert import Resume, prune
        from pipeline.ernie_models import first_token_only

        cfg, inp = self.cfg, self.inp
        t0 = time.monotonic()
        name = arch.name
        pruned = _pruned_dir(cfg, inp, arch, self.work_dir / "dynabert" / name)
        # an interrupted distillation goes on from its checkpoint, kept under the same key as the model it makes
        resume = Resume(pruned.parent / f".{pruned.name}.checkpoint", cfg.distill_eval_steps)
        if not (pruned / "model_state.pdparams").is_file():  # reuse a finished one after an interruption
            tmp = pruned.parent / f".{pruned.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            prune(inp.model_dir, arch, inp.train, inp.heldout, distillation_schedule(cfg), out_dir=tmp, log=self.log,
                  phase=self.phase, resume=resume, importance=self.importance)
            shutil.rmtree(pruned, ignore_errors=True)
            tmp.rename(pruned)
        else:
            self.log(f"[compress] dynabert {name}: reusing {pruned}")
        shutil.rmtree(resume.root, ignore_errors=True)  # also one a kill left between the model's rename and here
        model_dir = self.out_dir / "candidates" / name / "model"
        with self.phase("conversion"):
            shutil.copytree(pruned, model_dir)
            student = load_classifier(model_dir, inp.num_labels)
            trimmed = self.cfg.onnx_route and first_token_only(student)  # Paddle's quantizers take the stock network
            infer = export_static(student, self.out_dir / "candidates" / name / "infer", self.input_dtype)
        self.add(Candidate(name, arch.width, "none", False, infer, model_dir,
                           {"width_mult": arch.width, "depth_mult": arch.depth, "input_dtype": self.input_dtype},
                           depth_mult=arch.depth), t0)
        return Source(arch, model_dir, infer, name + "-", trimmed)

    def ptq(self, sources: list[Source], grid) -> None:
        """PaddleSlim post-training quantization: every grid point for every source."""
        calib = calibration_examples(self.inp.train, max(s.calibration_examples for s in grid), self.cfg.seed)
        for src in sources:
            for s in grid:
                t0 = time.monotonic()
                name = src.prefix + s.name
                with self.phase("quantization"):
                    infer = quantize_static(src.infer_dir, self.out_dir / "candidates" / name / "infer", calib, s,
                                            input_dtype=self.input_dtype, log=self.log)
                self.add(Candidate(name, src.width, "ptq", False, infer, src.model_dir,
                                   {**s.to_dict(), "width_mult": src.width, "input_dtype": self.input_dtype},
                                   depth_mult=src.arch.depth), t0)

    def qat(self, sources: list[Source]) -> None:
        """One quantization-aware-trained program per source (kept in work/: an interrupted run reuses it)."""
        from pipeline.backends.paddle.quantize.qat import quant_aware_train

        cfg, inp = self.cfg, self.inp
        for src in sources:
            t0 = time.monotonic()
            name = src.prefix + "qat"
            trained = self.work_dir / "qat" / name
            settings = {
                "use_pact": cfg.use_pact, "moving_rate": cfg.moving_rate, "weight_quantize_type": cfg.weight_quantize_type,
                "activation_quantize_type": cfg.qat_activation_type(), "epochs": cfg.num_train_epochs,
                "learning_rate": cfg.learning_rate, "batch_size": cfg.per_device_train_batch_size, "max_steps": cfg.max_steps,
                "seed": cfg.seed, "warmup_ratio": cfg.warmup_ratio, "weight_decay": cfg.weight_decay,
            }
            if not (trained / MODEL_FILE).is_file():
                tmp = self.work_dir / "qat" / f".{name}.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                with self.phase("qat"):
                    quant_aware_train(src.model_dir, inp.train, inp.dev, max_seq_len=inp.max_seq_len, out_dir=tmp,
                                      input_dtype=self.input_dtype, log=self.log, **settings)
                shutil.rmtree(trained, ignore_errors=True)
                tmp.rename(trained)
            else:
                self.log(f"[compress] qat {name}: reusing {trained}")
            infer = copy_static(trained, self.out_dir / "candidates" / name / "infer")
            self.add(Candidate(name, src.width, "qat", False, infer, src.model_dir,
                               {**settings, "width_mult": src.width, "input_dtype": self.input_dtype},
                               depth_mult=src.arch.depth), t0)

    def int8_embeddings(self) -> None:
        """An int8-embedding variant of every candidate so far."""
        for base in list(self.cands):
            t0 = time.monotonic()
            name = base.name + "+emb"
            infer = self.out_dir / "candidates" / name / "infer"
            with self.phase("quantization"):
                info = quantize_embeddings(base.infer_dir, infer, log=self.log)
            settings = {**base.settings, "embeddings": {"table": info.table, "fp32_bytes": info.fp32_bytes,
                                                        "int8_bytes": info.int8_bytes, "max_abs_error": info.max_abs_error}}
            self.add(Candidate(name, base.width_mult, base.quantization, True, infer, base.source_model_dir, settings,
                               depth_mult=base.depth_mult), t0)
