"""Second round of hostile-user probes of the pipeline's command line (issue 37): ``clean`` that only ever deletes
a runs directory we made, weights and YAML that cannot exhaust the machine, a FIFO at the lock's place, a full
disk, a task YAML that is not UTF-8.  Each probe is a real CLI invocation (in-process) with its exit code and its one
line; none trains a model.  Each failed on 8d8969e (the bombs by hanging: they carry a timeout)."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import threading
import time
from collections import namedtuple
from pathlib import Path

import pytest

from pipeline.run_lock import LOCK_NAME, lock_holder, run_lock
from tests.conftest import refusal_line, run_cli, tiny_cli_args


# -- 1. clean deletes only a folder a run of ours made -------------------------------------------------------------

@pytest.mark.parametrize("child", ["export", "cache", "compress", "finetune-check", "package"])
def test_clean_leaves_a_project_folder_with_a_stage_named_child(tmp_path, capsys, child):
    """`mkdir -p H/myproj/{export,src}; ernie-bundle clean --runs-dir H --task myproj` removed the project."""
    project = tmp_path / "myproj"
    (project / child).mkdir(parents=True)
    (project / "src").mkdir()
    (project / "src" / "main.py").write_text("years of work")
    rc, _, err = run_cli(capsys, "clean", "--runs-dir", str(tmp_path), "--task", "myproj")
    assert rc == 2 and f"{project} is not a runs directory made by ernie-bundle" in refusal_line(err)
    assert (project / "src" / "main.py").read_text() == "years of work"
    # a plain file with a stage's name is no marker either
    shutil.rmtree(project / child)
    (project / child).write_text("notes")
    rc, _, err = run_cli(capsys, "clean", "--runs-dir", str(tmp_path), "--task", "myproj")
    assert rc == 2 and (project / "src" / "main.py").exists()


def test_clean_runs_dir_slash_task_var_is_refused(tmp_path, capsys):
    """`--runs-dir / --task var` would have removed /var (it has a cache/).  Played on a copy of that shape, never on
    the real /var: run against a `clean` with the defect (8d8969e), this test removed the machine's /var once."""
    root = tmp_path / "root"
    for sub in ("cache/apt", "lib/dpkg", "log"):
        (root / "var" / sub).mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_text("Package: base-files\n")
    rc, _, err = run_cli(capsys, "clean", "--runs-dir", str(root), "--task", "var")
    assert rc == 2 and f"{root / 'var'} is not a runs directory made by ernie-bundle" in refusal_line(err)
    assert (root / "var" / "lib" / "dpkg" / "status").is_file() and (root / "var" / "cache" / "apt").is_dir()


def test_clean_removes_what_a_run_made_and_an_empty_folder(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "tiny" / "finetune" / "out").mkdir(parents=True)
    with run_lock(runs / "tiny"):  # what every run does first: the marker
        pass
    rc, out, _ = run_cli(capsys, "clean", "--runs-dir", str(runs), "--task", "tiny", "--stage", "finetune")
    assert rc == 0 and not (runs / "tiny" / "finetune").exists() and (runs / "tiny" / LOCK_NAME).is_file()
    rc, out, _ = run_cli(capsys, "clean", "--runs-dir", str(runs), "--task", "tiny")
    assert rc == 0 and not (runs / "tiny").exists()
    (runs / "empty").mkdir()
    rc, out, _ = run_cli(capsys, "clean", "--runs-dir", str(runs), "--task", "empty")
    assert rc == 0 and not (runs / "empty").exists()


