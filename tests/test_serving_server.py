"""A real Triton server (the nvidia-pytriton tritonserver binary) on the tiny model's bundle, over HTTP and gRPC.

The server starts once for the module (about 4 s) on free 127.0.0.1 ports and is shut down at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from serving_fixtures import (concurrently, served, tiny_bundle, tiny_dev, tiny_export,  # noqa: F401  (fixtures)
                              tiny_fused_bundle, tool_or_skip)

from serving.tools.client import BundleClient, RequestRejected
from serving.server import ServerError, start_server

SERVING = Path(__file__).resolve().parent.parent / "serving"
ROOT = SERVING.parent


server = served("tiny_bundle")
fused_server = served("tiny_fused_bundle")


LAYOUTS = pytest.mark.parametrize("layout", ["server", "fused_server"])  # ensemble, and package.layout fused


dev = tiny_dev  # (texts, labels)


@pytest.fixture(scope="module")
def offline(tiny_bundle):
    from serving.tools.offline import BundleModel

    return BundleModel.open(tiny_bundle)


def _clients(server):
    return {"http": BundleClient(server.http_url, "http", "tiny", retries=0),
            "grpc": BundleClient(server.grpc_url, "grpc", "tiny", retries=0)}


@LAYOUTS
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_labels_equal_offline_model(layout, request, dev, offline, protocol):
    from serving.tools.offline import offline_logits

    server = request.getfixturevalue(layout)
    texts, gold = dev
    client = _clients(server)[protocol]
    assert client.health() == {"live": True, "ready": True, "model_ready": True}
    preds = client.classify(texts, batch_size=8)  # max_batch_size of this bundle
    logits = offline_logits(offline, texts)
    labels = offline.labels()
    assert [p.label for p in preds] == [labels[i] for i in logits.argmax(-1)]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.array([p.probs for p in preds]), probs, atol=1e-4)
    assert np.mean([p.label == g for p, g in zip(preds, gold)]) > 0.9  # the tiny model is good at its task
    p = preds[0]
    assert p.label_desc in ("news_sports", "news_finance", "news_tech")
    assert p.confidence == pytest.approx(max(p.probs), abs=1e-6)
    assert len(p.top_k) == 2 and p.top_k[0] == (p.label, pytest.approx(p.confidence, abs=1e-6))


def test_served_token_ids_equal_pipeline_tokenizer(server, offline):
    import tritonclient.http as th

    from paddlenlp.transformers import AutoTokenizer

    texts = ["球赛冠军", "iPhone 15 发布了！NBA总决赛", "A股  大涨\t3%", "ＡＢＣ全角", "混合English和中文words", "冠军" * 40]
    symbols = ["广州｜D2 冠军", "7×9 球赛", "17.4℃"]  # where HF's BERT tokenizer and PaddleNLP's differ
    c = th.InferenceServerClient(server.http_url)
    paddle = AutoTokenizer.from_pretrained(str(offline.tokenizer_dir))  # the bundle's own tokenizer files
    for batch in (texts, symbols):
        inp = th.InferInput("text", [len(batch), 1], "BYTES")
        inp.set_data_from_numpy(np.array([[t.encode()] for t in batch], dtype=object))
        r = c.infer("tiny_tokenizer", [inp])
        enc = offline.tokenizer().encode(batch)
        np.testing.assert_array_equal(r.as_numpy("input_ids"), enc.input_ids)
        np.testing.assert_array_equal(r.as_numpy("token_type_ids"), enc.token_type_ids)
        # ... and both are PaddleNLP's ids, the ones the model was trained on
        for row, text in enumerate(batch):
            want = paddle(text, max_length=32, truncation=True)["input_ids"]
            assert r.as_numpy("input_ids")[row, : len(want)].tolist() == want, text
    assert enc.input_ids.shape[1] < 32 and offline.tokenizer().encode(texts).input_ids.shape[1] == 32  # truncated
    c.close()


@LAYOUTS
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_requests_are_refused_and_the_server_keeps_serving(layout, request, protocol):
    server = request.getfixturevalue(layout)
    client = _clients(server)[protocol]
    good = client.classify_batch(["股票银行基金"])[0].label
    with pytest.raises(RequestRejected, match="empty text"):
        client.classify_batch(["股票", ""])
    with pytest.raises(RequestRejected, match="not valid UTF-8"):
        client.classify_batch([b"\xff\xfe\x80abc"])
    with pytest.raises(RequestRejected, match="over the limit"):
        client.classify_batch(["股" * 2000])  # 6000 bytes > max_text_bytes 4096
    with pytest.raises(RequestRejected, match="batch"):
        client.classify_batch(["股票"] * 9)  # max_batch_size is 8
    # A long text within the byte limit is truncated, not refused.
    assert client.classify_batch(["股票银行" * 100])[0].label == good
    assert client.health()["model_ready"]
    assert client.classify_batch(["股票银行基金"])[0].label == good
    assert server.alive()


@LAYOUTS
def test_concurrent_requests_are_batched_and_answered_correctly(layout, request, dev):
    """Many clients at once: the dynamic batcher merges requests of different lengths (ragged) in the model."""
    server = request.getfixturevalue(layout)
    texts, _ = dev
    expected = [p.label for p in _clients(server)["grpc"].classify(texts[:24], batch_size=1)]
    got = concurrently(texts[:24], lambda: BundleClient(server.grpc_url, "grpc", "tiny", retries=0),
                       lambda c, text: c.classify_batch([text])[0].label)
    assert got == expected


def test_client_cli_and_smoke_and_loadtest(server, dev, offline, tmp_path, capsys):
    from serving.tools import client_cli
    from serving.tools.loadtest import run_level
    from serving.kinds.classification.tools import run_smoke

    texts, gold = dev
    f = tmp_path / "texts.txt"
    f.write_text("\n".join(texts[:5]), encoding="utf-8")
    assert client_cli.main(["classify", "--model", "tiny", "--url", server.grpc_url, "--protocol", "grpc", "--file", str(f), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == texts[:5]
    assert client_cli.main(["health", "--model", "tiny", "--url", server.http_url]) == 0
    assert client_cli.main(["classify", "--model", "tiny", "--url", server.http_url, ""]) == 2  # refused, clear error
    assert "empty text" in capsys.readouterr().err

    labels = offline.labels()
    result = run_smoke(offline, _clients(server)["http"], texts, [labels.index(g) for g in gold], batch_size=8)
    assert result.ok and result.mismatches == 0 and result.examples == len(texts)

    level = run_level(server.grpc_url, "grpc", "tiny", texts, concurrency=2, seconds=1.0, max_requests=200)
    assert level.errors == 0 and level.requests > 0 and level.p50_ms <= level.p99_ms


def test_tampered_bundle_is_refused_by_the_served_models(tiny_bundle, tmp_path):
    bad = tmp_path / "repo" / "tiny"
    shutil.copytree(tiny_bundle, bad)
    vocab = bad / "tiny_tokenizer" / "1" / "vocab.txt"
    vocab.write_text(vocab.read_text(encoding="utf-8") + "篡改\n", encoding="utf-8")
    from serving.triton.integrity import BundleIntegrityError

    with pytest.raises(BundleIntegrityError, match="vocab.txt: SHA-256 differs"):
        start_server(bad)  # the launcher checks before starting
    # Skip the launcher's check: the python models' own check must stop the server from loading it.
    with pytest.raises(ServerError, match="SHA-256 differs"):
        start_server(bad, verify=False, timeout=120, log_path=tmp_path / "bad.log")


@pytest.mark.slow
def test_python_paddle_runtime_serves_the_offline_predictions(tiny_export, dev, tmp_path):
    """Paddle Inference inside the python backend (a second server, ~10 s)."""
    from serving.bundle.config import PackageConfig
    from serving.tools.offline import BundleModel, offline_logits
    from serving.bundle.repository import ExportArtifacts, write_repository

    texts, _ = dev
    info = write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(tiny_export),
                            PackageConfig(runtime="python-paddle", threads=1, max_batch_size=16, preferred_batch_size=8))
    bundle = BundleModel.open(info.path)
    assert bundle.manifest["model_form"] == "paddle_fp32"
    labels = bundle.labels()
    expected = [labels[i] for i in offline_logits(bundle, texts).argmax(-1)]
    with start_server(info.path, timeout=120, log_path=tmp_path / "server.log") as srv:
        with BundleClient(srv.grpc_url, "grpc", "tiny") as client:
            assert [p.label for p in client.classify(texts, batch_size=16)] == expected


@pytest.mark.slow
def test_an_engine_registered_once_is_packaged_served_and_is_the_offline_reference(tiny_export, dev, tmp_path, monkeypatch):
    """One ServedEngine added to the registry (its module, tests/registered_engine.py, defined outside the pipeline)
    is a package.runtime, is copied into the bundle as the engine runner.py runs, is named in bundle.json with what the
    serving python needs, and is both what the server runs and what the offline reference runs: it answers negated
    logits, so served labels equal its offline labels and differ from ONNX Runtime's own."""
    import registered_engine
    from pipeline.backends import registry
    from pipeline.backends.engine import ServedEngine
    from serving.bundle.config import PackageConfig, runtimes
    from serving.bundle.repository import ExportArtifacts, write_repository
    from serving.tools.offline import BundleModel, offline_logits

    copy = ServedEngine(name="negated", served="registered_engine", model_file="model.onnx", distribution="onnxruntime",
                        import_name="onnxruntime")
    every = registry.served_engines()
    monkeypatch.setattr(registry, "served_engines", lambda: (*every, copy))
    assert runtimes()["python-negated"] == ("python", "negated")
    texts, _ = dev
    info = write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(tiny_export),
                            PackageConfig(runtime="python-negated", threads=1, max_batch_size=16, preferred_batch_size=8))
    m = info.manifest
    assert (m["runtime"], m["engine"], m["model_form"]) == ("python-negated", "negated", "onnx_int8")
    from importlib import metadata

    ort = metadata.version("onnxruntime")
    assert m["engine_needs"] == {"module": "onnxruntime", "install": f"onnxruntime=={ort}", "distribution": "onnxruntime",
                                 "validated_version": ort, "requirements": "requirements.txt"}
    bundle = BundleModel.open(info.path)
    assert (bundle.model_dir / "engine.py").read_bytes() == Path(registered_engine.__file__).read_bytes()
    labels = bundle.labels()
    expected = [labels[i] for i in offline_logits(bundle, texts).argmax(-1)]
    ort = BundleModel(bundle.root, {**bundle.manifest, "engine": "onnxruntime"})
    assert expected != [labels[i] for i in offline_logits(ort, texts).argmax(-1)]
    with start_server(info.path, timeout=120, log_path=tmp_path / "server.log") as srv:
        with BundleClient(srv.grpc_url, "grpc", "tiny") as client:
            assert [p.label for p in client.classify(texts, batch_size=16)] == expected


