"""The ``quantization:`` section of a task config: how every INT8 form is calibrated and searched, for both CPU
engines (ONNX Runtime's recipe search, OpenVINO's NNCF) and the TensorRT (QDQ) form.  Read by compress, which
searches and builds every INT8 form of the selected candidate; export only assembles them.

Values are checked in ``__post_init__``: a bad one raises ``ConfigError`` naming the key before any work starts.
These keys lived in ``export:`` until 2026-11-25; a config that still puts them there is told the new place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config_checks import number as _number
from pipeline.errors import ConfigError


@dataclass
class QuantizationConfig:
    calibration_sentences: int = 256  # training sentences that calibrate the QDQ (TensorRT) INT8 ONNX
    calibration_batch_size: int = 16
    int8_embeddings: bool = True  # store the word-embedding table int8 in both INT8 ONNX forms
    ort_transformer_optimize: bool = False  # ORT BERT fusions before quantize_dynamic (slower here; see backend)
    # Calibrated activation scales in onnx/int8.onnx: a sentence's answer does not depend on its batch
    # mates (served == offline).  false keeps ORT's per-batch dynamic scales: ~8% faster, not reproducible.
    batch_independent_int8: bool = True
    # Accuracy-aware INT8 search (pipeline.quantization), used when batch_independent_int8 is true: recipes are
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
        _number("quantization.calibration_sentences", self.calibration_sentences, minimum=1, integer=True)
        _number("quantization.calibration_batch_size", self.calibration_batch_size, minimum=1, integer=True)
        _number("quantization.int8_search_sentences", self.int8_search_sentences, minimum=1, integer=True)
        _number("quantization.int8_max_fp32_matmuls", self.int8_max_fp32_matmuls, minimum=0, integer=True)
        _number("quantization.qdq_budget_points", self.qdq_budget_points, minimum=0.0)
        for key in ("int8_smooth_alphas", "openvino_smooth_alphas"):
            alphas = getattr(self, key)
            if not isinstance(alphas, list):
                raise ConfigError(f"quantization.{key} must be a list of numbers in (0, 1), got {alphas!r}")
            for i, a in enumerate(alphas):
                _number(f"quantization.{key}[{i}]", a)
                if not 0 < a < 1:
                    raise ConfigError(f"quantization.{key}[{i}] must be in (0, 1), got {a!r}")
        if self.int8_reduce_range not in ("auto", True, False, "true", "false"):
            raise ConfigError(f"quantization.int8_reduce_range must be auto, true or false, got {self.int8_reduce_range!r}")
        if self.int8_reduce_range in ("true", "false"):  # --set gives strings; one spelling from here on
            self.int8_reduce_range = self.int8_reduce_range == "true"
        for name in ("int8_embeddings", "ort_transformer_optimize", "batch_independent_int8"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"quantization.{name} must be true or false, got {getattr(self, name)!r}")
