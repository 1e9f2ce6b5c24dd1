import json
import re
import shutil
from pathlib import Path

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


# -- weights are read through pipeline.safe_weights (a pickle's globals on an allow-list), never paddle.load ---------

class _Payload:
    """Unpickling this calls ``func(arg)``."""

    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, (self.arg,)


def _touch_payload(marker):
    import os
    import pickle

    return pickle.dumps(_Payload(os.system, f"touch {marker}"), protocol=4)


def _same(a, b) -> bool:
    import numpy as np

    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_paddle_saved_files_read_as_paddle_load_reads_them(tiny_model_copy, tmp_path):
    """Every form paddle.save writes here: save_pretrained's state dict, a resume checkpoint (model, AdamW with its
    LR scheduler, scheduler), tensors outside a state dict (tuple(name, array)), protocol 2, an OrderedDict."""
    import collections
    import pickle

    import numpy as np
    import paddle

    from pipeline import safe_weights
    from pipeline.training import CheckpointDir, TrainState, make_optimizer

    model = load_classifier(tiny_model_copy, 3)
    opt, sched = make_optimizer(model, 1e-3, 10, 0.1, 0.01)
    loss = model(paddle.to_tensor(np.ones((2, 5), "int64"))).mean()
    loss.backward()
    opt.step()
    sched.step()
    CheckpointDir(tmp_path).save(model, opt, sched, TrainState())
    t = paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
    paddle.save({"w": t, "step": 3, "nested": {"lr": 0.5, "list": [t, "x"]}}, str(tmp_path / "mixed.pdparams"))
    paddle.save({"w": t}, str(tmp_path / "p2.pdparams"), protocol=2)
    (tmp_path / "ordered.pdparams").write_bytes(pickle.dumps(collections.OrderedDict(w=np.ones(3, "float16")), protocol=2))
    files = [tiny_model_copy / "model_state.pdparams", *sorted((tmp_path / "checkpoint").glob("*.pd*")),
             tmp_path / "mixed.pdparams", tmp_path / "p2.pdparams", tmp_path / "ordered.pdparams"]
    assert len(files) == 7
    for f in files:
        assert _same(safe_weights.load(f), paddle.load(str(f), return_numpy=True)), f


def test_big_parameters_split_by_paddle_save_are_joined(tmp_path):
    """paddle.save (protocol 2/3) splits arrays over 1 GiB into slices and a table; read back whole, as paddle.load."""
    import pickle

    import numpy as np
    import paddle

    from pipeline import safe_weights

    w = np.arange(12, dtype="float32")
    obj = {"w@@.0": w[:5], "w@@.1": w[5:], "b": np.ones(2, "float32"),
           "UnpackBigParamInfor@@": {"w": {"OriginShape": (3, 4), "slices": ["w@@.0", "w@@.1"]}},
           "StructuredToParameterName@@": {"w": "linear_0.w_0", "b": "linear_0.b_0"}}
    (tmp_path / "big.pdparams").write_bytes(pickle.dumps(obj, protocol=2))
    got = safe_weights.load_state_dict(tmp_path / "big.pdparams")
    assert _same(got, paddle.load(str(tmp_path / "big.pdparams"), return_numpy=True))
    assert set(got) == {"w", "b"} and got["w"].shape == (3, 4)


SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


@pytest.mark.parametrize("name", ["tnews-e5mini6-ft", "e5-mini6-zh"])
def test_real_models_load_as_paddlenlp_loads_them(name):
    """The real models (when ../shared has them): the same numbers as paddlenlp's own (unsafe) loader gives."""
    import numpy as np
    import paddle

    from pipeline.ernie_models import ErnieForSequenceClassification

    model_dir = SHARED / name
    if not (model_dir / "model_state.pdparams").is_file():
        pytest.skip(f"{model_dir} not on this machine")
    info = inspect_model(model_dir)
    assert (info.hidden_size, info.num_hidden_layers) == (384, 6)
    assert info.head_classes == (15 if name == "tnews-e5mini6-ft" else None)
    n = info.head_classes or 3
    ours = load_classifier(model_dir, n)
    theirs = ErnieForSequenceClassification.from_pretrained(str(model_dir), num_labels=n)
    theirs.eval()
    for (k, a), (k2, b) in zip(ours.ernie.state_dict().items(), theirs.ernie.state_dict().items()):
        assert k == k2 and np.array_equal(a.numpy(), b.numpy()), k
    if info.head_classes:
        x = paddle.to_tensor(np.array([[1, 640, 1158, 2]], "int64"))
        assert np.array_equal(ours(x).numpy(), theirs(x).numpy())


