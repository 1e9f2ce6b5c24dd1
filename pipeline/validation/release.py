"""Release gating against a previous bundle: ``make gate TASK=tnews BASELINE=<previous gates.json>``.

Compares the current validate results (``runs/<task>/validate/out/gates.json`` unless ``--current``
names another) with a previous release's ``gates.json`` or ``metrics.json``, or its bundle's ``bundle.json`` (which
carries gates.json whole, and example_scores.json beside it): it fails (exit 3) when
accuracy dropped by more than ``gates.release_max_accuracy_drop`` points or the speed-up over FP32 by
more than ``gates.release_max_throughput_drop`` (a fraction) on the chosen backend.  The speed-up is
compared, not sentences/s: each report measures its FP32 baseline in the same run, so the ratio holds
across runs and machines where absolute times on shared, noisy machines do not.  The accuracy drop's gate detail
carries its 95% interval where both reports have the ``example_scores.json`` validate writes beside them (each dev
example's share of the metric, ``ExampleScores``) and both scored the same examples: the two releases are resampled
example by example, as validate pairs FP32 and the shipped form, and the detail says where the limit lies against
the interval (the verdict still reads the measured drop).  A report of another task than
``--task`` (gates.json's ``task``, perf.json's served ``model``), or a file that is not a report (hostile JSON
included: integers no float holds, nesting beyond reason), is bad input (exit 2), one line naming file and field.

Served speed too, with ``--baseline-perf`` (the previous release's ``make perf`` JSON; the current one is
``runs/<task>/perf.json`` unless ``--current-perf`` names another): for every request shape both reports measured
(items per request, concurrency) the served rate's ratio to its ceiling (1 / (1/model-only + 1/floor), all measured
in the same run, so the ratio holds across runs where requests/s do not) may not fall by more than
``gates.release_max_served_drop`` (a fraction); a change that halves the served rate fails like an accuracy one.
perf.json is ``PerfRecord`` (below): ``serving/tools/perf.py`` writes it, ``read_perf`` is its one reader.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Sequence, get_args, get_origin, get_type_hints

import numpy as np

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
    if isinstance(obj, dict) and isinstance(obj.get("gates"), dict) and "manifest_sha256" in obj:
        obj = obj["gates"]  # a bundle's bundle.json: validate's gates.json as packaged, whole
    if not isinstance(obj, dict) or "task" not in obj or not isinstance(obj.get("summary"), dict):
        raise DataError(f"{path}: not an ernie-bundle gates.json/metrics.json/bundle.json (fields 'task' and 'summary' "
                        "missing)")
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
                    max_throughput_drop: float, interval: str = "") -> list[Gate]:
    """Gates for a release: accuracy drop (points) and relative throughput drop vs the previous bundle; ``interval``:
    what the drop's interval says (``accuracy_interval``), beside the verdict, which reads the measured drop alone."""
    if current.task != baseline.task:
        raise DataError(f"{baseline.path}: baseline report is for task {_short(baseline.task)}, but the current bundle "
                        f"is task {_short(current.task)}; pass the previous report of the same task")
    acc_drop = 100.0 * (baseline.accuracy - current.accuracy)
    tput_drop = 1.0 - current.throughput_ratio / baseline.throughput_ratio  # both > 0 (read_report)
    backends = f"{current.chosen_backend} vs previous {baseline.chosen_backend}"
    return [
        check("release_accuracy_drop", max_accuracy_drop, acc_drop, kind="max", unit=" points",
              detail=f"{current.accuracy:.4f} vs previous {baseline.accuracy:.4f}; {backends}"
                     + (f"; {interval}" if interval else "")),
        check("release_throughput_drop", max_throughput_drop, tput_drop, kind="max",
              detail=f"speed-up over FP32 {current.throughput_ratio:.2f}x vs previous {baseline.throughput_ratio:.2f}x "
                     f"({current.sentences_per_s:.0f} vs {baseline.sentences_per_s:.0f} sentences/s, not compared)"),
    ]


# -- validate's scores per dev example (example_scores.json): written by validate, read back here ---------------------

SCORES_FILE = "example_scores.json"  # beside gates.json and metrics.json in validate's out folder


