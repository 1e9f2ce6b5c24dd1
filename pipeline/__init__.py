"""ernie-bundle: turn a fine-tuned ERNIE-style Chinese text model into a serving-ready bundle.

Importing this package first prepares the process for Paddle (see ``pipeline.env``):
numpy is imported before paddle can be, and MKL is told to use its AVX2 kernels on AMD CPUs.
Every entry point (the ``ernie-bundle`` console script, ``python -m pipeline``, the tests)
goes through here, so the ordering cannot be got wrong.
"""

from pipeline import env as _env

_env.prepare_process()

__version__ = _env.VERSION
