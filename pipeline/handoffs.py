"""What one stage hands another, typed: every JSON file a stage writes for a later stage is one record here.

    finetune-check --Baseline--------> compress, validate
    compress ------SelectedCandidate-> export
    compress ------CompressOutputs---> export                 (the programs and the shipped forms, by path)
    export --------ExportManifest----> validate, package      (meta.json; serving reads it on its own)
    validate ------Validation--------> package                (metrics.json; the release gate reads gates.json)

A stage reads another's output only through these (``read(path)`` or ``StageContext.handoff``), never by
picking keys out of its JSON.  Each record writes its file with ``to_json`` and checks ``format_version`` when
it reads one; files written before the field existed count as version 1.  A file that is not what its name says
is a ``ModelError`` naming the file and the field (a truncated or hand-edited ``runs/`` entry).

The field the records call ``value`` is the task's primary metric, named by ``metric`` (accuracy, entity F1,
reading-comprehension F1); in the JSON it keeps the historical key ``accuracy``, which older readers use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.compress.architecture import Architecture
from pipeline.contract import META_FILE
from pipeline.errors import ModelError

FORMAT_VERSION = 1


def _load(path: Path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read the {what} ({exc})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a {what} (a JSON object is expected)")
    version = data.get("format_version", 1)
    if version != FORMAT_VERSION:
        raise ModelError(f"{path}: {what} format_version {version!r}, this code reads {FORMAT_VERSION}; re-run that stage")
    return data


def _field(data: dict, key: str, path: Path, what: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        value = None
    if not isinstance(value, kind):
        raise ModelError(f"{path}: {what} field {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return value


def _dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


@dataclass
class Baseline:
    """finetune-check's FP32 measurement on the full dev set: what every later gate compares against."""

    FILE, ROLE = "baseline.json", "baseline"  # ROLE: its name in finetune-check's record artifacts

    task: str
    type: str
    metric: str  # accuracy | f1 | ...: what ``value`` is
    metric_label: str
    value: float
    metrics: dict[str, Any]
    dev_examples: int
    dev_features: int
    skipped: dict[str, Any]
    labels: list[str]
    model_dir: str
    max_seq_len: int
    classification: dict[str, Any] = field(default_factory=dict)  # macro_f1, majority_class_accuracy, per_class_recall

    def to_json(self) -> str:
        return _dump({"task": self.task, "type": self.type, "metric": self.metric, "metric_label": self.metric_label,
                      "accuracy": self.value, "metrics": self.metrics, "dev_examples": self.dev_examples,
                      "dev_features": self.dev_features, "skipped": self.skipped, "labels": self.labels,
                      "model_dir": self.model_dir, "max_seq_len": self.max_seq_len, **self.classification})

    @classmethod
    def read(cls, path: Path) -> "Baseline":
        what = "finetune-check baseline"
        d = _load(path, what)
        known = {"task", "type", "metric", "metric_label", "accuracy", "metrics", "dev_examples", "dev_features",
                 "skipped", "labels", "model_dir", "max_seq_len", "format_version"}
        return cls(str(d.get("task", "")), str(d.get("type", "")), str(d.get("metric", "accuracy")),
                   str(d.get("metric_label", d.get("metric", "accuracy"))), float(_field(d, "accuracy", path, what, (int, float))),
                   dict(d.get("metrics") or {}), int(d.get("dev_examples", 0)), int(d.get("dev_features", 0)),
                   dict(d.get("skipped") or {}), [str(x) for x in d.get("labels") or []], str(d.get("model_dir", "")),
                   int(d.get("max_seq_len", 0)), {k: v for k, v in d.items() if k not in known})


