"""PaddleSlim auto-compression (ACT) YAML -> task-config overrides (pipeline.act_config), the CLI's --act-config,
and finetune-check's gates.origin_metric.  No training: translation, config loading and the gate function only."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.act_config import translate
from pipeline.config import TASKS_DIR, GateConfig, load_task_config
from pipeline.errors import ConfigError

EXAMPLES = TASKS_DIR / "act"


def act(tmp_path: Path, text: str, name: str = "act.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def refused(path: Path, task: str | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        translate(path, task=task)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path.name}: "), message
    return message


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A PaddleNLP model directory as save_pretrained writes it (the files only), plus ACT's static model files."""
    d = tmp_path / "models" / "uie-base"
    d.mkdir(parents=True)
    for name in ("model_state.pdparams", "model_config.json", "vocab.txt", "inference.pdmodel", "inference.pdiparams"):
        (d / name).write_text("x", encoding="utf-8")
    return d


# ------------------------------------------------------------------------------------------------ mappings

MAPPINGS = [
    ("QuantAware: {use_pact: false, weight_bits: 8, activation_bits: 8, quantize_op_types: [matmul, matmul_v2]}",
     {"compress.strategy": "ptq"}),
    ("Quantization:\n  activation_quantize_type: range_abs_max\n  weight_quantize_type: channel_wise_abs_max\n"
     "  not_quant_pattern: [skip_quant]\n  onnx_format: true\n  is_full_quantize: false\n  dtype: int8",
     {"compress.strategy": "ptq"}),
    ("QuantPost: {batch_size: 8, batch_nums: 4, bias_correction: false}",
     {"compress.strategy": "ptq", "quantization.calibration_batch_size": 8, "quantization.calibration_sentences": 32}),
    ("HyperParameterOptimization:\nQuantization:\nDistillation:", {"compress.strategy": "ptq"}),  # empty sections
    ("Prune: {prune_algo: transformer_pruner, pruned_ratio: 0.25}",
     {"compress.strategy": "dynabert", "compress.width_mult_list": [0.75]}),
    ("TransformerPrune: {pruned_ratio: [0.25, 0.5]}\nQuantAware:",
     {"compress.strategy": "dynabert+ptq", "compress.width_mult_list": [0.75, 0.5]}),
    ("Global: {batch_size: 16, max_seq_length: 96, dataset: clue}",
     {"compress.per_device_train_batch_size": 16, "compress.eval_batch_size": 16, "max_seq_len": 96}),
    ("TransformerPrune: {pruned_ratio: 0.25}\nDistillation: {alpha: 1.0, loss: l2}\n"
     "TrainConfig:\n  epochs: 2\n  train_iter: 300\n  learning_rate: 1e-5\n"  # 1e-5: a string to YAML 1.1
     "  optimizer_builder: {optimizer: {type: AdamW}, weight_decay: 0.0}",
     {"compress.strategy": "dynabert", "compress.width_mult_list": [0.75], "compress.num_train_epochs": 2,
      "compress.max_steps": 300, "compress.learning_rate": 1e-5}),
    ("TrainConfig: {optimizer: AdamW, optim_args: {weight_decay: 0}, origin_metric: 0.7473, target_metric: 0.7423}",
     {"gates.origin_metric": 0.7473, "gates.max_accuracy_drop": 0.5}),
]


@pytest.mark.parametrize("text, expected", MAPPINGS)
def test_each_act_key_maps_onto_a_real_key(tmp_path, text, expected):
    got = translate(act(tmp_path, text))
    assert got == expected
    load_task_config("tnews", got)  # every override names a real key with a valid value


def test_the_examples_translate_and_load(tmp_path):
    uie = translate(EXAMPLES / "uie.yaml")
    assert uie["compress.strategy"] == "dynabert+ptq" and uie["compress.width_mult_list"] == [0.75]
    assert uie["compress.max_steps"] == 300 and "model.name_or_path" not in uie  # the task's own model
    overrides = translate(EXAMPLES / "tnews-prune-quant.yaml", task="tnews")
    cfg = load_task_config("tnews", overrides)
    assert cfg.compress.strategy == "dynabert+ptq" and cfg.compress.widths() == [0.666667]
    assert cfg.compress.max_steps == 200 and cfg.compress.learning_rate == 1e-4 and cfg.max_seq_len == 64
    assert cfg.gates.origin_metric == 0.5253 and cfg.gates.max_accuracy_drop == 0.5
    load_task_config("tnews", uie)


def test_model_dirs_resolve_against_the_yaml_and_file_names_must_exist(tmp_path, model_dir):
    path = act(tmp_path, """\
        Global: {model_dir: ./models/uie-base, model_filename: inference.pdmodel, params_filename: inference.pdiparams}
        Distillation:
          teacher_model_dir: models/uie-base
          teacher_model_filename: inference.pdmodel
        QuantAware:
        """)
    assert translate(path) == {"compress.strategy": "ptq", "model.name_or_path": str(model_dir.resolve())}


