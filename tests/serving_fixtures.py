"""Exports and bundles for the serving tests.

Every export here is the export stage's own output: ``tiny_export`` for the tiny fine-tuned classifier,
``ner_export`` and ``mrc_export`` (and the UIE export of ``tests/test_fastdeploy_api.py``) for tiny models fine-tuned
from scratch on the synthetic data below, each through finetune, finetune-check, compress and export as
``make bundle`` runs them (``run_until_export``).  So the forms the serving tests package and serve (the fixed-scale
INT8 ONNX, the OpenVINO IR) are the ones a real bundle ships.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pipeline  # noqa: F401  (numpy before paddle)
import pytest

from pipeline.contract import ExportLayout


# No size gate: a tiny model is mostly its unquantized embeddings, and its OpenVINO IR (when this CPU selects it)
# mostly XML, larger than its whole FP32 ONNX.
QUICK_EXPORT = {"compress.strategy": "ptq", "compress.throughput_batches": 1, "compress.timing_rounds": 2,
                "compress.algo_list": "[mse]", "compress.batch_size_list": "[4]", "gates.max_int8_size_ratio": "null",
                "gates.max_accuracy_drop": 100,
                # one SmoothQuant strength per engine: the recipe grids have tests of their own (test_int8.py, test_openvino.py)
                "quantization.int8_smooth_alphas": "[0.5]", "quantization.openvino_smooth_alphas": "[0.5]"}


@pytest.fixture(scope="session")
def tiny_export(tiny_finetuned, tmp_path_factory) -> Path:
    """The export stage's own output for the tiny model (compress, then export, as ``make bundle`` runs them): the
    forms the serving tests package and serve are the ones a real bundle ships."""
    from conftest import tiny_cli_args
    from pipeline.cli import main

    runs = tmp_path_factory.mktemp("tiny_export") / "runs"
    shutil.copytree(tiny_finetuned["runs_dir"], runs)
    # package.runtime names OpenVINO, so its IR ships whichever engine this CPU selects: the tests have every form
    sets = [a for k, v in {**QUICK_EXPORT, "package.runtime": "python-openvino"}.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--until", "export", *sets]) == 0
    return runs / "tiny" / "export" / "out"


def upstream_of_export(tiny_export: Path) -> tuple[dict, Path]:
    """(the records of the real run that made ``tiny_export`` that the export stage reads: compress's selection and
    shipped forms, finetune-check's reference; the run's task folder, which their artifact paths are relative to):
    a test runs export (or validate) on them, not on stand-ins."""
    from pipeline.records import read_record

    task_dir = Path(tiny_export).parent.parent
    return {name: read_record(task_dir / name) for name in ("compress", "finetune-check")}, task_dir


@pytest.fixture(scope="session")
def tiny_bundle(tiny_export, tmp_path_factory) -> Path:
    """A packaged bundle (python-onnxruntime, int8) of the tiny model; copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("tiny_repo")
    prov = Provenance(metrics={"accuracy": 1.0, "chosen_backend": "onnxruntime-int8"}, gates={"accuracy_drop": "pass"})
    pc = PackageConfig(layout="ensemble", threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, prov).path


@pytest.fixture(scope="session")
def tiny_fused_bundle(tiny_export, tmp_path_factory) -> Path:
    """The same bundle with the default package.layout (auto: fused for classification on a python runtime):
    one python model does tokenizer, model and post-processing.  Like `make bundle`'s, it carries its
    Kubernetes / KServe manifests (so every served test shows Triton takes a bundle with them)."""
    from serving.bundle.config import DeployConfig, PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("tiny_fused_repo")
    prov = Provenance(metrics={"accuracy": 1.0, "chosen_backend": "onnxruntime-int8"}, gates={"accuracy_drop": "pass"})
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, prov, deploy=DeployConfig()).path


