"""Token classification (NER) bundle: packaging, configs, and a real Triton server (python backend).

The model is a tiny RANDOM ErnieForTokenClassification (tests/serving_fixtures.py): what is checked
is that the served entities are exactly the offline ones, not their quality.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from serving_fixtures import (concurrently, dev_examples, mrc_data, mrc_export, ner_bundle, ner_data,  # noqa: F401
                              ner_export, opened_bundle, served)  # (fixtures)

from serving.tools.client import BundleClient, RequestRejected
from serving.tools.kinds import kind_of_outputs
from serving.tools.kinds.base import Validated
from serving.bundle.config import PackageConfig
from serving.triton.integrity import BundleIntegrityError, verify_bundle
from serving.bundle.kinds import all_configs
from serving.bundle.model_config import BundleShape, parse_pbtxt, to_pbtxt
from serving.bundle.repository import ExportArtifacts, PackageError, write_repository
from serving.server import ServerError, start_server
from tritonclient.grpc import model_config_pb2 as mc

PIPELINE = Path(__file__).resolve().parent.parent / "pipeline"
SHAPE = BundleShape(task="cluener", num_labels=21, max_seq_len=64, model_file="model.onnx", task_type="token_classification")


@pytest.mark.parametrize("pc", [PackageConfig(layout="ensemble"), PackageConfig(runtime="onnxruntime"),
                                PackageConfig(runtime="python-paddle", device="GPU", layout="ensemble"),
                                PackageConfig(max_batch_size=0, layout="ensemble")],
                         ids=["python-ort", "native-ort", "python-paddle-gpu", "mbs0"])
def test_ner_configs_round_trip(pc):
    configs = all_configs(SHAPE, pc)
    assert set(configs) == {"cluener", "cluener_tokenizer", "cluener_model", "cluener_postprocess"}
    for name, cfg in configs.items():
        assert parse_pbtxt(to_pbtxt(cfg)) == cfg, name
    ens = configs["cluener"]
    assert [i.name for i in ens.input] == ["text"] and [o.name for o in ens.output] == ["entities"]
    assert ens.output[0].data_type == mc.TYPE_STRING
    post = ens.ensemble_scheduling.step[2]
    assert dict(post.input_map) == {"logits": "_logits", "offsets": "_offsets", "text": "text"}
    model = configs["cluener_model"]
    b = [] if pc.max_batch_size else [-1]
    assert list(model.output[0].dims) == b + [-1, 21]  # per-token logits
    assert [o.name for o in configs["cluener_tokenizer"].output] == ["input_ids", "token_type_ids", "offsets"]
    assert list(configs["cluener_tokenizer"].output[2].dims) == b + [-1, 2]
    assert configs["cluener_postprocess"].input[0].allow_ragged_batch == bool(pc.max_batch_size)


@pytest.mark.parametrize("api", ["ernie-bundle", "fastdeploy"])
def test_ner_fused_config_is_the_ensembles_contract_on_one_python_model(api):
    """layout auto on a python runtime: one model named like the ensemble, same input and output, batched and
    instanced like the model, with the tokenizer's limits and the engine's settings as parameters."""
    pc = PackageConfig(api=api, instance_count=2, threads=1)
    shape = dataclasses.replace(SHAPE, task="ernie_tokencls" if api == "fastdeploy" else "cluener", engine_properties='{"A": 1}')
    configs = all_configs(shape, pc)
    assert list(configs) == [shape.task]
    cfg = parse_pbtxt(to_pbtxt(configs[shape.task]))
    names = ("INPUT", "OUTPUT") if api == "fastdeploy" else ("text", "entities")
    assert cfg.backend == "python" and cfg.max_batch_size == 64 and cfg.instance_group[0].count == 2
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [(names[0], mc.TYPE_STRING, [1])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [(names[1], mc.TYPE_STRING, [1])]
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert {k: params[k] for k in ("max_seq_len", "model_file", "threads", "engine_properties")} == {
        "max_seq_len": "64", "model_file": "model.onnx", "threads": "1", "engine_properties": '{"A": 1}'}
    assert (params.get("text_input"), params.get("entities_output"), params.get("api")) == (
        ("INPUT", "OUTPUT", "fastdeploy") if api == "fastdeploy" else (None, None, None))


def test_ner_bundle_carries_the_pipeline_bio_module(ner_bundle, tmp_path):
    m = verify_bundle(ner_bundle)
    assert m["task_type"] == "token_classification" and m["num_labels"] == 5
    bio = (PIPELINE / "labeling" / "bio.py").read_bytes()
    for rel in ("cluener_tokenizer/1/bio.py", "cluener_postprocess/1/bio.py"):
        assert rel in m["files"]
        assert (ner_bundle / rel).read_bytes() == bio  # verbatim: served == offline code
    assert "cluener_tokenizer/1/text_input.py" in m["files"]
    assert "entities" in (ner_bundle / "README.md").read_text(encoding="utf-8")
    copy = tmp_path / "cluener"
    shutil.copytree(ner_bundle, copy)
    (copy / "cluener_postprocess/1/bio.py").write_text(bio.decode() + "\n# edited\n", encoding="utf-8")
    with pytest.raises(BundleIntegrityError, match="bio.py: SHA-256 differs"):
        verify_bundle(copy)


def test_ner_labels_must_be_bio_with_o_first(ner_export, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(ner_export, exp)
    rows = (exp / "labels.json").read_text(encoding="utf-8").splitlines()
    (exp / "labels.json").write_text("\n".join(rows[1:] + rows[:1]) + "\n", encoding="utf-8")
    with pytest.raises(PackageError, match="'O' first"):
        write_repository(tmp_path / "repo", "cluener", ExportArtifacts.from_dir(exp), PackageConfig())
    meta = json.loads((exp / "meta.json").read_text())
    (exp / "meta.json").write_text(json.dumps({**meta, "task_type": "ner"}))
    with pytest.raises(PackageError, match="task_type 'ner'"):
        write_repository(tmp_path / "repo", "cluener", ExportArtifacts.from_dir(exp), PackageConfig())


server = served("ner_bundle")


@pytest.fixture(scope="module")
def fused_bundle(ner_export, tmp_path_factory) -> Path:
    """The same export packaged with layout auto: on a python runtime, one fused model (serving/kinds/token_classification/models/tagger.py)."""
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096)
    return write_repository(tmp_path_factory.mktemp("ner_fused_repo"), "cluener", ExportArtifacts.from_dir(ner_export), pc).path


fused_server = served("fused_bundle")


LAYOUTS = pytest.mark.parametrize("layout", ["server", "fused_server"])  # ensemble, and layout fused (auto)


dev = dev_examples("cluener", "ner_data", "token_classification")
bundle = opened_bundle("ner_bundle")


def _key(entities):
    return [(e.type, e.start, e.end, e.text) for e in entities]


@LAYOUTS
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_entities_equal_offline(layout, request, dev, bundle, protocol):
    from serving.kinds.token_classification.tools import offline_entities

    server = request.getfixturevalue(layout)

    texts = [e.text for e in dev]
    url = server.http_url if protocol == "http" else server.grpc_url
    with BundleClient(url, protocol, "cluener", retries=0) as client:
        assert kind_of_outputs(client.output_names()).name == "token_classification"
        served = client.extract_entities(texts, batch_size=8)
    offline = offline_entities(bundle, texts, batch_size=8)
    assert [_key(s) for s in served] == [_key(o) for o in offline]
    assert sum(len(s) for s in served) > len(texts)  # the random model does tag entities
    for text, ents in zip(texts, served):
        assert all(text[e.start : e.end] == e.text for e in ents)
    long_one = next(t for t in texts if len(t) > 40)
    assert max(e.end for e in served[texts.index(long_one)]) <= 40  # truncated to max_seq_len 32 tokens, as offline


@LAYOUTS
def test_bad_requests_are_refused_and_the_server_keeps_serving(layout, request):
    server = request.getfixturevalue(layout)
    with BundleClient(server.grpc_url, "grpc", "cluener", retries=0) as client:
        good = client.extract_entities_batch(["赵子龙在小米科技"])
        with pytest.raises(RequestRejected, match=r"text\[1\]: empty text"):
            client.extract_entities_batch(["赵子龙", "  "])
        with pytest.raises(RequestRejected, match="not valid UTF-8"):
            client.extract_entities_batch([b"\xff\xfe\x80abc"])
        with pytest.raises(RequestRejected, match="over the limit of 4096"):
            client.extract_entities_batch(["赵" * 2000])
        with pytest.raises(RequestRejected, match="batch"):
            client.extract_entities_batch(["赵子龙"] * 9)  # max_batch_size 8
        assert client.extract_entities_batch(["赵子龙在小米科技"]) == good
    assert server.alive()


@LAYOUTS
def test_concurrent_requests_of_different_lengths_are_merged_and_answered_correctly(layout, request, dev):
    """The batcher merges requests of different token counts; the runner (fused: the tagger) cuts each one's logits
    back."""
    server = request.getfixturevalue(layout)
    texts = [e.text for e in dev][:24]
    with BundleClient(server.grpc_url, "grpc", "cluener", retries=0) as c:
        expected = [_key(c.extract_entities_batch([t])[0]) for t in texts]
    got = concurrently(texts, lambda: BundleClient(server.grpc_url, "grpc", "cluener", retries=0),
                       lambda c, text: _key(c.extract_entities_batch([text])[0]))
    assert got == expected


def test_smoke_and_client_cli(server, dev, bundle, ner_bundle, ner_data, tmp_path, capsys, monkeypatch):
    from pipeline.labeling.metric import chunk_f1
    from serving.tools import client_cli
    from serving.kinds.token_classification.tools import offline_entities
    from serving.kinds.token_classification.tools import run_smoke

    with BundleClient(server.http_url, "http", "cluener", retries=0) as client:
        result = run_smoke(bundle, client, dev, batch_size=8)
    assert result.ok and result.mismatches == 0 and result.examples == len(dev)
    expected_f1 = chunk_f1([e.entities for e in dev], offline_entities(bundle, [e.text for e in dev], 8)).f1
    assert result.served_f1 == result.offline_f1 == expected_f1
    # bundle.json "validated" is held to: a different number fails the smoke test
    assert not dataclasses.replace(result, validated=Validated("entity_f1", result.served_f1 + 0.01)).ok

    from serving.tools import smoke

    out = tmp_path / "smoke.json"
    assert smoke.main(["--task", "cluener", "--repository", str(ner_bundle.parent), "--data-dir", str(ner_data),
                       "--url", server.http_url, "--batch-size", "8", "--json-out", str(out), "--concurrency", "4"]) == 0
    printed, written = capsys.readouterr().out, json.loads(out.read_text())
    assert "PASS" in printed and written["ok"]
    assert "from 4 clients; answers differing from the offline single-item run: 0" in printed
    assert written["concurrent"]["ok"] and written["concurrent"]["items"] == len(dev)

    # A concurrent pass with a differing answer fails the run, and the verdict printed says so (it printed PASS
    # with exit status 1 before).
    real = smoke.run_concurrent
    monkeypatch.setattr(smoke, "run_concurrent", lambda *a: dataclasses.replace(real(*a), mismatches=1))
    assert smoke.main(["--task", "cluener", "--repository", str(ner_bundle.parent), "--data-dir", str(ner_data),
                       "--url", server.http_url, "--batch-size", "8", "--concurrency", "2"]) == 1
    printed = capsys.readouterr().out
    assert "PASS" not in printed and f"FAIL: 1 of {len(dev)} items sent alone from 2 clients differ" in printed
    # ... still a failure where the served answer is the model's own at a wider padding, and the line says so
    wide = [(3, ("served",), ("offline",), [48, 64])]
    monkeypatch.setattr(smoke, "run_concurrent", lambda *a: dataclasses.replace(
        real(*a), mismatches=1, examples=wide, examined=1, padded=1))
    assert smoke.main(["--task", "cluener", "--repository", str(ner_bundle.parent), "--data-dir", str(ner_data),
                       "--url", server.http_url, "--batch-size", "8", "--concurrency", "2"]) == 1
    printed = capsys.readouterr().out
    assert "PASS" not in printed and "of the 1 examined, 1 the model's own answer in a batch padded wider" in printed
    assert "item 3: served ('served',) offline ('offline',); the model's own answer when its batch is padded to 48, 64 tokens" in printed

    f = tmp_path / "texts.txt"
    f.write_text("\n".join(e.text for e in dev[:3]), encoding="utf-8")
    for command in ("extract", "predict"):
        assert client_cli.main([command, "--model", "cluener", "--url", server.grpc_url, "--protocol", "grpc", "--file", str(f), "--json"]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [x["text"] for x in lines] == [e.text for e in dev[:3]]
        assert all(set(e) == {"type", "text", "start", "end"} for x in lines for e in x["entities"])
    assert client_cli.main(["extract", "--model", "cluener", "--url", server.http_url, ""]) == 2
    assert "empty text" in capsys.readouterr().err


def test_tampered_bio_copy_stops_the_served_models(ner_bundle, tmp_path):
    bad = tmp_path / "repo" / "cluener"
    shutil.copytree(ner_bundle, bad)
    p = bad / "cluener_tokenizer" / "1" / "bio.py"
    p.write_text(p.read_text(encoding="utf-8").replace("SPECIAL_OFFSET = -1", "SPECIAL_OFFSET = 0"), encoding="utf-8")
    with pytest.raises(ServerError, match="bio.py: SHA-256 differs"):
        start_server(bad, verify=False, timeout=120, log_path=tmp_path / "bad.log")


def test_fused_bundle_is_one_model_running_the_ensembles_code(fused_bundle, fused_server, bundle):
    """layout auto makes a python-runtime NER bundle one model, named like the ensemble, whose folder holds the
    tagger and verbatim copies of the code the ensemble's three models run; the tools find it by bundle.json."""
    from serving.tools.offline import BundleModel

    m = verify_bundle(fused_bundle, allow_bytecode=True)
    assert m["package"]["layout"] == "auto" and m["layout"] == "fused" and set(m["models"].values()) == {"cluener"}
    models = Path(__file__).resolve().parent.parent / "serving" / "kinds" / "token_classification" / "models"
    assert (fused_bundle / "cluener/1/model.py").read_bytes() == (models / "tagger.py").read_bytes()
    assert (fused_bundle / "cluener/1/bio.py").read_bytes() == (PIPELINE / "labeling" / "bio.py").read_bytes()
    for shared in ("entity_outputs.py", "text_input.py", "runner.py"):
        assert f"cluener/1/{shared}" in m["files"]
    decoding = (models / "entity_outputs.py").read_bytes()  # one file: the fused model and the ensemble's post-processing
    assert (fused_bundle / "cluener/1/entity_outputs.py").read_bytes() == decoding
    assert (bundle.root / "cluener_postprocess/1/entity_outputs.py").read_bytes() == decoding
    assert not any(f.startswith(("cluener_tokenizer/", "cluener_model/", "cluener_postprocess/")) for f in m["files"])
    assert "layout fused" in (fused_bundle / "README.md").read_text(encoding="utf-8")
    with BundleClient(fused_server.grpc_url, "grpc", "cluener", retries=0) as client:
        assert kind_of_outputs(client.output_names()).name == "token_classification"
    assert BundleModel.open(fused_bundle).tokenizer_dir == fused_bundle / "cluener" / "1"


