"""Stage ``validate``: parity against the FP32 dygraph reference, benchmarks per backend, gates.

What ships is checked: the form the bundle ships, the FP32 it is compared with (its ratio base) and the anchor (ORT's
``quantize_dynamic(per_channel=True)`` of the same FP32 ONNX, ``gates.min_anchor_ratio``) each run the full dev set
(accuracy, argmax agreement, logit differences vs finetune-check's ``dev_logits.npy``; a form whose bytes compress
already scored on the full dev set in the same batches reads compress's outputs, once its session gives them again on
a batch: ``pipeline.dev_outputs``); the shipped form and its FP32
run the benchmark grid, and they and the anchor are timed on dev lengths in the same interleaved rounds, so throughput
is also a ratio.  Every gate reads only these.  ``validate.backends: all`` (or a list of names) measures the other
runtimes of ``pipeline.backends.registry`` that can run here too (GPU ones whenever a GPU with their libraries is
present); the report names those not checked and how to ask for them.  The shipped form is known before anything is
measured (``registry.selected_form``: compress's selection, on every route and device): validate verifies, it never
selects.  Runtimes that cannot run here are recorded ``skipped: <reason>``.  Writes gates.json, metrics.json,
report.md, accuracy_vs_throughput.png, changed.jsonl (the answers compression changed) and example_scores.json (what
each dev example adds to the shipped form's metric: ``make gate`` pairs it with the previous release's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipeline.stage import Stage
from pipeline.config import TaskConfig

METRICS_FILE = "metrics.json"  # pipeline.handoffs.Validation reads it
ANCHOR = "anchor"  # ORT quantize_dynamic(per_channel=True) of the FP32 ONNX: timed beside the CPU engines


def params(cfg: TaskConfig) -> dict:
    from pipeline.contract import cpu_key

    v, g = cfg.validate, cfg.gates
    return {"validate": {k: getattr(v, k) for k in v.__dataclass_fields__},
            "cpu": cpu_key(),  # its ratios, and INT8 outputs without VNNI, are this CPU's
            "gates": {"max_accuracy_drop": g.max_accuracy_drop, "min_throughput_ratio": g.min_throughput_ratio,
                      "max_p99_latency_ms": g.max_p99_latency_ms, "min_anchor_ratio": g.min_anchor_ratio},
            "max_seq_len": cfg.max_seq_len,
            # the backend is chosen among those on the bundle's device (named only for GPU: CPU keys stay as they were)
            **({"package_device": cfg.package.device} if cfg.package.device != "CPU" else {})}


def inputs(cfg: TaskConfig) -> dict[str, str]:
    from pipeline.data import data_hashes

    return data_hashes(cfg)


def check(cfg: TaskConfig) -> None:
    """Before the first stage runs: a GPU bundle's form is verified on a GPU (``registry.selected_form``), so a
    machine where the GPU forms the selection can name do not run is refused now, not after compress."""
    from pipeline.backends.registry import gpu_forms
    from pipeline.errors import ConfigError

    if cfg.package.device != "GPU" or cfg.validate.chosen_backend != "auto":
        return
    missing = {f.name: why for f in gpu_forms() if (why := f.available())}
    if missing:
        raise ConfigError("package.device: GPU: validate verifies the bundle's GPU form on a GPU, and here "
                          + "; ".join(f"{name} cannot run ({why})" for name, why in missing.items())
                          + ": run on the GPU machine, or name the form to verify with validate.chosen_backend")


def backend_to_verify(rows: list, requested: str, selected: dict | None = None, device: str = "cpu") -> tuple[str, str]:
    """(backend, why): the backend validate verifies on dev and gates.  ``validate.chosen_backend`` when set; else the
    form that ships compress's selected candidate on the bundle's device (``registry.selected_form``).  It never picks
    another: a close call between engines was decided once, by compress, and a form over the budget fails its gate."""
    from pipeline.backends.registry import selection_rule
    from pipeline.errors import ConfigError, PipelineError

    by_name = {r.backend: r for r in rows}
    if requested != "auto":
        if requested not in by_name:
            raise ConfigError(f"validate.chosen_backend {requested!r} was not measured; measured: {', '.join(by_name)}")
        return requested, "validate.chosen_backend"
    form = _shipped_form(selected, device)
    if form.name not in by_name:
        raise PipelineError(f"compress selected {selected.get('name')!r} ({form.name}), which validate could not "
                            f"measure here; measured: {', '.join(by_name) or 'nothing'}")
    rule = selection_rule(selected, device)
    return form.name, f"compress selected {selected.get('name')!r}" + (f" ({rule})" if rule else "")


def _shipped_form(selected: dict | None, device: str):
    from pipeline.backends.registry import selected_form
    from pipeline.errors import PipelineError

    form = selected_form(selected or {}, device)
    if form is None:
        raise PipelineError(f"the export names no selected candidate that a {device} form ships "
                            f"(meta.json selected_candidate: {selected or 'none'}); re-run compress and export")
    return form


ASK_OTHERS = "validate.backends: all (or a list of backend names) measures the others"


@dataclass(frozen=True)
class Checked:
    """Which backends this run measured, and why (metrics.json and gates.json ``summary.checked``, report.md)."""

    setting: object  # validate.backends as configured: "shipped", "all" or a list of names
    measured: list[str]  # in the registry's order; the anchor is always measured besides them
    shipped: str  # the form validate verifies
    fp32: str | None  # the FP32 it is compared with (its ratio base)
    not_checked: dict[str, str]  # runtimes that could run here and were not measured -> why
    why: str

    def as_dict(self) -> dict:
        return {"setting": self.setting, "measured": list(self.measured), "anchor": True, "shipped": self.shipped,
                "fp32": self.fp32, "not_checked": dict(self.not_checked), "why": self.why,
                **({"ask": ASK_OTHERS} if self.not_checked else {})}

    def line(self) -> str:
        out = f"measuring {', '.join(self.measured) or 'no backend'} and the anchor ({self.why})"
        if self.not_checked:
            out += f"; not checked: {', '.join(self.not_checked)} ({ASK_OTHERS})"
        return out


def _fp32_base(rt, runtimes: list):
    """The runtime ``rt``'s throughput ratio is taken to (before measuring, and in ``_fill_ratios``): its
    ``ratio_base``, else the FP32 of its runtime on its device, else on the CPU; None when none of ``runtimes`` is."""
    named = {r.name: r for r in runtimes}
    if rt.ratio_base:
        return named.get(rt.ratio_base)
    fp32 = {(r.runtime, r.device): r for r in runtimes if r.precision == "fp32"}
    return fp32.get((rt.runtime, rt.device)) or fp32.get((rt.runtime, "cpu"))


def checked_backends(cfg: TaskConfig, runtimes: list, skipped: dict[str, str], selected: dict | None) -> tuple[list, Checked]:
    """(the runtimes to measure, what that is).  ``validate.backends: shipped`` (the default): the form the bundle
    ships (``validate.chosen_backend``, else compress's selected candidate's form: ``registry.selected_form``) and its
    FP32 base; the anchor is measured beside them always.  A list adds the backends it names; ``all``: every runtime
    that can run here, and so does a ``package.runtime``/``package.precision`` other than auto (the package stage then
    picks the form it ships among those validate measured).  A shipped form that cannot run here is an error now,
    before anything is measured."""
    from pipeline.errors import ConfigError, PipelineError
    from pipeline.validation.config import BACKENDS_ALL

    vcfg, pcfg = cfg.validate, cfg.package
    setting, names = vcfg.backends, [rt.name for rt in runtimes]
    device = pcfg.runtime_device
    shipped = vcfg.chosen_backend if vcfg.chosen_backend != "auto" else _shipped_form(selected, device).name
    if shipped not in names:
        why_not = skipped.get(shipped, "its form is not in this export")
        if vcfg.chosen_backend != "auto":
            raise ConfigError(f"validate.chosen_backend {shipped!r} cannot be measured here ({why_not}); "
                              f"measurable: {', '.join(names) or 'nothing'}")
        raise PipelineError(f"compress selected {(selected or {}).get('name')!r} ({shipped}), which validate could not "
                            f"measure here ({why_not}); measurable: {', '.join(names) or 'nothing'}")
    every = None
    if setting == BACKENDS_ALL:
        every = "validate.backends: all"
    elif pcfg.runtime != "auto" or pcfg.precision != "auto":
        every = (f"package.runtime {pcfg.runtime} / package.precision {pcfg.precision} pick the form the bundle ships "
                 "among those validate measured, so every backend is measured")
    base = _fp32_base(next(rt for rt in runtimes if rt.name == shipped), runtimes)
    if every is not None:
        return list(runtimes), Checked(setting, names, shipped, base.name if base else None, {}, every)
    wanted = {shipped, *([base.name] if base else []), *(setting if isinstance(setting, list) else [])}
    why = (f"validate.backends: {setting}: the form that ships ({shipped}) and the FP32 it is compared with "
           f"({base.name if base else 'none runs here'})" if not isinstance(setting, list) else
           f"validate.backends: the form that ships ({shipped}), the FP32 it is compared with "
           f"({base.name if base else 'none runs here'}) and those named: {', '.join(setting)}")
    absent = [n for n in (setting if isinstance(setting, list) else []) if n not in names]
    if absent:
        why += "; named but not measurable here: " + ", ".join(f"{n} ({skipped.get(n, 'not in this export')})" for n in absent)
    measured = [rt for rt in runtimes if rt.name in wanted]
    reason = "not the shipped form or its FP32" + (", nor named in validate.backends" if isinstance(setting, list) else "")
    not_checked = {rt.name: reason for rt in runtimes if rt.name not in wanted}
    return measured, Checked(setting, [rt.name for rt in measured], shipped, base.name if base else None, not_checked, why)


@dataclass
class _Inputs:
    """What every step reads: the export, the dev set as the kind featurizes it, the FP32 reference outputs."""

    layout: object  # pipeline.contract.ExportLayout
    meta: object  # pipeline.handoffs.ExportManifest
    data: object
    kind: object
    tokenizer: object
    dev: object  # FeatureSet
    reference: object  # pipeline.validation.parity.Reference
    widths: list[int]  # validate.seq_lens the model can take (none past its max_position_embeddings)
    kept: dict  # pipeline.dev_outputs.form_key -> compress's kept dev outputs of the model with those bytes


def run(ctx):
    """Measure the shipped form, its FP32 and the anchor (ONNX Runtime's and OpenVINO's CPU forms and the anchor in
    the same interleaved rounds; every runtime that can run here with ``validate.backends: all``), verify the form
    compress selected, check the gates, write the reports."""
    from pipeline.backends.registry import RunOptions, plan
    from pipeline.records import StageResult
    from pipeline.validation import gates as G
    from pipeline.validation.changes import CHANGES_FILE, answer_changes
    from pipeline.validation.release import SCORES_FILE, ExampleScores
    from pipeline.validation.uncertainty import dev_uncertainty

    cfg = ctx.cfg
    with ctx.phase("inputs"):
        inp = _read_inputs(ctx)
    runnable, skipped = plan(inp.layout.root)  # every runtime that can run here; the rest skipped with why
    runtimes, checked = checked_backends(cfg, runnable, skipped, inp.meta.selected_candidate)
    ctx.log(f"[validate] {checked.line()}")
    opts = RunOptions(cfg.validate.threads or None, inp.dev.lengths(), cfg.max_seq_len, cfg.engine_settings)
    make = {rt.name: (lambda rt=rt: rt.session(rt.artifact(inp.layout.root), opts)) for rt in runtimes}
    paired, anchor_ev = _time_cpu_engines(ctx, inp, runtimes, make)
    measured = [_measure(ctx, inp, rt, make[rt.name], paired) for rt in runtimes]
    rows = [row for row, _, _ in measured]
    benches = {row.backend: bench for row, bench, _ in measured}
    answers = {row.backend: predictions for row, _, predictions in measured}  # per dev example, as parity compared them
    with ctx.phase("gates"):
        _fill_ratios(rows, benches, paired)
        chosen, why = backend_to_verify(rows, cfg.validate.chosen_backend, inp.meta.selected_candidate,
                                        cfg.package.runtime_device)
        ctx.log(f"[validate] verifying {chosen}: {why}")
        crow = next(r for r in rows if r.backend == chosen)
        changes = answer_changes(inp.kind, inp.dev.examples, inp.data.labels, inp.reference.predictions, answers[chosen])
        changes.write(ctx.out_dir / CHANGES_FILE)
        ctx.log(f"[validate] {chosen}: {changes.line()}")
        sure = dev_uncertainty(inp.kind, inp.dev.examples, inp.reference.predictions, answers[chosen],
                               inp.dev.predictions(anchor_ev.outputs))
        ctx.log(f"[validate] {chosen}: {sure.line(inp.kind.metric_label)}; "
                f"{sure.verdict(cfg.gates.max_accuracy_drop)}")
        ExampleScores.of(inp.kind, cfg.task, chosen, inp.dev.examples, answers[chosen]).write(ctx.out_dir / SCORES_FILE)
        gate_list = _gates(cfg, crow, inp.reference.score.value, checked.fp32, sure)
        summary = {**_summary(cfg, inp, crow, paired, anchor_ev.score), "checked": checked.as_dict(),
                   "answers_changed": changes.summary(), "accuracy_interval": sure.as_dict(),
                   "dev_counts": _dev_counts(inp, answers[chosen])}
        levels = {who: inp.kind.level_scores(pred, inp.dev.examples, inp.data.labels)
                  for who, pred in (("shipped", answers[chosen]), ("fp32", inp.reference.predictions))}
        if levels["shipped"] is not None:  # a label hierarchy: each level of what ships beside FP32's
            summary["levels"] = levels
            ctx.log(f"[validate] {chosen}: " + ", ".join(
                f"level {d} micro-F1 {v['micro_f1']:.4f} (FP32 {levels['fp32']['per_level'][d]['micro_f1']:.4f})"
                for d, v in levels["shipped"]["per_level"].items()))
        report = G.GateReport(cfg.task, chosen, gate_list, summary)
        _write_reports(ctx, inp, report, rows, benches, skipped, why, checked)
    for name, reason in skipped.items():
        ctx.log(f"[validate] {name}: skipped: {reason}")
    metrics = {"chosen_backend": chosen, "chosen_by": why, "accuracy": crow.accuracy, "accuracy_drop_points": crow.accuracy_drop_points,
               "accuracy_drop_interval": [sure.drop_points.low, sure.drop_points.high],
               "throughput_ratio": crow.throughput_ratio, "sentences_per_s": crow.sentences_per_s,
               "gates_passed": report.passed, "skipped": {k: f"skipped: {v}" for k, v in skipped.items()},
               "backends_checked": checked.measured, "not_checked": list(checked.not_checked)}
    return StageResult(metrics=metrics, gate_error=G.failure_message(gate_list),
                       artifacts={"gates": G.GATES_FILE, "report": "report.md", "metrics": METRICS_FILE, "plot": "accuracy_vs_throughput.png",
                                  "answers_changed": CHANGES_FILE, "example_scores": SCORES_FILE},
                       message=f"{chosen}: {inp.kind.metric_label} {crow.accuracy:.4f} (drop {crow.accuracy_drop_points:+.2f} pts vs FP32, "
                               f"{sure.drop_points.level:.0%} {sure.drop_points.shown()}), {(crow.throughput_ratio or 0):.2f}x FP32")


def _dev_counts(inp: _Inputs, predictions) -> dict:
    """What the served model's counters (serving/triton/served_metrics.py) read on dev, for what ships: texts cut to
    max_seq_len and answers by label, where its kind counts them; traffic like dev's should move them in these shares."""
    counts = {"items": len(inp.dev.examples)}
    if inp.dev.truncated is not None:
        counts["truncated"] = int(inp.dev.truncated)
        counts["truncated_what"] = inp.kind.truncated_what
    answers = inp.kind.answer_counts(predictions, inp.data.labels)
    if answers is not None:
        counts["answers"] = answers
    return counts


