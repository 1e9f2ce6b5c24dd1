"""Reading comprehension (MRC) bundle: packaging, configs, and a real Triton server (python backend).

The model is a tiny RANDOM ErnieForQuestionAnswering whose forward stacks (start, end) logits
(tests/serving_fixtures.py); contexts are long enough for several windows at max_seq_len 48, so the
window fan-out (N questions -> W windows -> N answers) inside the ensemble is exercised.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from serving_fixtures import dev_examples, mrc_bundle, mrc_data, mrc_export, opened_bundle, served  # noqa: F401  (fixtures)

from serving.tools.client import BundleClient, RequestRejected
from serving.tools.kinds import kind_of_outputs
from serving.tools.kinds.base import Validated, validated
from serving.bundle.config import PackageConfig
from serving.triton.integrity import BundleIntegrityError, verify_bundle
from serving.bundle.kinds import all_configs
from serving.bundle.model_config import BundleShape, parse_pbtxt, to_pbtxt
from serving.bundle.repository import ExportArtifacts, PackageError, write_repository


PIPELINE = Path(__file__).resolve().parent.parent / "pipeline"
MODELS = Path(__file__).resolve().parent.parent / "serving" / "kinds" / "reading_comprehension" / "models"
SHAPE = BundleShape(task="cmrc2018", num_labels=2, max_seq_len=512, model_file="model.onnx", task_type="reading_comprehension",
                    settings={"doc_stride": 128, "max_query_len": 64, "max_answer_len": 30})


@pytest.mark.parametrize("pc", [PackageConfig(layout="ensemble"), PackageConfig(runtime="onnxruntime"), PackageConfig(runtime="fastdeploy"),
                                PackageConfig(runtime="python-paddle", instance_count=2, layout="ensemble")], ids=["python-ort", "native-ort", "fastdeploy", "paddle-x2"])
def test_mrc_configs_round_trip_unbatched(pc):
    configs = all_configs(SHAPE, pc)
    assert set(configs) == {"cmrc2018", "cmrc2018_tokenizer", "cmrc2018_model", "cmrc2018_postprocess"}
    for name, cfg in configs.items():
        text = to_pbtxt(cfg)
        assert parse_pbtxt(text) == cfg, name
        assert "max_batch_size: 0" in text and not cfg.HasField("dynamic_batching")  # windows per question vary
    ens = configs["cmrc2018"]
    assert [i.name for i in ens.input] == ["question", "context"] and [list(i.dims) for i in ens.input] == [[-1], [-1]]
    assert [o.name for o in ens.output] == ["answer", "start", "end", "score"]
    assert list(configs["cmrc2018_model"].output[0].dims) == [-1, -1, 2]
    tok = configs["cmrc2018_tokenizer"]
    assert [o.name for o in tok.output] == ["input_ids", "token_type_ids", "offsets", "window_example"]
    assert {k: v.string_value for k, v in tok.parameters.items()} == {
        "max_seq_len": "512", "doc_stride": "128", "max_query_len": "64", "max_text_bytes": str(pc.max_text_bytes),
        "max_items": str(pc.max_batch_size)}
    assert configs["cmrc2018_postprocess"].parameters["max_answer_len"].string_value == "30"
    assert configs["cmrc2018_tokenizer"].instance_group[0].count == pc.instances


UIE_SHAPE = BundleShape(task="uie", num_labels=2, max_seq_len=64, model_file="model.onnx", task_type="uie",
                        settings={"doc_stride": 16, "max_prompt_len": 8, "position_prob": 0.5, "max_span_len": 8,
                                  "schema": ("姓名",)})


@pytest.mark.parametrize("shape, settings", [(SHAPE, {"max_answer_len": "30", "doc_stride": "128", "max_items": "64"}),
                                             (UIE_SHAPE, {"position_prob": "0.5", "doc_stride": "16", "max_items": "64"})],
                         ids=["mrc", "uie"])
def test_windowed_fused_is_the_ensembles_interface_and_settings_on_one_model(shape, settings):
    """MRC's and UIE's layout auto on a python runtime: one python model (reader.py, extractor.py) with the
    ensemble's inputs and outputs, unbatched like it, carrying each of the three steps' settings as the ensemble's
    models carry them."""
    task = shape.task
    fused = all_configs(shape, PackageConfig(instance_count=2))
    ens = all_configs(shape, PackageConfig(instance_count=2, layout="ensemble"))
    assert list(fused) == [task] and set(ens) == {task, f"{task}_tokenizer", f"{task}_model", f"{task}_postprocess"}
    cfg = fused[task]
    assert parse_pbtxt(to_pbtxt(cfg)) == cfg and cfg.backend == "python" and cfg.instance_group[0].count == 2
    assert "max_batch_size: 0" in to_pbtxt(cfg) and not cfg.HasField("dynamic_batching")

    def io(c):
        return [(t.name, t.data_type, list(t.dims)) for t in (*c.input, *c.output)]

    assert io(cfg) == io(ens[task])
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    for step in (f"{task}_tokenizer", f"{task}_postprocess", f"{task}_model"):
        theirs = {k: v.string_value for k, v in ens[step].parameters.items() if k != "vocab_size"}
        assert theirs.items() <= params.items(), step
    assert settings.items() <= params.items()
    assert list(all_configs(shape, PackageConfig(runtime="onnxruntime"))) == list(ens)  # a native engine: ensemble


def test_mrc_bundle_carries_the_pipeline_modules(mrc_bundle, mrc_ensemble_bundle, tmp_path):
    """Layout auto (python runtime): one model, reader.py, with the pipeline's windows.py and spans.py and the request
    code beside it; the ensemble's pre- and post-processing load the same request code."""
    m = verify_bundle(mrc_bundle)
    assert m["task_type"] == "reading_comprehension" and m["reading"] == {"doc_stride": 10, "max_query_len": 12, "max_answer_len": 8}
    assert m["layout"] == "fused" and set(m["models"].values()) == {"cmrc2018"}
    assert (mrc_bundle / "cmrc2018/1/model.py").read_bytes() == (MODELS / "reader.py").read_bytes()
    ens = verify_bundle(mrc_ensemble_bundle)
    assert ens["layout"] == "ensemble"
    for bundle, man, rel, src in ((mrc_bundle, m, "cmrc2018/1/windows.py", PIPELINE / "reading/windows.py"),
                                  (mrc_bundle, m, "cmrc2018/1/spans.py", PIPELINE / "reading/spans.py"),
                                  (mrc_bundle, m, "cmrc2018/1/mrc_requests.py", MODELS / "mrc_requests.py"),
                                  (mrc_ensemble_bundle, ens, "cmrc2018_tokenizer/1/windows.py", PIPELINE / "reading/windows.py"),
                                  (mrc_ensemble_bundle, ens, "cmrc2018_postprocess/1/spans.py", PIPELINE / "reading/spans.py"),
                                  (mrc_ensemble_bundle, ens, "cmrc2018_tokenizer/1/mrc_requests.py", MODELS / "mrc_requests.py"),
                                  (mrc_ensemble_bundle, ens, "cmrc2018_postprocess/1/mrc_requests.py", MODELS / "mrc_requests.py")):
        assert rel in man["files"]
        assert (bundle / rel).read_bytes() == src.read_bytes()
    copy = tmp_path / "cmrc2018"
    shutil.copytree(mrc_bundle, copy)
    with open(copy / "cmrc2018/1/spans.py", "a", encoding="utf-8") as f:
        f.write("\n")
    with pytest.raises(BundleIntegrityError, match="spans.py: SHA-256 differs"):
        verify_bundle(copy)


