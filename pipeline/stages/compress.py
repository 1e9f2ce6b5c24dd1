"""Stage ``compress``: DynaBERT width (and depth) pruning, then quantization; every candidate evaluated where it ships.

``compress.candidate_format: onnx`` (default, the CPU bundle): every architecture as FP32 ONNX plus each engine's INT8
form from its recipe search (``pipeline.compress.onnx_candidates``).  ``paddle``: Paddle Inference programs
(PTQ grid, QAT, int8 embeddings).  Every candidate is scored on the full dev set and timed in interleaved
rounds (see ``pipeline.compress.candidates``); the fastest median within ``gates.max_accuracy_drop``
points of the finetune-check baseline is selected, the smallest when timing cannot tell candidates apart.
When none qualifies the stage says so, names the best one found and fails at the gate (its table is
still written, so the numbers are there to look at).

Outputs (consumed by export): candidates.json, candidates.md, selected.json,
candidates/<name>/infer/model.pdmodel+.pdiparams (the FP32 baseline and the selected candidate are
always kept), candidates/<name>/model.onnx (onnxruntime), the FP32 dygraph PaddleNLP dir the selected
candidate was made from (selected_model/, or candidates/<architecture>/model for a pruned one).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from pipeline.stage import Stage
from pipeline.config import TaskConfig
from pipeline.kinds import get_kind, load_task_data
from pipeline.data import data_hashes

SELECTED_MODEL_DIR = "selected_model"


def params(cfg: TaskConfig) -> dict:
    from pipeline.backends.registry import CPU_ENGINES, own_form_engines
    from pipeline.contract import cpu_key
    from pipeline.quantization.select import search_params

    own = own_form_engines(cfg)
    return {
        "compress": dataclasses.asdict(cfg.compress),
        "cpu": cpu_key(),  # the screen, the searches and the timings chose for this CPU's instruction sets
        "int8_search": search_params(cfg) if cfg.compress.onnx_route else None,
        # what decides each engine's own form (None where it makes none here): "openvino"
        **{e.name: e.form_params(cfg) if e in own else None for e in CPU_ENGINES if e.form is not None},
        # compress builds every INT8 form of the selected candidate (pipeline.compress.shipped)
        "quantization": dataclasses.asdict(cfg.quantization), "opset": cfg.export.opset,
        "max_seq_len": cfg.max_seq_len,
        "labels": list(cfg.labels),
        "max_accuracy_drop": cfg.gates.max_accuracy_drop,
        # an engine's own form ships when package.runtime names it (registry.shipped_own_form_engines); the ONNX INT8
        # forms when the package or validate asks for them (registry.onnx_int8_forms_ship)
        **({"package_runtime": cfg.package.runtime} if cfg.package.runtime != "auto" else {}),
        **({"package_device": cfg.package.device} if cfg.package.device != "CPU" else {}),
        **({"validate_backends": [cfg.validate.backends, cfg.validate.chosen_backend]} if not cfg.validate.only_shipped else {}),
        "text_fields": [cfg.data.text_a, cfg.data.text_b, cfg.data.join],
        **get_kind(cfg).feature_params(cfg),
    }


def check(cfg: TaskConfig) -> None:
    """Before the first stage runs: every engine asked for can run here."""
    if cfg.compress.onnx_route:
        from pipeline.backends.registry import cpu_engines

        for engine in cpu_engines(cfg.compress.engines):
            engine.check(cfg)


def inputs(cfg: TaskConfig) -> dict[str, str]:
    out = data_hashes(cfg)
    static = cfg.compress.input_infer_model_path
    if static:
        from pipeline.backends.forms import check_static_dir
        from pipeline.hashing import tree_sha256

        out["input_infer_model"] = tree_sha256(check_static_dir(Path(static).expanduser()))
    return out


def run(ctx):
    """Make and measure every candidate (width x engine x recipe), select the fastest within the budget, build
    every shipped form of the selected one, hand export its paths."""
    from pipeline.compress.build import build_and_evaluate
    from pipeline.compress.candidates import select, write_table
    from pipeline.compress.shipped import fp32_sources, make as make_shipped
    from pipeline.contract import detect_cpu
    from pipeline.handoffs import Baseline
    from pipeline.records import StageResult
    from pipeline.run_cache import RunCache

    cfg, ccfg = ctx.cfg, ctx.cfg.compress
    baseline = ctx.handoff("finetune-check", Baseline)
    with ctx.phase("inputs"):
        inp, rows, vocab_dir = _inputs(ctx, baseline)
    built = build_and_evaluate(ccfg, inp, ctx.out_dir, ctx.work_dir, log=ctx.log, searches=_engine_searches(ctx, rows),
                               opset=cfg.export.opset, phase=ctx.phase, max_accuracy_drop=cfg.gates.max_accuracy_drop,
                               min_throughput_ratio=cfg.gates.min_throughput_ratio)
    cands = built.candidates
    with ctx.phase("timing"):  # a duel of two candidates the rounds could not tell apart is timing too
        selection = select(cands, cfg.gates.max_accuracy_drop, built.timing, built.duel)
    built = dataclasses.replace(built, duel=None)  # closes the candidates' sessions
    chosen = selection.selected
    ctx.log(f"[compress] {selection.message}")
    if chosen is not None:
        # The selected candidate's every shipped form, before the unselected programs go (a pruned FP32 program is
        # what a Paddle-runtime pick's ONNX is converted from).
        with ctx.phase("shipped", "building every shipped form of the selected candidate (its searches are cache hits)"):
            sources = fp32_sources(cands, chosen, ctx.out_dir, ctx.work_dir, cfg.export.opset, ctx.log)
            make_shipped(ctx.out_dir, sources, rows, cfg, detect_cpu(), RunCache(ctx.runs_dir).int8, ctx.log, chosen.runtime)
        _drop_unselected_programs(cands, chosen, ccfg.keep_all_candidates)
    write_table(ctx.out_dir, cands, selection, baseline.value, cfg.gates.max_accuracy_drop, baseline.metric_label,
                screen=built.screen, skipped=built.skipped)
    fp32 = cands[0]
    metrics = {"candidates": len(cands), "skipped_by_screen": len(built.skipped), "fp32_accuracy": fp32.accuracy,
               "fp32_throughput": fp32.throughput}
    if chosen is None:
        return StageResult(metrics=metrics, artifacts={"candidates": "candidates.json"}, gate_error=selection.message,
                           message=selection.message)
    metrics = {"selected": chosen.name, "accuracy": chosen.accuracy, "accuracy_drop_points": chosen.accuracy_drop_points,
               "speedup": (chosen.throughput / fp32.throughput) if fp32.throughput else 0.0,
               "throughput": chosen.throughput, **metrics}
    artifacts = {**_hand_off(ctx, fp32, chosen, vocab_dir), **_keep_dev_outputs(ctx, built.evaluations, (fp32, chosen), inp.dev)}
    return StageResult(metrics=metrics, artifacts=artifacts, message=selection.message)


def _inputs(ctx, baseline):
    """(CompressInputs, the INT8 searches' rows, the vocabulary's directory): the training, dev and held-out features
    every candidate is made and judged with.  Bad input (strategy, grid, static model) fails here, before any work."""
    from pipeline.compress.build import CompressInputs, preflight
    from pipeline.quantization.select import search_rows
    from pipeline.run_cache import RunCache
    from pipeline.tokenizer import Tokenizer

    cfg, ccfg = ctx.cfg, ctx.cfg.compress
    kind, data = get_kind(cfg), load_task_data(cfg)
    model_dir = ctx.artifact("finetune", "model_dir")
    static = Path(ccfg.input_infer_model_path).expanduser() if ccfg.input_infer_model_path else None
    vocab_dir = static if static is not None and (static / "vocab.txt").is_file() else model_dir
    tokenizer = Tokenizer.from_model_dir(vocab_dir, cfg.max_seq_len)
    train = kind.featurize(tokenizer, data.train.examples, cfg)
    preflight(ccfg, train_size=len(train), static_model_dir=static)
    # The INT8 searches' calibration and held-out training rows; DynaBERT's importance and best epoch come from
    # the same held-out rows.
    rows = search_rows(cfg, tokenizer, data.train.examples, kind)
    qcfg = cfg.quantization
    inp = CompressInputs(
        model_dir=None if static is not None else model_dir,
        static_model_dir=static,
        tokenizer=tokenizer,
        train=kind.for_training(train, ccfg.seed),
        dev=kind.featurize(tokenizer, data.dev.examples, cfg),
        heldout=rows.held,
        pruned_cache=RunCache(ctx.runs_dir).dynabert,
        # The model (finetune's outputs) and every data row and setting that shapes training and held-out rows.
        source_key=json.dumps([ctx.upstream["finetune"].output_hash, data.fingerprint, kind.feature_params(cfg),
                               qcfg.calibration_sentences, qcfg.int8_search_sentences], sort_keys=True, default=str),
        num_labels=len(data.labels),
        max_seq_len=cfg.max_seq_len,
        baseline_accuracy=baseline.value,
    )
    ctx.log(f"[compress] strategy {ccfg.strategy} as {ccfg.candidate_format}: FP32 baseline {kind.metric_label} {inp.baseline_accuracy:.4f}, "
            f"budget {cfg.gates.max_accuracy_drop:g} points, {len(data.dev.examples)} dev examples ({len(inp.dev)} model inputs)")
    return inp, rows, vocab_dir


def _engine_searches(ctx, rows) -> list:
    """Each engine of ``compress.engines`` with its INT8 search as ``build_and_evaluate`` calls it per width
    (``onnx_candidates.EngineSearch``), when the candidates are ONNX (``compress.candidate_format: onnx``); else none."""
    from pipeline.backends.registry import cpu_engines
    from pipeline.compress.onnx_candidates import EngineSearch
    from pipeline.run_cache import RunCache

    cfg, ccfg = ctx.cfg, ctx.cfg.compress
    if not ccfg.onnx_route:
        return []
    cache, per_batch = RunCache(ctx.runs_dir).int8, not cfg.quantization.batch_independent_int8
    engines = [e for e in cpu_engines(ccfg.engines) if e.per_batch_int8 is not None or not per_batch]
    if per_batch:
        # What ships is the per-batch form (compress/shipped.py): measure that one.  An engine with fixed-scale INT8
        # only is no candidate here: it would be measured and never shipped.
        ctx.log("[compress] quantization.batch_independent_int8: false: per-batch INT8 forms only "
                f"({', '.join(e.name for e in engines) or 'no engine of compress.engines has one'})")

    def search_of(engine):
        if per_batch:
            return lambda fp32, out_path, unpruned: engine.per_batch_int8(fp32, out_path, cfg)
        return lambda fp32, out_path, unpruned: engine.search(fp32, out_path, rows, cfg, cache, unpruned, ctx.log)

    def speed_of(engine):  # the form the screen times: the per-batch one itself, else the engine's fastest fixed-scale
        if per_batch:
            return lambda fp32, out_path: engine.per_batch_int8(fp32, out_path, cfg)
        if engine.speed_form is None:
            return None
        return lambda fp32, out_path: engine.speed_form(fp32, out_path, rows, cfg)

    return [EngineSearch(e, search_of(e), e.settings(cfg), e.int8_embeddings(cfg), speed_of(e)) for e in engines]


def _hand_off(ctx, fp32, chosen, vocab_dir: Path) -> dict:
    """selected.json and outputs.json (the typed records export reads); returns the stage's artifacts."""
    from pipeline.compress.candidates import selected_candidate
    from pipeline.compress.shipped import SHIPPED_DIR
    from pipeline.handoffs import CompressOutputs, SelectedCandidate

    out = ctx.out_dir
    (out / SelectedCandidate.FILE).write_text(selected_candidate(chosen).to_json(), encoding="utf-8")
    outputs = CompressOutputs(str(fp32.infer_dir.relative_to(out)), str(chosen.infer_dir.relative_to(out)),
                              _selected_model_dir(chosen, out, vocab_dir), SHIPPED_DIR, chosen.quantization in ("ptq", "qat"))
    (out / CompressOutputs.FILE).write_text(outputs.to_json(), encoding="utf-8")
    return {"candidates": "candidates.json", SelectedCandidate.ROLE: SelectedCandidate.FILE,
            CompressOutputs.ROLE: CompressOutputs.FILE}