def _perf_analyzer_or_skip():
    from serving.tools.perf import PerfError, find_perf_analyzer

    return tool_or_skip(find_perf_analyzer, PerfError, "ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER")


def test_perf_analyzer_measures_the_served_ensemble(server, dev, offline):
    """`make perf` against a running server (--url): real perf_analyzer, Triton's own per-model statistics, the
    model-only yardstick; no floor or CPU by process (that server's processes are not perf's)."""
    from serving.tools.perf import format_markdown, measure

    _perf_analyzer_or_skip()
    record = measure(offline.root, "tiny", None, [1, 4], seconds=1.0, url=server.grpc_url, offline_seconds=1.0,
                     items=dev[0][:50])
    assert [lv.concurrency for lv in record.levels] == [1, 4] and record.task == "tiny"
    for lv in record.levels:
        assert lv.requests_per_s > 0 and 0 < lv.p50_ms <= lv.p90_ms <= lv.p95_ms <= lv.p99_ms
        shares = {m.model: m for m in lv.models}
        assert set(shares) == {"tiny_tokenizer", "tiny_model", "tiny_postprocess"}
        assert all(m.requests > 0 and m.compute_ms > 0 and m.mean_batch >= 1 for m in shares.values())
    rows = record.summary
    assert all(r.floor_items_per_s is None and not r.served_cores for r in rows)
    assert rows[0].model_only_items_per_s.median > 0 and rows[0].model_only_batch == "batch 4"
    assert record.served_ratios()[0] == "served / model-only"
    md = format_markdown(record)
    assert "| items/request | concurrency | served | floor (echo) | model-only | ceiling |" in md and "tiny_model" in md


