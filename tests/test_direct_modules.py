"""Direct tests of modules that hold logic and were only ever reached through others (issue 61): each test imports
the module it is about and holds one behaviour of it, on tiny inputs (no model, no data set, no server)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from pipeline.errors import ConfigError, DataError, ModelError
from serving_fixtures import tiny_export  # noqa: F401  (fixture)


# -- pipeline/labels_file.py -----------------------------------------------------------------------------------------
def test_labels_file_reads_json_lines_arrays_in_index_order_and_id2label(tmp_path):
    from pipeline.labels_file import labels_from_id2label, placeholder_id2label, read_labels

    path = tmp_path / "labels.json"
    path.write_text('{"label": "100", "label_desc": "a"}\n\n"101"\n7\n', encoding="utf-8")
    assert read_labels(path, DataError) == ["100", "101", "7"]
    path.write_text(json.dumps([{"index": 1, "label": "b"}, {"index": 0, "label": "a"}]), encoding="utf-8")
    assert read_labels(path, DataError) == ["a", "b"]  # objects that all carry an index are put in that order
    assert labels_from_id2label(path, {"1": "y", "0": "x"}, ConfigError) == ["x", "y"]
    assert placeholder_id2label({"0": "LABEL_0", "1": "LABEL_1"}) and not placeholder_id2label({"0": "x"})


@pytest.mark.parametrize("text, match", [
    ("", "no labels"), ('"a"\n{"label": "a"}\n', r"duplicate labels \['a'\]"), ('"a"\n{oops\n', r"labels.json:2: malformed JSON"),
    ('[{"name": "a"}]', r"item 0: field 'label' missing \(keys: name\)"), ("[true]", "must be a string or a number"),
])
def test_labels_file_refuses_in_one_line_naming_the_place(tmp_path, text, match):
    from pipeline.labels_file import read_labels

    path = tmp_path / "labels.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=match):
        read_labels(path, DataError)


def test_labels_file_id2label_needs_ids_zero_to_n_without_gaps(tmp_path):
    from pipeline.labels_file import labels_from_id2label

    with pytest.raises(ConfigError, match="without gaps"):
        labels_from_id2label(tmp_path, {"0": "a", "2": "b"}, ConfigError)
    with pytest.raises(ConfigError, match="integer ids"):
        labels_from_id2label(tmp_path, {"zero": "a"}, ConfigError)


# -- pipeline/env.py -------------------------------------------------------------------------------------------------
def test_env_prepare_process_sets_only_what_is_unset(monkeypatch):
    from pipeline import env

    monkeypatch.setattr(env, "_PREPARED", False)
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env.prepare_process()
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "5"  # MKL's AVX2 path on AMD
    assert os.environ["OMP_NUM_THREADS"] == "3"  # a user's choice is kept
    monkeypatch.delenv("OMP_NUM_THREADS")
    env.prepare_process()  # prepared once per process: a second call changes nothing
    assert "OMP_NUM_THREADS" not in os.environ
    monkeypatch.setattr(env, "_PREPARED", False)
    env.prepare_process()
    assert os.environ["OMP_NUM_THREADS"] == str(len(os.sched_getaffinity(0)))


def test_env_versions_names_python_and_installed_packages_only(monkeypatch):
    from pipeline import env

    monkeypatch.setattr(env, "TRACKED_PACKAGES", ("numpy", "no-such-package-here"))
    got = env.versions()
    assert got["python"] == sys.version.split()[0] and got["numpy"] == np.__version__
    assert "no-such-package-here" not in got and got["ernie-bundle"]


def test_env_is_online_asks_the_network_unless_told_offline(monkeypatch):
    from pipeline import env

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.delenv("ERNIE_BUNDLE_OFFLINE", raising=False)
        assert env.is_online("127.0.0.1", port, timeout=2)
        monkeypatch.setenv("ERNIE_BUNDLE_OFFLINE", "1")
        assert not env.is_online("127.0.0.1", port, timeout=2)
    monkeypatch.setenv("ERNIE_BUNDLE_OFFLINE", "0")
    assert not env.is_online("127.0.0.1", port, timeout=2)  # nobody listens there any more


# -- pipeline/yaml_input.py ------------------------------------------------------------------------------------------
def test_yaml_input_loads_a_config_as_safe_load_does():
    import yaml

    from pipeline.yaml_input import load

    text = "task: t\nlabels: &l [a, b]\nagain: *l\nnested: {x: 1, y: [1.5, true, null]}\n"
    assert load(text, "t.yaml") == yaml.safe_load(text)
    assert load("", "empty.yaml") is None


def test_yaml_input_refuses_aliases_that_expand_too_far_before_building_them():
    from pipeline.yaml_input import MAX_VALUES, ExpandsTooFar, load

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10**9 values in ~1 KB
    with pytest.raises(ExpandsTooFar, match=rf"bomb.yaml: its YAML aliases expand to more than {MAX_VALUES:,} values \(line"):
        load("\n".join(lines), "bomb.yaml")
    assert issubclass(ExpandsTooFar, ConfigError)


def test_yaml_input_refuses_a_value_that_contains_itself_and_bad_yaml_in_one_line(tmp_path):
    from pipeline.yaml_input import load, load_file

    with pytest.raises(ConfigError, match="self.yaml: a YAML alias refers to a value that contains it"):
        load("a: &a [1, *a]\n", "self.yaml")
    with pytest.raises(ConfigError, match=r"^bad.yaml: invalid YAML: [^\n]*$"):
        load("a: [1, 2\nb: 3\n", "bad.yaml")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"task: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin.yaml: not UTF-8 text \(byte 9\)"):
        load_file(latin)
    with pytest.raises(ConfigError, match="missing.yaml: cannot read it"):
        load_file(tmp_path / "missing.yaml")


def test_yaml_input_short_bounds_what_a_message_shows():
    from pipeline.yaml_input import short

    assert short({"a": 1}) == "{'a': 1}"
    assert len(short(list(range(100_000)))) < 100 and len(short("x" * 10_000)) <= 200


# -- pipeline/kinds/reading_comprehension.py and token_classification.py -----------------------------------------------
def _char_tokenizer(tmp_path: Path, texts, max_seq_len: int):
    from pipeline.tokenizer import Tokenizer, build_char_vocab, write_vocab

    write_vocab(build_char_vocab(texts, 1), tmp_path)
    return Tokenizer.from_model_dir(tmp_path, max_seq_len)


@pytest.mark.parametrize("field, value, match", [
    ("doc_stride", 0, "reading.doc_stride"), ("max_answer_len", 1.5, "reading.max_answer_len"),
    ("dev_for_training", 1.0, "must be < 1"), ("negative_window_ratio", 1.5, "reading.negative_window_ratio")])
def test_reading_config_refuses_settings_the_windows_cannot_use(field, value, match):
    from pipeline.kinds.reading_comprehension import ReadingConfig

    with pytest.raises(ConfigError, match=match):
        ReadingConfig(**{field: value})


def _reading(tmp_path, **settings):
    from pipeline.kinds.reading_comprehension import ReadingComprehension, ReadingConfig
    from pipeline.reading.squad import Answer, QAExample

    context = "蔡伦改进了造纸术，使纸张得以普及。造纸术是中国古代四大发明之一。"
    examples = [QAExample("q1", "谁改进了造纸术", context, (Answer("蔡伦", 0),)),
                QAExample("q2", "造纸术是什么", context, (Answer("中国古代四大发明之一", context.index("中国")),))]
    cfg = SimpleNamespace(max_seq_len=24, kind_settings=ReadingConfig(**{"doc_stride": 6, "max_query_len": 8,
                                                                         "max_answer_len": 12, **settings}))
    tok = _char_tokenizer(tmp_path, [context, *(e.question for e in examples)], cfg.max_seq_len)
    kind = ReadingComprehension(cfg)
    return kind, kind.featurize(tok, examples, cfg), examples, cfg


def test_reading_kind_scores_oracle_logits_as_every_answer_over_all_windows(tmp_path):
    kind, fs, examples, cfg = _reading(tmp_path)
    assert len(fs) > len(examples)  # the passage is longer than one window
    outputs = []
    for f in fs.features:
        logits = np.full((len(f.input_ids), 2), -4.0, dtype=np.float32)
        logits[f.target[0], 0] = logits[f.target[1], 1] = 4.0  # [CLS] (0, 0) where the window lacks the answer
        outputs.append(logits)
    score = kind.score(outputs, fs)
    assert (score.name, score.value, score.metrics["em"], score.metrics["questions"]) == ("f1", 1.0, 1.0, 2)
    assert kind.predictions(outputs, fs) == [(a.start, a.start + len(a.text)) for e in examples for a in e.answers]
    assert kind.manifest_sections(cfg) == {"reading": {"doc_stride": 6, "max_query_len": 8, "max_answer_len": 12}}


def test_reading_kind_decides_past_cls_trains_on_answer_windows_and_reads_each_passage_once(tmp_path):
    kind, fs, examples, _ = _reading(tmp_path, negative_window_ratio=0.0)
    out = np.zeros((5, 2), dtype=np.float32)
    out[0] = 9.0  # [CLS]: the window's no-answer score, never a span
    out[3, 0], out[2, 1] = 1.0, 2.0
    assert kind.decisions(out).tolist() == [3, 2]  # start and end each their own argmax
    training = kind.for_training(fs, seed=0)
    assert 0 < len(training) < len(fs) and all(f.target.any() for f in training.features)
    assert list(kind.training_texts(examples)) == ["谁改进了造纸术", examples[0].context, "造纸术是什么"]


def _tagging(tmp_path, labels=("name", "company")):
    from pipeline.kinds.token_classification import TokenClassification
    from pipeline.labeling.bio import Entity
    from pipeline.labeling.readers import LabelingExample

    texts = ["叶老桂在浙商银行工作", "今天天气很好"]
    examples = [LabelingExample(texts[0], (Entity("name", 0, 3, "叶老桂"), Entity("company", 4, 8, "浙商银行"))),
                LabelingExample(texts[1], ())]
    cfg = SimpleNamespace(task="tiny-ner", labels=list(labels), max_seq_len=16)
    kind = TokenClassification(cfg)
    return kind, kind.featurize(_char_tokenizer(tmp_path, texts, cfg.max_seq_len), examples, cfg), examples


def test_token_classification_kind_scores_oracle_tags_and_predicts_char_spans(tmp_path):
    kind, fs, examples = _tagging(tmp_path)
    assert kind.tags == ["O", "B-name", "I-name", "B-company", "I-company"]
    assert kind.manifest_sections(SimpleNamespace(labels=["name", "company"])) == {"entity_types": ["name", "company"]}

    def one_hot(tags):
        out = np.full((len(tags), len(kind.tags)), -5.0, dtype=np.float32)
        out[np.arange(len(tags)), np.maximum(tags, 0)] = 5.0
        return out

    perfect = [one_hot(f.target) for f in fs.features]
    score = kind.score(perfect, fs)
    assert (score.value, score.metrics["gold_entities"], score.metrics["correct_entities"]) == (1.0, 2, 2)
    assert kind.predictions(perfect, fs) == [(("name", 0, 3), ("company", 4, 8)), ()]
    assert kind.score([one_hot(np.zeros_like(f.target)) for f in fs.features], fs).value == 0.0


def test_token_classification_kind_needs_entity_types(tmp_path):
    from pipeline.kinds.token_classification import TokenClassification

    with pytest.raises(ConfigError, match="task tiny-ner: labels: list the entity types"):
        TokenClassification(SimpleNamespace(task="tiny-ner", labels=[]))


# -- pipeline/validation/report.py -----------------------------------------------------------------------------------
def _report(tmp_path, passed: bool):
    from pipeline.validation.gates import Gate
    from pipeline.validation.report import REPORT_FILE, write_report

    gates = [Gate("accuracy_drop", 0.5, 0.2, True, " pts", "max"), Gate("throughput_ratio", 2.0, 2.4 if passed else 1.5,
                                                                       passed, "x", "min")]
    rows = [{"backend": "onnxruntime-cpu-fp32", "accuracy": 0.8, "sentences_per_s": 100.0, "throughput_ratio": 1.0},
            {"backend": "onnxruntime-cpu-int8", "accuracy": 0.79, "accuracy_drop_points": 1.0, "sentences_per_s": 240.0,
             "throughput_ratio": 2.4, "throughput_ratio_range": (2.2, 2.6)}]
    grid = {"onnxruntime-cpu-int8": [{"batch_size": 1, "seq_len": 16, "sentences_per_s": 50.0, "latency_ms_p99": 2.5},
                                     {"batch_size": 8, "seq_len": 32, "sentences_per_s": 300.0, "latency_ms_p99": 30.0}],
            "paddle-cpu-fp32": []}
    path = write_report(tmp_path, task="tiny", gates=gates, rows=rows, skipped={"ort-cuda": "no GPU"}, grid=grid,
                        sizes={"model.onnx": 3 * 2**20}, selected={"name": "w0.75-int8", "width_mult": 0.75,
                                                                  "quantization": "ort"},
                        chosen="onnxruntime-cpu-int8", fp32_accuracy=0.8, batch_size=32,
                        anchor={"what": "onnxruntime quantize_dynamic(per_channel=True) of onnx/fp32.onnx", "accuracy": 0.785,
                                "accuracy_drop_points": 1.5, "throughput_ratio": None})
    assert path == tmp_path / REPORT_FILE
    return path.read_text(encoding="utf-8")


def test_validation_report_says_the_verdict_every_gate_row_skip_grid_and_file(tmp_path):
    text = _report(tmp_path, passed=False)
    assert text.startswith("# Validation report: tiny\n")
    assert "**Gates: FAILED** - chosen backend `onnxruntime-cpu-int8`" in text
    assert "| throughput_ratio | min 2x | 1.5x | FAIL |" in text and "| accuracy_drop | max 0.5 pts | 0.2 pts | pass |" in text
    assert "Selected candidate: `w0.75-int8` (width_mult 0.75, quantization ort)." in text
    assert "| onnxruntime-cpu-fp32 | 0.8000 | - |" in text  # what was not measured is a dash, never 0
    assert "| 2.40 [2.20–2.60] |" in text
    assert "| ort-cuda | skipped: no GPU |" in text
    assert "### onnxruntime-cpu-int8" in text and "### paddle-cpu-fp32" not in text
    assert "| 1 | 50.0 (p99 2.5 ms) | - |" in text and "| 8 | - | 300.0 (p99 30.0 ms) |" in text
    assert "| model.onnx | 3.00 |" in text
    assert ("The anchor, onnxruntime quantize_dynamic(per_channel=True) of onnx/fp32.onnx: accuracy 0.7850 "
            "(drop 1.50 pts).") in text  # its x FP32 is said only where it was timed beside ONNX Runtime's FP32
    assert "**Gates: PASSED**" in _report(tmp_path, passed=True)


def test_validation_plot_draws_the_measured_backends(tmp_path):
    from pipeline.validation.report import PLOT_FILE, plot_accuracy_vs_throughput

    rows = [{"backend": "onnxruntime-cpu-fp32", "accuracy": 0.8, "sentences_per_s": 100.0},
            {"backend": "ort-cuda", "accuracy": None, "sentences_per_s": None}]  # skipped: no point
    out = plot_accuracy_vs_throughput(rows, tmp_path / PLOT_FILE, 0.8, 32, metric_label="F1")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- pipeline/backends/openvino/convert.py and engine.py ------------------------------------------------------------
def _ov_model():
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 3], ov.Type.f32, name="x")
    return ov.Model([ops.relu(x)], [x], "tiny")


def test_openvino_ir_is_written_whole_copied_moved_and_read_back(tmp_path):
    from pipeline.backends.openvino.convert import WEIGHTS_SUFFIX, copy_ir, move_ir, read_model, save_ir

    xml = save_ir(_ov_model(), tmp_path / "a" / "int8.xml")
    assert xml.is_file() and xml.with_suffix(WEIGHTS_SUFFIX).is_file()
    assert sorted(p.name for p in xml.parent.iterdir()) == ["int8.bin", "int8.xml"]  # no staging folder left
    copied = copy_ir(xml, tmp_path / "b" / "copy.xml")
    moved = move_ir(copied, tmp_path / "b" / "moved.xml")
    assert not copied.exists() and not copied.with_suffix(WEIGHTS_SUFFIX).exists()
    model = read_model(moved)
    assert [p.get_friendly_name() for p in model.get_parameters()] == ["x"]


def test_openvino_read_model_says_in_one_line_what_is_wrong(tmp_path):
    from pipeline.backends.openvino.convert import read_model, reason, save_ir

    with pytest.raises(ModelError, match="model not found"):
        read_model(tmp_path / "none.xml")
    xml = save_ir(_ov_model(), tmp_path / "m.xml")
    xml.with_suffix(".bin").unlink()
    with pytest.raises(ModelError, match="its weights file m.bin is missing"):
        read_model(xml)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ModelError, match=r"junk.onnx: OpenVINO cannot read it \([^\n]*\)$"):
        read_model(junk)
    assert reason(RuntimeError("Exception from src/core.cpp:1:\nthe reason\n")) == "the reason"


def _ov_cfg(**properties):
    from pipeline.backends.openvino.config import OpenVINOConfig

    return SimpleNamespace(engine_settings={"openvino": OpenVINOConfig(properties=properties)},
                           quantization=SimpleNamespace(openvino_smooth_alphas=[0.5]))


def test_openvino_engine_opens_sessions_with_the_properties_its_candidates_recorded(monkeypatch):
    from pipeline.backends.openvino import session as ov_session
    from pipeline.backends.openvino.engine import ENGINE

    cfg = _ov_cfg(ENABLE_HYPER_THREADING=False)
    settings = ENGINE.settings(cfg)
    assert settings == {"openvino": {"inference_precision": "f32", "properties": {"ENABLE_HYPER_THREADING": False},
                                     "width_independent": True}}
    opened = {}
    monkeypatch.setattr(ov_session, "session", lambda path, precision, properties: opened.update(
        path=path, precision=precision, properties=properties.as_dict()))
    ENGINE.open(Path("m.xml"), "int8", json.loads(json.dumps(settings)))  # settings as a candidate's record keeps them
    assert opened["precision"] == "int8" and opened["properties"]["ENABLE_HYPER_THREADING"] is False
    params = ENGINE.form_params(cfg)
    assert params["alphas"] == [0.5] and params["properties"]["ENABLE_HYPER_THREADING"] is False
    assert "INFERENCE_NUM_THREADS" not in params["properties"] and params["openvino"] and "nncf" in params


def test_bench_opens_openvino_forms_with_the_properties_the_bundle_serves(monkeypatch):
    """make bench's OpenVINO rows are compiled as the bundle serves them (its snippets and the task's properties):
    SNIPPETS_MODE alone moves a near-tie now and then, so the shipped row would score and time another engine."""
    from pipeline.backends.openvino import session as ov_session
    from pipeline.backends.openvino.engine import ENGINE

    bench = _bench()
    cfg = _ov_cfg(ENABLE_HYPER_THREADING=False)
    opened = []
    monkeypatch.setattr(ov_session, "session", lambda path, precision, properties: opened.append(
        (Path(path).name, precision, {k: v for k, v in properties.as_dict().items() if k != "INFERENCE_NUM_THREADS"})))
    bench._session("openvino-int8 (w0.5, static-sq0.85)", Path("int8.xml"), cfg)
    bench._session(bench.OPENVINO_FP32, Path("fp32.onnx"), cfg)
    served = ENGINE.form_params(cfg)["properties"]  # what package writes into the model's engine_properties
    assert served["SNIPPETS_MODE"] == "ENABLE" and served["ENABLE_HYPER_THREADING"] is False
    assert opened == [("int8.xml", "int8", served), ("fp32.onnx", "fp32", served)]


def test_bench_runs_the_anchor_with_ort_defaults_and_its_twin_and_our_forms_in_our_session(monkeypatch):
    """The anchor rows are the one-liner as its users run it (ORT's defaults, SkipLayerNorm fused); ``anchor (our ORT
    session)`` and every ONNX Runtime form of ours run in the session the bundle serves with, so the table shows what
    of a ratio to the anchor that session option buys."""
    from pipeline.backends.onnxruntime import session as ort_session

    bench = _bench()
    opened = {}
    monkeypatch.setattr(ort_session, "session", lambda path, ort_defaults=False: opened.setdefault(Path(path).name, []).append(ort_defaults))
    for name, path in (("anchor", "anchor.onnx"), ("anchor-reduce_range", "anchor_rr.onnx"), (bench.ANCHOR_OURS, "anchor.onnx"),
                       ("ort-fp32", "fp32.onnx"), ("onnxruntime-int8 (w0.5, static-sq0.85)", "int8.onnx")):
        bench._session(name, Path(path), cfg=None)
    assert opened == {"anchor.onnx": [True, False], "anchor_rr.onnx": [True], "fp32.onnx": [False], "int8.onnx": [False]}


def _bench():
    """scripts/bench.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", Path(__file__).resolve().parent.parent / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_openvino_engine_check_names_a_property_the_cpu_plugin_refuses():
    from pipeline.backends.openvino.engine import ENGINE
    from pipeline.contract import form

    ENGINE.check(_ov_cfg())
    with pytest.raises(ConfigError, match="OpenVINO refuses NUM_STREAMS='lots'"):
        ENGINE.check(_ov_cfg(NUM_STREAMS="lots"))
    assert form(ENGINE.form).precision.value == "int8" and ENGINE.served.form == ENGINE.form


