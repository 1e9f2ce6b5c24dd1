"""Benchmarks per backend: a fixed-shape grid (batch x sequence length) plus the real dev-set
length distribution with dynamic padding; warm-up, repeats, medians; peak memory.

Figures are only comparable within one run on one machine, which is why the validate stage
measures the FP32 baselines in the same run and reports every figure also as a ratio.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.evaluation import ThroughputResult, measure_throughput
from pipeline.kinds.base import FeatureSet
from pipeline.progress import progress


@dataclass(frozen=True)
class BenchmarkSettings:
    batch_sizes: list[int]
    seq_lens: list[int]
    warmup: int = 2
    repeats: int = 5
    dev_batch_size: int = 32
    dev_limit: int = 0  # > 0: only the first N dev features (model input rows) are timed


@dataclass(frozen=True)
class CellResult:
    batch_size: int
    seq_len: int
    sentences_per_s: float  # batch_size / median latency
    latency_ms_p50: float
    latency_ms_p95: float
    latency_ms_p99: float


@dataclass
class BackendBenchmark:
    backend: str
    grid: list[CellResult] = field(default_factory=list)
    dev: ThroughputResult | None = None  # real dev lengths, dynamic padding, dev_batch_size
    dev_batch1: ThroughputResult | None = None  # batch-1 latency on real dev lengths
    peak_rss_mb: float = 0.0  # resident memory added by creating and running the session
    model_bytes: int = 0

    def cell(self, batch_size: int, seq_len: int) -> CellResult | None:
        return next((c for c in self.grid if c.batch_size == batch_size and c.seq_len == seq_len), None)

    def as_dict(self) -> dict:
        return {
            "backend": self.backend,
            "grid": [asdict(c) for c in self.grid],
            "dev": asdict(self.dev) if self.dev else None,
            "dev_batch1": asdict(self.dev_batch1) if self.dev_batch1 else None,
            "peak_rss_mb": self.peak_rss_mb,
            "model_bytes": self.model_bytes,
        }


def resident_mb() -> float:
    """Current resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def path_bytes(path: Path) -> int:
    """A file's size (an OpenVINO IR ``.xml`` counts its ``.bin`` too), or every file under a directory."""
    path = Path(path)
    if path.is_file():
        weights = path.with_suffix(".bin") if path.suffix == ".xml" else None
        return path.stat().st_size + (weights.stat().st_size if weights and weights.is_file() else 0)
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def time_fixed_shape(session, batch_size: int, seq_len: int, vocab_size: int, *, warmup: int, repeats: int,
                     seed: int = 0) -> CellResult:
    """Latency of one fixed-shape batch of real-token ids (no padding), repeated."""
    rng = np.random.RandomState(seed + 1000 * batch_size + seq_len)
    # Ids >= 5 skip the special tokens, so nothing is padding and every position is computed.
    ids = rng.randint(5, max(vocab_size, 6), size=(batch_size, seq_len)).astype(np.int64)
    types = np.zeros_like(ids)
    for _ in range(warmup):
        session.run(ids, types)
    lat = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(ids, types)
        lat.append((time.perf_counter() - t0) * 1000)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return CellResult(batch_size, seq_len, float(batch_size * 1000.0 / p50), float(p50), float(p95), float(p99))


def benchmark_backend(name: str, make_session: Callable[[], object], vocab_size: int, examples: FeatureSet,
                      settings: BenchmarkSettings, model_path: Path | None = None,
                      dev_timing: ThroughputResult | None = None) -> BackendBenchmark:
    """Create the session (memory counted from before its creation) and time it on the grid and the dev set.

    ``dev_timing``: the backend's dev-length throughput already measured (validate's interleaved rounds), used
    as is: timing the same batches again cost TNEWS validate about 3 of its 7.7 minutes and gave a second,
    unpaired figure that the paired one then replaced."""
    before = resident_mb()
    session = make_session()
    peak = resident_mb()
    result = BackendBenchmark(name, model_bytes=path_bytes(model_path) if model_path else 0)
    cells = [(b, s) for b in settings.batch_sizes for s in settings.seq_lens]
    for b, s in progress(cells, total=len(cells), desc=f"benchmark {name} (grid)", unit="cell"):
        result.grid.append(time_fixed_shape(session, b, s, vocab_size, warmup=settings.warmup,
                                            repeats=settings.repeats))
        peak = max(peak, resident_mb())
    dev = examples.subset(range(min(settings.dev_limit, len(examples)))) if settings.dev_limit else examples
    if len(dev):
        result.dev = dev_timing or measure_throughput(session, dev, settings.dev_batch_size, warmup=settings.warmup,
                                                      repeats=settings.repeats)
        peak = max(peak, resident_mb())
        # Batch-1 latency on real lengths: at most 64 sentences keeps it cheap on the full dev set.
        result.dev_batch1 = measure_throughput(session, dev, 1, warmup=settings.warmup,
                                               repeats=max(1, settings.repeats // 2), max_batches=64)
    result.peak_rss_mb = max(0.0, peak - before)
    del session
    return result


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return float(value) / float(base)
