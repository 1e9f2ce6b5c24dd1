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
    cfg = _cfg(tmp_path, d, label_names=[])  # none in the config: labels.json's label_desc, where each has one
    for name in ("label_desc", "label_des"):  # TNEWS's labels.json, IFLYTEK's
        (d / "labels.json").write_text("\n".join(json.dumps({"label": v, name: f"n{v}"}) for v in ["102", "100", "101"]))
        assert load_task_data(cfg).label_names == ("n102", "n100", "n101")
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
    with pytest.raises(DataError, match=r"dev.json: split 'dev' not found in data dir .*\(data.dev_file names it\)$"):
        load_task_data(_cfg(tmp_path, d))
    (d / "dev.tsv").write_text("label\tsentence\n100\t好\n", encoding="utf-8")  # the split, in another form: said how
    with pytest.raises(DataError, match=r"dev.json: split 'dev' not found .*\(data.dev_file names it; the dir has "
                                        r"dev.tsv: data.format: tsv, data.dev_file: dev.tsv\)$"):
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


# -- CSV and TSV tables (data.format: csv / tsv), as a task of the user's own often has its data ----------------------

def _as_table(src, dst, delimiter, header=True, newline="\n", bom=False):
    """The tiny JSON-lines data written as a table (csv.writer quotes where CSV needs it; TSV rows are joined as
    PaddleNLP's TSV files are: no quoting)."""
    import csv
    import io

    dst.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        rows = [json.loads(line) for line in (src / f"{split}.json").read_text(encoding="utf-8").splitlines()]
        cols = ["label", "sentence"]
        body = [cols] if header else []
        body += [[r[c] for c in cols] for r in rows]
        if delimiter == ",":
            buf = io.StringIO()
            csv.writer(buf, lineterminator=newline).writerows(body)
            text = buf.getvalue()
        else:
            text = "".join("\t".join(r) + newline for r in body)
        (dst / f"{split}.{'csv' if delimiter == ',' else 'tsv'}").write_text(("\ufeff" if bom else "") + text,
                                                                             encoding="utf-8", newline="")
    (dst / "labels.json").write_text((src / "labels.json").read_text())
    return dst


def _table_cfg(tmp_path, d, fmt, **data):
    return _cfg(tmp_path, d, data={"dir": str(d), "clue_name": None, "text_a": "sentence", "format": fmt,
                                   "train_file": f"train.{fmt}", "dev_file": f"dev.{fmt}", **data})


@pytest.mark.parametrize("fmt, header, newline, bom", [
    ("csv", True, "\n", False), ("csv", True, "\r\n", True), ("tsv", True, "\n", False), ("tsv", True, "\r\n", True),
    ("tsv", False, "\n", False),
])
def test_a_csv_or_tsv_table_reads_as_its_json_lines_do(tmp_path, fmt, header, newline, bom):
    src = write_tiny_data(tmp_path / "json", n_train=30, n_dev=9)
    d = _as_table(src, tmp_path / "table", "," if fmt == "csv" else "\t", header, newline, bom)
    want = load_task_data(_cfg(tmp_path, src))
    got = load_task_data(_table_cfg(tmp_path, d, fmt, **({} if header else {"columns": ["label", "sentence"]})))
    assert got.labels == want.labels and got.dev.examples == want.dev.examples and got.train.examples == want.train.examples
    first_row = 2 if header else 1
    assert got.dev.examples[0].where == f"{d / f'dev.{fmt}'}:{first_row}"
    assert got.fingerprint != want.fingerprint  # the stage caches see other bytes


def test_a_csv_field_may_hold_commas_quotes_and_line_breaks_and_rows_keep_their_line(tmp_path):
    d = write_tiny_data(tmp_path / "d", n_train=30, n_dev=9)
    dev = d / "dev.csv"
    dev.write_text('sentence,label,note\n"第一行,带逗号\n第二行",100,\n"他说""好""",101,x\n\n普通的句子,102,\n',
                   encoding="utf-8")
    (d / "train.csv").write_text(dev.read_text(encoding="utf-8"), encoding="utf-8")
    ds = load_task_data(_table_cfg(tmp_path, d, "csv"))
    assert [(e.text_a, ds.labels[e.label], e.where.rsplit(":", 1)[1]) for e in ds.dev.examples] == [
        ("第一行,带逗号\n第二行", "100", "2"), ('他说"好"', "101", "4"), ("普通的句子", "102", "6")]
    import csv

    long = "长" * 200_000  # over the csv module's default field cap (131,072), which stays as it was
    dev.write_text(f"sentence,label\n{long},100\n", encoding="utf-8")
    assert load_task_data(_table_cfg(tmp_path, d, "csv")).dev.examples[0].text_a == long
    assert csv.field_size_limit() == 131_072


