"""Running a model over a FeatureSet: raw outputs per feature, the task's score, throughput."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from pipeline.batching import eval_batch_order, iter_batches
from pipeline.kinds.base import FeatureSet, Score, trim_outputs
from pipeline.progress import progress


@dataclass(frozen=True)
class Evaluation:
    outputs: list[np.ndarray]  # per feature, in FeatureSet order ([C], or [L, C] for token-level kinds)
    score: Score
    # 0: the model's own dygraph outputs; else an engine's in its place (pipeline.fp32_evaluation), checked to be
    # within this of dygraph's: what a later check of the same weights against these outputs may allow
    atol: float = 0.0

    @property
    def metric(self) -> float:
        """The task's primary metric (accuracy, entity F1, reading F1) as a fraction."""
        return self.score.value

    @property
    def accuracy(self) -> float:  # classification's name for the primary metric
        return self.score.value

    def flat(self) -> np.ndarray:
        """Every output row stacked: [n, C] for classification, [total tokens, C] for token-level kinds."""
        if not self.outputs:
            return np.zeros((0, 0), np.float32)
        return np.concatenate([np.asarray(o, np.float32).reshape(-1, np.shape(o)[-1]) for o in self.outputs])


def run_outputs(forward: Callable[[np.ndarray, np.ndarray], np.ndarray], fs: FeatureSet, batch_size: int, desc: str) -> list[np.ndarray]:
    order = eval_batch_order(fs, batch_size)
    batches = progress(iter_batches(fs, order), total=len(order), desc=desc, unit="batch")
    return scatter_outputs(fs, order, (forward(b.input_ids, b.token_type_ids) for b in batches))


def scatter_outputs(fs: FeatureSet, order: list[np.ndarray], batch_outputs: Iterable[np.ndarray]) -> list[np.ndarray]:
    """Per feature, in FeatureSet order: each batch's raw outputs (the batches of ``order``) trimmed to its features'
    lengths."""
    outputs: list = [None] * len(fs)
    for indices, out in zip(order, batch_outputs):
        lengths = [len(fs.features[i].input_ids) for i in indices]
        for i, o in zip(indices, trim_outputs(fs.kind, np.asarray(out, dtype=np.float32), lengths)):
            outputs[int(i)] = o
    return outputs


def dygraph_forward(model) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """(input_ids, token_type_ids) -> outputs of a paddle dygraph model in eval mode, without gradients."""
    import paddle

    def forward(ids, types):
        with paddle.no_grad():
            return model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types)).numpy()

    return forward


def evaluate_dygraph(model, fs: FeatureSet, batch_size: int, desc: str = "eval") -> Evaluation:
    """Run a paddle dygraph model over ``fs`` without gradients and score it."""
    was_training = model.training
    model.eval()
    outputs = run_outputs(dygraph_forward(model), fs, batch_size, desc)
    if was_training:
        model.train()
    return Evaluation(outputs, fs.score(outputs))


def evaluate_session(session, fs: FeatureSet, batch_size: int, desc: str = "eval") -> Evaluation:
    """Evaluate any backend session (``.run(input_ids, token_type_ids) -> logits``) over ``fs``."""
    outputs = run_outputs(session.run, fs, batch_size, desc)
    return Evaluation(outputs, fs.score(outputs))


@dataclass(frozen=True)
class ThroughputResult:
    batch_size: int
    sentences_per_s: float  # sequences (model input rows) per second, median over repeats
    latency_ms_p50: float  # per batch
    latency_ms_p95: float
    latency_ms_p99: float
    batches: int  # distinct batches timed per repeat


def timing_batches(fs: FeatureSet, batch_size: int, max_batches: int | None):
    """Pre-built full batches of a fixed random order (dev lengths, dynamic padding), so only the model is
    timed and every session sees the same ones; a set smaller than one batch gives that one partial batch."""
    idx = np.random.RandomState(0).permutation(len(fs))
    batches = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    full = [b for b in batches if len(b) == batch_size]
    batches = (full[:max_batches] if max_batches else full) or batches[:1]
    return [fs.batch(b) for b in batches]


def warmup_batches(encoded: list, warmup: int) -> list:
    """The first ``warmup`` batches, then one of every padded width not seen yet: OpenVINO prepares its kernels
    per input shape on the first call (TNEWS: its first timed round ran 12% slower than the others), and an
    untimed call per shape keeps that out of the rounds, for every engine alike."""
    seen, out = set(), []
    for i, b in enumerate(encoded):
        width = b.input_ids.shape
        if (warmup > 0 and i < warmup) or (warmup > 0 and width not in seen):
            out.append(b)
        seen.add(width)
    return out


