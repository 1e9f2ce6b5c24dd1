"""Third round of hostile-user probes (issue 59): ``clean`` that removes only what runs made (a run refuses a folder it
did not make; a forged or old mark beside a user's files keeps them), 100,000 labels, hostile JSON in the release
gate's reports, reports of another task, bundle copies a killed ``package`` left, and text pairs the served model
refuses.  Each probe is a real entry point (the CLI in-process, the gate, the loader, write_repository) with its
exit code and its one line; none trains a model.  Each failed on a833ff5 (the labels by hanging: it has a timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import DataError
from pipeline import run_lock as runs_mark  # its MARKER_NAME / MARKER_HEAD: the mark a run writes
from pipeline.run_lock import LOCK_NAME, run_lock
from tests.conftest import LABELS, tiny_cli_args, write_tiny_data, write_tiny_task_yaml


from tests.conftest import refusal_line, run_cli  # noqa: E402  (the probes' CLI runner and one-line check)


# -- 1. clean removes only what runs made ----------------------------------------------------------------------------

def _user_folder(proj: Path) -> tuple[Path, Path]:
    """``mkdir -p proj/tiny`` holding the user's data and notes, and a task YAML reading its data from there."""
    folder = write_tiny_data(proj / "tiny", n_train=30, n_dev=9)
    (folder / "notes").write_text("years of work")
    return folder, write_tiny_task_yaml(proj.parent / "tiny.yaml", folder)


def _intact(folder: Path) -> bool:
    return (folder / "notes").read_text() == "years of work" and (folder / "train.json").is_file() and \
        (folder / "dev.json").is_file()


def test_a_run_refuses_a_user_folder_and_clean_then_keeps_it(tmp_path, capsys):
    """`run --data-dir proj/tnews --runs-dir proj` wrote its lock into the user's folder (the mark clean trusted):
    `clean` then removed proj/tnews, data, notes and all."""
    proj = tmp_path / "proj"
    folder, task_yaml = _user_folder(proj)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(task_yaml, proj), "--only", "finetune-check")
    assert rc == 2 and refusal_line(err) == (
        f"error: {folder} exists and is not a runs directory made by ernie-bundle (it holds dev.json, which no run "
        "writes): not writing into it; choose another --runs-dir (or move what is there away)")
    assert sorted(p.name for p in folder.iterdir()) == ["dev.json", "labels.json", "notes", "train.json"]  # no lock
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(proj))
    assert rc == 2 and f"{folder} is not a runs directory made by ernie-bundle" in refusal_line(err)
    assert _intact(folder)


@pytest.mark.parametrize("mark", ["empty lock", "lock with a pid", "forged mark"])
def test_a_forged_or_old_mark_beside_a_users_files_keeps_them(tmp_path, capsys, mark):
    proj = tmp_path / "proj"
    folder, _ = _user_folder(proj)
    if mark == "forged mark":
        (folder / runs_mark.MARKER_NAME).write_text(runs_mark.MARKER_HEAD + "\n")
    else:
        (folder / LOCK_NAME).write_text("" if mark == "empty lock" else "4242\n")
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(proj))
    assert rc == 2 and refusal_line(err) == (f"error: {folder} holds dev.json, which no ernie-bundle run writes: not "
                                          f"removing {folder}; move it away first (or check --runs-dir and --task)")
    assert _intact(folder)
    (folder / "finetune").mkdir()
    (folder / "finetune" / "model.bin").write_text("the user's")  # a stage-named folder with a user's file in it
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(proj), "--stage", "finetune")
    assert rc == 2 and "holds finetune/model.bin, which no ernie-bundle run writes" in refusal_line(err)
    assert (folder / "finetune" / "model.bin").is_file() and _intact(folder)


