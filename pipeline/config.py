"""Task configuration: one YAML file per task in ``pipeline/tasks``, typed as dataclasses.

Every value can be overridden from the command line with ``--set section.key=value`` (the value is
parsed as YAML, so ``--set finetune.epochs=3`` gives an int); the common ones also have their own
flags and Makefile variables (MODEL, DATA_DIR).  Validation happens in ``__post_init__`` so a bad
value fails before any work starts, naming the key.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import yaml_input
from pipeline.compress.arguments import CompressConfig
from pipeline.config_checks import number, one_of
from pipeline.contract import TaskKind
from pipeline.errors import ConfigError
from pipeline.quantization.config import QuantizationConfig
from pipeline.validation.config import ExportConfig, ValidateConfig
from serving.bundle.config import DeployConfig, PackageConfig, object_name_refused

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
HEAD_CHOICES = ("keep", "replace")  # model.head
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class DataConfig:
    """Where a task's data is and how its JSON fields map to model inputs."""

    dir: str | None = None  # relative paths are resolved against the project root
    clue_name: str | None = None  # paddlenlp load_dataset("clue", name) when no local data
    train_file: str = "train.json"
    dev_file: str = "dev.json"
    labels_file: str | None = "labels.json"  # label order (a .txt: one label per line); optional when `labels` lists them
    # A field is a dotted path into the JSON object; a list of paths is joined with `join`.
    text_a: str | list[str] = "sentence"
    text_b: str | list[str] | None = None
    label_field: str = "label"
    join: str = "；"
    skip_labels: list[str] = field(default_factory=list)  # rows with these labels are skipped (and counted)
    # File format: clue (JSON lines), csv or tsv (a header row names the columns the fields name) for classification;
    # cluener / msra_bio (sequence labeling), squad (reading), uie
    format: str = "clue"
    columns: list[str] | None = None  # a CSV/TSV file without a header row: its columns' names, in order

    def __post_init__(self) -> None:
        if not self.text_a:
            raise ConfigError("data.text_a: a text field is required")
        from pipeline.kinds import data_formats

        one_of("data.format", self.format, data_formats())  # which kind reads it: TaskConfig checks
        if self.columns is not None:
            from pipeline.data import TABLE_DELIMITERS

            if self.format not in TABLE_DELIMITERS:
                raise ConfigError(f"data.columns: names a CSV/TSV file's columns; data.format is {self.format!r}")
            if not self.columns or len(set(self.columns)) != len(self.columns) or not all(
                    isinstance(c, str) and c for c in self.columns):
                raise ConfigError(f"data.columns: a list of distinct column names, got {self.columns!r}")


@dataclass
class ScratchModelConfig:
    """The default model when none is given: a small ERNIE trained from scratch (like ernie-3.0-nano)."""

    num_hidden_layers: int = 4
    hidden_size: int = 312
    num_attention_heads: int = 12
    intermediate_size: int = 1248
    hidden_act: str = "gelu"
    min_char_freq: int = 2  # characters seen fewer times in train become [UNK]

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"model.scratch: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )


@dataclass
class ModelConfig:
    # A PaddleNLP model directory, a Hugging Face BERT/ERNIE directory (converted once: pipeline.hf_import), a
    # PaddleNLP model name (needs network), or null for the scratch model.
    name_or_path: str | None = None
    # A Hugging Face pytorch_model.bin is a pickle: refused unless this is true (then torch.load(weights_only=True)).
    allow_pickled_weights: bool = False
    # When the configured directory is absent (a machine without ../shared): "error", or "scratch" to train
    # the small scratch model instead, said on stderr.  An explicit MODEL=<dir> is never replaced.
    if_missing: str = "error"
    # A model's trained head: "keep" it (a Hugging Face head is mapped to the task's labels by ids or names, its
    # rows reordered; one that cannot be mapped is refused, never dropped), or "replace" it with a new head
    # fine-tuned on the model's encoder.
    head: str = "keep"
    scratch: ScratchModelConfig = field(default_factory=ScratchModelConfig)

    def __post_init__(self) -> None:
        one_of("model.if_missing", self.if_missing, ("error", "scratch"))
        one_of("model.head", self.head, HEAD_CHOICES)

    def missing_directory(self) -> bool:
        """A configured local directory (a path, not a hub name) that does not exist."""
        ref = self.name_or_path
        return bool(ref) and ("/" in ref or ref.startswith(".")) and not Path(ref).expanduser().exists()  # as resolve_model_dir


