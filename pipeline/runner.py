"""Runs the stage graph: selection, caching, atomic outputs, records, timing and the final summary."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.config import TaskConfig
from pipeline.env import versions
from pipeline.errors import GateFailed, NoSpace, PipelineError, StageCrashed, StageNotReady, UserInputError, no_space
from pipeline.graph import STAGE_NAMES, STAGES, get_stage
from pipeline.stage import Stage
from pipeline.hashing import stage_key, tree_hashes
from pipeline.progress import duration as _fmt_s, log as _log
from pipeline.records import StageContext, StageRecord, StageStatus, atomic_write_text, check_writable, read_record
from pipeline.run_lock import claim_runs_dir, run_lock


STAGE_LOG = "stage.log"  # beside record.json: the traceback of the last crash


@dataclass
class RunSummary:
    """Every selected stage ran or was cached (a failed stage raises instead, with its own exit code, 1 to 3)."""

    rows: list[tuple[str, StageStatus, float, str]]


def select_stages(from_: str | None, until: str | None, only: str | None) -> list[str]:
    for flag, value in (("--from", from_), ("--until", until), ("--only", only)):
        if value is not None and value not in STAGE_NAMES:
            raise UserInputError(f"{flag} {value!r}: unknown stage; stages are {', '.join(STAGE_NAMES)}")
    if only:
        if from_ or until:
            raise UserInputError("--only cannot be combined with --from/--until")
        return [only]
    lo = STAGE_NAMES.index(from_) if from_ else 0
    hi = STAGE_NAMES.index(until) if until else len(STAGE_NAMES) - 1
    if lo > hi:
        raise UserInputError(f"--from {from_} comes after --until {until}")
    return list(STAGE_NAMES[lo : hi + 1])


class Runner:
    def __init__(self, cfg: TaskConfig, runs_root: Path, log: Callable[[str], None] = _log):
        self.cfg = cfg
        self.runs_dir = Path(runs_root) / cfg.task
        self.log = log
        self._inputs_cache: dict[str, dict[str, str]] = {}

    # -- keys ---------------------------------------------------------------------------------
    def stage_dir(self, name: str) -> Path:
        return self.runs_dir / name

    def current_key(self, stage: Stage, upstream: dict[str, StageRecord]) -> tuple[str, dict, dict]:
        params = stage.params(self.cfg)
        if stage.name not in self._inputs_cache:
            self._inputs_cache[stage.name] = stage.inputs(self.cfg)
        inputs = dict(self._inputs_cache[stage.name])
        for dep in stage.requires:
            inputs[f"stage:{dep}"] = upstream[dep].output_hash
        return stage_key(stage.name, params, inputs, stage.version), params, inputs

    def is_current(self, rec: StageRecord | None, key: str) -> bool:
        if rec is None or rec.status != StageStatus.OK or rec.key != key:
            return False
        return self._outputs_changed(rec) is None

    def _outputs_changed(self, rec: StageRecord) -> str | None:
        out = self.stage_dir(rec.stage) / "out"
        local = {k: v for k, v in rec.outputs.items() if not k.startswith("external:")}
        if local and (not out.is_dir() or tree_hashes(out) != local):
            return f"its outputs in {out} were edited or removed"
        stage = get_stage(rec.stage)
        external = {k[len("external:"):]: v for k, v in rec.outputs.items() if k.startswith("external:")}
        if stage.external_intact is not None and not stage.external_intact(self.cfg, external):
            return "its outputs outside runs/ (the bundle) were edited or removed"
        return None

    def stale_reason(self, stage: Stage, rec: StageRecord, key: str, params: dict, inputs: dict) -> str | None:
        """Why ``rec`` would not be reused: what changed since it was written (None: it would be)."""
        if rec.key == key:
            return self._outputs_changed(rec)
        reasons = []
        if rec.stage_version and rec.stage_version != stage.version:
            reasons.append(f"stage code version {rec.stage_version} -> {stage.version}")
        changed = _changed_keys(rec.params, json.loads(json.dumps(params, sort_keys=True, default=str)))
        if changed:
            reasons.append("parameters changed: " + _few(changed))
        differ = sorted(k for k in set(rec.inputs) | set(inputs) if rec.inputs.get(k) != inputs.get(k))
        ups = [k[len("stage:"):] for k in differ if k.startswith("stage:")]
        if ups:
            reasons.append(f"upstream {', '.join(ups)} produced other outputs")
        files = [k for k in differ if not k.startswith("stage:")]
        if files:
            reasons.append("inputs changed: " + _few(files))
        if not reasons:  # same parameters and inputs under another key: the stage's code version
            reasons.append("stage code version changed" + ("" if rec.stage_version else " (the record predates version tracking)"))
        return "; ".join(reasons)

    # -- run ----------------------------------------------------------------------------------
    def run(self, selected: list[str], force: bool = False) -> RunSummary:
        claim_runs_dir(self.runs_dir)  # first: a folder a run did not make (a user's, the data dir) is refused whole
        check_writable(self.runs_dir)
        with run_lock(self.runs_dir):  # a second run on this directory would delete this one's attempts
            return self._run(selected, force)

    def _run(self, selected: list[str], force: bool) -> RunSummary:
        for stage in STAGES:
            if stage.name in selected and stage.check is not None:
                stage.check(self.cfg)
        for name in selected:  # said now, not as a traceback when that stage's turn comes
            sdir = self.stage_dir(name)
            if sdir.exists() and not sdir.is_dir():
                raise UserInputError(f"{sdir} is a file, not a stage directory: move it away and run again")
        done: dict[str, StageRecord] = {}
        rows: list[tuple[str, StageStatus, float, str]] = []
        first = STAGE_NAMES.index(selected[0])
        # Stages before the selection must already be complete; their records feed the selection.  A record whose
        # own upstream is not complete does not count (status shows it STALE): its inputs are gone.
        for stage in STAGES[:first]:
            rec = read_record(self.stage_dir(stage.name))
            if rec is None or rec.status != StageStatus.OK:
                continue
            if any(d not in done for d in stage.requires):
                continue
            done[stage.name] = rec
        for stage in STAGES:
            if stage.name not in selected:
                continue
            missing = [d for d in stage.requires if d not in done]
            if missing:
                raise StageNotReady(
                    f"stage {stage.name!r} needs {', '.join(missing)}, which has not completed; "
                    f"run without --from/--only first"
                )
            upstream = {d: done[d] for d in stage.requires}
            key, params, inputs = self.current_key(stage, upstream)
            rec = read_record(self.stage_dir(stage.name))
            if not force and self.is_current(rec, key):
                self.log(f"[{stage.name}] cached - inputs and parameters unchanged, skipping ({_fmt_metrics(rec.metrics)})")
                done[stage.name] = rec
                rows.append((stage.name, StageStatus.CACHED, rec.duration_s, _fmt_metrics(rec.metrics)))
                continue
            rec = self._run_stage(stage, key, params, inputs, upstream)
            rows.append((stage.name, rec.status, rec.duration_s, rec.message or _fmt_metrics(rec.metrics)))
            done[stage.name] = rec
        return RunSummary(rows)

    def _crashed(self, exc: Exception, rec: StageRecord, sdir: Path, started: str) -> PipelineError:
        """What a stage's crash becomes (its FAIL record and the traceback in its log written first): NoSpace when
        the disk is full, else StageCrashed naming the log."""
        full = no_space(exc, self.runs_dir)
        first = (str(exc).strip().splitlines() or [""])[0]
        rec.message = full or (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
        log_path = sdir / STAGE_LOG
        logged = _write_failure(log_path, f"{started} {rec.stage} crashed after {_fmt_s(rec.duration_s)}\n"
                                          f"{traceback.format_exc()}")
        _write_failure(sdir / "record.json", rec.to_json())
        if full:
            return NoSpace(f"stage {rec.stage}: {full}")
        where = f"traceback in {log_path}" if logged else "its traceback could not be written either"
        return StageCrashed(f"stage {rec.stage} crashed: {rec.message} ({where})")

    def _run_stage(self, stage: Stage, key: str, params: dict, inputs: dict, upstream: dict[str, StageRecord]) -> StageRecord:
        sdir = self.stage_dir(stage.name)
        sdir.mkdir(parents=True, exist_ok=True)
        for stale in sdir.glob(".tmp-*"):  # attempts killed earlier
            shutil.rmtree(stale, ignore_errors=True)
        # The record goes first: from here until the new one is written the stage is not complete.
        (sdir / "record.json").unlink(missing_ok=True)
        tmp = sdir / f".tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        work = sdir / "work" / key[:16]
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        t0 = time.monotonic()
        self.log(f"[{stage.name}] running: {stage.description}")
        ctx = StageContext(self.cfg, stage, tmp, work, upstream, self.runs_dir, self.log)
        rec = StageRecord(stage=stage.name, status=StageStatus.FAIL, key=key, params=params, inputs=inputs,
                          started_at=started, versions=versions(), stage_version=stage.version)
        try:
            result = stage.run(ctx)
        except PipelineError as exc:
            rec.duration_s, rec.phases = time.monotonic() - t0, ctx.clock.seconds()
            rec.message = str(exc)
            shutil.rmtree(tmp, ignore_errors=True)
            _write_failure(sdir / "record.json", rec.to_json())
            raise
        except Exception as exc:  # a crash: still a FAIL record, the traceback in the stage log, one line on stderr
            rec.duration_s, rec.phases = time.monotonic() - t0, ctx.clock.seconds()
            shutil.rmtree(tmp, ignore_errors=True)  # first: it may be what filled the disk
            raise self._crashed(exc, rec, sdir, started) from exc
        except BaseException:  # interrupted: nothing is marked; the next run resumes
            shutil.rmtree(tmp, ignore_errors=True)  # kill -9 cannot get here: the next run removes it
            raise
        rec.phases = ctx.clock.seconds()  # first: the stage's total then covers every phase
        rec.duration_s = time.monotonic() - t0
        rec.metrics, rec.artifacts, rec.message = result.metrics, result.artifacts, result.message
        outputs = tree_hashes(tmp)
        outputs.update({f"external:{k}": v for k, v in result.external_outputs.items()})
        rec.outputs = outputs
        out = sdir / "out"
        if out.exists():
            old = sdir / f".tmp-old-{uuid.uuid4().hex[:8]}"
            out.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        tmp.rename(out)
        if result.gate_error:
            rec.message = result.gate_error
            atomic_write_text(sdir / "record.json", rec.to_json())
            self.log(f"[{stage.name}] FAILED its gate after {_fmt_s(rec.duration_s)}: {result.gate_error}")
            raise GateFailed(f"{stage.name}: {result.gate_error}")
        rec.status = StageStatus.OK
        atomic_write_text(sdir / "record.json", rec.to_json())
        shutil.rmtree(sdir / "work", ignore_errors=True)  # resumable state is no longer needed
        self.log(f"[{stage.name}] done in {_fmt_s(rec.duration_s)}" + (f": {rec.message}" if rec.message else ""))
        if rec.phases:
            self.log(f"[{stage.name}] {format_phases(rec.phases)}")
        return rec

    # -- status -------------------------------------------------------------------------------
    def phases(self) -> dict[str, dict[str, float]]:
        """Each stage's time per phase, as its record holds it (stages without a record or phases are left out)."""
        out = {}
        for stage in STAGES:
            rec = read_record(self.stage_dir(stage.name))
            if rec is not None and rec.phases:
                out[stage.name] = rec.phases
        return out

    def status_rows(self) -> list[tuple[str, str, float, str]]:
        rows = []
        done: dict[str, StageRecord] = {}
        stale: set[str] = set()
        for stage in STAGES:
            rec = read_record(self.stage_dir(stage.name))
            if rec is None:
                rows.append((stage.name, "-", 0.0, "not run" + (" (interrupted; will resume)" if (self.stage_dir(stage.name) / "work").exists() else "")))
                continue
            state, why = rec.status.value, None
            stale_up = [d for d in stage.requires if d in stale]
            # An upstream with no OK record runs first, and this stage after it on what it produces: not OK now.
            not_done = [d for d in stage.requires if d not in done and d not in stale]
            if rec.status == StageStatus.OK and stale_up:
                why = f"upstream {', '.join(stale_up)} will run again"
            elif rec.status == StageStatus.OK and not_done:
                why = f"upstream {', '.join(not_done)} has no OK record (it runs first)"
            elif rec.status == StageStatus.OK and all(d in done for d in stage.requires):
                try:
                    key, params, inputs = self.current_key(stage, {d: done[d] for d in stage.requires})
                    why = self.stale_reason(stage, rec, key, params, inputs)
                except PipelineError as exc:
                    why = str(exc)
            if why:
                state = "STALE"
                stale.add(stage.name)
            if rec.status == StageStatus.OK:
                done[stage.name] = rec
            detail = rec.message if rec.status != StageStatus.OK else _fmt_metrics(rec.metrics)
            rows.append((stage.name, state, rec.duration_s, f"why: {why}" if why else detail))
        return rows


