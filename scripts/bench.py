"""``make bench TASK=..``: every INT8 form against ONNX Runtime's one-liner, in one process, on one CPU.

    .venv/bin/python scripts/bench.py --task tnews [--runs-dir runs] [--out runs/tnews/bench.json]

Reads a finished export (``runs/<task>/export/out``) and measures, side by side:

* ``ort-fp32``                the FP32 ONNX (the ratio base);
* ``anchor``                  ``quantize_dynamic(per_channel=True, QInt8)`` of that same FP32 ONNX, built
                              here: what any user gets with one line, per-batch activation scales;
* ``anchor-reduce_range``     the same with 7-bit weights;
* ``anchor (our ORT session)``  the one-liner in the session our ONNX Runtime forms run in (without the
                              SkipLayerNorm fusion, ``served.CPU_DISABLED_OPTIMIZERS``): what of a form's ratio to
                              the anchor comes from that session option rather than from the form itself;
* ``anchor (first-token network)``  the one-liner on compress's unpruned network whose last layer computes the first
                              token only (``ernie_models.first_token_only``), when compress made one: what that cut
                              alone gives, so the shipped form's ratio can be told apart from it;
* ``onnxruntime-int8``        ``onnx/int8.onnx`` (its architecture and recipe named), and ``int8-qdq`` (TensorRT form);
* ``pruned-*``                each DynaBERT-pruned candidate compress measured in ONNX Runtime (FP32, and INT8
                              with its own searched recipe); after a Paddle-runtime compress, or when the screen left
                              only the shipped one, each pruned model compress kept, in FP32 and with the shipped
                              recipe (not the shipped architecture's INT8: that is the export's row);
* ``openvino-*``              OpenVINO: the FP32 ONNX (f32), its NNCF INT8 form unpruned, and each pruned
                              architecture's (``openvino/int8.xml`` of the export and compress's OpenVINO candidates; one
                              screened out of OpenVINO is quantized here with NNCF's default recipe, "built here").

Full-dev task metric for each; throughput at batch 32 on real dev lengths, timed in interleaved rounds
(median and min-max of the per-round ratios); file size; the CPU's int8 flags.  Prints a table, writes
JSON and Markdown.  Numbers are for the machine it ran on only: compare ratios, never absolute rates.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline  # noqa: F401,E402  (before paddle)
from pipeline.compress.architecture import Architecture  # noqa: E402
from pipeline.contract import ExportLayout  # noqa: E402


def recipe_forms(compress_out: Path, recipe, unpruned_fp32: Path | None, work: Path, cfg, tok, data, kind,
                 shipped: Architecture | None = None) -> dict[str, Path]:
    """The shipped recipe on ``unpruned_fp32`` (when the shipped model is pruned), and compress's pruned ONNX Runtime
    candidates (``shipped``: the export's architecture, whose ONNX Runtime INT8 form is already a row; None: it is not)."""
    from pipeline.backends.onnxruntime.convert import export_onnx
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges
    from pipeline.backends.paddle.convert import export_static
    from pipeline.quantization.select import calibration_feeds
    from pipeline.modeling import inspect_model, load_classifier

    forms = {}
    calib = kind.featurize(tok, data.train.examples[: cfg.quantization.calibration_sentences], cfg)
    feeds = calibration_feeds(calib, cfg.quantization.calibration_batch_size)
    if unpruned_fp32 is not None:  # what pruning adds on top of the same recipe
        ranges = activation_ranges(unpruned_fp32, feeds, tok.pad_id)
        forms[f"onnxruntime-int8 (unpruned, {recipe.name})"] = build(unpruned_fp32, work / "unpruned-int8.onnx", ranges, recipe,
                                                          embeddings=cfg.quantization.int8_embeddings)
    table = compress_out / "candidates.json"
    rows = json.loads(table.read_text(encoding="utf-8"))["candidates"] if table.is_file() else []
    onnx_rows = [r for r in rows if r.get("model_path") and _arch(r).pruned and r.get("runtime") == "onnxruntime"
                 and not (_arch(r) == shipped and r["quantization"] != "none")]  # the export's own ORT INT8 is a row
    if onnx_rows:  # compress judged in ONNX Runtime: its pruned candidates, each with its own searched recipe
        for r in onnx_rows:
            recipe_name = (r["settings"].get("int8_recipe") or {}).get("name")
            forms[f"pruned-{r['name']}" + (f" ({recipe_name})" if recipe_name else "")] = compress_out / r["model_path"]
        return forms
    # No other pruned ONNX Runtime candidate: a Paddle-route compress made none, or the screen left only the shipped
    # one. Each pruned model compress kept, in FP32 and with the shipped recipe; the shipped architecture's INT8 is
    # the export's own row (the same recipe on the same source: timed twice under two names before).
    made = {a.name: path for a, path in _pruned_sources(compress_out, rows).items()}
    for model_dir in sorted(compress_out.glob("candidates/*/model")):
        info = inspect_model(model_dir)
        if not info.head_classes:
            continue
        tag = f"pruned-{model_dir.parent.name}"
        fp32 = made.get(model_dir.parent.name)
        if fp32 is None or not fp32.is_file():
            static = export_static(load_classifier(model_dir, info.head_classes), work / tag / "static")
            fp32 = export_onnx(static, work / tag / "fp32.onnx")
        forms[f"{tag}-fp32"] = fp32
        if shipped is None or model_dir.parent.name != shipped.name:
            forms[f"{tag}-int8 ({recipe.name})"] = build(fp32, work / tag / "int8.onnx", activation_ranges(fp32, feeds, tok.pad_id),
                                                           recipe, embeddings=cfg.quantization.int8_embeddings)
    return forms


OPENVINO_FP32 = "openvino-fp32"


def _arch(row: dict) -> Architecture:
    """A candidates.json row's architecture."""
    return Architecture(row.get("width_mult", 1.0), row.get("depth_mult", 1.0))


def _pruned_sources(compress_out: Path, rows: list[dict]) -> dict[Architecture, Path]:
    """Each pruned architecture's FP32 ONNX as compress made it (the network its candidates came from), by candidates.json."""
    return {_arch(r): compress_out / r["source_onnx"] for r in rows if r.get("source_onnx") and _arch(r).pruned}


def _label(arch: Architecture) -> str:
    return arch.name if arch.pruned else "unpruned"


def openvino_forms(compress_out: Path, export_dir: Path, meta, fp32: Path, arch: Architecture, work: Path,
                   calibration: list, width_independent: bool, unpruned: Path) -> dict[str, Path]:
    """OpenVINO's rows: the FP32 ONNX itself (run by OpenVINO, f32), the export's NNCF INT8 IR (of ``arch``), and
    compress's OpenVINO candidates of the other architectures (unpruned included); an architecture compress made no
    OpenVINO form of (its speed-first screen left it out, or OpenVINO was not selected) gets one built here with NNCF's
    default recipe on ``calibration`` (``quantize.calibration_items``) and the task's ``openvino.width_independent``,
    from the network compress made that architecture's candidates from (``unpruned``: the unpruned one's), so every
    architecture has its row.  Empty when OpenVINO is not installed."""
    from pipeline.backends.openvino import missing
    from pipeline.backends.openvino.engine import FORM  # imported, it is registered in the export contract

    if missing():
        return {}
    forms = {OPENVINO_FP32: fp32}
    shipped = ExportLayout(export_dir).path(FORM)
    recipe = ((meta.data.get("openvino") or {}).get("chosen") or {}).get("name", "?")
    if shipped.is_file():
        forms[f"openvino-int8 ({_label(arch)}, {recipe})"] = shipped
    table = compress_out / "candidates.json"
    rows = json.loads(table.read_text(encoding="utf-8"))["candidates"] if table.is_file() else []
    for r in rows:
        path = compress_out / r["model_path"] if r.get("model_path") else None
        if r.get("runtime") != "openvino" or path is None or not path.is_file() or (_arch(r) == arch and shipped.is_file()):
            continue  # the export's own IR is the selected architecture's row
        name = (r["settings"].get("int8_recipe") or {}).get("name", "?")
        forms[f"openvino-int8 ({_label(_arch(r))}, {name})"] = path
    covered = {_arch(r) for r in rows if r.get("runtime") == "openvino"} | ({arch} if shipped.is_file() else set())
    # each architecture's FP32 ONNX: what its candidates were made from (there also when its FP32 one was screened out)
    sources = {Architecture(): unpruned, **_pruned_sources(compress_out, rows)}
    for a, source in sources.items():
        if a not in covered and source.is_file():
            from pipeline.backends.openvino.quantize import build
            from pipeline.quantization.recipe import Int8Recipe

            recipe = Int8Recipe()
            out = build(source, work / f"openvino-{a.name}" / "int8.xml", calibration, recipe,
                        width_independent=width_independent)
            forms[f"openvino-int8 ({_label(a)}, {recipe.name}, built here)"] = out
    return forms


def _shipped_row(runs: Path, models: dict[str, Path], export_dir: Path) -> str | None:
    """The row of the model the bundle serves: validate's chosen backend's export file."""
    from pipeline.backends.registry import by_name

    metrics = runs / "validate" / "out" / "metrics.json"
    try:
        runtime = by_name(json.loads(metrics.read_text(encoding="utf-8")).get("chosen_backend"))
    except (OSError, ValueError):
        return None
    target = runtime.artifact(export_dir) if runtime else None
    return next((name for name, path in models.items() if target is not None and Path(path) == target), None)


ANCHOR_OURS = "anchor (our ORT session)"


def _session(name: str, path: Path, cfg):
    """OpenVINO for its rows (the IR forms, and the FP32 ONNX under its openvino name), opened as compress measures
    them and the bundle serves them: with the task's ``openvino:`` properties (they change numerics as well as speed,
    so the shipped row scores what validate scored); ONNX Runtime otherwise."""
    if name == OPENVINO_FP32 or Path(path).suffix == ".xml":
        from pipeline.backends.registry import cpu_engine

        engine = cpu_engine("openvino")
        return engine.open(path, "int8" if Path(path).suffix == ".xml" else "fp32", engine.settings(cfg))
    from pipeline.backends.onnxruntime.session import session

    # the anchor rows as the one-liner's users run them, with ORT's defaults; ANCHOR_OURS as our forms run
    return session(path, ort_defaults=name.startswith("anchor") and name != ANCHOR_OURS)


def _models(runs: Path, layout, meta, cfg, tok, data, kind, work: Path) -> dict[str, Path]:
    """Every form to measure, by its row name: ORT FP32, the anchor (with and without reduce_range), the shipped
    ONNX Runtime INT8 and QDQ forms, the recipe's other architectures (``recipe_forms``) and OpenVINO's (``openvino_forms``)."""
    from pipeline.backends.onnxruntime.quantize import quantize_anchor
    from pipeline.compress.onnx_candidates import FIRST_TOKEN_DIR, ONNX_FILE
    from pipeline.quantization.recipe import Int8Recipe

    fp32 = layout.path("onnx_fp32")
    chosen = meta.int8.get("chosen") or {}
    recipe = Int8Recipe(chosen.get("smooth_alpha"), bool(chosen.get("reduce_range", False)))
    shipped_name = chosen.get("name", meta.int8.get("recipe", "?"))
    qdq_name = (meta.int8_qdq.get("chosen") or {}).get("name")
    sel = meta.selected_candidate
    arch = Architecture(sel.get("width_mult", 1.0), sel.get("depth_mult", 1.0))
    models = {"ort-fp32": fp32, "anchor": quantize_anchor(fp32, work / "anchor.onnx"),
              "anchor-reduce_range": quantize_anchor(fp32, work / "anchor_rr.onnx", reduce_range=True)}
    models[ANCHOR_OURS] = models["anchor"]
    # the unpruned network compress made its candidates from: with the last layer cut to the first token, when it did
    unpruned = runs / "compress" / "out" / "candidates" / "fp32" / FIRST_TOKEN_DIR / ONNX_FILE
    if unpruned.is_file():  # the one-liner on it too: what that cut alone gives
        models["anchor (first-token network)"] = quantize_anchor(unpruned, work / "anchor_first_token.onnx")
    else:
        unpruned = fp32
    if layout.has("onnx_int8"):  # absent when OpenVINO's IR ships and nothing asked for them
        models.update({f"int8-qdq (TensorRT form{', ' + qdq_name if qdq_name else ''})": layout.path("onnx_int8_qdq"),
                       f"onnxruntime-int8 ({_label(arch)}, {shipped_name})": layout.path("onnx_int8")})
    models.update(recipe_forms(runs / "compress" / "out", recipe, unpruned if arch.pruned else None, work, cfg, tok, data, kind,
                               shipped=arch if layout.has("onnx_int8") else None))
    from pipeline.backends.openvino.quantize import calibration_items
    from pipeline.quantization.select import search_rows

    rows = search_rows(cfg, tok, data.train.examples, kind)  # compress's calibration rows
    models.update(openvino_forms(runs / "compress" / "out", layout.root, meta, fp32, arch, work,
                                 calibration_items(rows.feeds, tok.pad_id), cfg.engine_settings["openvino"].width_independent,
                                 unpruned))
    return models


def _row(name: str, path: Path, shipped: bool, scores: dict, timing, drop) -> dict:
    """``drop``: its interval (``uncertainty.Interval``) in points below ORT FP32."""
    from pipeline.validation.benchmark import path_bytes

    vs_fp32, vs_anchor = timing.ratio(name, "ort-fp32"), timing.ratio(name, "anchor")
    return {"form": name, "shipped": shipped, "metric": scores[name], "drop_points": 100 * (scores["ort-fp32"] - scores[name]),
            "drop_interval": [drop.low, drop.high],
            "sequences_per_s": timing.median(name), "x_fp32": vs_fp32[0], "x_fp32_range": vs_fp32[1:],
            "x_anchor": vs_anchor[0], "x_anchor_range": vs_anchor[1:],
            "anchor_within_noise": timing.within_noise(name, "anchor"), "mb": path_bytes(path) / 2**20}


def _table(rows: list[dict], metric: str) -> list[str]:
    lines = [f"| form | {metric} | drop (pts) [95%] | ×FP32 [min–max] | ×anchor [min–max] | MB |", "|---|---|---|---|---|---|"]
    for r in rows:
        noise = " (within noise)" if r["anchor_within_noise"] and r["form"] != "anchor" else ""
        drop = f"{r['drop_points']:+.2f} [{r['drop_interval'][0]:+.2f}, {r['drop_interval'][1]:+.2f}]"
        lines.append(f"| {'**' + r['form'] + '** (shipped)' if r['shipped'] else r['form']} | {r['metric']:.4f} | {drop} | {r['x_fp32']:.2f} "
                     f"[{r['x_fp32_range'][0]:.2f}–{r['x_fp32_range'][1]:.2f}] | {r['x_anchor']:.2f} "
                     f"[{r['x_anchor_range'][0]:.2f}–{r['x_anchor_range'][1]:.2f}]{noise} | {r['mb']:.1f} |")
    return lines


def _write(out: Path, lines: list[str], report: dict) -> None:
    """The report as JSON at ``out``, its markdown table beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="tnews")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--data-dir", help="override the task's data.dir")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--max-batches", type=int, default=40, help="batches per timed round")
    p.add_argument("--out", help="JSON path (default runs/<task>/bench.json; .md beside it)")
    args = p.parse_args(argv)

    from pipeline.config import load_task_config
    from pipeline.contract import detect_cpu as detect
    from pipeline.kinds import load_task_data
    from pipeline.errors import ConfigError, ModelError
    from pipeline.evaluation import evaluate_session
    from pipeline.handoffs import ExportManifest
    from pipeline.kinds import get_kind
    from pipeline.tokenizer import Tokenizer
    from pipeline.evaluation import interleaved_throughput
    from pipeline.validation.uncertainty import drops_below

    overrides = {"data.dir": str(Path(args.data_dir).resolve())} if args.data_dir else {}
    try:
        cfg = load_task_config(args.task, overrides)  # a task name or a task YAML; runs/<its task name>
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs = Path(args.runs_dir) / cfg.task
    export_dir = runs / "export" / "out"
    layout = ExportLayout(export_dir)
    if not layout.meta.is_file():
        print(f"error: {layout.meta}: no finished export; run `make bundle TASK={args.task}` first", file=sys.stderr)
        return 2
    try:
        meta = ExportManifest.read(layout.meta)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data, kind = load_task_data(cfg), get_kind(cfg)
    tok = Tokenizer.from_model_dir(layout.tokenizer_dir, cfg.max_seq_len)
    dev = kind.featurize(tok, data.dev.examples, cfg)
    cpu = detect()
    # The forms built here (the anchors, OpenVINO's IRs: up to ~200 MiB a run) go when the run ends.
    with tempfile.TemporaryDirectory(prefix="bench-") as work:
        models = _models(runs, layout, meta, cfg, tok, data, kind, Path(work))
        shipped = _shipped_row(runs, models, export_dir)

        print(f"CPU: {cpu.summary()}; {len(dev)} dev rows; batch {args.batch_size}; {args.rounds} interleaved rounds")
        sessions = {name: _session(name, path, cfg) for name, path in models.items()}
        evs = {name: evaluate_session(s, dev, 64, desc=f"dev {name}") for name, s in sessions.items()}
        scores = {name: ev.score.value for name, ev in evs.items()}
        # each form's drop from ORT FP32 with its 95% interval, every form on the same resampled dev examples
        answers = {name: dev.predictions(ev.outputs) for name, ev in evs.items()}
        drops = drops_below(kind, dev.examples, answers["ort-fp32"], answers)
        timing = interleaved_throughput(sessions, dev, args.batch_size, rounds=args.rounds, max_batches=args.max_batches)
        rows = [_row(name, path, name == shipped, scores, timing, drops[name][1]) for name, path in models.items()]
        lines = [f"# make bench TASK={args.task}", "", f"CPU: {cpu.summary()}. Dev rows: {len(dev)}, batch {args.batch_size}, "
                 f"{args.rounds} interleaved rounds of {args.max_batches} batches; ratios are per-round medians; a "
                 f"drop's [95%] is the middle of 2000 resamples of the {len(dev.examples)} dev examples, the same for "
                 "every form.", "",
                 *_table(rows, kind.metric)]
        print("\n".join(lines[4:]))
        _write(Path(args.out) if args.out else runs / "bench.json", lines,
               {"task": args.task, "cpu": cpu.as_dict(), "dev_rows": len(dev), "batch_size": args.batch_size,
                "rounds": args.rounds, "int8_recipe": meta.int8, "qdq_recipe": meta.int8_qdq, "rows": rows,
                "rates": timing.rates})
    return 0


if __name__ == "__main__":
    sys.exit(main())
