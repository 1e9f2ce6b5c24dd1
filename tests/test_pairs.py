"""Sentence pairs end to end (issue 39): a pair classifier (OCNLI-shaped: sentence1, sentence2, three labels) through
every stage on tiny made-up data, packaged, served by the real Triton with ``text`` and ``text_pair``: served ==
offline on the whole dev set, the served tokenizer's pair ids equal PaddleNLP's, each malformed pair request refused
alone naming its field, the client's pair input, and the AFQMC / CMNLI / CSL configs reading pair data a user
brings.  ``package.api fastdeploy`` refuses a pair task in one line (FastDeploy's example takes single texts)."""

from __future__ import annotations

import json
import random
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import CLASS_CHARS, make_sentence
from test_kinds_e2e import _run_bundle, _serve_and_smoke

PAIR_LABELS = ["entailment", "neutral", "contradiction"]


def _pair(rng: random.Random, y: int) -> tuple[str, str]:
    """The second sentence's class is the first's (entailment), the next one (neutral) or the one after (contradiction)."""
    c = rng.randrange(len(CLASS_CHARS))
    return make_sentence(rng, c), make_sentence(rng, (c + y) % len(CLASS_CHARS))


def write_tiny_pairs(root: Path, first: str = "sentence1", second: str = "sentence2", labels=PAIR_LABELS,
                     n_train: int = 480, n_dev: int = 90, keywords: bool = False, disagreed: bool = True) -> Path:
    """CLUE pair JSON lines; ``keywords``: the second field a list of words (CSL); ``disagreed``: one row labelled "-"
    (the NLI sets' rows annotators disagreed on) per file."""
    rng = random.Random(3)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.json", n_train), ("dev.json", n_dev)):
        rows = []
        for i in range(n):
            y = i % len(labels)
            a, b = _pair(rng, y)
            rows.append(json.dumps({first: a, second: [b[:3], b[3:6], b[6:]] if keywords else b, "label": labels[y]},
                                   ensure_ascii=False))
        if disagreed:
            rows.append(json.dumps({first: "x", second: ["y"] if keywords else "y", "label": "-"}))
        (root / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def pair_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pairs")
    data = write_tiny_pairs(tmp / "data")
    task = {"task": "tinynli", "type": "classification", "max_seq_len": 32,
            "data": {"dir": str(data), "clue_name": None, "labels_file": None, "text_a": "sentence1",
                     "text_b": "sentence2", "skip_labels": ["-"]},
            "labels": PAIR_LABELS, "compress": {"strategy": "ptq"}}
    task_yaml, runs, cfg = _run_bundle(tmp, task, {"finetune.epochs": 8, "gates.min_accuracy": 0.0})
    return {"tmp": tmp, "task_yaml": task_yaml, "runs": runs, "cfg": cfg, "bundle": tmp / "repo" / "tinynli", "data": data}


def _dev(pair_bundle) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (pair_bundle["data"] / "dev.json").read_text(encoding="utf-8").splitlines()]
    return [(r["sentence1"], r["sentence2"]) for r in rows if r["label"] != "-"]