def test_a_tsv_text_may_hold_quotes_and_a_pair_task_reads_its_second_column(tmp_path):
    d = tmp_path / "pairs"
    d.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (d / name).write_text('query\ttitle\tlabel\n"引号"开头的句子\t另一句\t1\n今天天气\t明天下雨\t0\n', encoding="utf-8")
    cfg = load_task_config("afqmc", {"data.dir": str(d), "data.format": "tsv", "data.train_file": "train.tsv",
                                     "data.dev_file": "dev.tsv", "data.text_a": "query", "data.text_b": "title"})
    ds = load_task_data(cfg)
    assert [(e.text_a, e.text_b, ds.labels[e.label]) for e in ds.dev.examples] == [
        ('"引号"开头的句子', "另一句", "1"), ("今天天气", "明天下雨", "0")]


@pytest.mark.parametrize("fmt, dev, data, says", [
    ("tsv", "label\tsentence\n100\t好的\n101\t一句\t带了制表符\n", {}, r"dev.tsv:3: 3 columns where the header \(line 1\) has 2: a tab inside a text\?"),
    ("tsv", "label\ttext\n100\t好的\n", {}, r"dev.tsv:1: the TSV header \['label', 'text'\] has no column 'sentence'"),
    ("csv", "label,sentence,label\n100,好的,1\n", {}, r"dev.csv:1: the CSV header repeats column\(s\) \['label'\]"),
    ("csv", 'label,sentence\n100,"好的\n', {}, r"dev.csv:\d+: malformed CSV"),
    ("csv", "label,sentence\n100,好的\n999,坏的\n", {}, r"dev.csv:3: field 'label': label '999' is not one of"),
    ("tsv", "100\t好的\n101\n", {"columns": ["label", "sentence"]}, r"dev.tsv:2: 1 columns where data.columns has 2"),
    ("tsv", "100\t好的\n", {"columns": ["label", "text"]}, r"train.tsv: data.columns \['label', 'text'\] has no column 'sentence'"),
    ("csv", "label,sentence\n100,   \n", {}, r"dev.csv:2: field 'sentence' is only whitespace"),
])
def test_a_bad_table_row_is_named_by_file_and_line(tmp_path, fmt, dev, data, says):
    src = write_tiny_data(tmp_path / "json", n_train=30, n_dev=9)
    d = _as_table(src, tmp_path / "table", "," if fmt == "csv" else "\t", header="columns" not in data)
    (d / f"dev.{fmt}").write_text(dev, encoding="utf-8")
    with pytest.raises(DataError, match=says):
        load_task_data(_table_cfg(tmp_path, d, fmt, **data))


@pytest.mark.parametrize("data, says", [
    ({"columns": ["label", "sentence"]}, r"data.columns: names a CSV/TSV file's columns; data.format is 'clue'"),
    ({"format": "tsv", "columns": ["a", "a"]}, r"data.columns: a list of distinct column names"),
])
def test_table_columns_are_checked_when_the_config_loads(tmp_path, data, says):
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=says):
        _cfg(tmp_path, tmp_path, data={"dir": str(tmp_path), "text_a": "sentence", **data})


def test_a_table_format_is_refused_for_a_kind_that_reads_spans(tmp_path):
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.format: 'tsv' does not fit type 'token_classification'"):
        load_task_config("cluener", {"data.format": "tsv"})


def test_a_tables_columns_are_part_of_every_data_stages_key(tmp_path):
    """The same bytes read with other data.columns are other examples (a pair's two texts swapped): every stage that
    reads the data runs again."""
    from pipeline.stages import compress, export, finetune, finetune_check

    data = {"dir": str(tmp_path), "format": "tsv", "text_a": "a", "text_b": "b", "columns": ["a", "b", "label"]}
    one = _cfg(tmp_path, tmp_path, data=data)
    other = _cfg(tmp_path, tmp_path, data={**data, "columns": ["b", "a", "label"]})
    for stage in (finetune, finetune_check, compress, export):
        assert stage.params(one) != stage.params(other), stage.__name__
    clue = _cfg(tmp_path, tmp_path)  # JSON lines: keys as they were, so cached results stay
    assert "table" not in finetune.params(clue)


