"""A bundle whose model runs in OpenVINO inside Triton's python backend: served == offline, batch mates change
nothing, the properties it was validated with are the ones it serves with, and a Triton without OpenVINO refuses
the bundle in one line instead of half-serving it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (before paddle)

from serving_fixtures import tiny_export  # noqa: F401  (fixture)

from serving.tools.client import BundleClient
from serving.server import ServerError, start_server


@pytest.fixture(scope="module")
def openvino_export(tiny_export, tiny_finetuned, tiny_splits, tmp_path_factory) -> Path:
    """The tiny export with an NNCF INT8 IR beside the ONNX forms, as the export stage writes it."""
    from conftest import features
    from pipeline.quantization.select import calibration_feeds
    from pipeline.backends.openvino.quantize import build, calibration_items
    from pipeline.backends.openvino.config import OpenVINOConfig
    from pipeline.quantization.recipe import Int8Recipe
    from pipeline.tokenizer import Tokenizer

    out = tmp_path_factory.mktemp("ov_export") / "out"
    shutil.copytree(tiny_export, out)
    tok = Tokenizer.from_model_dir(out / "tokenizer", 32)
    feeds = calibration_feeds(features(tok, tiny_splits[0][:64]), 16)
    # as compress builds it by default (openvino.width_independent), with the properties that go with it
    build(out / "onnx" / "fp32.onnx", out / "openvino" / "int8.xml", calibration_items(feeds, tok.pad_id), Int8Recipe(0.5),
          width_independent=True)
    meta = json.loads((out / "meta.json").read_text())
    meta["openvino"] = {"properties": OpenVINOConfig().served()}
    (out / "meta.json").write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="module")
def openvino_bundle(openvino_export, tmp_path_factory) -> Path:
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2)  # runtime auto, layout auto (fused)
    info = write_repository(tmp_path_factory.mktemp("ov_repo"), "tiny", ExportArtifacts.from_dir(openvino_export), pc,
                            preferred_precision="int8", preferred_form="openvino_int8")
    return info.path


@pytest.fixture(scope="module")
def dev(tiny_finetuned):
    rows = [json.loads(line) for line in (tiny_finetuned["data_dir"] / "dev.json").read_text(encoding="utf-8").splitlines()]
    return [r["sentence"] for r in rows]


def test_the_bundle_records_its_engine_and_properties(openvino_bundle):
    from serving.triton.integrity import verify_bundle

    m = verify_bundle(openvino_bundle)
    assert (m["runtime"], m["engine"], m["model_form"], m["precision"]) == ("python-openvino", "openvino", "openvino_int8", "int8")
    assert m["engine_properties"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert m["engine_properties"]["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == 0
    assert m["engine_properties"]["SNIPPETS_MODE"] == "ENABLE"  # exact on a width-independent IR (test_openvino.py)
    folder = openvino_bundle / "tiny" / "1"  # fused: one python model
    assert (folder / "model.xml").is_file() and (folder / "model.bin").is_file()
    config = (openvino_bundle / "tiny" / "config.pbtxt").read_text()
    assert '"engine"' in config and "openvino" in config and "engine_properties" in config


def test_served_openvino_equals_offline_alone_or_in_any_batch(openvino_bundle, dev, tmp_path):
    from serving.tools.offline import BundleModel, offline_logits
    from serving.tools.smoke import run_concurrent

    bundle = BundleModel.open(openvino_bundle)
    logits = offline_logits(bundle, dev)
    labels = bundle.labels()
    with start_server(openvino_bundle, timeout=120, log_path=tmp_path / "server.log") as srv:
        with BundleClient(srv.grpc_url, "grpc", "tiny") as client:
            preds = client.classify(dev, batch_size=8)
        assert [p.label for p in preds] == [labels[i] for i in logits.argmax(-1)]
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        np.testing.assert_allclose(np.array([p.probs for p in preds]), probs, atol=5e-3)
        r = run_concurrent(bundle, srv.grpc_url, "grpc", dev[:40], concurrency=8)  # the batcher mixes them
        assert (r.items, r.mismatches) == (40, 0) and r.ok
    from serving.triton.integrity import clear_bytecode

    clear_bytecode(openvino_bundle)


def test_a_triton_without_openvino_refuses_the_bundle_in_one_line(openvino_bundle, tmp_path, monkeypatch, capsys):
    """The python the served models would run has no OpenVINO: the launcher refuses in one line, exit 2, and no
    server is left half-up.  (A python without site-packages stands in for a Triton image without openvino.)"""
    import sys

    from serving import server, triton_install

    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    monkeypatch.setattr(triton_install, "engine_python", lambda install: str(bare))
    repo = tmp_path / "repo"
    shutil.copytree(openvino_bundle, repo / "tiny")
    assert server.main(["--repository", str(repo), "--task", "tiny", "--http-port", "0", "--grpc-port", "0",
                        "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs in openvino" in err[0] and "install openvino==2026.4.1" in err[0]
    assert not server.state_file(repo / "tiny").exists()  # nothing recorded: nothing started


def test_the_served_engine_pads_a_short_batch_by_at_most_3_tokens_and_always_fits():
    """The served OpenVINO engine pads each batch to a warmed width bucket: a short-text model's batch below 64
    tokens (titles, CLUENER's sentences) by at most 3 tokens, since a batch of 32 padded to multiples of 8 ran 1.07-1.09x its exact width's
    time (MEASUREMENTS.md); no bucket is ever wider than max_seq_len, and max_seq_len is always one."""
    from pipeline.backends.openvino.served import row_buckets, width_buckets

    for max_seq_len in (5, 16, 64, 128, 256, 512):
        buckets = width_buckets(max_seq_len)
        assert buckets[-1] == max_seq_len and buckets == sorted(set(buckets)) and max(buckets) <= max_seq_len
        short = 3 if max_seq_len <= 128 else 7  # a long-window model's windows are mostly full: fewer shapes to hold
        for width in range(1, max_seq_len + 1):
            padded = next(b for b in buckets if b >= width)
            assert padded - width <= (short if width <= 64 else 15 if width <= 128 else 31 if width <= 256 else 63)
    assert len(width_buckets(64)) == 16 and len(width_buckets(256)) == 16  # what the server warms per row count
    assert row_buckets(64) == [*range(1, 17), 24, 32, 40, 48, 56, 64]