def measure_throughput(
    session,
    fs: FeatureSet,
    batch_size: int,
    *,
    warmup: int = 2,
    repeats: int = 5,
    max_batches: int | None = None,
) -> ThroughputResult:
    """Throughput on real features with dynamic padding (the dev length distribution), batch by batch.

    Batches are pre-built so only the model is timed.  Each repeat runs the same batches; the
    reported throughput is the median over repeats (machines here are shared and noisy), latencies are
    percentiles over every timed batch.
    """
    encoded = timing_batches(fs, batch_size, max_batches)
    for b in warmup_batches(encoded, warmup):
        session.run(b.input_ids, b.token_type_ids)
    rates, lat = [], []
    for _ in range(max(repeats, 1)):
        n, t_total = 0, 0.0
        for b in encoded:
            t0 = time.perf_counter()
            session.run(b.input_ids, b.token_type_ids)
            dt = time.perf_counter() - t0
            lat.append(dt * 1000)
            t_total += dt
            n += len(b.indices)
        rates.append(n / t_total if t_total > 0 else 0.0)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return ThroughputResult(batch_size, float(np.median(rates)), float(p50), float(p95), float(p99), len(encoded))


@dataclass(frozen=True)
class Interleaved:
    """Throughput of several sessions timed in alternating rounds, so machine noise hits all of them alike."""

    rates: dict[str, list[float]]  # sequences/s per round
    base: str
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)  # every timed batch of every round
    batch_size: int = 0
    batches: int = 0  # distinct batches per round

    def median(self, name: str) -> float:
        return float(np.median(self.rates[name]))

    def result(self, name: str) -> ThroughputResult:
        """``name``'s rounds as one ThroughputResult (median rate, per-batch latency percentiles): what
        ``measure_throughput`` would report, without timing the session a second time."""
        p50, p95, p99 = np.percentile(self.latencies_ms[name], [50, 95, 99])
        return ThroughputResult(self.batch_size, self.median(name), float(p50), float(p95), float(p99), self.batches)

    def ratios(self, name: str, base: str | None = None) -> list[float]:
        """Per-round ratios to ``base``: paired, so a slow round for both cancels out."""
        ref = self.rates[base or self.base]
        return [a / b for a, b in zip(self.rates[name], ref) if b > 0]

    def ratio(self, name: str, base: str | None = None) -> tuple[float, float, float]:
        """(median, min, max) of the per-round ratios."""
        r = self.ratios(name, base)
        return float(np.median(r)), float(min(r)), float(max(r))

    def within_noise(self, a: str, b: str) -> bool:
        """Whether the rounds disagree on which of the two is faster."""
        r = self.ratios(a, b)
        return min(r) <= 1.0 <= max(r)

    def wins(self, a: str, b: str) -> int:
        """The rounds in which ``a`` was faster than ``b``."""
        return sum(r > 1.0 for r in self.ratios(a, b))

    def spread(self, a: str, b: str) -> str:
        """``a`` against ``b`` as the reports write it: "[min-max of the per-round ratios; faster in W of N rounds]"."""
        _, lo, hi = self.ratio(a, b)
        return f"[{lo:.2f}-{hi:.2f}; faster in {self.wins(a, b)} of {len(self.ratios(a, b))} rounds]"

    def surely_faster(self, a: str, b: str, rounds: int) -> bool:
        """Whether ``a`` is faster than ``b`` as surely as by being faster in every one of ``rounds`` rounds
        (``sign_test``: 5 of 5, 9 of 10, 12 of 15 for 5)."""
        return sign_test(self.wins(a, b), len(self.ratios(a, b)), rounds)

    def extended(self, more: Interleaved) -> Interleaved:
        """These rounds and ``more`` (the same sessions timed again) as one set of rounds."""
        return Interleaved({n: self.rates[n] + more.rates[n] for n in self.rates}, self.base,
                           {n: self.latencies_ms.get(n, []) + more.latencies_ms.get(n, []) for n in self.rates},
                           self.batch_size, self.batches)


def sign_test(wins: int, n: int, rounds: int) -> bool:
    """A one-sided sign test of paired rounds: ``wins`` of ``n`` at least as unlikely, were the two equally fast, as
    winning every one of ``rounds`` (p <= 2**-rounds).  More rounds then let one slow round (a noisy machine's hiccup)
    pass without undoing what the others show."""
    return n > 0 and sum(math.comb(n, k) for k in range(wins, n + 1)) <= 2 ** (n - rounds)


