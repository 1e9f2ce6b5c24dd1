"""package.api fastdeploy: FastDeploy's own ERNIE 3.0 / UIE serving clients work unchanged against our bundles.

The requests here are built the way FastDeploy's example clients build them (examples/text/ernie-3.0/serving/
seq_cls_grpc_client.py, token_cls_grpc_client.py, examples/text/uie/serving/grpc_client.py: input names from the model
metadata in order, every output requested, [B, 1] UTF-8 bytes or one JSON string of shape [1, 1]) and read the way
they read the answers (``labels == ret["label"]``, ``ast.literal_eval`` of each row).  One real tritonserver serves the
three fastdeploy bundles and, beside them, the same exports packaged with our own API: what FastDeploy's clients read
must equal what our interface serves.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from serving_fixtures import (NER_TYPES, SPAN_FILLER, export_without, ner_data, ner_export, run_until_export,  # noqa: F401
                              tiny_dev, tiny_export)

from pipeline.errors import ConfigError
from serving.bundle.config import PackageConfig
from serving.triton.integrity import verify_bundle
from serving.bundle.kinds import all_configs
from serving.bundle.model_config import BundleShape, parse_pbtxt, to_pbtxt
from serving.bundle.repository import ExportArtifacts, PackageError, choose_model, write_repository
from tritonclient.grpc import model_config_pb2 as mc

SERVING = Path(__file__).resolve().parent.parent / "serving"
FD = dict(api="fastdeploy", instance_count=1, threads=1)  # one instance per model: fewer python stubs to start
# the tiny UIE task's windowing and decoding (its schema comes from the labels: 公司, 姓名)
UIE_SETTINGS = {"doc_stride": 10, "max_prompt_len": 12, "position_prob": 0.5, "max_span_len": 4}


# -- the exports and bundles ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def uie_export(ner_data, tmp_path_factory) -> Path:
    """The export stage's own output for a tiny UIE model fine-tuned from scratch on the NER data, one prompt per
    entity type (as ``make bundle TASK=uie`` runs the stages up to export)."""
    return run_until_export(tmp_path_factory.mktemp("uie_export"), {
        "task": "tinyuie", "type": "uie", "max_seq_len": 48, "labels": list(NER_TYPES),
        "data": {"dir": str(ner_data), "format": "cluener", "labels_file": None},
        # pointers start far below position_prob on 40 texts: weigh the span tokens up (the config's own knob)
        "uie": {**UIE_SETTINGS, "positive_weight": 10.0}}, epochs=30)


def _package(export: Path, task: str, folder: Path, **package) -> Path:
    return write_repository(folder, task, ExportArtifacts.from_dir(export), PackageConfig(**package)).path


@pytest.fixture(scope="module")
def bundles(tiny_export, ner_export, uie_export, tmp_path_factory) -> dict[str, Path]:
    """FastDeploy's interface (fd_*) and ours (ours_*) on the same three exports, one repository each; our UIE in
    both layouts."""
    root = tmp_path_factory.mktemp("fastdeploy_api")
    return {
        "fd_seqcls": _package(tiny_export, "tiny", root / "fd_seqcls", **FD),  # layout auto: fused
        "fd_tokencls": _package(ner_export, "cluener", root / "fd_tokencls", **FD, max_batch_size=8, preferred_batch_size=4),  # fused
        "fd_uie": _package(uie_export, "tinyuie", root / "fd_uie", api="fastdeploy", threads=1),  # instances: auto
        "ours_seqcls": _package(tiny_export, "tiny", root / "ours_seqcls", instance_count=1, threads=1),
        "ours_tokencls": _package(ner_export, "cluener", root / "ours_tokencls", instance_count=1, threads=1,
                                  max_batch_size=8, preferred_batch_size=4),
        "ours_uie": _package(uie_export, "tinyuie", root / "ours_uie", instance_count=1, threads=1),  # fused
        "ours_uie_ensemble": _package(uie_export, "tinyuie_ensemble", root / "ours_uie_ensemble", instance_count=1,
                                      threads=1, layout="ensemble"),
    }


@pytest.fixture(scope="module")
def server(bundles, tmp_path_factory):
    """One tritonserver for the seven bundles (each its own --model-repository; no two share a model name)."""
    from serving.triton.integrity import clear_bytecode
    from serving.server import start_server

    first, *rest = bundles.values()
    for b in rest:  # the launcher checks the first; these get the same check here
        clear_bytecode(b)
        verify_bundle(b)
    srv = start_server(first, log_path=tmp_path_factory.mktemp("triton_fastdeploy") / "server.log", timeout=180,
                       extra_args=tuple(f"--model-repository={b}" for b in rest))
    yield srv
    assert srv.stop() == 0, srv.log_tail()


# -- FastDeploy's clients, as they build requests and read answers ----------------------------------------------------


class FastDeployRunner:
    """What FastDeploy's ``SyncGRPCTritonRunner`` does (the same in its three example clients): model metadata gives
    the input names, in order, and every output, all requested."""

    def __init__(self, url: str, model_name: str, model_version: str = "1"):
        from tritonclient.grpc import InferenceServerClient, InferRequestedOutput

        self.client = InferenceServerClient(url)
        self.model_name, self.model_version = model_name, model_version
        assert self.client.is_model_ready(model_name, model_version)
        meta = self.client.get_model_metadata(model_name, model_version)
        self.input_names = [t.name for t in meta.inputs]
        self.output_names = [t.name for t in meta.outputs]
        self.outputs = [InferRequestedOutput(name) for name in self.output_names]

    def _infer(self, infer_inputs):
        result = self.client.infer(model_name=self.model_name, model_version=self.model_version, inputs=infer_inputs,
                                   outputs=self.outputs, client_timeout=120)
        return {name: result.as_numpy(name) for name in self.output_names}

    def run_texts(self, inputs):
        """ERNIE 3.0 clients' ``Run``: each input a list of str, sent as [len, 1] BYTES."""
        from tritonclient.grpc import InferInput

        infer_inputs = []
        for idx, data in enumerate(inputs):
            data = np.array([[x.encode("utf-8")] for x in data], dtype=np.object_)
            infer_input = InferInput(self.input_names[idx], [len(data), 1], "BYTES")
            infer_input.set_data_from_numpy(data)
            infer_inputs.append(infer_input)
        return self._infer(infer_inputs)

    def run_json(self, inputs):
        """UIE client's ``Run``: each input json.dumps'ed into one [1, 1] BYTES tensor; the first output's rows."""
        from tritonclient.grpc import InferInput

        infer_inputs = []
        for idx, data in enumerate(inputs):
            data = np.array([[json.dumps(data)]], dtype=np.object_)
            infer_input = InferInput(self.input_names[idx], data.shape, "BYTES")
            infer_input.set_data_from_numpy(data)
            infer_inputs.append(infer_input)
        return self._infer(infer_inputs)[self.output_names[0]]


