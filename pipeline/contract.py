"""The export contract, in one place: the task kinds, the exported model forms (file, precision), the export
directory's layout, ``meta.json`` (its one reader and writer) and the CPU a measurement was made on.

Export writes through it; validate, package, the serving tools and the benchmarks read through it; nothing else
spells ``onnx/int8.onnx`` or opens ``meta.json``.  Standard library only: the bundle-building and tool side of
``serving`` imports it without pulling Paddle or ONNX Runtime in (code that runs inside Triton reads what the package
stage copied into the bundle instead, never this module).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.errors import ModelError


class TaskKind(str, Enum):
    """The four task kinds; the value is the task config's ``type`` and meta.json's ``task_type``."""

    CLASSIFICATION = "classification"
    TOKEN_CLASSIFICATION = "token_classification"
    READING_COMPREHENSION = "reading_comprehension"
    UIE = "uie"


def kind_table(module: str) -> dict:
    """One object per TaskKind, keyed by its value: each ``KIND`` of the module ``module`` names with ``{kind}`` as
    the kind's value (``pipeline.kinds.{kind}``, ``serving.kinds.{kind}.bundle``): a side's kind objects live in
    modules named after their kind, so a new kind is its modules and its value here, no table."""
    import importlib

    table = {}
    for k in TaskKind:
        name = module.format(kind=k.value)
        obj = importlib.import_module(name).KIND
        assert obj.name == k.value, f"{name}: KIND is {obj.name!r}, not {k.value!r}"
        table[k.value] = obj
    return table


def lookup_kind(table: dict, task_type: str | TaskKind, error: Callable[[str], Exception]):
    """The object of ``task_type`` (a TaskKind or its value) in a ``kind_table``; ``error`` naming the kinds when none."""
    name = task_type.value if isinstance(task_type, TaskKind) else str(task_type)
    try:
        return table[name]
    except KeyError:
        raise error(f"task_type {name!r} is not one of {', '.join(table)}") from None


class Precision(str, Enum):
    FP32 = "fp32"
    INT8 = "int8"  # CPU int8 kernels (ONNX Runtime's fused MatMulIntegerToFloat, OpenVINO's FakeQuantize graph)
    INT8_QDQ = "int8_qdq"  # explicit QuantizeLinear/DequantizeLinear: TensorRT's form


@dataclass(frozen=True)
class Form:
    """One exported model: where it lives in the export directory and how it computes."""

    name: str  # the artifact role in records and bundle.json ("model_form")
    path: str  # relative to the export directory (a directory for Paddle programs)
    precision: Precision
    companions: tuple[str, ...] = ()  # files that belong to ``path`` (an OpenVINO IR's weights)

    def files(self, root: Path) -> list[Path]:
        main = Path(root) / self.path
        return [main, *(main.with_suffix(s) for s in self.companions)]


# The forms every export writes (the ONNX models both CPU engines read, the Paddle programs).  An engine that ships a
# form of its own declares it in its folder with ``register_form`` (OpenVINO's IR: ``backends/openvino/engine.py``),
# which adds it here when ``pipeline.backends.registry`` imports the engine: this module is standard library only
# and imported by the launcher, so it cannot import the registry itself.
FORMS: dict[str, Form] = {f.name: f for f in (
    Form("onnx_fp32", "onnx/fp32.onnx", Precision.FP32),
    Form("onnx_int8", "onnx/int8.onnx", Precision.INT8),
    Form("onnx_int8_qdq", "onnx/int8_qdq.onnx", Precision.INT8_QDQ),
    Form("paddle_fp32", "paddle_fp32", Precision.FP32),
    Form("paddle_int8", "paddle_int8", Precision.INT8),
)}


def register_form(new: Form) -> Form:
    """Add an engine's own form to ``FORMS`` (once; the same form again is a no-op) and return it.  A second form of
    the same name, or one at a path another form has, is a programming error."""
    known = FORMS.get(new.name)
    if known is not None and known != new:
        raise ValueError(f"form {new.name!r} is registered twice, as {known} and as {new}")
    clash = next((f.name for f in FORMS.values() if f.path == new.path and f.name != new.name), None)
    if clash:
        raise ValueError(f"form {new.name!r} would be written at {new.path}, where {clash} is")
    FORMS[new.name] = new
    return new


def form(name: str) -> Form:
    try:
        return FORMS[name]
    except KeyError:
        # an engine's own form is listed once its engine is imported (pipeline.backends.registry imports them all)
        raise ModelError(f"unknown exported form {name!r}; forms are {', '.join(FORMS)}") from None


META_FILE = "meta.json"
LABELS_FILE = "labels.json"
TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
INT8_SEARCH_FILE = "int8_search.json"


def _under_root(name: str) -> property:
    """An ``ExportLayout`` path that is not a form's: ``root / name``."""
    return property(lambda self: Path(self.root) / name, doc=f"root / {name!r}")