def test_a_real_run_leaves_the_marker_clean_needs(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--only", "finetune-check")
    assert rc == 2 and "needs finetune" in err  # refused after taking the lock: the folder is ours now
    assert (runs / "tiny" / LOCK_NAME).is_file()
    rc, _, _ = run_cli(capsys, "clean", "--runs-dir", str(runs), "--task", "tiny")
    assert rc == 0 and not (runs / "tiny").exists()


def test_a_lock_name_that_is_not_a_regular_file_marks_nothing(tmp_path, capsys):
    project = tmp_path / "myproj"
    project.mkdir()
    (project / "keep").write_text("x")
    (project / LOCK_NAME).mkdir()
    rc, _, err = run_cli(capsys, "clean", "--runs-dir", str(tmp_path), "--task", "myproj")
    assert rc == 2 and (project / "keep").exists()


# -- 2. weights that expand without end ------------------------------------------------------------------------------

def _laughs(container: str, levels: int = 40):
    y: object = {} if container == "dict" else []
    for _ in range(levels):
        y = {"a": y, "b": y} if container == "dict" else [y, y]
    return y


@pytest.mark.timeout(60)
@pytest.mark.parametrize("container, levels, says", [
    ("dict", 40, "refused: containers nested over 32 deep"),
    ("list", 40, "refused: containers nested over 32 deep"),
    ("dict", 25, "refused: one dict appears at several places"),  # within the depth bound: the sharing is refused
    ("list", 25, "refused: one list appears at several places"),
])
def test_run_refuses_a_pickle_billion_laughs_in_one_line(tiny_finetuned, tiny_model_copy, tmp_path, capsys,
                                                         container, levels, says):
    weights = tiny_model_copy / "model_state.pdparams"
    weights.write_bytes(pickle.dumps(_laughs(container, levels), protocol=2))
    assert weights.stat().st_size < 1000
    t0 = time.monotonic()
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_finetuned["task_yaml"], tmp_path / "runs"),
                      "--model", str(tiny_model_copy), "--until", "finetune-check")
    assert rc == 2 and refusal_line(err).startswith(f"error: {weights}: {says}")
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(60)
def test_a_resume_checkpoint_bomb_is_refused_not_walked(tmp_path):
    """A handed-over runs dir whose fine-tune checkpoint is the bomb: refused (UnsafeWeights, one line), not read
    as 'an incompatible checkpoint' and not walked for ever."""
    import json

    from pipeline.safe_weights import UnsafeWeights
    from pipeline.training import CheckpointDir

    ckpt = CheckpointDir(tmp_path)
    ckpt.current.mkdir(parents=True)
    (ckpt.current / "state.json").write_text(json.dumps({"step": 3}))
    (ckpt.current / "model.pdparams").write_bytes(pickle.dumps(_laughs("dict", 25), protocol=2))
    class Takes:  # what the loaded arrays would be handed to: never reached
        def set_state_dict(self, state):
            raise AssertionError("the bomb was handed on")

    with pytest.raises(UnsafeWeights, match="appears at several places.*remove .* to train from the start"):
        ckpt.load(Takes(), Takes(), Takes())


def test_real_state_dicts_still_load(tiny_finetuned):
    from pipeline.safe_weights import load_state_dict

    state = load_state_dict(Path(tiny_finetuned["model_dir"]) / "model_state.pdparams")
    assert len(state) > 10


# -- 3. YAML alias bombs, 9. YAML that is not UTF-8 ------------------------------------------------------------------

def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["status", "run"])
def test_a_task_yaml_alias_bomb_is_refused_even_by_status(tiny_task, tmp_path, capsys, command):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(tiny_task.read_text() + _alias_bomb() + "description: *a8\n")
    assert bomb.stat().st_size < 3000
    rc, _, err = run_cli(capsys, command, "--task", str(bomb), "--runs-dir", str(tmp_path / "runs"))
    assert rc == 2 and "its YAML aliases expand to more than 100,000 values" in refusal_line(err)
    assert len(err) < 400


@pytest.mark.timeout(60)
def test_a_set_value_alias_bomb_is_refused(tiny_task, tmp_path, capsys):
    flow = "{" + _alias_bomb().strip().replace("\n", ", ") + "}"
    rc, _, err = run_cli(capsys, "status", "--task", str(tiny_task), "--runs-dir", str(tmp_path), "--set", f"description={flow}")
    assert rc == 2 and refusal_line(err).startswith("error: --set description: its YAML aliases expand")


@pytest.mark.timeout(60)
def test_an_act_yaml_alias_bomb_is_refused(tiny_task, tmp_path, capsys):
    act = tmp_path / "act.yaml"
    act.write_text(_alias_bomb() + "Global: {model_dir: *a8}\n")
    rc, _, err = run_cli(capsys, "status", "--task", str(tiny_task), "--runs-dir", str(tmp_path), "--act-config", str(act))
    assert rc == 2 and "act.yaml: its YAML aliases expand" in refusal_line(err)


