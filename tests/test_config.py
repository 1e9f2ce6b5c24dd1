import pytest

from pipeline.config import known_tasks, load_task_config, parse_override
from pipeline.errors import ConfigError

CLUE_TASKS = {"tnews", "afqmc", "iflytek", "ocnli", "cmnli", "cluewsc2020", "csl"}


def test_all_clue_classification_tasks_load():
    assert CLUE_TASKS <= set(known_tasks())
    for name in CLUE_TASKS:
        cfg = load_task_config(name)
        assert cfg.task == name and cfg.labels, name
        assert cfg.gates.min_accuracy > 0, f"{name}: a finetune-check gate must be set"


def test_tnews_config_matches_clue_labels():
    cfg = load_task_config("tnews")
    assert len(cfg.labels) == 15 and cfg.labels[0] == "100" and "105" not in cfg.labels
    assert cfg.label_names[cfg.labels.index("108")] == "news_edu"
    assert load_task_config("iflytek").labels == [str(i) for i in range(119)]


def test_overrides_are_typed():
    cfg = load_task_config("tnews", dict([parse_override("finetune.epochs=3"), parse_override("finetune.learning_rate=1e-4"),
                                          parse_override("model.name_or_path=/tmp/m")]))
    assert cfg.finetune.epochs == 3 and cfg.finetune.learning_rate == 1e-4 and cfg.model.name_or_path == "/tmp/m"


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("finetune.epochs=abc", "finetune.epochs must be an integer"),
        ("gates.min_accuracy=high", "gates.min_accuracy must be a number"),
        ("gates.min_accuracy=42", r"gates.min_accuracy must be <= 1.0, got 42"),
        ("gates.max_int8_size_ratio=-0.1", r"gates.max_int8_size_ratio must be >= 0.0"),
        ("gates.release_max_throughput_drop=nan", r"gates.release_max_throughput_drop must be a number"),
        ("export.max_int8_size_ratio=0.5", r"export.max_int8_size_ratio moved to gates.max_int8_size_ratio"),
        ("validate.release_max_accuracy_drop=0.3", r"validate.release_max_accuracy_drop moved to gates.release_max_accuracy_drop"),
        ("package.kind=GPU", r"package.kind is now package.device: CPU or GPU"),
        ("compress.runtime=paddle", r"compress.runtime is now compress.candidate_format: onnx \(was onnxruntime"),
        ("finetune.warmup_ratio=1.5", r"finetune.warmup_ratio must be < 1"),
        ("reading.doc_stride=0", r"unknown key reading \(valid: "),  # a classification task has no reading: section
        ("finetune.epocs=3", "unknown key finetune.epocs"),
        ("max_seq_len=4", "max_seq_len must be in"),
        ("model.scratch.hidden_size=100", "not divisible"),
        ("gates=null", r"gates is a section: set its keys \(gates.<key>=<value>\)"),  # never a silent reset to no gate
        ("model.scratch=null", "model.scratch is a section"),
    ],
)
def test_bad_overrides_name_the_key(override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_task_config("tnews", dict([parse_override(override)]))


def test_a_bad_value_is_said_of_where_it_came_from(tmp_path, capsys):
    """A value given with --set is reported as --set's, not as the task file's (which never held it); a value in
    the file still names the file."""
    import shutil

    from pipeline.config import TASKS_DIR

    with pytest.raises(ConfigError) as exc:
        load_task_config("tnews", dict([parse_override("compress.distill_min_gain=abc")]))
    assert str(exc.value) == "--set: compress.distill_min_gain must be a number, got 'abc'"
    with pytest.raises(ConfigError) as exc:
        load_task_config("tnews", dict([parse_override("compress.batch_size_list=[x]")]))
    assert str(exc.value).startswith("--set: compress.batch_size_list[0] must be an integer")
    with pytest.raises(ConfigError) as exc:
        load_task_config("tnews", dict([parse_override("finetune.epocs=3")]))
    assert str(exc.value).startswith("--set: unknown key finetune.epocs (valid: ")
    task = tmp_path / "tnews.yaml"
    shutil.copy(TASKS_DIR / "tnews.yaml", task)
    task.write_text(task.read_text().replace("max_steps: 200", "max_steps: abc"))
    with pytest.raises(ConfigError) as exc:  # another source, as the caller names it
        load_task_config("tnews", {"finetune.epochs": "x"}, {"finetune.epochs": "--epochs"})
    assert str(exc.value) == "--epochs: finetune.epochs must be an integer, got 'x'"
    with pytest.raises(ConfigError) as exc:  # the file's own value; an unrelated override changes nothing
        load_task_config(str(task), dict([parse_override("finetune.epochs=3")]))
    assert str(exc.value) == "tnews.yaml: compress.max_steps must be an integer, got 'abc'"
    from pipeline.cli import main

    assert main(["run", "--task", "tnews", "--runs-dir", str(tmp_path / "runs"), "--set", "compress.distill_min_gain=abc"]) == 2
    assert capsys.readouterr().err.strip() == "error: --set: compress.distill_min_gain must be a number, got 'abc'"


def test_unknown_task_lists_known_ones():
    with pytest.raises(ConfigError, match=r"unknown task 'tnewz'.*tnews"):
        load_task_config("tnewz")


def test_override_without_equals():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("finetune.epochs")


def test_a_missing_default_model_falls_back_to_scratch_only_when_configured(tmp_path, capsys):
    """TNEWS defaults to the shared real model; a machine without it trains the scratch model and says so.
    An explicit --model that does not exist is an error, never replaced."""
    from conftest import write_tiny_task_yaml
    from pipeline.cli import main

    task = write_tiny_task_yaml(tmp_path / "t.yaml", tmp_path / "data",
                                model={"name_or_path": str(tmp_path / "absent-model"), "if_missing": "scratch"})
    assert main(["status", "--task", str(task), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "is not on this machine: training the small scratch model" in capsys.readouterr().err
    from pipeline.cli import _config, build_parser

    args = build_parser().parse_args(["status", "--task", str(task)])
    assert _config(args).model.name_or_path is None
    args = build_parser().parse_args(["status", "--task", str(task), "--model", str(tmp_path / "absent-model")])
    assert _config(args).model.name_or_path == str(tmp_path / "absent-model")  # explicit: kept, fails where used
    with pytest.raises(ConfigError, match="model.if_missing"):
        load_task_config(str(task), {"model.if_missing": "download"})
    assert load_task_config("tnews").model.if_missing == "scratch"