def _read_inputs(ctx) -> _Inputs:
    from pipeline.contract import ExportLayout
    from pathlib import Path

    from pipeline.handoffs import Baseline, ExportManifest
    from pipeline.kinds import get_kind, load_task_data
    from pipeline.modeling import inspect_model
    from pipeline.tokenizer import Tokenizer
    from pipeline.validation.parity import load_reference, reference_for, reference_rows

    cfg = ctx.cfg
    layout = ExportLayout(ctx.artifact("export", "meta").parent)
    data, kind = load_task_data(cfg), get_kind(cfg)
    tokenizer = Tokenizer.from_model_dir(layout.tokenizer_dir, cfg.max_seq_len)
    dev = kind.featurize(tokenizer, data.dev.examples, cfg)
    reference = reference_for(load_reference(ctx.artifact("finetune-check", "dev_logits"), reference_rows(dev), len(data.labels)), dev)
    positions = inspect_model(Path(ctx.handoff("finetune-check", Baseline).model_dir), weights=False).max_position_embeddings
    widths = [s for s in cfg.validate.seq_lens if s <= positions]  # a wider input has no position embedding
    if len(widths) < len(cfg.validate.seq_lens):
        ctx.log(f"[validate] widths {[s for s in cfg.validate.seq_lens if s > positions]} of validate.seq_lens not "
                f"timed: the model embeds {positions} positions")
    return _Inputs(layout, ctx.handoff("export", ExportManifest), data, kind, tokenizer, dev, reference,
                   widths or [min(positions, cfg.max_seq_len)], _kept_outputs(ctx))