@dataclass(frozen=True)
class ExampleScores:
    """What each dev example added to the shipped form's metric (``PipelineKind.metric_parts``, one row per example,
    in dev order) and a key of those examples.  Two releases scored on the same examples are compared example by
    example, as validate compares FP32 and the shipped form: what both get wrong cancels, and the release gate's
    accuracy drop gets an interval (``uncertainty.parts_below``).  The field names are the JSON's."""

    task: str
    backend: str  # the shipped form (gates.json's chosen_backend)
    examples_key: str  # ``examples_key`` of the dev examples scored
    parts: list[list[float]]

    @classmethod
    def of(cls, kind, task: str, backend: str, examples: Sequence, predictions: Sequence) -> "ExampleScores":
        parts = [[int(x) if float(x).is_integer() else float(x) for x in kind.metric_parts(e, p)]
                 for e, p in zip(examples, predictions, strict=True)]
        return cls(task, backend, examples_key(examples), parts)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False), encoding="utf-8")


def examples_key(examples: Sequence) -> str:
    """A hash of the dev examples as scored: their texts and gold answers, in order (not where they were read from:
    ``Example.where`` and its like compare False, and a dev file moved is the same dev set)."""
    import hashlib

    def plain(obj):
        if is_dataclass(obj):
            return [plain(getattr(obj, f.name)) for f in fields(obj) if f.compare]
        return [plain(x) for x in obj] if isinstance(obj, (list, tuple)) else obj

    text = json.dumps([plain(e) for e in examples], ensure_ascii=False,
                      default=lambda x: x.item() if hasattr(x, "item") else str(x))  # a numpy number as its value
    return hashlib.sha256(text.encode()).hexdigest()


def read_scores(path: Path) -> ExampleScores:
    """example_scores.json as an ``ExampleScores``; anything else is bad input, one line naming the file and field."""
    path = Path(path)
    obj = _read_json(path, "example scores file")
    try:
        scores = _typed(ExampleScores, obj, path, "")
    except RecursionError:
        raise DataError(f"{path}: not a JSON example scores file (nested too deep to read)") from None
    if not scores.parts or not scores.parts[0]:
        raise DataError(f"{path}: parts must hold one list of numbers per dev example, got {_short(scores.parts)}")
    width = len(scores.parts[0])
    for i, row in enumerate(scores.parts):
        if len(row) != width:
            raise DataError(f"{path}: parts[{i}] holds {len(row)} numbers, parts[0] {width}: every example's are as many")
        if min(row) < 0:
            raise DataError(f"{path}: parts[{i}] must be numbers >= 0 (what the example adds to the metric), got {_short(row)}")
    return scores


def accuracy_interval(kind, current: ReportSummary, baseline: ReportSummary, limit: float) -> str:
    """What the release's accuracy drop is worth, for its gate's detail: its interval over the dev examples both
    releases scored, drawn the same for both, and what that says of the verdict (which reads the measured drop
    alone); or why there is none.  Each report's scores are the example_scores.json beside it."""
    found = {}
    for role, report in (("current", current), ("previous", baseline)):
        path = report.path.parent / SCORES_FILE
        if not path.is_file():
            return (f"no interval: no {SCORES_FILE} beside the {role} report (validate writes it beside gates.json "
                    "from stage version 14; keep it with the report)")
        scores = read_scores(path)
        value = float(kind.metric_of(np.asarray(scores.parts, dtype=np.float64).sum(axis=0)))
        if scores.task != report.task or abs(value - report.accuracy) > 1e-6:
            raise DataError(f"{path}: its parts give task {_short(scores.task)} {value:.6f}, but {report.path.name} beside "
                            f"it says task {_short(report.task)} summary.accuracy {report.accuracy:.6f}: not that "
                            "report's scores (keep the ones validate wrote with it)")
        found[role] = scores
    now, before = found["current"], found["previous"]
    if now.examples_key != before.examples_key:
        return (f"no interval: the releases were scored on different dev examples ({len(now.parts)} now, "
                f"{len(before.parts)} before, or as many with other texts or answers)")
    if len(now.parts[0]) != len(before.parts[0]):
        return (f"no interval: the releases' metrics add up different numbers per example ({len(now.parts[0])} now, "
                f"{len(before.parts[0])} before)")
    from pipeline.validation.uncertainty import parts_below

    _, interval = parts_below(kind, np.asarray(before.parts, dtype=np.float64), np.asarray(now.parts, dtype=np.float64))
    return (f"{interval.level:.0%} interval {interval.shown()} over resamples of the {interval.examples} dev examples "
            f"both scored: {interval.verdict(limit, 'the drop from the previous release')}")


