"""GPU backends: Paddle Inference + TensorRT (FP16/INT8) and ONNX Runtime CUDA/TensorRT execution providers.

Same shape as the other backends (``session(...)`` -> ``Session`` with ``name``, ``input_names``,
``run``).  ``availability(kind)`` says whether a backend can run in this process and why not; the
validate stage records an unavailable backend as ``skipped: <reason>``, never as passed.

Dynamic shapes for TensorRT: min/opt/max sequence lengths come from the dev set's token-length
distribution (``ShapeRange.from_lengths``): min 1, opt the 95th percentile, max the task's max_seq_len.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import ConfigError, ModelError

PADDLE_TRT_PRECISIONS = ("fp16", "int8")
ORT_GPU_PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


@dataclass(frozen=True)
class ShapeRange:
    min_batch: int
    opt_batch: int
    max_batch: int
    min_seq: int
    opt_seq: int
    max_seq: int

    @classmethod
    def from_lengths(cls, lengths: np.ndarray, max_seq_len: int, opt_batch: int = 32, max_batch: int = 64) -> "ShapeRange":
        lengths = np.asarray(lengths)
        opt = int(np.percentile(lengths, 95)) if lengths.size else max_seq_len
        return cls(1, opt_batch, max_batch, 1, max(1, min(opt, max_seq_len)), max_seq_len)

    def shapes(self) -> tuple[dict, dict, dict]:
        mins = {n: [self.min_batch, self.min_seq] for n in ("input_ids", "token_type_ids")}
        opts = {n: [self.opt_batch, self.opt_seq] for n in ("input_ids", "token_type_ids")}
        maxs = {n: [self.max_batch, self.max_seq] for n in ("input_ids", "token_type_ids")}
        return mins, maxs, opts


def _paddle_gpu_reason() -> str | None:
    try:
        import paddle
    except ImportError:
        return "paddlepaddle is not installed"
    if not paddle.device.is_compiled_with_cuda():
        return "paddlepaddle is the CPU build (paddlepaddle-gpu with TensorRT is needed)"
    if paddle.device.cuda.device_count() < 1:
        return "no CUDA GPU visible"
    try:
        from paddle.inference import get_trt_compile_version

        if get_trt_compile_version() == (0, 0, 0):
            return "paddlepaddle-gpu was built without TensorRT"
    except ImportError:
        return "paddle.inference has no TensorRT support"
    return None


def _ort_provider_reason(provider: str) -> str | None:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if provider not in available:
        return f"onnxruntime has no {provider} (available: {', '.join(available)}; needs onnxruntime-gpu and a GPU)"
    return None


def availability(kind: str) -> str | None:
    """None when ``kind`` can run here, otherwise the reason it cannot.

    kinds: ``paddle-trt-fp16``, ``paddle-trt-int8``, ``ort-cuda``, ``ort-tensorrt``.
    """
    if kind.startswith("paddle-trt-"):
        return _paddle_gpu_reason()
    if kind.startswith("ort-"):
        return _ort_provider_reason(ORT_GPU_PROVIDERS[kind.split("-", 1)[1]])
    raise ConfigError(f"unknown GPU backend {kind!r}")


GPU_BACKENDS = ("paddle-trt-fp16", "paddle-trt-int8", "ort-cuda", "ort-tensorrt")


class PaddleTRTSession:
    """Paddle Inference on GPU with the TensorRT subgraph engine and dynamic shapes."""

    def __init__(self, model_dir: Path, precision: str, shapes: ShapeRange, cache_dir: Path | None = None):
        from paddle.inference import Config, PrecisionType, create_predictor

        from pipeline.backends.paddle_inference import MODEL_FILE, PARAMS_FILE, check_static_dir

        if precision not in PADDLE_TRT_PRECISIONS:
            raise ConfigError(f"TensorRT precision must be one of {', '.join(PADDLE_TRT_PRECISIONS)}, got {precision!r}")
        reason = _paddle_gpu_reason()
        if reason:
            raise ModelError(f"Paddle TensorRT unavailable: {reason}")
        model_dir = check_static_dir(model_dir)
        self.name = f"paddle-gpu-trt-{precision}"
        config = Config(str(model_dir / MODEL_FILE), str(model_dir / PARAMS_FILE))
        config.enable_use_gpu(256, 0)
        # INT8 reads the scales a quantized (PTQ/QAT) program carries: use_calib_mode False.
        config.enable_tensorrt_engine(workspace_size=1 << 30, max_batch_size=shapes.max_batch, min_subgraph_size=3,
                                      precision_mode=PrecisionType.Int8 if precision == "int8" else PrecisionType.Half,
                                      use_static=cache_dir is not None, use_calib_mode=False)
        mins, maxs, opts = shapes.shapes()
        config.set_trt_dynamic_shape_info(mins, maxs, opts)
        if cache_dir is not None:
            config.set_optim_cache_dir(str(cache_dir))
        config.disable_glog_info()
        self._predictor = create_predictor(config)
        self.input_names = list(self._predictor.get_input_names())
        self._inputs = {n: self._predictor.get_input_handle(n) for n in self.input_names}
        self._output = self._predictor.get_output_handle(self._predictor.get_output_names()[0])

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        for name, value in (("input_ids", input_ids), ("token_type_ids", token_type_ids)):
            arr = np.ascontiguousarray(value, dtype=np.int64)
            self._inputs[name].reshape(arr.shape)
            self._inputs[name].copy_from_cpu(arr)
        self._predictor.run()
        return self._output.copy_to_cpu().astype(np.float32, copy=False)


def ort_gpu_session(model_path: Path, provider: str, shapes: ShapeRange, *, fp16: bool = True, int8: bool = False,
                    cache_dir: Path | None = None):
    """ONNX Runtime session on ``provider`` ("cuda" or "tensorrt"); TensorRT gets the dynamic shape profile."""
    from pipeline.backends.onnxruntime import Session

    ep = ORT_GPU_PROVIDERS.get(provider)
    if ep is None:
        raise ConfigError(f"unknown ONNX Runtime GPU provider {provider!r}; expected cuda or tensorrt")
    reason = _ort_provider_reason(ep)
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


def session(model_dir: Path, *, precision: str = "fp16", shapes: ShapeRange, threads: int | None = None) -> PaddleTRTSession:
    return PaddleTRTSession(Path(model_dir), precision, shapes)