@dataclass
class FinetuneConfig:
    epochs: int = 2
    max_steps: int = -1  # > 0 stops training early (for smoke runs)
    batch_size: int = 64
    # None: 5e-4 when training the scratch model, 1e-4 when fine-tuning a pretrained encoder
    learning_rate: float | None = None
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    seed: int = 42
    max_train_samples: int = -1  # > 0 trains on a deterministic subset
    checkpoint_steps: int = 200  # resumable checkpoint every N steps (and at each epoch end)
    eval_batch_size: int = 128

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "checkpoint_steps", "eval_batch_size"):
            number(f"finetune.{name}", getattr(self, name), minimum=1, integer=True)
        if self.learning_rate is not None:
            number("finetune.learning_rate", self.learning_rate, above=0.0)
        number("finetune.warmup_ratio", self.warmup_ratio, minimum=0.0)
        if self.warmup_ratio >= 1:
            raise ConfigError(f"finetune.warmup_ratio must be < 1, got {self.warmup_ratio}")


SCRATCH_LEARNING_RATE = 5e-4
PRETRAINED_LEARNING_RATE = 1e-4


@dataclass
class GateConfig:
    """Every threshold a stage or the release gate checks, in one section.  Accuracy values are fractions; drops
    are in points (0-100 scale)."""

    min_accuracy: float = 0.0  # finetune-check: below this the model is wrong or not fine-tuned
    max_accuracy_drop: float = 0.5  # compress/validate: points below the FP32 baseline
    min_throughput_ratio: float = 2.0  # validate: compressed vs FP32 on the chosen backend
    # validate: the shipped model vs ONNX Runtime's quantize_dynamic(per_channel=True) of the same FP32 ONNX (the
    # one-liner any user can run), timed in the same interleaved rounds: never ship slower than it.  A ratio to
    # something every CPU also runs, so it means the same on every CPU (the ratio to FP32 does not).
    min_anchor_ratio: float = 1.0
    max_p99_latency_ms: float | None = None  # validate: batch-1 p99, optional
    max_bundle_mb: float | None = None  # package: the whole served bundle (every file), MiB; optional
    # export: the shipped INT8 form at most this fraction of the FP32 ONNX; null: no size gate (a tiny test model's
    # OpenVINO IR is mostly its XML graph, larger than its whole FP32 ONNX)
    max_int8_size_ratio: float | None = 0.35
    # release gate (make gate BASELINE=...): against the previous bundle's report
    release_max_accuracy_drop: float = 0.2  # points
    release_max_throughput_drop: float = 0.15  # fraction of the previous speed-up over FP32
    # fraction of the previous served efficiency (make perf: served / ceiling, per request shape); the spread between
    # perf's rounds on a quiet 2-core machine is about +-5%
    release_max_served_drop: float = 0.15
    # finetune-check: the FP32 metric the user expects (PaddleSlim ACT's TrainConfig.origin_metric, a fraction);
    # measured further than origin_metric_tolerance points from it means another model, data or evaluation.
    origin_metric: float | None = None
    origin_metric_tolerance: float = 1.0  # points

    def __post_init__(self) -> None:
        number("gates.min_accuracy", self.min_accuracy, minimum=0.0, maximum=1.0)
        if self.origin_metric is not None:
            number("gates.origin_metric", self.origin_metric, minimum=0.0, maximum=1.0)
        number("gates.origin_metric_tolerance", self.origin_metric_tolerance, minimum=0.0)
        number("gates.max_accuracy_drop", self.max_accuracy_drop, minimum=0.0)
        number("gates.min_throughput_ratio", self.min_throughput_ratio, minimum=0.0)
        number("gates.min_anchor_ratio", self.min_anchor_ratio, minimum=0.0)
        if self.max_p99_latency_ms is not None:
            number("gates.max_p99_latency_ms", self.max_p99_latency_ms, minimum=0.0)
        if self.max_bundle_mb is not None:
            number("gates.max_bundle_mb", self.max_bundle_mb, minimum=0.0)
        if self.max_int8_size_ratio is not None:
            number("gates.max_int8_size_ratio", self.max_int8_size_ratio, minimum=0.0, maximum=1.0)
        number("gates.release_max_accuracy_drop", self.release_max_accuracy_drop, minimum=0.0)
        number("gates.release_max_throughput_drop", self.release_max_throughput_drop, minimum=0.0, maximum=1.0)
        number("gates.release_max_served_drop", self.release_max_served_drop, minimum=0.0, maximum=1.0)