def test_mrc_meta_needs_reading_settings(mrc_export, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(mrc_export, exp)
    meta = json.loads((exp / "meta.json").read_text())
    (exp / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "reading"}))
    with pytest.raises(PackageError, match="'reading'"):
        write_repository(tmp_path / "repo", "cmrc2018", ExportArtifacts.from_dir(exp), PackageConfig())
    (exp / "meta.json").write_text(json.dumps({**meta, "reading": {**meta["reading"], "max_query_len": 45}}))
    with pytest.raises(PackageError, match="no room for context"):
        write_repository(tmp_path / "repo", "cmrc2018", ExportArtifacts.from_dir(exp), PackageConfig())


@pytest.fixture(scope="module")
def mrc_ensemble_bundle(mrc_export, tmp_path_factory) -> Path:
    """The same export packaged with layout ensemble: tokenizer, model and post-processing as three models."""
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096, layout="ensemble")
    return write_repository(tmp_path_factory.mktemp("mrc_ens_repo"), "cmrc2018", ExportArtifacts.from_dir(mrc_export), pc).path


server = served("mrc_bundle")
ensemble_server = served("mrc_ensemble_bundle")


LAYOUTS = pytest.mark.parametrize("layout", ["server", "ensemble_server"])  # layout fused (auto), and the ensemble


dev = dev_examples("cmrc2018", "mrc_data", "reading_comprehension")
bundle = opened_bundle("mrc_bundle")


