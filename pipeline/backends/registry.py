"""The engines, in one place: ``CPU_ENGINES`` is the one registration of an engine compress searches and times INT8
forms in (ONNX Runtime, OpenVINO); everything else is read from those objects.

``served_engines()``: what a bundle can run on Triton's python backend (each CPU engine's ``served``, and Paddle
Inference's).  ``runtimes()``: every form the pipeline can measure and a bundle can ship, as each engine declares them
(``CpuEngine.runtimes``; Paddle Inference's in its folder): ONNX Runtime, OpenVINO and Paddle Inference on CPU; ONNX
Runtime's CUDA and TensorRT execution providers and Paddle Inference's TensorRT engine on GPU.  validate measures each
one that can run here (GPU runtimes included, whenever a GPU with their libraries is present) and records the others
as ``skipped: <why>`` (``plan``); the package stage reads which exported model a measured name ran from the same list
(``by_name``).  TensorRT is not a runtime of its own here: it is Paddle Inference's TensorRT subgraph engine and ONNX
Runtime's TensorRT execution provider, each in its engine's folder, both built for the dynamic-shape profile
``shapes.of_options`` takes from the dev lengths.  Tests replace ``runtimes`` to exercise the GPU path where there is
no GPU, and add an engine to ``CPU_ENGINES`` to register one.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.backends.engine import CpuEngine, Runtime, RunOptions, ServedEngine, Session  # noqa: F401  (the contract)
from pipeline.backends.onnxruntime.engine import ENGINE as _ONNXRUNTIME
from pipeline.backends.openvino.engine import ENGINE as _OPENVINO
from pipeline.backends.paddle.engine import RUNTIMES as _PADDLE_RUNTIMES, SERVED as _PADDLE_SERVED
from pipeline.contract import ExportLayout

# The CPU engines that run the exported ONNX: compress makes and times every width's INT8 form in each one that
# ``compress.engines`` names, validate times them in the same interleaved rounds.  Listed here only: each engine's
# object lives in its folder (``engine.py``).
CPU_ENGINES: tuple[CpuEngine, ...] = (_ONNXRUNTIME, _OPENVINO)


def program_engine() -> CpuEngine | None:
    """The CPU engine that runs a saved Paddle program in FP32 as it is (finetune-check's pass, ``pipeline.fp32_evaluation``);
    None: dygraph evaluates."""
    return next((e for e in CPU_ENGINES if e.opens_paddle_program), None)


def served_engines() -> tuple[ServedEngine, ...]:
    """The engines a bundle can run on Triton's python backend (``package.runtime: python-<name>``): each CPU engine's
    own, and Paddle Inference's."""
    return (*(e.served for e in CPU_ENGINES if e.served is not None), _PADDLE_SERVED)


def served_engine(name: str) -> ServedEngine | None:
    return next((e for e in served_engines() if e.name == name), None)


def served_engine_of_form(form: str | None) -> ServedEngine | None:
    """The engine that serves export form ``form`` as its own (OpenVINO's IR); None for the ONNX and Paddle forms."""
    return next((e for e in served_engines() if form is not None and e.form == form), None)


def own_forms() -> list[str]:
    """The export forms served engines run as their own (OpenVINO's IR): what a package carries beside the ONNX and
    Paddle forms."""
    return [e.form for e in served_engines() if e.form is not None]


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


def runtimes() -> tuple[Runtime, ...]:
    """Every runtime, CPU ones first (ONNX Runtime's before Paddle's: once Paddle (MKL/oneDNN, Intel OpenMP) has run
    in the process, its spin-waiting OpenMP threads slowed the ONNX Runtime INT8 session measured after it from 2.7x to
    1.7x FP32, measured), each engine's in the registry's order."""
    every = [*(r for e in CPU_ENGINES for r in e.runtimes), *_PADDLE_RUNTIMES]
    return (*(r for r in every if r.device == "cpu"), *(r for r in every if r.device != "cpu"))


def by_name(name: str) -> Runtime | None:
    return next((r for r in runtimes() if r.name == name), None)


def selected_form(selected: dict, device: str = "cpu") -> Runtime | None:
    """The runtime that ships compress's selected candidate (``SelectedCandidate.as_dict()``) on ``device``: validate
    verifies it and never chooses another (None only when nothing was selected).

    - A candidate measured in a CPU engine (``compress.candidate_format: onnx``): that engine's INT8 form when
      quantized (its first: the QDQ form is TensorRT's), else its FP32 form: what compress measured.
    - Widths judged in Paddle (``compress.candidate_format: paddle``): the selected architecture as the registry's
      first CPU engine runs it (ONNX Runtime: its INT8 recipe search for that architecture is made in
      ``compress.shipped``, scored on held-out rows), as the Paddle route's INT8 has always been served.
    - A GPU bundle (compress measures on CPU): the first GPU runtime of the selected precision in the registry's order
      (ONNX Runtime's TensorRT provider for INT8, its CUDA provider for FP32)."""
    engine, quantization = selected.get("runtime"), selected.get("quantization")
    if not isinstance(engine, str) or not isinstance(quantization, str):
        return None
    precision = "fp32" if quantization == "none" else "int8"
    if device != "cpu":
        return _first(device, precision)
    return _first("cpu", precision, engine if cpu_engine(engine) is not None else CPU_ENGINES[0].name)


def selection_rule(selected: dict, device: str = "cpu") -> str:
    """Which of ``selected_form``'s rules named the shipped form: "" where it is what compress measured."""
    if device != "cpu":
        return "measured on CPU: the first GPU runtime of its precision ships"
    return "" if cpu_engine(str(selected.get("runtime"))) else "judged in Paddle: its architecture ships in the first CPU engine"


def gpu_forms() -> list[Runtime]:
    """Every form ``selected_form`` can name for a GPU bundle: the first GPU runtime of each precision."""
    return [r for r in (_first("gpu", p) for p in ("fp32", "int8")) if r is not None]


def _first(device: str, precision: str, engine: str | None = None) -> Runtime | None:
    return next((r for r in runtimes() if r.device == device and r.precision == precision
                 and (engine is None or r.runtime == engine)), None)


def plan(export_dir: Path) -> tuple[list[Runtime], dict[str, str]]:
    """(the runtimes to measure on this export here, {name: why not} for the others whose model was exported or
    whose device is missing).  A CPU runtime whose optional model was not exported (paddle_int8 without PTQ) is
    simply not part of this bundle."""
    run, skipped = [], {}
    for rt in runtimes():
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