def test_perf_explains_itself_with_the_floor_cpu_by_process_and_both_request_shapes(tiny_bundle, dev, tmp_path,
                                                                                    monkeypatch):
    """`make perf` on its own server: per shape (one item per request, and a full request of max_batch_size items)
    the served rate, the floor (an echo model with the bundle's interface in the same server), the model-only
    yardstick, the ceiling and the ratios; CPU by process (tritonserver, every stub by instance, the client) and per
    item; for a lone request, the model's own batch-1 latency.  The bundle itself is untouched (the floor lives in a
    repository of its own), and nothing is left in the temp dir (the server's log went with its work folder).  The
    record written is the record the gate reads back."""
    from pipeline.validation.release import read_perf
    from serving.tools.perf import ceiling, format_markdown, measure
    from serving.triton.integrity import verify_bundle

    _perf_analyzer_or_skip()
    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    record = measure(bundle, "tiny", None, [1], seconds=1.0, offline_seconds=0.5, items=dev[0][:50], rounds=2,
                     batched_concurrency=[1])
    assert list(temp.iterdir()) == []
    rows = {(r.items_per_request, r.concurrency): r for r in record.summary}
    assert set(rows) == {(1, 1), (8, 1)}  # 8: the tiny bundle's max_batch_size (32 where a bundle allows it)
    lone = rows[(1, 1)]
    assert len(lone.model_only_batch1_p50_ms.rounds) == len(lone.served_p50_minus_batch1_ms.rounds) == 2
    assert rows[(8, 1)].model_only_batch1_p50_ms is None  # only a lone request is held to it
    assert all(lv.mean_ms >= lv.server_ms > 0 for lv in record.levels)
    for row in rows.values():
        assert len(row.served_items_per_s.rounds) == len(row.floor_items_per_s.rounds) == 2
        served, floor_, model = (row.served_items_per_s.rounds, row.floor_items_per_s.rounds, row.model_only_items_per_s.rounds)
        assert row.served_over_ceiling.rounds == pytest.approx([s / ceiling(m, f) for s, m, f in zip(served, model, floor_)])
        assert row.served_over_model_only.rounds == pytest.approx([s / m for s, m in zip(served, model)])
        cores = row.served_cores
        assert {"tritonserver", "client", "stub tiny_tokenizer_0_0", "stub tiny_model_0_0", "stub tiny_postprocess_0_0"} <= set(cores)
        assert not any("floor" in k for k in cores) and any("floor" in k for k in row.floor_cores)
        assert cores["tritonserver"] > 0 and row.served_cpu_us_per_item.median > row.floor_cpu_us_per_item.median > 0
        assert row.offline_cpu_us_per_item.median > 0
    md = format_markdown(record)
    assert "| 8 | 1 |" in md and "served µs/item" in md and "stub tiny_model_0_0" in md
    assert "A lone request (concurrency 1): served p50" in md
    record.write(tmp_path / "perf.json")
    assert read_perf(tmp_path / "perf.json") == record
    verify_bundle(bundle, allow_bytecode=True)


