"""Shared fixtures: tiny synthetic CLUE-format data and a tiny fine-tuned ERNIE trained on it.

The data is made here (tests never read ../shared): three classes, each with its own characters
mixed with shared filler, so a 1-layer model learns it to high accuracy in seconds and a broken
export or quantization shows up as an accuracy drop.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

import pytest

import pipeline  # noqa: F401  (must come before paddle: import order, MKL setup)

from serving.tools.client import without_grpc_fork_handlers  # noqa: E402

# Tests open gRPC clients in this process and then start tritonserver / perf_analyzer with a preexec_fn (a fork):
# gRPC's fork handlers can wait forever there (serving.tools.client.grpc_module says why); before any gRPC import.
without_grpc_fork_handlers()


@pytest.fixture(scope="session", autouse=True)
def temp_files_stay_under_pytests_basetemp(tmp_path_factory):
    """What the code under test and its servers leave in the temp dir (tritonserver logs, a killed run's work dirs)
    lands under pytest's base temp, which pytest prunes, not in /tmp.  Not the python backend's ``python_env_*``: Triton
    fixes their path, and leaves them (empty) only where a test kills a stub."""
    root = str(tmp_path_factory.mktemp("tmpdir"))
    with pytest.MonkeyPatch.context() as mp:  # restores both afterwards
        mp.setenv("TMPDIR", root)
        mp.setattr(tempfile, "tempdir", root)
        yield


LABELS = ["100", "101", "102"]
LABEL_NAMES = ["news_sports", "news_finance", "news_tech"]
CLASS_CHARS = ["球赛冠军队员比分联赛", "股票银行市场基金利率", "手机芯片电脑软件网络"]
FILLER = "的了是在有和就不人都一个上也很到说要去你会着没看好自己这"

TINY_MODEL_OVERRIDES = {
    "model.scratch.num_hidden_layers": 1,
    "model.scratch.hidden_size": 32,
    "model.scratch.num_attention_heads": 4,
    "model.scratch.intermediate_size": 64,
    "model.scratch.min_char_freq": 1,
    "finetune.epochs": 6,
    "finetune.batch_size": 16,
    "finetune.learning_rate": 3e-3,
    "finetune.checkpoint_steps": 10,
    "gates.min_accuracy": 0.5,
    "max_seq_len": 32,
}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``ernie-bundle <argv>`` in this process: its exit code, stdout and stderr."""
    from pipeline.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_and_kill_at_checkpoint(args: list[str], cwd: Path, pattern: Path, min_step: int, timeout: float = 180) -> Path:
    """Run the CLI ``args`` in its own process group and kill -9 it once a checkpoint's state.json matching the glob
    ``pattern`` (absolute) has reached ``min_step``; the state.json found (read it again: the last one written)."""
    import os
    import signal
    import subprocess
    import time

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            states = list(Path(pattern.anchor).glob(str(pattern.relative_to(pattern.anchor))))
            if states and _step(states[0]) >= min_step:
                break
            if proc.poll() is not None:
                pytest.fail("it ended before it could be killed: " + proc.stdout.read().decode()[-2000:])
            time.sleep(0.2)
        else:
            pytest.fail(f"no checkpoint at {pattern} reached step {min_step}")
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    return states[0]


def _step(state: Path) -> int:
    """A checkpoint's step; -1 when its state.json went between the glob and the read (a newer checkpoint replaces
    the directory: seen once in CI, a FileNotFoundError that failed the kill -9 test)."""
    try:
        return int(json.loads(state.read_text())["step"])
    except FileNotFoundError:
        return -1


def refusal_line(err: str) -> str:
    """The single line of a refusal (exit 2): everything on stderr, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def make_sentence(rng: random.Random, label: int) -> str:
    n = rng.randint(6, 20)
    chars = [rng.choice(CLASS_CHARS[label]) if rng.random() < 0.4 else rng.choice(FILLER) for _ in range(n)]
    if rng.random() < 0.2:
        chars.insert(rng.randint(0, len(chars)), rng.choice(["iPhone", "2024", "NBA", "A股"]))
    return "".join(chars)


def write_tiny_data(root: Path, n_train: int = 480, n_dev: int = 90, seed: int = 0) -> Path:
    """CLUE TNEWS-format JSON lines (train.json, dev.json, labels.json) under ``root``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.json", n_train), ("dev.json", n_dev)):
        with open(root / name, "w", encoding="utf-8") as f:
            for i in range(n):
                y = i % len(LABELS)
                row = {"label": LABELS[y], "label_desc": LABEL_NAMES[y], "sentence": make_sentence(rng, y), "keywords": ""}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(root / "labels.json", "w", encoding="utf-8") as f:
        for v, n in zip(LABELS, LABEL_NAMES):
            f.write(json.dumps({"label": v, "label_desc": n}) + "\n")
    return root


def write_tiny_task_yaml(path: Path, data_dir: Path, **extra) -> Path:
    """A task config for the tiny data (3 labels), in the same schema as pipeline/tasks/*.yaml."""
    import yaml

    cfg = {
        "task": "tiny",
        "type": "classification",
        "description": "synthetic 3-class test task",
        "max_seq_len": 32,
        "data": {"dir": str(data_dir), "clue_name": None, "text_a": "sentence"},
        "labels": LABELS,
        "label_names": LABEL_NAMES,
    }
    cfg.update(extra)
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def features(tok, examples):
    """Classification features of ``examples`` (the FeatureSet every pipeline entry point takes)."""
    from pipeline.kinds.classification import Classification

    return Classification().featurize(tok, examples)


@pytest.fixture
def tiny_data(tmp_path: Path) -> Path:
    return write_tiny_data(tmp_path / "data")


@pytest.fixture
def tiny_task(tmp_path: Path, tiny_data: Path) -> Path:
    return write_tiny_task_yaml(tmp_path / "tiny.yaml", tiny_data)


def tiny_cli_args(task_yaml: Path, runs_dir: Path) -> list[str]:
    args = ["--task", str(task_yaml), "--runs-dir", str(runs_dir)]
    for k, v in TINY_MODEL_OVERRIDES.items():
        args += ["--set", f"{k}={v}"]
    return args


@pytest.fixture(scope="session")
def tiny_finetuned(tmp_path_factory) -> dict:
    """Run finetune + finetune-check once per session on the tiny data.

    Returns paths: ``model_dir`` (a PaddleNLP classifier dir with vocab.txt and labels.json),
    ``data_dir``, ``task_yaml``, ``runs_dir`` and ``baseline`` (finetune-check's baseline.json).
    Tests must copy anything they modify.
    """
    from pipeline.cli import main

    root = tmp_path_factory.mktemp("tiny_finetuned")
    data_dir = write_tiny_data(root / "data")
    task_yaml = write_tiny_task_yaml(root / "tiny.yaml", data_dir)
    runs = root / "runs"
    rc = main(["run", *tiny_cli_args(task_yaml, runs), "--until", "finetune-check"])
    assert rc == 0
    model_dir = runs / "tiny" / "finetune" / "out" / "model"
    baseline = runs / "tiny" / "finetune-check" / "out" / "baseline.json"
    return {"model_dir": model_dir, "data_dir": data_dir, "task_yaml": task_yaml, "runs_dir": runs, "baseline": baseline}


@pytest.fixture
def tiny_model_copy(tiny_finetuned, tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(tiny_finetuned["model_dir"], dst)
    return dst


@pytest.fixture(scope="session")
def tiny_deep_model(tiny_finetuned, tmp_path_factory) -> Path:
    """The fixture classifier with 4 encoder layers: its own, then three perturbed copies (distinct functions), a
    depth for DynaBERT's depth pruning to cut."""
    import copy

    import numpy as np
    import paddle

    from pipeline.compress.dynabert import save_pruned
    from pipeline.modeling import load_classifier

    model = load_classifier(tiny_finetuned["model_dir"], 3)
    layers = [model.ernie.encoder.layers[0]]
    for i in range(3):
        layer = copy.deepcopy(layers[0])
        for p in layer.parameters():
            p.set_value(p.numpy() + np.random.default_rng(i).normal(0, 0.05, p.shape).astype("float32"))
        layers.append(layer)
    model.ernie.encoder.layers = paddle.nn.LayerList(layers)
    model.config.num_hidden_layers = 4
    out = tmp_path_factory.mktemp("deep") / "model"
    save_pruned(model, tiny_finetuned["model_dir"], out)
    return out


@pytest.fixture(scope="session")
def tiny_splits(tiny_finetuned) -> tuple:
    """(train, dev) examples of the tiny task, read by the pipeline's own data loader."""
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    data = load_task_data(load_task_config(str(tiny_finetuned["task_yaml"])))
    return list(data.train.examples), list(data.dev.examples)
