"""How sure the dev set makes validate's accuracy figures: intervals from dev examples drawn again with replacement.

A drop of 0.35 points on 10,000 dev texts is 35 more wrong answers than FP32's, out of some 500 that changed either
way: another dev set of the same size would give another drop.  The interval says how far: each resample draws the
dev examples again (the same draw for FP32 and the shipped form, so what both get wrong cancels), and the interval
holds the middle ``level`` of the resampled figures (a percentile bootstrap).  Every kind's metric is a function of
numbers that add over examples (``PipelineKind.metric_parts`` / ``metric_of``), so a resample is a sum, not a
scoring run.  The resamples come from a fixed seed: the same predictions give the same interval.

Reported beside the gates, never gating: a gate still reads the dev set's own figure.  Where a gate's limit lies
inside the interval, the report says so: this dev set cannot tell on which side of the limit the model is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0
_CHUNK = 100  # resamples drawn at a time: ~8 MB of indices for 10,000 examples


@dataclass(frozen=True)
class Interval:
    """The middle ``level`` of the resampled figures, in the figure's unit (metric: a fraction; drop: points)."""

    low: float
    high: float
    level: float
    resamples: int
    examples: int

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def shown(self, fmt: str = "+.2f") -> str:
        return f"[{self.low:{fmt}}, {self.high:{fmt}}]"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DevUncertainty:
    """The shipped form's metric and its drop from FP32 in points, each as the whole dev set gives it (the sums of
    every example's parts: the kind's score, which validate's tests hold it to) and with its interval."""

    metric_value: float
    drop_value: float
    metric: Interval
    drop_points: Interval

    def as_dict(self) -> dict:
        return {"metric_value": self.metric_value, "drop_value": self.drop_value, "metric": self.metric.as_dict(),
                "drop_points": self.drop_points.as_dict(),
                "how": f"the middle {self.drop_points.level:.0%} of {self.drop_points.resamples} resamples of the "
                       f"{self.drop_points.examples} dev examples, each drawn with replacement and the same for FP32 "
                       "and the shipped form"}

    def line(self, metric_label: str) -> str:
        d = self.drop_points
        return (f"{d.level:.0%} interval over {d.resamples} resamples of the {d.examples} dev examples: "
                f"{metric_label} {self.metric.shown('.4f')}, drop {d.shown()} points")

    def verdict(self, limit: float) -> str:
        """What the interval says of ``gates.max_accuracy_drop``'s verdict."""
        d, points = self.drop_points, f"{limit:g} point" + ("" if limit == 1 else "s")
        if d.high <= limit:
            return f"the whole interval is within {points}"
        if d.low > limit:
            return f"the whole interval is over {points}"
        return f"{points} lies inside the interval: this dev set cannot tell on which side of the limit the drop is"


def dev_uncertainty(kind, examples: Sequence, fp32: Sequence, shipped: Sequence, *, resamples: int = RESAMPLES,
                    level: float = LEVEL, seed: int = SEED) -> DevUncertainty:
    """Intervals for the shipped form's metric and its drop from FP32 (``fp32``, ``shipped``: ``kind.predictions``,
    one per example in ``examples``' order)."""
    if not (len(examples) == len(fp32) == len(shipped)) or not examples:
        raise ValueError(f"{len(examples)} examples, {len(fp32)} FP32 and {len(shipped)} shipped predictions")
    parts_fp32 = np.array([kind.metric_parts(e, p) for e, p in zip(examples, fp32)], dtype=np.float64)
    parts_shipped = np.array([kind.metric_parts(e, p) for e, p in zip(examples, shipped)], dtype=np.float64)
    whole = float(kind.metric_of(parts_shipped.sum(axis=0)))
    drop_whole = 100.0 * (float(kind.metric_of(parts_fp32.sum(axis=0))) - whole)
    fp32_sums, shipped_sums = resampled_sums((parts_fp32, parts_shipped), resamples, seed)
    metric = kind.metric_of(shipped_sums)
    drop = 100.0 * (kind.metric_of(fp32_sums) - metric)
    n = len(examples)
    return DevUncertainty(whole, drop_whole, _middle(metric, level, n), _middle(drop, level, n))


def resampled_sums(parts: Sequence[np.ndarray], resamples: int, seed: int) -> list[np.ndarray]:
    """Each of ``parts`` ([N, k], one row per example) summed over the same ``resamples`` draws of N rows with
    replacement: [resamples, k] each."""
    n = len(parts[0])
    rng = np.random.default_rng(seed)
    out = [np.empty((resamples, p.shape[1])) for p in parts]
    for start in range(0, resamples, _CHUNK):
        rows = rng.integers(0, n, size=(min(_CHUNK, resamples - start), n))
        for p, o in zip(parts, out):
            o[start:start + len(rows)] = p[rows].sum(axis=1)
    return out


def _middle(values: np.ndarray, level: float, examples: int) -> Interval:
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return Interval(float(low), float(high), level, len(values), examples)