def _kept_outputs(ctx) -> dict:
    """compress's full-dev outputs of its FP32 baseline and selected candidate, by the hash of their model's bytes."""
    from pipeline import dev_outputs

    folder = ctx.optional_artifact("compress", "dev_outputs")
    files = sorted(folder.glob("*.npz")) if folder is not None and folder.is_dir() else []
    return {key: f for f in files if (key := dev_outputs.kept_form(f))}


def _time_cpu_engines(ctx, inp: _Inputs, runtimes, make):
    """The CPU engines' forms (``registry.CPU_ENGINES``) and the anchor (ORT's one-liner on the same FP32 ONNX,
    gates.min_anchor_ratio), timed on dev lengths in interleaved rounds: paired ratios, median and spread (one sample
    per backend decided selections before; the same form measured 0.95x and 1.31x in two runs).  Before any Paddle
    backend runs: its OpenMP threads slow ORT down (the registry lists ORT first).  Returns (rounds, the anchor's
    dev evaluation)."""
    from pipeline.backends.onnxruntime import quantize as ort_quantize, session as ort_session
    from pipeline.backends.registry import is_cpu_engine_form
    from pipeline.evaluation import evaluate_session, interleaved_throughput

    vcfg = ctx.cfg.validate
    timed = inp.dev.subset(range(min(vcfg.dev_benchmark_limit or len(inp.dev), len(inp.dev))))
    with ctx.phase("anchor", "anchor: ORT quantize_dynamic(per_channel=True) of the FP32 ONNX"):
        anchor = ort_session.session(ort_quantize.quantize_anchor(inp.layout.path("onnx_fp32"), ctx.work_dir / "anchor.onnx"),
                                     threads=vcfg.threads or None, ort_defaults=True)
        anchor.name = ANCHOR
        sessions = {rt.name: make[rt.name]() for rt in runtimes if is_cpu_engine_form(rt)}
    with ctx.phase("timing", f"timing {', '.join([*sessions, ANCHOR])} on {len(timed)} dev examples in {vcfg.repeats} "
                             f"interleaved rounds"):
        paired = interleaved_throughput({**sessions, ANCHOR: anchor}, timed, vcfg.throughput_batch_size, rounds=vcfg.repeats,
                                        max_batches=32, warmup=vcfg.warmup)
    with ctx.phase("parity", f"{ANCHOR}: parity on {len(inp.data.dev.examples)} dev examples", _parity_estimate(inp, paired, ANCHOR)):
        return paired, evaluate_session(anchor, inp.dev, vcfg.dev_batch_size, desc="parity anchor")


