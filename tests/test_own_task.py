"""A task of the user's own: ``make bundle TASK=path/to/support-tickets.yaml``, then the same ``TASK`` for every other
make target.  ``runs/``, the bundle's folder and its served models take the YAML's ``task:`` name, which need not be
its file's name: serve, smoke, loadtest and stop found no bundle, and smoke wrote ``runs/path/to/x.yaml/smoke.json``.

Real commands: ``make -n`` for what the Makefile runs, the tools' ``main([...])`` against a real tritonserver."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import pipeline  # noqa: F401  (before paddle)
from conftest import refusal_line, run_cli, write_tiny_task_yaml
from serving_fixtures import tiny_export  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent
FREE_PORTS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]


def _tsv_data(json_dir: Path, out: Path) -> Path:
    """The tiny data as a user's own often is: TSV with a header, its own column names (rows joined with tabs, as
    PaddleNLP's TSV files are: no quoting)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        rows = [json.loads(line) for line in (json_dir / f"{split}.json").read_text(encoding="utf-8").splitlines()]
        (out / f"{split}.tsv").write_text("ticket\tqueue\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in rows),
                                          encoding="utf-8")
    return out  # no labels.json: the config lists none either, so they are the train split's


def _own_yaml(path: Path, data_dir: Path, **extra) -> Path:
    data = {"dir": str(data_dir), "clue_name": None, "format": "tsv", "train_file": "train.tsv", "dev_file": "dev.tsv",
            "text_a": "ticket", "label_field": "queue"}
    return write_tiny_task_yaml(path, data_dir, data=data, **{"labels": [], "label_names": [], **extra})


@pytest.fixture(scope="module")
def own_task(tiny_finetuned, tmp_path_factory) -> Path:
    """The tiny task's config under a file name that is not its task name, its data in TSV files."""
    root = tmp_path_factory.mktemp("own_task")
    return _own_yaml(root / "support-tickets.yaml", _tsv_data(tiny_finetuned["data_dir"], root / "data"))