def wait_until_idle(window_s: float = 0.005, limit_s: float = 0.5) -> float:
    """Block until this process has used (almost) no CPU for ``window_s``, or ``limit_s`` has passed; the seconds
    waited.  An engine's pool threads keep spinning after its last call returns, on the cores the next session timed
    needs: ONNX Runtime's ~45 ms at its defaults (the anchor's), OpenVINO's ~5-10 ms (Zen 4), Intel OpenMP's (Paddle)
    up to its 200 ms block time."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < window_s / 10:
            break
    return time.perf_counter() - start


def interleaved_throughput(sessions: dict[str, object], fs: FeatureSet, batch_size: int, *, rounds: int = 5,
                           max_batches: int = 40, warmup: int = 2) -> Interleaved:
    """Each round times every session once over the same pre-built batches (real dev lengths, dynamic
    padding).  One sample per candidate decided selections before: the same candidate measured 0.95x and
    1.31x FP32 in two runs; rounds interleaved across candidates and paired ratios fix that.

    Each session's turn starts once the process is idle (``wait_until_idle``): otherwise the one timed right after an
    ONNX Runtime session ran ~5-10% slower on its 8 batches, whichever it was, and the order of the rounds decided a
    close pair (TNEWS w7/12 against w2/3 OpenVINO INT8, Zen 4: 1.00x and 1.16x by order; 1.09x either way once idle)."""
    encoded = timing_batches(fs, batch_size, max_batches)
    for s in sessions.values():
        for b in warmup_batches(encoded, warmup):
            s.run(b.input_ids, b.token_type_ids)
    rates: dict[str, list[float]] = {name: [] for name in sessions}
    lat: dict[str, list[float]] = {name: [] for name in sessions}
    n = sum(len(b.indices) for b in encoded)
    for _ in progress(range(rounds), total=rounds, desc="interleaved timing", unit="round"):
        for name, s in sessions.items():
            wait_until_idle()
            t_round = 0.0
            for b in encoded:
                t0 = time.perf_counter()
                s.run(b.input_ids, b.token_type_ids)
                dt = time.perf_counter() - t0
                lat[name].append(dt * 1000)
                t_round += dt
            rates[name].append(n / t_round if t_round > 0 else 0.0)
    return Interleaved(rates, next(iter(sessions)), lat, batch_size, len(encoded))


# A duel the rounds leave open is timed again, ``rounds`` at a time, up to this many sets in all
DUEL_SETS = 3


def duels(sessions: dict, fs: FeatureSet, *, batch_size: int, batches: int, rounds: int,
          log: Callable[[str], None] = print, label: str = "") -> Callable[[str, str], Interleaved]:
    """``duel(a, b)``: sessions ``a`` and ``b`` alone in interleaved rounds over the same batches as the rounds of
    every session (already warmed on them), each pair timed once (the sessions stay open while ``duel`` is held).
    Each round of every session runs them all in turn, so the machine's drift between two of them is seconds wide;
    timed alone, back to back, they are told apart where those rounds could not.  While neither is faster as surely as
    by every one of ``rounds`` rounds (``sign_test``) and more rounds could still settle it, ``rounds`` more are timed
    (up to ``DUEL_SETS`` sets): seconds of timing, against minutes of distillation for a candidate that cannot win or
    a shipped model slower than the one beside it.  ``label`` starts its log line."""
    done: dict[frozenset, Interleaved] = {}

    def settles(wins: int, n: int) -> bool:
        return sign_test(wins, n, rounds) or sign_test(n - wins, n, rounds)

    def duel(a: str, b: str) -> Interleaved:
        key = frozenset((a, b))
        if key not in done:
            t = None
            for _ in range(DUEL_SETS):
                # warmup=0: the rounds of every session warmed these very sessions on these batches, every padded width
                more = interleaved_throughput({a: sessions[a], b: sessions[b]}, fs, batch_size, rounds=rounds,
                                              max_batches=batches, warmup=0)
                t = more if t is None else t.extended(more)
                n, wins, left = len(t.rates[a]), t.wins(a, b), rounds * DUEL_SETS - len(t.rates[a])
                if settles(wins, n) or not (settles(wins + left, n + left) or settles(wins, n + left)):
                    break
            done[key] = t
            med, lo, hi = t.ratio(a, b)
            log(f"{label}{a} against {b} alone: {med:.2f}x [{lo:.2f}-{hi:.2f}], faster in {t.wins(a, b)} of "
                f"{len(t.rates[a])} rounds")
        return done[key]

    return duel