def export_without(export: Path, dst: Path, *forms: str) -> Path:
    """A copy of ``export`` without the models of ``forms`` (``pipeline.contract.FORMS`` names): an export that
    did not make them (no QDQ form, no OpenVINO IR)."""
    import pipeline.backends.registry  # noqa: F401  (registers the engines' own forms: OpenVINO's IR)

    shutil.copytree(export, dst)
    layout = ExportLayout(dst)
    for form in forms:
        for p in layout.files(form):
            p.unlink()
    return dst


# -- token classification (NER) and reading comprehension (MRC) data ------------------------------------------------
# CLUENER / SQuAD-format files the tiny models are fine-tuned on and served with.

NER_TYPES = ("company", "name")  # sorted, as readers.entity_types gives them
NER_WORDS = {"name": ["叶老桂", "张三丰", "李小龙", "王大明", "赵子龙"], "company": ["浙商银行", "华为公司", "小米科技", "阿里巴巴"]}
SPAN_FILLER = "的了是在有和就人都一个上也很到说要去会着没看好自己这今天我们他说过年前后来大家"


def _rng(seed: int):
    import random

    return random.Random(seed)


def write_cluener_dev(path: Path, n: int = 40, seed: int = 0) -> Path:
    """CLUENER2020 JSON lines (inclusive ends) with name/company entities in filler text."""
    rng = _rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text, label = "", {}
            for _ in range(rng.randint(1, 3)):
                text += "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(1, 8)))
                if i % 7 == 3:
                    text += rng.choice(["iPhone", "NBA", "2024年"])  # wordpieces wider than one char
                etype = rng.choice(NER_TYPES)
                word = rng.choice(NER_WORDS[etype])
                label.setdefault(etype, {}).setdefault(word, []).append([len(text), len(text) + len(word) - 1])
                text += word
            text += "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(0, 6)))
            if i == 5:
                text = text + "。" * 40  # longer than max_seq_len tokens: truncated like offline
            f.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    return path


