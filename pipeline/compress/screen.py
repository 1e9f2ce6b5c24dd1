"""Speed first: before any distillation or recipe search, every planned candidate's architecture (width x depth x
engine x precision) is timed on this CPU, and only the candidates that can still win are built.

Speed does not depend on trained weights.  An architecture is the FP32 model narrowed to its width and cut to its
depth without importance or distillation (``dynabert.narrow_model``, ``dynabert.drop_layers``), exported to ONNX; each engine's INT8 form of it is the
engine's ``speed_form`` (every MatMul in INT8: the fastest its recipe search can pick, calibrated on one batch).
They are timed in interleaved rounds on dev lengths, as compress times its candidates (``Screen.timing``).

compress then builds candidates fastest first (``Screen.order``); a candidate is skipped when one already built and
within the accuracy budget is faster in every screened round (``Screen.cannot_win``): the slower one could be
selected only if the faster one had failed the budget, and it did not.  Two the screen's rounds cannot tell apart
are timed again alone, back to back (``Screen.duel``): each screened round runs every architecture in turn, so the
machine's drift between two of them is seconds wide, and two widths 10% apart (TNEWS w7/12 and w2/3 in OpenVINO INT8,
Zen 4) overlapped in it, yet were told apart in every duel but one.  That one (faster in 4 of 5 rounds, 0.93x in the
fifth) cost a cold run 4 minutes of distillation and search for a width that then tied: so a duel the rounds leave
open is timed for more rounds, and decided as surely as by every one of the screen's rounds (``evaluation.sign_test``:
9 of 10, 12 of 15).  Candidates a duel cannot tell apart are all built, and the selection rule decides among them as
before.  ``compress.screen: false`` builds every one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pipeline.compress.architecture import Architecture
from pipeline.compress.onnx_candidates import ONNX_FILE, Planned
from pipeline.evaluation import Interleaved, duels, interleaved_throughput


@dataclass(frozen=True)
class Skipped:
    """A planned candidate the screen showed cannot win: never built, listed in candidates.md with why."""

    name: str
    arch: Architecture
    runtime: str
    quantization: str
    reason: str

    def row(self) -> dict:
        return {"name": self.name, "width_mult": self.arch.width, "depth_mult": self.arch.depth, "runtime": self.runtime,
                "quantization": self.quantization, "reason": self.reason}


@dataclass(frozen=True)
class Screen:
    timing: Interleaved  # one entry per planned candidate, the unpruned FP32 first
    # duel(a, b): the two screened architectures timed again, alone and back to back (``evaluation.duels``); None: no second look
    duel: Callable[[str, str], Interleaved] | None = field(default=None, compare=False, repr=False)

    def ratio(self, name: str) -> tuple[float, float, float]:
        """(median, min, max) of its per-round speed ratios to the unpruned FP32."""
        return self.timing.ratio(name)

    def order(self, planned: Sequence[Planned]) -> list[Planned]:
        """Fastest screened median first; the unpruned FP32 (the baseline every drop counts from) and any candidate
        not screened first of all."""
        rates = self.timing.rates
        first = [p for p in planned if p.name == self.timing.base or p.name not in rates]  # unscreened: always built
        rest = sorted((p for p in planned if p not in first), key=lambda p: -self.timing.median(p.name))
        return first + rest

    def cannot_win(self, name: str, qualifying: Sequence[str]) -> str | None:
        """Why ``name`` cannot be selected, or None: a built candidate within budget is faster in every round of the
        screen, or, where those rounds disagree, as surely in a duel of the two (``evaluation.duels``; an unscreened candidate can
        always win).  A duel is timed only when no candidate is surely faster in the screen's own rounds: on the AVX2
        proxy, FP32 against unpruned OpenVINO INT8 (0.99x) was dueled, then w7/12 ORT INT8 (3.22x) decided."""
        if name not in self.timing.rates:
            return None
        rounds = len(self.timing.rates[self.timing.base])  # as sure as every one of the screen's rounds
        faster = [q for q in qualifying if q in self.timing.rates and self.timing.median(q) > self.timing.median(name)]
        for q in faster:
            if self.timing.surely_faster(q, name, rounds):
                return self._because(q, name, self.timing, "this CPU's screen")
        for q in faster if self.duel is not None else ():
            timing = self.duel(q, name)
            if timing.surely_faster(q, name, rounds):
                return self._because(q, name, timing, "this CPU, the two timed alone (the screen could not tell them apart)")
        return None

    @staticmethod
    def _because(q: str, name: str, timing: Interleaved, where: str) -> str:
        return f"{q} is within budget and {timing.ratio(q, name)[0]:.2f}x its speed on {where} {timing.spread(q, name)}"

    def short_of(self, min_ratio: float) -> str | None:
        """Why no candidate can meet a ``min_ratio`` x FP32 speed gate on this CPU, or None: even the best round of the
        fastest architecture is below it (said before any distillation, not after validate)."""
        names = [n for n in self.timing.rates if n != self.timing.base]
        if not names or min_ratio <= 0:
            return None
        fastest = max(names, key=self.timing.median)
        med, lo, hi = self.ratio(fastest)
        if hi >= min_ratio:
            return None
        return (f"no candidate can reach gates.min_throughput_ratio {min_ratio:g}x FP32 on this CPU: the fastest "
                f"architecture, {fastest}, screened {med:.2f}x [{lo:.2f}-{hi:.2f}]; validate's throughput gate will fail "
                "unless smaller architectures (compress.width_mult_list, depth_mult_list) are added or the gate is set "
                "for this CPU")

    def as_dict(self) -> dict:
        return {name: {"sent_per_s": self.timing.median(name), "x_fp32": list(self.ratio(name))}
                for name in self.timing.rates}


def screen(planned: Sequence[Planned], architecture: Callable[[Architecture], Path], dev, work_dir: Path, *,
           batch_size: int, batches: int, rounds: int, log: Callable[[str], None] = print,
           baseline: Callable[[], Path] | None = None) -> Screen:
    """Time every planned candidate's architecture in interleaved rounds.  ``architecture(arch)``: the FP32 ONNX its
    candidates are made from, untrained (``narrowed_onnx``); each INT8 entry is its engine's ``speed`` form of it.
    ``baseline()``: the stock unpruned FP32 ONNX the unpruned FP32 entry times, when that is another network."""
    from pipeline.backends.registry import cpu_engine
    from pipeline.compress.onnx_candidates import FP32_RUNTIME

    work_dir = Path(work_dir)
    sessions, onnx = {}, {}
    for p in planned:
        if p.search is None and not p.arch.pruned and baseline is not None:
            sessions[p.name] = cpu_engine(FP32_RUNTIME).open(baseline(), "fp32", {})
            continue
        fp32 = onnx[p.arch] = onnx.get(p.arch) or architecture(p.arch)
        if p.search is None:
            sessions[p.name] = cpu_engine(FP32_RUNTIME).open(fp32, "fp32", {})
            continue
        path = work_dir / p.name / p.search.engine.candidate_file
        p.search.speed(fp32, path)
        sessions[p.name] = p.search.engine.open(path, "int8", p.search.settings)
    log(f"[compress] speed-first screen: {len(sessions)} architectures ({', '.join(sessions)}) in {rounds} interleaved "
        f"rounds of {batches} batches of {batch_size}")
    timing = interleaved_throughput(sessions, dev, batch_size, rounds=rounds, max_batches=batches)
    out = Screen(timing, duels(sessions, dev, batch_size=batch_size, batches=batches, rounds=rounds, log=log,
                               label="[compress] screen: "))
    for name in sessions:
        med, lo, hi = out.ratio(name)
        log(f"[compress] screen {name}: {timing.median(name):.0f} sent/s, {med:.2f}x FP32 [{lo:.2f}-{hi:.2f}]")
    return out


def narrowed_onnx(model_dir: Path, num_labels: int, arch: Architecture, work_dir: Path, input_dtype: str, opset: int,
                  unpruned_onnx: Callable[[], Path]) -> Path:
    """An architecture as FP32 ONNX: the model narrowed to its width and cut to its depth with no importance order and
    no training (its answers are meaningless; its speed is the pruned model's), its last layer cut to the first token
    where its candidates' is (``ernie_models.first_token_only``).  The unpruned one is ``unpruned_onnx()``."""
    from pipeline.backends.onnxruntime.convert import export_onnx
    from pipeline.backends.paddle.convert import export_static
    from pipeline.compress.dynabert import shrink
    from pipeline.ernie_models import first_token_only
    from pipeline.modeling import load_classifier

    if not arch.pruned:
        return unpruned_onnx()
    out = Path(work_dir) / arch.name
    shutil.rmtree(out, ignore_errors=True)
    student, _ = shrink(load_classifier(model_dir, num_labels), arch)
    first_token_only(student)
    infer = export_static(student, out / "infer", input_dtype)
    return export_onnx(infer, out / ONNX_FILE, opset)
