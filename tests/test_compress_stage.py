"""The compress stage end to end on the tiny model: every strategy in both runtimes, the output contract
export reads, static-model input, the selection rule (medians, noise, ties to smaller) and its gate, and
bad input failing before any work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_and_kill_at_checkpoint, tiny_cli_args
from pipeline.cli import main
from pipeline.compress.candidates import Candidate, select, write_table

FAST = ["--set", "compress.throughput_batches=1", "--set", "compress.timing_rounds=2", "--set", "compress.max_steps=4",
        "--set", "compress.per_device_train_batch_size=16", "--set", "compress.learning_rate=0.001",
        "--set", "compress.algo_list=[mse]", "--set", "compress.batch_size_list=[4]",
        # one SmoothQuant strength per engine: the recipe grids are tests of their own (test_int8.py, test_openvino.py)
        "--set", "quantization.int8_smooth_alphas=[0.5]", "--set", "quantization.openvino_smooth_alphas=[0.5]"]
PADDLE = ["--set", "compress.candidate_format=paddle"]
ALL = ["--set", "compress.screen=false"]  # every candidate built: a test of the whole table, not of the screen
# OpenVINO's own form ships when the selected candidate runs in it or package.runtime names it: named here, so a test
# of both engines' shipped files does not depend on which one this CPU selects
BOTH_FORMS = ["--set", "package.runtime=python-openvino"]


@pytest.fixture
def runs(tiny_finetuned, tmp_path) -> Path:
    dst = tmp_path / "runs"
    shutil.copytree(tiny_finetuned["runs_dir"], dst)
    return dst


def _compress(tiny_finetuned, runs: Path, *sets: str, runtime: list[str] = PADDLE) -> int:
    return main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--only", "compress", *FAST, *runtime, *sets])


def _out(runs: Path) -> Path:
    return runs / "tiny" / "compress" / "out"


def _check_contract(runs: Path, tiny_finetuned) -> dict:
    out = _out(runs)
    record = json.loads((runs / "tiny" / "compress" / "record.json").read_text())
    assert set(record["artifacts"]) == {"candidates", "selected", "outputs", "dev_outputs"}
    # the FP32 baseline's and the selected candidate's full-dev outputs, which validate reads for the same files
    kept = sorted(p.name for p in (out / record["artifacts"]["dev_outputs"]).iterdir())
    assert kept == sorted({"fp32.npz", f"{json.loads((out / 'selected.json').read_text())['name']}.npz"}), kept
    outputs = json.loads((out / "outputs.json").read_text())  # the typed hand-off to export (pipeline.handoffs)
    arts = {"selected_infer_dir": outputs["selected_infer_dir"], "fp32_infer_dir": outputs["fp32_infer_dir"]}
    shipped = out / outputs["shipped_dir"]  # every form of the selected candidate, built here
    for rel in ("onnx/fp32.onnx", "onnx/int8.onnx", "onnx/int8_qdq.onnx", "int8_search.json"):
        assert (shipped / rel).is_file(), rel
    assert (out / outputs["selected_model_dir"] / "vocab.txt").is_file()
    table = json.loads((out / "candidates.json").read_text())
    selected = json.loads((out / "selected.json").read_text())
    assert set(selected) == {"name", "width_mult", "depth_mult", "quantization", "embeddings_int8", "accuracy", "accuracy_drop_points",
                             "throughput", "size_bytes", "settings", "runtime"}
    assert selected["quantization"] in ("none", "ptq", "qat", "ort", "nncf") and table["selected"] == selected["name"]
    for role in ("selected_infer_dir", "fp32_infer_dir"):
        assert (out / arts[role] / "model.pdmodel").is_file() and (out / arts[role] / "model.pdiparams").is_file()
    baseline = json.loads(tiny_finetuned["baseline"].read_text())
    fp32 = table["candidates"][0]
    assert fp32["name"] == "fp32" and abs(fp32["accuracy"] - baseline["accuracy"]) < 1e-6  # same dev set, same model
    assert selected["accuracy_drop_points"] <= 0.5
    assert "| candidate |" in (out / "candidates.md").read_text()
    for row in table["candidates"]:  # kept ones exist, others were deleted
        if row["model_path"]:
            assert (out / row["model_path"]).is_file() and row["kept"], row
        else:
            assert (out / row["infer_dir"] / "model.pdmodel").is_file() == row["kept"], row
        assert row["accuracy"] is not None and row["throughput"] > 0 and row["size_bytes"] > 0
        lo, hi = row["throughput_ratio_range"]  # interleaved rounds: median inside the per-round spread
        assert lo <= row["throughput_ratio"] <= hi
    return {"record": record, "table": table, "selected": selected, "names": [r["name"] for r in table["candidates"]],
            "outputs": outputs}


def test_ptq_and_embeddings(tiny_finetuned, runs):
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=ptq+embeddings", "--set", "compress.algo_list=[mse,avg]") == 0
    got = _check_contract(runs, tiny_finetuned)
    assert got["names"] == ["fp32", "ptq-mse-bs4-bn1", "ptq-avg-bs4-bn1", "fp32+emb", "ptq-mse-bs4-bn1+emb", "ptq-avg-bs4-bn1+emb"]
    sel_dir = _out(runs) / got["outputs"]["selected_model_dir"]
    assert (sel_dir / "model_state.pdparams").is_file() and (sel_dir / "vocab.txt").is_file()
    emb = next(r for r in got["table"]["candidates"] if r["name"] == "fp32+emb")
    assert emb["embeddings_int8"] and emb["settings"]["embeddings"]["int8_bytes"] < 0.3 * emb["settings"]["embeddings"]["fp32_bytes"]
    # Issue 61: validate verifies, never selects, on this route too: the selected architecture in the first CPU engine
    # (ONNX Runtime's INT8 of it, or its FP32), nothing else measured but that form's FP32 base and the anchor
    gates = {"gates.max_accuracy_drop": 100, "gates.min_throughput_ratio": 0, "gates.min_anchor_ratio": 0,
             "gates.max_int8_size_ratio": "null", "validate.batch_sizes": "[1]", "validate.seq_lens": "[16]",
             "validate.repeats": 1, "validate.warmup": 0, "validate.dev_benchmark_limit": 32}
    sets = [a for k, v in gates.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--from", "export", "--until", "validate",
                 *FAST, *PADDLE, *sets]) == 0
    validation = json.loads((runs / "tiny" / "validate" / "out" / "metrics.json").read_text())
    shipped = "onnxruntime-cpu-fp32" if got["selected"]["quantization"] == "none" else "onnxruntime-cpu-int8"
    assert validation["chosen_backend"] == shipped and "judged in Paddle" in validation["chosen_by"]
    assert {r["backend"] for r in validation["backends"]} == {shipped, "onnxruntime-cpu-fp32"}  # no paddle-cpu-int8


def test_dynabert_qat_embeddings(tiny_finetuned, runs):
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=dynabert+qat+embeddings", "--set", "compress.width_mult_list=[3/4]") == 0
    got = _check_contract(runs, tiny_finetuned)
    assert got["names"] == ["fp32", "w0.75", "qat", "w0.75-qat", "fp32+emb", "w0.75+emb", "qat+emb", "w0.75-qat+emb"]
    pruned = json.loads((_out(runs) / "candidates" / "w0.75" / "model" / "config.json").read_text())
    assert pruned["num_attention_heads"] == 3  # 4 heads -> 3: physically smaller
    rows = {r["name"]: r for r in got["table"]["candidates"]}
    assert rows["w0.75-qat"]["quantization"] == "qat" and rows["w0.75-qat"]["width_mult"] == 0.75


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["dynabert+qat", "dynabert+embeddings", "dynabert+ptq", "dynabert", "ptq", "qat"])
def test_every_upstream_strategy(tiny_finetuned, runs, strategy):
    extra = ["--set", "compress.quantize_unpruned=false"] if strategy == "dynabert+ptq" else []
    assert _compress(tiny_finetuned, runs, "--set", f"compress.strategy={strategy}", *extra) == 0
    got = _check_contract(runs, tiny_finetuned)
    if extra:
        assert got["names"] == ["fp32", "w0.75", "w0.75-ptq-mse-bs4-bn1"]
    assert got["names"][0] == "fp32"
    assert any(n.startswith("w0.75") for n in got["names"]) == ("dynabert" in strategy)
    assert any("qat" in n for n in got["names"]) == ("qat" in strategy)
    assert any(n.endswith("+emb") for n in got["names"]) == ("embeddings" in strategy)


def test_static_input_model(tiny_finetuned, runs, tmp_path):
    from pipeline.backends.paddle.convert import export_static
    from pipeline.modeling import load_classifier

    static = export_static(load_classifier(tiny_finetuned["model_dir"], 3), tmp_path / "static", "int32")
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=ptq+embeddings",
                     "--set", f"compress.input_infer_model_path={static}") == 0
    got = _check_contract(runs, tiny_finetuned)
    sel_dir = _out(runs) / got["outputs"]["selected_model_dir"]  # a static input has no dygraph model: its vocabulary
    assert (sel_dir / "vocab.txt").is_file() and not (sel_dir / "model_state.pdparams").exists()
    assert got["table"]["candidates"][0]["settings"]["input_dtype"] == "int32"


def test_onnxruntime_selects_width_by_recipe_and_export_ships_it(tiny_finetuned, runs, capsys):
    """The default runtime: every width as FP32 ONNX plus its searched INT8 form for each CPU engine (ONNX Runtime,
    OpenVINO), judged in its own engine; export rebuilds nothing and ships the very files compress measured."""
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=dynabert+ptq", "--set", "compress.width_mult_list=[3/4]",
                     *ALL, *BOTH_FORMS, runtime=[]) == 0
    got = _check_contract(runs, tiny_finetuned)
    assert got["names"] == ["fp32", "int8", "ov-int8", "w0.75", "w0.75-int8", "w0.75-ov-int8"]
    rows = {r["name"]: r for r in got["table"]["candidates"]}
    assert {r["name"] for r in rows.values() if r["runtime"] == "openvino"} == {"ov-int8", "w0.75-ov-int8"}
    assert rows["w0.75-int8"]["quantization"] == "ort" and rows["w0.75-int8"]["settings"]["int8_recipe"]["name"]
    assert rows["w0.75-ov-int8"]["quantization"] == "nncf" and rows["w0.75-ov-int8"]["settings"]["int8_recipe"]["name"]
    assert rows["w0.75-int8"]["size_bytes"] < 0.5 * rows["w0.75"]["size_bytes"]
    assert rows["w0.75-ov-int8"]["model_path"].endswith("model.xml")
    # Every candidate's network computes the last layer for the first token only (ernie_models.first_token_only); the
    # baseline every ratio counts from, and validate's anchor is made from, is the stock network.
    assert rows["fp32"]["model_path"] == "candidates/fp32/model.onnx" and "first_token_only" not in rows["fp32"]["settings"]
    assert rows["int8"]["source_onnx"] == "candidates/fp32/first_token/model.onnx"
    assert all(rows[n]["settings"]["first_token_only"] for n in got["names"] if n != "fp32")
    # Time you can see (issue 60): the record holds compress's phases, in the order they began, each >= 0, together
    # at most the stage's total.
    record = got["record"]
    phases = dict(record["phases"])
    assert [name for name, _ in record["phases"]] == ["inputs", "conversion", "scoring", "search", "importance",
                                                      "distillation", "timing", "shipped"]
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= record["duration_s"]
    assert phases["distillation"] > 0 and phases["search"] > 0
    shipped = _out(runs) / got["outputs"]["shipped_dir"]
    assert (shipped / "openvino" / "int8.xml").is_file() and (shipped / "openvino" / "int8.bin").is_file()
    assert (shipped / "onnx" / "fp32.onnx").read_bytes() == (_out(runs) / "candidates" / "fp32" / "model.onnx").read_bytes()
    assert "| onnxruntime |" in (_out(runs) / "candidates.md").read_text()

    assert main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--only", "export", *FAST, *ALL, *BOTH_FORMS, "--set",
                 "compress.strategy=dynabert+ptq", "--set", "compress.width_mult_list=[3/4]",
                 "--set", "gates.max_int8_size_ratio=null"]) == 0  # tiny: embeddings (and OpenVINO's XML) are most of it
    prefix = "w0.75-" if got["selected"]["width_mult"] < 1 else ""
    shipped = runs / "tiny" / "export" / "out" / "onnx" / "int8.onnx"
    assert shipped.read_bytes() == (_out(runs) / "candidates" / f"{prefix}int8" / "model.onnx").read_bytes()
    search = json.loads((runs / "tiny" / "export" / "out" / "int8_search.json").read_text())
    assert search["chosen"]["name"] == rows[f"{prefix}int8"]["settings"]["int8_recipe"]["name"]
    assert str(runs) not in json.dumps(search)  # no path of this machine's run (it reaches meta.json and gates.json)
    for suffix in (".xml", ".bin"):  # OpenVINO's form too: the measured IR, byte for byte
        shipped = runs / "tiny" / "export" / "out" / "openvino" / f"int8{suffix}"
        assert shipped.read_bytes() == (_out(runs) / "candidates" / f"{prefix}ov-int8" / f"model{suffix}").read_bytes()
    meta = json.loads((runs / "tiny" / "export" / "out" / "meta.json").read_text())
    assert meta["openvino"]["chosen"]["name"] == rows[f"{prefix}ov-int8"]["settings"]["int8_recipe"]["name"]
    assert meta["openvino"]["properties"]["INFERENCE_PRECISION_HINT"] == "f32"

    # Adding a width (a new stage key) retrains and rebuilds nothing already made: candidate-level caching.  (A kill
    # between a made model's rename and its checkpoint's removal left both: reusing the model removes the checkpoint.)
    made = next((runs / "tiny" / "cache" / "dynabert").glob("w0.75-*"))
    (made.parent / f".{made.name}.checkpoint" / "checkpoint").mkdir(parents=True)
    capsys.readouterr()
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=dynabert+ptq", "--set", "compress.width_mult_list=[3/4,1/2]",
                     *ALL, runtime=[]) == 0
    log = "".join(capsys.readouterr())
    assert "dynabert w0.75: reusing" in log and "dynabert w0.5: 4 -> 2 heads" in log and "dynabert w0.75: 4 ->" not in log
    assert [r["name"] for r in json.loads((_out(runs) / "candidates.json").read_text())["candidates"]] == \
        ["fp32", "int8", "ov-int8", "w0.75", "w0.75-int8", "w0.75-ov-int8", "w0.5", "w0.5-int8", "w0.5-ov-int8"]

    # The run cache is one folder, shown by status and removed alone by clean --cache (the records stay).
    cache = runs / "tiny" / "cache"
    assert sorted(p.name for p in cache.iterdir()) == ["dynabert", "int8"]
    # each made model's distillation checkpoint (dynabert.Resume, kept under its key until it is made) is gone
    assert sorted(p.name.split("-")[0] for p in (cache / "dynabert").iterdir()) == ["w0.5", "w0.75"]
    capsys.readouterr()
    assert main(["status", *tiny_cli_args(tiny_finetuned["task_yaml"], runs)]) == 0
    out = capsys.readouterr().out
    assert "run cache" in out and "pruned models (DynaBERT)" in out and "INT8 candidates" in out
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("compress "))  # (STALE: status has no --set)
    said = lines[row + 1].strip()  # under compress's row: where its time went, as its record holds it
    assert said.startswith("phases: inputs ") and all(f" {p} " in said for p in ("importance", "distillation", "search",
                                                                                  "scoring", "timing"))
    assert main(["clean", "--task", str(tiny_finetuned["task_yaml"]), "--runs-dir", str(runs), "--cache"]) == 0
    assert not cache.exists() and (runs / "tiny" / "compress" / "record.json").is_file()


def test_importance_is_computed_once_for_every_width_distilled_in_a_run(tiny_finetuned, runs, monkeypatch, capsys):
    """Head/neuron importance is the unpruned model's on the held-out rows, whatever the width: a run that distils two
    widths (the fallback when the faster one misses the budget) computes it once, and both are pruned by it."""
    from pipeline.compress import dynabert

    computed = []
    real = dynabert.compute_importance
    monkeypatch.setattr(dynabert, "compute_importance", lambda *a, **k: computed.append(real(*a, **k)) or computed[-1])
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=dynabert", "--set", "compress.width_mult_list=[3/4,1/2]",
                     *ALL, runtime=[]) == 0
    log = "".join(capsys.readouterr())
    assert "dynabert w0.75: 4 -> 3 heads" in log and "dynabert w0.5: 4 -> 2 heads" in log
    assert len(computed) == 1
    record = json.loads((runs / "tiny" / "compress" / "record.json").read_text())
    assert "importance" in dict(record["phases"])


def test_kill_9_mid_distillation_resumes_from_its_checkpoint(tiny_finetuned, runs):
    """kill -9 during DynaBERT's distillation: the next run goes on from the checkpoint kept under the pruned model's
    cache key (in a new process, whose parameters have other generated names than the killed one's), not from step 0;
    once the model is made, the checkpoint is gone."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    args = [sys.executable, "-m", "pipeline", "run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--only", "compress",
            *FAST, "--set", "compress.strategy=dynabert", "--set", "compress.width_mult_list=[1/2]",
            "--set", "compress.max_steps=200", "--set", "compress.num_train_epochs=100",
            "--set", "compress.distill_eval_steps=10", "--set", "compress.distill_patience=0"]
    dynabert = runs / "tiny" / "cache" / "dynabert"
    state = run_and_kill_at_checkpoint(args, root, dynabert / ".w0.5-*.checkpoint" / "checkpoint" / "state.json", 20)
    # read after the kill: the last checkpoint it wrote (none only if killed inside the rename that replaces one)
    killed_at = json.loads(state.read_text())["step"] if state.is_file() else 0
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (f"dynabert w0.5: resuming distillation from step {killed_at}/" in done.stdout) == (killed_at > 0), done.stdout[-3000:]
    assert [p.name.split("-")[0] for p in dynabert.iterdir()] == ["w0.5"]  # the model, no checkpoint left