def test_a_run_marks_the_folder_it_makes_and_clean_removes_only_that(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--only", "finetune-check")
    assert rc == 2 and "needs finetune" in refusal_line(err)
    assert (runs / "tiny" / runs_mark.MARKER_NAME).read_text().splitlines()[0] == runs_mark.MARKER_HEAD
    (runs / "tiny" / "thesis.tex").write_text("dropped in later")  # a real mark does not make a user's file ours
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 2 and "holds thesis.tex, which no ernie-bundle run writes" in refusal_line(err)
    (runs / "tiny" / "thesis.tex").unlink()
    rc, _, _ = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 0 and not (runs / "tiny").exists()


def test_a_runs_folder_of_the_previous_version_still_runs_and_cleans(tiny_task, tmp_path, capsys):
    """Made before the mark: the lock file (empty once released), stage folders, the cache, make perf's report."""
    runs = tmp_path / "runs"
    task_dir = runs / "tiny"
    (task_dir / "finetune" / "out").mkdir(parents=True)
    (task_dir / "finetune" / "record.json").write_text("{}")
    (task_dir / "finetune" / ".tmp-0a1b2c3d").mkdir()
    (task_dir / "cache" / "int8").mkdir(parents=True)
    (task_dir / "perf.json").write_text("{}")
    with run_lock(task_dir):  # what the previous version's runs left: an empty lock file
        pass
    assert not (task_dir / runs_mark.MARKER_NAME).exists()
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--only", "finetune-check")
    assert rc == 2 and "needs finetune" in refusal_line(err)  # accepted (and marked): it got as far as the stages
    assert (task_dir / runs_mark.MARKER_NAME).is_file()
    rc, _, _ = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 0 and not task_dir.exists()
    # a folder make perf wrote before any run is a run's too
    (task_dir / "deploy").mkdir(parents=True)
    (task_dir / "perf.json").write_text("{}")
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--only", "finetune-check")
    assert rc == 2 and "needs finetune" in refusal_line(err) and (task_dir / runs_mark.MARKER_NAME).is_file()


# -- 4. 100,000 labels -------------------------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_a_hundred_thousand_labels_are_read_at_once(tmp_path, capsys):
    from pipeline.labels_file import read_labels

    many = [f"L{i}" for i in range(100_000)]
    path = tmp_path / "labels.json"
    path.write_text("".join(json.dumps({"label": x}) + "\n" for x in many))
    assert read_labels(path, DataError) == many
    path.write_text(json.dumps(many + ["L7", "L99999"]))
    with pytest.raises(DataError, match=r"labels.json: duplicate labels \['L7', 'L99999'\]"):
        read_labels(path, DataError)
    # through a run: the file is read, found not to be the task's labels, and refused in one line
    data = write_tiny_data(tmp_path / "data", n_train=30, n_dev=9)
    (data / "labels.json").write_text("".join(json.dumps({"label": x}) + "\n" for x in many))
    task_yaml = write_tiny_task_yaml(tmp_path / "tiny.yaml", data)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(task_yaml, tmp_path / "runs"), "--until", "finetune")
    assert rc == 2 and "labels.json: label set does not match task 'tiny' config (100000 vs 3 labels" in refusal_line(err)


@pytest.mark.timeout(30)
def test_rows_find_their_label_among_a_hundred_thousand_at_once(tmp_path):
    """The data loader looked each row's label up in a tuple (twice): rows x labels."""
    from pipeline.data import split_examples, split_rows

    class Cfg:
        class data:
            label_field, text_a, text_b, join, skip_labels = "label", "sentence", None, "；", []
            format, columns = "clue", None

    labels = tuple(f"L{i}" for i in range(100_000))
    path = tmp_path / "train.json"
    path.write_text("".join(json.dumps({"label": f"L{99_999 - i}", "sentence": "字"}) + "\n" for i in range(20_000)))
    split = split_examples(Cfg, path, "train", split_rows(Cfg, path), labels)
    assert len(split.examples) == 20_000 and split.examples[0].label == 99_999


# -- 6. hostile JSON in the release gate's reports ---------------------------------------------------------------------

def _gates_text(task: str = '"tiny"', accuracy: str = "0.5", rate: str = "100", ratio: str = "3.0", extra: str = "") -> str:
    return (f'{{"task": {task}, "chosen_backend": "onnxruntime-cpu-int8", "summary": {{"accuracy": '
            f'{accuracy}, "sentences_per_s": {rate}, "throughput_ratio": {ratio}}}{extra}}}')


def _perf_text(model: str = "tiny", median: str = "0.9", items: str = "1", extra: str = "") -> str:
    return (f'{{"model": {json.dumps(model)}, "summary": [{{"items_per_request": {items}, "concurrency": 1, '
            f'"served_over_ceiling": {{"median": {median}}}}}]{extra}}}')