@LAYOUTS
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_answers_equal_offline(layout, request, dev, bundle, protocol):
    from pipeline.reading.windows import make_windows
    from serving.kinds.reading_comprehension.tools import offline_answers

    qs, cs = [e.question for e in dev], [e.context for e in dev]
    wins = make_windows(bundle.wordpiece(), qs, cs, max_seq_len=48, doc_stride=10, max_query_len=12)
    assert len(wins) > 2 * len(dev)  # most contexts span several windows
    server = request.getfixturevalue(layout)
    url = server.http_url if protocol == "http" else server.grpc_url
    with BundleClient(url, protocol, "cmrc2018", retries=0) as client:
        assert kind_of_outputs(client.output_names()).name == "reading_comprehension"
        served = client.answer(qs, cs, batch_size=8)
    offline = offline_answers(bundle, qs, cs, batch_size=8)
    assert all(o is not None for o in offline)
    assert [(a.text, a.start, a.end) for a in served] == [(o.text, o.start, o.end) for o in offline]
    np.testing.assert_allclose([a.score for a in served], [o.score for o in offline], rtol=1e-6, atol=1e-6)
    assert all(c[a.start : a.end] == a.text and 0 < len(a.text) for a, c in zip(served, cs))
    assert len({a.start for a in served}) > 3  # answers vary; not one degenerate position


