"""The upstream-shaped Python API: parse flags, call compress() with model/tokenizer/datasets and hooks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.compress.api import compress, parse_args
from pipeline.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def data(tiny_finetuned):
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data

    d = load_task_data(load_task_config(str(tiny_finetuned["task_yaml"]), {"max_seq_len": 32}))
    return list(d.train.examples), list(d.dev.examples)


def test_compress_with_a_model_object_and_custom_evaluate(tiny_finetuned, data, tmp_path):
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    train, dev = data
    tok = Tokenizer.from_model_dir(tiny_finetuned["model_dir"], 32)
    args, _ = parse_args(["--strategy", "ptq", "--algo_list", "mse", "--batch_size_list", "4", "--throughput_batches", "1",
                          "--max_seq_length", "32", "--output_dir", str(tmp_path / "out")])
    calls = []

    def collate(rows):
        enc = tok.encode([r.text_a for r in rows])
        return enc.input_ids, enc.token_type_ids, np.array([r.label for r in rows])

    def custom_evaluate(model, dataloader):  # model: the candidate's Paddle Inference session
        calls.append(model.name)
        right = total = 0
        for ids, types, labels in dataloader:
            pred = model.run(np.asarray(ids), np.asarray(types)).argmax(-1)
            right += int((pred == np.asarray(labels)).sum())
            total += len(pred)
        return right / total

    result = compress(model=load_classifier(tiny_finetuned["model_dir"], 3), tokenizer=tok, train_dataset=train,
                      eval_dataset=dev, args=args, data_collator=collate, custom_evaluate=custom_evaluate,
                      labels=["100", "101", "102"], log=lambda s: None)
    assert calls == ["paddle-cpu-fp32", "paddle-cpu-int8"]
    assert [c.name for c in result.candidates] == ["fp32", "ptq-mse-bs4-bn1"]
    assert result.selection.selected is not None
    assert json.loads((tmp_path / "out" / "selected.json").read_text())["name"] == result.selection.selected.name
    assert (tmp_path / "out" / "candidates.md").is_file() and (tmp_path / "out" / "fp32_model" / "vocab.txt").is_file()


def test_api_bad_input(tiny_finetuned, data, tmp_path):
    train, dev = data
    args, _ = parse_args(["--strategy", "qat", "--output_dir", str(tmp_path)])
    kw = dict(model=tiny_finetuned["model_dir"], tokenizer=tiny_finetuned["model_dir"], eval_dataset=dev, args=args)
    with pytest.raises(ConfigError, match="custom_calc_loss"):
        compress(train_dataset=train, custom_calc_loss=lambda *a: 0, **kw)
    with pytest.raises(DataError, match="train_dataset is empty"):
        compress(train_dataset=[], **kw)
    args, _ = parse_args(["--strategy", "ptq", "--batch_size_list", "400", "--batch_num_list", "2"])
    with pytest.raises(DataError, match="only 480"):
        compress(train_dataset=train, **{**kw, "args": args})
    assert not any(tmp_path.iterdir())  # nothing was written
