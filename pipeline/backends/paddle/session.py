"""Paddle Inference sessions: ``session(model_dir, precision=, threads=)`` returns a ``Session`` with ``name``,
``input_names`` and ``run(input_ids, token_type_ids) -> float32 logits``, like every backend (CPU, oneDNN).

``precision="int8"`` turns on oneDNN's int8 pipeline (``enable_mkldnn_int8``): its
``quant_dequant_mkldnn_pass`` reads the scales that PTQ/QAT left in a quantized program, removes the
fake-quant ops and the ``cpu_quantize_*`` passes then run matmul/fc in int8.  On a program without
quantization scales the int8 switch changes nothing, so an FP32 model is always run with ``fp32``.

On a GPU, ``PaddleTRTSession`` runs the same programs through Paddle Inference's TensorRT subgraph engine (FP16, or
INT8 from the scales a quantized program carries), for the dynamic-shape profile ``shapes.ShapeRange`` takes
from the dev lengths; ``gpu_missing`` says why it cannot run here, and validate records that as
``skipped: <why>``, never as passed.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.backends.forms import MODEL_FILE, PARAMS_FILE, check_static_dir
from pipeline.backends.paddle.convert import INPUT_NAMES, program_input_dtype
from pipeline.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from pipeline.backends.shapes import ShapeRange

PRECISIONS = ("fp32", "int8")
# The ops oneDNN may run in int8.  Only ``fc`` (every Linear: Q/K/V/output projections, FFN, pooler,
# classifier), which is where the time goes.  Letting the int8 passes quantize everything that has a
# scale (the default, an empty set) also puts the attention matmuls (QK^T with the -1e4 mask added,
# softmax x V), residual adds and reshapes/transposes in int8: on a (partly trained) TNEWS model that
# took the same PTQ program from 98.9% prediction agreement with FP32 to 31% (dev accuracy 35.2 -> 18.1
# on 1000 examples); fc + matmul alone collapses the same way, fc + elementwise_add does not.
# Pinned in tests/test_paddle_inference.py.
ONEDNN_INT8_OPS = frozenset({"fc"})
PADDLE_TRT_PRECISIONS = ("fp16", "int8")


class Session:
    """One Paddle Inference predictor on CPU."""

    def __init__(self, model_dir: Path, precision: str, threads: int | None, int8_ops=None):
        from paddle.inference import Config, create_predictor

        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.model_dir = check_static_dir(model_dir)
        self.precision = precision
        self.name = f"paddle-cpu-{precision}"
        config = Config(str(self.model_dir / MODEL_FILE), str(self.model_dir / PARAMS_FILE))
        config.disable_gpu()
        config.enable_mkldnn()
        # Dynamic batch/sequence shapes: oneDNN caches primitives per shape; bound the cache.
        config.set_mkldnn_cache_capacity(32)
        if precision == "int8":
            # An empty set means "every op with a scale" to Paddle (kept reachable for benchmarks).
            config.enable_mkldnn_int8(set(ONEDNN_INT8_OPS if int8_ops is None else int8_ops))
        config.set_cpu_math_library_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", "1")))
        config.switch_ir_optim(True)
        config.disable_glog_info()
        with _captured_stderr():  # the int8 passes print ~60 lines of "quantized 0 xyz ops" per model
            self._predictor = create_predictor(config)
        self.input_names = list(self._predictor.get_input_names())
        missing = [n for n in INPUT_NAMES if n not in self.input_names]
        if missing:
            raise ModelError(f"static model {self.model_dir}: inputs {self.input_names}, expected {list(INPUT_NAMES)}")
        self._inputs = {n: self._predictor.get_input_handle(n) for n in self.input_names}
        self.input_dtype = program_input_dtype(self.model_dir)
        self._np_dtype = np.int32 if self.input_dtype == "int32" else np.int64
        self._output = self._predictor.get_output_handle(self._predictor.get_output_names()[0])
        # A oneDNN predictor's run leaves the calling thread's OpenMP and MKL at one thread, and Paddle's dygraph runs
        # on them: training after a Paddle session's evaluation in the same process ran on one core of two (TNEWS's
        # distillation 1.28 s a step against 0.85).  Each run puts back the count this process runs with
        # (OMP_NUM_THREADS, pipeline.env).
        from paddle.base import core

        self._give_back_threads = functools.partial(core.set_num_threads, int(os.environ.get("OMP_NUM_THREADS", "1")))

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        for name, value in (("input_ids", input_ids), ("token_type_ids", token_type_ids)):
            handle = self._inputs[name]
            arr = np.ascontiguousarray(value, dtype=self._np_dtype)
            handle.reshape(arr.shape)
            handle.copy_from_cpu(arr)
        self._predictor.run()
        self._give_back_threads()
        return self._output.copy_to_cpu().astype(np.float32, copy=False)


@contextlib.contextmanager
def _captured_stderr():
    """Send fd 2 (C++ logging) to a temp file; replay it only if the block raises."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode("utf-8", "replace")[-4000:])
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def session(model_dir: Path, *, precision: str = "fp32", threads: int | None = None, int8_ops=None) -> Session:
    """``int8_ops``: op types oneDNN may run in int8 (default ``ONEDNN_INT8_OPS``); for experiments only."""
    return Session(Path(model_dir), precision, threads, int8_ops)


def gpu_missing() -> str | None:
    """None when Paddle Inference can run TensorRT on a GPU here, otherwise why not."""
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


class PaddleTRTSession:
    """Paddle Inference on GPU with the TensorRT subgraph engine and dynamic shapes."""

    def __init__(self, model_dir: Path, precision: str, shapes: ShapeRange, cache_dir: Path | None = None):
        from paddle.inference import Config, PrecisionType, create_predictor

        if precision not in PADDLE_TRT_PRECISIONS:
            raise ConfigError(f"TensorRT precision must be one of {', '.join(PADDLE_TRT_PRECISIONS)}, got {precision!r}")
        reason = gpu_missing()
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