def _gate(tmp_path, capsys, task_yaml, gates: str, perf: str | None = None, baseline_gates: str | None = None,
          baseline_perf: str | None = None) -> tuple[int, str, str]:
    from pipeline.validation.release import main as gate_main

    cur, base = tmp_path / "gates.json", tmp_path / "prev-gates.json"
    cur.write_text(gates)
    base.write_text(baseline_gates or gates)
    argv = ["--task", str(task_yaml), "--baseline", str(base), "--current", str(cur)]
    if perf is not None:
        (tmp_path / "perf.json").write_text(perf)
        (tmp_path / "prev-perf.json").write_text(baseline_perf or perf)
        argv += ["--current-perf", str(tmp_path / "perf.json"), "--baseline-perf", str(tmp_path / "prev-perf.json")]
    rc = gate_main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("gates, says", [
    (_gates_text(rate="9" * 401), "summary.sentences_per_s is a 401-digit integer: no report holds such a number"),
    (_gates_text(ratio="1" * 5001), "summary.throughput_ratio is a 5001-digit integer: no report holds such a number"),
    (_gates_text(accuracy="-" + "1" * 5001), "summary.accuracy is a 5001-digit integer"),
    (_gates_text(extra=', "notes": ' + DEEP), "not a JSON report (nested too deep to read)"),
    (_gates_text(accuracy="[" * 900 + "]" * 900), "summary.accuracy must be a number, got [[[["),
    (_gates_text(task="[" * 900 + "]" * 900), "task must be the task's name, got [[[["),
])
def test_hostile_numbers_and_nesting_in_gates_json_are_bad_input_in_one_line(tiny_task, tmp_path, capsys, gates, says):
    rc, _, err = _gate(tmp_path, capsys, tiny_task, gates)
    line = refusal_line(err)
    assert rc == 2 and line.startswith(f"error: {tmp_path / 'gates.json'}: ") and says in line, line


@pytest.mark.parametrize("perf, says", [
    (_perf_text(median="9" * 401), "summary[0]: needs served_over_ceiling.median > 0, got a 401-digit integer"),
    (_perf_text(items="9" * 5001), "summary[0].items_per_request must be a whole number from 1 to 2**31, got a 5001-digit"),
    (_perf_text(items="9" * 40), "summary[0].items_per_request must be a whole number from 1 to 2**31, got 9999"),
    (_perf_text(extra=', "cpu": ' + DEEP), "not a JSON perf report (nested too deep to read)"),
])
def test_hostile_numbers_and_nesting_in_perf_json_are_bad_input_in_one_line(tiny_task, tmp_path, capsys, perf, says):
    rc, _, err = _gate(tmp_path, capsys, tiny_task, _gates_text(), perf)
    line = refusal_line(err)
    assert rc == 2 and line.startswith(f"error: {tmp_path / 'perf.json'}: ") and says in line, line


# -- 11. the reports must be the task's --------------------------------------------------------------------------------

def test_another_tasks_reports_do_not_pass_the_gate(tiny_task, tmp_path, capsys):
    """`gate --task tnews` with OCNLI's gates.json and perf.json passed."""
    rc, out, _ = _gate(tmp_path, capsys, tiny_task, _gates_text(), _perf_text())
    assert rc == 0 and "release gate passed" in out
    rc, _, err = _gate(tmp_path, capsys, tiny_task, _gates_text(task='"ocnli"'))
    assert rc == 2 and refusal_line(err) == (
        f"error: {tmp_path / 'gates.json'}: the current report is for task 'ocnli', but --task is 'tiny': pass the "
        "reports of task tiny (the same task)")
    rc, _, err = _gate(tmp_path, capsys, tiny_task, _gates_text(), _perf_text(model="ocnli"))
    assert rc == 2 and refusal_line(err) == (
        f"error: {tmp_path / 'perf.json'}: the current perf report is for task 'ocnli', but --task is 'tiny': pass the "
        "reports of task tiny (the same task)")
    # a FastDeploy-API bundle's perf report names FastDeploy's model, not the task: its gates.json still must be ours
    fastdeploy = _perf_text(model="ernie_seqcls", extra=', "package": {"api": "fastdeploy"}')
    rc, out, _ = _gate(tmp_path, capsys, tiny_task, _gates_text(), fastdeploy)
    assert rc == 0 and "release gate passed" in out


# -- 9. bundle copies a killed package left ----------------------------------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: no zombie answers for it
    return proc.pid


