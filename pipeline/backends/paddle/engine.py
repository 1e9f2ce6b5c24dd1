"""Paddle Inference as a bundle serves it (``package.runtime: python-paddle``): its program run by ``served.py``.
Not a compress engine: compress judges widths in Paddle through ``compress.candidate_format: paddle``'s own path."""

from __future__ import annotations

from pathlib import Path

from pipeline.backends.engine import Runtime, RunOptions, ServedEngine

SERVED = ServedEngine(name="paddle", served="pipeline.backends.paddle.served", model_file="model.pdmodel",
                      distribution="paddlepaddle", import_name="paddle", gpu_distribution="paddlepaddle-gpu",
                      undeclared=("setuptools==80.9.0",), reads_programs=True)


def _cpu(precision: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.paddle.session import session

        return session(path, precision=precision, threads=opts.threads)
    return open_


def _trt(precision: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.paddle.session import PaddleTRTSession
        from pipeline.backends.shapes import of_options

        return PaddleTRTSession(path, precision, of_options(opts))
    return open_


def _gpu_missing() -> str | None:
    from pipeline.backends.paddle.session import gpu_missing

    return gpu_missing()


# Its programs on CPU, and its TensorRT subgraph engine on GPU
RUNTIMES = (
    Runtime("paddle-cpu-fp32", "paddle", "cpu", "fp32", "paddle_fp32", _cpu("fp32")),
    Runtime("paddle-cpu-int8", "paddle", "cpu", "int8", "paddle_int8", _cpu("int8")),
    Runtime("paddle-trt-fp16", "paddle", "gpu", "fp16", "paddle_fp32", _trt("fp16"), _gpu_missing),
    Runtime("paddle-trt-int8", "paddle", "gpu", "int8", "paddle_int8", _trt("int8"), _gpu_missing),
)