@dataclass
class SelectedCandidate:
    """compress's pick: which candidate export turns into the shipped models."""

    FILE, ROLE = "selected.json", "selected"

    name: str
    width_mult: float
    quantization: str  # none | ort | ptq | qat
    embeddings_int8: bool
    value: float | None  # the task metric on dev (JSON "accuracy")
    drop_points: float | None
    throughput: float | None
    size_bytes: int | None
    settings: dict[str, Any]
    runtime: str
    depth_mult: float = 1.0  # the share of encoder layers kept

    @property
    def pruned(self) -> bool:
        return Architecture(self.width_mult, self.depth_mult).pruned

    @property
    def paddle_int8(self) -> bool:
        """A quantized Paddle program exists for it (PTQ/QAT); ``ort`` candidates are ONNX only."""
        return self.quantization in ("ptq", "qat")

    def as_dict(self) -> dict:
        return {"name": self.name, "width_mult": self.width_mult, "depth_mult": self.depth_mult, "quantization": self.quantization,
                "embeddings_int8": self.embeddings_int8, "accuracy": self.value, "accuracy_drop_points": self.drop_points,
                "throughput": self.throughput, "size_bytes": self.size_bytes, "settings": self.settings, "runtime": self.runtime}

    def to_json(self) -> str:
        return _dump(self.as_dict())

    @classmethod
    def read(cls, path: Path) -> "SelectedCandidate":
        what = "selected candidate"
        d = _load(path, what)
        return cls(str(_field(d, "name", path, what, str)), float(d.get("width_mult", 1.0)), str(d.get("quantization", "none")),
                   bool(d.get("embeddings_int8", False)), d.get("accuracy"), d.get("accuracy_drop_points"), d.get("throughput"),
                   d.get("size_bytes"), dict(d.get("settings") or {}), str(d.get("runtime", "")),
                   float(d.get("depth_mult", 1.0)))


@dataclass
class CompressOutputs:
    """What compress hands export, by path relative to compress's ``out/``: the FP32 baseline program, the selected
    candidate's program and FP32 dygraph directory (its tokenizer), and its shipped forms (``pipeline.compress.shipped``:
    every INT8 form, already searched and built; export only assembles them)."""

    FILE, ROLE = "outputs.json", "outputs"

    fp32_infer_dir: str
    selected_infer_dir: str
    selected_model_dir: str
    shipped_dir: str
    quantized_program: bool  # the selected candidate is a quantized Paddle program (PTQ/QAT): export keeps it

    def to_json(self) -> str:
        return _dump({"fp32_infer_dir": self.fp32_infer_dir, "selected_infer_dir": self.selected_infer_dir,
                      "selected_model_dir": self.selected_model_dir, "shipped_dir": self.shipped_dir,
                      "quantized_program": self.quantized_program, "format_version": FORMAT_VERSION})

    @classmethod
    def read(cls, path: Path) -> "CompressOutputs":
        what = "compress outputs"
        d = _load(path, what)
        return cls(*(str(_field(d, k, path, what, str)) for k in ("fp32_infer_dir", "selected_infer_dir",
                                                                  "selected_model_dir", "shipped_dir")),
                   bool(_field(d, "quantized_program", path, what, bool)))


@dataclass
class ExportManifest:
    """export's ``meta.json``: the model contract (inputs, outputs, labels) plus how the INT8 forms were made, typed.
    The file is read and written by ``pipeline.contract`` (the package stage's bundle builder reads it there too)."""

    FILE, ROLE = META_FILE, "meta"

    task: str
    task_type: str
    metric: str
    max_seq_len: int
    labels: list[str]
    selected_candidate: dict[str, Any]
    int8: dict[str, Any]  # the ONNX Runtime form's search (chosen recipe, candidates) or how it was made
    int8_qdq: dict[str, Any]
    cpu: dict[str, Any]
    data: dict[str, Any]  # the whole file, for writing it back unchanged

    @property
    def int8_recipe(self) -> Any:
        return self.int8.get("chosen", self.int8) if self.int8 else None

    def recipe_for(self, engine: str) -> Any:
        """The INT8 recipe of the form ``engine`` runs: its own section's (meta.json ``openvino``: NNCF's) when the
        engine ships a form of its own, else ONNX Runtime's (``int8``)."""
        own = self.data.get(engine)
        if isinstance(own, dict) and isinstance(own.get("chosen"), dict):
            return own["chosen"]
        return self.int8_recipe

    def to_json(self) -> str:
        return _dump(self.data)

    @classmethod
    def from_dict(cls, d: dict, path: Path | str = META_FILE) -> "ExportManifest":
        what = "export manifest"
        return cls(str(_field(d, "task", path, what, str)), str(d.get("task_type", "classification")),
                   str(d.get("metric", "accuracy")), int(_field(d, "max_seq_len", path, what, int)),
                   [str(x) for x in _field(d, "labels", path, what, list)], dict(d.get("selected_candidate") or {}),
                   dict(d.get("int8") or {}), dict(d.get("int8_qdq") or {}), dict(d.get("cpu") or {}), d)

    @classmethod
    def read(cls, path: Path) -> "ExportManifest":
        from pipeline.contract import read_meta

        return cls.from_dict(read_meta(path), path)

    def write(self, path: Path) -> Path:
        from pipeline.contract import write_meta

        return write_meta(path, self.data)