def test_a_later_package_sweeps_the_copies_killed_packages_left(tmp_path):
    from serving.bundle.repository import ExportArtifacts, PackageError, write_repository

    repo = tmp_path / "repo"
    repo.mkdir()
    dead, live = _dead_pid(), os.getpid()

    def copy(name: str, age_s: float = 0.0) -> Path:
        path = repo / name
        (path / "tiny_model" / "1").mkdir(parents=True)
        (path / "tiny_model" / "1" / "model.onnx").write_bytes(b"\0" * 1024)
        if age_s:
            t = path.stat().st_mtime - age_s
            os.utime(path, (t, t))
        return path

    stale = [copy(f".tiny.tmp-{dead}-0a1b2c3d"), copy(f".tiny.old-{dead}-deadbeef"), copy(".tiny.tmp-1234abcd", 7200)]
    kept = [copy(f".tiny.tmp-{live}-0a1b2c3d"),  # a live package's
            copy(f".other.tmp-{dead}-0a1b2c3d"),  # another task's
            copy(".tiny.old-5678abcd"),  # named before pids, and young: perhaps being written
            copy(f".tiny.tmp-{dead}-0a1b2c3d-mine")]  # not the pattern
    (repo / ".tiny.tune.json").write_text("{}")
    with pytest.raises(PackageError):  # no export there: it stops after the sweep
        write_repository(repo, "tiny", ExportArtifacts.from_dir(tmp_path / "no-export"), None)
    assert not any(p.exists() for p in stale)
    assert all(p.is_dir() for p in kept) and (repo / ".tiny.tune.json").is_file()


def test_a_packages_copies_carry_its_pid():
    from serving.bundle.repository import _scratch_path

    for what in ("tmp", "old"):
        name = _scratch_path(Path("/repo"), "tnews", what).name
        assert name.startswith(f".tnews.{what}-{os.getpid()}-") and len(name.rsplit("-", 1)[1]) == 8


# -- 10. a text the served model refuses is neither trained on nor scored ----------------------------------------------

def _pairs(root: Path, second, keywords: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("train.json", "dev.json"):
        rows = [{"sentence1": "球赛冠军", "sentence2": ["手机", "芯片"] if keywords else "股票银行", "label": "0"}] * 5
        rows.insert(2, {"sentence1": "球赛冠军", "sentence2": second, "label": "1"})
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # \ud800 stays escaped
    return root


@pytest.mark.parametrize("second, says", [("", "is empty"), ("   ", "is only whitespace"), ([], "is empty"),
                                          ("\ud800", "is not encodable as UTF-8")])
def test_a_pair_the_served_model_refuses_is_refused_naming_its_line(tmp_path, second, says):
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    data = _pairs(tmp_path / "data", second)
    cfg = load_task_config("afqmc", {"data.dir": str(data)})
    with pytest.raises(DataError) as info:
        load_task_data(cfg)
    message = str(info.value)
    assert message.startswith(f"{data / 'train.json'}:3: field 'sentence2' {says}") and "the served model refuses" in message


def test_csl_with_an_empty_keyword_list_is_refused_naming_its_line(tmp_path):
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    data = tmp_path / "csl"
    data.mkdir()
    for name in ("train.json", "dev.json"):
        rows = [{"abst": "一篇摘要", "keyword": ["手机", "芯片"], "label": "1"}] * 4
        rows.insert(1, {"abst": "一篇摘要", "keyword": [], "label": "0"})
        (data / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"train.json:2: field 'keyword' is empty: the served model refuses"):
        load_task_data(load_task_config("csl", {"data.dir": str(data)}))


def test_smoke_names_the_dev_line_of_an_example_the_server_would_refuse(tmp_path):
    from pipeline.data import Example
    from serving.tools.smoke import refused_example

    manifest = {"package": {"max_text_bytes": 64}}
    examples = [Example("球赛", "冠军", 0, "dev.json:1"), Example("球赛", "股" * 30, 1, "dev.json:2")]
    assert refused_example(examples, manifest) == (
        "dev.json:2: the served model refuses this dev example's text_pair (90 bytes, over the limit of 64): fix or "
        "remove the row")
    assert refused_example(examples[:1], manifest) is None
    assert "dev.json:5: the served model refuses this dev example's text (empty text)" in \
        refused_example([Example("  ", None, 0, "dev.json:5")], {})


def test_smoke_on_the_bundles_own_data_names_the_refused_dev_line(tmp_path):
    """The dev data the bundle was built from is there: its error (file:line) is the message, not "which is not
    there"."""
    from serving.tools.smoke import _load_dev

    data = write_tiny_data(tmp_path / "data", n_train=30, n_dev=9)
    lines = (data / "dev.json").read_text(encoding="utf-8").splitlines()
    lines[3] = json.dumps({"label": LABELS[0], "sentence": " "})
    (data / "dev.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    task_yaml = write_tiny_task_yaml(tmp_path / "tiny.yaml", tmp_path / "elsewhere")
    with pytest.raises(DataError) as info:
        _load_dev(str(task_yaml), None, [], {"source": {"data_dir": str(data)}})
    assert str(info.value).startswith(f"{data / 'dev.json'}:4: field 'sentence' is only whitespace")
    assert "which is not there" not in str(info.value)
