"""ONNX Runtime sessions: ``session(model_path, precision=, threads=)`` returns a ``Session`` with ``name``,
``input_names`` and ``run(input_ids, token_type_ids) -> logits``, like every backend (CPU by default).

On a GPU, ``gpu_session`` runs the same ONNX files on the CUDA or the TensorRT execution provider (TensorRT
builds its int8 engine from the QDQ form, ``quantize.quantize_int8_qdq``, for the dynamic-shape profile
``shapes.ShapeRange`` takes from the dev lengths); ``provider_missing`` says why one cannot run here, and validate
records that as ``skipped: <why>``, never as passed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeline.backends.onnxruntime.convert import OUTPUT_NAME, check_io_names, load_onnx
from pipeline.backends.onnxruntime.served import SESSION_CONFIG, disabled_optimizers
from pipeline.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from pipeline.backends.shapes import ShapeRange

PRECISIONS = ("fp32", "int8")
ORT_GPU_PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


class Session:
    """One ONNX Runtime session (CPU unless ``providers`` says otherwise).  On CPU alone it leaves out the graph
    fusions the served engine leaves out (``served.disabled_optimizers``), and its threads do not spin, as served
    (``served.SESSION_CONFIG``), unless ``ort_defaults``: the anchor is ORT's one-liner as its users run it, with
    ORT's own defaults."""

    def __init__(self, model_path: Path, precision: str, threads: int | None, providers: Sequence | None = None,
                 name: str | None = None, ort_defaults: bool = False):
        import onnxruntime as ort

        if precision not in PRECISIONS + ("fp16",):
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.model_path = Path(model_path)
        check_io_names(load_onnx(self.model_path), self.model_path)
        self.precision = precision
        self.name = name or f"onnxruntime-cpu-{precision}"
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or int(os.environ.get("OMP_NUM_THREADS", "1"))
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        providers = list(providers or ["CPUExecutionProvider"])
        disabled = [] if ort_defaults else disabled_optimizers(providers)
        for key, value in ({} if ort_defaults else SESSION_CONFIG).items():
            so.add_session_config_entry(key, value)
        try:
            self._sess = ort.InferenceSession(str(self.model_path), so, providers=providers, disabled_optimizers=disabled)
        except Exception as exc:
            raise ModelError(f"{self.model_path}: ONNX Runtime cannot load it ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
        self.input_names = [i.name for i in self._sess.get_inputs()]
        self.providers = self._sess.get_providers()

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
                 "token_type_ids": np.ascontiguousarray(token_type_ids, dtype=np.int64)}
        return self._sess.run([OUTPUT_NAME], feeds)[0].astype(np.float32, copy=False)


def session(model_path: Path, *, precision: str = "fp32", threads: int | None = None, ort_defaults: bool = False) -> Session:
    return Session(Path(model_path), precision, threads, ort_defaults=ort_defaults)


def provider_missing(provider: str) -> str | None:
    """None when this onnxruntime has the GPU execution provider ``provider`` (``cuda`` or ``tensorrt``), otherwise
    why not."""
    import onnxruntime as ort

    ep = ORT_GPU_PROVIDERS[provider]
    available = ort.get_available_providers()
    if ep not in available:
        return f"onnxruntime has no {ep} (available: {', '.join(available)}; needs onnxruntime-gpu and a GPU)"
    return None


def gpu_session(model_path: Path, provider: str, shapes: ShapeRange, *, fp16: bool = True, int8: bool = False,
                cache_dir: Path | None = None) -> Session:
    """ONNX Runtime session on ``provider`` ("cuda" or "tensorrt"); TensorRT gets the dynamic shape profile."""
    ep = ORT_GPU_PROVIDERS.get(provider)
    if ep is None:
        raise ConfigError(f"unknown ONNX Runtime GPU provider {provider!r}; expected cuda or tensorrt")
    reason = provider_missing(provider)
    if reason:
        raise ModelError(reason)
    if provider == "tensorrt":
        mins, maxs, opts = shapes.shapes()
        fmt = lambda d: ",".join(f"{k}:{v[0]}x{v[1]}" for k, v in d.items())  # noqa: E731
        opts_ep = {"trt_fp16_enable": fp16, "trt_int8_enable": int8, "trt_profile_min_shapes": fmt(mins),
                   "trt_profile_max_shapes": fmt(maxs), "trt_profile_opt_shapes": fmt(opts)}
        if cache_dir is not None:
            opts_ep.update({"trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache_dir)})
        providers = [(ep, opts_ep), "CUDAExecutionProvider", "CPUExecutionProvider"]
        precision = "int8" if int8 else ("fp16" if fp16 else "fp32")
    else:
        providers = [ep, "CPUExecutionProvider"]
        precision = "fp32"
    return Session(Path(model_path), precision, int(os.environ.get("OMP_NUM_THREADS", "1")), providers=providers,
                   name=f"onnxruntime-{provider}-{precision}")
