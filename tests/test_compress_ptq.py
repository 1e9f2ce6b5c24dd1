"""PTQ on the tiny model: every algo, the settings grid, calibration checks, and pins of the upstream
failures ``pipeline.backends.paddle.quantize.ptq`` works around."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from pipeline.backends.forms import MODEL_FILE
from pipeline.backends.paddle.convert import export_static
from pipeline.backends.paddle.quantize.ptq import PTQSettings, calibration_loader, check_calibration, ptq_grid, quantize_static
from pipeline.backends.paddle.session import session
from pipeline.compress.arguments import CompressConfig
from pipeline.errors import DataError

from conftest import features

FAST_ALGOS = ["mse", "avg", "hist", "abs_max", "min_max", "emd"]


@pytest.fixture(scope="module")
def tiny(tiny_finetuned, tmp_path_factory):
    from pipeline.config import load_task_config
    from pipeline.kinds import load_task_data
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("ptq")
    data = load_task_data(load_task_config(str(tiny_finetuned["task_yaml"]), {"max_seq_len": 32}))
    tok = Tokenizer.from_model_dir(tiny_finetuned["model_dir"], 32)
    static = export_static(load_classifier(tiny_finetuned["model_dir"], 3), root / "fp32")
    train, dev = features(tok, list(data.train.examples)), features(tok, list(data.dev.examples))
    return {"root": root, "tok": tok, "train": train, "dev": dev, "static": static}


def _accuracy(tiny, model_dir, precision):
    from pipeline.evaluation import evaluate_session

    return evaluate_session(session(model_dir, precision=precision), tiny["dev"], 32).accuracy


def _op_types(model_dir):
    from paddle.base.proto import framework_pb2

    desc = framework_pb2.ProgramDesc()
    desc.ParseFromString((model_dir / MODEL_FILE).read_bytes())
    return {op.type for op in desc.blocks[0].ops}


def _run(tiny, settings, tmp_path, **kw):
    return quantize_static(tiny["static"], tmp_path / settings.name, tiny["train"].subset(range(16)), settings, log=lambda s: None, **kw)


@pytest.mark.parametrize("algo", FAST_ALGOS)
def test_every_algo_quantizes_and_runs_int8(tiny, tmp_path, algo):
    out = _run(tiny, PTQSettings(algo, batch_size=4, batch_num=2), tmp_path)
    ops = _op_types(out)
    assert any(t.startswith("fake_") for t in ops), ops  # scales are in the program
    assert _accuracy(tiny, out, "int8") >= 0.9  # baseline is ~1.0; int8 kernels on fc only keep it


def test_kl_algo(tiny, tmp_path):
    out = _run(tiny, PTQSettings("KL", batch_size=4, batch_num=1), tmp_path)
    assert _accuracy(tiny, out, "int8") >= 0.9


def test_per_tensor_weights_adaround_and_bias_correction(tiny, tmp_path):
    s = PTQSettings("mse", 4, 1, weight_quantize_type="abs_max", round_type="adaround", bias_correction=True)
    assert s.name == "ptq-mse-bs4-bn1-adaround-bc"
    out = _run(tiny, s, tmp_path)
    assert "fake_channel_wise_dequantize_max_abs" not in _op_types(out)
    assert _accuracy(tiny, out, "int8") >= 0.9


def test_int32_inputs(tiny, tmp_path):
    loader = calibration_loader(tiny["train"].subset(range(6)), 4, "int32")
    batches = list(loader())
    assert [b["input_ids"].shape[0] for b in batches] == [4, 2]
    assert np.array(batches[0]["input_ids"]).dtype == np.int32


def test_grid_is_the_product_of_the_lists():
    cfg = CompressConfig(strategy="ptq", algo_list=["mse", "avg"], batch_size_list=[2, 4], batch_num_list=[1, 3], round_type="adaround")
    grid = ptq_grid(cfg)
    assert len(grid) == 8 and len({g.name for g in grid}) == 8
    assert all(g.round_type == "adaround" and g.activation_quantize_type == "range_abs_max" for g in grid)


def test_calibration_checks():
    grid = [PTQSettings("mse", 4, 3)]
    with pytest.raises(DataError, match="calibration set is empty"):
        check_calibration(0, grid)
    with pytest.raises(DataError, match=r"batch_size 4 x batch_num 3 = 12 .* only 10"):
        check_calibration(10, grid)
    check_calibration(12, grid)


@contextlib.contextmanager
def _stock_ptq(tiny, algo: str):
    """Paddle's own PostTrainingQuantization of the tiny static model (2 calibration rows), in static mode."""
    import paddle
    from paddle.static.quantization import PostTrainingQuantization

    paddle.enable_static()
    try:
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            yield PostTrainingQuantization(
                executor=paddle.static.Executor(paddle.CPUPlace()), scope=scope, model_dir=str(tiny["static"]),
                model_filename="model.pdmodel", params_filename="model.pdiparams",
                data_loader=calibration_loader(tiny["train"].subset(range(4)), 2), batch_size=2, batch_nums=1, algo=algo,
                quantizable_op_type=["matmul_v2"])
    finally:
        paddle.disable_static()