# A task name becomes a directory (runs/<task>/, <package.repository>/<task>/) and Triton model names: a plain
# name, so that no task can write (or `clean` delete) outside those directories.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_task_name(name: Any, key: str = "task") -> str:
    """``name`` when it is a plain task name; otherwise ConfigError naming ``key`` (exit 2)."""
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        raise ConfigError(f"{key}: {yaml_input.short(name)} is not a plain task name (letters, digits, '.', '_', '-', at most 64, "
                          "starting with a letter or digit): it names the task's directory under runs/ and the bundle's")
    return name


@dataclass
class TaskConfig:
    task: str
    type: str = TaskKind.CLASSIFICATION.value  # the task kind
    description: str = ""
    labels: list[str] = field(default_factory=list)  # label values as they appear in the data
    label_names: list[str] = field(default_factory=list)  # optional human-readable names, same order
    max_seq_len: int = 128
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    gates: GateConfig = field(default_factory=GateConfig)
    compress: CompressConfig = field(default_factory=CompressConfig)
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    package: PackageConfig = field(default_factory=PackageConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    # The task kind's own section (its ``settings``: reading comprehension's ``reading:``, UIE's ``uie:``), built
    # from the YAML key the kind names and checked like every section; None for a kind without one.
    kind_settings: Any = field(default=None, metadata={"built_apart": True})
    # Each registered engine's own section by its key (its ``section``: OpenVINO's ``openvino:``), built the same way.
    engine_settings: dict[str, Any] = field(default_factory=dict, metadata={"built_apart": True})

    def __post_init__(self) -> None:
        check_task_name(self.task)
        refused = object_name_refused(self.task)  # package names the Kubernetes objects after it: said here, not last
        if refused:
            raise ConfigError(refused)
        from pipeline.kinds import kind_class

        kind = kind_class(self.type)  # ConfigError naming the kinds for an unknown type
        if kind.settings is not None and self.kind_settings is None:
            self.kind_settings = kind.settings[1]()  # built in code, not from YAML: the section's defaults
        from pipeline.backends.registry import CPU_ENGINES

        for key, cls in (e.section for e in CPU_ENGINES if e.section):
            self.engine_settings.setdefault(key, cls())
        if self.data.format not in kind.data_formats:
            raise ConfigError(f"data.format: {self.data.format!r} does not fit type {self.type!r} "
                              f"(use {' or '.join(kind.data_formats)})")
        if kind.first_segment is not None:
            key, text = kind.first_segment
            section, first = kind.settings[0], getattr(self.kind_settings, key)
            if first + 3 >= self.max_seq_len:
                raise ConfigError(f"{section}.{key} {first} leaves no room for the {text} in max_seq_len {self.max_seq_len}")
        kind.check_config(self)
        from serving.bundle.kinds import check_api

        check_api(self.type, self.package)  # package.api fastdeploy: only the kinds FastDeploy's examples serve
        if self.data.text_b and self.package.api == "fastdeploy":
            raise ConfigError(f"package.api: fastdeploy: FastDeploy's ernie_seqcls example takes one text per item "
                              f"(INPUT [B, 1]); task {self.task} classifies text pairs (data.text_b): package it with "
                              "package.api ernie-bundle (inputs text and text_pair)")
        if self.label_names and len(self.label_names) != len(self.labels):
            raise ConfigError(
                f"label_names has {len(self.label_names)} entries but labels has {len(self.labels)}"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError("labels: duplicate label values")
        if not 8 <= self.max_seq_len <= 512:
            raise ConfigError(f"max_seq_len must be in [8, 512], got {self.max_seq_len}")
        if self.compress.eval_batch_size is None:  # compress scores in validate's batches: validate reads its outputs
            self.compress.eval_batch_size = self.validate.dev_batch_size

    def data_dir(self) -> Path | None:
        if not self.data.dir:
            return None
        p = Path(self.data.dir).expanduser()
        return p if p.is_absolute() else (PROJECT_ROOT / p)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def known_tasks() -> list[str]:
    return sorted(p.stem for p in TASKS_DIR.glob("*.yaml"))


def is_task_yaml(task: str) -> bool:
    """``--task`` names a task YAML (a task of the user's own), not one of ``pipeline/tasks/``."""
    return Path(task).suffix in (".yaml", ".yml")


def task_name(task: str) -> str:
    """The name ``--task`` stands for: a task's name, or a task YAML's ``task:``.  ``runs/<name>/``, the bundle
    ``<repository>/<name>/`` and its served models are named by it, so every tool takes either form."""
    return load_task_config(task).task if is_task_yaml(task) else task


def load_task_config(task: str, overrides: dict[str, Any] | None = None,
                     given_by: dict[str, str] | None = None) -> TaskConfig:
    """Load ``pipeline/tasks/<task>.yaml`` (or a YAML path) and apply dotted-key overrides.  ``given_by``: where each
    override came from (``--set`` when not listed: an ACT file, ``--model``, ...), which a bad value's error names
    instead of the task file, which never held it."""
    path = Path(task)
    if is_task_yaml(task):
        if not path.is_file():
            raise ConfigError(f"task config not found: {path}")
    else:
        path = TASKS_DIR / f"{task}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown task {task!r}; known tasks: {', '.join(known_tasks())}; a task of your own: "
                              "its YAML file (TASK=path/to/task.yaml)")
    raw = yaml_input.load_file(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    for key, value in (overrides or {}).items():
        _set_dotted(raw, key, value)
    try:
        return _task_config(raw, str(path.name))
    except ConfigError as exc:
        raise _said_of_override(exc, path.name, overrides or {}, given_by or {}) from None


def _said_of_override(exc: ConfigError, where: str, overrides: dict[str, Any], given_by: dict[str, str]) -> ConfigError:
    """``exc`` ("tnews.yaml: compress.x must be a number") said of the override's source (``given_by``, else
    ``--set``) when the key it names came from an override."""
    text = str(exc)
    rest = text[len(where) + 2:] if text.startswith(f"{where}: ") else None
    for key in overrides if rest is not None else ():
        if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", rest):
            return ConfigError(f"{given_by.get(key, '--set')}: {rest}")
    return exc


def _task_config(raw: dict, where: str) -> TaskConfig:
    """``raw`` as a TaskConfig: the kind's and the engines' own sections that ``raw`` holds are built with their own
    dataclasses (``TaskConfig.__post_init__`` gives the absent ones their defaults)."""
    from pipeline.backends.registry import CPU_ENGINES
    from pipeline.kinds import kind_class

    own = kind_class(str(raw.get("type", TaskKind.CLASSIFICATION.value))).settings
    sections = ([own] if own else []) + [e.section for e in CPU_ENGINES if e.section]
    built = {key: _coerce(cls, raw.pop(key), where, key) for key, cls in sections if key in raw}
    extra = {"engine_settings": {k: v for k, v in built.items() if not own or k != own[0]}}
    if own and own[0] in built:
        extra["kind_settings"] = built[own[0]]
    return _build(TaskConfig, raw, where, extra=extra, sections=tuple(key for key, _ in sections))


def parse_override(text: str) -> tuple[str, Any]:
    """``"finetune.epochs=3"`` -> ``("finetune.epochs", 3)``; the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {yaml_input.short(text)}: expected KEY=VALUE, e.g. finetune.epochs=3")
    key, value = text.split("=", 1)
    try:
        parsed = yaml_input.load(value, f"--set {key.strip()}") if value.strip() else None
    except yaml_input.ExpandsTooFar:
        raise
    except ConfigError:  # not YAML: the text itself
        parsed = value
    return key.strip(), parsed


def section_from_overrides(cls: type, section: str, sets: list[str]) -> Any:
    """One config section (dataclass ``cls``) from ``--set <section>.<key>=<value>`` lines alone, with the parsing
    and checks a task config's overrides get (``make manifests`` re-renders a bundle's ``deploy`` this way)."""
    raw: dict = {}
    for text in sets:
        key, value = parse_override(text)
        if not key.startswith(section + "."):
            raise ConfigError(f"--set {yaml_input.short(text)}: only {section}.<key>=<value> applies here")
        _set_dotted(raw, key[len(section) + 1 :], value)
    return _build(cls, raw, "--set", section + ".")


def _set_dotted(raw: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key}: {part} is not a section")
    node[parts[-1]] = value


# Keys renamed because the old name said something else: a config using it is told the new key and its values.
RENAMED = {"compress.runtime": "compress.candidate_format: onnx (was onnxruntime: every CPU engine of compress.engines, "
                               "OpenVINO included) or paddle",
           "package.kind": "package.device: CPU or GPU (the device the model runs on; a task's kind is its type)"}
# Keys that moved between sections: a config using the old place is told the new one.
MOVED = {"export.max_int8_size_ratio": "gates.max_int8_size_ratio",
         "validate.release_max_accuracy_drop": "gates.release_max_accuracy_drop",
         "validate.release_max_throughput_drop": "gates.release_max_throughput_drop",
         "export.calibration_sentences": "quantization.calibration_sentences",
         "export.calibration_batch_size": "quantization.calibration_batch_size",
         "export.int8_embeddings": "quantization.int8_embeddings",
         "export.ort_transformer_optimize": "quantization.ort_transformer_optimize",
         "export.batch_independent_int8": "quantization.batch_independent_int8",
         "export.int8_smooth_alphas": "quantization.int8_smooth_alphas",
         "export.int8_reduce_range": "quantization.int8_reduce_range",
         "export.int8_search_sentences": "quantization.int8_search_sentences",
         "export.openvino_smooth_alphas": "quantization.openvino_smooth_alphas",
         "export.int8_max_fp32_matmuls": "quantization.int8_max_fp32_matmuls",
         "export.qdq_budget_points": "quantization.qdq_budget_points"}


def _build(cls: type, raw: Any, where: str, prefix: str = "", extra: dict[str, Any] | None = None,
           sections: tuple[str, ...] = ()) -> Any:
    """Build dataclass ``cls`` from a dict, checking every key and value type (``extra``: fields built apart, from the
    keys ``sections``, which an unknown key's message lists too)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {prefix.rstrip('.') or 'config'} must be a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("built_apart")}
    unknown = sorted(set(raw) - names)
    renamed = next((prefix + k for k in unknown if prefix + k in RENAMED), None)
    if renamed:
        raise ConfigError(f"{where}: {renamed} is now {RENAMED[renamed]}")
    moved = [MOVED[prefix + k] for k in unknown if prefix + k in MOVED]
    if moved:
        old = next(prefix + k for k in unknown if prefix + k in MOVED)
        why = "every threshold lives in gates:" if moved[0].startswith("gates.") else "the INT8 settings live in quantization:"
        raise ConfigError(f"{where}: {old} moved to {moved[0]} ({why})")
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {prefix}{unknown[0]} (valid: {', '.join(sorted(prefix + n for n in names | set(sections)))})"
        )
    kwargs = dict(extra or {})
    for name, value in raw.items():
        kwargs[name] = _coerce(hints[name], value, where, prefix + name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: {prefix.rstrip('.') or 'config'}: {exc}") from exc


def _coerce(tp: Any, value: Any, where: str, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:  # would silently reset every key of the section to its default (gates: no gate at all)
            raise ConfigError(f"{where}: {key} is a section: set its keys ({key}.<key>=<value>) or leave it out")
        return _build(tp, value, where, key + ".")
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, where, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[-1] if errors else f"{where}: {key}: invalid value {yaml_input.short(value)}")
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a mapping, got {yaml_input.short(value)}")
        return {_coerce(key_type, k, where, f"{key}.{k}"): _coerce(value_type, v, where, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {key} must be a list, got {yaml_input.short(value)}")
        return [_coerce(item, v, where, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads "1e-4" (no dot) as a string; accept it as the number it obviously is.
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: {key} must be a number, got {yaml_input.short(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {key} must be an integer, got {yaml_input.short(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {yaml_input.short(value)}")
        return value
    if tp is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # labels like 100 written without quotes
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {yaml_input.short(value)}")
        return value
    return value
