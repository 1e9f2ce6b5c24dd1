"""The ``export:`` and ``validate:`` sections of a task config.  Owned by the export/validate stages (the INT8
settings are ``quantization:``, beside the quantization code: ``pipeline.quantization.config``).

Gate thresholds are not here: they live in ``gates:`` (``pipeline.config.GateConfig``) so every
stage reads the same ones.  Values are checked in ``__post_init__`` and a bad one raises
``ConfigError`` naming the key, before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config_checks import number as _number
from pipeline.errors import ConfigError



def _int_list(key: str, values, minimum: int = 1) -> None:
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{key} must be a non-empty list of integers, got {values!r}")
    for i, v in enumerate(values):
        _number(f"{key}[{i}]", v, minimum=minimum, integer=True)


@dataclass
class ExportConfig:
    opset: int = 13  # >= 13: per-channel QuantizeLinear/DequantizeLinear (compress converts with it too)

    def __post_init__(self) -> None:
        _number("export.opset", self.opset, minimum=13, integer=True)


BACKENDS_SHIPPED, BACKENDS_ALL = "shipped", "all"  # validate.backends


def _backends(value) -> None:
    """validate.backends: "shipped", "all", or a non-empty list of the registry's backend names."""
    from pipeline.yaml_input import short

    if isinstance(value, str):
        if value not in (BACKENDS_SHIPPED, BACKENDS_ALL):
            raise ConfigError(f"validate.backends: {short(value)} is not one of {BACKENDS_SHIPPED}, {BACKENDS_ALL} "
                              "or a list of backend names")
        return
    if not isinstance(value, list) or not value:
        raise ConfigError(f"validate.backends must be {BACKENDS_SHIPPED}, {BACKENDS_ALL} or a non-empty list of backend "
                          f"names, got {short(value)}")
    from pipeline.backends.registry import runtimes

    names = [r.name for r in runtimes()]
    for i, name in enumerate(value):
        if name not in names:
            raise ConfigError(f"validate.backends[{i}]: {short(name)} is not one of {', '.join(names)}")


@dataclass
class ValidateConfig:
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8, 32])
    seq_lens: list[int] = field(default_factory=lambda: [32, 64, 128])  # fixed-shape grid (may exceed max_seq_len)
    warmup: int = 2
    repeats: int = 5  # timed repeats per grid cell; medians are reported
    dev_batch_size: int = 32  # the real dev length distribution, dynamic padding
    # Timed dev examples (0: all).  2048 keeps the real length distribution with 64 batches of 32 per
    # repeat; timing all 10,000 TNEWS dev sentences 5 times per backend took most of validate's 8 minutes.
    # Parity (accuracy, agreement, logit differences) always uses the full dev set.
    dev_benchmark_limit: int = 2048
    threads: int = 0  # 0: OMP_NUM_THREADS
    # The backend validate verifies and gates (metrics.json's chosen_backend): "auto": the form compress selected
    # (stages.validate.backend_to_verify); a backend name pins that one instead.
    chosen_backend: str = "auto"
    throughput_batch_size: int = 32  # batch size of the throughput-ratio gate
    # Which backends validate measures (full-dev parity, the fixed-shape grid, dev-length timing).  "shipped": the
    # form the bundle ships, the FP32 it is compared with, and the anchor (the gates need no more; a release run pays
    # for no other).  "all": every runtime that can run here (the registry's table).  A list of backend names: the
    # shipped ones and these.  With package.runtime/precision other than auto (the package stage picks the form among
    # those measured) every backend is measured whatever this says.
    backends: str | list[str] = BACKENDS_SHIPPED

    def __post_init__(self) -> None:
        _int_list("validate.batch_sizes", self.batch_sizes)
        _int_list("validate.seq_lens", self.seq_lens, minimum=2)
        _number("validate.warmup", self.warmup, minimum=0, integer=True)
        _number("validate.repeats", self.repeats, minimum=1, integer=True)
        _number("validate.dev_batch_size", self.dev_batch_size, minimum=1, integer=True)
        _number("validate.dev_benchmark_limit", self.dev_benchmark_limit, minimum=0, integer=True)
        _number("validate.threads", self.threads, minimum=0, integer=True)
        _number("validate.throughput_batch_size", self.throughput_batch_size, minimum=1, integer=True)
        _backends(self.backends)
        if not isinstance(self.chosen_backend, str) or not self.chosen_backend:
            raise ConfigError(f"validate.chosen_backend must be a backend name or 'auto', got {self.chosen_backend!r}")

    @property
    def only_shipped(self) -> bool:
        """Whether validate measures only what ships (and its FP32 and the anchor): no other backend is asked for."""
        return self.backends == BACKENDS_SHIPPED and self.chosen_backend == "auto"
