"""Probes of ``ernie-bundle run/status/clean/tasks/gate`` with a hostile-but-realistic user's inputs: paths where a
name belongs, links, folders that are not ours, two runs at once.  Each is a real CLI invocation with its exit code
and its one-line refusal; none trains a model except the one that needs a real run holding the lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.records import StageRecord, StageStatus, read_record
from pipeline.run_lock import LOCK_NAME, lock_holder, run_lock
from tests.conftest import refusal_line, run_cli, tiny_cli_args

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / ".venv" / "bin" / "ernie-bundle"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    return victim


def _fake_record(runs: Path, stage: str, task: str = "tiny") -> Path:
    """An OK record for ``stage`` written by hand (status and --from only read records: no training needed)."""
    sdir = runs / task / stage
    (sdir / "out").mkdir(parents=True)
    with run_lock(runs / task):  # what every run does first: the runs dir's marker (clean needs it)
        pass
    rec = StageRecord(stage=stage, status=StageStatus.OK, key="0" * 64, params={}, inputs={})
    (sdir / "record.json").write_text(rec.to_json(), encoding="utf-8")
    return sdir


# -- 1. clean removes only <runs-dir>/<plain task name> ---------------------------------------------------------

@pytest.mark.parametrize("task", ["../victim", "VICTIM_ABS", "..", ".", "/", "", "a/b", "tiny/../../victim"])
def test_clean_refuses_a_path_for_task(tmp_path, capsys, task):
    victim = _victim(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    task = str(victim) if task == "VICTIM_ABS" else task
    rc, _, err = run_cli(capsys, "clean", "--task", task, "--runs-dir", str(runs))
    assert rc == 2
    assert refusal_line(err).startswith(f"error: --task: {task!r} is not a plain task name")
    assert (victim / "thesis.tex").read_text() == "years of work" and runs.is_dir()


def test_clean_never_follows_a_link_out_of_the_runs_dir(tmp_path, capsys):
    victim = _victim(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "tiny").symlink_to(victim)
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 2 and refusal_line(err) == f"error: {runs / 'tiny'} is a symbolic link: clean neither follows nor removes it"
    # a stage directory that is a link: the same
    (runs / "tiny").unlink()
    (runs / "tiny").mkdir()
    (runs / "tiny" / "finetune").symlink_to(victim)
    rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs), "--stage", "finetune")
    assert rc == 2 and "finetune is a symbolic link" in refusal_line(err)
    assert (victim / "thesis.tex").exists() and (runs / "tiny" / "finetune").is_symlink()


def test_clean_refuses_a_folder_that_is_not_a_runs_dir(tmp_path, capsys):
    """A mistyped --runs-dir (`--runs-dir . --task pipeline`) must not delete a project's folder."""
    victim = _victim(tmp_path)
    rc, _, err = run_cli(capsys, "clean", "--task", "victim", "--runs-dir", str(tmp_path))
    assert rc == 2 and "is not a runs directory made by ernie-bundle" in refusal_line(err)
    assert (victim / "thesis.tex").exists()
    (tmp_path / "afile").write_text("x")
    rc, _, err = run_cli(capsys, "clean", "--task", "afile", "--runs-dir", str(tmp_path))
    assert rc == 2 and "is not a directory" in refusal_line(err) and (tmp_path / "afile").exists()


def test_clean_takes_a_task_yaml_like_run_and_status(tiny_task, tmp_path, capsys):
    """`--task tiny.yaml` means the YAML's task (runs/tiny), as for run and status; it used to look for
    runs/<the YAML's path> (and rmtree a file given by absolute path)."""
    runs = tmp_path / "runs"
    _fake_record(runs, "finetune")
    _fake_record(runs, "finetune-check")
    rc, out, _ = run_cli(capsys, "clean", "--task", str(tiny_task), "--runs-dir", str(runs), "--stage", "finetune-check")
    assert rc == 0 and out.strip() == f"removed {runs / 'tiny' / 'finetune-check'}"
    assert (runs / "tiny" / "finetune").is_dir()
    rc, out, _ = run_cli(capsys, "clean", "--task", str(tiny_task), "--runs-dir", str(runs))
    assert rc == 0 and not (runs / "tiny").exists() and tiny_task.is_file()
    rc, out, _ = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 0 and out.strip() == f"nothing to remove at {runs / 'tiny'}"
    rc, _, err = run_cli(capsys, "clean", "--task", str(tmp_path / "missing.yaml"), "--runs-dir", str(runs))
    assert rc == 2 and "task config not found" in refusal_line(err)