def test_uie_data_files_become_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.txt", "dev.txt"):
        (data / name).write_text("{}\n", encoding="utf-8")
    got = translate(act(tmp_path, "Global: {train_data: ./data/train.txt, dev_data: data/dev.txt}"))
    assert got == {"data.dir": str(data.resolve()), "data.train_file": "train.txt", "data.dev_file": "dev.txt"}


def test_task_name_is_checked_against_the_task_name_or_yaml(tmp_path):
    path = act(tmp_path, "Global: {task_name: tnews}")
    assert translate(path, task="tnews") == {} and translate(path, task=str(TASKS_DIR / "tnews.yaml")) == {}
    assert "Global.task_name: 'tnews' but the task is 'afqmc'" in refused(path, task="afqmc")


# ------------------------------------------------------------------------------------------------ refusals

REFUSALS = [
    ("UnstructurePrune: {prune_strategy: gmp, prune_mode: ratio, ratio: 0.55}",
     "UnstructurePrune: unstructured pruning is not supported here (use Prune with prune_algo: transformer_pruner"),
    ("ASPPrune:", "ASPPrune: 2:4 sparsity"),
    ("ChannelPrune: {pruned_ratio: 0.25}", "ChannelPrune: channel pruning is for convolutions"),
    ("MultiTeacherDistillation:", "MultiTeacherDistillation: one teacher only"),
    ("Quantize: {}", "Quantize: unknown section"),
    ("QuantAware: {weight_bits: 4}", "QuantAware.weight_bits: 4 is not supported: only 8-bit"),
    ("Quantization: {activation_bits: 16}", "Quantization.activation_bits: 16 is not supported"),
    ("QuantAware: {quantize_op_types: [conv2d, matmul]}", "QuantAware.quantize_op_types: must include matmul_v2"),
    ("QuantAware: {quantize_op_types: matmul_v2}", "QuantAware.quantize_op_types: must include matmul_v2"),
    ("QuantAware: {quantize_op_types: [matmul_v2, elementwise_add]}",
     "QuantAware.quantize_op_types: 'elementwise_add' is not supported"),
    ("QuantAware: {use_pact: true}", "QuantAware.use_pact: True is not supported: PACT"),
    ("QuantAware: {activation_quantize_type: abs_max}", "QuantAware.activation_quantize_type: 'abs_max'"),
    ("QuantAware: {weight_quantize_type: abs_max}", "QuantAware.weight_quantize_type: 'abs_max'"),
    ("QuantAware: {is_full_quantize: true}", "QuantAware.is_full_quantize"),
    ("QuantAware: {onnx_format: false}", "QuantAware.onnx_format"),
    ("QuantAware: {not_quant_pattern: [encoder]}", "QuantAware.not_quant_pattern"),
    ("QuantAware: {moving_rate: 0.9}", "QuantAware.moving_rate: only quant-aware training uses it"),
    ("QuantAware: {onnx_fromat: true}", "QuantAware.onnx_fromat: unknown key"),
    ("QuantPost: {algo: hist}", "QuantPost.algo: the INT8 search here"),
    ("QuantPost: {bias_correction: true}", "QuantPost.bias_correction"),
    ("QuantAware:\nQuantization:", "Quantization: give one of QuantAware, Quantization, QuantPost"),
    ("HyperParameterOptimization: {ptq_algo: [KL, hist]}", "HyperParameterOptimization.ptq_algo: the INT8 search"),
    ("Prune: {prune_algo: prune, pruned_ratio: 0.25}", "Prune.prune_algo: channel pruning is for convolutions"),
    ("Prune: {pruned_ratio: 0.25}", "Prune.prune_algo: it is required; use transformer_pruner"),
    ("Prune: {prune_algo: transformer_pruner, criterion: l1_norm}", "Prune.criterion"),
    ("TransformerPrune: {pruned_ratio: 1.5}", "TransformerPrune.pruned_ratio: expected a fraction in (0, 1)"),
    ("Prune: {prune_algo: transformer_pruner}\nTransformerPrune:", "TransformerPrune: give one of Prune, TransformerPrune"),
    ("Distillation: {alpha: 0.5}", "Distillation.alpha: 0.5 is not supported"),
    ("Distillation: {loss: soft_label}", "Distillation.loss: 'soft_label' is not supported"),
    ("Distillation: {node: [a, b]}", "Distillation.node: DynaBERT's distillation"),
    ("Distillation: {alpha: 1.0}\nQuantAware:", "Distillation.alpha: nothing is trained here without pruning"),
    ("TrainConfig: {epochs: 3}\nQuantAware:", "TrainConfig.epochs: nothing is trained here without pruning"),
    ("TrainConfig: {learning_rate: 1.0e-5}", "TrainConfig.learning_rate: nothing is trained"),
    ("TrainConfig: {epochs: ten}", "TrainConfig.epochs: expected an integer, got 'ten'"),
    ("TrainConfig: {learning_rate: {type: PiecewiseDecay}}", "TrainConfig.learning_rate: a schedule is not supported"),
    ("TrainConfig: {optimizer_builder: {optimizer: {type: SGD}}}",
     "TrainConfig.optimizer_builder.optimizer.type: 'SGD' is not supported: training here uses AdamW"),
    ("TrainConfig: {optimizer: Momentum}", "TrainConfig.optimizer: 'Momentum' is not supported"),
    ("TrainConfig: {optimizer_builder: {optimizer: {type: AdamW, beta1: 0.8}}}",
     "TrainConfig.optimizer_builder.optimizer.beta1: AdamW's settings are fixed"),
    ("TrainConfig: {optimizer_builder: {optimizer: {type: AdamW}, weight_decay: 0.01}}",
     "TrainConfig.optimizer_builder.weight_decay: DynaBERT's distillation (pipeline.compress.dynabert) trains without"),
    ("TrainConfig: {optim_args: {weight_decay: 0.01}}", "TrainConfig.optim_args.weight_decay"),
    ("TrainConfig: {optimizer_builder: {grad_clip: {type: ClipGradByNorm}}}", "TrainConfig.optimizer_builder.grad_clip"),
    ("TrainConfig: {optimizer_builder: {optimizer: AdamW}}", "TrainConfig.optimizer_builder.optimizer: expected a mapping"),
    ("TrainConfig: {eval_iter: 100}", "TrainConfig.eval_iter: training here evaluates"),
    ("TrainConfig: {logging_iter: 10}", "TrainConfig.logging_iter"),
    ("TrainConfig: {amp_config: {use_pure_fp16: true}}", "TrainConfig.amp_config"),
    ("TrainConfig: {origin_metric: 74.73}", "TrainConfig.origin_metric: expected a fraction (0.7473, not 74.73)"),
    ("TrainConfig: {target_metric: 0.7}", "TrainConfig.target_metric: needs TrainConfig.origin_metric"),
    ("TrainConfig: {origin_metric: 0.7, target_metric: 0.8}", "TrainConfig.target_metric"),
    ("Global: {dataset: glue}", "Global.dataset: 'glue' is not supported"),
    ("Global: {max_seq_length: 1024}", "Global.max_seq_length: must be <= 512"),
    ("Global: {input_names: [x]}", "Global.input_names: unknown key"),
    ("Global: {model_filename: inference.pdmodel}", "Global.model_filename: names a file but Global.model_dir is not given"),
    ("Global: {model_dir: ./nowhere}", "Global.model_dir: "),
    ("Global: {train_data: ./nowhere.txt}", "Global.train_data: "),
    ("TrainConfig: 3", "TrainConfig: expected a mapping of keys, got 3"),
    ("Global: [model_dir", "invalid YAML"),
    ("- QuantAware", "expected a mapping of ACT sections"),
    ("", "expected a mapping of ACT sections"),
]


