import json

import pytest

from pipeline.config import load_task_config
from pipeline.kinds import load_task_data
from pipeline.errors import DataError
from tests.conftest import write_tiny_data, write_tiny_task_yaml


def _cfg(tmp_path, data_dir, **extra):
    return load_task_config(str(write_tiny_task_yaml(tmp_path / "t.yaml", data_dir, **extra)))


def test_reads_clue_jsonl_and_maps_labels_through_labels_json(tmp_path):
    d = write_tiny_data(tmp_path / "d", n_train=30, n_dev=9)
    # labels.json order decides ids, not the config order
    (d / "labels.json").write_text("\n".join(json.dumps({"label": v}) for v in ["102", "100", "101"]) + "\n")
    ds = load_task_data(_cfg(tmp_path, d))
    assert ds.labels == ("102", "100", "101")
    first = json.loads((d / "train.json").read_text().splitlines()[0])
    assert ds.train.examples[0].label == ds.labels.index(first["label"])
    assert ds.train.examples[0].text_a == first["sentence"]
    assert len(ds.train.examples) == 30 and len(ds.dev.examples) == 9
    assert ds.label_names[0] == "news_tech"


def _corrupt(path, lineno, text):
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[lineno - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match=r"data dir not found: .*nope"):
        load_task_data(_cfg(tmp_path, tmp_path / "nope"))


def test_missing_split(tmp_path):
    d = write_tiny_data(tmp_path / "d", 30, 9)
    (d / "dev.json").unlink()
    with pytest.raises(DataError, match=r"dev.json: split 'dev' not found"):
        load_task_data(_cfg(tmp_path, d))


@pytest.mark.parametrize("split_file, lineno, line, message", [
    ("train.json", 7, '{"label": "100", "sentence": ', r"train.json:7: malformed JSON"),
    ("dev.json", 4, json.dumps({"label": "999", "sentence": "x"}), r"dev.json:4: field 'label': label '999' is not one of"),
    ("train.json", 3, json.dumps({"label": "100", "title": "x"}), r"train.json:3: field 'sentence' missing"),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path, split_file, lineno, line, message):
    d = write_tiny_data(tmp_path / "d", 30, 9)
    _corrupt(d / split_file, lineno, line)
    with pytest.raises(DataError, match=message):
        load_task_data(_cfg(tmp_path, d))


def test_empty_split(tmp_path):
    d = write_tiny_data(tmp_path / "d", 30, 9)
    (d / "dev.json").write_text("\n\n")
    with pytest.raises(DataError, match=r"dev.json: split 'dev' is empty"):
        load_task_data(_cfg(tmp_path, d))


def test_labels_json_disagreeing_with_config(tmp_path):
    d = write_tiny_data(tmp_path / "d", 30, 9)
    (d / "labels.json").write_text(json.dumps({"label": "100"}) + "\n" + json.dumps({"label": "555"}) + "\n")
    with pytest.raises(DataError, match=r"labels.json: label set does not match"):
        load_task_data(_cfg(tmp_path, d))


def test_pair_fields_dotted_paths_lists_and_skipped_labels(tmp_path):
    d = tmp_path / "wsc"
    d.mkdir()
    rows = [
        {"text": "小明把书给了小红，因为她想看。", "target": {"span1_text": "小红", "span2_text": "她"}, "label": "true"},
        {"text": "猫追老鼠，它跑得很快。", "target": {"span1_text": "猫", "span2_text": "它"}, "label": "-"},
        {"text": "他们说话。", "target": {"span1_text": "他们", "span2_text": "他们"}, "label": "false"},
    ]
    for name in ("train.json", "dev.json"):
        (d / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    cfg = load_task_config("cluewsc2020", {"data.dir": str(d), "data.skip_labels": ["-"]})
    ds = load_task_data(cfg)
    assert ds.train.skipped == 1 and len(ds.train.examples) == 2
    assert ds.train.examples[0].text_b == "小红；她"
    assert ds.labels[ds.train.examples[0].label] == "true"


def test_offline_without_local_data_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_BUNDLE_OFFLINE", "1")
    cfg = load_task_config("afqmc")  # no data dir configured
    with pytest.raises(DataError, match=r"no local data for task 'afqmc'.*DATA_DIR=.*offline"):
        load_task_data(cfg)


def test_default_shared_dir_missing_falls_back_to_online_path(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_BUNDLE_OFFLINE", "1")
    cfg = load_task_config("tnews", {"data.dir": "../shared/definitely-not-here/tnews"})
    with pytest.raises(DataError, match="offline"):
        load_task_data(cfg)


@pytest.mark.parametrize("text", [
    '{"label": "102"}\n{"label": "100"}\n{"label": "101"}\n',  # JSON lines (CLUE)
    '["102", "100", "101"]',  # one-line array of strings
    '[\n  {"index": 2, "label": "101", "label_desc": "c"},\n  {"index": 0, "label": "102"},\n  {"index": 1, "label": "100"}\n]\n',
    '[102, 100, 101]',  # numbers, as people write label ids
])
def test_labels_json_in_the_shapes_people_write(tmp_path, text):
    d = write_tiny_data(tmp_path / "d", n_train=30, n_dev=9)
    (d / "labels.json").write_text(text)
    assert load_task_data(_cfg(tmp_path, d)).labels == ("102", "100", "101")


@pytest.mark.parametrize("text, says", [
    ('[{"index": 0, "label_desc": "news"}]', r"labels.json: item 0: field 'label' missing \(keys: index, label_desc\)"),
    ('{"name": "100"}\n', r"labels.json:1: field 'label' missing"),
    ('[["100"]]', r"labels.json: item 0: a label must be a string or a number"),
    ('["100", "100"]', r"labels.json: duplicate labels \['100'\]"),
    ('[{"label": "100"}, ', r"labels.json: malformed JSON array"),
    ('', r"labels.json: no labels"),
])
def test_labels_json_that_cannot_be_read_is_one_line(tmp_path, text, says):
    d = write_tiny_data(tmp_path / "d", n_train=30, n_dev=9)
    (d / "labels.json").write_text(text)
    with pytest.raises(DataError, match=says):
        load_task_data(_cfg(tmp_path, d))
