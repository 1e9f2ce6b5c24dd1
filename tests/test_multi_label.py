"""Multi-label classification (``classification.multi_label``): a text has none, one or several labels.

Data (a JSON list, or a table cell cut at ``classification.label_separator``), the config's checks, scoring (micro-F1
over (text, label) decisions at the threshold's log-odds), and a tiny task through every stage and the real Triton:
served label sets equal the offline ones and validate's micro-F1.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import FILLER, LABEL_NAMES, make_sentence
from pipeline.config import load_task_config
from pipeline.errors import ConfigError, DataError
from pipeline.kinds import get_kind, load_task_data

# each row's label set, in turn: none, one, two (label ids into LABEL_NAMES)
SETS = [(), (0,), (1,), (2,), (0, 1), (1, 2), (0, 2)]
NO_LABEL = "天气温度阳光雨雪风云"  # what a text with none of the labels is about (beside the filler every text has)


def write_tiny_sets(root: Path, n_train: int = 420, n_dev: int = 84, seed: int = 0, names=LABEL_NAMES) -> Path:
    """TSV files with a header (``text``, ``tags``: the set's ``names`` joined with ", "; empty for none), no
    labels.json: the labels are read from train."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        lines = ["text\ttags"]
        for i in range(n):
            chosen = SETS[i % len(SETS)]
            text = "".join(make_sentence(rng, y) for y in chosen) or "".join(
                rng.choice(NO_LABEL if rng.random() < 0.4 else FILLER) for _ in range(rng.randint(6, 20)))
            lines.append(f"{text}\t{', '.join(names[y] for y in chosen)}")
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _task(data: Path, **extra) -> dict:
    return {"task": "tinyml", "type": "classification", "max_seq_len": 48, "classification": {"multi_label": True},
            "data": {"dir": str(data), "format": "tsv", "train_file": "train.tsv", "dev_file": "dev.tsv",
                     "text_a": "text", "label_field": "tags", "labels_file": None}, **extra}


def _config(tmp_path: Path, task: dict, **overrides):
    import yaml

    path = tmp_path / "tinyml.yaml"
    path.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    return load_task_config(str(path), overrides)


def test_label_sets_are_read_from_table_cells_and_json_lists(tmp_path):
    data = write_tiny_sets(tmp_path / "data", 14, 7)
    cfg = _config(tmp_path, _task(data))
    ds = load_task_data(cfg)
    assert ds.labels == tuple(sorted(LABEL_NAMES)) and ds.labels_from.endswith("train.tsv")
    for ex, chosen in zip(ds.train.examples, SETS * 2):  # 0/1 per label, in the labels' (sorted) order
        assert ex.label == tuple(int(name in {LABEL_NAMES[c] for c in chosen}) for name in ds.labels)
    assert ds.train.examples[0].label == (0, 0, 0) and ds.train.examples[4].label == (1, 1, 0)  # none; sports+finance
    # JSON lines: a list is the set as it is; a string is cut at the separator
    (data / "train.json").write_text('{"sentence": "甲", "label": ["b", "a"]}\n{"sentence": "乙", "label": "a|c"}\n'
                                     '{"sentence": "丙", "label": []}\n', encoding="utf-8")
    (data / "dev.json").write_text('{"sentence": "丁", "label": ["c"]}\n', encoding="utf-8")
    task = _task(data, classification={"multi_label": True, "label_separator": "|"})
    task["data"] = {"dir": str(data), "labels_file": None}
    ds = load_task_data(_config(tmp_path, task))
    assert ds.labels == ("a", "b", "c") and [e.label for e in ds.train.examples] == [(1, 1, 0), (1, 0, 1), (0, 0, 0)]


def test_paddlenlps_multi_label_layout_reads_as_it_is(tmp_path):
    """PaddleNLP's multi_label application: train.txt and dev.txt (text TAB labels joined with ",", no header) and
    label.txt (one label per line, their order)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("相机和芯片\t相机,芯片\n只有芯片\t芯片\n", encoding="utf-8")
    (data / "dev.txt").write_text("新相机\t相机\n", encoding="utf-8")
    (data / "label.txt").write_text("芯片\n相机\n", encoding="utf-8")
    task = _task(data)
    task["data"] = {"dir": str(data), "format": "tsv", "train_file": "train.txt", "dev_file": "dev.txt",
                    "columns": ["text", "label"], "text_a": "text", "labels_file": "label.txt"}
    ds = load_task_data(_config(tmp_path, task))
    assert ds.labels == ("芯片", "相机") and [e.label for e in ds.train.examples] == [(1, 1), (1, 0)]
    assert [e.label for e in ds.dev.examples] == [(0, 1)]


def test_paddlenlps_hierarchical_layout_reads_as_it_is(tmp_path):
    """PaddleNLP's hierarchical application: labels are paths (``A##B``) and a row lists each level's; a row that names
    only its leaf has its ancestors too, and labels read from train include every ancestor."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("通用汽车罢工裁员\t组织行为,组织行为##罢工,组织关系,组织关系##裁员\n"
                                    "厂房坍塌\t灾害/意外##坍/垮塌\n", encoding="utf-8")
    (data / "dev.txt").write_text("广本召回\t产品行为##召回\n", encoding="utf-8")
    (data / "label.txt").write_text("组织行为\n组织行为##罢工\n组织关系\n组织关系##裁员\n灾害/意外\n灾害/意外##坍/垮塌\n"
                                    "产品行为\n产品行为##召回\n", encoding="utf-8")
    task = _task(data, classification={"multi_label": True, "hierarchy_separator": "##"})
    task["data"] = {"dir": str(data), "format": "tsv", "train_file": "train.txt", "dev_file": "dev.txt",
                    "columns": ["text", "label"], "text_a": "text", "labels_file": "label.txt"}
    ds = load_task_data(_config(tmp_path, task))
    assert len(ds.labels) == 8 and ds.train.examples[0].label == (1, 1, 1, 1, 0, 0, 0, 0)
    assert ds.train.examples[1].label == (0, 0, 0, 0, 1, 1, 0, 0)  # the leaf alone: its parent too
    assert ds.dev.examples[0].label == (0, 0, 0, 0, 0, 0, 1, 1)
    task["data"]["labels_file"] = None  # read from train: every ancestor has an id, each path sorted under its parent
    with pytest.raises(DataError, match=r"dev.txt:1: field 'label': label '产品行为' is not one of the task's 6 labels"):
        load_task_data(_config(tmp_path, task))  # the dev row's ancestor is unknown as its leaf is
    (data / "dev.txt").write_text("罢工\t组织行为##罢工\n", encoding="utf-8")
    ds = load_task_data(_config(tmp_path, task))
    assert ds.labels == ("灾害/意外", "灾害/意外##坍/垮塌", "组织关系", "组织关系##裁员", "组织行为", "组织行为##罢工")
    assert ds.train.examples[1].label == (1, 1, 0, 0, 0, 0) and ds.dev.examples[0].label == (0, 0, 0, 0, 1, 1)

    (data / "label.txt").write_text("组织行为##罢工\n", encoding="utf-8")
    task["data"]["labels_file"] = "label.txt"
    with pytest.raises(DataError) as err:
        load_task_data(_config(tmp_path, task))
    assert str(err.value) == (f"{data / 'label.txt'}: label '组织行为##罢工': its parent '组织行为' is not listed "
                              "(classification.hierarchy_separator '##': a text with '组织行为##罢工' has '组织行为' too)")
    (data / "label.txt").write_text("组织行为\n组织行为##罢工\n", encoding="utf-8")
    (data / "train.txt").write_text("罢工\t组织行为####罢工\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.txt:1: label '组织行为####罢工' has an empty level \(classification."
                                        r"hierarchy_separator '##'\)"):
        load_task_data(_config(tmp_path, task))