@dataclass(frozen=True)
class MeasuredForm:
    """One backend validate measured: which exported model it ran and what it scored."""

    backend: str  # e.g. onnxruntime-cpu-int8
    form: str  # the exported form it ran (pipeline.contract.FORMS)
    runtime: str
    precision: str
    metric: str
    value: float  # the task metric on the full dev set
    metrics: dict[str, Any]
    throughput_ratio: float | None


@dataclass
class Validation:
    """validate's ``metrics.json``: every backend's dev metric and speed, the chosen one, the gate summary."""

    FILE, ROLE = "metrics.json", "metrics"

    task: str
    chosen_backend: str
    summary: dict[str, Any]
    forms: dict[str, MeasuredForm]  # by export form
    data: dict[str, Any]  # the whole file (the bundle's manifest carries it)

    @property
    def chosen_form(self) -> str | None:
        from pipeline.backends.registry import by_name

        runtime = by_name(self.chosen_backend)
        return runtime.form if runtime else None

    @property
    def chosen_precision(self) -> str | None:
        """int8 / int8_qdq / fp32: the form validate chose (None when it chose none we export)."""
        from pipeline.contract import form

        return form(self.chosen_form).precision.value if self.chosen_form else None

    def by_form(self) -> dict[str, dict]:
        """form -> {"backend", "metric", "metric_label", "value", "accuracy", <every metric>} (the bundle manifest's
        ``validated``; ``metric_label``: how reports name the metric, "micro-F1" for "micro_f1")."""
        label = str(self.summary.get("metric_label") or "")
        return {f: {**m.metrics, "backend": m.backend, "metric": m.metric, **({"metric_label": label} if label else {}),
                    "value": m.value, "accuracy": m.value} for f, m in self.forms.items()}

    @classmethod
    def from_dict(cls, d: dict, path: Path | str = "metrics.json") -> "Validation":
        """``forms``: the CPU measurement of each exported model (what a CPU bundle serves; GPU rows stay in ``data``)."""
        from pipeline.backends.registry import by_name

        forms = {}
        for r in d.get("backends") or []:
            runtime = by_name(r.get("backend")) if isinstance(r, dict) else None
            if runtime is None or runtime.device != "cpu":
                continue
            if isinstance(r.get("accuracy"), bool) or not isinstance(r.get("accuracy"), (int, float)):
                continue  # a backend that could not run has no dev metric
            form = runtime.form
            forms[form] = MeasuredForm(r["backend"], form, str(r.get("runtime", "")), str(r.get("precision", "")),
                                       str(r.get("metric", "accuracy")), float(r["accuracy"]), dict(r.get("metrics") or {}),
                                       r.get("throughput_ratio"))
        return cls(str(d.get("task", "")), str(d.get("chosen_backend", "")), dict(d.get("summary") or {}), forms, d)

    @classmethod
    def read(cls, path: Path) -> "Validation":
        return cls.from_dict(_load(path, "validation report"), path)