def write_squad_dev(path: Path, n_contexts: int = 10, seed: int = 0) -> Path:
    """SQuAD v1 JSON: contexts of 20-120 chars (several windows at max_seq_len 48), 2 questions each."""
    rng = _rng(seed)
    paragraphs = []
    for c in range(n_contexts):
        context = "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(20, 120)))
        if c == 2:
            context = "NBA比赛iPhone发布" + context
        qas = []
        for q in range(2):
            start = rng.randint(0, len(context) - 4)
            answer = context[start : start + rng.randint(1, 4)]
            question = "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(3, 20))) + "？"
            qas.append({"id": f"c{c}q{q}", "question": question, "answers": [{"text": answer, "answer_start": start}]})
        paragraphs.append({"context": context, "qas": qas})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "v1", "data": [{"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False),
                    encoding="utf-8")
    return path


def _data_dir_of_dev(root: Path, write, train_file: str) -> Path:
    """A data dir whose dev set (written by ``write``) is also its training file: the task loader reads both."""
    write(root / "dev.json")
    shutil.copyfile(root / "dev.json", root / train_file)
    return root


@pytest.fixture(scope="session")
def ner_data(tmp_path_factory) -> Path:
    return _data_dir_of_dev(tmp_path_factory.mktemp("cluener_data"), write_cluener_dev, "train.json")


def run_until_export(root: Path, task: dict, epochs: int = 12) -> Path:
    """finetune (a tiny scratch model), finetune-check, compress and export of ``task`` (a task config) as
    ``make bundle`` runs them, with the quick compress settings: the export directory a real bundle is packaged
    from."""
    import yaml

    from conftest import TINY_MODEL_OVERRIDES
    from pipeline.cli import main

    task_yaml = root / f"{task['task']}.yaml"
    task_yaml.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    sets = {**TINY_MODEL_OVERRIDES, **QUICK_EXPORT, "max_seq_len": task["max_seq_len"], "finetune.epochs": epochs,
            "gates.min_accuracy": 0.0}
    args = ["run", "--task", str(task_yaml), "--runs-dir", str(root / "runs"), "--until", "export"]
    assert main([*args, *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]) == 0
    return root / "runs" / task["task"] / "export" / "out"


@pytest.fixture(scope="session")
def ner_export(ner_data, tmp_path_factory) -> Path:
    """The export stage's own output for a tiny token classifier fine-tuned from scratch on ``ner_data`` (as
    ``make bundle TASK=cluener`` runs the stages up to export): the NER serving tests serve the forms a real bundle
    ships, not a stand-in."""
    return run_until_export(tmp_path_factory.mktemp("ner_export"), {
        "task": "cluener", "type": "token_classification", "max_seq_len": 32, "labels": list(NER_TYPES),
        "data": {"dir": str(ner_data), "format": "cluener", "labels_file": None}})


@pytest.fixture(scope="session")
def ner_bundle(ner_export, tmp_path_factory) -> Path:
    """Packaged cluener bundle (python-onnxruntime, int8, layout ensemble: tokenizer, model and post-processing
    models); copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096, layout="ensemble")
    return write_repository(tmp_path_factory.mktemp("ner_repo"), "cluener", ExportArtifacts.from_dir(ner_export), pc).path


@pytest.fixture(scope="session")
def mrc_data(tmp_path_factory) -> Path:
    return _data_dir_of_dev(tmp_path_factory.mktemp("cmrc_data"), write_squad_dev, "trial.json")


@pytest.fixture(scope="session")
def mrc_export(mrc_data, tmp_path_factory) -> Path:
    """The export stage's own output for a tiny reading-comprehension model fine-tuned from scratch on ``mrc_data``
    (as ``make bundle TASK=cmrc2018`` runs the stages up to export)."""
    return run_until_export(tmp_path_factory.mktemp("mrc_export"), {
        "task": "cmrc2018", "type": "reading_comprehension", "max_seq_len": 48,
        "data": {"dir": str(mrc_data), "format": "squad", "train_file": "trial.json", "dev_file": "dev.json",
                 "labels_file": None},
        "reading": {"doc_stride": 10, "max_query_len": 12, "max_answer_len": 8}})


@pytest.fixture(scope="session")
def mrc_bundle(mrc_export, tmp_path_factory) -> Path:
    """Packaged cmrc2018 bundle (python-onnxruntime, int8); copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096)
    return write_repository(tmp_path_factory.mktemp("mrc_repo"), "cmrc2018", ExportArtifacts.from_dir(mrc_export), pc).path


@pytest.fixture(scope="session")
def tiny_dev(tiny_finetuned) -> tuple[list[str], list[str]]:
    """The tiny dev set's texts and labels, as its dev.json holds them."""
    rows = [json.loads(line) for line in (tiny_finetuned["data_dir"] / "dev.json").read_text(encoding="utf-8").splitlines()]
    return [r["sentence"] for r in rows], [r["label"] for r in rows]


def dev_examples(task: str, data_fixture: str, kind: str):
    """A module fixture: the dev examples validate scored for ``task`` on ``data_fixture``'s data (read as the smoke
    test reads them: for reading comprehension the held-out part of dev, ``reading.dev_for_training``)."""
    @pytest.fixture(scope="module")
    def dev(request):
        from serving.tools.smoke import dev_data

        return list(dev_data(task, request.getfixturevalue(data_fixture), kind).dev.examples)
    return dev


def opened_bundle(bundle_fixture: str):
    """A module fixture: ``bundle_fixture``'s bundle opened offline (``serving.tools.offline.BundleModel``)."""
    @pytest.fixture(scope="module")
    def bundle(request):
        from serving.tools.offline import BundleModel

        return BundleModel.open(request.getfixturevalue(bundle_fixture))
    return bundle