def test_upstream_avg_crashes_on_ernie_0d_activations(tiny):
    """Pin: stock PostTrainingQuantization(algo="avg") raises IndexError on ERNIE's 0-d activations.

    ``pipeline.backends.paddle.quantize.ptq._PostTrainingQuantization`` fixes it; when this test fails, upstream fixed it.
    """
    with _stock_ptq(tiny, "avg") as ptq, pytest.raises(IndexError):
        ptq.quantize()


def test_upstream_min_max_inserts_no_quantization(tiny, tmp_path):
    """Pin: stock min_max only annotates ops (Paddle Lite format); Paddle Inference would run it in FP32.

    Our subclass turns its ranges into fake-quant ops (test_every_algo_quantizes_and_runs_int8[min_max]).
    """
    with _stock_ptq(tiny, "min_max") as ptq:
        ptq.quantize()
        ptq.save_quantized_model(str(tmp_path / "mm"), model_filename="model.pdmodel", params_filename="model.pdiparams")
    assert not any(t.startswith("fake_") for t in _op_types(tmp_path / "mm"))


def test_upstream_batch_generator_is_refused(tiny):
    """Pin: PaddleNLP's Trainer.compress() passes batch_generator; Paddle 2.6 requires a DataLoader."""
    import paddle
    from paddle.static.quantization import PostTrainingQuantization

    def gen():
        yield {"input_ids": np.ones((1, 4), np.int64), "token_type_ids": np.zeros((1, 4), np.int64)}

    paddle.enable_static()
    try:
        with pytest.raises(AssertionError, match="data_loader"):
            PostTrainingQuantization(executor=paddle.static.Executor(paddle.CPUPlace()), model_dir=str(tiny["static"]),
                                     model_filename="model.pdmodel", params_filename="model.pdiparams",
                                     batch_generator=gen, batch_size=1, batch_nums=1, algo="mse")
    finally:
        paddle.disable_static()


def test_skip_layers_keeps_ffn2_in_fp32(tiny, tmp_path):
    """PTQ with skip_layers=("ffn2",): the FFN output projection stays float, the other fc are quantized."""
    import paddle

    from pipeline.backends.paddle.quantize.ptq import weights_of_roles

    def matmul_inputs(model_dir):
        paddle.enable_static()
        try:
            with paddle.static.scope_guard(paddle.static.Scope()):
                program, _, _ = paddle.static.load_inference_model(str(model_dir / "model"), paddle.static.Executor(paddle.CPUPlace()))
        finally:
            paddle.disable_static()
        ops = [op for op in program.global_block().ops if op.type in ("matmul_v2", "mul", "fc")]
        return program, [(op.input_arg_names, op.all_attrs()) for op in ops]

    program, _ = matmul_inputs(tiny["static"])
    ffn2, head = weights_of_roles(program, ["ffn2"]), weights_of_roles(program, ["head"])
    assert len(ffn2) == 1 and len(head) == 1 and head[0] not in ffn2  # 1 layer: one FFN output projection

    settings = PTQSettings("mse", 4, 2, skip_layers=("ffn2",))
    assert settings.name == "ptq-mse-bs4-bn2-fp32ffn2"
    out = _run(tiny, settings, tmp_path)
    _, ops = matmul_inputs(out)
    quantized = {tuple(names) for names, attrs in ops if any("quant" in n for n in names) or "Input_scale" in str(attrs)}
    plain = [names for names, _ in ops if ffn2[0] in names]
    assert plain and not any("quant" in n for n in plain[0]), plain  # the FFN output projection reads float weights
    assert quantized, ops  # ... while the others were quantized
    assert _accuracy(tiny, out, "int8") > 0.8