def test_per_batch_int8_is_what_compress_measures_and_export_ships(tiny_finetuned, runs):
    """quantization.batch_independent_int8: false (issue 40): compress used to measure the searched fixed-scale
    forms of both engines and then ship quantize_dynamic's, which nobody had measured; now it measures the per-batch
    form, offers no OpenVINO candidate (none would ship), and export ships the measured file byte for byte."""
    sets = ["--set", "compress.strategy=ptq", "--set", "quantization.batch_independent_int8=false", *ALL]
    assert _compress(tiny_finetuned, runs, *sets, runtime=[]) == 0
    got = _check_contract(runs, tiny_finetuned)
    assert got["names"] == ["fp32", "int8"]
    rows = {r["name"]: r for r in got["table"]["candidates"]}
    assert rows["int8"]["settings"]["int8_recipe"] == {"name": "dynamic-per-batch", "batch_independent": False}
    shipped = _out(runs) / got["outputs"]["shipped_dir"] / "onnx" / "int8.onnx"
    assert shipped.read_bytes() == (_out(runs) / "candidates" / "int8" / "model.onnx").read_bytes()  # one width
    assert not (_out(runs) / got["outputs"]["shipped_dir"] / "openvino").exists()


def _copy_engine():
    """An engine defined here, in one object: ONNX Runtime's per-batch INT8 under another name."""
    from pipeline.backends.engine import CpuEngine
    from pipeline.backends.onnxruntime.quantize import dynamic_int8
    from pipeline.backends.onnxruntime.session import session

    def search(source, out_path, rows, cfg, cache_dir, baseline, log):
        log("[ort-copy] per-batch INT8")
        return dynamic_int8(source, out_path, cfg.quantization)

    return CpuEngine(name="ort-copy", int8_suffix="copy-int8", quantization="copy", candidate_file="copy.onnx",
                     where="a test's copy of ONNX Runtime", search=search,
                     open=lambda path, precision, settings: session(path, precision=precision),
                     settings=lambda cfg: {"copy": {"what": "a test engine"}})