@LAYOUTS
def test_bad_requests_are_refused_and_the_server_keeps_serving(layout, request, dev):
    import tritonclient.http as th

    server = request.getfixturevalue(layout)
    q, c = dev[0].question, dev[0].context
    with BundleClient(server.grpc_url, "grpc", "cmrc2018", retries=0) as client:
        good = client.answer_batch([q], [c])
        for questions, contexts, message in (([q, ""], [c, c], r"question\[1\]: empty question"),
                                             ([q], [" \n"], r"context\[0\]: empty context"),
                                             ([b"\xff\xfe"], [c], "not valid UTF-8"),
                                             ([q], ["长" * 2000], "over the limit of 4096"),
                                             ([q] * 9, [c] * 9, "over the limit of 8")):
            with pytest.raises(RequestRejected, match=message):
                client.answer_batch(questions, contexts)
        assert client.answer_batch([q], [c]) == good
    raw = th.InferenceServerClient(server.http_url)  # counts that differ cannot be sent through BundleClient
    inputs = [th.InferInput("question", [2], "BYTES"), th.InferInput("context", [1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([q.encode(), q.encode()], dtype=object))
    inputs[1].set_data_from_numpy(np.array([c.encode()], dtype=object))
    with pytest.raises(Exception, match="2 questions but 1 contexts"):
        raw.infer("cmrc2018", inputs)
    raw.close()
    assert server.alive()


def test_a_question_cut_to_max_query_len_is_marked_on_its_windows():
    """windows.make_windows cuts a question to max_query_len tokens and marks every window of its example; validate
    and the served models count those examples (questions_cut)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    from pipeline.reading.windows import make_windows, questions_cut

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *"问题文本长短"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(handle_chinese_chars=True, lowercase=False)  # a token per character
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wins = make_windows(tok, ["问题", "问题长" * 5, "短"], ["文本" * 20] * 3, max_seq_len=16, doc_stride=4, max_query_len=6)
    assert {w.example_index: w.question_cut for w in wins} == {0: False, 1: True, 2: False}
    assert all(len(w.input_ids) <= 16 for w in wins) and sum(w.example_index == 1 for w in wins) > 1
    assert questions_cut(wins) == 1 and questions_cut([]) == 0


@LAYOUTS
def test_served_questions_cut_to_max_query_len_are_counted(layout, request, dev, bundle):
    """A question over max_query_len tokens (12 here) is cut, as offline, and counted on /metrics by the model that
    windows it (ernie_bundle_truncated_items_total): once per question, however many windows its context makes, as
    validate counts dev's."""
    from serving_fixtures import quiet_scrape, settled_scrape

    from pipeline.reading.windows import make_windows, questions_cut

    server = request.getfixturevalue(layout)
    name = "ernie_bundle_truncated_items_total"

    def cut(samples) -> float:
        return sum(v for (n, _), v in samples.items() if n == name)

    before = quiet_scrape(server)  # the earlier tests' requests counted
    assert any(n == name for n, _ in before)  # the series is there from the start, at zero
    questions = [e.question for e in dev[:6]] + [dev[0].question * 6]  # the last well over 12 tokens
    contexts = [e.context for e in dev[:6]] + [dev[0].context]
    offline = questions_cut(make_windows(bundle.wordpiece(), questions, contexts, max_seq_len=48, doc_stride=10,
                                         max_query_len=12))
    with BundleClient(server.grpc_url, "grpc", "cmrc2018", retries=0) as client:
        client.answer_batch(questions, contexts)
    after = settled_scrape(server, lambda s: cut(s) - cut(before) >= offline)
    assert 1 <= offline < len(questions) and cut(after) - cut(before) == offline


def test_smoke_and_client_cli(server, dev, bundle, mrc_bundle, mrc_data, tmp_path, capsys):
    import dataclasses

    from serving.tools import client_cli
    from serving.kinds.reading_comprehension.tools import run_smoke

    with BundleClient(server.http_url, "http", "cmrc2018", retries=0) as client:
        result = run_smoke(bundle, client, dev, batch_size=8)
    assert result.ok and result.mismatches == 0 and result.examples == len(dev)
    assert (result.served_em, result.served_f1) == (result.offline_em, result.offline_f1)
    assert result.max_score_diff < 1e-5
    assert not dataclasses.replace(result, validated=Validated("f1", result.served_f1 + 0.01)).ok

    from serving.tools import smoke

    out = tmp_path / "smoke.json"
    assert smoke.main(["--task", "cmrc2018", "--repository", str(mrc_bundle.parent), "--data-dir", str(mrc_data),
                       "--url", server.http_url, "--batch-size", "8", "--json-out", str(out)]) == 0
    assert "PASS" in capsys.readouterr().out and json.loads(out.read_text())["ok"]

    f = tmp_path / "qa.jsonl"
    f.write_text("\n".join(json.dumps({"question": e.question, "context": e.context}, ensure_ascii=False) for e in dev[:3]), encoding="utf-8")
    for command in ("answer", "predict"):
        assert client_cli.main([command, "--model", "cmrc2018", "--url", server.grpc_url, "--protocol", "grpc", "--file", str(f), "--json"]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [x["question"] for x in lines] == [e.question for e in dev[:3]]
    assert client_cli.main(["answer", "--model", "cmrc2018", "--url", server.http_url, "--question", "谁？", "--context", "他说了"]) == 0
    assert capsys.readouterr().out.count("\t") == 3
    assert client_cli.main(["answer", "--model", "cmrc2018", "--url", server.http_url, "--question", "谁？"]) == 2
    assert "in pairs" in capsys.readouterr().err


@LAYOUTS
def test_smoke_concurrent_mode_holds_every_question_to_its_offline_single_answer(layout, request, dev, bundle):
    from serving.tools.smoke import run_concurrent

    server = request.getfixturevalue(layout)
    items = [(e.question, e.context) for e in dev]  # the tiny dev set: 10 questions
    r = run_concurrent(bundle, server.grpc_url, "grpc", items, concurrency=6)
    assert (r.items, r.mismatches) == (len(dev), 0) and r.items >= 10 and r.ok


def test_offline_yardstick_counts_questions(bundle, dev, monkeypatch):
    """`make perf`'s served/offline ratio for reading comprehension: the model alone runs each question's
    windows as one batch (what one served request executes), and the rate counts questions."""
    import numpy as np

    from pipeline.reading import windows
    from serving.kinds.reading_comprehension.tools import question_batches
    from serving.tools.offline import BundleModel

    pairs = [(e.question, e.context) for e in dev][:6]
    tok, reading = bundle.wordpiece(), bundle.manifest["reading"]
    expected = [len(windows.make_windows(tok, [q], [c], max_seq_len=bundle.max_seq_len, doc_stride=int(reading["doc_stride"]),
                                         max_query_len=int(reading["max_query_len"]))) for q, c in pairs]
    assert max(expected) > 1  # the tiny data has questions with several windows
    batches = []

    def fake_session(self, threads=0):
        def run(ids, types):
            batches.append(len(ids))
            return np.zeros((len(ids), ids.shape[1], 2), np.float32)
        return run

    monkeypatch.setattr(BundleModel, "session", fake_session)
    assert question_batches(bundle, pairs).round(0.2)[0] > 0
    # every question's windows once to warm every padded width, then one call per question in the timed round
    assert batches[: 2 * len(pairs)] == expected + expected


def test_smoke_holds_served_scores_to_validate_only_on_the_same_dev_set():
    manifest = {"validated": {"metric": "f1", "value": 0.5693, "pairs": 6000}}
    assert validated(manifest, 6000, "pairs") == Validated("f1", 0.5693)
    # smoke --set uie.max_eval_texts=1343: 13,430 pairs scored against validate's 6,000 is not a served/offline
    # difference (it printed FAIL); the numbers are not compared, and the run says why
    assert validated(manifest, 13430, "pairs") == Validated(None, None, (
        "  validated f1 0.5693 was on 6000 pairs, this run scored 13430: another dev set, not compared"))
    assert validated(manifest, 13430, "pairs").agrees(0.1)
    assert not Validated("f1", 0.5693).agrees(0.5703) and Validated("f1", 0.5693).agrees(0.5693)
    # validate recorded no count (classification): compared as before
    assert validated({"validated": {"accuracy": 0.52}}, 10, "pairs") == Validated("accuracy", 0.52)
    assert validated({"validated": {"metric": "f1", "value": 0.1, "questions": 800}}, 800, "questions") == Validated("f1", 0.1)
