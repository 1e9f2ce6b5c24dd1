"""Gates: each a threshold, a measured value and pass/fail; written to ``gates.json``.

Thresholds come from the task config's ``gates:`` section (overridable with ``--set gates.X=...``).
A failed gate makes the validate stage return ``gate_error`` naming the gate and the margin, so the
runner exits non-zero (code 3) and prints it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.errors import ConfigError

GATES_FILE = "gates.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Gate:
    name: str
    threshold: float
    measured: float | None
    passed: bool
    unit: str
    kind: str  # "max": measured must be <= threshold; "min": >=
    detail: str = ""

    def margin(self) -> str:
        if self.measured is None:
            return f"{self.name}: not measured ({self.detail})"
        word = "above the maximum" if self.kind == "max" else "below the minimum"
        return (f"{self.name} {self.measured:.4g}{self.unit} is {word} {self.threshold:.4g}{self.unit} "
                f"by {abs(self.measured - self.threshold):.4g}{self.unit}" + (f" ({self.detail})" if self.detail else ""))


def threshold(name: str, value) -> float:
    """A threshold must be a real number; anything else is a config error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ConfigError(f"gates.{name} must be a number, got {value!r}")
    return float(value)


# A drop is a difference of counts over a count, in floats: 10 of 2,000 rows below the baseline is 0.5000000000000004
# points.  A limit is met at the limit itself: within that rounding, never more.
ROUNDING = 1e-9


def meets(measured: float, limit: float, kind: str) -> bool:
    """Whether ``measured`` is within ``limit``: at most it (``kind`` "max") or at least it ("min"), to float rounding.
    The one comparison behind the gates, compress's budget (``Candidate.within``) and the INT8 recipe searches'."""
    return measured <= limit + ROUNDING if kind == "max" else measured >= limit - ROUNDING


def check(name: str, limit, measured: float | None, *, kind: str, unit: str = "", detail: str = "") -> Gate:
    limit = threshold(name, limit)
    if measured is None:
        return Gate(name, limit, None, False, unit, kind, detail or "not measured")
    ok = meets(measured, limit, kind)
    return Gate(name, limit, float(measured), bool(ok), unit, kind, detail)


def failure_message(gates: list[Gate]) -> str | None:
    failed = [g for g in gates if not g.passed]
    return "; ".join(g.margin() for g in failed) if failed else None


@dataclass(frozen=True)
class GateReport:
    task: str
    chosen_backend: str
    gates: list[Gate]
    summary: dict  # accuracy, fp32_accuracy, sentences_per_s, throughput_ratio, batch_size, ...

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    def to_json(self) -> str:
        return json.dumps({"format_version": FORMAT_VERSION, "kind": "ernie-bundle-gates", "task": self.task,
                           "chosen_backend": self.chosen_backend, "passed": self.passed,
                           "gates": [asdict(g) for g in self.gates], "summary": self.summary}, indent=2, ensure_ascii=False)

    def write(self, out_dir: Path) -> Path:
        path = Path(out_dir) / GATES_FILE
        path.write_text(self.to_json(), encoding="utf-8")
        return path
