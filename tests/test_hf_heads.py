"""A Hugging Face checkpoint's trained head and the task's labels (issue 59): mapped by the task's label ids or
names in any order (its rows reordered), LABEL_i placeholders taken in index order and checked on dev, anything
else refused in one line naming both label sets and ``--set model.head=replace``; never dropped by default.

The checkpoints are the golden ones of ``tests/golden/hf/`` with their ``id2label`` (and classifier rows) changed
here with numpy and ``safetensors.numpy``: a head whose rows and labels are permuted together is the same model, so
its converted logits, in the task's order, must be the golden ones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (paddle after numpy)
from pipeline import hf_heads, hf_import
from pipeline.errors import ModelError

GOLDEN = Path(__file__).parent / "golden" / "hf"
INPUTS = json.loads((GOLDEN / "inputs.json").read_text(encoding="utf-8"))
ATOL = 2e-5
NAMES = ["体育", "财经", "科技"]  # the golden sequence classifier's id2label
IDS = ["100", "101", "102"]
TAGS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]  # the golden token classifier's id2label


def golden(name: str) -> dict:
    return dict(np.load(GOLDEN / name / "golden.npz"))


def variant(tmp_path: Path, name: str, labels: list[str] | None = None, perm: list[int] | None = None,
            label2id: dict | None = None, dirname: str = "hf") -> Path:
    """A copy of golden ``name`` whose classifier row j is the golden row ``perm[j]`` and whose id2label is
    ``labels`` (label2id its inverse unless given)."""
    from safetensors.numpy import load_file, save_file

    dst = tmp_path / dirname
    shutil.copytree(GOLDEN / name, dst)
    if perm is not None:
        state = load_file(str(dst / "model.safetensors"))
        for key in ("classifier.weight", "classifier.bias"):
            state[key] = np.ascontiguousarray(state[key][perm])
        save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    if labels is not None:
        config["id2label"] = {str(i): v for i, v in enumerate(labels)}
        config["label2id"] = {v: i for i, v in enumerate(labels)} if label2id is None else label2id
    (dst / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return dst


def logits(model_dir: Path, g: dict) -> np.ndarray:
    import paddle

    from pipeline.modeling import load_classifier

    model = load_classifier(model_dir, g["logits"].shape[-1])
    with paddle.no_grad():
        return model(paddle.to_tensor(g["input_ids"]), token_type_ids=paddle.to_tensor(g["token_type_ids"])).numpy()


def labels_json(model_dir: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (model_dir / "labels.json").read_text(encoding="utf-8").splitlines()]
    return [(r["label"], r["label_desc"]) for r in rows]


# --- the mapping, case by case -----------------------------------------------------------------------------------

def test_ids_in_the_tasks_order_are_kept(tmp_path):
    src = variant(tmp_path, "bert-sequence", IDS)
    out = hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
    mapping = hf_import.head_mapping(out)
    assert mapping["by"] == "ids" and mapping["order"] == [0, 1, 2]
    assert mapping["note"] == "its head's labels are the task's ids in the task's order: kept"
    np.testing.assert_allclose(logits(out, golden("bert-sequence")), golden("bert-sequence")["logits"], atol=ATOL, rtol=0)
    assert labels_json(out) == list(zip(IDS, NAMES))


def test_names_in_the_tasks_order_are_kept(tmp_path):
    """The TNEWS case of issue 59: id2label holds the task's label_names (not its ids), in the task's order."""
    out = hf_import.convert(GOLDEN / "bert-sequence", tmp_path / "out", labels=IDS, label_names=NAMES)
    mapping = hf_import.head_mapping(out)
    assert mapping["by"] == "names" and mapping["order"] == [0, 1, 2]
    assert mapping["note"] == "its head's labels are the task's names in the task's order: kept"
    np.testing.assert_allclose(logits(out, golden("bert-sequence")), golden("bert-sequence")["logits"], atol=ATOL, rtol=0)
    assert labels_json(out) == list(zip(IDS, NAMES))
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "100", "1": "101", "2": "102"}


@pytest.mark.parametrize("by", ["names", "ids"])
def test_labels_in_another_order_reorder_the_rows(tmp_path, by):
    """Rows and labels permuted together are the same model: converted for the task, its logits (in the task's
    order) are the golden ones, so every input gets the same label as from the original."""
    perm = [2, 0, 1]  # the checkpoint's output j is the golden output perm[j]
    task = NAMES if by == "names" else IDS
    src = variant(tmp_path, "bert-sequence", [task[p] for p in perm], perm)
    out = hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
    mapping = hf_import.head_mapping(out)
    assert mapping["by"] == by and mapping["order"] == [1, 2, 0]
    assert mapping["note"] == (f"its head's labels are the task's {by} in another order: its rows reordered to the "
                               f"task's (3 moved: {task[0]} <- output 1, {task[1]} <- output 2, {task[2]} <- output 0)")
    g = golden("bert-sequence")
    ours = logits(out, g)
    np.testing.assert_allclose(ours, g["logits"], atol=ATOL, rtol=0)
    assert ours.argmax(-1).tolist() == g["logits"].argmax(-1).tolist()


def test_placeholder_labels_are_assumed_in_index_order_and_said(tmp_path):
    src = variant(tmp_path, "bert-sequence", ["LABEL_0", "LABEL_1", "LABEL_2"])
    out = hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
    mapping = hf_import.head_mapping(out)
    assert mapping["by"] == "assumed" and mapping["order"] == [0, 1, 2]
    assert mapping["note"] == ("its head's labels are transformers' placeholders LABEL_0..LABEL_2: assumed to be the "
                               "task's [体育, 财经, 科技] in that order (checked on dev); --set model.head=replace "
                               "fine-tunes a new head instead")
    assert labels_json(out) == list(zip(IDS, NAMES))


def test_labels_that_cannot_be_mapped_are_refused_naming_both_sets_and_the_flag(tmp_path):
    src = variant(tmp_path, "bert-sequence", ["sports", "finance", "tech"])
    with pytest.raises(ModelError) as err:
        hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
    assert str(err.value) == (f"{src}: its BertForSequenceClassification head's labels [sports, finance, tech] "
                              "(config.json id2label) match neither the ids nor the names of the task's 3 labels "
                              "[100, 101, 102] (names [体育, 财经, 科技]), in any order: not dropping a trained head; "
                              "--set model.head=replace fine-tunes a new one on its encoder")
    assert not (tmp_path / "out").exists()


def test_a_head_of_another_size_is_refused(tmp_path):
    with pytest.raises(ModelError, match=r"head has 3 outputs \[体育, 财经, 科技\] but the task has 4 labels "
                                         r"\[100, 101, 102, 103\].*--set model.head=replace"):
        hf_import.convert(GOLDEN / "bert-sequence", tmp_path / "out", labels=IDS + ["103"], label_names=NAMES + ["x"])


def test_placeholders_of_another_count_are_refused(tmp_path):
    src = variant(tmp_path, "bert-sequence", ["LABEL_0", "LABEL_1", "LABEL_2"])
    with pytest.raises(ModelError, match=r"head has 3 outputs \[LABEL_0, LABEL_1, LABEL_2\] but the task has"):
        hf_import.convert(src, tmp_path / "out", labels=["a", "b"], label_names=["a", "b"])


def test_label2id_disagreeing_with_id2label_is_refused(tmp_path):
    src = variant(tmp_path, "bert-sequence", NAMES, label2id={"体育": 0, "财经": 2, "科技": 1})
    with pytest.raises(ModelError) as err:
        hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
    assert str(err.value) == (f"{src / 'config.json'}: label2id disagrees with id2label (id2label[1] is '财经' but "
                              "label2id['财经'] is 2): which output is which label is unknown; make them agree, or "
                              "--set model.head=replace fine-tunes a new head on its encoder")
    placeholders = variant(tmp_path, "bert-sequence", NAMES, label2id={"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2},
                           dirname="hf2")
    with pytest.raises(ModelError, match=r"label2id disagrees with id2label \(id2label\[0\] is '体育' but "
                                         r"label2id\['体育'\] is missing\)"):
        hf_import.convert(placeholders, tmp_path / "out", labels=IDS, label_names=NAMES)


@pytest.mark.parametrize("id2label,message", [
    ({"0": "a", "2": "b", "3": "c"}, r"id2label's output indices must be 0..2 without gaps"),
    ({"x": "a", "1": "b", "2": "c"}, r"id2label entry 'x': 'a': expected an output index and a label"),
    ({"0": ["a"], "1": "b", "2": "c"}, r"id2label entry '0': \[\"a\"\]: expected an output index and a label"),
    ({"0": "a", "1": "b"}, r"id2label names 2 labels but the BertForSequenceClassification head has 3 outputs"),
])
def test_a_malformed_id2label_is_one_line(tmp_path, id2label, message):
    src = variant(tmp_path, "bert-sequence")
    config = json.loads((src / "config.json").read_text())
    config["id2label"], config["label2id"] = id2label, None
    config.pop("label2id")
    (src / "config.json").write_text(json.dumps(config, ensure_ascii=False))
    with pytest.raises(ModelError, match=message):
        hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)


def test_a_taggers_bio_tags_are_mapped_by_name(tmp_path):
    """CLUENER-style: the task's tags are built from its entity types (O, B-ORG, I-ORG, B-LOC, I-LOC for [ORG, LOC]);
    the checkpoint's tags in its own order are put in the task's, token by token the same tags as the original."""
    from pipeline.labeling.bio import tag_names

    task = tag_names(["ORG", "LOC"])
    assert task == ["O", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
    out = hf_import.convert(GOLDEN / "bert-token", tmp_path / "out", labels=task, label_names=task)
    mapping = hf_import.head_mapping(out)
    assert mapping["by"] == "labels" and mapping["order"] == [0, 3, 4, 1, 2]
    assert mapping["note"].startswith("its head's labels are the task's labels in another order: its rows reordered")
    g = golden("bert-token")
    real = g["attention_mask"].astype(bool)
    ours = logits(out, g)
    np.testing.assert_allclose(ours[real], g["logits"][..., [0, 3, 4, 1, 2]][real], atol=ATOL, rtol=0)
    assert [task[t] for t in ours[real].argmax(-1)] == [TAGS[t] for t in g["logits"][real].argmax(-1)]


def test_a_tagger_of_other_entity_types_is_refused(tmp_path):
    task = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
    with pytest.raises(ModelError, match=r"its BertForTokenClassification head's labels \[O, B-LOC, I-LOC, B-ORG, "
                                         r"I-ORG\] \(config.json id2label\) do not match the task's 5 labels "
                                         r"\[O, B-PER, I-PER, B-ORG, I-ORG\], in any order: not dropping"):
        hf_import.convert(GOLDEN / "bert-token", tmp_path / "out", labels=task, label_names=task)


# --- the dev check of an assumed order -----------------------------------------------------------------------------

def test_the_assumed_order_check_passes_the_index_order_and_ties():
    confusion = np.array([[5, 1, 0], [0, 0, 0], [1, 0, 4]])
    assert hf_heads.assumed_order_verdict(confusion, IDS, NAMES, Path("m")) == (
        "the assumed order checked on 11 dev predictions: the index order is their best assignment of outputs to "
        "labels (agreement 0.8182)")
    tie = np.array([[2, 2], [2, 2]])
    assert "index order is their best" in hf_heads.assumed_order_verdict(tie, ["a", "b"], ["a", "b"], Path("m"))


def test_the_assumed_order_check_names_the_permutation_it_finds():
    confusion = np.array([[0, 0, 5], [0, 3, 0], [4, 0, 1]])
    with pytest.raises(ModelError) as err:
        hf_heads.assumed_order_verdict(confusion, IDS, NAMES, Path("m"))
    assert str(err.value) == ("m: its LABEL_i head is not in the task's order: on 13 dev predictions the best "
                              "assignment of outputs to labels is 100 (体育) is output 2; 102 (科技) is output 0 "
                              "(agreement 0.9231 so, 0.3077 in index order): give config.json an id2label naming "
                              "each output's label, or --set model.head=replace fine-tunes a new head")


def test_dev_confusion_counts_sentences_and_real_tokens():
    sentences = hf_heads.dev_confusion([np.array([0.1, 0.9]), np.array([0.8, 0.2])], [np.array(1), np.array(1)], 2)
    assert sentences.tolist() == [[0, 0], [1, 1]]
    tokens = hf_heads.dev_confusion([np.array([[1, 0], [0, 1], [0, 1]])], [np.array([-100, 0, 1])], 2)
    assert tokens.tolist() == [[0, 1], [0, 1]]
    # a multi-label text: each of its labels against each output above 0 (a probability above 0.5)
    sets = hf_heads.dev_confusion([np.array([2.0, -1.0, 0.5]), np.array([-3.0, 1.0, -1.0])],
                                  [np.array([1, 0, 1]), np.array([0, 1, 0])], 3)
    assert sets.tolist() == [[1, 0, 1], [0, 1, 0], [1, 0, 1]]


# --- through the pipeline --------------------------------------------------------------------------------------------

def _task(tmp_path: Path, rows: list[tuple[str, str]], labels=IDS, names=NAMES) -> Path:
    from tests.conftest import write_tiny_task_yaml

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for split in ("train.json", "dev.json"):
        (data / split).write_text("\n".join(json.dumps({"label": y, "sentence": t}, ensure_ascii=False)
                                            for t, y in rows) + "\n", encoding="utf-8")
    return write_tiny_task_yaml(tmp_path / "hf.yaml", data, labels=list(labels), label_names=list(names))


def _own_rows(name: str = "bert-sequence", labels=IDS) -> list[tuple[str, str]]:
    """The golden texts labelled with the golden model's own predictions (what a fine-tuned model would be)."""
    texts, preds = INPUTS["texts"], golden(name)["logits"].argmax(-1)
    return [(t, labels[p]) for t, p in zip(texts, preds) if t]