def _ours(server, model: str):
    from serving.tools.client import BundleClient

    return BundleClient(server.grpc_url, "grpc", model, retries=0)


@pytest.fixture(scope="module")
def ner_texts(ner_data):
    return [json.loads(line)["text"] for line in (ner_data / "dev.json").read_text(encoding="utf-8").splitlines()]


# -- served: what FastDeploy's clients read equals what we serve --------------------------------------------------------


def test_seq_cls_client_accuracy_equals_our_served_accuracy(server, bundles, tiny_dev):
    texts, gold = tiny_dev
    labels = [json.loads(line)["label"] for line in
              (bundles["ours_seqcls"] / "tiny" / "1" / "labels.json").read_text(encoding="utf-8").splitlines()]
    runner = FastDeployRunner(server.grpc_url, "ernie_seqcls")
    assert runner.input_names == ["INPUT"] and runner.output_names == ["label", "confidence"]
    # seq_cls_grpc_client.test_tnews_dataset: batches of 32, dataset labels are class indices
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    batch_labels = [np.array([labels.index(g) for g in gold[i : i + 32]]) for i in range(0, len(texts), 32)]
    accuracy, served_labels, served_conf = 0, [], []
    for i, data in enumerate(batches):
        ret = runner.run_texts([data])
        assert ret["label"].shape == (len(data),) and ret["label"].dtype == np.int64
        accuracy += np.sum(batch_labels[i] == ret["label"])
        served_labels += ret["label"].tolist()
        served_conf += ret["confidence"].tolist()
    fastdeploy_acc = 1.0 * accuracy / len(texts)

    with _ours(server, "tiny") as client:
        ours = client.classify(texts, batch_size=32)
    our_acc = float(np.mean([p.label == g for p, g in zip(ours, gold)]))
    assert fastdeploy_acc == our_acc > 0.9
    assert served_labels == [labels.index(p.label) for p in ours]
    np.testing.assert_allclose(served_conf, [p.confidence for p in ours], atol=1e-6)


