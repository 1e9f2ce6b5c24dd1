"""The stage graph runner: caching, selection, atomic outputs, resume, gates and exit codes."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.records import read_record
from tests.conftest import TINY_MODEL_OVERRIDES, run_and_kill_at_checkpoint, tiny_cli_args

ROOT = Path(__file__).resolve().parent.parent


def _run(task_yaml, runs, *extra, capsys=None):
    select = [] if ("--only" in extra or "--from" in extra) else ["--until", "finetune-check"]
    rc = main(["run", *tiny_cli_args(task_yaml, runs), *select, *extra])
    out = capsys.readouterr() if capsys else None
    return rc, out


def test_second_run_skips_finished_stages_and_param_change_reruns(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    rc, out = _run(tiny_task, runs, capsys=capsys)
    assert rc == 0, out.err
    rec1 = read_record(runs / "tiny" / "finetune")
    assert rec1.status.value == "OK" and rec1.versions["paddlepaddle"].startswith("2.6")
    assert rec1.inputs and rec1.outputs and rec1.duration_s > 0
    rc, out = _run(tiny_task, runs, capsys=capsys)
    assert rc == 0
    assert "[finetune] cached" in out.out and "[finetune-check] cached" in out.out
    # changing a parameter of finetune-check only re-runs finetune-check
    rc, out = _run(tiny_task, runs, "--set", "gates.min_accuracy=0.4", capsys=capsys)
    assert rc == 0
    assert "[finetune] cached" in out.out and "[finetune-check] running" in out.out
    # --force re-runs even when cached
    rc, out = _run(tiny_task, runs, "--only", "finetune-check", "--force", capsys=capsys)
    assert rc == 0 and "[finetune-check] running" in out.out


def test_data_change_invalidates(tiny_task, tiny_data, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert _run(tiny_task, runs, capsys=capsys)[0] == 0
    with open(tiny_data / "dev.json", "a", encoding="utf-8") as f:
        f.write(json.dumps({"label": "100", "sentence": "球赛冠军"}, ensure_ascii=False) + "\n")
    rc, out = _run(tiny_task, runs, capsys=capsys)
    assert rc == 0 and "[finetune] running" in out.out


def test_only_needs_completed_upstream(tiny_task, tmp_path, capsys):
    rc = main(["run", *tiny_cli_args(tiny_task, tmp_path / "runs"), "--only", "finetune-check"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs finetune, which has not completed" in err


def test_a_run_that_packages_says_where_the_bundle_goes_first(tiny_task, tmp_path, capsys):
    """The bundle is not under --runs-dir: a run through package names the directory it will replace before any
    work, a run that stops earlier does not mention one."""
    runs, repo = tmp_path / "runs", tmp_path / "bundles"
    rc = main(["run", *tiny_cli_args(tiny_task, runs), "--only", "package", "--set", f"package.repository={repo}"])
    out = capsys.readouterr().out
    assert rc == 2 and f"the bundle goes to {repo / 'tiny'} (package.repository" in out.splitlines()[1]
    assert "the bundle goes to" not in _run(tiny_task, runs, "--only", "finetune-check", capsys=capsys)[1].out


def test_unexpected_crash_leaves_a_fail_record_and_the_traceback_in_the_stage_log(tiny_task, tmp_path, capsys, monkeypatch):
    """A crash no check anticipated: FAIL record with a one-line message, traceback in stage.log, exit 1, one line."""
    import pipeline.runner as runner_mod

    def boom(ctx):
        raise RuntimeError("boom: the library fell over\nsecond line")

    stages = tuple(dataclasses.replace(s, run=boom) if s.name == "finetune-check" else s for s in runner_mod.STAGES)
    monkeypatch.setattr(runner_mod, "STAGES", stages)
    rc, out = _run(tiny_task, tmp_path / "runs", capsys=capsys)
    sdir = tmp_path / "runs" / "tiny" / "finetune-check"
    assert rc == 1
    assert out.err.strip().splitlines()[-1].startswith("error: stage finetune-check crashed: RuntimeError: boom: the library fell over (traceback in ")
    assert "Traceback" not in out.err
    rec = read_record(sdir)
    assert rec.status.value == "FAIL" and rec.message == "RuntimeError: boom: the library fell over"
    log = (sdir / "stage.log").read_text()
    assert "Traceback (most recent call last)" in log and "second line" in log and "in boom" in log
    assert not list(sdir.glob(".tmp-*")) and not (sdir / "out").exists()


def test_a_stage_s_phases_are_in_its_record_and_in_status(tiny_task, tmp_path, capsys, monkeypatch):
    """Issue 60: time you can see.  What a stage charges to ctx.phase is written into its record by the runner (the
    stage's own names, in order, each >= 0, together at most the stage's total), said before a phase that says what
    it will do, printed by the run's table and by status; a stage that fails inside a phase keeps what it measured."""
    import pipeline.runner as runner_mod

    real = next(s for s in runner_mod.STAGES if s.name == "finetune-check")

    def with_phases(ctx):
        with ctx.phase("reading", "reading: what this phase will do", estimate_s=75.0):
            with ctx.phase("inner"):  # nested: pauses "reading", every second is charged once
                pass
        with ctx.phase("checking"):
            return real.run(ctx)

    stages = tuple(dataclasses.replace(s, run=with_phases) if s.name == real.name else s for s in runner_mod.STAGES)
    monkeypatch.setattr(runner_mod, "STAGES", stages)
    runs = tmp_path / "runs"
    rc, out = _run(tiny_task, runs, capsys=capsys)
    assert rc == 0, out.err
    assert "[finetune-check] reading: what this phase will do (about 1m15s)" in out.out
    rec = read_record(runs / "tiny" / "finetune-check")
    assert list(rec.phases) == ["reading", "inner", "checking"]
    assert all(s >= 0 for s in rec.phases.values()) and rec.phases["checking"] > 0
    assert sum(rec.phases.values()) <= rec.duration_s
    on_disk = json.loads((runs / "tiny" / "finetune-check" / "record.json").read_text())
    assert on_disk["phases"] == [[k, v] for k, v in rec.phases.items()]  # pairs: the record's keys are sorted
    assert read_record(runs / "tiny" / "finetune").phases == {}  # a stage that names no phases has none
    table = out.out.splitlines()
    row = next(i for i, line in enumerate(table) if line.startswith("finetune-check  OK"))
    assert table[row + 1].split()[:2] == ["phases:", "reading"] and "checking" in table[row + 1]
    assert main(["status", *tiny_cli_args(tiny_task, runs)]) == 0
    status = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(status) if line.startswith("finetune-check  OK"))
    assert status[row + 1].strip() == "phases: " + ", ".join(f"{k} {runner_mod._fmt_s(v)}" for k, v in rec.phases.items())

    def fails_inside(ctx):
        with ctx.phase("before"):
            pass
        with ctx.phase("breaking"):
            raise RuntimeError("broke mid-phase")

    stages = tuple(dataclasses.replace(s, run=fails_inside) if s.name == real.name else s for s in runner_mod.STAGES)
    monkeypatch.setattr(runner_mod, "STAGES", stages)
    rc, out = _run(tiny_task, runs, "--only", "finetune-check", "--force", capsys=capsys)
    rec = read_record(runs / "tiny" / "finetune-check")
    assert rc == 1 and rec.status.value == "FAIL" and list(rec.phases) == ["before", "breaking"]
    assert sum(rec.phases.values()) <= rec.duration_s