# -- pipeline/backends/onnxruntime/engine.py --------------------------------------------------------------------------
def test_onnxruntime_engine_makes_its_speed_and_per_batch_forms_all_int8_and_opens_them(tiny_export, tmp_path):
    """The screen's form (every MatMul in fixed-scale INT8, one batch of scales) and the per-batch form, from the
    export's real FP32 ONNX; both open in the engine's own sessions and answer in the model's shape."""
    import onnx

    from pipeline.backends.onnxruntime.engine import ENGINE
    from pipeline.quantization.config import QuantizationConfig

    fp32 = tiny_export / "onnx" / "fp32.onnx"
    ids = np.array([[1, 5, 6, 7, 2], [1, 8, 9, 2, 0]], dtype=np.int64)
    feeds = [{"input_ids": ids, "token_type_ids": np.zeros_like(ids)}]
    cfg = SimpleNamespace(quantization=QuantizationConfig())
    ENGINE.speed_form(fp32, tmp_path / "speed.onnx", SimpleNamespace(feeds=feeds, pad_id=0), cfg)
    ENGINE.per_batch_int8(fp32, tmp_path / "batch.onnx", cfg)
    for name in ("speed.onnx", "batch.onnx"):
        ops = [n.op_type for n in onnx.load(str(tmp_path / name)).graph.node]
        integer = sum(ops.count(op) for op in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulInteger"))
        assert integer >= 6, (name, sorted(set(ops)))  # Q, K, V, output, both FFN projections of the one layer
        logits = ENGINE.open(tmp_path / name, "int8", {}).run(ids, np.zeros_like(ids))
        assert logits.shape == (2, 3), name


# -- pipeline/backends/paddle/engine.py, registry.runtimes ------------------------------------------------------------
def test_each_engine_declares_its_runtimes_and_the_registry_lists_cpu_first(tiny_export):
    """Every runtime comes from its engine's folder; the registry lists the CPU ones first, ONNX Runtime's before
    Paddle's (Paddle's OpenMP threads slow an ORT session timed after them), and Paddle Inference's CPU runtime runs
    the export's FP32 program in the model's shape."""
    from pipeline.backends import registry
    from pipeline.backends.engine import RunOptions
    from pipeline.backends.onnxruntime.engine import RUNTIMES as ORT
    from pipeline.backends.paddle.engine import RUNTIMES as PADDLE, SERVED

    every = registry.runtimes()
    assert set(every) == {*ORT, *PADDLE, *(r for e in registry.CPU_ENGINES for r in e.runtimes)}
    devices = [r.device for r in every]
    assert devices == sorted(devices, key=lambda d: d != "cpu")  # CPU, then GPU
    names = [r.name for r in every]
    assert names.index("onnxruntime-cpu-int8") < names.index("paddle-cpu-fp32")
    assert {(r.name, r.form) for r in PADDLE} == {("paddle-cpu-fp32", "paddle_fp32"), ("paddle-cpu-int8", "paddle_int8"),
                                                  ("paddle-trt-fp16", "paddle_fp32"), ("paddle-trt-int8", "paddle_int8")}
    assert all(r.available() for r in PADDLE if r.device == "gpu")  # the CPU build here: each says why not
    assert SERVED.reads_programs and registry.served_engine("paddle") is SERVED
    fp32 = registry.by_name("paddle-cpu-fp32")
    ids = np.array([[1, 5, 6, 7, 2]], dtype=np.int64)
    assert fp32.open(fp32.artifact(tiny_export), RunOptions(threads=1)).run(ids, np.zeros_like(ids)).shape == (1, 3)


# -- pipeline/compress/build.py and onnx_candidates.py ---------------------------------------------------------------
def test_compress_preflight_refuses_before_any_long_work(tmp_path):
    from pipeline.compress.arguments import CompressConfig
    from pipeline.compress.build import preflight

    grid = preflight(CompressConfig(strategy="ptq", algo_list=["mse"], batch_size_list=[4], batch_num_list=[2]),
                     train_size=8, static_model_dir=None)
    assert [(g.algo, g.batch_size, g.batch_num) for g in grid] == [("mse", 4, 2)]
    with pytest.raises(DataError, match="4 x batch_num 3 = 12 calibration examples, but the training split has only 8"):
        preflight(CompressConfig(strategy="ptq", algo_list=["mse"], batch_num_list=[3]), train_size=8, static_model_dir=None)
    with pytest.raises(ModelError, match="static model dir not found"):
        preflight(CompressConfig(strategy="ptq"), train_size=8, static_model_dir=tmp_path / "none")
    static = tmp_path / "static"
    static.mkdir()
    for name in ("model.pdmodel", "model.pdiparams"):
        (static / name).write_bytes(b"")
    with pytest.raises(ConfigError, match="dynabert and qat need the dygraph model"):
        preflight(CompressConfig(strategy="dynabert+ptq"), train_size=8, static_model_dir=static)


def test_onnx_candidates_are_each_widths_fp32_then_one_int8_per_engine(tmp_path, monkeypatch):
    from pipeline.backends.onnxruntime import convert
    from pipeline.compress.architecture import UNPRUNED, Architecture
    from pipeline.compress.build import Source
    from pipeline.compress.onnx_candidates import EngineSearch, OnnxBuilder, plan

    converted = []
    monkeypatch.setattr(convert, "export_onnx", lambda infer_dir, path, opset: converted.append(Path(path).parent.name) or Path(path))
    searched = []

    def engine(name, suffix):
        def search(fp32, path, baseline):
            searched.append((name, fp32.parent.name, path.parent.name, baseline and baseline.parent.name))
            recipe = SimpleNamespace(name=f"{name}-r", as_dict=lambda: {"name": f"{name}-r"})
            return SimpleNamespace(chosen=SimpleNamespace(recipe=recipe, drop_points=0.1), within_budget=True)
        e = SimpleNamespace(name=name, int8_suffix=suffix, candidate_file=f"{name}.bin", quantization=f"q-{name}")
        return EngineSearch(e, search, settings={name: {"x": 1}}, embeddings_int8=name == "ort")

    searches = [engine("ort", "int8"), engine("ov", "ov-int8")]
    half = Architecture(0.5)
    planned = plan([UNPRUNED, half], searches, quantize_unpruned=False)
    assert [(p.name, p.runtime, p.quantization) for p in planned] == [
        ("fp32", "onnxruntime", "none"), ("w0.5", "onnxruntime", "none"), ("w0.5-int8", "ort", "q-ort"),
        ("w0.5-ov-int8", "ov", "q-ov")]  # the unpruned width not quantized
    assert [p.name for p in plan([UNPRUNED], searches, quantize_unpruned=True)] == ["fp32", "int8", "ov-int8"]
    assert [p.name for p in plan([UNPRUNED, Architecture(1.0, 0.5), Architecture(0.5, 0.5)], searches[1:], False)] == [
        "fp32", "d0.5", "d0.5-ov-int8", "w0.5-d0.5", "w0.5-d0.5-ov-int8"]  # depth: every head, half the layers
    sources = {UNPRUNED: Source(UNPRUNED, tmp_path / "m", tmp_path / "s", ""),
               half: Source(half, tmp_path / "w", tmp_path / "ws", "w0.5-")}
    asked = []
    builder = OnnxBuilder(lambda w: asked.append(w) or sources[w], tmp_path, log=lambda s: None)
    int8 = builder.build(planned[3])  # built on demand, in any order: the width's FP32 ONNX first, once
    assert converted == ["w0.5", "fp32"] and searched == [("ov", "w0.5", "w0.5-ov-int8", "fp32")]  # drops vs the unpruned
    cands = [builder.build(p) for p in planned[:3]]
    assert converted == ["w0.5", "fp32"] and [s[0] for s in searched] == ["ov", "ort"] and set(asked) == {half, UNPRUNED}
    assert [c.name for c in cands] == ["fp32", "w0.5", "w0.5-int8"]
    assert int8.model_path == tmp_path / "candidates" / "w0.5-ov-int8" / "ov.bin" and not int8.embeddings_int8
    assert int8.source_onnx == tmp_path / "candidates" / "w0.5" / "model.onnx" == cands[1].model_path
    assert int8.settings == {"width_mult": 0.5, "depth_mult": 1.0, "int8_recipe": {"name": "ov-r"}, "heldout_drop_points": 0.1,
                             "recipe_within_budget": True, "ov": {"x": 1}}


def test_screen_skips_only_what_a_qualifying_candidate_beats_in_every_round():
    """pipeline/compress/screen.py: the order (baseline first, then fastest) and the rule (faster in every round, and
    within budget: skip; the rounds disagree: build)."""
    from pipeline.compress.architecture import Architecture
    from pipeline.compress.onnx_candidates import Planned
    from pipeline.compress.screen import Screen
    from pipeline.evaluation import Interleaved

    rates = {"fp32": [100, 100, 100], "int8": [150, 260, 240], "ov-int8": [300, 250, 280], "w0.5-ov-int8": [500, 520, 480]}
    s = Screen(Interleaved(rates, "fp32"))
    planned = [Planned(n, Architecture(0.5 if n.startswith("w") else 1.0)) for n in ("fp32", "int8", "ov-int8", "w0.5-ov-int8", "late")]
    assert [p.name for p in s.order(planned)] == ["fp32", "late", "w0.5-ov-int8", "ov-int8", "int8"]  # "late": unscreened
    assert s.cannot_win("int8", ["fp32"]) is None  # slower candidates qualify only once built
    assert s.cannot_win("int8", ["ov-int8"]) is None  # 260 > 250 in one round: within noise, built
    why = s.cannot_win("ov-int8", ["fp32", "w0.5-ov-int8"])
    assert why == "w0.5-ov-int8 is within budget and 1.71x its speed on this CPU's screen [1.67-2.08; faster in 3 of 3 rounds]"
    assert s.cannot_win("w0.5-ov-int8", ["fp32", "ov-int8"]) is None and s.cannot_win("late", ["fp32"]) is None
    assert s.as_dict()["int8"] == {"sent_per_s": 240.0, "x_fp32": [2.4, 1.5, 2.6]}
    # rounds that disagree get a second look: the two alone (a duel); skipped only if it is as sure as every one of
    # the screen's rounds: all of 3, or 5 of 6 (a sign test; 4 of 6 is not)
    asked = []

    def duel(a, b, faster=(130, 125, 128)):
        asked.append((a, b))
        return Interleaved({a: list(faster), b: [100] * len(faster)}, a)

    s = Screen(Interleaved(rates, "fp32"), duel)
    assert s.cannot_win("int8", ["ov-int8"]) == ("ov-int8 is within budget and 1.28x its speed on this CPU, the two timed "
                                                 "alone (the screen could not tell them apart) [1.25-1.30; faster in 3 of 3 rounds]")
    assert asked == [("ov-int8", "int8")]
    assert s.cannot_win("ov-int8", ["w0.5-ov-int8"]).endswith("on this CPU's screen [1.67-2.08; faster in 3 of 3 rounds]")
    assert len(asked) == 1  # the screen told those apart: no duel
    # one the screen's rounds are sure of decides before any duel, wherever it stands among the qualifying
    assert s.cannot_win("int8", ["ov-int8", "w0.5-ov-int8"]).startswith("w0.5-ov-int8 is within budget and 2.00x its "
                                                                         "speed on this CPU's screen")
    assert len(asked) == 1
    assert Screen(Interleaved(rates, "fp32"), lambda a, b: duel(a, b, (130, 99, 128))).cannot_win("int8", ["ov-int8"]) is None
    five_of_six = Screen(Interleaved(rates, "fp32"), lambda a, b: duel(a, b, (130, 99, 128, 110, 120, 125)))
    assert five_of_six.cannot_win("int8", ["ov-int8"]).endswith("[0.99-1.30; faster in 5 of 6 rounds]")
    four_of_six = Screen(Interleaved(rates, "fp32"), lambda a, b: duel(a, b, (130, 99, 128, 110, 97, 125)))
    assert four_of_six.cannot_win("int8", ["ov-int8"]) is None
    # the speed gate said before any distillation: only when even the fastest's best round is short of it
    assert s.short_of(5.0) is None and s.short_of(0) is None
    assert s.short_of(5.5) == ("no candidate can reach gates.min_throughput_ratio 5.5x FP32 on this CPU: the fastest "
                               "architecture, w0.5-ov-int8, screened 5.00x [4.80-5.20]; validate's throughput gate will "
                               "fail unless smaller architectures (compress.width_mult_list, depth_mult_list) are added or the gate "
                               "is set for this CPU")


def test_a_duel_times_the_two_sessions_alone_once_per_pair():
    """evaluation.duels (the screen's and compress's selection's): the two sessions, and only they, in interleaved rounds
    over the batches of every session's rounds; a pair asked again (either way round) is not timed again.  (Which of the two is faster is Screen.cannot_win's to judge,
    tested above on fixed rates: a test never asserts on wall-clock time.)"""
    from pipeline.evaluation import duels

    ran, lines = [], []

    class Session:
        def __init__(self, name):
            self.name = name

        def run(self, input_ids, token_type_ids):
            ran.append((self.name, input_ids.shape[0]))

    sessions = {n: Session(n) for n in ("a", "b", "other")}
    duel = duels(sessions, _feature_set([5, 7, 9, 11] * 4), batch_size=4, batches=3, rounds=4, log=lines.append,
                 label="[compress] screen: ")
    t = duel("a", "b")
    # 4 rounds, or 8 or 12 where the rounds left it open (which one won is wall-clock: not asserted)
    assert set(t.rates) == {"a", "b"} and len(t.rates["a"]) == len(t.rates["b"]) in (4, 8, 12) and t.base == "a"
    assert {name for name, _ in ran} == {"a", "b"} and {rows for _, rows in ran} == {4}
    assert sum(1 for name, _ in ran if name == "a") >= 4 * 3  # every round runs the 3 batches
    assert duel("b", "a") is t and len(lines) == 1 and lines[0].startswith("[compress] screen: a against b alone: ")


def test_each_sessions_turn_in_the_rounds_waits_until_the_last_ones_threads_stop_spinning():
    """evaluation.interleaved_throughput: a session's pool threads that keep burning CPU after its call returned (ONNX
    Runtime's spin, ~45 ms) would run on the cores the next session is timed on; every turn starts once the process is
    idle (wait_until_idle), so no timed batch of one session overlaps the other's spinning threads."""
    import threading

    from pipeline.evaluation import interleaved_throughput, wait_until_idle

    spinning: list[threading.Thread] = []
    overlapped = []

    class Spinner:  # returns at once, leaving a thread busy for 60 ms, as a spinning pool does
        def run(self, input_ids, token_type_ids):
            def spin(until=time.perf_counter() + 0.06):
                while time.perf_counter() < until:
                    pass
            spinning.append(threading.Thread(target=spin))
            spinning[-1].start()

    class Timed:
        def run(self, input_ids, token_type_ids):
            overlapped.append(any(t.is_alive() for t in spinning))

    t = interleaved_throughput({"spinner": Spinner(), "timed": Timed()}, _feature_set([5, 7, 9, 11] * 4), 4, rounds=3,
                               max_batches=2, warmup=0)
    assert len(t.rates["timed"]) == 3 and len(overlapped) == 3 * 2
    assert not any(overlapped)
    for th in spinning:
        th.join()
    assert wait_until_idle(limit_s=1.0) < 1.0  # an idle process is not held to the limit


def test_a_duel_the_rounds_leave_open_is_timed_for_more_rounds_while_more_could_settle_it(monkeypatch):
    """evaluation.duels: 4 of 5 rounds is timed again (9 of 10 settles it, as surely as 5 of 5; 8 of 10 goes on to 12 of 15);
    3 of 5, then 6 of 10, stops there: 5 more rounds won by either could not reach 12 of 15; 5 of 5 and 0 of 5 need no
    more."""
    from pipeline import evaluation
    from pipeline.evaluation import Interleaved

    def timed(*scripted):
        calls = iter(scripted)

        def fake(sessions, dev, batch_size, *, rounds, max_batches, warmup):
            a, b = sessions
            won = next(calls)
            return Interleaved({a: [110.0] * won + [90.0] * (rounds - won), b: [100.0] * rounds}, a)
        return fake

    def duel(*scripted):
        monkeypatch.setattr(evaluation, "interleaved_throughput", timed(*scripted))
        lines = []
        t = evaluation.duels({"a": None, "b": None}, None, batch_size=4, batches=3, rounds=5, log=lines.append,
                             label="[compress] screen: ")("a", "b")
        return len(t.rates["a"]), t.wins("a", "b"), lines[-1]

    assert duel(4, 5) == (10, 9, "[compress] screen: a against b alone: 1.10x [0.90-1.10], faster in 9 of 10 rounds")
    assert duel(3, 3)[:2] == (10, 6)
    assert duel(2, 2)[:2] == (10, 4) and duel(5)[:2] == (5, 5) and duel(0)[:2] == (5, 0)
    assert duel(4, 4, 4)[:2] == (15, 12)


def test_an_engines_own_form_ships_only_for_its_selection_or_when_package_runtime_names_it():
    """registry.shipped_own_form_engines: OpenVINO's IR is built for the selected width when the selected candidate runs
    in OpenVINO or package.runtime asks for it; never for another engine's selection (minutes of NNCF for nothing)."""
    from pipeline.backends.registry import shipped_own_form_engines
    from pipeline.compress.arguments import CompressConfig
    from serving.bundle.config import PackageConfig

    def cfg(runtime="auto", engines=("onnxruntime", "openvino"), route="onnx"):
        return SimpleNamespace(compress=CompressConfig(engines=list(engines), candidate_format=route), package=PackageConfig(runtime=runtime))

    names = lambda engines: [e.name for e in engines]  # noqa: E731
    assert names(shipped_own_form_engines(cfg(), "openvino")) == ["openvino"]
    assert names(shipped_own_form_engines(cfg(), "onnxruntime")) == []
    assert names(shipped_own_form_engines(cfg("python-openvino"), "onnxruntime")) == ["openvino"]
    assert names(shipped_own_form_engines(cfg("python-openvino", engines=["onnxruntime"]), "onnxruntime")) == []
    assert names(shipped_own_form_engines(cfg(route="paddle", engines=["onnxruntime", "openvino"]), "openvino")) == []


def test_the_onnx_int8_forms_are_not_built_for_an_openvino_selection_nothing_asks_them_for():
    """registry.onnx_int8_forms_ship: int8.onnx and int8_qdq.onnx ship for every selection but one in an engine with a
    form of its own, and for that one too when the package (runtime, GPU kind) or validate (other backends, a pinned
    one) asks."""
    from pipeline.backends.registry import onnx_int8_forms_ship
    from pipeline.validation.config import ValidateConfig
    from serving.bundle.config import PackageConfig

    def cfg(runtime="auto", device="CPU", backends="shipped", chosen="auto"):
        return SimpleNamespace(package=PackageConfig(runtime=runtime, device=device),
                               validate=ValidateConfig(backends=backends, chosen_backend=chosen))

    assert not onnx_int8_forms_ship(cfg(), "openvino")
    assert onnx_int8_forms_ship(cfg(), "onnxruntime") and onnx_int8_forms_ship(cfg(), "paddle")
    assert onnx_int8_forms_ship(cfg("python-openvino"), "openvino") and onnx_int8_forms_ship(cfg("onnxruntime"), "openvino")
    assert onnx_int8_forms_ship(cfg(device="GPU"), "openvino")  # the QDQ form is TensorRT's
    assert onnx_int8_forms_ship(cfg(backends="all"), "openvino")
    assert onnx_int8_forms_ship(cfg(backends=["onnxruntime-cpu-int8"]), "openvino")
    assert onnx_int8_forms_ship(cfg(chosen="onnxruntime-cpu-int8"), "openvino")  # validate pins another backend


# -- serving/bundle/kinds/base.py ------------------------------------------------------------------------------------
def _pc(**kw):
    from serving.bundle.config import PackageConfig

    return PackageConfig(**kw)


def test_bundle_kind_layout_and_label_rows():
    from serving.bundle.kinds.base import BundleKind, PythonModels

    class Plain(BundleKind):
        files = PythonModels("tok.py", "post.py", "plain.py")  # fusable: it has one python model for the three steps

    kind = Plain()
    assert kind.layout(_pc(runtime="python-onnxruntime")) == "fused"  # auto: fused where the steps fit one python model
    assert kind.layout(_pc(runtime="onnxruntime")) == "ensemble"  # a native backend runs the model: three models
    assert kind.layout(_pc(runtime="python-onnxruntime", layout="ensemble")) == "ensemble"
    assert kind.configs(None, _pc(runtime="python-onnxruntime")) is None  # no fused form of its own
    assert kind.label_problem(['{"label": "a"}', '{"label": 1}']) is None
    assert kind.label_problem(['"a"']) == "rows must be JSON objects with a 'label'"


def test_windowed_kind_checks_its_meta_section_and_doubles_instances_for_a_whole_core_engine():
    from pipeline.contract import TaskKind
    from serving.bundle.kinds.base import WindowedKind

    class Windowed(WindowedKind):
        kind = TaskKind.READING_COMPREHENSION
        meta_section, meta_keys = "win", ("doc_stride", "max_first_len", "max_span_len")

    kind = Windowed()
    good = {"max_seq_len": 32, "win": {"doc_stride": 8, "max_first_len": 6, "max_span_len": 5}}
    assert kind.meta_problem(good) is None
    assert kind.shape_fields(good) == {"doc_stride": 8, "max_first_len": 6, "max_span_len": 5}
    assert kind.meta_problem({"max_seq_len": 32}) == "field 'win' (doc_stride, max_first_len, max_span_len) missing"
    assert kind.meta_problem({**good, "win": {**good["win"], "doc_stride": True}}) == \
        "win.doc_stride must be a positive integer, got True"
    assert "leaves no room for context in max_seq_len 32" in kind.meta_problem({**good, "win": {**good["win"],
                                                                                             "max_first_len": 29}})
    assert kind.tag_problem(["start", "end"]) is None and "needs the two rows" in kind.tag_problem(["B-x"])
    pc, why = kind.serving_defaults(_pc(runtime="python-openvino", threads=0))
    assert pc.instance_count == 2 and pc.threads == len(os.sched_getaffinity(0)) and "2 instances" in why
    ort = _pc(runtime="python-onnxruntime")
    assert kind.serving_defaults(ort) == (ort, None)  # one instance per core already
    assert "up to 4 texts per request" in kind.batching_line(_pc(max_batch_size=4, preferred_batch_size=1), "texts", True)


# -- serving/kinds/classification/bundle.py and token_classification/bundle.py ----------------------------------------
def _shape(kind, meta=None):
    from serving.bundle.model_config import BundleShape

    return BundleShape(task="t", num_labels=5, max_seq_len=32, model_file="model.onnx", task_type=kind.name,
                       settings=kind.shape_fields(meta or {}))


def test_classification_bundle_serves_a_text_pair_as_a_second_input():
    from serving.kinds.classification.bundle import KIND

    meta = {"text_pair": True, "text_pair_join": "[SEP]"}
    assert KIND.meta_sections(meta) == {"text_pair": True, "text_pair_join": "[SEP]"} and KIND.meta_sections({}) == {}
    pc = _pc(runtime="onnxruntime")
    pair = {c.name: c for c in KIND.configs(_shape(KIND, meta), pc)}
    single = {c.name: c for c in KIND.configs(_shape(KIND), pc)}
    assert set(pair) == {"t", "t_tokenizer", "t_model", "t_postprocess"}
    assert [i.name for i in pair["t"].input] == ["text", "text_pair"] and [i.name for i in single["t"].input] == ["text"]
    assert [i.optional for i in pair["t_tokenizer"].input] == [False, True]  # the python model refuses it by name
    fused = KIND.configs(_shape(KIND, meta), _pc(runtime="python-onnxruntime"))
    assert [c.name for c in fused] == ["t"] and fused[0].parameters["text_pair"].string_value == "true"
    assert [p.name for p in KIND.postprocess_helpers(pc)] == ["class_outputs.py"]
    assert KIND.label_problem(["anything"]) is None


def test_a_multi_label_classifiers_bundle_answers_ranked_labels_and_their_count(tmp_path):
    """meta.json multi_label: every layout's outputs are the ranked labels and ``count``, its post-processing gets the
    threshold, FastDeploy's api is refused; ``LabelSets`` ranks by logit and counts those above the log-odds."""
    import numpy as np

    from serving.bundle.model_config import BundleShape
    from serving.kinds.classification.bundle import KIND
    from serving.kinds.classification.models.class_outputs import LabelSets

    meta = {"multi_label": {"threshold": 0.7}}
    assert KIND.meta_sections(meta) == meta and KIND.meta_problem(meta) is None
    assert "between 0 and 1" in KIND.meta_problem({"multi_label": {"threshold": 1.5}})
    ensemble = {c.name: c for c in KIND.configs(_shape(KIND, meta), _pc(runtime="python-onnxruntime", layout="ensemble"))}
    fused = KIND.configs(_shape(KIND, meta), _pc(runtime="python-onnxruntime"))
    names = ["labels", "label_descs", "label_probs", "count", "probs"]
    assert [o.name for o in ensemble["t"].output] == names == [o.name for o in fused[0].output]
    assert [list(o.dims) for o in fused[0].output] == [[5], [5], [5], [1], [5]]
    assert ensemble["t_postprocess"].parameters["threshold"].string_value == "0.7"
    assert fused[0].parameters["threshold"].string_value == "0.7"
    assert "threshold" not in {c.name: c for c in KIND.configs(_shape(KIND), _pc(runtime="python-onnxruntime",
                                                                                 layout="ensemble"))}["t_postprocess"].parameters
    with pytest.raises(ConfigError, match="multi-label classifier is packaged with package.api ernie-bundle"):
        KIND.configs(_shape(KIND, meta), _pc(api="fastdeploy", runtime="python-onnxruntime"))
    shape = BundleShape(task="t", num_labels=5, max_seq_len=32, model_file="model.onnx", settings=KIND.shape_fields(meta))
    assert shape.settings["threshold"] == 0.7 and KIND.shape_fields({})["threshold"] is None

    (tmp_path / "labels.json").write_text("".join(json.dumps({"label": v, "label_desc": v.upper()}) + "\n"
                                                  for v in "abc"), encoding="utf-8")
    sets = LabelSets(tmp_path / "labels.json", 0.7)  # log-odds 0.847
    out = sets.outputs(np.array([[0.9, -2.0, 3.0], [0.8, 0.1, -1.0]], np.float32))
    assert out["labels"].tolist() == [[b"c", b"a", b"b"], [b"a", b"b", b"c"]] and out["count"].tolist() == [[2], [0]]
    assert out["label_descs"][0].tolist() == [b"C", b"A", b"B"] and out["label_probs"].dtype == np.float32
    np.testing.assert_allclose(out["probs"][0], 1 / (1 + np.exp(-np.array([0.9, -2.0, 3.0]))), rtol=1e-6)
    assert np.all(np.diff(out["label_probs"], axis=1) <= 0)
    assert list(sets.outputs(np.zeros((1, 3), np.float32), wanted={"count"})) == ["count"]


def test_token_classification_bundle_checks_bio_tags_and_speaks_fastdeploys_names():
    from serving.kinds.token_classification.bundle import KIND

    rows = lambda *names: [json.dumps({"label": n}) for n in names]  # noqa: E731
    assert KIND.label_problem(rows("O", "B-name", "I-name")) is None
    assert "BIO tags with 'O' first" in KIND.label_problem(rows("B-name", "O"))
    assert "BIO tags with 'O' first" in KIND.label_problem(rows("O", "X-name"))
    ours = {c.name: c for c in KIND.configs(_shape(KIND), _pc(runtime="onnxruntime"))}
    assert [o.name for o in ours["t"].output] == ["entities"] and "offsets" in [o.name for o in ours["t_tokenizer"].output]
    fd = KIND.configs(_shape(KIND), _pc(runtime="python-onnxruntime", api="fastdeploy"))
    assert [c.name for c in fd] == ["t"] and [i.name for i in fd[0].input] == ["INPUT"]
    assert fd[0].parameters["entities_output"].string_value == "OUTPUT"
    assert [p.name for p in KIND.postprocess_helpers(_pc(api="fastdeploy"))] == ["entity_outputs.py", "fastdeploy_payloads.py"]


# -- serving/bundle/fastdeploy_api.py --------------------------------------------------------------------------------
def test_fastdeploy_api_refuses_settings_its_examples_have_no_interface_for():
    from serving.bundle import fastdeploy_api as fd

    one = fd.Example("uie", "grpc_client.py", one_model=True)
    fd.check("k", None, _pc(api="ernie-bundle"), "x")  # our own API: nothing to check
    with pytest.raises(ConfigError, match="fastdeploy has serving examples for a \\(m\\), not k; use package.api ernie-bundle"):
        fd.check("k", None, _pc(api="fastdeploy"), "a (m)")
    with pytest.raises(ConfigError, match="use a python runtime \\(.*python-onnxruntime.*\\), not onnxruntime"):
        fd.check("k", one, _pc(api="fastdeploy", runtime="onnxruntime"), "x")
    with pytest.raises(ConfigError, match="one python model \\(layout fused\\), not an ensemble"):
        fd.check("k", one, _pc(api="fastdeploy", runtime="python-onnxruntime", layout="ensemble"), "x")
    fd.check("k", one, _pc(api="fastdeploy", runtime="python-onnxruntime"), "x")


def test_fastdeploy_api_gives_its_one_model_one_instance_unless_told():
    from serving.bundle import fastdeploy_api as fd

    one, ensemble = fd.Example("uie", "c.py", one_model=True), fd.Example("ernie_seqcls", "c.py")
    assert fd.resolved(_pc(api="fastdeploy", runtime="python-onnxruntime"), one).instance_count == 1
    assert fd.resolved(_pc(api="fastdeploy", runtime="python-onnxruntime", instance_count=3), one).instance_count == 3
    assert fd.resolved(_pc(api="fastdeploy"), ensemble).instance_count == 0
    assert fd.resolved(_pc(runtime="python-onnxruntime"), one).instance_count == 0  # our API: no schema kept


# -- serving/procfs.py, serving/tools/process_cpu.py -----------------------------------------------------------------
def test_proc_stat_is_read_past_a_command_name_with_spaces_and_parentheses():
    from serving.procfs import ProcStat, parse_stat, processes, read_stat
    from serving.tools.process_cpu import cpu_seconds

    line = "123 (a) b (c) R 1 77 77 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 999 0 0"
    assert parse_stat(line) == ProcStat(pid=123, name="a) b (c", state="R", ppid=1, pgrp=77, cpu_ticks=300,
                                        start_time=999)
    assert parse_stat(line.replace(" R ", " Z ")).exited
    me = read_stat(os.getpid())
    assert me.pid == os.getpid() and me.ppid == os.getppid() and me.pgrp == os.getpgrp() and not me.exited
    assert os.getpid() in {p.pid for p in processes()}
    from serving.procfs import cmdline

    assert cmdline(os.getpid())[0] and cmdline(2**22 + 1) is None  # a pid past pid_max: gone
    busy = time.process_time()
    while time.process_time() - busy < 0.05:
        pass
    assert cpu_seconds(os.getpid()) >= 0.05
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) is None  # gone (and reaped)