def test_token_cls_client_reads_our_entities(server, ner_texts):
    runner = FastDeployRunner(server.grpc_url, "ernie_tokencls")
    assert runner.input_names == ["INPUT"] and runner.output_names == ["OUTPUT"]
    parsed = []
    for start in range(0, len(ner_texts), 8):
        batch_input = ner_texts[start : start + 8]
        result = runner.run_texts([batch_input])
        assert result["OUTPUT"].shape == (len(batch_input),)
        for i, ret in enumerate(result["OUTPUT"]):  # token_cls_grpc_client.py's loop
            ret = ast.literal_eval(ret.decode("utf-8"))
            parsed.append([(iterm["label"], batch_input[i][iterm["pos"][0] : iterm["pos"][1] + 1], tuple(iterm["pos"]))
                           for iterm in ret])
    with _ours(server, "cluener") as client:
        ours = client.extract_entities(ner_texts, batch_size=8)
    assert parsed == [[(e.type, e.text, (e.start, e.end - 1)) for e in ents] for ents in ours]
    assert sum(map(len, parsed)) > len(ner_texts)  # the random model does tag entities


def _fastdeploy_form(spans_by_prompt: dict) -> dict:
    """Our served UIE answer in FastDeploy's result form (prompts with no span left out)."""
    return {p: [{"start": s.start, "end": s.end, "probability": s.probability, "text": s.text} for s in spans]
            for p, spans in spans_by_prompt.items() if spans}


def _same_results(got: list[dict], want: list[dict]) -> None:
    def key(results):
        return [{p: [(d["start"], d["end"], d["text"], key([d.get("relation", {})])) for d in ds] for p, ds in r.items()}
                for r in results]

    assert key(got) == key(want)
    probs = lambda rs: [d["probability"] for r in rs for ds in r.values() for d in ds]  # noqa: E731
    np.testing.assert_allclose(probs(got), probs(want), atol=2e-6)


def test_uie_client_reads_our_spans_and_relations(server, ner_texts):
    runner = FastDeployRunner(server.grpc_url, "uie")
    assert runner.input_names == ["INPUT_0", "INPUT_1"] and runner.output_names == ["OUTPUT_0"]

    def run(texts, schema):  # grpc_client.py: results.as_numpy(OUTPUT_0), each row ast.literal_eval'ed
        rows = runner.run_json([texts, schema])
        assert rows.shape == (len(texts),)
        return [ast.literal_eval(r.decode("utf-8")) for r in rows]

    texts, schema = ner_texts[:12], ["姓名", "公司"]
    with _ours(server, "tinyuie") as ours:
        want = [_fastdeploy_form(r) for r in ours.extract_schema_batch(texts, schema)]
        assert any(want), "the random model finds spans"
        _same_results(run(texts, schema), want)
        # An empty schema is "the schema sent last", as FastDeploy's UIEModel.set_schema keeps it
        _same_results(run(texts[:3], []), want[:3])

        # Relations: every span of 姓名 asked "<span>的公司"; what that finds goes under the span's relation
        relation = run(texts[:4], {"姓名": ["公司"]})
        expected = []
        for text, root in zip(texts[:4], want[:4]):
            entry = {}
            for d in root.get("姓名", []):
                d = dict(d)
                found = _fastdeploy_form(ours.extract_schema_batch([text], [d["text"] + "的公司"])[0])
                if found:
                    d["relation"] = {"公司": found[d["text"] + "的公司"]}
                entry.setdefault("姓名", []).append(d)
            expected.append(entry)
        _same_results(relation, expected)
        assert any("relation" in d for r in relation for d in r.get("姓名", [])), "no relation found: the test shows nothing"


