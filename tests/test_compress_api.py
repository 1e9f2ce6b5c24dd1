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


def test_a_shallower_architecture_is_planned_screened_distilled_and_shipped_as_fewer_layers(tiny_deep_model, data, tmp_path):
    """compress.depth_mult_list on the ONNX route: the 4-layer model at depth 1/2 is a candidate of its own ("d0.5"),
    distilled and converted (the API runs no INT8 search: FP32 forms only); its ONNX has half the encoder layers, and
    the table and selected.json say its depth."""
    import onnx

    train, dev = data
    args, _ = parse_args(["--strategy", "dynabert+ptq", "--candidate_format", "onnx", "--engines", "onnxruntime",
                          "--width_mult_list", "1", "--depth_mult_list", "1/2", "--quantize_unpruned", "false",
                          "--max_steps", "3", "--throughput_batches", "1", "--timing_rounds", "2", "--max_accuracy_drop", "100",
                          "--max_seq_length", "32", "--output_dir", str(tmp_path / "out")])
    logs = []
    result = compress(model=tiny_deep_model, tokenizer=tiny_deep_model, train_dataset=train, eval_dataset=dev, args=args,
                      log=logs.append)
    by_name = {c.name: c for c in result.candidates}
    assert set(by_name) == {"fp32", "d0.5"}
    assert by_name["d0.5"].depth_mult == 0.5 and by_name["d0.5"].width_mult == 1.0 and by_name["fp32"].depth_mult == 1.0

    def layers(path):  # encoder layers = the FFN's first MatMul + bias, one per layer (pooler/classifier are Gemm/MatMul)
        return sum(1 for n in onnx.load(str(path)).graph.node if n.op_type == "Erf" or "gelu" in n.name.lower())

    assert layers(by_name["fp32"].model_path) == 4 and layers(by_name["d0.5"].model_path) == 2
    assert any("dynabert d0.5: 4 -> 4 heads, intermediate 64 -> 64, 4 -> 2 layers (keeping 0, 2)" in m for m in logs)
    table = json.loads((tmp_path / "out" / "candidates.json").read_text())
    assert {r["name"]: r["depth_mult"] for r in table["candidates"]} == {"fp32": 1.0, "d0.5": 0.5}
    selected = json.loads((tmp_path / "out" / "selected.json").read_text())
    assert selected["depth_mult"] == (0.5 if selected["name"].startswith("d0.5") else 1.0)
    assert "| depth |" in (tmp_path / "out" / "candidates.md").read_text()


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
