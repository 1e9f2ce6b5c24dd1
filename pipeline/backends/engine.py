"""What an engine is to the pipeline and to a bundle: one object per engine folder (its ``engine.py``), listed by
``pipeline.backends.registry``.  ``CpuEngine``: what a CPU engine that runs the exported ONNX is to compress (compress,
its config check and validate's interleaved rounds read an engine's name, files and steps from here instead of
comparing engine names).  ``ServedEngine``: how a bundle serves it on Triton's python backend (the package stage,
the server's start check and the offline reference read it).

The object holds functions, not state: each imports its engine's libraries when called, so listing the engines
imports neither ONNX Runtime nor OpenVINO.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol

import numpy as np

from pipeline.contract import ExportLayout


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
    """One exported form as validate measures it (and export probes it): an engine's session over that form's file,
    on a device, at a precision.  Each engine declares its own (``CpuEngine.runtimes``; Paddle Inference's in its
    folder); ``pipeline.backends.registry.runtimes`` lists them all."""

    name: str  # validate's backend name (report rows, bundle.json)
    runtime: str  # the engine (onnxruntime | openvino | paddle | a registered one): ratios are to the FP32 of the same
    # runtime (and device, when measured), or to ``ratio_base``
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

    def session(self, path: Path, opts: RunOptions) -> Session:
        """``open`` on ``path``, the session answering to this runtime's name (report rows, logs)."""
        session = self.open(path, opts)
        session.name = self.name
        return session


@dataclass(frozen=True)
class ServedEngine:
    """An engine as a bundle serves it: ``package.runtime: python-<name>`` runs its ``served`` module's ``Engine``
    (copied into ``<task>_model/1/`` as ``engine.py``, beside ``runner.py``) over its form's file."""

    name: str  # the model config's ``engine`` parameter and bundle.json's ``engine``
    served: str  # the module whose ``Engine(path, threads, gpu, params)`` runs the model (numpy + the engine only)
    model_file: str  # the name its form's main file gets in <task>_model/1/ (companions keep their suffixes)
    distribution: str  # the package the serving python installs for it, as pip names it ("openvino")
    import_name: str  # the module that must import there
    # The export form it ships when it runs a form of its own (OpenVINO's IR); None: it runs the ONNX forms, or with
    # ``reads_programs`` the Paddle programs, chosen by precision and accelerator (serving.bundle.repository.choose_model)
    form: str | None = None
    reads_programs: bool = False
    # Whether meta.json records the CPU properties its form was validated with (section ``<name>.properties``),
    # passed to the served engine as ``engine_properties``
    properties: bool = False
    # package.instance_count 0 on CPU: one instance with every core (an engine whose one request already uses
    # every core), or one single-thread instance per core
    one_instance: bool = False

    # The package a GPU bundle (package.device GPU) installs instead, at the same versions ("onnxruntime-gpu")
    gpu_distribution: str | None = None
    # What its engine imports without declaring it, as pip reads it, installed beside it: paddlepaddle 2.6.2 imports
    # setuptools when it loads, which a new Python 3.12 environment lacks (and the venv's own 65.5.0 cannot import
    # on 3.12); it computes no answer, so a version that imports on every serving Python is pinned here
    undeclared: tuple[str, ...] = ()

    def validated_version(self) -> str:
        """The version installed here, the one the pipeline validated the bundle with (requirements.lock's)."""
        from importlib import metadata

        return metadata.version(self.distribution)

    def requirement(self, gpu: bool = False) -> str:
        """What the serving python must install, as pip reads it ("openvino==2026.4.1")."""
        return f"{(self.gpu_distribution if gpu else None) or self.distribution}=={self.validated_version()}"

    @property
    def source(self) -> Path:
        """The served module's file, copied into bundles (found by path, never imported here)."""
        spec = importlib.util.find_spec(self.served)
        assert spec is not None and spec.origin, self.served
        return Path(spec.origin)

    def engine(self, path: Path, threads: int = 0, gpu: bool = False, params: dict | None = None):
        """The served ``Engine`` over ``path`` in this process, unwarmed: the offline reference's session."""
        return importlib.import_module(self.served).Engine(Path(path), threads, gpu, params or {})


@dataclass(frozen=True)
class CpuEngine:
    name: str  # compress.engines' entry, a candidate's ``runtime``, the log lines' prefix
    int8_suffix: str  # an INT8 candidate's name: <width prefix><int8_suffix> ("int8", "ov-int8")
    quantization: str  # a candidate's ``quantization`` for this engine's INT8 form ("ort", "nncf")
    candidate_file: str  # the file an INT8 candidate is written to under candidates/<name>/
    where: str  # the candidates report's line for the engine
    # (fp32 onnx, out path, rows, task config, cache dir, unpruned fp32 or None, log) -> SearchResult: its INT8
    # recipe search, cached per width in the run's cache
    search: Callable[..., object]
    # (model path, precision, candidate settings) -> session with ``run`` and ``name``: how compress measures it
    open: Callable[[Path, str, dict], object]
    # the task config -> what its candidates are timed with, kept in each candidate's settings
    settings: Callable[[object], dict] = lambda cfg: {}
    # the task config -> whether its INT8 form quantizes the word-embedding table
    int8_embeddings: Callable[[object], bool] = lambda cfg: True
    # the task config -> None, or raises ConfigError naming why the engine cannot run as configured here
    check: Callable[[object], None] = lambda cfg: None
    # (fp32 onnx, out path, rows, task config) -> its INT8 form of that architecture with every MatMul in INT8 (the
    # fastest its search can pick), calibrated on a few rows and never scored: what compress's speed-first screen times
    # (``pipeline.compress.screen``; speed does not depend on trained weights).  None: never screened, always built
    speed_form: Callable[..., Path] | None = None
    # (fp32 onnx, out path, task config) -> the per-batch INT8 form (quantization.batch_independent_int8: false);
    # None: the engine has only fixed-scale INT8, so it has no candidate in that mode
    per_batch_int8: Callable[..., object] | None = None
    # The export form it ships as its own beside the ONNX forms (a ``pipeline.contract.FORMS`` name: OpenVINO's IR),
    # built by ``search`` for the selected width among compress's shipped forms, described in meta.json's section
    # named after the engine; None: its INT8 is one of the ONNX forms (ONNX Runtime)
    form: str | None = None
    # the task config -> what decides its own form (recipes, library versions, every property it is served with):
    # part of the compress stage's key and of its meta.json section
    form_params: Callable[[object], dict] = lambda cfg: {}
    # how a bundle serves it
    served: ServedEngine | None = None
    # its own section of the task config: (YAML key, dataclass), built and checked like every section and held as
    # ``cfg.engine_settings[key]``; None: the engine has no settings of its own
    section: tuple[str, type] | None = None
    # every form it runs as validate measures it and export probes it: its INT8 (own form, or an ONNX one), FP32 and
    # GPU forms where it has them
    runtimes: tuple[Runtime, ...] = ()
    # ``open`` takes a saved Paddle program (model.pdmodel) as it is, in FP32: finetune-check's FP32 pass can run there
    # (``pipeline.fp32_evaluation``, ``registry.program_engine``)
    opens_paddle_program: bool = False
