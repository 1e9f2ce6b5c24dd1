"""Release gating against a previous bundle: ``make gate TASK=tnews BASELINE=<previous gates.json>``.

Compares the current validate results (``runs/<task>/validate/out/gates.json`` unless ``--current``
names another) with a previous bundle's ``gates.json`` or ``metrics.json``: it fails (exit 3) when
accuracy dropped by more than ``gates.release_max_accuracy_drop`` points or the speed-up over FP32 by
more than ``gates.release_max_throughput_drop`` (a fraction) on the chosen backend.  The speed-up is
compared, not sentences/s: each report measures its FP32 baseline in the same run, so the ratio holds
across runs and machines where absolute times on shared, noisy machines do not.  A report of another task than
``--task`` (gates.json's ``task``, perf.json's served ``model``), or a file that is not a report (hostile JSON
included: integers no float holds, nesting beyond reason), is bad input (exit 2), one line naming file and field.

Served speed too, with ``--baseline-perf`` (the previous release's ``make perf`` JSON; the current one is
``runs/<task>/perf.json`` unless ``--current-perf`` names another): for every request shape both reports measured
(items per request, concurrency) the served rate's ratio to its ceiling (1 / (1/model-only + 1/floor), all measured
in the same run, so the ratio holds across runs where requests/s do not) may not fall by more than
``gates.release_max_served_drop`` (a fraction); a change that halves the served rate fails like an accuracy one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DataError, PipelineError
from pipeline.validation.gates import Gate, check, failure_message


@dataclass(frozen=True)
class ReportSummary:
    path: Path
    task: str
    chosen_backend: str
    accuracy: float
    sentences_per_s: float
    throughput_ratio: float  # speed-up over FP32 of the same runtime, measured in the same run


class _LongInteger:
    """An integer literal too long for any number a report holds (a float cannot carry it, and Python refuses to
    convert more than 4,300 digits): kept as its length, so that the field that holds it is named, not a traceback."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def _parse_int(text: str) -> int | _LongInteger:
    digits = len(text.lstrip("-"))
    return int(text) if digits <= _MAX_DIGITS else _LongInteger(digits)


_MAX_DIGITS = 300  # 10**300 still converts to a float; 10**309 does not


def _short(value: object, limit: int = 60) -> str:
    """What a message shows of a value: its repr, bounded (a deep or long one is cut, never a traceback)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        text = f"a deeply nested {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: object) -> float | None:
    """``value`` as a finite float, None when it is not one (not a number, a bool, NaN, infinite, too long)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _read_json(path: Path, what: str, hint: str = "") -> object:
    """A report file as JSON; missing, not JSON, nested beyond reason: one line (exit 2)."""
    if not path.is_file():
        raise DataError(f"{what} not found: {path}{hint}")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_int=_parse_int)
    except RecursionError:
        raise DataError(f"{path}: not a JSON {what} (nested too deep to read)") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DataError(f"{path}: not a JSON {what} ({_short(str(exc), 120)})") from None


def _task_field(path: Path, obj: dict, key: str, what: str) -> str:
    value = obj[key]
    if not isinstance(value, str) or not value:
        raise DataError(f"{path}: {key} must be the task's name, got {_short(value)} (not an ernie-bundle {what})")
    return value


def read_report(path: Path) -> ReportSummary:
    path = Path(path)
    obj = _read_json(path, "report")
    if not isinstance(obj, dict) or "task" not in obj or not isinstance(obj.get("summary"), dict):
        raise DataError(f"{path}: not an ernie-bundle gates.json/metrics.json (fields 'task' and 'summary' missing)")
    summary = obj["summary"]
    # What each field can hold: the task metric is a fraction (every kind stores one; 99 is a percentage written by
    # hand), the speed-up a positive ratio; NaN or 0 would otherwise pass every comparison.
    allowed = {"accuracy": (0.0, 1.0, "a fraction in [0, 1]"), "sentences_per_s": (0.0, math.inf, "a number >= 0"),
               "throughput_ratio": (0.0, math.inf, "a number > 0")}
    values = {}
    for key, (lo, hi, what) in allowed.items():
        raw = summary.get(key)
        if isinstance(raw, _LongInteger):
            raise DataError(f"{path}: summary.{key} is {raw!r}: no report holds such a number (it must be {what})")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise DataError(f"{path}: summary.{key} must be a number, got {_short(raw)}")
        value = _number(raw)
        if value is None or not lo <= value <= hi or (key == "throughput_ratio" and value <= 0):
            raise DataError(f"{path}: summary.{key} must be {what}, got {_short(raw)}")
        values[key] = value
    task = _task_field(path, obj, "task", "gates.json/metrics.json")
    backend = obj.get("chosen_backend", "")
    return ReportSummary(path, task, backend if isinstance(backend, str) else _short(backend),
                         values["accuracy"], values["sentences_per_s"], values["throughput_ratio"])