def _write_failure(path: Path, text: str) -> bool:
    """Write a FAIL record or a crash log; False when it cannot be written (a full disk): the failure being reported
    matters more than its paperwork, and a stage without a record reads as not run."""
    try:
        atomic_write_text(path, text)
        return True
    except OSError:
        return False


def _changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted names of the values that differ between two parameter trees (``gates.min_accuracy``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _changed_keys(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [prefix.rstrip(".")] if old != new else []


def _few(names: list[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


def _fmt_metrics(metrics: dict[str, Any]) -> str:
    parts = []
    for k, v in metrics.items():
        if isinstance(v, float):
            parts.append(f"{k}={v:.4f}")
        elif isinstance(v, (int, str)):
            parts.append(f"{k}={v}")
    return ", ".join(parts[:4])


def format_phases(phases: dict[str, float]) -> str:
    """``phases: importance 1m10s, distillation 19m50s, search 12m02s``: where a stage's time went."""
    return "phases: " + ", ".join(f"{name} {_fmt_s(s)}" for name, s in phases.items())


def format_table(rows: list[tuple[str, Any, float, str]], phases: dict[str, dict[str, float]] | None = None) -> str:
    """One row per stage; under a stage whose record has phases (``phases``: stage -> its record's), a line with
    them, in the details column."""
    lines = [f"{'stage':<16}{'status':<17}{'time':>9}  details"]
    for name, status, dur, detail in rows:
        status_s = status.value if isinstance(status, StageStatus) else str(status)
        lines.append(f"{name:<16}{status_s:<17}{_fmt_s(dur) if dur else '-':>9}  {detail}")
        if phases and phases.get(name):
            lines.append(f"{'':<16}{'':<17}{'':>9}  {format_phases(phases[name])}")
    return "\n".join(lines)
