"""Probe round three, the Hugging Face import (issue 59): each test failed on the code before the fix.

1/12. A head whose id2label holds the task's label names (in its order or another) was dropped and a new one
      fine-tuned; 3. LABEL_i placeholders with two rows swapped were kept at the guessed order; 5. config.json sizes
      were used before they were checked against the weights; 7. inspect() tracebacks (non-UTF-8 vocab.txt,
      malformed ``architectures``); 8. unvalidated fields and tensors crashed the stage (exit 1) or went through
      (NaN); 13. symbolic links out of the folder were followed.
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (paddle after numpy)
from pipeline import hf_import
from pipeline.errors import ModelError
from test_hf_heads import GOLDEN, IDS, NAMES, _own_rows, _run, _task, variant

MB = 1 << 20


def _edit_config(src: Path, **changes) -> Path:
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (src / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return src


def _edit_weights(src: Path, edit) -> Path:
    from safetensors.numpy import load_file, save_file

    state = load_file(str(src / "model.safetensors"))
    edit(state)
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(src / "model.safetensors"),
              metadata={"format": "pt"})
    return src


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


# --- 1 / 12: a trained head is mapped by names, never dropped ---------------------------------------------------------

def test_1_names_in_the_tasks_order_keep_the_head(tmp_path, capsys):
    """The TNEWS report: id2label holds the task's label_names, its labels are ids: kept, no fine-tuning."""
    assert _run(tmp_path, _task(tmp_path, _own_rows()), GOLDEN / "bert-sequence", until="finetune") == 0
    out = capsys.readouterr()
    assert "fine-tuning a new one" not in out.out + out.err
    assert "its head's labels are the task's names in the task's order: kept" in out.out
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 0 and record["metrics"]["converted"] == 1


def test_12_names_in_another_order_keep_the_head_reordered(tmp_path, capsys):
    src = variant(tmp_path, "bert-sequence", [NAMES[2], NAMES[0], NAMES[1]], [2, 0, 1])
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src, until="finetune") == 0
    out = capsys.readouterr().out
    assert "in another order: its rows reordered to the task's" in out and "fine-tuning" not in out
    record = json.loads((tmp_path / "runs" / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 0


# --- 3: an assumed order is said and checked on dev ---------------------------------------------------------------

def test_3_placeholder_labels_with_two_rows_swapped_are_refused(tmp_path, capsys):
    src = variant(tmp_path, "bert-sequence", ["LABEL_0", "LABEL_1", "LABEL_2"], [2, 1, 0])
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src) == 2
    err = _errors(capsys)
    assert len(err) == 1 and "its LABEL_i head is not in the task's order" in err[0]
    assert "100 (体育) is output 2; 102 (科技) is output 0" in err[0]


# --- 5: config sizes checked against the weights before anything is allocated --------------------------------------

def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_5_a_huge_layer_count_is_refused_before_it_sizes_anything(tmp_path):
    src = _edit_config(variant(tmp_path, "bert-sequence"), num_hidden_layers=1_000_000)

    def convert():
        with pytest.raises(ModelError, match=r"config.json: num_hidden_layers 1000000 but the weights have no "
                                             r"ernie.encoder.layers.2.\* \(2 layers held\)"):
            hf_import.convert(src, tmp_path / "out")

    assert _peak_bytes(convert) < 64 * MB


@pytest.mark.parametrize("name", ["bert-encoder-cased", "bert-token"])
def test_5_a_huge_hidden_size_without_a_pooler_is_refused_before_the_pooler_is_drawn(tmp_path, name):
    src = variant(tmp_path, name)
    _edit_weights(src, lambda s: [s.pop(k) for k in [k for k in s if "pooler" in k]])
    _edit_config(src, hidden_size=200_000)

    def convert():
        with pytest.raises(ModelError, match=r"config.json: hidden_size 200000 but the weights' word_embeddings are "
                                             r"32 wide"):
            hf_import.convert(src, tmp_path / "out")

    assert _peak_bytes(convert) < 64 * MB


# --- 7: inspect() is one line, never a traceback ------------------------------------------------------------------

def test_7_a_vocabulary_that_is_not_utf8_is_one_line(tmp_path):
    src = variant(tmp_path, "bert-sequence")
    (src / "vocab.txt").write_bytes((GOLDEN / "bert-sequence" / "vocab.txt").read_bytes() + b"\xff\xfe\n")
    lines = (GOLDEN / "bert-sequence" / "vocab.txt").read_text(encoding="utf-8").count("\n") + 1
    with pytest.raises(ModelError, match=rf"vocab.txt:{lines}: not UTF-8 text \(byte 0xff\)"):
        hf_import.inspect(src)


def test_7_a_huge_vocabulary_is_refused_unread(tmp_path):
    src = variant(tmp_path, "bert-sequence")
    with open(src / "vocab.txt", "r+b") as fh:
        fh.truncate(65 * MB)  # sparse: costs nothing here
    with pytest.raises(ModelError, match=r"vocab.txt: 68157440 bytes, over the 64 MiB limit for this file"):
        hf_import.inspect(src)


@pytest.mark.parametrize("value,shown", [([["BertModel"]], r'\[\["BertModel"\]\]'), ("BertModel", "'BertModel'"),
                                         ([3], r"\[3\]")])
def test_7_a_malformed_architectures_field_is_named(tmp_path, value, shown):
    src = _edit_config(variant(tmp_path, "bert-sequence"), architectures=value)
    with pytest.raises(ModelError, match=rf"config.json: field 'architectures' must be a list of class names "
                                         rf"\(e.g. \[\"BertModel\"\]\), got {shown}$"):
        hf_import.inspect(src)


# --- 8: fields and tensors validated, named, exit 2 -----------------------------------------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("layer_norm_eps", "abc", r"field 'layer_norm_eps' must be a number in \(0, 1\], got 'abc'"),
    ("layer_norm_eps", 0, r"field 'layer_norm_eps' must be a number in \(0, 1\], got 0"),
    ("initializer_range", "abc", r"field 'initializer_range' must be a number in \[0, 10\], got 'abc'"),
    ("initializer_range", -1, r"field 'initializer_range' must be a number in \[0, 10\], got -1"),
    ("hidden_dropout_prob", 1.5, r"field 'hidden_dropout_prob' must be a number in \[0, 1\), got 1.5"),
    ("task_type_vocab_size", "abc", r"field 'task_type_vocab_size' must be a positive integer, got 'abc'"),
    ("type_vocab_size", 2.5, r"field 'type_vocab_size' must be a positive integer, got 2.5"),
    ("use_task_id", "yes", r"field 'use_task_id' must be true or false, got 'yes'"),
])
def test_8_a_bad_config_field_is_named(tmp_path, field, value, message):
    src = _edit_config(variant(tmp_path, "ernie-sequence"), **{field: value})
    with pytest.raises(ModelError, match=r"config.json: " + message):
        hf_import.inspect(src)


