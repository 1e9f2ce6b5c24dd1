"""One measured backend, typed: what validate reports per runtime (``metrics.json`` "backends", ``report.md``, the
plot) and what the gates and the package stage read from it.  ``as_dict`` keeps the JSON keys earlier reports have."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BackendRow:
    backend: str
    runtime: str  # onnxruntime | openvino | paddle
    device: str  # cpu | gpu
    form: str  # the exported form it ran (pipeline.contract.FORMS)
    precision: str
    quantized: bool
    metric: str  # accuracy | entity_f1 | f1: what ``accuracy`` is
    parity: dict[str, Any]  # pipeline.validation.parity.Parity: accuracy, drop, agreement, logit differences
    metrics: dict[str, Any]  # every metric of the kind's score
    sentences_per_s: float | None = None
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    latency_ms_p99: float | None = None
    batch1_p99_ms: float | None = None  # the fixed-shape grid's batch-1 cell at the longest length <= max_seq_len
    dev_batch1_p99_ms: float | None = None
    peak_rss_mb: float = 0.0
    model_mb: float = 0.0
    throughput_ratio: float | None = None  # vs its ratio base (FP32 of its runtime, or ratio_base), median of rounds
    throughput_ratio_range: list[float] | None = None
    throughput_rounds: int | None = None
    anchor_ratio: float | None = None  # vs ORT's quantize_dynamic one-liner, same rounds
    anchor_ratio_range: list[float] | None = None
    grid_ratios: dict[str, float | None] = field(default_factory=dict)
    dev_outputs: str = "evaluated here"  # or whose full-dev evaluation of the same file parity read (pipeline.dev_outputs)

    @property
    def accuracy(self) -> float:
        return self.parity["accuracy"]

    @property
    def accuracy_drop_points(self) -> float:
        return self.parity["accuracy_drop_points"]

    def as_dict(self) -> dict[str, Any]:
        out = {**self.parity, "metric": self.metric, "metrics": self.metrics, "runtime": self.runtime, "device": self.device,
               "form": self.form, "precision": self.precision, "quantized": self.quantized,
               "sentences_per_s": self.sentences_per_s, "latency_ms_p50": self.latency_ms_p50,
               "latency_ms_p95": self.latency_ms_p95, "latency_ms_p99": self.latency_ms_p99,
               "batch1_p99_ms": self.batch1_p99_ms, "dev_batch1_p99_ms": self.dev_batch1_p99_ms,
               "peak_rss_mb": self.peak_rss_mb, "model_mb": self.model_mb, "throughput_ratio": self.throughput_ratio,
               "grid_ratios": self.grid_ratios, "dev_outputs": self.dev_outputs}
        for key in ("throughput_ratio_range", "throughput_rounds", "anchor_ratio", "anchor_ratio_range"):
            if getattr(self, key) is not None:  # only rows timed in the interleaved rounds have them
                out[key] = getattr(self, key)
        return out
