"""How sure the dev set makes validate's accuracy figures: intervals from dev examples drawn again with replacement.

A drop of 0.35 points on 10,000 dev texts is 35 more wrong answers than FP32's, out of some 500 that changed either
way: another dev set of the same size would give another drop.  The interval says how far: each resample draws the
dev examples again (the same draw for FP32, the shipped form and the anchor, so what both of a pair get wrong
cancels), and the interval holds the middle ``level`` of the resampled figures (a percentile bootstrap).  Every
kind's metric is a function of numbers that add over examples (``PipelineKind.metric_parts`` / ``metric_of``), so a
resample is a sum, not a scoring run.  The resamples come from a fixed seed: the same predictions give the same interval.

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
_CHUNK = 100  # resamples drawn at a time: ~30 MB of indices and rows for 10,000 examples
_BASE = "base"  # drops_below's reference among the forms it resamples


@dataclass(frozen=True)
class Interval:
    """The middle ``level`` of the resampled figures, in the figure's unit (metric: a fraction; drop: points)."""

    low: float
    high: float
    level: float
    resamples: int
    examples: int

    def shown(self, fmt: str = "+.2f") -> str:
        return f"[{self.low:{fmt}}, {self.high:{fmt}}]"

    def as_dict(self) -> dict:
        return asdict(self)

    def verdict(self, limit: float, what: str = "the drop") -> str:
        """What the interval of a drop (points) says of a gate's verdict on it, ``limit`` points at most."""
        points = f"{limit:g} point" + ("" if limit == 1 else "s")
        if self.high <= limit:
            return f"the whole interval is within {points}"
        if self.low > limit:
            return f"the whole interval is over {points}"
        return f"{points} lies inside the interval: this dev set cannot tell on which side of the limit {what} is"


@dataclass(frozen=True)
class DevUncertainty:
    """The shipped form's metric, its drop from FP32 and (when the anchor's answers are given) how far it scores
    below the anchor, in points, each as the whole dev set gives it (the sums of every example's parts: the kind's
    score, which validate's tests hold it to) and with its interval."""

    metric_value: float
    drop_value: float
    metric: Interval
    drop_points: Interval
    below_anchor_value: float | None = None  # the anchor's metric minus the shipped form's, points (< 0: above it)
    below_anchor_points: Interval | None = None

    def as_dict(self) -> dict:
        d = self.drop_points
        forms = "FP32, the anchor and the shipped form" if self.below_anchor_points else "FP32 and the shipped form"
        anchor = {"below_anchor_value": self.below_anchor_value,
                  "below_anchor_points": self.below_anchor_points.as_dict()} if self.below_anchor_points else {}
        return {"metric_value": self.metric_value, "drop_value": self.drop_value, "metric": self.metric.as_dict(),
                "drop_points": d.as_dict(), **anchor,
                "how": f"the middle {d.level:.0%} of {d.resamples} resamples of the {d.examples} dev examples, each "
                       f"drawn with replacement and the same for {forms}"}

    def line(self, metric_label: str) -> str:
        d, a = self.drop_points, self.below_anchor_points
        return (f"{d.level:.0%} interval over {d.resamples} resamples of the {d.examples} dev examples: "
                f"{metric_label} {self.metric.shown('.4f')}, drop {d.shown()} points"
                + (f", below the anchor {a.shown()} points" if a else ""))

    def verdict(self, limit: float) -> str:
        """What the interval says of ``gates.max_accuracy_drop``'s verdict."""
        return self.drop_points.verdict(limit)


def dev_uncertainty(kind, examples: Sequence, fp32: Sequence, shipped: Sequence, anchor: Sequence | None = None, *,
                    resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> DevUncertainty:
    """Intervals for the shipped form's metric, its drop from FP32 and, with ``anchor``, its distance below the
    anchor (``fp32``, ``shipped``, ``anchor``: ``kind.predictions``, one per example in ``examples``' order)."""
    forms = {"FP32": fp32, "shipped": shipped, **({"anchor": anchor} if anchor is not None else {})}
    whole, resampled = metrics_resampled(kind, examples, forms, resamples, seed)
    n = len(examples)
    below = {}
    if anchor is not None:
        below = {"below_anchor_value": _points(whole["anchor"], whole["shipped"]),
                 "below_anchor_points": _middle(_points(resampled["anchor"], resampled["shipped"]), level, n)}
    return DevUncertainty(whole["shipped"], _points(whole["FP32"], whole["shipped"]),
                          _middle(resampled["shipped"], level, n),
                          _middle(_points(resampled["FP32"], resampled["shipped"]), level, n), **below)


def drops_below(kind, examples: Sequence, base: Sequence, forms: dict[str, Sequence], *, resamples: int = RESAMPLES,
                level: float = LEVEL, seed: int = SEED) -> dict[str, tuple[float, Interval]]:
    """Each of ``forms``' points below ``base`` on the whole dev set and its interval, all on the same draws (``make
    bench``'s rows against ORT FP32)."""
    whole, resampled = metrics_resampled(kind, examples, {_BASE: base, **forms}, resamples, seed)
    return {name: (_points(whole[_BASE], whole[name]),
                   _middle(_points(resampled[_BASE], resampled[name]), level, len(examples))) for name in forms}


def parts_below(kind, base: np.ndarray, parts: np.ndarray, *, resamples: int = RESAMPLES, level: float = LEVEL,
                seed: int = SEED) -> tuple[float, Interval]:
    """How many points ``parts`` scores below ``base`` on the whole dev set, and its interval: each a form's
    ``kind.metric_parts`` of the same examples in the same order ([N, k]), drawn the same (``make gate``: the
    previous release against this one)."""
    sums = resampled_sums([base, parts], resamples, seed)
    return (float(_points(kind.metric_of(base.sum(axis=0)), kind.metric_of(parts.sum(axis=0)))),
            _middle(_points(kind.metric_of(sums[0]), kind.metric_of(sums[1])), level, len(base)))


def metrics_resampled(kind, examples: Sequence, forms: dict, resamples: int, seed: int) -> tuple[dict, dict]:
    """Each form's metric on the whole dev set, and on every resample ([resamples]), all forms on the same draws
    (``forms``: a name -> ``kind.predictions``, one per example in ``examples``' order)."""
    if not examples or any(len(p) != len(examples) for p in forms.values()):
        raise ValueError(f"{len(examples)} examples, but predictions: "
                         + ", ".join(f"{len(p)} {name}" for name, p in forms.items()))
    parts = [np.array([kind.metric_parts(e, p) for e, p in zip(examples, f)], dtype=np.float64) for f in forms.values()]
    sums = resampled_sums(parts, resamples, seed)
    return ({name: float(kind.metric_of(p.sum(axis=0))) for name, p in zip(forms, parts)},
            {name: kind.metric_of(s) for name, s in zip(forms, sums)})


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


def _points(a, b):
    """How many points ``a`` (a fraction, or one per resample) is above ``b``."""
    return 100.0 * (a - b)


def _middle(values: np.ndarray, level: float, examples: int) -> Interval:
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return Interval(float(low), float(high), level, len(values), examples)