def test_each_level_of_a_hierarchy_is_scored_on_its_own():
    """PaddleNLP's per-level report: a level's micro-F1, macro-F1 and exact match over its labels alone; a text given
    a label without its parent is counted."""
    from pipeline.kinds.classification import hierarchy_scores

    labels = ("a", "a##x", "a##y", "b", "b##z")
    targets = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 1, 1], [1, 0, 1, 1, 0]], bool)
    pred = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 1, 0], [1, 0, 1, 0, 1]], bool)  # text 2: b##z without b
    got = hierarchy_scores(pred, targets, labels, "##")
    assert got["texts_with_orphans"] == 1
    one, two = got["per_level"]["1"], got["per_level"]["2"]
    assert (one["labels"], two["labels"]) == (2, 3)
    # level 1: tp 3 (a, b, a), fn 1 (text 2's b) -> 6/7; texts 0 and 1 right
    assert one["micro_f1"] == pytest.approx(6 / 7) and one["exact_match"] == pytest.approx(2 / 3)
    # level 2: tp 2 (a##x, a##y), fn 1 (text 1's b##z), fp 1 (text 2's b##z) -> 4/6; b##z's F1 is 0
    assert two["micro_f1"] == pytest.approx(4 / 6) and two["macro_f1"] == pytest.approx((1 + 1 + 0) / 3)
    assert two["exact_match"] == pytest.approx(1 / 3)