@pytest.mark.parametrize("text, message", REFUSALS)
def test_each_key_we_cannot_honour_is_refused_by_name(tmp_path, text, message):
    assert message in refused(act(tmp_path, text + "\n"))


def test_model_dir_refusals_name_the_key(tmp_path, model_dir):
    static = tmp_path / "static"
    static.mkdir()
    (static / "inference.pdmodel").write_text("x", encoding="utf-8")
    cases = [
        ("Global: {model_dir: models/uie-base, model_filename: model.pdmodel}",
         "Global.model_filename: model.pdmodel is not in"),
        ("Global: {model_dir: static, model_filename: inference.pdmodel}",
         "Global.model_dir: ", "has no model_state.pdparams, config.json or model_config.json, vocab.txt"),
        ("Distillation: {teacher_model_dir: models/uie-base, teacher_params_filename: x.pdiparams}",
         "Distillation.teacher_params_filename: x.pdiparams is not in"),
        ("Global: {model_dir: models/uie-base}\nDistillation: {teacher_model_dir: static}", "Distillation.teacher_model_dir"),
    ]
    for text, *parts in cases:
        message = refused(act(tmp_path, text + "\n"))
        assert all(p in message for p in parts), message
    other = tmp_path / "other"
    other.mkdir()
    for name in ("model_state.pdparams", "model_config.json", "vocab.txt"):
        (other / name).write_text("x", encoding="utf-8")
    message = refused(act(tmp_path, "Global: {model_dir: models/uie-base}\nDistillation: {teacher_model_dir: other}\n"))
    assert "Distillation.teacher_model_dir: " in message and "differs from Global.model_dir" in message
    assert "model_state.pdparams + model_config.json" in refused(act(tmp_path, "Global: {model_dir: models/uie-base, "
                                                                         "model_filename: nope.pdmodel}\n"))