def test_old_records_without_phases_read_and_bad_phases_do_not():
    from pipeline.records import StageRecord, StageStatus

    rec = StageRecord("finetune", StageStatus.OK, "k", {}, {}, duration_s=2.0)
    old = json.loads(rec.to_json())
    del old["phases"]  # written before phases were kept
    assert StageRecord.from_json(json.dumps(old)).phases == {}
    for bad in ({"a": 1.0}, [["a", "1m"]], [["a", -1.0]], [["a"]], [[1, 2.0]], [["a", True]]):
        with pytest.raises(ValueError, match="phases"):
            StageRecord.from_json(json.dumps({**old, "phases": bad}))
    rec.phases = {"b": 1.5, "a": 0.25}
    assert StageRecord.from_json(rec.to_json()).phases == {"b": 1.5, "a": 0.25}


def test_gate_failure_exits_3_and_is_not_marked_done(tiny_task, tmp_path, capsys):
    # one training step: an un-fine-tuned model, which the gate must catch
    bad = ("--set", "finetune.max_steps=1", "--set", "gates.min_accuracy=0.9")
    rc, out = _run(tiny_task, tmp_path / "runs", *bad, capsys=capsys)
    assert rc == 3
    assert "below gates.min_accuracy 0.9000" in out.err
    rec = read_record(tmp_path / "runs" / "tiny" / "finetune-check")
    assert rec.status.value == "FAIL"
    rc, out = _run(tiny_task, tmp_path / "runs", *bad, capsys=capsys)
    assert rc == 3 and "[finetune-check] running" in out.out  # a failed stage is never reused