def test_a_hierarchy_through_every_stage(tmp_path, capsys):
    """A tiny hierarchical task (rows name leaves and tops; each path's parent is learned too) through every stage:
    finetune-check reports each level as PaddleNLP's evaluate does, validate the shipped form's levels beside FP32's,
    and the bundle says its labels are paths."""
    from test_kinds_e2e import _run_bundle

    data = write_tiny_sets(tmp_path / "data", names=["news##sports", "news##finance", "tech"])
    task = _task(data, classification={"multi_label": True, "hierarchy_separator": "##"}, compress={"strategy": "ptq"})
    cfg = _config(tmp_path, task)
    assert load_task_data(cfg).labels == ("news", "news##finance", "news##sports", "tech")
    capsys.readouterr()
    _, runs, _ = _run_bundle(tmp_path, task, {"finetune.epochs": 8, "gates.min_accuracy": 0.1})
    out = capsys.readouterr().out
    baseline = json.loads((runs / "finetune-check" / "out" / "baseline.json").read_text())
    levels = baseline["per_level"]
    assert (levels["1"]["labels"], levels["2"]["labels"]) == (2, 2) and isinstance(baseline["texts_with_orphans"], int)
    assert f"level 1 micro-F1 {levels['1']['micro_f1']:.4f}, level 2 micro-F1 {levels['2']['micro_f1']:.4f}" in out
    summary = json.loads((runs / "validate" / "out" / "metrics.json").read_text())["summary"]
    assert summary["levels"]["fp32"]["per_level"] == levels  # FP32's predictions, scored as finetune-check scored them
    shipped = summary["levels"]["shipped"]["per_level"]
    assert f"level 2 micro-F1 {shipped['2']['micro_f1']:.4f} (FP32 {levels['2']['micro_f1']:.4f})" in out

    bundle = tmp_path / "repo" / "tinyml"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["multi_label"] == {"threshold": 0.5, "hierarchy_separator": "##"}
    card = (bundle / "README.md").read_text(encoding="utf-8")
    assert f"| dev level 1 micro-F1 | {shipped['1']['micro_f1']:.4f} (FP32 {levels['1']['micro_f1']:.4f}; 2 labels) |" in card
    assert "Labels are paths in a hierarchy (`A##B` is under `A`)" in card


def test_a_label_list_of_other_things_and_no_local_data_are_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.json").write_text('{"sentence": "甲", "label": ["a", {"b": 1}]}\n', encoding="utf-8")
    (data / "dev.json").write_text('{"sentence": "丁", "label": ["a"]}\n', encoding="utf-8")
    task = {**_task(data), "data": {"dir": str(data), "labels_file": None}}
    with pytest.raises(DataError, match=r"train.json:1: field 'label': a label list holds labels \(strings or "
                                        r"integers\), got \["):
        load_task_data(_config(tmp_path, task))
    task["data"] = {"dir": None, "labels_file": None}
    with pytest.raises(DataError, match="task tinyml: no local data: a multi-label task's data is read from local files"):
        load_task_data(_config(tmp_path, task))