def _parity_estimate(inp: _Inputs, paired, name: str) -> float | None:
    """Seconds a full-dev parity run of ``name`` should take at the rate the interleaved rounds measured (None when
    it was not in them)."""
    rate = paired.median(name) if name in paired.rates else None
    return len(inp.dev) / rate if rate else None


def _measure(ctx, inp: _Inputs, rt, make, paired):
    """One runtime: parity on the full dev set, the fixed-shape grid, batch-1 latency (its dev-length throughput is
    the interleaved rounds', when it was in them).  Returns (its row, its benchmark, its dev predictions)."""
    from pipeline.validation.benchmark import BenchmarkSettings, benchmark_backend
    from pipeline.validation.parity import compare_outputs
    from pipeline.validation.rows import BackendRow

    cfg, vcfg = ctx.cfg, ctx.cfg.validate
    settings = BenchmarkSettings(list(vcfg.batch_sizes), inp.widths, vcfg.warmup, vcfg.repeats,
                                 vcfg.throughput_batch_size, vcfg.dev_benchmark_limit)
    with ctx.phase("grid", f"{rt.name} ({rt.device}): fixed-shape grid, batch {list(vcfg.batch_sizes)} x length "
                           f"{inp.widths}, {vcfg.repeats} repeats"):
        bench = benchmark_backend(rt.name, make, inp.tokenizer.vocab_size, inp.dev, settings, rt.artifact(inp.layout.root),
                                  dev_timing=paired.result(rt.name) if rt.name in paired.rates else None)
    with ctx.phase("parity"):
        ev, outputs_from = _dev_evaluation(ctx, inp, rt, make, paired)
    b1 = [c for c in bench.grid if c.batch_size == 1 and c.seq_len <= cfg.max_seq_len] or \
         [c for c in bench.grid if c.batch_size == 1]
    dev, predictions = bench.dev, inp.dev.predictions(ev.outputs)
    row = BackendRow(rt.name, rt.runtime, rt.device, rt.form, rt.precision, rt.quantized, inp.kind.metric,
                     compare_outputs(rt.name, ev, inp.reference, inp.dev, predictions).as_dict(), ev.score.metrics,
                     sentences_per_s=dev.sentences_per_s if dev else None, latency_ms_p50=dev.latency_ms_p50 if dev else None,
                     latency_ms_p95=dev.latency_ms_p95 if dev else None, latency_ms_p99=dev.latency_ms_p99 if dev else None,
                     batch1_p99_ms=max(b1, key=lambda c: c.seq_len).latency_ms_p99 if b1 else None,
                     dev_batch1_p99_ms=bench.dev_batch1.latency_ms_p99 if bench.dev_batch1 else None,
                     peak_rss_mb=bench.peak_rss_mb, model_mb=inp.layout.bytes(rt.form) / 2**20, dev_outputs=outputs_from)
    return row, bench, predictions