def test_bad_input_errors_are_one_line_exit_2(tiny_task, tiny_data, tmp_path, capsys):
    (tiny_data / "train.json").write_text('{"label": "100", "sentence": "ok"}\n{bad json\n', encoding="utf-8")
    rc, out = _run(tiny_task, tmp_path / "runs", capsys=capsys)
    assert rc == 2
    err_lines = [l for l in out.err.splitlines() if l.startswith("error:")]
    assert len(err_lines) == 1 and "train.json:2: malformed JSON" in err_lines[0]
    assert read_record(tmp_path / "runs" / "tiny" / "finetune").status.value == "FAIL"


def test_unknown_task_and_model_errors(tmp_path, capsys):
    assert main(["run", "--task", "nope", "--runs-dir", str(tmp_path)]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    rc = main(["run", "--task", "tnews", "--runs-dir", str(tmp_path), "--model", str(tmp_path / "missing-model")])
    assert rc == 2 and "model dir not found" in capsys.readouterr().err


def test_num_classes_mismatch_through_cli(tiny_finetuned, tmp_path, capsys):
    rc = main(["run", "--task", "tnews", "--runs-dir", str(tmp_path / "r"), "--model", str(tiny_finetuned["model_dir"]),
               "--data-dir", str(tiny_finetuned["data_dir"])])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "labels.json: label set does not match" in err or "num_classes mismatch" in err


def test_unwritable_output_dir(tiny_task, tmp_path, capsys):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"  # root ignores permissions: make the runs dir's parent a file
        blocker.write_text("x")
        runs = blocker / "runs"
    else:
        runs = tmp_path / "ro"
        runs.mkdir(mode=0o500)
    rc, out = _run(tiny_task, runs, capsys=capsys)
    assert rc == 2 and "is not writable" in out.err


def test_unwritable_bundle_directory_is_refused_before_the_first_stage(tiny_task, tmp_path, capsys):
    blocker = tmp_path / "file"  # a path under a file: not writable for root either
    blocker.write_text("x")
    runs = tmp_path / "runs"
    rc = main(["run", *tiny_cli_args(tiny_task, runs), "--set", f"package.repository={blocker / 'bundles'}"])
    err = capsys.readouterr().err
    assert rc == 2 and f"package.repository {blocker / 'bundles'} is not writable" in err
    assert read_record(runs / "tiny" / "finetune") is None  # nothing ran


def test_finetuned_model_passes_through_without_training(tiny_finetuned, tmp_path, capsys):
    rc = main(["run", "--task", str(tiny_finetuned["task_yaml"]), "--runs-dir", str(tmp_path / "r"),
               "--model", str(tiny_finetuned["model_dir"]), "--set", "max_seq_len=32", "--until", "finetune-check"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "no training needed" in out.out
    rec = read_record(tmp_path / "r" / "tiny" / "finetune")
    assert rec.metrics["trained"] == 0 and rec.artifacts["model_dir"] == str(tiny_finetuned["model_dir"])
    base = json.loads((tmp_path / "r" / "tiny" / "finetune-check" / "out" / "baseline.json").read_text())
    assert base["accuracy"] == json.loads(tiny_finetuned["baseline"].read_text())["accuracy"]
    # finetune-check evaluated this model itself: the logits of fine-tune's own evaluation, and nothing left behind
    import numpy as np

    check = tmp_path / "r" / "tiny" / "finetune-check"
    np.testing.assert_allclose(np.load(check / "out" / "dev_logits.npy"),
                               np.load(tiny_finetuned["baseline"].parent / "dev_logits.npy"), atol=1e-5, rtol=0)
    assert sorted(p.name for p in check.iterdir()) == ["out", "record.json"]


def test_finetune_check_reuses_the_fine_tune_s_own_dev_outputs_only_when_they_are_these_weights(tiny_task, tmp_path, capsys):
    """Fine-tune's evaluation that kept the best weights already ran them over dev: finetune-check takes those
    outputs (checked on one batch of the reloaded weights) instead of a second pass, and they equal a fresh one."""
    import numpy as np

    from pipeline import dev_outputs
    from pipeline.config import load_task_config
    from pipeline.evaluation import dygraph_forward, evaluate_dygraph
    from pipeline.kinds import get_kind, load_task_data
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    rc, out = _run(tiny_task, tmp_path, capsys=capsys)
    assert rc == 0, out.err
    assert "fine-tune's evaluation of these weights, checked on" in out.out
    task = tmp_path / "tiny"
    assert read_record(task / "finetune").artifacts["dev_outputs"] == dev_outputs.FILE
    model_dir = task / "finetune" / "out" / "model"
    assert not (model_dir / dev_outputs.FILE).exists()  # the model folder holds the model only
    cfg = load_task_config(str(tiny_task), TINY_MODEL_OVERRIDES)
    kind, data = get_kind(cfg), load_task_data(cfg)
    dev = kind.featurize(Tokenizer.from_model_dir(model_dir, cfg.max_seq_len), data.dev.examples, cfg)
    model = load_classifier(model_dir, len(data.labels), kind.model_class())
    fresh = evaluate_dygraph(model, dev, cfg.finetune.eval_batch_size)
    kept = np.load(task / "finetune-check" / "out" / "dev_logits.npy")
    np.testing.assert_allclose(kept, fresh.flat(), atol=1e-5, rtol=0)
    baseline = json.loads((task / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["accuracy"] == fresh.metric

    # Outputs that are not these weights', or not of these features, are refused: finetune-check evaluates instead.
    forward, path = dygraph_forward(model), task / "finetune" / "out" / dev_outputs.FILE
    assert dev_outputs.reuse(path, dev, forward, cfg.finetune.eval_batch_size)[0] is not None
    other = tmp_path / dev_outputs.FILE
    batch = cfg.finetune.eval_batch_size
    dev_outputs.save(other, dataclasses.replace(fresh, outputs=[o + 1e-3 for o in fresh.outputs]), dev, batch)
    got, why = dev_outputs.reuse(other, dev, forward, batch)
    assert got is None and "does not give the kept outputs" in why
    dev_outputs.save(other, fresh, dev.subset(range(len(dev) - 1)), batch)
    got, why = dev_outputs.reuse(other, dev, forward, batch)
    assert got is None and "dev features differ" in why
    dev_outputs.save(other, fresh, dev, batch + 1)  # other batches: a per-batch INT8 form answers otherwise
    got, why = dev_outputs.reuse(other, dev, forward, batch)
    assert got is None and f"batches of {batch + 1}" in why
    other.write_bytes(b"not an npz")
    assert dev_outputs.reuse(other, dev, forward, cfg.finetune.eval_batch_size)[0] is None


def test_status_and_clean(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert _run(tiny_task, runs, capsys=capsys)[0] == 0
    assert main(["status", *tiny_cli_args(tiny_task, runs)]) == 0
    out = capsys.readouterr().out
    assert "finetune-check  OK" in out
    assert main(["status", *tiny_cli_args(tiny_task, runs), "--set", "gates.min_accuracy=0.3"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "STALE" in rows["finetune-check"] and "why: parameters changed: min_accuracy" in rows["finetune-check"]
    assert "OK" in rows["finetune"]
    assert main(["status", *tiny_cli_args(tiny_task, runs), "--set", "finetune.learning_rate=0.002"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "why: parameters changed: finetune.learning_rate" in rows["finetune"]
    assert "STALE" in rows["finetune-check"] and "why: upstream finetune will run again" in rows["finetune-check"]
    assert main(["clean", "--task", "tiny", "--runs-dir", str(runs), "--stage", "finetune"]) == 0
    assert not (runs / "tiny" / "finetune").exists()


def test_package_key_covers_the_model_card_description(tiny_task):
    from pipeline.stages import package

    from pipeline.config import load_task_config

    cfg = load_task_config(str(tiny_task))
    assert package.params(cfg) != package.params(dataclasses.replace(cfg, description="another card"))


def test_kill_9_mid_finetune_resumes(tiny_task, tmp_path):
    """kill -9 during training leaves no completed record; the next run resumes from the checkpoint."""
    runs = tmp_path / "runs"
    args = [sys.executable, "-m", "pipeline", "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune",
            "--set", "finetune.epochs=40", "--set", "finetune.checkpoint_steps=5"]
    sdir = runs / "tiny" / "finetune"
    run_and_kill_at_checkpoint(args, ROOT, sdir / "work" / "*" / "checkpoint" / "state.json", 40, timeout=120)
    assert read_record(sdir) is None, "a killed stage must not look complete"
    assert not (sdir / "out").exists()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming fine-tune from step" in done.stdout
    # the estimate line counts the steps still to train, from the checkpoint on
    resumed = re.search(r"resuming fine-tune from step (\d+)/(\d+)", done.stdout)
    estimate = re.search(r"fine-tune: (\d+) steps x \d+\.\d+ s/step \(measured over steps 2-6, scaled by each step's padded "
                         r"tokens\): about \S+ in all", done.stdout)
    assert estimate and int(estimate[1]) == int(resumed[2]) - int(resumed[1]), done.stdout[-2000:]
    rec = read_record(sdir)
    assert rec.status.value == "OK" and rec.metrics["resumed_from_step"] >= 40
    assert not list(sdir.glob(".tmp-*")) and not (sdir / "work").exists()


def test_a_stage_check_fails_before_any_work(tmp_path, capsys):
    """A later stage's check (package: the bundle path holds a folder that is not ours) is said at the start, not
    after an hour of training.  (A pair task used to be this example; pair tasks now bundle: issue 39.)"""
    data = tmp_path / "afqmc"
    data.mkdir()
    for name in ("train.json", "dev.json"):
        (data / name).write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": "0"}) + "\n")
    user = tmp_path / "repo" / "afqmc"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    rc = main(["run", "--task", "afqmc", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(data),
               "--set", f"package.repository={tmp_path / 'repo'}"])
    err = capsys.readouterr().err
    assert rc == 2 and "is not an ernie-bundle bundle" in err, err
    assert not (tmp_path / "runs" / "afqmc" / "finetune").exists()


def test_a_gpu_bundle_where_no_gpu_form_runs_is_refused_before_any_work(tmp_path, capsys):
    """package.device: GPU: validate verifies the GPU form the selection names (registry.selected_form), so on a
    machine where it cannot run the run stops at the start, naming each form and why, not after compress; naming the
    form to verify (validate.chosen_backend) lifts it."""
    from pipeline.config import load_task_config
    from pipeline.stages import validate

    data = tmp_path / "afqmc"
    data.mkdir()
    for name in ("train.json", "dev.json"):
        (data / name).write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": "0"}) + "\n")
    rc = main(["run", "--task", "afqmc", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(data),
               "--set", "package.device=GPU", "--set", f"package.repository={tmp_path / 'repo'}"])
    err = capsys.readouterr().err
    assert rc == 2 and "package.device: GPU: validate verifies the bundle's GPU form on a GPU" in err, err
    assert "ort-cuda cannot run (onnxruntime has no CUDAExecutionProvider" in err and "ort-tensorrt cannot run" in err
    assert not (tmp_path / "runs" / "afqmc" / "finetune").exists()
    cfg = load_task_config("afqmc", {"package.device": "GPU", "validate.chosen_backend": "onnxruntime-cpu-int8"})
    validate.check(cfg)  # a named form: nothing to refuse here