def _run(tmp_path: Path, task: Path, model: Path, *sets: str, until: str = "finetune-check") -> int:
    from pipeline.cli import main

    args = ["run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--model", str(model),
            "--set", "gates.min_accuracy=0", "--set", "finetune.epochs=1"]
    for s in sets:
        args += ["--set", s]
    return main([*args, "--until", until])


def test_a_reordered_head_gives_the_originals_predictions_through_the_pipeline(tmp_path, capsys):
    """Names in another order: converted with its rows reordered (said), no training, and finetune-check's FP32 dev
    logits are the original's, column for column in the task's order."""
    perm = [1, 2, 0]
    src = variant(tmp_path, "bert-sequence", [NAMES[p] for p in perm], perm)
    rows = _own_rows()
    assert _run(tmp_path, _task(tmp_path, rows), src) == 0, capsys.readouterr().err[-2000:]
    out = capsys.readouterr().out
    assert "its head's labels are the task's names in another order: its rows reordered to the task's" in out
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["converted"] == 1 and record["metrics"]["trained"] == 0
    dev_logits = np.load(tmp_path / "runs" / "tiny" / "finetune-check" / "out" / "dev_logits.npy")
    expected = golden("bert-sequence")["logits"][[i for i, t in enumerate(INPUTS["texts"]) if t]]
    np.testing.assert_allclose(dev_logits, expected, atol=ATOL, rtol=0)
    baseline = json.loads((tmp_path / "runs" / "tiny" / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["accuracy"] == 1.0  # every dev text gets the label the original model gave it


def test_an_unmappable_head_is_exit_2_and_replaced_only_when_asked(tmp_path, capsys):
    src = variant(tmp_path, "bert-sequence", ["sports", "finance", "tech"])
    task = _task(tmp_path, _own_rows() * 2)
    assert _run(tmp_path, task, src, until="finetune") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "head's labels [sports, finance, tech]" in err[0] and "--set model.head=replace" in err[0]
    assert _run(tmp_path, task, src, "model.head=replace", until="finetune") == 0
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 1


@pytest.mark.parametrize("problem_type, multi_label", [("multi_label_classification", False),
                                                       ("single_label_classification", True)])
def test_a_head_trained_for_the_other_problem_type_is_refused(tmp_path, capsys, problem_type, multi_label):
    """A softmax head read as sigmoids (or the other way) answers what it was never trained to: config.json's
    problem_type, when it says, must be the task's (classification.multi_label)."""
    src = variant(tmp_path, "bert-sequence", NAMES)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    (src / "config.json").write_text(json.dumps({**config, "problem_type": problem_type}), encoding="utf-8")
    task = _task(tmp_path, _own_rows(labels=NAMES) * 2, labels=NAMES)
    assert _run(tmp_path, task, src, f"classification.multi_label={str(multi_label).lower()}", until="finetune") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"config.json problem_type is {problem_type!r}" in err[0], err
    assert "classification.multi_label" in err[0] and "--set model.head=replace" in err[0]


def test_placeholder_labels_in_the_right_order_pass_the_dev_check(tmp_path, capsys):
    src = variant(tmp_path, "bert-sequence", ["LABEL_0", "LABEL_1", "LABEL_2"])
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src) == 0, capsys.readouterr().err[-2000:]
    out = capsys.readouterr().out
    assert "placeholders LABEL_0..LABEL_2: assumed to be the task's [体育, 财经, 科技] in that order" in out
    assert ("the assumed order checked on 6 dev predictions: the index order is their best assignment of outputs to "
            "labels (agreement 1.0000)") in out
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 0


def test_placeholder_labels_with_swapped_rows_are_refused_naming_the_permutation(tmp_path, capsys):
    src = variant(tmp_path, "bert-sequence", ["LABEL_0", "LABEL_1", "LABEL_2"], [2, 1, 0])
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]  # not the progress bar
    assert len(err) == 1
    assert ("its LABEL_i head is not in the task's order: on 6 dev predictions the best assignment of outputs to labels "
            "is 100 (体育) is output 2; 102 (科技) is output 0 (agreement 1.0000 so, 0.0000 in index order)") in err[0]
    assert not (tmp_path / "runs" / "tiny" / "finetune-check" / "record.json").exists()