def test_an_engine_registered_once_is_checked_searched_and_measured(tiny_finetuned, runs, monkeypatch, capsys):
    """issue 40: compress reads its engines from the registry's one list.  An engine defined in this module and added
    there is accepted by compress.engines, searched per width, evaluated and timed in its own sessions beside the
    others, and reported, with no name of it anywhere in pipeline/.  (Shipped, validated and served:
    tests/test_engine_registration.py.)"""
    from pipeline.backends import registry

    engine = _copy_engine()
    monkeypatch.setattr(registry, "CPU_ENGINES", (*registry.CPU_ENGINES, engine))
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=ptq", "--set", "compress.engines=[ort-copy]",
                     *ALL, runtime=[]) == 0
    assert "[ort-copy] per-batch INT8" in "".join(capsys.readouterr())
    table = json.loads((_out(runs) / "candidates.json").read_text())
    rows = {r["name"]: r for r in table["candidates"]}
    assert list(rows) == ["fp32", "copy-int8"]
    copy = rows["copy-int8"]
    assert copy["runtime"] == "ort-copy" and copy["quantization"] == "copy" and copy["model_path"].endswith("copy.onnx")
    assert copy["settings"]["copy"] == {"what": "a test engine"} and copy["settings"]["int8_recipe"]["name"]
    assert copy["accuracy"] is not None and copy["throughput"] > 0
    assert "a test's copy of ONNX Runtime" in (_out(runs) / "candidates.md").read_text()