@dataclass(frozen=True)
class ExportLayout:
    """The export stage's output directory: every path in it is named here."""

    root: Path

    def path(self, form_name: str) -> Path:
        return Path(self.root) / form(form_name).path

    def files(self, form_name: str) -> list[Path]:
        return form(form_name).files(self.root)

    def has(self, form_name: str) -> bool:
        return all(p.exists() for p in self.files(form_name))

    def present(self) -> Iterator[Form]:
        return (f for f in FORMS.values() if self.has(f.name))

    tokenizer_dir = _under_root(TOKENIZER_DIR)
    labels = _under_root(LABELS_FILE)
    meta = _under_root(META_FILE)
    int8_search = _under_root(INT8_SEARCH_FILE)

    def bytes(self, form_name: str) -> int:
        """What the form weighs on disk (an IR with its weights; a program directory whole)."""
        total = 0
        for p in self.files(form_name):
            if p.is_file():
                total += p.stat().st_size
            elif p.is_dir():
                total += sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
        return total


# -- meta.json --------------------------------------------------------------------------------------------------

META_REQUIRED = {"task": str, "max_seq_len": int, "num_labels": int}


def read_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` as export wrote it, checked: a missing, truncated or hand-edited file is one line naming it and
    the field.  The kind-specific sections (``reading``, ``uie``) are checked by the kind that reads them, when a bundle is
    packaged (``serving/kinds/<kind>/bundle.py``, ``meta_problem``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path}: missing (export stage output incomplete)") from None
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read the export manifest ({exc})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not an export manifest (a JSON object is expected)")
    if data.get("format_version", 1) != 1:
        raise ModelError(f"{path}: export manifest format_version {data.get('format_version')!r}, this code reads 1; "
                         "re-run the export stage")
    for key, kind in META_REQUIRED.items():
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ModelError(f"{path}: field {key!r} missing or not {kind.__name__}")
    task_type = data.get("task_type", TaskKind.CLASSIFICATION.value)
    if task_type not in {k.value for k in TaskKind}:
        raise ModelError(f"{path}: task_type {task_type!r} is not one of {', '.join(k.value for k in TaskKind)}")
    return data


def write_meta(path: Path, meta: dict[str, Any]) -> Path:
    """Write ``meta.json`` (checked as it will be read)."""
    path = Path(path)
    path.write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    read_meta(path)
    return path


# -- the CPU ------------------------------------------------------------------------------------------------------

# The instruction sets engine choices depend on: int8 dot products (VNNI: u8*s8 straight into int32; without it AVX2's
# int16 pair sums can saturate), AMX, and bf16 (OpenVINO computes in bf16 by default where the CPU has it).
CPU_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
INT8_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8")  # what int8 speed hangs on
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # any int8 dot product into int32: no int16 pair sums to saturate
# AVX-VNNI is AVX512-VNNI's dot product in VEX (256-bit) form: the engines take it only on CPUs without AVX-512 VNNI, so
# a bundle validated on a CPU with both (Zen 5, Sapphire Rapids) runs the same kernels on one with AVX512-VNNI alone.
COVERED_BY = {"avx_vnni": "avx512_vnni"}


def has_vnni(flags) -> bool:
    return any(f in flags for f in VNNI_FLAGS)


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: tuple[str, ...]  # the CPU_FLAGS this CPU has, in CPU_FLAGS order
    cores: int

    @property
    def vnni(self) -> bool:
        return has_vnni(self.flags)

    @property
    def int8_saturates(self) -> bool:
        """u8s8 GEMM can saturate (int16 pair sums): AVX2/AVX512 without a VNNI dot product."""
        return not self.vnni

    def as_dict(self) -> dict:
        return {**asdict(self), "flags": list(self.flags), "vnni": self.vnni, "int8_saturates": self.int8_saturates}

    def summary(self) -> str:
        return f"{self.model or platform.machine()} [{' '.join(self.flags) or 'no AVX2'}], {self.cores} cores"


def parse_cpuinfo(text: str, cores: int = 0) -> CpuInfo:
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return CpuInfo(model, tuple(f for f in CPU_FLAGS if f in flags), cores)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """Every flag this CPU reports (None when unknown)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                return set(value.split())
    except OSError:
        pass
    return None


def detect_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"), cores)
    except OSError:  # not Linux: nothing known, the recipes assume the conservative case
        return CpuInfo(platform.processor(), (), cores)


def cpu_key() -> list[str]:
    """The instruction sets a measured verdict holds for (this CPU's ``CPU_FLAGS``): engines choose their kernels by
    them, so speed and INT8 numerics follow (without VNNI, ONNX Runtime's u8s8 pair sums saturate at int16).  Part of
    the keys of the stages that time or score forms here (compress, validate) and of the INT8 searches' cache: a runs
    dir taken to another kind of CPU measures again instead of reusing another CPU's choice."""
    return list(detect_cpu().flags)


def missing_int8_flags(validated, here: set[str] | tuple[str, ...]) -> list[str]:
    """The int8 instruction sets a bundle was validated with that this CPU lacks (speed, and on AVX2 the u8s8
    numerics, differ); one this CPU has a wider form of (``COVERED_BY``) is not lacking."""
    here = set(here)
    return [f for f in validated if f in INT8_FLAGS and f not in here and COVERED_BY.get(f) not in here]