DEV_OUTPUTS_DIR = "dev_outputs"


def _keep_dev_outputs(ctx, evaluations: dict, cands, dev) -> dict:
    """The FP32 baseline's and the selected candidate's full-dev outputs, each with the hash of its model's bytes
    (``pipeline.dev_outputs``): validate reuses them for the exported forms that are the same files instead of running
    them over dev again.  Returns the stage's artifact for them ({} when none was scored here: an accuracy_fn)."""
    from pipeline import dev_outputs

    kept = {c.name: c for c in cands if c.name in evaluations and c.kept}  # the FP32 baseline may be the selected one
    if not kept:
        return {}
    out = ctx.out_dir / DEV_OUTPUTS_DIR
    out.mkdir()
    for name, c in kept.items():
        dev_outputs.save(out / f"{name}.npz", evaluations[name], dev, ctx.cfg.compress.eval_batch_size,
                         dev_outputs.form_key(c.files))
    return {"dev_outputs": DEV_OUTPUTS_DIR}


def _drop_unselected_programs(cands, chosen, keep_all: bool) -> None:
    """Static models are cheap to remake; the pruned dygraph dirs (candidates/<w>/model) are the product of training
    and stay.  ONNX candidates share their width's program and stay too."""
    if keep_all:
        return
    for c in cands:
        if c.name != "fp32" and c is not chosen and c.is_program:
            shutil.rmtree(c.infer_dir, ignore_errors=True)
            if not any(c.infer_dir.parent.iterdir()):
                c.infer_dir.parent.rmdir()
            c.kept = False


