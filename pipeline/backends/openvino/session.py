"""OpenVINO CPU sessions: ``session(model_path, precision=, threads=)`` returns a ``Session`` with ``name``,
``input_names`` and ``run(input_ids, token_type_ids) -> float32 logits``, like every backend.

The properties are chosen, not left to the plugin's defaults, and recorded in each bundle (``properties``):

* ``INFERENCE_PRECISION_HINT f32``: on CPUs with AVX512-BF16 or AMX the plugin otherwise computes every
  float op in bf16 on its own (measured on an AVX512-BF16 EPYC: the TNEWS FP32 model's logits moved by up to
  0.04, and a text's logits by 4e-3 with its batch mates).  A bf16 form is a precision choice to measure,
  not a default to inherit.
* ``DYNAMIC_QUANTIZATION_GROUP_SIZE 0``: no activation scales taken per batch at run time (the plugin does
  that for weight-compressed FullyConnected layers); a text's answer must not depend on its batch mates.
* ``NUM_STREAMS 1`` and ``PERFORMANCE_HINT LATENCY``: one request at a time per compiled model, on all its
  threads, as a Triton instance calls it; ``INFERENCE_NUM_THREADS`` the threads given (Triton instances x
  threads are chosen by the package stage, as for ONNX Runtime).
* ``ENABLE_CPU_PINNING false``: each Triton instance is its own process; pinned, two 1-thread instances put
  their threads on the same core.
* ``SNIPPETS_MODE``: the plugin's generated attention kernels ("snippets") round by the padded width, so a text's
  logits changed with how far its batch was padded (TNEWS INT8: 239 of 10,000 titles, and 2 labels of near ties on
  a copy, whose served answers were then not the offline ones).  Off, 1 title in 10,000 still moved: the reductions
  over the width round a text whose tokens reach into the last, partial 16-column block otherwise than a wider batch
  does.  A width-independent IR (``attention.pad_attention``, ``openvino.width_independent``, the default) reduces
  over whole blocks only, exact with snippets as without (0 of 300 texts at any width), so there they run
  (``ENABLE``: 4-13% faster there, 1-64 rows); ``DISABLE`` for any other IR (MEASUREMENTS.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from pipeline.backends.openvino.config import CpuProperties, refused_property
from pipeline.errors import ConfigError, ModelError

INPUT_NAMES = ("input_ids", "token_type_ids")
OUTPUT_NAME = "logits"
PRECISIONS = ("fp32", "int8")


def compile_model(model, properties: dict, where: str):
    """``Core.compile_model`` on the CPU; a property the plugin refuses is named in one line."""
    from pipeline.backends.openvino.convert import core, reason

    try:
        return core().compile_model(model, "CPU", dict(properties))
    except Exception as exc:
        bad = refused_property(properties)
        if bad is not None:
            raise ConfigError(f"OpenVINO refuses property {bad[0]}={properties[bad[0]]!r} ({bad[1]})") from None
        raise ModelError(f"{where}: OpenVINO cannot compile it for the CPU ({type(exc).__name__}: {reason(exc)})") from None


class Session:
    """One compiled model and one infer request (calls are sequential, as a Triton instance makes them)."""

    def __init__(self, model_path: Path, precision: str = "fp32", properties: CpuProperties | None = None,
                 name: str | None = None):
        from pipeline.backends.openvino.convert import read_model

        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.model_path = Path(model_path)
        self.precision = precision
        self.properties = properties or CpuProperties()
        self.name = name or f"openvino-cpu-{precision}"
        model = read_model(self.model_path)
        self.input_names = [i.get_any_name() for i in model.inputs]
        missing = [n for n in INPUT_NAMES if n not in self.input_names]
        if missing:
            raise ModelError(f"{self.model_path}: input {missing[0]!r} missing (inputs: {', '.join(self.input_names)})")
        self._compiled = compile_model(model, self.properties.as_dict(), str(self.model_path))
        self._output = self._compiled.output(OUTPUT_NAME) if OUTPUT_NAME in _output_names(self._compiled) \
            else self._compiled.output(0)
        self._request = self._compiled.create_infer_request()

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
                 "token_type_ids": np.ascontiguousarray(token_type_ids, dtype=np.int64)}
        result = self._request.infer(feeds)
        return np.array(result[self._output], dtype=np.float32)  # a copy: the request's buffer is reused


def _output_names(compiled) -> set[str]:
    return {name for out in compiled.outputs for name in out.get_names()}


def session(model_path: Path, *, precision: str = "fp32", threads: int | None = None,
            properties: CpuProperties | None = None) -> Session:
    props = properties or CpuProperties(threads=threads or 0)
    if threads and properties is not None:
        props = dataclasses.replace(props, threads=threads)
    return Session(Path(model_path), precision, props)
