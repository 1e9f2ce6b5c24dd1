"""The ``export:`` and ``validate:`` sections of a task config.  Owned by the export/validate stages.

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
    opset: int = 13  # >= 13: per-channel QuantizeLinear/DequantizeLinear
    calibration_sentences: int = 256  # training sentences that calibrate the QDQ (TensorRT) INT8 ONNX
    calibration_batch_size: int = 16
    int8_embeddings: bool = True  # store the word-embedding table int8 in both INT8 ONNX forms
    ort_transformer_optimize: bool = False  # ORT BERT fusions before quantize_dynamic (slower here; see backend)
    # Calibrated activation scales in onnx/int8.onnx: a sentence's answer does not depend on its batch
    # mates (served == offline).  false keeps ORT's per-batch dynamic scales: ~8% faster, not reproducible.
    batch_independent_int8: bool = True
    # Accuracy-aware INT8 search (pipeline.int8), used when batch_independent_int8 is true: recipes are
    # scored on held-out training sentences (the last int8_search_sentences of train; dev only reports).
    int8_smooth_alphas: list = field(default_factory=lambda: [0.5, 0.7, 0.85])  # SmoothQuant strengths tried
    int8_reduce_range: str | bool = "auto"  # auto: 7-bit weights are also tried on CPUs without VNNI; true | false
    int8_search_sentences: int = 2000
    # The same search for the OpenVINO form (NNCF's SmoothQuant strength; off is always tried too).  0.95 is NNCF's
    # own default for transformers.
    openvino_smooth_alphas: list = field(default_factory=lambda: [0.5, 0.7, 0.85, 0.95])
    int8_max_fp32_matmuls: int = 8  # mixed precision: at most this many MatMuls kept in FP32
    # The TensorRT (QDQ) form starts from the searched recipe; when it is further than this from FP32 on the
    # held-out slice, the other SmoothQuant strengths are tried for it (a target for that form, not a gate:
    # it does not ship on CPU).
    qdq_budget_points: float = 1.0

    def __post_init__(self) -> None:
        _number("export.opset", self.opset, minimum=13, integer=True)
        _number("export.calibration_sentences", self.calibration_sentences, minimum=1, integer=True)
        _number("export.calibration_batch_size", self.calibration_batch_size, minimum=1, integer=True)
        _number("export.int8_search_sentences", self.int8_search_sentences, minimum=1, integer=True)
        _number("export.int8_max_fp32_matmuls", self.int8_max_fp32_matmuls, minimum=0, integer=True)
        _number("export.qdq_budget_points", self.qdq_budget_points, minimum=0.0)
        for key in ("int8_smooth_alphas", "openvino_smooth_alphas"):
            alphas = getattr(self, key)
            if not isinstance(alphas, list):
                raise ConfigError(f"export.{key} must be a list of numbers in (0, 1), got {alphas!r}")
            for i, a in enumerate(alphas):
                _number(f"export.{key}[{i}]", a)
                if not 0 < a < 1:
                    raise ConfigError(f"export.{key}[{i}] must be in (0, 1), got {a!r}")
        if self.int8_reduce_range not in ("auto", True, False, "true", "false"):
            raise ConfigError(f"export.int8_reduce_range must be auto, true or false, got {self.int8_reduce_range!r}")
        if self.int8_reduce_range in ("true", "false"):  # --set gives strings; one spelling from here on
            self.int8_reduce_range = self.int8_reduce_range == "true"
        for name in ("int8_embeddings", "ort_transformer_optimize", "batch_independent_int8"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"export.{name} must be true or false, got {getattr(self, name)!r}")


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
    chosen_backend: str = "auto"  # "auto": the fastest CPU backend that passes the accuracy gate
    throughput_batch_size: int = 32  # batch size of the throughput-ratio gate

    def __post_init__(self) -> None:
        _int_list("validate.batch_sizes", self.batch_sizes)
        _int_list("validate.seq_lens", self.seq_lens, minimum=2)
        _number("validate.warmup", self.warmup, minimum=0, integer=True)
        _number("validate.repeats", self.repeats, minimum=1, integer=True)
        _number("validate.dev_batch_size", self.dev_batch_size, minimum=1, integer=True)
        _number("validate.dev_benchmark_limit", self.dev_benchmark_limit, minimum=0, integer=True)
        _number("validate.threads", self.threads, minimum=0, integer=True)
        _number("validate.throughput_batch_size", self.throughput_batch_size, minimum=1, integer=True)
        if not isinstance(self.chosen_backend, str) or not self.chosen_backend:
            raise ConfigError(f"validate.chosen_backend must be a backend name or 'auto', got {self.chosen_backend!r}")
