"""validate's changed.jsonl: the dev answers the shipped form gives otherwise than FP32, each as a person reads it, and
which way it went (``pipeline.validation.changes``; every kind's ``shown``, ``shown_answer`` and ``is_right``).  Every
kind's end-to-end test (tests/test_kinds_e2e.py) holds the file to validate's parity count."""

from __future__ import annotations

import json

from pipeline.config import load_task_config
from pipeline.data import Example
from pipeline.kinds import get_kind
from pipeline.labeling.bio import Entity
from pipeline.labeling.readers import LabelingExample
from pipeline.reading.squad import Answer, QAExample
from pipeline.extraction.examples import ExtractionExample
from pipeline.validation.changes import AnswerChanges, answer_changes


def test_a_classifiers_changed_answers_name_their_labels_and_which_way_they_went(tmp_path):
    kind = get_kind(load_task_config("tnews"))
    labels = ("story", "culture", "sports")
    examples = [Example("甲", None, 0, "dev.json:1"), Example("乙", None, 1, "dev.json:2"), Example("丙", None, 2, "dev.json:3"),
                Example("丁", None, 2, "dev.json:4")]
    got = answer_changes(kind, examples, labels, fp32=[0, 0, 2, 0], shipped=[0, 1, 1, 1])
    assert [r["example"] for r in got.rows] == [1, 2, 3]  # the first is the same answer: not listed
    assert got.rows[0] == {"example": 1, "where": "dev.json:2", "text": "乙", "gold": "culture", "fp32": "story",
                           "shipped": "culture", "fp32_right": False, "shipped_right": True}
    assert (got.now_right, got.now_wrong) == (1, 1)
    assert got.line() == "3 of 4 dev answers differ from FP32's: 1 now right, 1 now wrong, 1 wrong either way (changed.jsonl)"
    got.write(tmp_path / "changed.jsonl")
    lines = (tmp_path / "changed.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == list(got.rows) and "乙" in lines[0]  # UTF-8 as it is, not \\u escapes
    assert AnswerChanges(4, ()).line() == "every one of 4 dev answers is FP32's"


def test_label_sets_pairs_entities_spans_and_answers_read_as_words(tmp_path):
    import yaml

    task = tmp_path / "sets.yaml"
    task.write_text(yaml.safe_dump({"task": "sets", "type": "classification", "classification": {"multi_label": True},
                                    "data": {"dir": str(tmp_path), "text_b": "b", "labels_file": None}}), encoding="utf-8")
    sets = get_kind(load_task_config(str(task)))
    pair = Example("甲", "乙", (1, 0, 1))
    row = answer_changes(sets, [pair], ("a", "b", "c"), [(0, 2)], [(0,)]).rows[0]
    assert (row["text"], row["text_pair"], row["gold"], row["fp32"], row["shipped"]) == ("甲", "乙", ["a", "c"], ["a", "c"], ["a"])
    assert (row["fp32_right"], row["shipped_right"]) == (True, False) and "where" not in row

    ner = get_kind(load_task_config("cluener"))
    text = "叶老桂在浙商银行"
    ex = LabelingExample(text, (Entity("name", 0, 3, "叶老桂"), Entity("company", 4, 8, "浙商银行")))
    row = answer_changes(ner, [ex], (), [(("name", 0, 3), ("company", 4, 8))], [(("name", 0, 3),)]).rows[0]
    assert row["gold"] == [["name", "叶老桂", 0], ["company", "浙商银行", 4]] and row["shipped"] == [["name", "叶老桂", 0]]
    assert (row["fp32_right"], row["shipped_right"]) == (True, False)

    mrc = get_kind(load_task_config("cmrc2018"))
    ex = QAExample("q1", "谁在银行？", "叶老桂在浙商银行。", (Answer("叶老桂", 0),))
    row = answer_changes(mrc, [ex], (), [(0, 3)], [(4, 8)]).rows[0]
    assert (row["id"], row["question"], row["gold"]) == ("q1", "谁在银行？", [["叶老桂", 0]])
    assert (row["fp32"], row["shipped"], row["fp32_right"], row["shipped_right"]) == (["叶老桂", 0], ["浙商银行", 4], True, False)
    assert mrc.shown_answer(ex, None, ()) is None and not mrc.is_right(ex, None)  # no answer found
    twice = QAExample("q2", "谁？", "叶老桂，叶老桂。", (Answer("叶老桂", 0),))  # the same text elsewhere: another answer
    row = answer_changes(mrc, [twice], (), [(0, 3)], [(4, 7)]).rows[0]
    assert (row["fp32"], row["shipped"], row["fp32_right"], row["shipped_right"]) == (["叶老桂", 0], ["叶老桂", 4], True, True)

    uie = get_kind(load_task_config("uie"))
    ex = ExtractionExample(text, "公司", ((4, 8),), "dev.jsonl:7")
    row = answer_changes(uie, [ex], (), [()], [((4, 8),)]).rows[0]
    assert (row["where"], row["prompt"], row["gold"], row["fp32"], row["shipped"]) == ("dev.jsonl:7", "公司", [["浙商银行", 4]], [], [["浙商银行", 4]])
    assert (row["fp32_right"], row["shipped_right"]) == (False, True)