def test_a_paddlenlp_models_head_is_replaced_when_asked(tmp_path, capsys):
    """``model.head: replace`` on a PaddleNLP directory: its saved head is not loaded, a new one is trained."""
    src = hf_import.convert(GOLDEN / "bert-sequence", tmp_path / "paddle")
    assert not hf_import.is_hugging_face(src)
    task = _task(tmp_path, _own_rows(labels=NAMES) * 2, labels=NAMES, names=NAMES)
    assert _run(tmp_path, task, src, "model.head=replace", until="finetune") == 0, capsys.readouterr().err[-2000:]
    assert f"{src}: fine-tuning a new classification head (model.head: replace)" in capsys.readouterr().out
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 1


def test_model_head_takes_keep_or_replace(tmp_path):
    from pipeline.config import load_task_config
    from pipeline.errors import ConfigError
    from tests.conftest import write_tiny_task_yaml

    task = write_tiny_task_yaml(tmp_path / "t.yaml", tmp_path)
    assert load_task_config(str(task)).model.head == "keep"
    assert load_task_config(str(task), {"model.head": "replace"}).model.head == "replace"
    with pytest.raises(ConfigError, match=r"model.head: 'drop' is not one of keep, replace"):
        load_task_config(str(task), {"model.head": "drop"})


def test_a_head_of_another_width_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    src = variant(tmp_path, "bert-sequence")
    state = load_file(str(src / "model.safetensors"))
    state["classifier.weight"] = np.ascontiguousarray(state["classifier.weight"][:, :16])
    save_file(state, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"model.safetensors: the BertForSequenceClassification head "
                                         r"\(classifier.weight\) is \[3, 16\], expected \[outputs, hidden_size 32\]"):
        hf_import.convert(src, tmp_path / "out", labels=IDS, label_names=NAMES)