def compare_reports(current: ReportSummary, baseline: ReportSummary, *, max_accuracy_drop: float,
                    max_throughput_drop: float) -> list[Gate]:
    """Gates for a release: accuracy drop (points) and relative throughput drop vs the previous bundle."""
    if current.task != baseline.task:
        raise DataError(f"{baseline.path}: baseline report is for task {_short(baseline.task)}, but the current bundle "
                        f"is task {_short(current.task)}; pass the previous report of the same task")
    acc_drop = 100.0 * (baseline.accuracy - current.accuracy)
    tput_drop = 1.0 - current.throughput_ratio / baseline.throughput_ratio  # both > 0 (read_report)
    backends = f"{current.chosen_backend} vs previous {baseline.chosen_backend}"
    return [
        check("release_accuracy_drop", max_accuracy_drop, acc_drop, kind="max", unit=" points",
              detail=f"{current.accuracy:.4f} vs previous {baseline.accuracy:.4f}; {backends}"),
        check("release_throughput_drop", max_throughput_drop, tput_drop, kind="max",
              detail=f"speed-up over FP32 {current.throughput_ratio:.2f}x vs previous {baseline.throughput_ratio:.2f}x "
                     f"({current.sentences_per_s:.0f} vs {baseline.sentences_per_s:.0f} sentences/s, not compared)"),
    ]


@dataclass(frozen=True)
class ServedSummary:
    """A ``make perf`` report's served efficiency per request shape: (items per request, concurrency) -> the
    median over rounds of served / ceiling (served / model-only where the report has no floor), and its name."""

    path: Path
    task: str  # the served model's name: the task's, or FastDeploy's example name with package.api fastdeploy
    ratios: dict
    measure: str
    for_task: str | None = None  # the task it measured, where the report says (None: a FastDeploy-named model)


def read_perf(path: Path) -> ServedSummary:
    path = Path(path)
    obj = _read_json(path, "perf report", " (make perf TASK=<task> writes it)")
    rows = obj.get("summary") if isinstance(obj, dict) else None
    if not isinstance(rows, list) or not rows or not isinstance(obj.get("model"), str):
        raise DataError(f"{path}: not an ernie-bundle make perf report (fields 'model' and 'summary' missing; "
                        "a report from before served gates has no summary: run make perf again)")
    ratios, names = {}, set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{path}: summary[{i}] is not an object")
        name = "served_over_ceiling" if isinstance(row.get("served_over_ceiling"), dict) else "served_over_model_only"
        raw = (row.get(name) or {}).get("median") if isinstance(row.get(name), dict) else None
        value = _number(raw)
        if value is None or value <= 0:
            raise DataError(f"{path}: summary[{i}]: needs {name}.median > 0, got {_short(raw)}")
        for key in ("items_per_request", "concurrency"):
            x = row.get(key)
            if isinstance(x, bool) or not isinstance(x, int) or not 0 < x <= 2**31:
                raise DataError(f"{path}: summary[{i}].{key} must be a whole number from 1 to 2**31, got {_short(x)}")
        shape = (row["items_per_request"], row["concurrency"])
        ratios[shape] = value
        names.add(name)
    package = obj.get("package") if isinstance(obj.get("package"), dict) else {}
    for_task = obj.get("task") if isinstance(obj.get("task"), str) else \
        None if package.get("api") == "fastdeploy" else obj["model"]  # our API serves the task under its own name
    return ServedSummary(path, obj["model"], ratios, "served / ceiling" if names == {"served_over_ceiling"}
                         else "served / model-only", for_task)