def _dev_evaluation(ctx, inp: _Inputs, rt, make, paired):
    """(``rt``'s outputs on the full dev set, where they came from): compress's, when it kept the outputs of a model
    with these very bytes in these batches and ``rt``'s session gives them again on the first batch
    (``pipeline.dev_outputs``); else this session's, over every dev example."""
    from pipeline import dev_outputs
    from pipeline.evaluation import evaluate_session
    from pipeline.progress import duration

    batch, what = ctx.cfg.validate.dev_batch_size, f"[validate] {rt.name}: parity on {len(inp.data.dev.examples)} dev examples"
    kept = inp.kept.get(dev_outputs.form_key(inp.layout.files(rt.form))) if inp.kept else None
    session = make()
    if kept is not None:
        ev, how = dev_outputs.reuse(kept, inp.dev, session.run, batch, made_by="compress's evaluation of the same file",
                                    desc=f"parity {rt.name} (compress's outputs, one batch)")
        if ev is not None:
            ctx.log(f"{what}: {how}")
            return ev, how
        ctx.log(f"[validate] {rt.name}: compress's dev outputs not reused: {how}")
    est = _parity_estimate(inp, paired, rt.name)
    ctx.log(what + (f" (about {duration(est)})" if est is not None else ""))
    return evaluate_session(session, inp.dev, batch, desc=f"parity {rt.name}"), "evaluated here"