def _uie_request(server, model: str, texts: list, schema: list):
    """Our UIE interface, sent as tensors (``text`` [N], ``schema`` [P]) so that malformed requests can be sent too."""
    from tritonclient.grpc import InferenceServerClient, InferInput

    inputs = []
    for name, items in (("text", texts), ("schema", schema)):
        data = np.array([x if isinstance(x, bytes) else x.encode("utf-8") for x in items], dtype=np.object_)
        inputs.append(InferInput(name, [len(items)], "BYTES"))
        inputs[-1].set_data_from_numpy(data)
    return InferenceServerClient(server.grpc_url).infer(model, inputs).as_numpy("results")


def test_uie_fused_answers_and_refuses_as_the_ensemble(server, ner_texts):
    """Layout fused (one python model) and layout ensemble (three) on the same export: the same spans for every text,
    and every malformed request refused alone with the same message."""
    from tritonclient.utils import InferenceServerException

    texts, schema = ner_texts[:12], ["姓名", "公司"]
    fused, ensemble = _uie_request(server, "tinyuie", texts, schema), _uie_request(server, "tinyuie_ensemble", texts, schema)
    assert fused.shape == ensemble.shape == (12, 2)
    got, want = [[json.loads(x) for x in row] for row in fused], [[json.loads(x) for x in row] for row in ensemble]
    spans = lambda rows: [[[(d["start"], d["end"], d["text"]) for d in cell] for cell in row] for row in rows]  # noqa: E731
    assert spans(got) == spans(want) and any(d for row in got for cell in row for d in cell), "the random model finds spans"
    probs = lambda rows: [d["probability"] for row in rows for cell in row for d in cell]  # noqa: E731
    np.testing.assert_allclose(probs(got), probs(want), atol=1e-6)

    bad = [([], schema, "no texts in the request"), (texts[:1], [], "no prompts in the schema"),
           (texts[:1], ["姓名", "姓名 "], "schema: a prompt is repeated"),
           (texts[:1], ["姓名" * 7], "schema item 0 is 14 tokens, over the bundle's max_prompt_len 12"),
           ([b"\xff\xfe"], schema, r"text\[0\]: not valid UTF-8"), ([" "], schema, r"text\[0\]: empty text")]
    for request_texts, request_schema, message in bad:
        for model in ("tinyuie", "tinyuie_ensemble"):
            with pytest.raises(InferenceServerException, match=message) as info:
                _uie_request(server, model, request_texts, request_schema)
            assert "INVALID_ARG" in str(info.value.status()), (model, message)
    assert [[json.loads(x) for x in row] for row in _uie_request(server, "tinyuie", texts[:3], schema)] == got[:3]


