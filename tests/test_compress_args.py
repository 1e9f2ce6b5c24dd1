"""CompressConfig validation and the API's argument parsing: every bad value fails at load time, naming the key."""

from __future__ import annotations

import pytest

from pipeline.compress.api import CompressionArguments, parse_args
from pipeline.compress.arguments import CompressConfig, parse_width
from pipeline.config import load_task_config
from pipeline.errors import ConfigError

UPSTREAM_STRATEGIES = ["dynabert+qat+embeddings", "dynabert+qat", "dynabert+embeddings", "dynabert+ptq", "dynabert", "ptq", "qat"]


@pytest.mark.parametrize("strategy", UPSTREAM_STRATEGIES + ["embeddings", "ptq+embeddings", "qat+embeddings"])
def test_upstream_strategies_are_accepted(strategy):
    assert CompressConfig(strategy=strategy, candidate_format="paddle").parts() == tuple(strategy.split("+"))


@pytest.mark.parametrize("strategy, ok", [("dynabert+ptq", True), ("ptq", True), ("dynabert", True),
                                          ("dynabert+qat", False), ("ptq+embeddings", False)])
def test_onnxruntime_takes_pruning_and_its_own_ptq(strategy, ok):
    """The default runtime judges candidates in ONNX Runtime: QAT and Paddle int8 embeddings are Paddle programs."""
    assert CompressConfig().candidate_format == "onnx" and CompressionArguments().candidate_format == "paddle"
    if ok:
        CompressConfig(strategy=strategy)
    else:
        with pytest.raises(ConfigError, match="needs compress.candidate_format: paddle"):
            CompressConfig(strategy=strategy)


@pytest.mark.parametrize(
    "strategy, words",
    [
        ("dynabert+foo", "unknown part 'foo'"),
        ("prune", "unknown part 'prune'"),
        ("", "unknown part"),
        ("ptq+dynabert", "must come first"),
        ("ptq+qat", "not both"),
        ("ptq+ptq", "repeated"),
    ],
)
def test_bad_strategies(strategy, words):
    with pytest.raises(ConfigError, match="compress.strategy") as exc:
        CompressConfig(strategy=strategy)
    assert words in str(exc.value)


@pytest.mark.parametrize("value, width", [("3/4", 0.75), ("2/3", 2 / 3), ("0.5", 0.5), (0.25, 0.25), ("1", 1.0)])
def test_widths(value, width):
    assert parse_width(value) == pytest.approx(width)


@pytest.mark.parametrize("value", ["0", "0/4", "5/4", "1.5", -0.5, "abc", "1/0"])
def test_bad_widths(value):
    with pytest.raises(ConfigError, match="width_mult_list"):
        CompressConfig(width_mult_list=[value])


def test_bad_algo_and_choices():
    with pytest.raises(ConfigError, match="compress.algo_list: unknown algo 'kl'"):
        CompressConfig(algo_list=["mse", "kl"])
    with pytest.raises(ConfigError, match="weight_quantize_type"):
        CompressConfig(weight_quantize_type="per_channel")
    with pytest.raises(ConfigError, match="round_type"):
        CompressConfig(round_type="floor")
    with pytest.raises(ConfigError, match="input_dtype"):
        CompressConfig(input_dtype="int16")
    with pytest.raises(ConfigError, match="batch_num_list"):
        CompressConfig(batch_num_list=[0])
    with pytest.raises(ConfigError, match="activation_quantize_type"):
        CompressConfig(strategy="qat", activation_quantize_type="range_abs_max", candidate_format="paddle")
    with pytest.raises(ConfigError, match="input_infer_model_path"):
        CompressConfig(strategy="dynabert+ptq", input_infer_model_path="/some/dir")


def test_overrides_through_the_task_config(tmp_path):
    from conftest import write_tiny_task_yaml

    task = write_tiny_task_yaml(tmp_path / "t.yaml", tmp_path / "data")
    cfg = load_task_config(str(task), {"compress.width_mult_list": ["2/3", 0.5], "compress.algo_list": ["avg", "hist"],
                                       "compress.strategy": "dynabert+ptq+embeddings", "compress.candidate_format": "paddle"})
    assert cfg.compress.widths() == pytest.approx([2 / 3, 0.5])
    assert cfg.compress.parts() == ("dynabert", "ptq", "embeddings")
    with pytest.raises(ConfigError, match="compress.algo_list"):
        load_task_config(str(task), {"compress.algo_list": ["nope"]})


def test_api_flags_mirror_upstream_names():
    args, rest = parse_args(["--strategy", "dynabert+ptq", "--width_mult_list", "3/4", "2/3", "--algo_list", "mse", "avg",
                             "--batch_size_list", "4", "8", "--batch_num_list", "1", "--weight_quantize_type", "abs_max",
                             "--round_type", "adaround", "--bias_correction", "true", "--use_pact", "false",
                             "--learning_rate", "1e-4", "--num_train_epochs", "2", "--max_steps", "5",
                             "--per_device_train_batch_size", "8", "--input_dtype", "int32", "--model_name_or_path", "x"])
    assert isinstance(args, CompressionArguments)
    assert args.widths() == pytest.approx([0.75, 2 / 3]) and args.algo_list == ["mse", "avg"]
    assert args.batch_size_list == [4, 8] and args.bias_correction is True and args.use_pact is False
    assert args.round_type == "adaround" and args.learning_rate == 1e-4 and args.input_dtype == "int32"
    assert rest == ["--model_name_or_path", "x"]
    with pytest.raises(ConfigError, match="unknown algo"):
        parse_args(["--algo_list", "bogus"])