def _fill_ratios(rows: list, benches: dict, paired) -> None:
    """Each row's speed-up over its base: the FP32 of its runtime on its device, else on the CPU (a GPU runtime's
    speed-up over what the CPU bundle would serve), or the registry's ``ratio_base`` (OpenVINO: ORT's FP32); paired
    per-round ratios where both were in the interleaved rounds, and the ratio to the anchor there."""
    from pipeline.backends.registry import by_name
    from pipeline.validation.benchmark import ratio

    named = {r.backend: r for r in rows}
    measured = [by_name(r.backend) for r in rows]
    for r in rows:
        base_rt = _fp32_base(by_name(r.backend), measured)
        b = named[base_rt.name] if base_rt is not None else None
        r.throughput_ratio = ratio(r.sentences_per_s, b.sentences_per_s if b else None)
        if r.backend in paired.rates and b and b.backend in paired.rates:
            med, lo, hi = paired.ratio(r.backend, b.backend)
            r.throughput_ratio, r.throughput_ratio_range = med, [lo, hi]
            r.sentences_per_s, r.throughput_rounds = paired.median(r.backend), len(paired.rates[r.backend])
        if r.backend in paired.rates:
            med, lo, hi = paired.ratio(r.backend, ANCHOR)
            r.anchor_ratio, r.anchor_ratio_range = med, [lo, hi]
        bb = benches.get(b.backend) if b else None
        r.grid_ratios = {f"b{c.batch_size}_s{c.seq_len}": ratio(c.sentences_per_s, bb.cell(c.batch_size, c.seq_len).sentences_per_s)
                         for c in benches[r.backend].grid if bb and bb.cell(c.batch_size, c.seq_len)}