def test_weights_that_would_run_code_are_refused_everywhere(tiny_model_copy, tmp_path):
    """inspect_model, load_classifier and the PaddleNLP UIE converter all refuse the file; the payload never runs."""
    from pipeline.extraction.checkpoint import convert_uie_checkpoint
    from pipeline.safe_weights import UnsafeWeights

    marker = tmp_path / "pwned"
    weights = tiny_model_copy / "model_state.pdparams"
    weights.write_bytes(_touch_payload(marker))
    refusal = f"{weights}: refused: the file asks to call posix.system"
    with pytest.raises(UnsafeWeights, match=re.escape(refusal)):
        inspect_model(tiny_model_copy)
    with pytest.raises(UnsafeWeights, match=re.escape(refusal)):
        load_classifier(tiny_model_copy, 3)
    cfg = json.loads((tiny_model_copy / "config.json").read_text())
    (tiny_model_copy / "config.json").write_text(json.dumps({**cfg, "architectures": ["UIE"]}))
    with pytest.raises(UnsafeWeights, match=re.escape(refusal)):
        convert_uie_checkpoint(tiny_model_copy, tmp_path / "converted")
    assert not marker.exists()


def test_status_path_reads_no_weights(tiny_model_copy, tmp_path):
    """inspect_model(weights=False) (finetune's inputs(), which status calls) checks every other file but does not
    unpickle the weights."""
    marker = tmp_path / "pwned"
    (tiny_model_copy / "model_state.pdparams").write_bytes(_touch_payload(marker))
    info = inspect_model(tiny_model_copy, weights=False)
    assert info.head_classes is None and info.labels == ("100", "101", "102") and not marker.exists()