def test_process_cpu_finds_the_stubs_of_a_server_group_and_their_cores(tmp_path):
    from serving.tools.process_cpu import STUB, Snapshot, cores, server_processes, stub_processes

    # a stand-in stub: its argv as the python backend starts one (the instance name 8th), in the group it leads
    argv = [str(tmp_path / STUB), "-c", "import time; time.sleep(30)", "shm", "1", "2", "3", "dir", "tiny_0_0", "CPU"]
    proc = subprocess.Popen(argv, executable=sys.executable, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not stub_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub_processes(proc.pid) == {"tiny_0_0": proc.pid}
        assert server_processes(proc.pid, ("tiny",)) == {"tritonserver": proc.pid, "stub tiny_0_0": proc.pid}
        assert server_processes(proc.pid, ("tiny_floor",)) == {"tritonserver": proc.pid}  # another model's stubs only
        assert stub_processes(os.getpid()) == {}
    finally:
        proc.kill()
        proc.wait()
    got = cores(Snapshot(10.0, {"a": 1.0, "b": 5.0}), Snapshot(12.0, {"a": 2.0, "b": 4.0, "c": 1.0}))
    assert got == {"a": 0.5, "b": 0.0, "c": 0.5}


# -- serving/tools/floor.py ------------------------------------------------------------------------------------------
def test_floor_echo_takes_the_served_interface_and_the_first_models_scheduling(tmp_path):
    from serving.bundle.model_config import parse_pbtxt, to_pbtxt
    from serving.kinds.classification.bundle import KIND
    from serving.tools.floor import ECHO_MODEL, floor_name, write_floor_repository

    bundle = tmp_path / "bundle"
    configs = {c.name: c for c in KIND.configs(_shape(KIND), _pc(runtime="python-onnxruntime", layout="ensemble",
                                                                 instance_count=3))}
    for name, cfg in configs.items():
        (bundle / name).mkdir(parents=True)
        (bundle / name / "config.pbtxt").write_text(to_pbtxt(cfg), encoding="utf-8")
    name = write_floor_repository(bundle, "t", "t_tokenizer", tmp_path / "floor")
    assert name == floor_name("t") == "t_floor"
    echo = parse_pbtxt((tmp_path / "floor" / name / "config.pbtxt").read_text(encoding="utf-8"))
    assert (echo.backend, echo.max_batch_size) == ("python", configs["t"].max_batch_size)
    assert list(echo.input) == list(configs["t"].input) and list(echo.output) == list(configs["t"].output)
    assert echo.dynamic_batching == configs["t_tokenizer"].dynamic_batching
    assert [g.count for g in echo.instance_group] == [3]
    assert sorted(p.name for p in (tmp_path / "floor").iterdir()) == [name]  # the echo alone: the bundle untouched
    assert (tmp_path / "floor" / name / "1" / "model.py").read_text(encoding="utf-8") == ECHO_MODEL


def test_floor_echo_model_reads_every_request_and_answers_constants_of_the_declared_shapes(monkeypatch):
    from serving.tools.floor import ECHO_MODEL

    class Tensor:
        def __init__(self, name, value):
            self.name, self.value = name, value

        def as_numpy(self):
            return self.value

    utils = ModuleType("triton_python_backend_utils")
    utils.Tensor = Tensor
    utils.InferenceResponse = lambda output_tensors: output_tensors
    utils.get_input_tensor_by_name = lambda request, name: request.get(name)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    module = ModuleType("echo")
    exec(compile(ECHO_MODEL, "model.py", "exec"), module.__dict__)
    model = module.TritonPythonModel()
    config = {"max_batch_size": 8, "input": [{"name": "text"}],
              "output": [{"name": "label", "data_type": "TYPE_STRING", "dims": [1]},
                         {"name": "probs", "data_type": "TYPE_FP32", "dims": [3]}]}
    model.initialize({"model_config": json.dumps(config)})
    answers = model.execute([{"text": Tensor("text", np.array([[b"a"], [b"b"]], dtype=object))},
                             {"text": Tensor("text", np.array([[b"c"]], dtype=object))}])
    assert [[(t.name, t.value.shape, t.value.dtype) for t in a] for a in answers] == [
        [("label", (2, 1), np.dtype(object)), ("probs", (2, 3), np.dtype(np.float32))],
        [("label", (1, 1), np.dtype(object)), ("probs", (1, 3), np.dtype(np.float32))]]


# -- pipeline/progress.py --------------------------------------------------------------------------------------------
class _Clock:
    """A time.monotonic that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_duration_reads_minutes_from_a_minute_on():
    from pipeline.progress import duration

    assert duration(7.46) == "7.5s" and duration(59.4) == "59.4s" and duration(60) == "1m00s" and duration(2284) == "38m04s"


def test_phase_clock_charges_every_second_to_one_phase(monkeypatch):
    """A nested phase pauses the outer one; a phase entered again adds up; an open phase counts up to now."""
    from pipeline import progress

    clock = _Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    pc = progress.PhaseClock()
    with pc.phase("compress"):
        clock.now += 2
        with pc.phase("scoring"):
            clock.now += 3
        clock.now += 1
        with pc.phase("scoring"):
            clock.now += 0.5
    clock.now += 10  # outside every phase: charged to none
    assert pc.seconds() == {"compress": 3.0, "scoring": 3.5}
    with pc.phase("timing"):
        clock.now += 4
        assert pc.seconds()["timing"] == 4.0  # still open, as when a stage crashes inside it


def test_step_estimate_says_once_how_long_after_the_warm_up_steps(monkeypatch):
    from pipeline import progress

    clock, lines = _Clock(), []
    monkeypatch.setattr(progress.time, "monotonic", clock)
    est = progress.StepEstimate("distillation", 900, lines.append, after=2, skip=1, cap="it may stop earlier")
    for step_s in (30.0, 0.5, 0.5, 0.5, 0.5):  # the first step builds kernels: left out
        est.step()
        clock.now += step_s
    assert est.per_step == 0.5 and len(lines) == 1
    assert lines[0] == ("distillation: at most 900 steps x 0.50 s/step (measured over steps 2-3): at most 7m30s in all, "
                        "7m28s left (it may stop earlier)")  # 897 steps left: the 4th has just started


def test_step_estimate_spreads_the_measured_seconds_by_each_steps_work(monkeypatch):
    """Steps 2-3 are short batches (1 unit of work each, 0.5 s per unit): counted by steps the loop would be 8 x 0.5 s;
    spread by work it is 17 units, 8.5 s, and the 5 steps not begun yet 10 units, 5 s."""
    from pipeline import progress

    clock, lines = _Clock(), []
    monkeypatch.setattr(progress.time, "monotonic", clock)
    costs = [5, 1, 1, 2, 2, 2, 2, 2]
    est = progress.StepEstimate("distillation", 8, lines.append, after=2, skip=1, costs=costs, cost_name="padded tokens")
    for work in costs[:4]:
        est.step()
        clock.now += 30.0 if work == 5 else 0.5 * work  # the first step builds kernels: left out
    assert lines == ["distillation: 8 steps x 1.06 s/step (measured over steps 2-3, scaled by each step's padded "
                     "tokens): about 8.5s in all, 5.0s left"]
    # a plan that is not this loop's (another number of steps) is not used: counted by steps
    lines.clear()
    est = progress.StepEstimate("distillation", 8, lines.append, after=2, skip=1, costs=[1, 2, 3])
    for _ in range(4):
        est.step()
        clock.now += 0.5
    assert est.per_step == 0.5 and "scaled" not in lines[0]


# -- pipeline/batching.py --------------------------------------------------------------------------------------------
def _feature_set(lengths):
    from pipeline.kinds.base import Feature, FeatureSet
    from pipeline.kinds.classification import Classification

    feats = [Feature(np.arange(n, dtype=np.int64), np.zeros(n, np.int64), np.array(i % 3), i) for i, n in enumerate(lengths)]
    return FeatureSet(Classification(), feats, list(range(len(lengths))), 0)


def test_train_batches_cover_every_row_once_in_an_order_fixed_by_seed_and_epoch():
    from pipeline.batching import train_batch_order

    lengths = np.random.default_rng(0).integers(2, 60, 203)
    fs = _feature_set(lengths)
    order = train_batch_order(fs, 8, seed=3, epoch=0)
    assert sorted(np.concatenate(order).tolist()) == list(range(203)) and [len(b) for b in order].count(8) == 25
    assert all(np.array_equal(a, b) for a, b in zip(order, train_batch_order(fs, 8, seed=3, epoch=0)))  # resumable
    assert not all(np.array_equal(a, b) for a, b in zip(order, train_batch_order(fs, 8, seed=3, epoch=1)))
    # length-bucketed: a batch pads far less than random batches would
    spread = np.mean([np.ptp(lengths[b]) for b in order])
    assert spread < 0.25 * np.ptp(lengths)


# -- pipeline/backends/shapes.py ---------------------------------------------------------------------------------------
def test_tensorrt_shape_range_comes_from_the_dev_lengths():
    from pipeline.backends.shapes import ShapeRange

    r = ShapeRange.from_lengths(np.arange(1, 101), max_seq_len=128)
    assert (r.min_seq, r.opt_seq, r.max_seq, r.opt_batch, r.max_batch) == (1, 95, 128, 32, 64)
    assert ShapeRange.from_lengths(np.array([300, 400]), max_seq_len=128).opt_seq == 128  # never past the max
    assert ShapeRange.from_lengths(np.array([]), max_seq_len=64).opt_seq == 64
    mins, maxs, opts = r.shapes()
    assert mins["input_ids"] == [1, 1] and maxs["token_type_ids"] == [64, 128] and opts["input_ids"] == [32, 95]


# -- pipeline/config_checks.py ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"value": True}, "gates.x must be a number, got True"),
    ({"value": float("nan")}, "gates.x must be a number"),
    ({"value": 1.5, "integer": True}, "gates.x must be an integer, got 1.5"),
    ({"value": -1, "minimum": 0.0}, "gates.x must be >= 0.0, got -1"),
    ({"value": 0, "above": 0}, "gates.x must be > 0, got 0"),
    ({"value": 2, "maximum": 1.0}, "gates.x must be <= 1.0, got 2"),
])
def test_config_numbers_are_refused_naming_the_key(kwargs, message):
    from pipeline.config_checks import number

    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        number("gates.x", **kwargs)


def test_config_numbers_and_choices_in_range_pass_through():
    from pipeline.config_checks import number, one_of

    assert number("k", 3, minimum=0, integer=True) == 3 and number("k", 0.5, above=0, maximum=1) == 0.5
    assert one_of("package.device", "CPU", ("CPU", "GPU")) == "CPU"
    with pytest.raises(ConfigError, match="package.device: 'TPU' is not one of CPU, GPU"):
        one_of("package.device", "TPU", ("CPU", "GPU"))


# -- serving/kinds/uie/tools.py ----------------------------------------------------------------------------------------
def test_uie_requests_group_a_texts_prompts_and_share_a_request_with_the_same_schema():
    """Consecutive pairs of one text are one item (its schema in order); items asking the same prompts share a request
    up to batch_size texts; the indices say which dev pair each (text, prompt) answers."""
    from serving.kinds.uie.tools import uie_requests

    pair = lambda content, prompt: SimpleNamespace(content=content, prompt=prompt)  # noqa: E731
    dev = [pair("a", "人名"), pair("a", "地名"), pair("b", "人名"), pair("b", "地名"), pair("c", "人名"), pair("c", "地名"),
           pair("d", "人名"), pair("d", "人名")]  # the same prompt twice: a new item
    assert uie_requests(dev, batch_size=2) == [
        (["a", "b"], ["人名", "地名"], [[0, 1], [2, 3]]),
        (["c"], ["人名", "地名"], [[4, 5]]),
        (["d", "d"], ["人名"], [[6], [7]]),
    ]