def _slow_engine(delay_s: float):
    """The copy engine whose sessions wait ``delay_s`` per batch: slower than FP32 in every round, whatever the CPU."""
    import dataclasses
    import time

    from pipeline.backends.onnxruntime.quantize import dynamic_int8
    from pipeline.backends.onnxruntime.session import session

    class Slow:
        def __init__(self, path, precision):
            self.inner, self.name = session(path, precision=precision), "slow"

        def run(self, input_ids, token_type_ids):
            time.sleep(delay_s)
            return self.inner.run(input_ids, token_type_ids)

    return dataclasses.replace(_copy_engine(), name="ort-slow", int8_suffix="slow-int8",
                               open=lambda path, precision, settings: Slow(path, precision),
                               speed_form=lambda source, out, rows, cfg: dynamic_int8(source, out, cfg.quantization))


def test_speed_first_screen_never_builds_what_cannot_win(tiny_finetuned, runs, monkeypatch, capsys):
    """issue 60: every candidate's architecture is timed before any is built; an INT8 form that the FP32 model (within
    budget by definition) beats in every round is never searched nor scored, and candidates.md says why.  With
    compress.screen: false it is built and measured as before."""
    from pipeline.backends import registry

    monkeypatch.setattr(registry, "CPU_ENGINES", (*registry.CPU_ENGINES, _slow_engine(0.05)))
    sets = ["--set", "compress.strategy=ptq", "--set", "compress.engines=[onnxruntime,openvino,ort-slow]"]
    assert _compress(tiny_finetuned, runs, *sets, runtime=[]) == 0
    log = "".join(capsys.readouterr())
    assert "[ort-copy] per-batch INT8" not in log and "slow-int8: not built: fp32 is within budget and" in log
    table = json.loads((_out(runs) / "candidates.json").read_text())
    built, skipped = [r["name"] for r in table["candidates"]], {s["name"]: s for s in table["skipped"]}
    assert "slow-int8" in skipped and skipped["slow-int8"]["runtime"] == "ort-slow" and "fp32" in built
    # the others are built or skipped as this CPU's rounds say; each planned candidate is one or the other
    assert sorted(built + list(skipped)) == ["fp32", "int8", "ov-int8", "slow-int8"]
    assert set(table["screen"]) == {"fp32", "int8", "ov-int8", "slow-int8"} and table["screen"]["slow-int8"]["x_fp32"][2] < 1.0
    md = (_out(runs) / "candidates.md").read_text()
    assert "## Speed first" in md and "| slow-int8 |" in md and "no: fp32 is within budget" in md
    record = json.loads((runs / "tiny" / "compress" / "record.json").read_text())
    assert [name for name, _ in record["phases"]][:3] == ["inputs", "conversion", "screen"]
    assert record["metrics"]["skipped_by_screen"] == len(skipped)
    # OpenVINO's own form is built only when the selected candidate runs in it (package.runtime is auto here), and then
    # ONNX Runtime's INT8 forms are not: nothing serves them
    selected = json.loads((_out(runs) / "selected.json").read_text())
    ov = selected["runtime"] == "openvino"
    assert (_out(runs) / "shipped" / "openvino" / "int8.xml").is_file() == ov
    assert (_out(runs) / "shipped" / "onnx" / "int8.onnx").is_file() == (not ov)
    assert (_out(runs) / "shipped" / "onnx" / "int8_qdq.onnx").is_file() == (not ov)
    assert ("ONNX INT8 forms (int8.onnx, int8_qdq.onnx) not built" in log) == ov

    assert _compress(tiny_finetuned, runs, *sets, *ALL, runtime=[]) == 0
    assert "[ort-copy] per-batch INT8" in "".join(capsys.readouterr())
    table = json.loads((_out(runs) / "candidates.json").read_text())
    assert [r["name"] for r in table["candidates"]] == ["fp32", "int8", "ov-int8", "slow-int8"] and table["skipped"] == []
    assert table["screen"] is None


