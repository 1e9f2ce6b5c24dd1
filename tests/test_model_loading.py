import json
import shutil

import pytest

from pipeline.errors import ModelError
from pipeline.modeling import check_head, inspect_model, load_classifier


def test_inspect_finetuned_model(tiny_finetuned):
    info = inspect_model(tiny_finetuned["model_dir"])
    assert info.head_classes == 3 and info.labels == ("100", "101", "102")
    assert check_head(info, ["100", "101", "102"], 32) is True


@pytest.mark.parametrize("missing, fragment", [
    ("model_state.pdparams", "missing weights"),
    ("config.json", "missing config"),
    ("vocab.txt", "missing tokenizer vocabulary"),
])
def test_model_dir_missing_files(tiny_model_copy, missing, fragment):
    (tiny_model_copy / missing).unlink()
    with pytest.raises(ModelError, match=fragment):
        inspect_model(tiny_model_copy)


def test_model_dir_not_found(tmp_path):
    with pytest.raises(ModelError, match="model dir not found"):
        inspect_model(tmp_path / "nope")


def test_truncated_weights(tiny_model_copy):
    p = tiny_model_copy / "model_state.pdparams"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(ModelError, match="cannot read weights"):
        inspect_model(tiny_model_copy)


def test_num_classes_mismatch(tiny_model_copy):
    info = inspect_model(tiny_model_copy)
    with pytest.raises(ModelError, match="num_classes mismatch: .* 3 classes but the task has 15 labels"):
        check_head(info, [str(i) for i in range(15)], 32)


def test_label_order_mismatch(tiny_model_copy):
    with pytest.raises(ModelError, match="label set/order"):
        check_head(inspect_model(tiny_model_copy), ["101", "100", "102"], 32)


def test_encoder_without_head_needs_finetune(tiny_model_copy, tmp_path):
    """An ErnieModel checkpoint (no classifier) is recognised as needing the fine-tune stage."""
    import paddle

    state = paddle.load(str(tiny_model_copy / "model_state.pdparams"))
    enc = {k.removeprefix("ernie."): v for k, v in state.items() if k.startswith("ernie.")}
    dst = tmp_path / "encoder"
    shutil.copytree(tiny_model_copy, dst)
    paddle.save(enc, str(dst / "model_state.pdparams"))
    (dst / "labels.json").unlink()
    info = inspect_model(dst)
    assert info.head_classes is None
    assert check_head(info, ["100", "101", "102"], 32) is False
    model = load_classifier(dst, 3)  # loads with a fresh head
    assert tuple(model.classifier.weight.shape) == (32, 3)


@pytest.mark.parametrize("labels_json, config_extra, expected", [
    ('["100", "101", "102"]', {}, ("100", "101", "102")),
    ('[{"index": 0, "label": "100", "label_desc": "a"}, {"index": 1, "label": "101"}, {"index": 2, "label": "102"}]', {},
     ("100", "101", "102")),
    (None, {"id2label": {"1": "101", "0": "100", "2": "102"}}, ("100", "101", "102")),
    (None, {"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}, None),  # unnamed: says nothing
])
def test_model_labels_in_common_shapes(tiny_model_copy, labels_json, config_extra, expected):
    cfg_path = tiny_model_copy / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, **config_extra}))
    if labels_json is None:
        (tiny_model_copy / "labels.json").unlink()
    else:
        (tiny_model_copy / "labels.json").write_text(labels_json)
    info = inspect_model(tiny_model_copy)
    assert info.labels == expected
    assert check_head(info, ["100", "101", "102"], 32) is True


def test_model_labels_without_label_field_are_one_line(tiny_model_copy):
    (tiny_model_copy / "labels.json").write_text('[{"index": 0, "label_desc": "news"}]')
    with pytest.raises(ModelError, match=r"labels.json: item 0: field 'label' missing"):
        inspect_model(tiny_model_copy)