def test_load_classifier_reads_only_model_state_pdparams(tiny_model_copy, tmp_path):
    """paddlenlp would prefer a sharded index (model_state.pdparams.index.json) and unpickle its shards: the state
    dict is handed to it instead, so no other weights file in the directory is read."""
    import numpy as np
    import paddle

    marker = tmp_path / "pwned"
    (tiny_model_copy / "evil-00001-of-00001.pdparams").write_bytes(_touch_payload(marker))
    (tiny_model_copy / "model_state.pdparams.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 1}, "weight_map": {"classifier.weight": "evil-00001-of-00001.pdparams"}}))
    model = load_classifier(tiny_model_copy, 3)
    state = paddle.load(str(tiny_model_copy / "model_state.pdparams"), return_numpy=True)
    assert np.array_equal(model.classifier.weight.numpy(), state["classifier.weight"])
    assert not marker.exists()


def test_resume_checkpoint_that_would_run_code_is_refused(tiny_model_copy, tmp_path):
    """Checkpoints are our own files, but a runs dir can be handed over: a payload in any of the three is refused
    (not silently discarded as an incompatible checkpoint); a merely unreadable one still means starting over."""
    import numpy as np
    import paddle

    from pipeline.safe_weights import UnsafeWeights
    from pipeline.training import CheckpointDir, TrainState, make_optimizer

    model = load_classifier(tiny_model_copy, 3)
    opt, sched = make_optimizer(model, 1e-3, 10)
    model(paddle.to_tensor(np.ones((2, 5), "int64"))).mean().backward()
    opt.step()
    ckpt = CheckpointDir(tmp_path / "work")
    ckpt.save(model, opt, sched, TrainState(step=1, step_in_epoch=1))
    assert ckpt.load(model, opt, sched).step == 1
    marker = tmp_path / "pwned"
    for name in ("model.pdparams", "optimizer.pdopt", "scheduler.pdparams"):
        ckpt.save(model, opt, sched, TrainState(step=1))
        (ckpt.current / name).write_bytes(_touch_payload(marker))
        with pytest.raises(UnsafeWeights, match=re.escape(f"{ckpt.current / name}: refused")):
            ckpt.load(model, opt, sched)
    assert not marker.exists()
    (ckpt.current / "scheduler.pdparams").write_bytes(b"\x80\x04truncated")
    assert ckpt.load(model, opt, sched) is None


def test_a_kill_between_the_checkpoints_two_renames_loses_neither(tiny_model_copy, tmp_path):
    """save() moves ``checkpoint`` aside, then renames the complete new one into place: killed between the two, the
    next run finds no ``checkpoint``.  It takes the new one (else the old one) instead of training from step 0, and
    before the next save's clean-up would delete both."""
    import json
    import shutil

    import numpy as np
    import paddle

    from pipeline.training import CheckpointDir, TrainState, make_optimizer

    model = load_classifier(tiny_model_copy, 3)
    opt, sched = make_optimizer(model, 1e-3, 10)
    model(paddle.to_tensor(np.ones((2, 5), "int64"))).mean().backward()
    opt.step()
    root = tmp_path / "work"
    CheckpointDir(root).save(model, opt, sched, TrainState(step=2))
    current = root / "checkpoint"
    shutil.copytree(current, root / ".checkpoint-999")  # the new one, written in full ...
    (root / ".checkpoint-999" / "state.json").write_text(json.dumps({**json.loads((current / "state.json").read_text()),
                                                                     "step": 3}), encoding="utf-8")
    current.rename(root / ".old-999")  # ... and the old one moved aside: killed here
    assert CheckpointDir(root).load(model, opt, sched).step == 3 and current.is_dir()
    shutil.rmtree(current)  # only the old one left (the new one never got its state.json)
    shutil.copytree(root / ".old-999", root / ".checkpoint-998")
    (root / ".checkpoint-998" / "state.json").unlink()
    assert CheckpointDir(root).state().step == 2
    CheckpointDir(root).save(model, opt, sched, TrainState(step=4))  # and a save after a kill keeps going
    assert CheckpointDir(root).state().step == 4 and sorted(p.name for p in root.iterdir()) == ["checkpoint"]


def test_a_checkpoint_that_cannot_be_this_runs_is_applied_not_at_all(tiny_model_copy, tmp_path):
    """All or nothing: a checkpoint with one unreadable file, or made for another model (a narrower student, a
    moment of another shape), leaves the model's weights, the optimizer and the schedule as they were, and says why.
    Paddle's set_state_dict alone would have applied the weights it could and warned."""
    import numpy as np
    import paddle

    from pipeline.compress.dynabert import narrow_model
    from pipeline.training import CheckpointDir, TrainState, make_optimizer

    def trained(model):
        opt, sched = make_optimizer(model, 1e-3, 10)
        model(paddle.to_tensor(np.ones((2, 5), "int64"))).mean().backward()
        opt.step()
        sched.step()
        return opt, sched

    model = load_classifier(tiny_model_copy, 3)
    other = load_classifier(tiny_model_copy, 3)
    opt, sched = trained(other)
    ckpt = CheckpointDir(tmp_path / "work")
    ckpt.save(other, opt, sched, TrainState(step=1, step_in_epoch=1))
    (ckpt.current / "scheduler.pdparams").write_bytes(b"\x80\x04truncated")
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    own_opt, own_sched = make_optimizer(model, 1e-3, 10)
    said = []
    assert ckpt.load(model, own_opt, own_sched, said.append) is None
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())
    assert own_sched.last_epoch == 0 and not own_opt.state_dict().get("LR_Scheduler", {}).get("last_epoch")
    assert said == [f"{ckpt.current / 'scheduler.pdparams'}: cannot read weights (UnpicklingError: could not find MARK); "
                    "training from the start"]

    narrow = narrow_model(load_classifier(tiny_model_copy, 3), 1, 8)
    ckpt.save(narrow, *trained(narrow), TrainState(step=1, step_in_epoch=1))
    said.clear()
    assert ckpt.load(model, own_opt, own_sched, said.append) is None
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())
    assert len(said) == 1 and "made for another model (ernie.encoder.layers.0.self_attn.q_proj.weight is" in said[0]

    # The same weights, an optimizer moment of another shape: caught now, not at AdamW's next step.
    opt, sched = trained(other)
    ckpt.save(other, opt, sched, TrainState(step=1, step_in_epoch=1))
    saved = paddle.load(str(ckpt.current / "optimizer.pdopt"), return_numpy=True)
    key = next(k for k in saved if "_moment1_" in k)
    saved[key] = np.zeros([1, *np.shape(saved[key])], "float32")
    paddle.save(saved, str(ckpt.current / "optimizer.pdopt"))
    said.clear()
    assert ckpt.load(model, own_opt, own_sched, said.append) is None
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())
    assert len(said) == 1 and "optimizer state" in said[0] and "its parameter" in said[0]

    ckpt.save(other, opt, sched, TrainState(step=1, step_in_epoch=1))
    assert ckpt.load(model, own_opt, own_sched, said.append).step == 1  # this run's: applied
    assert all(np.array_equal(v.numpy(), w.numpy()) for v, w in zip(model.state_dict().values(), other.state_dict().values()))