@pytest.mark.parametrize(
    "sets, message",
    [
        (["compress.candidate_format=gpu"], "compress.candidate_format: 'gpu' is not one of onnx, paddle"),
        (["compress.runtime=onnxruntime"], "compress.runtime is now compress.candidate_format: onnx"),
        (["compress.batch_num_list=[1000]"], "batch_num 1000"),
        (["compress.batch_size_list=[480]", "compress.batch_num_list=[2]"], "only 480"),
        (["compress.algo_list=[mse,bogus]"], "unknown algo 'bogus'"),
        (["compress.strategy=ptq+prune"], "unknown part 'prune'"),
        (["compress.width_mult_list=[5/4]"], "outside (0, 1]"),
        (["compress.strategy=ptq", "compress.input_infer_model_path=/nonexistent/dir"], "not found"),
        (["compress.strategy=dynabert+qat"], "qat needs compress.candidate_format: paddle"),
        (["compress.engines=[onnxruntime,tensorrt]"], "compress.engines[1]: unknown engine 'tensorrt'"),
        (["compress.engines=[]"], "compress.engines: a non-empty list"),
        (["compress.distill_patience=-1"], "compress.distill_patience must be >= 0"),
        (["compress.distill_eval_steps=0"], "compress.distill_eval_steps must be >= 1"),
    ],
)
def test_bad_input_fails_before_any_work(tiny_finetuned, runs, capsys, sets, message):
    args = [x for s in sets for x in ("--set", s)]
    assert _compress(tiny_finetuned, runs, *args, runtime=[]) == 2
    assert message in capsys.readouterr().err
    assert not _out(runs).exists()  # refused before any candidate was made