def test_make_clean_refuses_a_path(tmp_path):
    if subprocess.run(["make", "-q", "setup"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("the venv is not up to date: make would install it first")
    for task in ("..", "/", "x --runs-dir /"):
        done = subprocess.run(["make", "-s", "clean", f"TASK={task}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"error: --task: {task!r} is not a plain task name" in done.stderr
    assert (ROOT / "pipeline").is_dir()


# -- 2. task names are plain names -------------------------------------------------------------------------------

def test_a_task_name_that_is_a_path_is_refused_before_anything_is_written(tiny_task, tiny_data, tmp_path, capsys):
    from tests.conftest import write_tiny_task_yaml

    runs = tmp_path / "a" / "runs"
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--set", "task=../../escaped",
                      "--set", f"package.repository={tmp_path / 'repo'}")
    assert rc == 2 and refusal_line(err).startswith("error: task: '../../escaped' is not a plain task name")
    assert not (tmp_path / "escaped").exists() and not runs.exists() and not (tmp_path / "repo").exists()
    bad = write_tiny_task_yaml(tmp_path / "bad.yaml", tiny_data, task="../escaped")
    for command in ("run", "status"):
        rc, _, err = run_cli(capsys, command, *tiny_cli_args(bad, runs))
        assert rc == 2 and refusal_line(err).startswith("error: task: '../escaped' is not a plain task name")
    assert not (tmp_path / "a" / "escaped").exists()


@pytest.mark.parametrize("name", ["..", ".", "/abs", "a/b", "", ".hidden", "-flag", "x" * 65, "a b", "名字"])
def test_task_config_refuses_a_non_plain_name(name):
    from pipeline.config import load_task_config
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^task: .* is not a plain task name"):
        load_task_config("tnews", {"task": name})


def test_task_config_takes_plain_names():
    from pipeline.config import check_task_name, load_task_config
    from pipeline.errors import ConfigError

    for name in ("tnews", "my-task_2-v1", "x" * 50):
        assert load_task_config("tnews", {"task": name}).task == name
    for name in ("my-task_2.v1", "x" * 64):  # plain names of runs/ folders, but no Kubernetes object's (test_own_task)
        assert check_task_name(name) == name
        with pytest.raises(ConfigError, match="not a DNS-1035 label"):
            load_task_config("tnews", {"task": name})


# -- 3. package replaces only a bundle of ours ------------------------------------------------------------------

def test_package_refuses_a_user_folder_at_the_bundle_path_before_any_stage(tiny_task, tmp_path, capsys):
    repo = tmp_path / "repo"
    user = repo / "tiny"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    runs = tmp_path / "runs"
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--set", f"package.repository={repo}")
    assert rc == 2
    assert refusal_line(err).startswith(f"error: {user} exists and is not an ernie-bundle bundle")
    assert read_record(runs / "tiny" / "finetune") is None  # refused before 20 minutes of work, not after
    assert (user / "notes.txt").read_text() == "mine"
    # a bundle.json that is not ours does not make it one
    (user / "bundle.json").write_text(json.dumps({"files": {}}))
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--set", f"package.repository={repo}")
    assert rc == 2 and "is not an ernie-bundle bundle" in refusal_line(err)


def test_package_refuses_a_link_at_the_bundle_path(tiny_task, tmp_path, capsys):
    victim = _victim(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tiny").symlink_to(victim)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, tmp_path / "runs"), "--set", f"package.repository={repo}")
    assert rc == 2 and refusal_line(err).startswith(f"error: {repo / 'tiny'} is a symbolic link")
    assert (victim / "thesis.tex").exists() and (repo / "tiny").is_symlink()


def test_write_repository_replaces_only_our_bundles(tmp_path):
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, PackageError, check_replaceable, write_repository

    exported = ExportArtifacts.from_dir(tmp_path / "no-export")  # never read: the refusal comes first
    repo = tmp_path / "repo"
    user = repo / "tiny"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    with pytest.raises(PackageError, match="is not an ernie-bundle bundle"):
        write_repository(repo, "tiny", exported, PackageConfig())
    assert (user / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in repo.iterdir()) == ["tiny"]  # nothing built or renamed beside it
    with pytest.raises(PackageError, match="not a plain name"):
        write_repository(repo, "../escaped", exported, PackageConfig())
    # ours (any ernie-bundle format), an empty directory and nothing at all are replaceable
    (user / "bundle.json").write_text(json.dumps({"format": "ernie-bundle/1", "task": "tiny"}))
    check_replaceable(user)
    (repo / "empty").mkdir()
    check_replaceable(repo / "empty")
    check_replaceable(repo / "absent")


# -- 4. one run per task's runs dir ------------------------------------------------------------------------------

def test_a_second_run_clean_is_refused_while_the_lock_is_held_and_status_does_not_wait(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "tiny").mkdir(parents=True)
    with run_lock(runs / "tiny"):
        rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune")
        assert rc == 2
        assert refusal_line(err) == (f"error: cannot run: another ernie-bundle run (pid {os.getpid()}) is using "
                                 f"{runs / 'tiny'}; not waiting for it: try again when it has finished")
        assert read_record(runs / "tiny" / "finetune") is None and not (runs / "tiny" / "finetune").exists()
        rc, _, err = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
        assert rc == 2 and f"another ernie-bundle run (pid {os.getpid()})" in refusal_line(err)
        assert (runs / "tiny").is_dir()
        rc, out, _ = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
        assert rc == 0 and f"a run is in progress (pid {os.getpid()})" in out
    assert lock_holder(runs / "tiny") is None
    rc, out, _ = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
    assert rc == 0 and "in progress" not in out


def test_a_real_run_holds_the_lock_and_kill_9_leaves_none(tiny_task, tmp_path, capsys):
    """Two `ernie-bundle run`s on one runs dir: the second is refused naming the first's pid; after the first is
    killed with -9 the next run gets the lock (no stale lock to clear by hand)."""
    runs = tmp_path / "runs"
    args = [str(CLI), "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune", "--set", "finetune.epochs=200"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 120
        while lock_holder(runs / "tiny") != proc.pid:
            if proc.poll() is not None:
                pytest.fail("the run ended before it was seen holding the lock: " + proc.stderr.read().decode()[-2000:])
            if time.time() > deadline:
                pytest.fail("the run never took the lock")
            time.sleep(0.05)
        rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune")
        assert rc == 2 and f"another ernie-bundle run (pid {proc.pid}) is using {runs / 'tiny'}" in refusal_line(err)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lock_holder(runs / "tiny") is None
    # The lock is free: this run gets past it and stops on what it lacks (no training in this test).
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--only", "finetune-check")
    assert rc == 2 and "needs finetune, which has not completed" in refusal_line(err)


def test_the_lock_file_names_its_holder_until_released(tiny_task, tmp_path, capsys):
    """clean (holding the lock) removes the lock file with the directory; a later lock writes its pid and clears it."""
    runs = tmp_path / "runs"
    _fake_record(runs, "finetune")
    rc, _, _ = run_cli(capsys, "clean", "--task", "tiny", "--runs-dir", str(runs))
    assert rc == 0 and not (runs / "tiny").exists()
    (runs / "tiny").mkdir()
    with run_lock(runs / "tiny"):
        assert lock_holder(runs / "tiny") == os.getpid()
        assert (runs / "tiny" / LOCK_NAME).read_text().strip() == str(os.getpid())
    assert (runs / "tiny" / LOCK_NAME).read_text() == ""  # released: no pid left to mislead status


def test_a_lock_file_that_is_a_link_is_refused(tiny_task, tmp_path, capsys):
    victim = _victim(tmp_path)
    runs = tmp_path / "runs"
    (runs / "tiny").mkdir(parents=True)
    (runs / "tiny" / LOCK_NAME).symlink_to(victim / "thesis.tex")
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune")
    assert rc == 2 and "the run lock" in refusal_line(err) and "symbolic link" in err
    assert (victim / "thesis.tex").read_text() == "years of work"


# -- 11. status never shows OK downstream of a stage that has no record --------------------------------------------

def test_status_does_not_show_ok_below_a_missing_upstream_and_from_agrees(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    for stage in ("finetune-check", "compress"):
        _fake_record(runs, stage)  # finetune has no record (cleaned, or never ran here)
    rc, out, _ = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
    assert rc == 0
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert rows["finetune"].split()[1] == "-"
    assert rows["finetune-check"].split()[1] == "STALE"
    assert "why: upstream finetune has no OK record (it runs first)" in rows["finetune-check"]
    assert rows["compress"].split()[1] == "STALE" and "why: upstream finetune-check will run again" in rows["compress"]
    # run agrees: those records do not count as complete
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--from", "export", "--until", "export")
    assert rc == 2 and "stage 'export' needs compress, finetune-check, which has not completed" in refusal_line(err)


def test_status_below_a_failed_upstream(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    fdir = _fake_record(runs, "finetune")
    rec = read_record(fdir)
    rec.status = StageStatus.FAIL
    (fdir / "record.json").write_text(rec.to_json())
    _fake_record(runs, "finetune-check")
    rc, out, _ = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert rc == 0 and "STALE" in rows["finetune-check"] and "upstream finetune has no OK record" in rows["finetune-check"]


# -- beyond the list ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["[]", '"OK"', "null", '{"format_version": 1, "stage": "finetune", "status": "OK", '
                                  '"key": "k", "params": {}, "inputs": {}, "outputs": ["a"]}',
                                  '{"format_version": 1, "stage": "finetune", "status": "OK", "key": "k", "params": {}, '
                                  '"inputs": {}, "duration_s": "long"}'])
def test_a_hand_edited_record_reads_as_not_run(tiny_task, tmp_path, capsys, text):
    """status (and run) used to crash with a traceback on a record.json that is JSON but not a record."""
    runs = tmp_path / "runs"
    sdir = runs / "tiny" / "finetune"
    sdir.mkdir(parents=True)
    (sdir / "record.json").write_text(text)
    rc, out, err = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
    assert rc == 0 and err == ""
    assert out.splitlines()[2].split()[:2] == ["finetune", "-"]


def test_tasks_names_a_broken_task_file_and_lists_the_others(tmp_path, capsys, monkeypatch):
    import shutil

    import pipeline.config as config

    shutil.copy(config.TASKS_DIR / "tnews.yaml", tmp_path / "tnews.yaml")
    (tmp_path / "broken.yaml").write_text("task: ../broken\ntype: classification\n")
    monkeypatch.setattr(config, "TASKS_DIR", tmp_path)
    rc, out, _ = run_cli(capsys, "tasks")
    assert rc == 2
    lines = out.splitlines()
    assert lines[0].startswith("broken        error: pipeline/tasks/broken.yaml: task: '../broken' is not a plain task name")
    assert lines[1].startswith("tnews         CLUE TNEWS")


def test_a_file_where_a_stage_directory_belongs_is_refused_before_any_stage(tiny_task, tmp_path, capsys):
    """It used to be a FileExistsError traceback once that stage's turn came (after the stages before it)."""
    runs = tmp_path / "runs"
    (runs / "tiny").mkdir(parents=True)
    (runs / "tiny" / "finetune-check").write_text("not a directory")
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--set", f"package.repository={tmp_path / 'repo'}")
    assert rc == 2 and refusal_line(err) == (f"error: {runs / 'tiny' / 'finetune-check'} is a file, not a stage directory: "
                                         "move it away and run again")
    assert not (runs / "tiny" / "finetune").exists()