@pytest.mark.parametrize("field, value, message", [
    ("hidden_size", "abc", "field 'hidden_size' must be a positive integer, got 'abc'"),
    ("hidden_size", True, "field 'hidden_size' must be a positive integer, got true"),
    ("num_hidden_layers", 0, "field 'num_hidden_layers' must be a positive integer, got 0"),
    ("num_hidden_layers", "1", "field 'num_hidden_layers' must be a positive integer, got '1'"),
    ("max_position_embeddings", 512.5, "field 'max_position_embeddings' must be a positive integer, got 512.5"),
    ("architectures", "ErnieForSequenceClassification", "field 'architectures' must be a list of class names"),
    ("architectures", [None], "field 'architectures' must be a list of class names, got [null]"),
    ("id2label", "0:100", "field 'id2label' must be a mapping, got '0:100'"),
])
def test_config_fields_of_the_wrong_type_name_the_file_and_field(tiny_model_copy, field, value, message):
    path = tiny_model_copy / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    with pytest.raises(ModelError, match=re.escape(f"{path}: {message}")):
        inspect_model(tiny_model_copy, weights=False)


def _data_without_label_file(tiny_finetuned, dst: Path) -> Path:
    shutil.copytree(tiny_finetuned["data_dir"], dst)
    (dst / "labels.json").unlink()  # the config's labels give the ids, in its order
    return dst