def test_fused_layout_is_refused_for_a_kind_without_a_fused_form(mrc_export, tmp_path, monkeypatch):
    """Every built-in kind has a fused form now; one without (here reading comprehension with its form taken away,
    as a new kind would start) is refused in one line, and nothing is half-written."""
    from serving.bundle.kinds import bundle_kind

    monkeypatch.setattr(type(bundle_kind("reading_comprehension")), "fusable", False)
    with pytest.raises(PackageError, match="package.layout: fused is for classification, token_classification or uie "
                                           "bundles; cmrc is reading_comprehension"):
        write_repository(tmp_path / "repo", "cmrc", ExportArtifacts.from_dir(mrc_export), PackageConfig(layout="fused"))
    assert not (tmp_path / "repo" / "cmrc").exists()  # nothing half-written


def test_pad_to_gives_a_token_level_answer_the_texts_own_columns(bundle, dev):
    """``BundleModel.pad_to`` on a token classifier: the text padded as a longer batch mate would pad it, its logits
    cut back to its own columns, equal to that row of the real batch."""
    from pipeline.labeling import bio

    tok = bundle.wordpiece()
    pad = tok.token_to_id("[PAD]")
    short, long = sorted((e.text for e in dev), key=len)[0], sorted((e.text for e in dev), key=len)[-1]
    rows = [bio.encode_token(tok, t, bundle.max_seq_len) for t in (short, long)]
    ids, types, _ = bio.pad_batch(rows, pad)
    ids1, types1, _ = bio.pad_batch(rows[:1], pad)
    assert ids1.shape[1] < ids.shape[1]
    padded = dataclasses.replace(bundle, pad_to=ids.shape[1]).session()(ids1, types1)
    assert padded.shape[:2] == ids1.shape
    np.testing.assert_array_equal(padded[0], bundle.session()(ids, types)[0, : ids1.shape[1]])


@LAYOUTS
def test_smoke_concurrent_mode_holds_every_text_to_its_offline_single_answer(layout, request, dev, bundle):
    """make smoke ARGS=--concurrency N: each text sent alone from N clients (the batcher mixes them) must give
    exactly the entities of that text run alone offline."""
    from serving.tools.smoke import run_concurrent

    server = request.getfixturevalue(layout)
    r = run_concurrent(bundle, server.grpc_url, "grpc", [e.text for e in dev][:40], concurrency=6)
    assert (r.items, r.concurrency, r.mismatches) == (40, 6, 0) and r.ok