def test_static_dir_without_model_files(tiny_finetuned, runs, tmp_path, capsys):
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "model.pdmodel").write_bytes(b"x")
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=ptq", "--set", f"compress.input_infer_model_path={tmp_path / 'static'}") == 2
    assert "missing model.pdiparams" in capsys.readouterr().err


def _cand(name, acc, tp, tmp_path):
    c = Candidate(name, 1.0, "ptq" if name != "fp32" else "none", False, tmp_path / name, None)
    c.accuracy, c.accuracy_drop_points, c.throughput, c.size_bytes = acc, round(100 * (0.9 - acc), 4), tp, 100
    return c


def test_selection_rule_and_gate(tmp_path):
    from pipeline.evaluation import Interleaved

    cands = [_cand("fp32", 0.90, 100, tmp_path), _cand("fast-bad", 0.85, 400, tmp_path), _cand("ok", 0.896, 250, tmp_path),
             _cand("slower-ok", 0.899, 200, tmp_path)]
    sel = select(cands, 0.5)
    assert sel.selected.name == "ok" and sel.qualifying == 3
    # Rounds that disagree on which of ok / slower-ok is faster: within noise, and the more accurate one wins, even
    # when it is the larger; at equal accuracy the smaller one does.
    cands[2].size_bytes = 50
    noisy = Interleaved({"fp32": [100, 100, 100], "fast-bad": [400] * 3, "ok": [260, 240, 250], "slower-ok": [200, 255, 200]}, "fp32")
    sel = select(cands, 0.5, noisy)
    assert sel.selected.name == "slower-ok" and sel.within_noise == ("ok",) and "within timing noise of ok" in sel.message
    cands[3].accuracy = cands[2].accuracy
    assert select(cands, 0.5, noisy).selected.name == "ok"
    cands[3].accuracy = 0.899
    clear = Interleaved({"fp32": [100] * 3, "fast-bad": [400] * 3, "ok": [250] * 3, "slower-ok": [200] * 3}, "fp32")
    assert select(cands, 0.5, clear).selected.name == "ok"  # the rounds agree: the faster one, even if larger
    # A duel (the two timed alone, evaluation.duels) decides what the rounds could not: shown faster as surely as by
    # every one of the 3 rounds, the faster one ships even though less accurate; a duel that cannot tell them apart
    # leaves the tie to accuracy; one showing the slower median faster makes it the fastest.
    asked = []

    def duel(wins_for_ok):
        def timed(a, b):
            asked.append(frozenset((a, b)))
            ok_rates = [110] * wins_for_ok + [90] * (3 - wins_for_ok)
            return Interleaved({"ok": ok_rates, "slower-ok": [100] * 3} if a == "ok" else
                               {"slower-ok": [100] * 3, "ok": ok_rates}, a)
        return timed

    told = select(cands, 0.5, noisy, duel(3))
    assert told.selected.name == "ok" and told.within_noise == () and set(asked) == {frozenset(("ok", "slower-ok"))}
    assert "ok is 1.10x slower-ok timed alone [1.10-1.10; faster in 3 of 3 rounds]" in told.message
    untold = select(cands, 0.5, noisy, duel(2))
    assert untold.selected.name == "slower-ok" and untold.within_noise == ("ok",)
    reversed_ = select(cands, 0.5, noisy, duel(0))
    assert reversed_.selected.name == "slower-ok" and reversed_.within_noise == ()
    assert "slower-ok is 1.11x ok timed alone" in reversed_.message
    asked.clear()
    assert select(cands, 0.5, clear, duel(0)).selected.name == "ok" and asked == []  # the rounds told them apart: no duel
    none = select(cands[1:2], 0.5)
    assert none.selected is None and "fast-bad" in none.message and "no candidate is within 0.5" in none.message
    write_table(tmp_path, cands[1:2], none, 0.9, 0.5)
    assert "no candidate is within" in (tmp_path / "candidates.md").read_text()
    assert json.loads((tmp_path / "candidates.json").read_text())["selected"] is None


def test_stage_fails_at_the_gate_when_nothing_qualifies(tiny_finetuned, runs, capsys):
    # A baseline no candidate can reach (101%): the stage must write its table, name the best, exit 3.
    path = runs / "tiny" / "finetune-check" / "out" / "baseline.json"
    baseline = json.loads(path.read_text())
    baseline["accuracy"] = 1.01
    path.write_text(json.dumps(baseline))
    assert _compress(tiny_finetuned, runs, "--set", "compress.strategy=ptq", runtime=[]) == 3
    err = capsys.readouterr().err
    assert "no candidate is within 0.5 accuracy points" in err and "the best found is" in err
    assert "no candidate is within" in (_out(runs) / "candidates.md").read_text()
    assert not (_out(runs) / "selected.json").exists()