def test_a_dev_file_in_another_directory_is_refused(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f.txt").write_text("{}\n", encoding="utf-8")
    assert "Global.dev_data: " in refused(act(tmp_path, "Global: {train_data: a/f.txt, dev_data: b/f.txt}\n"))


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="ACT config not found"):
        translate(tmp_path / "nope.yaml")


# ------------------------------------------------------------------------------------------------ CLI

def _cli_config(*argv: str):
    return cli._config(cli.build_parser().parse_args(["status", "--task", "tnews", *argv]))


def test_set_wins_over_the_act_config(tmp_path):
    path = act(tmp_path, """\
        TransformerPrune: {pruned_ratio: 0.5}
        QuantAware:
        TrainConfig: {train_iter: 50, origin_metric: 0.5253}
        """)
    cfg = _cli_config("--act-config", str(path))
    assert (cfg.compress.strategy, cfg.compress.widths(), cfg.compress.max_steps) == ("dynabert+ptq", [0.5], 50)
    assert cfg.gates.origin_metric == 0.5253
    cfg = _cli_config("--act-config", str(path), "--set", "compress.strategy=ptq", "--set", "compress.max_steps=7",
                      "--set", "gates.origin_metric=0.6")
    assert (cfg.compress.strategy, cfg.compress.max_steps, cfg.gates.origin_metric) == ("ptq", 7, 0.6)
    assert cfg.compress.widths() == [0.5]  # what --set leaves alone still comes from the ACT file


def test_run_takes_act_config_too():
    args = cli.build_parser().parse_args(["run", "--task", "tnews", "--act-config", "x.yaml"])
    assert args.act_config == "x.yaml"


@pytest.mark.parametrize("text", ["UnstructurePrune: {ratio: 0.5}\n", "Global: [\n", "QuantAware: {weight_bits: 4}\n"])
def test_cli_exits_2_with_one_line_on_a_bad_act_file(tmp_path, capsys, text):
    path = act(tmp_path, text)
    assert cli.main(["status", "--task", "tnews", "--runs-dir", str(tmp_path / "runs"), "--act-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: act.yaml: ") and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_cli_exits_2_on_a_missing_act_file(tmp_path, capsys):
    assert cli.main(["status", "--task", "tnews", "--act-config", str(tmp_path / "nope.yaml")]) == 2
    assert "ACT config not found" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ gates.origin_metric

def test_origin_metric_gate():
    from pipeline.stages.finetune_check import gate_error

    assert gate_error(0.70, "accuracy", GateConfig(), "uie") is None  # not set: no check
    gates = GateConfig(origin_metric=0.7473)
    assert gate_error(0.7473, "accuracy", gates, "uie") is None
    assert gate_error(0.7573, "accuracy", gates, "uie") is None  # exactly the tolerance (1 point)
    assert gate_error(0.7373, "accuracy", gates, "uie") is None
    message = gate_error(0.7600, "entity F1", gates, "uie")
    assert message and "0.7600" in message and "0.7473" in message and "gates.origin_metric" in message
    assert "1.27 points" in message
    assert gate_error(0.7600, "entity F1", GateConfig(origin_metric=0.7473, origin_metric_tolerance=2.0), "uie") is None
    # below min_accuracy is reported as before, first
    assert "gates.min_accuracy" in gate_error(0.2, "accuracy", GateConfig(min_accuracy=0.35, origin_metric=0.7473), "tnews")


def test_origin_metric_is_part_of_finetune_check_params_only_when_set():
    from pipeline.stages.finetune_check import params

    assert "origin_metric" not in params(load_task_config("tnews"))  # existing caches stay valid
    got = params(load_task_config("tnews", {"gates.origin_metric": 0.5253, "gates.origin_metric_tolerance": 0.5}))
    assert (got["origin_metric"], got["origin_metric_tolerance"]) == (0.5253, 0.5)


@pytest.mark.parametrize("key, value, message", [
    ("gates.origin_metric", 74.73, "gates.origin_metric must be <= 1.0"),
    ("gates.origin_metric", "high", "gates.origin_metric must be a number"),
    ("gates.origin_metric_tolerance", -1, "gates.origin_metric_tolerance must be >= 0.0"),
])
def test_origin_metric_values_are_checked(key, value, message):
    with pytest.raises(ConfigError, match=message):
        load_task_config("tnews", {key: value})