def test_a_pair_task_goes_through_every_stage_and_packages_text_and_text_pair(pair_bundle):
    meta = json.loads((pair_bundle["runs"] / "export" / "out" / "meta.json").read_text())
    assert meta["text_pair"] is True and meta["text_pair_join"] == "；"
    baseline = json.loads((pair_bundle["runs"] / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["dev_examples"] == 90  # the "-" row dropped (data.skip_labels)
    manifest = json.loads((pair_bundle["bundle"] / "bundle.json").read_text())
    assert manifest["text_pair"] is True and manifest["layout"] == "fused"
    config = (pair_bundle["bundle"] / "tinynli" / "config.pbtxt").read_text()
    assert 'name: "text_pair"' in config and "optional: true" in config


def test_served_pairs_equal_offline_on_the_whole_dev_set(pair_bundle, tmp_path, capsys):
    out = _serve_and_smoke(pair_bundle["bundle"], pair_bundle["task_yaml"], tmp_path, capsys)
    assert "90 dev examples via grpc" in out and "predictions differing: 0" in out
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["mismatches"] == 0 and result["served_accuracy"] == result["offline_accuracy"]


def _served(pair_bundle, tmp_path, layout: str = "fused"):
    from serving.server import start_server

    bundle = pair_bundle["bundle"]
    if layout != "fused":
        from serving.bundle.config import PackageConfig
        from serving.bundle.repository import ExportArtifacts, write_repository

        pc = PackageConfig(layout=layout, threads=1, max_batch_size=8, preferred_batch_size=4)
        bundle = write_repository(tmp_path / "repo", "tinynli", ExportArtifacts.from_dir(pair_bundle["runs"] / "export" / "out"),
                                  pc).path
    return start_server(bundle, log_path=tmp_path / "server.log", timeout=120)


@pytest.fixture(scope="module")
def pair_server(pair_bundle, tmp_path_factory):
    """The pair bundle served (layout fused), once for the tests that only send it requests."""
    with _served(pair_bundle, tmp_path_factory.mktemp("pair_server")) as server:
        yield server


@pytest.mark.parametrize("arrays, says", [
    ({"text": [["他去了"]]}, "text_pair: missing: this model classifies text pairs"),
    ({"text": [["他去了"]], "text_pair": [["   "]]}, "text_pair[0]: empty text_pair"),
    ({"text": [["他去了"]], "text_pair": [["长" * 30000]]}, "text_pair[0]: 90000 bytes, over the limit of 65536"),
    ({"text": [["他去了"]], "text_pair": [[b"\xff\xfe"]]}, "text_pair[0]: not valid UTF-8"),
    # Triton itself refuses inputs whose batch sizes differ, before any model code runs, naming the input
    ({"text": [["他去了"], ["他来了"]], "text_pair": [["北京"]]}, "batch size does not match other inputs"),
    ({"text": [[""]], "text_pair": [["北京"]]}, "text[0]: empty text"),
])
def test_a_malformed_pair_request_is_refused_alone_naming_its_field(pair_bundle, pair_server, arrays, says):
    """Amid good requests: only the bad one is refused, and the (shared) server keeps serving after each."""
    from serving.tools.client import BundleClient, RequestRejected

    dev, server = _dev(pair_bundle), pair_server
    with BundleClient(server.grpc_url, "grpc", "tinynli", retries=0) as client:
        answers, refused = {}, []

        def good(k):
            answers[k] = BundleClient(server.grpc_url, "grpc", "tinynli", retries=0).classify_batch([dev[k]])[0].label

        def bad():
            try:
                client.infer({k: np.array([[x.encode() if isinstance(x, str) else x for x in row] for row in v], dtype=object)
                               for k, v in arrays.items()}, ["label"])
            except RequestRejected as exc:
                refused.append(str(exc))

        threads = [threading.Thread(target=good, args=(k,)) for k in range(6)] + [threading.Thread(target=bad)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(refused) == 1 and says in refused[0], refused
        assert len(answers) == 6 and server.ready()


def test_the_served_tokenizer_gives_paddlenlps_pair_ids_on_every_dev_pair(pair_bundle, tmp_path):
    """The ensemble layout's <task>_tokenizer (the served pre-processing) against PaddleNLP's ErnieTokenizer, pair by
    pair, ids and segment ids, each request padded to its own longest pair."""
    from paddlenlp.transformers import AutoTokenizer

    from serving.tools.client import BundleClient

    tok_dir = pair_bundle["runs"] / "export" / "out" / "tokenizer"
    oracle = AutoTokenizer.from_pretrained(str(tok_dir))
    dev = _dev(pair_bundle) + [("很长的第一句" * 10, "短"), ("短", "很长的第二句" * 10), ("广州｜D2 7×9", "17.4℃ [SEP] [PAD]")]
    with _served(pair_bundle, tmp_path, layout="ensemble") as server, \
            BundleClient(server.grpc_url, "grpc", "tinynli_tokenizer", retries=0) as client:
        for start in range(0, len(dev), 7):
            chunk = dev[start : start + 7]
            out = client.infer({"text": np.array([[a.encode()] for a, _ in chunk], dtype=object),
                                 "text_pair": np.array([[b.encode()] for _, b in chunk], dtype=object)},
                                ["input_ids", "token_type_ids"])
            want = [oracle(a, b, max_length=32, truncation=True) for a, b in chunk]
            assert out["input_ids"].shape[1] == max(len(w["input_ids"]) for w in want)
            for row, w in enumerate(want):
                n = len(w["input_ids"])
                assert out["input_ids"][row, :n].tolist() == w["input_ids"], chunk[row]
                assert out["token_type_ids"][row, :n].tolist() == w["token_type_ids"], chunk[row]
                assert (out["input_ids"][row, n:] == 0).all()


def test_the_client_sends_pairs_from_flags_and_a_two_column_file(pair_bundle, pair_server, tmp_path, capsys):
    from serving.tools import client_cli as cli
    from serving.tools.client import BundleClient

    dev = _dev(pair_bundle)[:4]
    pairs_file = tmp_path / "pairs.tsv"
    pairs_file.write_text("".join(f"{a}\t{b}\n" for a, b in dev), encoding="utf-8")
    server = pair_server
    expected = [p.label for p in BundleClient(server.grpc_url, "grpc", "tinynli").classify(dev)]
    base = ["classify", "--model", "tinynli", "--protocol", "grpc", "--url", server.grpc_url, "--json"]
    assert cli.main(base + [dev[0][0], "--text-pair", dev[0][1]]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    assert (row["text"], row["text_pair"], row["label"]) == (dev[0][0], dev[0][1], expected[0])
    assert cli.main(base + ["--file", str(pairs_file)]) == 0
    assert [json.loads(line)["label"] for line in capsys.readouterr().out.strip().splitlines()] == expected
    assert cli.main(base + ["a", "b", "--text-pair", "c"]) == 2
    assert "1 --text-pair for 2 text(s)" in capsys.readouterr().err
    pairs_file.write_text("only one column\tx\tthird\n", encoding="utf-8")
    assert cli.main(base + ["--file", str(pairs_file)]) == 2
    assert "line 1: expected two tab-separated columns" in capsys.readouterr().err


def test_perf_input_carries_both_texts():
    from serving.tools.kinds import tool_kind

    row = tool_kind("classification").perf_input(("他去了北京", "他在北京"))
    assert row == {"text": {"content": ["他去了北京"], "shape": [1]}, "text_pair": {"content": ["他在北京"], "shape": [1]}}


def test_package_api_fastdeploy_refuses_a_pair_task_in_one_line(tmp_path, capsys):
    from pipeline.cli import main

    data = write_tiny_pairs(tmp_path / "data")
    rc = main(["status", "--task", "ocnli", "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs"),
               "--set", "package.api=fastdeploy"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "FastDeploy's ernie_seqcls example takes one text per item" in err[0]


@pytest.mark.parametrize("task, fields, labels, keywords, disagreed", [
    ("afqmc", ("sentence1", "sentence2"), ["0", "1"], False, False),
    ("cmnli", ("sentence1", "sentence2"), PAIR_LABELS, False, True),
    ("ocnli", ("sentence1", "sentence2"), PAIR_LABELS, False, True),
    ("csl", ("abst", "keyword"), ["0", "1"], True, False),
])
def test_each_listed_pair_task_reads_pair_data_a_user_brings(task, fields, labels, keywords, disagreed, tmp_path, capsys):
    """The shipped configs take CLUE-format pair files (CSL's keyword list joined with data.join) and start:
    finetune-check runs on the scratch model (the listed pair tasks used to stop before the first stage)."""
    from conftest import TINY_MODEL_OVERRIDES
    from pipeline.cli import main
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    data = write_tiny_pairs(tmp_path / "data", *fields, labels=labels, n_train=60, n_dev=12, keywords=keywords,
                            disagreed=disagreed)
    cfg = load_task_config(task, {"data.dir": str(data)})
    dev = load_task_data(cfg).dev.examples
    assert len(dev) == 12 and all(e.text_b for e in dev)
    if keywords:
        assert all(e.text_b.count("；") == 2 for e in dev)  # three keywords, joined
    args = ["run", "--task", task, "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs"), "--model", "",
            "--until", "finetune-check", "--set", "finetune.epochs=1", "--set", "gates.min_accuracy=0.0"]
    for k, v in TINY_MODEL_OVERRIDES.items():
        if k not in ("finetune.epochs", "gates.min_accuracy"):
            args += ["--set", f"{k}={v}"]
    assert main(args) == 0, capsys.readouterr().err