@pytest.fixture(scope="module")
def own_repository(tiny_export, tmp_path_factory) -> Path:
    """A model repository holding the bundle `make bundle TASK=<own_task>` packages: ``<repository>/tiny``."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("own_repo")
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, Provenance())
    return repo


def test_a_task_yaml_stands_for_its_task_name(own_task, tmp_path, capsys):
    from pipeline.config import task_name

    assert task_name(str(own_task)) == "tiny" and task_name("tnews") == "tnews"
    assert run_cli(capsys, "tasks", "--name", str(own_task))[:2] == (0, "tiny\n")
    rc, _, err = run_cli(capsys, "tasks", "--name", str(tmp_path / "missing.yaml"))
    assert rc == 2 and "task config not found" in refusal_line(err)
    rc, _, err = run_cli(capsys, "tasks", "--name", "../tnews")
    assert rc == 2 and "--name: '../tnews' is not a plain task name" in refusal_line(err)


def _make_n(*args: str) -> subprocess.CompletedProcess:
    if subprocess.run(["make", "-q", "setup"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("the venv is not up to date: make would install it first")
    return subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _command(out: str, module: str) -> str:
    lines = [" ".join(line.split()) for line in out.splitlines() if module in line]
    assert len(lines) == 1, out
    return lines[0]


def test_every_make_target_names_runs_and_the_bundle_by_the_yamls_task_name(own_task):
    done = _make_n("smoke", "loadtest", "manifests", "image-env", "perf", "replicas", f"TASK={own_task}", "REPO=repo")
    assert done.returncode == 0, done.stderr
    assert f"--task {own_task} --repository repo " in _command(done.stdout, "serving.tools.smoke")
    for module, out in (("serving.tools.smoke", "runs/tiny/smoke.json"), ("serving.tools.loadtest", "runs/tiny/loadtest.json"),
                        ("serving.tools.perf", "runs/tiny/perf.json"), ("serving.tools.replicas", "runs/tiny/replicas.json")):
        assert f"--json-out {out}" in _command(done.stdout, module)
    assert "--bundle repo/tiny --out runs/tiny/deploy" in _command(done.stdout, "serving.bundle.manifests")
    assert "--bundle repo/tiny --out .venv-image/tiny" in _command(done.stdout, "serving.image_env")
    for target in ("serve", "stop"):  # the launcher takes the name
        served = _make_n(target, f"TASK={own_task}", "REPO=repo")
        assert "--repository repo --task tiny " in _command(served.stdout, "serving.server")
    plain = _make_n("smoke", "TASK=tnews")  # a task's name is its own name: no python to ask
    assert "--task tnews --repository model_repository --json-out runs/tnews/smoke.json" in " ".join(plain.stdout.split())


def test_a_make_target_refuses_a_task_yaml_that_is_not_there(tmp_path):
    done = _make_n("smoke", f"TASK={tmp_path / 'missing.yaml'}")
    assert done.returncode == 2 and "serving.tools.smoke" not in done.stdout
    assert f"error: task config not found: {tmp_path / 'missing.yaml'}" in done.stderr
    assert "names no task" in done.stderr and "Traceback" not in done.stderr


def test_smoke_and_loadtest_take_the_task_yaml_and_find_its_bundle_and_server(own_task, own_repository, tmp_path, capsys):
    """smoke looked for <repository>/<the YAML's path>, loadtest asked for a model named after it."""
    from serving import server
    from serving.tools import loadtest, smoke

    assert server.main(["--repository", str(own_repository), "--task", "tiny", "--detach", *FREE_PORTS]) == 0  # as make serve
    try:
        state = server.ServerState.read(server.state_file((own_repository / "tiny").resolve()))
        capsys.readouterr()
        rc = smoke.main(["--task", str(own_task), "--repository", str(own_repository),
                         "--json-out", str(tmp_path / "smoke.json")])
        out, err = capsys.readouterr()
        assert rc == 0 and "PASS" in out and out.startswith("smoke tiny:"), out + err
        assert f"server: {state.http} (http), the one `make serve` started for" in err
        assert json.loads((tmp_path / "smoke.json").read_text())["examples"] == 90
        rc = loadtest.main(["--task", str(own_task), "--repository", str(own_repository), "--concurrency", "1",
                            "--seconds", "0.5", "--no-offline"])
        out, err = capsys.readouterr()
        assert rc == 0 and f"load test tiny via grpc at {state.grpc}" in out, out + err
        from serving.tools import client_cli  # python -m serving.client: no --url either, ports of the server's choosing

        rc = client_cli.main(["classify", "--model", "tiny", "--repository", str(own_repository), "--json", "体育比赛"])
        out, err = capsys.readouterr()
        assert rc == 0 and json.loads(out.splitlines()[0])["text"] == "体育比赛", out + err
        assert f"server: {state.http} (http), the one `make serve` started for" in err
    finally:
        assert server.main(["--repository", str(own_repository), "--task", "tiny", "--stop"]) == 0
    assert server.running_url(own_repository / "tiny", "http") is None


def test_the_launcher_takes_the_name_and_says_so_for_a_task_yaml(own_task, own_repository, capsys):
    """The launcher reads no task config (it runs beside a bundle alone): given the YAML, one line says how to get
    the name; `make serve TASK=<yaml>` passes the name."""
    from serving import server

    for argv in (["--detach", *FREE_PORTS], ["--stop"]):
        assert server.main(["--repository", str(own_repository), "--task", str(own_task), *argv]) == 2
        assert f"`ernie-bundle tasks --name {own_task}` prints it" in refusal_line(capsys.readouterr().err)


def test_smoke_finds_the_bundle_by_the_yamls_task_name_not_its_file_name(own_task, own_repository, tmp_path, capsys):
    from serving.tools import smoke

    other = tmp_path / "repo"
    shutil.copytree(own_repository / "tiny", other / "support-tickets")
    assert smoke.main(["--task", str(own_task), "--repository", str(other), "--url", "127.0.0.1:1"]) == 2
    assert refusal_line(capsys.readouterr().err) == (f"error: no bundle for task 'tiny' at {other / 'tiny'}: run "
                                                     f"`make bundle TASK={own_task}` first")
    (other / "tiny").mkdir()  # the task's folder, broken: refused as such, naming the file
    assert smoke.main(["--task", str(own_task), "--repository", str(other), "--url", "127.0.0.1:1"]) == 2
    assert f"{other / 'tiny'}/bundle.json: missing; not a packaged bundle" in refusal_line(capsys.readouterr().err)
    assert smoke.main(["--task", str(tmp_path / "missing.yaml"), "--repository", str(own_repository)]) == 2
    assert "task config not found" in refusal_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["news.v2", "n" * 51, "tickets-"])