def test_a_self_referencing_yaml_and_a_wrong_value_message_stay_short(tiny_task, tmp_path, capsys):
    cyclic = tmp_path / "cyclic.yaml"
    cyclic.write_text(tiny_task.read_text() + "description: &d [1, *d]\n")
    rc, _, err = run_cli(capsys, "status", "--task", str(cyclic), "--runs-dir", str(tmp_path))
    assert rc == 2 and "a YAML alias refers to a value that contains it" in refusal_line(err)
    # a big value where a number belongs: named, never printed whole
    big = "[" + ", ".join(["x"] * 50_000) + "]"
    rc, _, err = run_cli(capsys, "status", "--task", str(tiny_task), "--runs-dir", str(tmp_path), "--set", f"finetune.epochs={big}")
    assert rc == 2 and "finetune.epochs must be an integer" in refusal_line(err) and len(err) < 300


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_task_yaml_that_is_not_utf8_is_one_line(tiny_task, tmp_path, capsys, encoding):
    path = tmp_path / "latin.yaml"
    path.write_bytes((tiny_task.read_text() + "description: café crème\n").encode(encoding))
    for command in ("status", "run"):
        rc, _, err = run_cli(capsys, command, "--task", str(path), "--runs-dir", str(tmp_path / "runs"))
        assert rc == 2 and f"{path}: not UTF-8 text" in refusal_line(err)


# -- 7. a FIFO at the lock's place ------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_a_fifo_at_the_lock_path_neither_hangs_status_nor_crashes_run(tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "tiny").mkdir(parents=True)
    os.mkfifo(runs / "tiny" / LOCK_NAME)
    done = []
    t = threading.Thread(target=lambda: done.append(lock_holder(runs / "tiny")), daemon=True)
    t.start()
    t.join(10)
    assert done == [None], "lock_holder blocked on a FIFO"
    rc, out, _ = run_cli(capsys, "status", *tiny_cli_args(tiny_task, runs))
    assert rc == 0 and "in progress" not in out
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, runs), "--until", "finetune")
    assert rc == 2 and "the run lock" in refusal_line(err) and "not a regular file" in err
    rc, _, err = run_cli(capsys, "clean", "--runs-dir", str(runs), "--task", "tiny")
    assert rc == 2 and (runs / "tiny").is_dir()


# -- 8. a full disk ---------------------------------------------------------------------------------------------------

def _stage_raising(monkeypatch, name: str, exc: BaseException) -> None:
    import dataclasses

    from pipeline import runner

    def run(ctx):
        raise exc

    monkeypatch.setattr(runner, "STAGES", [dataclasses.replace(s, run=run) if s.name == name else s for s in runner.STAGES])


def test_no_space_in_a_stage_is_one_line_even_when_its_log_cannot_be_written(tiny_task, tmp_path, capsys, monkeypatch):
    from pipeline import runner

    _stage_raising(monkeypatch, "finetune", OSError(errno.ENOSPC, "No space left on device"))
    real = runner.atomic_write_text

    def full(path, text):
        if Path(path).name in ("stage.log", "record.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(runner, "atomic_write_text", full)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, tmp_path / "runs"), "--until", "finetune")
    assert rc == 1 and refusal_line(err).startswith(f"error: stage finetune: no space left on {tmp_path / 'runs' / 'tiny'}")


def test_a_library_error_on_a_full_disk_says_no_space(tiny_task, tmp_path, capsys, monkeypatch):
    """paddle2onnx on a full disk says "InvalidProtobuf": with no space left, the message is the disk."""
    _stage_raising(monkeypatch, "finetune", RuntimeError("[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model failed"))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 2**20, 2**20))
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, tmp_path / "runs"), "--until", "finetune")
    assert rc == 1 and "no space left on" in refusal_line(err) and "1.0 MiB free" in err
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10**12))  # room: the crash is a crash
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_task, tmp_path / "runs"), "--until", "finetune")
    assert rc == 1 and "crashed: RuntimeError" in refusal_line(err) and "INVALID_PROTOBUF" in err


def test_a_failed_checkpoint_leaves_no_partial_folder_and_stale_ones_go(tmp_path, monkeypatch):
    import paddle

    from pipeline.training import CheckpointDir, TrainState

    ckpt = CheckpointDir(tmp_path)
    stale = tmp_path / ".checkpoint-999999"  # an earlier try's, killed or out of space
    stale.mkdir()
    (stale / "model.pdparams").write_bytes(b"x" * 1000)
    (tmp_path / ".old-999999").mkdir()
    layer = paddle.nn.Linear(2, 2)
    opt = paddle.optimizer.SGD(parameters=layer.parameters())
    sched = paddle.optimizer.lr.LinearWarmup(0.1, 1, 0.0, 0.1)

    def no_space(obj, path, *a, **k):
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(paddle, "save", no_space)
    with pytest.raises(OSError):
        ckpt.save(layer, opt, sched, TrainState())
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the stale tries nor this one's partial copy
    monkeypatch.undo()
    ckpt.save(layer, opt, sched, TrainState(step=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