def served(bundle_fixture: str):
    """A module fixture: a tritonserver serving ``bundle_fixture``'s bundle.  Stopped, it must exit 0 and leave nothing
    in the bundle but the bytecode Triton's stubs cache (their interpreters ignore PYTHONDONTWRITEBYTECODE), which
    the launcher clears before the next start."""
    @pytest.fixture(scope="module")
    def server(request, tmp_path_factory):
        from serving.server import start_server
        from serving.triton.integrity import clear_bytecode, verify_bundle

        bundle = request.getfixturevalue(bundle_fixture)
        srv = start_server(bundle, log_path=tmp_path_factory.mktemp(f"triton_{bundle_fixture}") / "server.log", timeout=120)
        yield srv
        assert srv.stop() == 0, srv.log_tail()
        verify_bundle(bundle, allow_bytecode=True)
        clear_bytecode(bundle)
        verify_bundle(bundle)
    return server


def concurrently(items: list, open_client, ask, clients: int = 6) -> list:
    """``ask(client, item)`` for every item, from ``clients`` threads at once, each with its own ``open_client()``
    (thread k asks items k, k + clients, ...); the answers in the items' order.  Fails on any thread's error."""
    import threading

    got, errors = [None] * len(items), []

    def worker(k):
        try:
            with open_client() as client:
                for i in range(k, len(items), clients):
                    got[i] = ask(client, items[i])
        except Exception as exc:  # noqa: BLE001  (raised below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return got


def tool_or_skip(find, error: type, require_env: str):
    """``find()`` (an external tool the tests drive), or a skip naming what is missing; never a skip where
    ``require_env`` is set (`make test` and .ci/run set it: there a missing tool fails)."""
    import os

    try:
        return find()
    except error as exc:
        if os.environ.get(require_env):
            raise
        pytest.skip(str(exc))


def servers_on(repository: Path) -> list[int]:
    """The pids of processes serving ``repository`` (a tritonserver started with it), from /proc."""
    from serving.procfs import cmdline, processes

    return [p.pid for p in processes() if f"--model-repository={repository}".encode() in (cmdline(p.pid) or [])]


_SAMPLE = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape_series(srv, prefixes=("ernie_bundle_",)) -> dict[tuple[str, frozenset], float]:
    """The series on the server's /metrics whose names start with one of ``prefixes``, each as exported (label values
    unescaped): (name, labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).read().decode()
    unescape = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1).startswith(tuple(prefixes)):
            labels = {k: re.sub(r'\\.', lambda e: unescape[e.group(0)], v) for k, v in _LABEL.findall(m.group(2) or "")}
            out[m.group(1), frozenset(labels.items())] = float(m.group(3))
    return out


def scrape_ours(srv) -> dict[tuple[str, frozenset], float]:
    """Our series on the server's /metrics summed over the stub processes that count them (labels model_instance and
    pid), as a dashboard sums them: (name, labels) -> value."""
    out = {}
    for (name, labels), value in scrape_series(srv).items():
        labels = dict(labels)
        assert labels.pop("model_instance") and labels.pop("pid"), (name, labels)  # every series is one process's
        key = (name, frozenset(labels.items()))
        out[key] = out.get(key, 0.0) + value
    return out


def quiet_scrape(srv, timeout: float = 10.0):
    """Our series once no count is pending: two scrapes a flush apart agree (earlier requests' counts reach Triton
    within a second of them)."""
    from serving.triton.served_metrics import FLUSH_SECONDS

    deadline, last = time.monotonic() + timeout, scrape_ours(srv)
    while True:
        time.sleep(FLUSH_SECONDS + 0.2)
        now = scrape_ours(srv)
        if now == last or time.monotonic() > deadline:
            return now
        last = now


def settled_scrape(srv, want, timeout: float = 10.0):
    """The scrape once ``want(samples)`` holds (counts reach Triton within a second), else the last one."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape_ours(srv)
        if want(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)
