"""Paddle Inference as a bundle serves it (``package.runtime: python-paddle``): its program run by ``served.py``.
Not a compress engine: compress judges widths in Paddle through ``compress.candidate_format: paddle``'s own path."""

from __future__ import annotations

from pipeline.backends.engine import ServedEngine

SERVED = ServedEngine(name="paddle", served="pipeline.backends.paddle.served", model_file="model.pdmodel",
                      distribution="paddlepaddle", import_name="paddle", gpu_distribution="paddlepaddle-gpu",
                      undeclared=("setuptools==80.9.0",), reads_programs=True)