# -- make perf's record (perf.json): written by serving/tools/perf.py, read back here ---------------------------------

@dataclass(frozen=True)
class Spread:
    """A figure's per-round values, their median and range (the median of an even count is the mean of the middle
    two); what the record holds for every measured figure."""

    median: float | None = None
    min: float | None = None
    max: float | None = None
    rounds: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        v = sorted(float(x) for x in values)
        if not v:
            return cls()
        mid = len(v) // 2
        return cls(v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2, v[0], v[-1], [float(x) for x in values])


@dataclass(frozen=True)
class ModelShare:
    """One composing model over one level's window, from Triton's statistics (deltas)."""

    model: str
    requests: int
    executions: int
    mean_batch: float
    queue_ms: float  # per request
    compute_ms: float  # input + infer + output, per request (a batch's time counts for each of its requests)


@dataclass(frozen=True)
class Level:
    """One perf_analyzer run: ``concurrency`` clients sending requests of ``items_per_request`` items."""

    concurrency: int
    requests_per_s: float  # perf_analyzer's inferences/s: items per second (one item per request, or 32 per request)
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    models: list[ModelShare] = field(default_factory=list)
    window_s: float = 0.0  # the perf_analyzer window these numbers came from (longer than asked when unstable)
    items_per_request: int = 1
    cores: dict[str, float] = field(default_factory=dict)  # process -> cores (tritonserver, stub <instance>, client)
    mean_ms: float = 0.0  # the client's mean latency (perf_analyzer's parts, added)
    server_ms: float = 0.0  # of it, the mean time inside Triton (queue and compute, as perf_analyzer splits it)


@dataclass(frozen=True)
class ShapeFigures:
    """One request shape (items per request x concurrency) over the rounds: rates in items/s, latencies in ms, CPU
    in µs per item; ratios within each round.  Floor, ceiling and CPU by process are None / empty where the server
    was not make perf's own (``--url``)."""

    items_per_request: int
    concurrency: int
    model_only_batch: str = ""  # how the model alone batches these items
    served_items_per_s: Spread = Spread()
    model_only_items_per_s: Spread = Spread()
    served_over_model_only: Spread | None = None
    p50_ms: Spread = Spread()
    p99_ms: Spread = Spread()
    offline_cpu_us_per_item: Spread = Spread()
    model_only_batch1_p50_ms: Spread | None = None  # a lone request (one item at concurrency 1): the model's own
    served_p50_minus_batch1_ms: Spread | None = None
    floor_items_per_s: Spread | None = None
    ceiling_items_per_s: Spread | None = None  # 1 / (1/model-only + 1/floor)
    served_over_ceiling: Spread | None = None
    served_cores: dict[str, float] = field(default_factory=dict)  # process -> cores, median over rounds
    served_cpu_us_per_item: Spread | None = None  # tritonserver and stubs (not the client)
    floor_cores: dict[str, float] = field(default_factory=dict)
    floor_cpu_us_per_item: Spread | None = None


@dataclass(frozen=True)
class PerfRecord:
    """``make perf``'s record, runs/<task>/perf.json; the field names are the JSON's."""

    model: str  # the served model: the task's name, or FastDeploy's example name with package.api fastdeploy
    summary: list[ShapeFigures]
    task: str | None = None  # bundle.json's task (reports before it: None)
    task_type: str = ""
    repository: str = ""
    seconds: float = 0.0  # the perf_analyzer window asked
    rounds: int = 1
    perf_analyzer: str = ""  # its version
    cpu: dict = field(default_factory=dict)  # pipeline.contract.CpuInfo.as_dict()
    package: dict = field(default_factory=dict)  # the bundle's package section
    layout: str = "ensemble"
    request_note: str = ""  # what one request is, where it is more than one item
    levels: list[Level] = field(default_factory=list)  # the last round's served level of each shape

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")

    @property
    def for_task(self) -> str | None:
        """The task it measured, where the record says (None: a FastDeploy-named model of a report before ``task``)."""
        if self.task is not None:
            return self.task
        return None if self.package.get("api") == "fastdeploy" else self.model  # our API serves the task by name

    def served_ratios(self) -> tuple[str, dict[tuple[int, int], float]]:
        """What the gate holds: (its name, {(items per request, concurrency): median served / ceiling}), served /
        model-only where a shape has no ceiling (a report of a server that was not make perf's own)."""
        ceiling = all(row.served_over_ceiling is not None for row in self.summary)
        return ("served / ceiling" if ceiling else "served / model-only",
                {(row.items_per_request, row.concurrency): (row.served_over_ceiling or row.served_over_model_only).median
                 for row in self.summary})