@pytest.mark.parametrize("how", ["another order", "names"])
def test_a_paddlenlp_head_is_kept_when_its_labels_are_the_tasks_in_another_order_or_by_name(tiny_finetuned, tmp_path,
                                                                                           capsys, how):
    """A PaddleNLP classifier's labels.json (``label`` and ``label_desc``) was held to the task's labels in the same
    order: the task's labels in another order, or its data labelled by the names, refused the trained head.  It is
    matched as a Hugging Face head is, its rows put in the task's order in a copy: the same dev accuracy."""
    from conftest import LABEL_NAMES, LABELS, run_cli, write_tiny_task_yaml

    data = _data_without_label_file(tiny_finetuned, tmp_path / "data")
    if how == "another order":
        extra = {"labels": LABELS[::-1], "label_names": LABEL_NAMES[::-1]}
    else:  # the data's labels are the names: the model's labels.json label_desc
        names = [LABEL_NAMES[1], LABEL_NAMES[2], LABEL_NAMES[0]]
        extra = {"labels": names, "label_names": names,
                 "data": {"dir": str(data), "clue_name": None, "text_a": "sentence", "label_field": "label_desc"}}
    task = write_tiny_task_yaml(tmp_path / "t.yaml", data, **extra)
    source = tiny_finetuned["model_dir"]
    before = (source / "labels.json").read_bytes()
    rc, out, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--model",
                           str(source), "--until", "finetune-check")
    assert rc == 0, err
    by = "ids" if how == "another order" else "names"
    assert f"its head's labels are the task's {by} in another order: its rows reordered to the task's" in out
    baseline = json.loads((tmp_path / "runs" / "tiny" / "finetune-check" / "out" / "baseline.json").read_text())
    original = json.loads(tiny_finetuned["baseline"].read_text())
    assert baseline["accuracy"] == pytest.approx(original["accuracy"], abs=1e-9) and baseline["accuracy"] > 0.5
    assert baseline["labels"] == extra["labels"] and (source / "labels.json").read_bytes() == before
    kept = inspect_model(tmp_path / "runs" / "tiny" / "finetune" / "out" / "model")
    assert kept.labels == tuple(extra["labels"]) and kept.label_names == tuple(extra["label_names"])


def test_a_paddlenlp_head_whose_labels_are_not_the_tasks_is_refused_in_one_line(tiny_model_copy, tmp_path, capsys):
    from conftest import refusal_line, run_cli, write_tiny_task_yaml

    (tiny_model_copy / "labels.json").write_text("".join(json.dumps({"label": v}) + "\n" for v in ("200", "201", "202")))
    from conftest import write_tiny_data

    task = write_tiny_task_yaml(tmp_path / "t.yaml", write_tiny_data(tmp_path / "data", n_train=30, n_dev=9))
    rc, _, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--model",
                         str(tiny_model_copy), "--until", "finetune")
    assert rc == 2 and refusal_line(err) == (
        f"error: model {tiny_model_copy}/labels.json: its head's labels ['200', '201', '202']... match neither the ids "
        "nor the names of the task's ['100', '101', '102']..., in any order: not dropping a trained head; --set "
        "model.head=replace fine-tunes a new one on its encoder")


def test_a_paddlenlp_head_named_in_config_json_is_matched_by_the_same_rule(tiny_model_copy, tmp_path, capsys):
    """No labels.json: config.json's id2label names the outputs (PaddleNLP's save_pretrained writes it); in another
    order than the task's they are reordered, and the copy's config.json names the task's order."""
    from conftest import LABELS, run_cli, write_tiny_data, write_tiny_task_yaml

    (tiny_model_copy / "labels.json").unlink()
    config = json.loads((tiny_model_copy / "config.json").read_text())
    config["id2label"] = {str(i): v for i, v in enumerate(LABELS[::-1])}  # the head's outputs are not in this order...
    (tiny_model_copy / "config.json").write_text(json.dumps(config))
    task = write_tiny_task_yaml(tmp_path / "t.yaml", write_tiny_data(tmp_path / "data", n_train=30, n_dev=9))
    rc, out, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--model",
                           str(tiny_model_copy), "--until", "finetune")
    assert rc == 0, err  # ...so the copy's rows are in the wrong order: what is said and written is what matters here
    assert "its head's labels are the task's ids in another order: its rows reordered to the task's (2 moved" in out
    copy = tmp_path / "runs" / "tiny" / "finetune" / "out" / "model"
    assert json.loads((copy / "config.json").read_text())["id2label"] == {str(i): v for i, v in enumerate(LABELS)}
    assert inspect_model(copy).labels == tuple(LABELS)
    config["id2label"] = {"0": "a", "1": "b", "2": "c"}
    (tiny_model_copy / "config.json").write_text(json.dumps(config))
    rc, _, err = run_cli(capsys, "run", "--task", str(task), "--runs-dir", str(tmp_path / "runs2"), "--model",
                         str(tiny_model_copy), "--until", "finetune")
    assert rc == 2 and f"model {tiny_model_copy}/config.json (id2label): its head's labels ['a', 'b', 'c']..." in err
