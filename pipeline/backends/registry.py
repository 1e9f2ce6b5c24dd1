"""The engines and every runtime, in one place.

``CPU_ENGINES`` (ONNX Runtime, OpenVINO) are what compress searches and times INT8 forms in; ``SERVED_ENGINES``
(theirs and Paddle Inference's) what a bundle can run on Triton's python backend.  ``RUNTIMES`` is every runtime the
pipeline can measure and a bundle can ship: ONNX Runtime, OpenVINO and Paddle Inference on CPU; ONNX Runtime's CUDA
and TensorRT execution providers and Paddle Inference's TensorRT engine on GPU.  validate measures each one that can
run here (GPU runtimes included, whenever a GPU with their libraries is present) and records the others as
``skipped: <why>`` (``plan``); the package stage reads which exported model a measured name ran from the same table
(``by_name``).

Each engine's object and sessions live in its folder (``onnxruntime``, ``openvino``, ``paddle``: ``engine.py``,
``session.py``); this module lists them, and a runtime's ``open`` imports its session module only when called.
TensorRT is not a runtime of its own here: it is Paddle Inference's TensorRT subgraph engine and ONNX Runtime's
TensorRT execution provider, each in its runtime's session module, both built for the dynamic-shape profile
``shapes.ShapeRange`` takes from the dev lengths.  Every session has the shape of :class:`Session`.  Tests add a
runtime to ``RUNTIMES`` to exercise the GPU path where there is no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol

import numpy as np

from pipeline.backends.engine import CpuEngine, ServedEngine
from pipeline.backends.onnxruntime.engine import ENGINE as _ONNXRUNTIME
from pipeline.backends.openvino.engine import ENGINE as _OPENVINO
from pipeline.backends.paddle.engine import SERVED as _PADDLE_SERVED
from pipeline.backends.shapes import ShapeRange
from pipeline.contract import ExportLayout

# The CPU engines that run the exported ONNX: compress makes and times every width's INT8 form in each one that
# ``compress.engines`` names, validate times them in the same interleaved rounds.  Listed here only: each engine's
# object lives in its folder (``engine.py``).
CPU_ENGINES: tuple[CpuEngine, ...] = (_ONNXRUNTIME, _OPENVINO)


# The engines a bundle can run on Triton's python backend (``package.runtime: python-<name>``): each CPU engine's own,
# and Paddle Inference's.
SERVED_ENGINES: tuple[ServedEngine, ...] = (*(e.served for e in CPU_ENGINES if e.served is not None), _PADDLE_SERVED)


def served_engine(name: str) -> ServedEngine | None:
    return next((e for e in SERVED_ENGINES if e.name == name), None)


def served_engine_of_form(form: str | None) -> ServedEngine | None:
    """The engine that serves export form ``form`` as its own (OpenVINO's IR); None for the ONNX and Paddle forms."""
    return next((e for e in SERVED_ENGINES if form is not None and e.form == form), None)


def own_forms() -> list[str]:
    """The export forms served engines run as their own (OpenVINO's IR): what a package carries beside the ONNX and
    Paddle forms."""
    return [e.form for e in SERVED_ENGINES if e.form is not None]


def cpu_engine(name: str) -> CpuEngine | None:
    return next((e for e in CPU_ENGINES if e.name == name), None)


def cpu_engines(names) -> list[CpuEngine]:
    """The CPU engines named in ``names`` (``compress.engines``), in the registry's order."""
    return [e for e in CPU_ENGINES if e.name in names]


def own_form_engines(cfg) -> list[CpuEngine]:
    """The compress engines of ``cfg`` that ship a form of their own (OpenVINO's IR): none when widths are judged
    in Paddle (``compress.candidate_format: paddle``)."""
    if not cfg.compress.onnx_route:
        return []
    return [e for e in cpu_engines(cfg.compress.engines) if e.form is not None]


def shipped_own_form_engines(cfg, selected_runtime: str) -> list[CpuEngine]:
    """The compress engines whose own form ships for a candidate selected in ``selected_runtime``: that engine's, and
    the one ``package.runtime`` names (a bundle asked to serve in it).  Another engine's form is never built: OpenVINO's
    search is minutes of NNCF on a CPU where it cannot win, for a file nothing serves."""
    wanted = {selected_runtime, cfg.package.engine}  # PackageConfig.engine: the engine package.runtime names, or "auto"
    return [e for e in own_form_engines(cfg) if e.name in wanted]


def onnx_int8_forms_ship(cfg, selected_runtime: str) -> bool:
    """Whether the ONNX INT8 forms (int8.onnx, ONNX Runtime's; int8_qdq.onnx, TensorRT's and FastDeploy's) ship for a
    candidate selected in ``selected_runtime``: always, except when it runs in an engine with a form of its own
    (OpenVINO's IR) and nothing asks for them: package.runtime auto on a CPU bundle (it serves the selected engine's
    form) and validate measuring only what ships.  ONNX Runtime's recipe search and the QDQ calibration are then not
    run for files nothing serves (over a minute on TNEWS)."""
    engine = cpu_engine(selected_runtime)
    if engine is None or engine.form is None:
        return True
    return not (cfg.package.runtime == "auto" and cfg.package.device == "CPU" and cfg.validate.only_shipped)


def is_cpu_engine_form(rt: "Runtime") -> bool:
    """Whether ``rt`` is a CPU form of a CPU engine: what validate times in its interleaved rounds and export probes."""
    return rt.device == "cpu" and cpu_engine(rt.runtime) is not None


class Session(Protocol):
    """What every runtime's session offers: a name, and logits for a padded batch."""

    name: str

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class RunOptions:
    threads: int | None = None  # CPU threads (None: the runtime's default)
    seq_lens: np.ndarray | None = None  # dev token lengths: TensorRT's dynamic-shape profile
    max_seq_len: int = 512
    # the task config's engine sections by key (cfg.engine_settings): OpenVINO's (openvino:) gives its sessions' CPU
    # properties
    engine_settings: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Runtime:
    name: str  # validate's backend name (report rows, bundle.json)
    runtime: str  # onnxruntime | openvino | paddle: ratios are to the FP32 of the same runtime (and device, when
    # measured), or to ``ratio_base``
    device: str  # cpu | gpu
    precision: str  # fp32 | fp16 | int8: how it computes
    form: str  # the exported model it runs (a pipeline.contract.FORMS name)
    open: Callable[[Path, RunOptions], Session]
    available: Callable[[], str | None] = lambda: None  # None: can run here; otherwise why not
    # The backend its throughput ratio is taken to (None: the FP32 of its own runtime).  OpenVINO's INT8 is
    # compared with the FP32 ONNX in ONNX Runtime, the same base as ONNX Runtime's INT8: one yardstick per CPU.
    ratio_base: str | None = None

    @property
    def quantized(self) -> bool:
        return self.precision == "int8"

    def artifact(self, export_dir: Path) -> Path:
        return ExportLayout(Path(export_dir)).path(self.form)


def _named(session, name: str):
    session.name = name
    return session


def _ort_cpu(precision: str, name: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.onnxruntime.session import session

        return _named(session(path, precision=precision, threads=opts.threads), name)
    return open_


def _openvino_cpu(precision: str, name: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.openvino.session import session

        own = opts.engine_settings.get(_OPENVINO.section[0])
        props = own.cpu_properties(opts.threads or 0) if own is not None else None
        return _named(session(path, precision=precision, threads=opts.threads, properties=props), name)
    return open_


def _openvino_reason() -> str | None:
    from pipeline.backends.openvino import missing

    return missing()


def _paddle_cpu(precision: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.paddle.session import session

        return session(path, precision=precision, threads=opts.threads)
    return open_


def _shapes(opts: RunOptions) -> ShapeRange:
    return ShapeRange.from_lengths(opts.seq_lens if opts.seq_lens is not None else np.array([]), opts.max_seq_len)


def _paddle_trt(precision: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.paddle.session import PaddleTRTSession

        return PaddleTRTSession(path, precision, _shapes(opts))
    return open_


def _ort_gpu(provider: str, int8: bool):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.onnxruntime.session import gpu_session

        return gpu_session(path, provider, _shapes(opts), fp16=provider == "tensorrt", int8=int8)
    return open_


def _paddle_gpu_reason() -> str | None:
    from pipeline.backends.paddle.session import gpu_missing

    return gpu_missing()


def _ort_gpu_reason(provider: str) -> Callable[[], str | None]:
    def reason():
        from pipeline.backends.onnxruntime.session import provider_missing

        return provider_missing(provider)
    return reason


# ONNX Runtime first: once Paddle (MKL/oneDNN, Intel OpenMP) has run in the process, its spin-waiting OpenMP
# threads slowed the ORT int8 session measured after it from 2.7x to 1.7x FP32 (measured).
RUNTIMES: tuple[Runtime, ...] = (
    Runtime("onnxruntime-cpu-fp32", "onnxruntime", "cpu", "fp32", "onnx_fp32", _ort_cpu("fp32", "onnxruntime-cpu-fp32")),
    Runtime("onnxruntime-cpu-int8", "onnxruntime", "cpu", "int8", "onnx_int8", _ort_cpu("int8", "onnxruntime-cpu-int8")),
    Runtime("onnxruntime-cpu-int8-qdq", "onnxruntime", "cpu", "int8", "onnx_int8_qdq",
            _ort_cpu("int8", "onnxruntime-cpu-int8-qdq")),
    Runtime("openvino-cpu-int8", "openvino", "cpu", "int8", "openvino_int8", _openvino_cpu("int8", "openvino-cpu-int8"),
            _openvino_reason, ratio_base="onnxruntime-cpu-fp32"),
    Runtime("paddle-cpu-fp32", "paddle", "cpu", "fp32", "paddle_fp32", _paddle_cpu("fp32")),
    Runtime("paddle-cpu-int8", "paddle", "cpu", "int8", "paddle_int8", _paddle_cpu("int8")),
    Runtime("ort-cuda", "onnxruntime", "gpu", "fp32", "onnx_fp32", _ort_gpu("cuda", False), _ort_gpu_reason("cuda")),
    Runtime("ort-tensorrt", "onnxruntime", "gpu", "int8", "onnx_int8_qdq", _ort_gpu("tensorrt", True),
            _ort_gpu_reason("tensorrt")),
    Runtime("paddle-trt-fp16", "paddle", "gpu", "fp16", "paddle_fp32", _paddle_trt("fp16"), _paddle_gpu_reason),
    Runtime("paddle-trt-int8", "paddle", "gpu", "int8", "paddle_int8", _paddle_trt("int8"), _paddle_gpu_reason),
)


def by_name(name: str) -> Runtime | None:
    return next((r for r in RUNTIMES if r.name == name), None)


def selected_form(selected: dict, device: str = "cpu") -> Runtime | None:
    """The runtime that runs compress's selected candidate (``SelectedCandidate.as_dict()``) as compress measured it:
    the engine it was measured in, INT8 when quantized (the engine's first INT8 form: the QDQ form is TensorRT's),
    else FP32.  None where compress measured no form that runs on ``device``: widths judged in Paddle
    (``compress.candidate_format: paddle``, whose INT8 is served from ONNX), or a GPU bundle (compress measures on CPU)."""
    engine, quantization = selected.get("runtime"), selected.get("quantization")
    if device != "cpu" or not isinstance(engine, str) or cpu_engine(engine) is None or not isinstance(quantization, str):
        return None
    precision = "fp32" if quantization == "none" else "int8"
    return next((r for r in RUNTIMES if r.runtime == engine and r.device == device and r.precision == precision), None)


def plan(export_dir: Path) -> tuple[list[Runtime], dict[str, str]]:
    """(the runtimes to measure on this export here, {name: why not} for the others whose model was exported or
    whose device is missing).  A CPU runtime whose optional model was not exported (paddle_int8 without PTQ) is
    simply not part of this bundle."""
    run, skipped = [], {}
    for rt in RUNTIMES:
        exported = ExportLayout(Path(export_dir)).has(rt.form)
        if rt.device == "cpu" and not exported:
            continue
        reason = rt.available()
        if reason:
            skipped[rt.name] = reason
        elif not exported:
            skipped[rt.name] = f"the export has no {rt.form} model"
        else:
            run.append(rt)
    return run, skipped