@pytest.mark.parametrize("cell, says", [
    ("news_sports,,news_tech", "an empty label in"),
    ("news_sport", "label 'news_sport' is not one of the task's 3 labels"),
])
def test_a_bad_label_set_is_refused_naming_file_and_line(tmp_path, cell, says):
    data = write_tiny_sets(tmp_path / "data", 14, 7)
    dev = (data / "dev.tsv").read_text(encoding="utf-8").splitlines()
    dev[3] = dev[3].split("\t")[0] + "\t" + cell
    (data / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_task_data(_config(tmp_path, _task(data)))
    assert "dev.tsv:4: field 'tags'" in str(err.value) and says in str(err.value)


def test_a_list_of_labels_without_multi_label_is_refused_naming_the_setting(tmp_path):
    """Several labels per text read as one would make each list a label of its own (or refuse it as unknown)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.json").write_text('{"sentence": "甲", "label": "a"}\n{"sentence": "乙", "label": ["a", "b"]}\n',
                                     encoding="utf-8")
    (data / "dev.json").write_text('{"sentence": "丁", "label": "a"}\n', encoding="utf-8")
    task = {"task": "tinyml", "type": "classification", "data": {"dir": str(data), "labels_file": None}}
    with pytest.raises(DataError) as err:
        load_task_data(_config(tmp_path, task))
    assert str(err.value).endswith('train.json:2: field \'label\' holds a list ["a", "b"]: several labels per text? '
                                   "classification.multi_label: true reads it as a set (one label per text: a single "
                                   "value)"), str(err.value)


@pytest.mark.parametrize("section, extra, says", [
    ({"multi_label": False, "threshold": 0.3}, {}, "classification.threshold, label_separator and hierarchy_separator "
                                                   "are for multi_label"),
    ({"multi_label": False, "hierarchy_separator": "##"}, {}, "hierarchy_separator are for multi_label: true"),
    ({"multi_label": True, "hierarchy_separator": " "}, {}, "hierarchy_separator must be a non-empty string"),
    ({"multi_label": True, "hierarchy_separator": ",,"}, {}, "hierarchy_separator ',,' and label_separator ',' must not"),
    ({"multi_label": True, "threshold": 1.0}, {}, "classification.threshold must be below 1"),
    ({"multi_label": True, "label_separator": ""}, {}, "classification.label_separator must be a non-empty string"),
    ({"multi_label": True}, {"package": {"api": "fastdeploy"}}, "package.api: fastdeploy: FastDeploy's ernie_seqcls"),
])
def test_the_config_refuses_what_a_multi_label_task_cannot_do(tmp_path, section, extra, says):
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, {**_task(tmp_path), "classification": section, **extra})
    assert says in str(err.value)


def test_sets_are_scored_by_micro_f1_at_the_thresholds_log_odds(tmp_path):
    from pipeline.kinds.base import Feature, FeatureSet

    cfg = _config(tmp_path, _task(tmp_path, classification={"multi_label": True, "threshold": 0.8}))
    kind = get_kind(cfg)
    assert (kind.metric, kind.metric_label) == ("micro_f1", "micro-F1")
    targets = [(1, 0, 1), (0, 1, 0), (0, 0, 0)]
    fs = FeatureSet(kind, [Feature(np.ones(3, np.int64), np.zeros(3, np.int64), np.array(t), i)
                           for i, t in enumerate(targets)], [None] * 3, 0)
    # log-odds of 0.8 is 1.386: 1.3 is below it, 1.4 above
    outputs = [np.array([1.4, -2.0, 1.3], np.float32), np.array([0.0, 3.0, 2.0], np.float32), np.full(3, -1.0, np.float32)]
    score = kind.score(outputs, fs)
    # tp 2 (text 0 label 0, text 1 label 1), fp 1 (text 1 label 2), fn 1 (text 0 label 2)
    assert score.value == pytest.approx(2 * 2 / (2 * 2 + 1 + 1)) and score.metrics["exact_match"] == pytest.approx(1 / 3)
    assert kind.predictions(outputs, fs) == [(0,), (1, 2), ()]
    assert kind.decisions(outputs[1]).tolist() == [False, True, True]
    assert kind.feature_params(cfg)["multi_label"]["threshold"] == 0.8  # part of every data-reading stage's key
    # the served post-processing cuts at the same number (its copy of class_outputs.py cannot import the pipeline)
    from pipeline.kinds.classification import ClassificationConfig
    from serving.kinds.classification.models.class_outputs import log_odds

    for t in (0.5, 0.8, 0.1, 0.35):
        assert ClassificationConfig(multi_label=True, threshold=t).cut == log_odds(t)
    assert log_odds(0.5) == 0.0


@pytest.mark.slow
def test_multi_label_bundle_end_to_end(tmp_path, capsys):
    from test_kinds_e2e import _assert_one_selection, _run_bundle, _serve_and_smoke

    data = write_tiny_sets(tmp_path / "data")
    task = _task(data, compress={"strategy": "dynabert+ptq", "width_mult_list": ["1/2"]})
    task_yaml, runs, cfg = _run_bundle(tmp_path, task, {"finetune.epochs": 20, "gates.min_accuracy": 0.5,
                                                        "max_seq_len": 48})
    baseline = json.loads((runs / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["metric"] == "micro_f1" and baseline["accuracy"] > 0.7, baseline
    assert set(baseline["per_label_f1"]) == set(LABEL_NAMES)
    scanned = baseline["micro_f1_by_threshold"]  # what another classification.threshold would give on dev
    assert len(scanned) == 7 and scanned["0.5"] == pytest.approx(baseline["accuracy"], abs=1e-12)
    _assert_one_selection(runs, task_yaml)
    metrics = json.loads((runs / "validate" / "out" / "metrics.json").read_text())
    assert metrics["summary"]["metric"] == "micro_f1"

    bundle = tmp_path / "repo" / "tinyml"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["multi_label"] == {"threshold": 0.5} and manifest["validated"]["metric"] == "micro_f1"
    card = (bundle / "README.md").read_text(encoding="utf-8")  # the model card: what ships, its numbers, on which CPU
    assert f"| dev micro-F1 | {metrics['summary']['accuracy']:.4f} (FP32 " in card and "| dev exact_match |" in card
    measured = card[card.index("## Measured numbers"):card.index("## Gates")]
    assert "| throughput vs the anchor |" in measured and "| measured on |" in measured and "format_version" not in measured
    changed = metrics["summary"]["answers_changed"]  # the label sets the shipped form gives otherwise than FP32
    assert f"| dev answers not FP32's | {changed['changed']} of {changed['examples']}: {changed['now_right']} now right" in measured
    drop = metrics["summary"]["accuracy_interval"]["drop_points"]  # how sure the dev set makes the drop
    below = metrics["summary"]["accuracy_interval"]["below_anchor_points"]  # and against the one-liner
    assert f"points below it, [{below['low']:+.2f}, {below['high']:+.2f}])" in measured
    assert "| dev micro-F1, 95% interval | [" in measured and f"the drop [{drop['low']:+.2f}, {drop['high']:+.2f}] points" in measured
    assert "`labels`, `label_descs` and `label_probs` (every label, most probable first), `count`" in card

    def classify(server):
        """serving.client: each text's labels, the first of every label ranked by probability, those above 0.5."""
        from serving.tools import client_cli

        capsys.readouterr()
        texts = [line.split("\t")[0] for line in (data / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
        assert client_cli.main(["classify", "--model", "tinyml", "--url", server.grpc_url, "--protocol", "grpc",
                                "--json", "--batch-size", "7", *texts]) == 0
        answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for answer in answers:
            ranked = [p for _, p in answer["ranked"]]
            assert len(ranked) == 3 and ranked == sorted(ranked, reverse=True), answer
            n = len(answer["labels"])
            assert [lab for lab, _ in answer["ranked"][:n]] == answer["labels"] and answer["probs"] == ranked[:n]
            assert all(p > 0.5 for p in ranked[:n]) and all(p <= 0.5 for p in ranked[n:]), answer
        assert {0, 1, 2} <= {len(a["labels"]) for a in answers}  # none, one and two labels among the 84 dev texts
        none = next(a["text"] for a in answers if not a["labels"])
        assert client_cli.main(["classify", "--model", "tinyml", "--url", server.grpc_url, "--protocol", "grpc", none]) == 0
        assert capsys.readouterr().out == f"-\t-\t-\t{none}\n"  # no label: said, not left blank

    out = _serve_and_smoke(bundle, task_yaml, tmp_path, capsys, while_served=classify)
    assert "label sets differing: 0" in out and f"validated micro-F1 {manifest['validated']['value']:.4f}" in out, out
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["served_f1"] == result["offline_f1"] == pytest.approx(manifest["validated"]["value"], abs=1e-9)