def _gates(cfg, crow, fp32_accuracy: float, base: str | None, sure) -> list:
    """The gates on the verified row ``crow``; ``base``: the FP32 its throughput ratio is taken to; ``sure``: the
    drop's interval (``uncertainty.DevUncertainty``), said beside the verdict, which reads the measured drop alone."""
    from pipeline.validation import gates as G

    gcfg, vcfg = cfg.gates, cfg.validate
    d = sure.drop_points
    out = [
        G.check("max_accuracy_drop", gcfg.max_accuracy_drop, crow.accuracy_drop_points, kind="max", unit=" points",
                detail=f"{crow.backend} {crow.accuracy:.4f} vs FP32 {fp32_accuracy:.4f}; {d.level:.0%} interval "
                       f"{d.shown()} over resampled dev examples: {sure.verdict(gcfg.max_accuracy_drop)}"),
        G.check("min_throughput_ratio", gcfg.min_throughput_ratio, crow.throughput_ratio, kind="min", unit="x",
                detail=f"{crow.backend} vs {base or 'no FP32 measured here'}, dev lengths, batch {vcfg.throughput_batch_size}"),
    ]
    span = crow.anchor_ratio_range
    out.append(G.check(
        "min_anchor_ratio", gcfg.min_anchor_ratio, crow.anchor_ratio, kind="min", unit="x",
        detail=f"{crow.backend} vs ORT quantize_dynamic(per_channel) of the same FP32 ONNX, {vcfg.repeats} interleaved rounds"
               + (f" [{span[0]:.2f}-{span[1]:.2f}]" if span else "")))
    if gcfg.max_p99_latency_ms is not None:
        out.append(G.check("max_p99_latency_ms", gcfg.max_p99_latency_ms, crow.batch1_p99_ms, kind="max",
                           unit=" ms", detail=f"{crow.backend}, batch 1"))
    return out