def read_perf(path: Path) -> PerfRecord:
    """perf.json as a ``PerfRecord``; anything else is bad input, one line naming the file and the field."""
    path = Path(path)
    obj = _read_json(path, "perf report", " (make perf TASK=<task> writes it)")
    rows = obj.get("summary") if isinstance(obj, dict) else None
    if not isinstance(rows, list) or not rows or not isinstance(obj.get("model"), str):
        raise DataError(f"{path}: not an ernie-bundle make perf report (fields 'model' and 'summary' missing; "
                        "a report from before served gates has no summary: run make perf again)")
    for i, row in enumerate(rows):  # the gate's own figures first, in its words
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
    try:
        return _typed(PerfRecord, obj, path, "")
    except RecursionError:
        raise DataError(f"{path}: not a JSON perf report (nested too deep to read)") from None


def _typed(kind, raw: object, path: Path, where: str):
    """``raw`` (parsed JSON) as ``kind``: a record dataclass, ``X | None``, list[X], dict[str, X], a plain dict,
    str, int or float.  Keys a record does not name are left out (reports written by earlier versions load)."""
    if get_origin(kind) is UnionType:  # X | None
        return None if raw is None else _typed(next(a for a in get_args(kind) if a is not type(None)), raw, path, where)
    if is_dataclass(kind):
        if not isinstance(raw, dict):
            raise DataError(f"{path}: {where or 'the report'} must be an object, got {_short(raw)}")
        hints = get_type_hints(kind)
        missing = [f.name for f in fields(kind) if f.name not in raw and f.default is MISSING
                   and f.default_factory is MISSING]
        if missing:
            raise DataError(f"{path}: {where or 'the report'}: field {missing[0]!r} missing")
        return kind(**{f.name: _typed(hints[f.name], raw[f.name], path, f"{where}.{f.name}".lstrip("."))
                       for f in fields(kind) if f.name in raw})
    if get_origin(kind) is list:
        if not isinstance(raw, list):
            raise DataError(f"{path}: {where} must be a list, got {_short(raw)}")
        return [_typed(get_args(kind)[0], x, path, f"{where}[{i}]") for i, x in enumerate(raw)]
    if kind is dict or get_origin(kind) is dict:
        if not isinstance(raw, dict):
            raise DataError(f"{path}: {where} must be an object, got {_short(raw)}")
        value = get_args(kind)[1] if get_args(kind) else None
        return {k: _typed(value, v, path, f"{where}[{_short(k)}]") if value else _plain(v, path, f"{where}[{_short(k)}]")
                for k, v in raw.items()}
    if kind is str and isinstance(raw, str):
        return raw
    if kind is int and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if kind is float and _number(raw) is not None:
        return _number(raw)
    what = {str: "a string", int: "a whole number", float: "a finite number"}[kind]
    raise DataError(f"{path}: {where} must be {what}, got {_short(raw)}")


def _plain(raw: object, path: Path, where: str) -> object:
    """A value kept as JSON (the bundle's package section, the CPU's facts): no number too long to write back."""
    if isinstance(raw, _LongInteger):
        raise DataError(f"{path}: {where} is {raw!r}: no report holds such a number")
    if isinstance(raw, dict):
        return {k: _plain(v, path, f"{where}[{_short(k)}]") for k, v in raw.items()}
    return [_plain(v, path, f"{where}[{i}]") for i, v in enumerate(raw)] if isinstance(raw, list) else raw