def test_8_a_bad_field_through_the_pipeline_is_exit_2_naming_it(tmp_path, capsys):
    src = _edit_config(variant(tmp_path, "bert-sequence"), layer_norm_eps="abc")
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src, until="finetune") == 2
    err = _errors(capsys)
    assert len(err) == 1 and "field 'layer_norm_eps' must be a number" in err[0] and "crashed" not in err[0]


def test_8_a_one_dimensional_classifier_weight_is_exit_2_naming_it(tmp_path, capsys):
    src = _edit_weights(variant(tmp_path, "bert-sequence"),
                        lambda s: s.update({"classifier.weight": s["classifier.weight"].reshape(-1)}))
    with pytest.raises(ModelError, match=r"model.safetensors: tensor 'classifier.weight' has shape \[96\], expected "
                                         r"\[outputs, hidden_size\]"):
        hf_import.convert(src, tmp_path / "out")
    assert _run(tmp_path, _task(tmp_path, _own_rows()), src, until="finetune") == 2
    err = _errors(capsys)
    assert len(err) == 1 and "tensor 'classifier.weight' has shape [96]" in err[0]


@pytest.mark.parametrize("tensor", ["bert.encoder.layer.1.output.dense.weight", "classifier.bias"])
def test_8_nan_weights_are_refused_naming_the_tensor(tmp_path, tensor):
    def poison(state):
        state[tensor] = state[tensor].copy()
        state[tensor].flat[0] = np.nan

    src = _edit_weights(variant(tmp_path, "bert-sequence"), poison)
    with pytest.raises(ModelError, match=rf"model.safetensors: tensor '{tensor}' holds 1 NaN or infinite value\(s\)"):
        hf_import.convert(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- 13: links out of the folder -------------------------------------------------------------------------------------

def test_13_a_link_out_of_the_folder_is_refused(tmp_path):
    src = variant(tmp_path, "bert-sequence")
    outside = tmp_path / "elsewhere.txt"
    shutil.move(src / "vocab.txt", outside)
    (src / "vocab.txt").symlink_to(outside)
    with pytest.raises(ModelError, match=rf"^{src / 'vocab.txt'}: a symbolic link to {outside}, outside the model "
                                         "directory: not read; copy the file into the directory instead$"):
        hf_import.inspect(src)
    (src / "vocab.txt").unlink()
    (src / "vocab.txt").symlink_to(os.path.relpath(outside, src))  # a relative link out is the same
    with pytest.raises(ModelError, match="outside the model directory"):
        hf_import.inspect(src)


def test_13_a_linked_folder_out_is_refused_too(tmp_path):
    src = variant(tmp_path, "bert-sequence")
    (tmp_path / "other").mkdir()
    (src / "extra").symlink_to(tmp_path / "other", target_is_directory=True)
    with pytest.raises(ModelError, match=r"extra: a symbolic link to .*other, outside the model directory"):
        hf_import.inspect(src)


def test_13_links_inside_the_folder_and_a_hub_snapshot_are_taken(tmp_path):
    src = variant(tmp_path, "bert-sequence")
    (src / "files").mkdir()
    shutil.move(src / "vocab.txt", src / "files" / "vocab.txt")
    (src / "vocab.txt").symlink_to(Path("files") / "vocab.txt")
    assert hf_import.inspect(src).vocab[0] == "[PAD]"
    # transformers' cache: snapshots/<rev>/<file> -> ../../blobs/<hash>
    repo = tmp_path / "models--x--y"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted((GOLDEN / "bert-sequence").iterdir())):
        shutil.copyfile(f, blobs / f"blob{i}")
        (snapshot / f.name).symlink_to(Path("..") / ".." / "blobs" / f"blob{i}")
    out = hf_import.convert(snapshot, tmp_path / "out")
    assert (out / "model_state.pdparams").is_file()