def _summary(cfg, inp: _Inputs, crow, paired, anchor_score) -> dict:
    """gates.json's summary: the chosen backend's numbers, the FP32 baseline's, the anchor's, the CPU."""
    from pipeline.contract import detect_cpu
    from pipeline.validation.benchmark import path_bytes

    vcfg, fp32 = cfg.validate, inp.reference.score
    # Reported, not gated: gates.max_bundle_mb is the whole served bundle, which only the package stage sees.
    layout = inp.layout
    model_files = layout.bytes(crow.form) + path_bytes(layout.tokenizer_dir) + path_bytes(layout.labels) + path_bytes(layout.meta)
    return {"accuracy": crow.accuracy, "fp32_accuracy": fp32.value, "accuracy_drop_points": crow.accuracy_drop_points,
            "sentences_per_s": crow.sentences_per_s, "throughput_ratio": crow.throughput_ratio,
            "batch_size": vcfg.throughput_batch_size, "batch1_p99_ms": crow.batch1_p99_ms,
            "model_files_mib": model_files / 2**20,  # chosen model + tokenizer + labels + meta
            "dev_examples": len(inp.data.dev.examples), "dev_features": len(inp.dev),
            "metric": inp.kind.metric, "metric_label": inp.kind.metric_label, "metrics": crow.metrics,
            "dev_batch_size": vcfg.dev_batch_size,  # the smoke test batches requests the same way
            "fp32_metrics": fp32.metrics, "cpu": detect_cpu().as_dict(),
            "throughput_ratio_range": crow.throughput_ratio_range,
            "anchor_ratio": crow.anchor_ratio, "anchor_ratio_range": crow.anchor_ratio_range,
            "anchor": {"what": f"onnxruntime quantize_dynamic(per_channel=True) of {layout.path('onnx_fp32').relative_to(layout.root)}",
                       "accuracy": anchor_score.value, "accuracy_drop_points": 100.0 * (fp32.value - anchor_score.value),
                       "throughput_ratio": paired.ratio(ANCHOR, "onnxruntime-cpu-fp32")[0]
                       if "onnxruntime-cpu-fp32" in paired.rates else None},
            "engine": crow.runtime, "int8_recipe": inp.meta.recipe_for(crow.runtime)}


def _write_reports(ctx, inp: _Inputs, report, rows: list, benches: dict, skipped: dict, chosen_by: str,
                   checked: Checked) -> None:
    """gates.json, metrics.json, report.md and the accuracy-vs-throughput plot."""
    from pipeline.contract import TOKENIZER_DIR
    from pipeline.validation import gates as G
    from pipeline.validation.benchmark import path_bytes
    from pipeline.validation.report import PLOT_FILE, plot_accuracy_vs_throughput, write_report

    cfg, out, layout = ctx.cfg, ctx.out_dir, inp.layout
    report.write(out)
    dicts = [r.as_dict() for r in rows]
    sizes = {**{f.path: layout.bytes(f.name) for f in layout.present()}, TOKENIZER_DIR: path_bytes(layout.tokenizer_dir)}
    metrics_doc = {"format_version": G.FORMAT_VERSION, "kind": "ernie-bundle-metrics", "task": cfg.task,
                   "chosen_backend": report.chosen_backend, "chosen_by": chosen_by, "summary": report.summary, "backends": dicts, "skipped": skipped,
                   "benchmarks": {k: b.as_dict() for k, b in benches.items()}, "sizes": sizes,
                   "selected_candidate": inp.meta.selected_candidate}
    (out / METRICS_FILE).write_text(json.dumps(metrics_doc, indent=2, ensure_ascii=False), encoding="utf-8")
    fp32 = inp.reference.score.value
    plot_accuracy_vs_throughput(dicts, out / PLOT_FILE, fp32, cfg.validate.throughput_batch_size, inp.kind.metric_label)
    write_report(out, task=cfg.task, gates=report.gates, rows=dicts, skipped=skipped, grid={k: [c.__dict__ for c in b.grid]
                 for k, b in benches.items()}, sizes=sizes, selected=inp.meta.selected_candidate, chosen=report.chosen_backend,
                 fp32_accuracy=fp32, batch_size=cfg.validate.throughput_batch_size, metric_label=inp.kind.metric_label,
                 checked=checked.as_dict(), anchor=report.summary["anchor"],
                 interval=report.summary["accuracy_interval"])


STAGE = Stage(
    name="validate",
    description="parity and benchmarks per backend; regression gates",
    requires=("export", "finetune-check", "compress"),  # compress: its kept dev outputs of the forms that ship
    params=params,
    inputs=inputs,
    run=run,
    check=check,
    version="14",  # the last bump: example_scores.json, for make gate's paired interval against the previous release; before: git log
)