def check_task(task: str, report_task: str, path: Path, role: str) -> None:
    """A report of another task is bad input: the gate would compare, and pass, figures that are not this task's
    (OCNLI's gates.json and perf.json passed ``gate --task tnews``)."""
    if report_task != task:
        raise DataError(f"{path}: {role} is for task {_short(report_task)}, but --task is {task!r}: pass the reports of task "
                        f"{task} (the same task)")


def compare_served(current: PerfRecord, baseline: PerfRecord, *, max_drop: float, current_path: Path,
                   baseline_path: Path) -> list[Gate]:
    """One gate per request shape both reports measured: the relative drop of served efficiency."""
    if current.model != baseline.model:
        raise DataError(f"{baseline_path}: baseline perf report is for {_short(baseline.model)}, the current one for "
                        f"{_short(current.model)}; pass the previous perf report of the same task")
    (measure, now), (measure_before, before) = current.served_ratios(), baseline.served_ratios()
    if measure != measure_before:
        raise DataError(f"{baseline_path}: measures {measure_before}, the current report {measure}: run "
                        "both with make perf (which starts the floor beside the bundle)")
    shared = sorted(set(now) & set(before))
    if not shared:
        raise DataError(f"{baseline_path}: no request shape (items per request, concurrency) in common with "
                        f"{current_path}: run make perf with the same --concurrency")
    return [check(f"release_served_drop[{n} item(s) x c{c}]", max_drop, 1.0 - now[(n, c)] / before[(n, c)],
                  kind="max", detail=f"{measure} {now[(n, c)]:.2f} vs previous {before[(n, c)]:.2f}")
            for n, c in shared]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ernie-bundle gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name or YAML (its validate.release_* tolerances are used)")
    p.add_argument("--baseline", required=True,
                   help="the previous release's gates.json or metrics.json, or its bundle's bundle.json")
    p.add_argument("--current", help="the current gates.json (default: <runs-dir>/<task>/validate/out/gates.json)")
    p.add_argument("--runs-dir", default=None, help="where stage outputs are (default: ./runs)")
    p.add_argument("--baseline-perf", help="the previous release's make perf JSON: gate the served speed too")
    p.add_argument("--current-perf", help="the current make perf JSON (default: <runs-dir>/<task>/perf.json)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. gates.release_max_accuracy_drop=0.3")
    args = p.parse_args(argv)
    try:
        from pipeline.config import PROJECT_ROOT, load_task_config, parse_override
        from pipeline.kinds import get_kind

        cfg = load_task_config(args.task, dict(parse_override(o) for o in args.overrides))
        runs = Path(args.runs_dir) if args.runs_dir else PROJECT_ROOT / "runs"
        current_path = Path(args.current) if args.current else runs / cfg.task / "validate" / "out" / "gates.json"
        if not current_path.is_file() and not args.current:
            raise DataError(f"no current report at {current_path}: run the validate stage first (make bundle TASK={args.task})")
        current = read_report(current_path)
        baseline = read_report(Path(args.baseline))
        limit = cfg.gates.release_max_accuracy_drop
        # scores are read only for reports of this task (another is refused by name: compare_reports, check_task)
        interval = (accuracy_interval(get_kind(cfg), current, baseline, limit)
                    if current.task == baseline.task == cfg.task else "")
        gates = compare_reports(current, baseline, max_accuracy_drop=limit,
                                max_throughput_drop=cfg.gates.release_max_throughput_drop, interval=interval)
        check_task(cfg.task, current.task, current.path, "the current report")  # both the same task: compare_reports
        if args.baseline_perf:
            current_perf = Path(args.current_perf) if args.current_perf else runs / cfg.task / "perf.json"
            perf_now, perf_before = read_perf(current_perf), read_perf(Path(args.baseline_perf))
            gates += compare_served(perf_now, perf_before, max_drop=cfg.gates.release_max_served_drop,
                                    current_path=current_perf, baseline_path=Path(args.baseline_perf))
            for report, path, role in ((perf_now, current_perf, "the current perf report"),
                                       (perf_before, Path(args.baseline_perf), "the baseline perf report")):
                if report.for_task is not None:
                    check_task(cfg.task, report.for_task, path, role)
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