def test_labels_listed_nowhere_are_the_train_splits_sorted(tmp_path):
    """No labels.json and no `labels:` in the config (a task of one's own, its data a table): the labels are the
    train split's, sorted, whatever order its rows come in; a dev label train never has is refused naming its line."""
    src = write_tiny_data(tmp_path / "json", n_train=30, n_dev=9)
    d = _as_table(src, tmp_path / "table", "\t")
    (d / "labels.json").unlink()
    lines = (d / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "train.tsv").write_text(lines[0] + "".join(reversed(lines[1:])), encoding="utf-8")
    cfg = _table_cfg(tmp_path, d, "tsv", skip_labels=["101"])
    cfg.labels, cfg.label_names = [], []
    ds = load_task_data(cfg)
    assert ds.labels == ("100", "102") and ds.labels_from == str(d / "train.tsv") and ds.label_names == ds.labels
    assert ds.train.skipped == 10 and {ds.labels[e.label] for e in ds.dev.examples} == {"100", "102"}
    with open(d / "dev.tsv", "a", encoding="utf-8") as f:
        f.write("103\t一个新的类别\n")
    with pytest.raises(DataError, match=r"dev.tsv:11: field 'label': label '103' is not one of the task's 2 labels "
                                        r"\(read from .*train.tsv: no labels.json or config labels\)"):
        load_task_data(cfg)


def test_a_plain_text_label_file_lists_one_label_per_line(tmp_path):
    """PaddleNLP's text_classification layout: label.txt, one label per line (blank lines and surrounding spaces are
    not labels), read in its order; a label twice is refused naming the file."""
    src = write_tiny_data(tmp_path / "json", n_train=30, n_dev=9)
    d = _as_table(src, tmp_path / "table", "\t")
    (d / "labels.json").unlink()
    (d / "label.txt").write_text("102\n\n 100 \n101\n", encoding="utf-8")
    cfg = _table_cfg(tmp_path, d, "tsv", labels_file="label.txt")
    cfg.labels, cfg.label_names = [], []
    ds = load_task_data(cfg)
    assert ds.labels == ("102", "100", "101") and ds.label_names == ds.labels and not ds.labels_from
    (d / "label.txt").write_text("102\n100\n101\n100\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"label.txt: duplicate labels \['100'\]"):
        load_task_data(cfg)


def test_labels_read_from_train_sort_as_numbers_when_all_are_integers():
    """Integer labels take the ids of their own numbering (2 before 10); any other label makes them strings."""
    from pipeline.data import sorted_labels

    assert sorted_labels({"10", "2", "0", "1", "-1"}) == ["-1", "0", "1", "2", "10"]
    assert sorted_labels({"10", "2", "b"}) == ["10", "2", "b"] and sorted_labels({"2", " 10"}) == [" 10", "2"]
    assert sorted_labels(set()) == []


@pytest.mark.parametrize("edit, says", [
    (lambda lines: lines[:3] + ["101 \t带空格的标签\n"] + lines[3:], r"train.tsv:4: label '101 ' differs from '101' \(line \d\) only in spaces"),
    (lambda lines: [lines[0]] + [f"{i}\t句子{i}\n" for i in range(300)], r"train.tsv: field 'label' holds 300 distinct values in 300 rows: not a label column\?"),
])
def test_labels_read_from_the_train_split_are_checked_as_no_list_checks_them(tmp_path, edit, says):
    src = write_tiny_data(tmp_path / "json", n_train=30, n_dev=9)
    d = _as_table(src, tmp_path / "table", "\t")
    (d / "labels.json").unlink()
    lines = (d / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "train.tsv").write_text("".join(edit(lines)), encoding="utf-8")
    cfg = _table_cfg(tmp_path, d, "tsv")
    cfg.labels, cfg.label_names = [], []
    with pytest.raises(DataError, match=says):
        load_task_data(cfg)