def test_perf_without_perf_analyzer_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    from serving.tools import perf

    monkeypatch.setenv("PERF_ANALYZER", str(tmp_path / "absent"))
    assert perf.main(["--task", "tiny", "--repository", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "perf_analyzer not found" in err[0] and "make perf" in err[0]


def test_fused_layout_is_one_model_with_the_ensemble_contract(fused_server, tiny_fused_bundle, dev):
    from serving.triton.integrity import verify_bundle
    from serving.tools.offline import BundleModel
    from serving.tools.perf import measure

    m = verify_bundle(tiny_fused_bundle, allow_bytecode=True)  # it is being served: the stubs cached model.py
    assert m["package"]["layout"] == "auto" and m["layout"] == "fused" and set(m["models"].values()) == {"tiny"}
    assert sorted(p.name for p in tiny_fused_bundle.iterdir() if p.is_dir()) == ["tiny"]
    folder = tiny_fused_bundle / "tiny" / "1"
    for name in ("model.py", "runner.py", "engine.py", "class_outputs.py", "text_input.py", "wordpiece.py", "vocab.txt",
                 "labels.json", "model.onnx"):
        assert f"tiny/1/{name}" in m["files"], name
    assert (folder / "model.py").read_bytes() == (SERVING / "kinds" / "classification" / "models" / "classifier.py").read_bytes()
    bundle = BundleModel.open(tiny_fused_bundle)  # offline reference reads the one folder
    assert bundle.tokenizer_dir == bundle.model_dir == folder and len(bundle.labels()) == m["num_labels"]
    _perf_analyzer_or_skip()
    record = measure(tiny_fused_bundle, "tiny", None, [2], seconds=1.0, url=fused_server.grpc_url, offline_seconds=1.5,
                     items=dev[0][:50])
    assert [s.model for s in record.levels[0].models] == ["tiny"]


def test_the_launcher_checks_the_bundle_engine_before_starting(tiny_bundle, capsys):
    """bundle.json names what the in-process engine needs (from its ServedEngine); the launcher probes the serving
    python for it and refuses in one line naming what to install; a name that is not a module name is refused."""
    from serving.triton_install import TritonInstall, check_engine
    from serving.triton.integrity import verify_bundle

    from importlib import metadata

    manifest = verify_bundle(tiny_bundle, allow_bytecode=True)
    ort = metadata.version("onnxruntime")
    assert manifest["engine_needs"]["install"] == f"onnxruntime=={ort}"
    here = TritonInstall(Path(sys.executable), None, None, {"PATH": str(Path(sys.executable).parent)})
    check_engine(manifest, here)  # this python has onnxruntime, the validated version: nothing said
    assert capsys.readouterr().err == ""
    other = {**manifest, "engine_needs": {**manifest["engine_needs"], "validated_version": "0.9"}}
    check_engine(other, here)  # served, with one line naming both versions
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: ") and f"validated with onnxruntime 0.9 and is served with onnxruntime {ort}" in line
    lacking = {**manifest, "engine_needs": {"module": "no_such_engine_here", "install": "no-such-engine==1.0"}}
    with pytest.raises(ServerError, match=r"does not have: install no-such-engine==1\.0 there"):
        check_engine(lacking, here)
    with pytest.raises(ServerError, match="engine_needs.module"):
        check_engine({**manifest, "engine_needs": {"module": "os.path", "install": "x"}}, here)


def test_fused_layout_is_refused_where_it_cannot_work():
    from pipeline.errors import ConfigError
    from serving.bundle.config import PackageConfig

    with pytest.raises(ConfigError, match="package.layout: fused needs a python runtime"):
        PackageConfig(layout="fused", runtime="onnxruntime")
    with pytest.raises(ConfigError, match="package.layout: 'tree' is not one of auto, ensemble, fused"):
        PackageConfig(layout="tree")
    from serving.bundle.kinds import bundle_kind

    assert bundle_kind("classification").layout(PackageConfig(runtime="onnxruntime")) == "ensemble"  # native model backend
    assert bundle_kind("token_classification").layout(PackageConfig()) == "fused"
    assert bundle_kind("token_classification").layout(PackageConfig(runtime="onnxruntime")) == "ensemble"
    assert bundle_kind("reading_comprehension").layout(PackageConfig()) == "fused"  # reader.py
    assert bundle_kind("reading_comprehension").layout(PackageConfig(layout="ensemble")) == "ensemble"


@LAYOUTS
def test_smoke_concurrent_mode_holds_every_text_to_its_offline_single_answer(layout, request, dev):
    """make smoke ARGS=--concurrency N: each title sent alone from N clients (the batcher mixes them) must get
    exactly the label of that title run alone offline."""
    from serving.tools.offline import BundleModel
    from serving.tools.smoke import ConcurrentResult, run_concurrent

    server = request.getfixturevalue(layout)
    bundle = BundleModel.open(server.repository)
    r = run_concurrent(bundle, server.grpc_url, "grpc", dev[0][:60], concurrency=8)
    assert (r.items, r.concurrency, r.mismatches) == (60, 8, 0) and r.ok
    assert not ConcurrentResult(3, 2, 1, [(0, ("a",), ("b",), [])]).ok  # a differing answer fails the smoke test


class _WiderRounds:
    """Stands in for an engine whose float rounding moves a near-tie when a batch is padded wider (OpenVINO INT8:
    MEASUREMENTS.md): the tiny model's own logits, but label 0 wins in a batch 24 columns wide or wider."""

    def __init__(self, real):
        self.real, self.model_file = real, real.model_file

    def engine(self, path, threads=0, gpu=False, params=None):
        inner = self.real.engine(path, threads, gpu, params)

        def run(feeds):
            out = np.array(inner(feeds))
            if feeds["input_ids"].shape[1] >= 24:
                out[:, 0] = out.max() + 1
            return out
        return run


def test_pad_to_runs_a_text_as_a_longer_batch_mate_pads_it(offline, dev):
    """``BundleModel.pad_to``: a text alone, padded to W, gets the logits it gets in a batch whose longer mate makes
    it W wide (the server's situation); a batch already as wide runs as it is."""
    from dataclasses import replace

    from serving.tools.offline import encode_items

    tok = offline.tokenizer()
    short, long = sorted(dev[0], key=len)[0], sorted(dev[0], key=len)[-1]
    together, alone = encode_items(tok, [short, long]), encode_items(tok, [short])
    width = together.input_ids.shape[1]
    assert alone.input_ids.shape[1] < width
    in_batch = offline.session()(together.input_ids, together.token_type_ids)[0]
    padded = replace(offline, pad_to=width).session()(alone.input_ids, alone.token_type_ids)[0]
    np.testing.assert_array_equal(padded, in_batch)
    narrower = replace(offline, pad_to=2).session()(together.input_ids, together.token_type_ids)
    np.testing.assert_array_equal(narrower, offline.session()(together.input_ids, together.token_type_ids))


def test_smoke_looks_for_a_differing_answer_at_wider_paddings(offline, dev, monkeypatch):
    """A served answer that differs from the item's offline answer alone is looked for at wider paddings (the model
    file run as a longer batch mate pads the item): found there, it is a near-tie the engine's rounding moves; found
    at none, a serving fault.  ``_WiderRounds`` stands in for the engine."""
    from pipeline.backends import registry
    from serving.tools.kinds import tool_kind
    from serving.tools.smoke import padded_widths

    real = registry.served_engine(offline.manifest["engine"])
    monkeypatch.setattr(registry, "served_engine", lambda name: _WiderRounds(real))
    labels, tok = offline.labels(), offline.wordpiece()
    texts = [t for t in dev[0] if len(tok.encode(t).ids) < 20]
    alone = tool_kind(offline.task_type).offline_keys(offline, texts)
    texts = [t for t, key in zip(texts, alone) if key != (labels[0],)][:2]
    assert texts, "no short dev text whose label is not the first"
    widths = padded_widths(offline, [*texts, texts[0]], [(labels[0],)] * len(texts) + [("not a label",)])
    for found in widths[:-1]:
        assert found[0] == 24 and found[-1] == offline.max_seq_len and found == sorted(found)
    assert widths[-1] == []


@LAYOUTS
def test_wrong_input_name_or_dtype_is_refused_and_batch_mates_are_answered(layout, request, dev):
    """A request naming the wrong input or sending the wrong dtype gets Triton's own error; requests in flight
    beside a refused one (an empty text) are answered; the server stays ready."""
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    server = request.getfixturevalue(layout)
    c = th.InferenceServerClient(server.http_url)
    wrong_name = th.InferInput("texts", [1, 1], "BYTES")
    wrong_name.set_data_from_numpy(np.array([[b"abc"]], dtype=object))
    with pytest.raises(InferenceServerException, match="texts"):
        c.infer("tiny", [wrong_name])
    wrong_type = th.InferInput("text", [1, 1], "INT64")
    wrong_type.set_data_from_numpy(np.array([[7]], dtype=np.int64))
    with pytest.raises(InferenceServerException, match="(?i)data-type|datatype|TYPE_STRING|BYTES"):
        c.infer("tiny", [wrong_type])
    c.close()

    texts = dev[0][:16]
    expected = [p.label for p in BundleClient(server.grpc_url, "grpc", "tiny", retries=0).classify_batch(texts[:8])]
    results, refused = {}, []

    def good(k):
        cl = BundleClient(server.grpc_url, "grpc", "tiny", retries=0)
        results[k] = cl.classify_batch([texts[k]])[0].label

    def bad():
        try:
            BundleClient(server.grpc_url, "grpc", "tiny", retries=0).classify_batch(["   "])
        except RequestRejected as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=good, args=(k,)) for k in range(8)] + [threading.Thread(target=bad) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [results[k] for k in range(8)] == expected and len(refused) == 4 and all("empty text" in m for m in refused)
    assert server.ready()


def _launcher(repo: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "serving.server", "--repository", str(repo), "--task", "tiny",
            "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--timeout", "120", *extra]


def _wait_gone(pid: int, seconds: float = 30.0) -> bool:
    from serving.process_group import process_start_time

    deadline = time.time() + seconds
    while process_start_time(pid) is not None and time.time() < deadline:
        time.sleep(0.2)
    return process_start_time(pid) is None


def test_stop_after_a_killed_server_removes_its_stubs_and_shared_memory(tiny_bundle, tmp_path):
    """--stop signals the server's process group, not only its pid: python stubs and /dev/shm regions that
    outlive a SIGKILLed server are removed, and the state file with them."""
    from serving.process_group import group_members
    from serving.server import ServerState, state_file

    repo = tmp_path / "repo"
    shutil.copytree(tiny_bundle, repo / "tiny")
    started = subprocess.run(_launcher(repo, "--detach", "--log", str(tmp_path / "s.log")), cwd=ROOT,
                             capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    state = ServerState.read(state_file((repo / "tiny").resolve()))
    try:
        assert state.is_running() and len(group_members(state.pid)) > 1  # the server and its python stubs
        assert list(Path("/dev/shm").glob(state.shm_prefix + "*"))
        os.kill(state.pid, signal.SIGKILL)
        assert _wait_gone(state.pid)
        stopped = subprocess.run(_launcher(repo, "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0 and "no longer running" in stopped.stdout, stopped.stderr
        assert group_members(state.pid) == [] and not list(Path("/dev/shm").glob(state.shm_prefix + "*"))
        assert not state_file((repo / "tiny").resolve()).exists()
    finally:
        from serving.process_group import reap_group

        reap_group(state.pid, state.shm_prefix)


def test_stop_stops_a_server_started_with_a_relative_repository(tiny_bundle, tmp_path):
    """`make serve` and `make stop` pass `--repository model_repository`, a relative path.  --stop must stop that
    server; it used to call it gone and leave it running (the state recorded the relative path, the server's
    command line the absolute one)."""
    from serving.process_group import reap_group
    from serving.server import ServerState, state_file

    shutil.copytree(tiny_bundle, tmp_path / "repo" / "tiny")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = subprocess.run(_launcher(Path("repo"), "--detach", "--log", str(tmp_path / "s.log")), cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    state = ServerState.read(state_file((tmp_path / "repo" / "tiny").resolve()))
    try:
        assert state.is_running()
        stopped = subprocess.run(_launcher(Path("repo"), "--stop"), cwd=tmp_path, env=env, capture_output=True,
                                 text=True, timeout=60)
        assert stopped.returncode == 0 and "stopped tritonserver" in stopped.stdout, stopped.stdout + stopped.stderr
        assert _wait_gone(state.pid)
    finally:
        if state.is_running():
            os.killpg(state.pid, signal.SIGKILL)
        reap_group(state.pid, state.shm_prefix)


def test_stop_never_signals_a_process_that_is_not_its_server(tiny_bundle, tmp_path):
    """A state file whose pid now belongs to another program (or was never a server for this bundle) is not
    obeyed; an unreadable one is one line, exit 2."""
    from serving.process_group import process_start_time
    from serving.server import ServerState, state_file

    bundle = (tmp_path / "repo" / "tiny")
    shutil.copytree(tiny_bundle, bundle)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        path = state_file(bundle.resolve())
        ServerState(other.pid, process_start_time(other.pid), str(bundle.resolve()), "ernie_bundle_1_0123abcd_").write(path)
        out = subprocess.run(_launcher(tmp_path / "repo", "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and other.poll() is None  # the other program lives
        path.write_text("{not json")
        out = subprocess.run(_launcher(tmp_path / "repo", "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "unreadable server state" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    finally:
        other.kill()
        other.wait()


def test_a_killed_foreground_launcher_takes_its_server_with_it(tiny_bundle, tmp_path):
    from serving.process_group import group_members, reap_group
    from serving.server import ServerState, state_file

    repo = tmp_path / "repo"
    shutil.copytree(tiny_bundle, repo / "tiny")
    launcher = subprocess.Popen(_launcher(repo, "--log", str(tmp_path / "s.log")), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = state_file((repo / "tiny").resolve())
    deadline = time.time() + 180
    while not path.is_file() and time.time() < deadline and launcher.poll() is None:
        time.sleep(0.2)
    state = ServerState.read(path)  # recorded in the foreground too
    try:
        launcher.kill()
        launcher.wait()
        assert _wait_gone(state.pid, 60), "the server outlived its launcher"
        out = subprocess.run(_launcher(repo, "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and not path.exists()
        assert group_members(state.pid) == []
    finally:
        reap_group(state.pid, state.shm_prefix)


def test_bad_requests_straight_to_the_model_fail_alone_with_invalid_argument(server):
    """Requests sent straight to <task>_model are checked one by one before they join a batch: ids outside the
    vocabulary, token types other than 0/1 and widths over max_seq_len get INVALID_ARGUMENT (HTTP 400) on their
    own, with no server path in the message, while the requests batched beside them are answered."""
    import tritonclient.grpc as tg
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    vocab = sum(1 for _ in open(server.repository / "tiny_tokenizer" / "1" / "vocab.txt", encoding="utf-8"))
    good = np.array([[2, 5, 6, 7, 3]], np.int64)
    bad = {"vocabulary": (np.array([[2, vocab + 5, 3]], np.int64), np.zeros((1, 3), np.int64)),
           "token types": (np.array([[2, 5, 3]], np.int64), np.full((1, 3), 2, np.int64)),
           "max_seq_len": (np.full((1, 40), 5, np.int64), np.zeros((1, 40), np.int64))}

    def infer_http(ids, types):
        c = th.InferenceServerClient(server.http_url)
        inputs = [th.InferInput("input_ids", list(ids.shape), "INT64"), th.InferInput("token_type_ids", list(types.shape), "INT64")]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(types)
        try:
            return c.infer("tiny_model", inputs).as_numpy("logits")
        finally:
            c.close()

    solo = infer_http(good, np.zeros_like(good))
    answers, refusals, lock = [], [], threading.Lock()

    def send_good():
        for _ in range(6):
            out = infer_http(good, np.zeros_like(good))
            with lock:
                answers.append(out)

    def send_bad(ids, types):
        for _ in range(6):
            try:
                infer_http(ids, types)
            except InferenceServerException as exc:
                with lock:
                    refusals.append(exc)

    threads = [threading.Thread(target=send_good) for _ in range(6)]
    threads += [threading.Thread(target=send_bad, args=pair) for pair in bad.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 36 and all(np.allclose(a, solo, atol=1e-4) for a in answers)
    assert len(refusals) == 18 and all(e.status() == "400" for e in refusals)
    messages = " ".join(e.message() for e in refusals)
    for says in ("vocabulary ids in [0,", "token_type_ids must be 0 or 1", "over this model's max_seq_len"):
        assert says in messages
    assert str(server.repository) not in messages and "/tmp" not in messages
    g = tg.InferenceServerClient(server.grpc_url)
    inputs = [tg.InferInput("input_ids", [1, 3], "INT64"), tg.InferInput("token_type_ids", [1, 3], "INT64")]
    inputs[0].set_data_from_numpy(bad["vocabulary"][0])
    inputs[1].set_data_from_numpy(bad["vocabulary"][1])
    with pytest.raises(InferenceServerException) as info:
        g.infer("tiny_model", inputs)
    assert "INVALID_ARGUMENT" in str(info.value.status())
    g.close()
    # A text the tokenizer refuses is the client's error through the ensemble too
    c = th.InferenceServerClient(server.http_url)
    text = th.InferInput("text", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b""]], dtype=object))
    with pytest.raises(InferenceServerException, match="empty text") as info:
        c.infer("tiny", [text])
    assert info.value.status() == "400"
    c.close()


def test_the_server_copy_is_reused_across_fresh_installs_of_the_same_wheel(tmp_path):
    """A fresh virtual environment unpacks the same wheel with new mtimes: it must reuse the cached server copy
    (one per wheel version and content), not add another one per clone."""
    from serving.triton_install import prepare_pytriton_server

    py = f"{sys.version_info[0]}.{sys.version_info[1]}"

    def unpack(root: Path, stub: bytes) -> Path:
        for part, name, data in (("bin", "tritonserver", b"server"), ("backends/python", "libtriton_python.so", b"lib"),
                                 ("caches", "README", b"c"), (f"python_backend_stubs/{py}", "triton_python_backend_stub", stub)):
            (root / part).mkdir(parents=True, exist_ok=True)
            (root / part / name).write_bytes(data)
        return root

    cache = tmp_path / "cache"
    first = prepare_pytriton_server(unpack(tmp_path / "venv1", b"stub"), cache, wheel_version="0.7.0")
    time.sleep(0.01)
    again = prepare_pytriton_server(unpack(tmp_path / "venv2", b"stub"), cache, wheel_version="0.7.0")
    assert again == first and (first / "backends" / "python" / "triton_python_backend_stub").read_bytes() == b"stub"
    other = prepare_pytriton_server(unpack(tmp_path / "venv3", b"stub-2"), cache, wheel_version="0.7.0")
    newer = prepare_pytriton_server(unpack(tmp_path / "venv4", b"stub"), cache, wheel_version="0.8.0")
    assert len({first, other, newer}) == 3 and sorted(p.name for p in cache.iterdir()) == sorted(
        p.name for p in (first, other, newer))
    with pytest.raises(ServerError, match="no python backend stub for Python"):
        prepare_pytriton_server(tmp_path / "venv1" / "bin", cache)