def _selected_model_dir(chosen, out_dir: Path, vocab_dir: Path) -> str:
    """The FP32 dygraph directory the selected candidate was made from (export takes its tokenizer files from it),
    inside ``out_dir``; for a static input model, its tokenizer files alone."""
    from pipeline.contract import TOKENIZER_FILES

    src = Path(chosen.source_model_dir) if chosen.source_model_dir is not None else None
    if src is not None and src.is_relative_to(out_dir):  # a pruned model already lives under candidates/
        return str(src.relative_to(out_dir))
    if src is not None:
        shutil.copytree(src, out_dir / SELECTED_MODEL_DIR)
    else:
        (out_dir / SELECTED_MODEL_DIR).mkdir()
        for name in TOKENIZER_FILES:
            if (vocab_dir / name).is_file():
                shutil.copyfile(vocab_dir / name, out_dir / SELECTED_MODEL_DIR / name)
    return SELECTED_MODEL_DIR


STAGE = Stage(
    name="compress",
    description="DynaBERT width and depth pruning, then INT8 per engine; every candidate scored and timed; the selected one's forms built",
    requires=("finetune", "finetune-check"),  # the model from finetune, the baseline from finetune-check
    params=params,
    inputs=inputs,
    run=run,
    check=check,
    version="12",  # the last bump: rounds timed once idle, a duel before a tie, ORT sessions not spinning (earlier: git log)
)