def test_bad_requests_are_refused_one_by_one_and_the_server_keeps_serving(server, tiny_dev):
    from tritonclient.grpc import InferInput
    from tritonclient.utils import InferenceServerException

    seq = FastDeployRunner(server.grpc_url, "ernie_seqcls")
    good = seq.run_texts([["股票银行基金"]])["label"].tolist()
    with pytest.raises(InferenceServerException, match=r"INPUT\[1\]: empty INPUT"):
        seq.run_texts([["股票", " "]])
    uie = FastDeployRunner(server.grpc_url, "uie")
    with pytest.raises(InferenceServerException, match="INPUT_0: expected a JSON list of texts"):
        uie.run_json([{"text": "赵子龙"}, ["姓名"]])
    with pytest.raises(InferenceServerException, match="over the bundle's max_prompt_len 12"):
        uie.run_json([["赵子龙"], ["姓名" * 7]])
    inp = InferInput("INPUT_0", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"not json"]], dtype=np.object_))
    sch = InferInput("INPUT_1", [1, 1], "BYTES")
    sch.set_data_from_numpy(np.array([[b"[]"]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="INPUT_0: not UTF-8 JSON") as info:
        uie.client.infer("uie", [inp, sch])
    assert "INVALID_ARG" in str(info.value.status())
    assert seq.run_texts([["股票银行基金"]])["label"].tolist() == good and server.alive()


# -- the bundles and configs, without a server -------------------------------------------------------------------------

SHAPE = BundleShape(task="ernie_seqcls", num_labels=15, max_seq_len=64, model_file="model.onnx")


def test_configs_are_fastdeploys_interface():
    """Names, dtypes and dims of examples/text/ernie-3.0/serving/triton/models/ernie_{seqcls,tokencls}/config.pbtxt and
    examples/text/uie/serving/triton/models/uie/config.pbtxt."""
    for pc in (PackageConfig(api="fastdeploy", layout="ensemble"), PackageConfig(api="fastdeploy", runtime="fastdeploy")):
        configs = all_configs(SHAPE, pc)
        assert set(configs) == {"ernie_seqcls", "ernie_seqcls_tokenizer", "ernie_seqcls_model", "ernie_seqcls_postprocess"}
        ens = parse_pbtxt(to_pbtxt(configs["ernie_seqcls"]))
        assert ens.platform == "ensemble" and ens.max_batch_size == 64
        assert [(i.name, i.data_type, list(i.dims)) for i in ens.input] == [("INPUT", mc.TYPE_STRING, [1])]
        assert [(o.name, o.data_type, list(o.dims)) for o in ens.output] == [("label", mc.TYPE_INT64, [1]),
                                                                            ("confidence", mc.TYPE_FP32, [1])]
        assert dict(ens.ensemble_scheduling.step[0].input_map) == {"text": "INPUT"}
        assert configs["ernie_seqcls_postprocess"].parameters["api"].string_value == "fastdeploy"
    assert all_configs(SHAPE, PackageConfig(api="fastdeploy", runtime="fastdeploy"))["ernie_seqcls_model"].backend == "fastdeploy"
    fused = all_configs(SHAPE, PackageConfig(api="fastdeploy"))  # layout auto: one python model, same interface
    assert list(fused) == ["ernie_seqcls"] and [o.name for o in fused["ernie_seqcls"].output] == ["label", "confidence"]
    assert fused["ernie_seqcls"].input[0].name == "INPUT"

    ner = all_configs(BundleShape(task="ernie_tokencls", num_labels=5, max_seq_len=64, model_file="model.onnx",
                                  task_type="token_classification"), PackageConfig(api="fastdeploy", layout="ensemble"))
    ens = ner["ernie_tokencls"]
    assert list(all_configs(BundleShape(task="ernie_tokencls", num_labels=5, max_seq_len=64, model_file="model.onnx",
                                        task_type="token_classification"), PackageConfig(api="fastdeploy"))) == ["ernie_tokencls"]
    assert [(i.name, i.data_type, list(i.dims)) for i in ens.input] == [("INPUT", mc.TYPE_STRING, [1])]
    assert [(o.name, o.data_type, list(o.dims)) for o in ens.output] == [("OUTPUT", mc.TYPE_STRING, [1])]
    assert dict(ens.ensemble_scheduling.step[2].output_map) == {"entities": "OUTPUT"}
    assert dict(ens.ensemble_scheduling.step[2].input_map)["text"] == "INPUT"

    uie = all_configs(BundleShape(task="uie", num_labels=2, max_seq_len=64, model_file="model.onnx", task_type="uie",
                                  settings={"doc_stride": 16, "max_prompt_len": 8, "position_prob": 0.5,
                                            "max_span_len": 8, "schema": ("时间",)}),
                      PackageConfig(api="fastdeploy", instance_count=1))
    cfg = parse_pbtxt(to_pbtxt(uie["uie"]))
    assert list(uie) == ["uie"] and cfg.backend == "python" and cfg.max_batch_size == 1
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("INPUT_0", mc.TYPE_STRING, [1]),
                                                                       ("INPUT_1", mc.TYPE_STRING, [1])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("OUTPUT_0", mc.TYPE_STRING, [1])]
    assert json.loads(cfg.parameters["schema"].string_value) == ["时间"] and cfg.instance_group[0].count == 1


def test_fastdeploy_bundles_carry_their_models_and_payload_code(bundles):
    from functools import partial

    verify = partial(verify_bundle, allow_bytecode=True)  # they may be serving meanwhile
    seq = verify(bundles["fd_seqcls"])
    assert seq["api"] == "fastdeploy" and seq["models"]["ensemble"] == "ernie_seqcls" and seq["layout"] == "fused"
    assert "ernie_seqcls/1/model.py" in seq["files"] and "seq_cls_grpc_client.py" in (bundles["fd_seqcls"] / "README.md").read_text()
    tok = verify(bundles["fd_tokencls"])  # layout auto: one python model, FastDeploy's ensemble interface
    assert tok["layout"] == "fused" and {"ernie_tokencls/config.pbtxt", "ernie_tokencls/1/model.py", "ernie_tokencls/1/model.onnx",
                                         "ernie_tokencls/1/fastdeploy_payloads.py", "ernie_tokencls/1/entity_outputs.py"} <= set(tok["files"])
    assert "argmax over the BIO tags, bio.decode_tags" in (bundles["fd_tokencls"] / "README.md").read_text(encoding="utf-8")
    uie = verify(bundles["fd_uie"])
    files = {f for f in uie["files"] if f.startswith("uie/1/")}
    assert {"uie/1/model.py", "uie/1/runner.py", "uie/1/windows.py", "uie/1/spans.py", "uie/1/fastdeploy_payloads.py",
            "uie/1/vocab.txt", "uie/1/model.onnx"} <= files
    assert (bundles["fd_uie"] / "uie/1/model.py").read_bytes() == (SERVING / "kinds/uie/models/uie_fastdeploy.py").read_bytes()
    assert uie["package"]["instances"] == 1  # instance_count auto: one, so "the schema sent last" is one per server
    ours = verify(bundles["ours_uie"])  # layout auto: one python model, extractor.py, with the request checks beside it
    assert ours["api"] == "ernie-bundle" and ours["layout"] == "fused" and ours["models"]["ensemble"] == "tinyuie"
    assert (bundles["ours_uie"] / "tinyuie/1/model.py").read_bytes() == (SERVING / "kinds/uie/models/extractor.py").read_bytes()
    assert {"tinyuie/1/uie_requests.py", "tinyuie/1/windows.py", "tinyuie/1/spans.py", "tinyuie/1/runner.py"} <= set(ours["files"])
    assert "windowing, model and decoding in one process" in (bundles["ours_uie"] / "README.md").read_text(encoding="utf-8")
    ens = verify(bundles["ours_uie_ensemble"])
    assert ens["layout"] == "ensemble" and {"tinyuie_ensemble_tokenizer/1/uie_requests.py",
                                            "tinyuie_ensemble_postprocess/1/uie_requests.py"} <= set(ens["files"])
    assert "uie/1/uie_requests.py" in uie["files"]  # FastDeploy's uie checks its prompts with the same code


def test_smoke_test_says_it_speaks_the_other_api(bundles, capsys):
    from serving.tools import smoke

    assert smoke.main(["--task", "tiny", "--repository", str(bundles["fd_seqcls"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "package.api fastdeploy (model ernie_seqcls)" in err[0]


def test_bad_combinations_are_refused_naming_package_api(tiny_export, tmp_path):
    from pipeline.config import load_task_config

    with pytest.raises(ConfigError, match="^package.api: fastdeploy has serving examples for .* not reading_comprehension"):
        load_task_config("cmrc2018", {"package.api": "fastdeploy"})
    with pytest.raises(ConfigError, match="^package.api: fastdeploy's uie is one python model .* not onnxruntime"):
        load_task_config("uie", {"package.api": "fastdeploy", "package.runtime": "onnxruntime"})
    with pytest.raises(ConfigError, match="^package.api: 'fastdeploy2' is not one of ernie-bundle, fastdeploy"):
        PackageConfig(api="fastdeploy2")
    assert load_task_config("cluener", {"package.api": "fastdeploy"}).package.api == "fastdeploy"
    # writing a bundle checks it too (a config built in code, not loaded)
    exp = tmp_path / "exp"
    shutil.copytree(tiny_export, exp)
    meta = json.loads((exp / "meta.json").read_text())
    (exp / "meta.json").write_text(json.dumps({**meta, "task_type": "reading_comprehension",
                                               "reading": {"doc_stride": 8, "max_query_len": 8, "max_answer_len": 8}}))
    with pytest.raises(ConfigError, match="package.api"):
        write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(exp), PackageConfig(api="fastdeploy"))
    assert not (tmp_path / "repo" / "tiny").exists()


def test_cli_refuses_the_combination_with_exit_2(capsys, tmp_path):
    from pipeline.cli import main

    assert main(["run", "--task", "cmrc2018", "--runs-dir", str(tmp_path), "--set", "package.api=fastdeploy",
                 "--until", "finetune"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: package.api: fastdeploy has serving examples")
    assert not any(tmp_path.iterdir())  # refused before any work


# -- runtime fastdeploy: what FastDeploy's backend opens and matches by name --------------------------------------------


def test_fastdeploy_openvino_ships_onnx_never_the_openvino_ir(tiny_export, tmp_path):
    """FastDeploy's backend opens only <version>/model.onnx or model.pdmodel + model.pdiparams and its OpenVINO reads
    Paddle or ONNX: an export with an OpenVINO IR still ships ONNX (the QDQ INT8 form when there is one)."""
    exp = export_without(tiny_export, tmp_path / "exp", "onnx_int8_qdq")
    assert (exp / "openvino" / "int8.xml").is_file()  # the export's OpenVINO IR
    pc = PackageConfig(runtime="fastdeploy", fastdeploy_engine="openvino", layout="ensemble", instance_count=2, threads=1)
    assert choose_model(ExportArtifacts.from_dir(exp), pc).form == "onnx_fp32"  # no QDQ form exported
    info = write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(exp), pc)
    files = sorted(f for f in verify_bundle(info.path)["files"] if f.startswith("tiny_model/"))
    assert files == ["tiny_model/1/model.onnx", "tiny_model/config.pbtxt"]
    cfg = parse_pbtxt((info.path / "tiny_model" / "config.pbtxt").read_text())
    acc = cfg.optimization.execution_accelerators.cpu_execution_accelerator[0]
    assert (cfg.backend, acc.name) == ("fastdeploy", "openvino")
    assert dict(acc.parameters) == {"cpu_threads": "2", "num_streams": "2"}  # cpu_threads: all instances together
    assert [i.name for i in cfg.input] == ["input_ids", "token_type_ids"] and cfg.output[0].name == "logits"
    shutil.copyfile(exp / "onnx" / "fp32.onnx", exp / "onnx" / "int8_qdq.onnx")
    assert choose_model(ExportArtifacts.from_dir(exp), pc).form == "onnx_int8_qdq"


def test_fastdeploy_paddle_config_names_the_programs_own_output(tiny_export, tmp_path):
    """The model config and the ensemble's map use the Paddle program's own output name, which FastDeploy's backend
    checks, whatever the export called it (paddle.jit.save alone names it after the last op, as FastDeploy's example
    shows, linear_113.tmp_1; the export stage's program says logits)."""
    from serving.bundle.model_io import tensor_names

    ins, outs = tensor_names(tiny_export / "paddle_fp32" / "model.pdmodel")
    assert ins == ["input_ids", "token_type_ids"] and len(outs) == 1
    info = write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(tiny_export),
                            PackageConfig(runtime="fastdeploy", fastdeploy_engine="paddle", api="fastdeploy"))
    model = parse_pbtxt((info.path / "ernie_seqcls_model" / "config.pbtxt").read_text())
    assert model.output[0].name == outs[0]
    ens = parse_pbtxt((info.path / "ernie_seqcls" / "config.pbtxt").read_text())
    assert dict(ens.ensemble_scheduling.step[1].output_map) == {outs[0]: "_logits"}
    assert sorted(p.name for p in (info.path / "ernie_seqcls_model" / "1").iterdir()) == ["model.pdiparams", "model.pdmodel"]


# -- FastDeploy's serving image: Triton 21.10, Python 3.8 ------------------------------------------------------------------


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Response:
    def __init__(self, output_tensors=None, error=None):
        self.error = error


def test_refusals_fall_back_where_the_python_backend_has_no_error_codes(capsys):
    """Triton 21.10's pb_utils (FastDeploy's image): ``TritonError(message)`` with no status codes, no Logger."""
    support = _load(SERVING / "triton/model_support.py", "fd_model_support")

    class OldError:  # r21.10: one argument, no INVALID_ARG / INTERNAL
        def __init__(self, message):
            self.message = message

    old = type("pb_utils", (), {"TritonError": OldError, "InferenceResponse": _Response})
    r = support.refused(old, "INPUT[0]: empty INPUT")
    assert isinstance(r.error, OldError) and r.error.message == "INPUT[0]: empty INPUT"
    r = support.failed(old, "inference", RuntimeError("boom"))
    assert r.error.message == "inference failed on the server (details in its log)"
    assert "inference failed: RuntimeError: boom" in capsys.readouterr().err  # no Logger: the stub's stderr

    class NewError:  # Triton 23.x on: a status code, and a Logger
        INVALID_ARG, INTERNAL = 3, 13

        def __init__(self, message, code=None):
            self.message, self.code = message, code

    logged = []
    new = type("pb_utils", (), {"TritonError": NewError, "InferenceResponse": _Response,
                                "Logger": type("L", (), {"log_error": staticmethod(logged.append)})})
    assert support.refused(new, "bad").error.code == 3
    assert support.failed(new, "inference", RuntimeError("boom")).error.code == 13 and "boom" in logged[0]


def test_bundle_python_runs_on_python_3_8(bundles):
    """Every python file of a fastdeploy bundle parses as Python 3.8 (the image's) and evaluates no annotation at
    import that 3.8 cannot (``X | None``, ``list[int]``) unless annotations are postponed."""
    import ast

    def runtime_annotations(tree):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from (a.annotation for a in node.args.args + node.args.kwonlyargs if a.annotation)
                if node.returns:
                    yield node.returns
            elif isinstance(node, ast.AnnAssign):
                yield node.annotation

    def new_syntax(annotation):
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) or
                   isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in ("list", "dict", "tuple", "set", "type")
                   for n in ast.walk(annotation))

    checked = 0
    for bundle in (bundles["fd_seqcls"], bundles["fd_tokencls"], bundles["fd_uie"]):
        for path in (p for p in bundle.rglob("*.py") if "__pycache__" not in p.parts):
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source, str(path), feature_version=(3, 8))
            postponed = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                            any(a.name == "annotations" for a in n.names) for n in tree.body)
            assert postponed or not any(new_syntax(a) for a in runtime_annotations(tree)), path
            checked += 1
    assert checked > 10