def test_a_task_name_kubernetes_would_refuse_is_refused_before_any_stage_runs(tiny_finetuned, tmp_path, capsys, name):
    """The package stage names every Kubernetes object ``ernie-bundle-<task>``: a name that is no DNS-1035 label
    failed there, after fine-tuning, compress and validate (twenty minutes and more on a real model)."""
    task = write_tiny_task_yaml(tmp_path / "own.yaml", tiny_finetuned["data_dir"], task=name)
    rc, _, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"))
    assert rc == 2 and refusal_line(err).startswith(f"error: task: {name!r} would name the bundle's Kubernetes objects "
                                                    f"'ernie-bundle-{name}', not a DNS-1035 label")
    assert not (tmp_path / "runs").exists()


def test_a_bad_row_in_a_tsv_of_ones_own_stops_the_run_naming_its_line(tiny_finetuned, tmp_path, capsys):
    """A tab typed inside a text splits it into a column too many: the run stops before any stage, naming the line,
    instead of training on half a text."""
    data = _tsv_data(tiny_finetuned["data_dir"], tmp_path / "data")
    lines = (data / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = lines[4].replace("\t", "\t\t", 1)
    (data / "train.tsv").write_text("".join(lines), encoding="utf-8")
    task = _own_yaml(tmp_path / "own.yaml", data)
    rc, _, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--until", "finetune")
    assert rc == 2 and refusal_line(err) == (f"error: {data / 'train.tsv'}:5: 3 columns where the header (line 1) has "
                                             "2: a tab inside a text?")


def test_a_task_of_ones_own_needs_no_label_list(own_task, tiny_finetuned, tmp_path, capsys):
    """Neither a labels.json nor `labels:` in the config: the train split's labels, sorted, said in one line; the
    trained head whose labels they are is kept."""
    rc, out, err = run_cli(capsys, "run", "--task", str(own_task), "--runs-dir", str(tmp_path / "runs"), "--model",
                           str(tiny_finetuned["model_dir"]), "--until", "finetune")
    assert rc == 0, err
    train = own_task.parent / "data" / "train.tsv"
    assert (f"[data] labels: the 3 in {train}, sorted (no labels.json, and the task config lists none; `labels:` in it "
            "fixes their order): 100, 101, 102") in out
    assert "already has the task's 3-output head: no training needed" in out
    (own_task.parent / "data" / "label.txt").write_text("100\n101\n102\n", encoding="utf-8")  # PaddleNLP's layout
    rc, out, err = run_cli(capsys, "run", "--task", str(own_task), "--runs-dir", str(tmp_path / "runs2"), "--model",
                           str(tiny_finetuned["model_dir"]), "--until", "finetune")
    (own_task.parent / "data" / "label.txt").unlink()
    assert rc == 0 and ("`labels:` in it fixes their order; the data dir has label.txt: data.labels_file: label.txt "
                        "reads it): 100, 101, 102") in out, err


def test_the_readmes_task_of_ones_own_loads_and_reads_its_table(tiny_finetuned, tmp_path):
    """The README's example config is a config: loaded as written (its data dir moved here), it reads a TSV of its
    columns, its labels the train split's."""
    import re

    import yaml

    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# configs/support-tickets.yaml\n.*?)```", readme, re.S)
    assert block, "the README's task-of-your-own YAML example"
    raw = yaml.safe_load(block.group(1))
    data = _tsv_data(tiny_finetuned["data_dir"], tmp_path / "tickets")  # its header: ticket<TAB>queue
    raw["data"]["dir"] = str(data)
    (tmp_path / "support-tickets.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    cfg = load_task_config(str(tmp_path / "support-tickets.yaml"))
    ds = load_task_data(cfg)
    assert cfg.task == "support-tickets" and ds.labels == ("100", "101", "102") and len(ds.dev.examples) == 90