def check_task(task: str, report_task: str, path: Path, role: str) -> None:
    """A report of another task is bad input: the gate would compare, and pass, figures that are not this task's
    (OCNLI's gates.json and perf.json passed ``gate --task tnews``)."""
    if report_task != task:
        raise DataError(f"{path}: {role} is for task {_short(report_task)}, but --task is {task!r}: pass the reports of task "
                        f"{task} (the same task)")


def compare_served(current: ServedSummary, baseline: ServedSummary, *, max_drop: float) -> list[Gate]:
    """One gate per request shape both reports measured: the relative drop of served efficiency."""
    if current.task != baseline.task:
        raise DataError(f"{baseline.path}: baseline perf report is for {_short(baseline.task)}, the current one for "
                        f"{_short(current.task)}; pass the previous perf report of the same task")
    if current.measure != baseline.measure:
        raise DataError(f"{baseline.path}: measures {baseline.measure}, the current report {current.measure}: run "
                        "both with make perf (which starts the floor beside the bundle)")
    shared = sorted(set(current.ratios) & set(baseline.ratios))
    if not shared:
        raise DataError(f"{baseline.path}: no request shape (items per request, concurrency) in common with "
                        f"{current.path}: run make perf with the same --concurrency")
    return [check(f"release_served_drop[{n} item(s) x c{c}]", max_drop, 1.0 - current.ratios[(n, c)] / baseline.ratios[(n, c)],
                  kind="max", detail=f"{current.measure} {current.ratios[(n, c)]:.2f} vs previous {baseline.ratios[(n, c)]:.2f}")
            for n, c in shared]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ernie-bundle gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name or YAML (its validate.release_* tolerances are used)")
    p.add_argument("--baseline", required=True, help="the previous bundle's gates.json or metrics.json")
    p.add_argument("--current", help="the current gates.json (default: <runs-dir>/<task>/validate/out/gates.json)")
    p.add_argument("--runs-dir", default=None, help="where stage outputs are (default: ./runs)")
    p.add_argument("--baseline-perf", help="the previous release's make perf JSON: gate the served speed too")
    p.add_argument("--current-perf", help="the current make perf JSON (default: <runs-dir>/<task>/perf.json)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. gates.release_max_accuracy_drop=0.3")
    args = p.parse_args(argv)
    try:
        from pipeline.config import PROJECT_ROOT, load_task_config, parse_override

        cfg = load_task_config(args.task, dict(parse_override(o) for o in args.overrides))
        runs = Path(args.runs_dir) if args.runs_dir else PROJECT_ROOT / "runs"
        current_path = Path(args.current) if args.current else runs / cfg.task / "validate" / "out" / "gates.json"
        if not current_path.is_file() and not args.current:
            raise DataError(f"no current report at {current_path}: run the validate stage first (make bundle TASK={cfg.task})")
        current = read_report(current_path)
        baseline = read_report(Path(args.baseline))
        gates = compare_reports(current, baseline, max_accuracy_drop=cfg.gates.release_max_accuracy_drop,
                                max_throughput_drop=cfg.gates.release_max_throughput_drop)
        check_task(cfg.task, current.task, current.path, "the current report")  # both the same task: compare_reports
        if args.baseline_perf:
            current_perf = Path(args.current_perf) if args.current_perf else runs / cfg.task / "perf.json"
            perf_now, perf_before = read_perf(current_perf), read_perf(Path(args.baseline_perf))
            gates += compare_served(perf_now, perf_before, max_drop=cfg.gates.release_max_served_drop)
            for report in (perf_now, perf_before):
                if report.for_task is not None:
                    check_task(cfg.task, report.for_task, report.path,
                               "the current perf report" if report is perf_now else "the baseline perf report")
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for g in gates:
        print(f"{'PASS' if g.passed else 'FAIL'}  {g.name}: measured {g.measured:.4g}, limit {g.threshold:.4g}  ({g.detail})")
    msg = failure_message(gates)
    if msg:
        print(f"release gate FAILED: {msg}", file=sys.stderr)
        return 3
    print("release gate passed")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
