"""Stage records: what a stage run produced, written atomically into ``runs/<task>/<stage>/``; and what a
stage's ``run`` takes (``StageContext``) and returns (``StageResult``), here so that stages never import the runner.

Layout of one stage directory::

    record.json   written last; present only when the outputs beside it are complete
    out/          the stage's outputs (moved into place from a temp dir in one rename)
    work/<key>/   resumable state (training checkpoints), kept across interrupted runs
    .tmp-*/       an unfinished attempt; removed by the next run
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, TypeVar

from pipeline.progress import PhaseClock, duration

if TYPE_CHECKING:  # annotations only
    from pipeline.config import TaskConfig
    from pipeline.stage import Stage

FORMAT_VERSION = 1
T = TypeVar("T")


class StageStatus(str, Enum):
    OK = "OK"  # ran and passed
    CACHED = "CACHED"  # inputs and params unchanged: the earlier OK result is reused
    FAIL = "FAIL"  # ran but failed its gate or raised
    NOT_RUN = "NOT_RUN"  # not selected, or an upstream stage did not finish


@dataclass
class StageRecord:
    stage: str
    status: StageStatus
    key: str
    params: dict[str, Any]
    inputs: dict[str, str]  # input name -> content hash
    outputs: dict[str, str] = field(default_factory=dict)  # relative path in out/ -> sha256
    artifacts: dict[str, str] = field(default_factory=dict)  # role -> path (relative to out/ or absolute)
    metrics: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    # seconds per phase of the run (pipeline.progress.PhaseClock), in the order they began; they sum to at most
    # duration_s.  Empty for a stage that names no phases, and in records written before phases were kept.  In JSON
    # a list of [name, seconds] pairs: the record's keys are sorted, the phases keep their order.
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    stage_version: str = ""  # the graph's code version of the stage that wrote it ("": written before it was kept)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        d = asdict(self)
        d["status"] = self.status.value
        d["phases"] = [[name, seconds] for name, seconds in self.phases.items()]
        return json.dumps(d, indent=2, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "StageRecord":
        d = json.loads(text)
        if not isinstance(d, dict):  # a hand-edited record: read as "not run", like any unreadable one
            raise ValueError("record is not a JSON object")
        if d.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"record format_version {d.get('format_version')} != {FORMAT_VERSION}")
        d["status"] = StageStatus(d["status"])
        for name in ("params", "inputs", "outputs", "artifacts", "metrics", "versions"):
            if not isinstance(d.get(name, {}), dict):
                raise ValueError(f"record field {name!r} is not a JSON object")
        d["phases"] = _phases(d.get("phases", []))
        if not isinstance(d.get("duration_s", 0.0), (int, float)) or not isinstance(d.get("key", ""), str):
            raise ValueError("record fields duration_s/key have the wrong type")
        return cls(**d)

    @property
    def output_hash(self) -> str:
        from pipeline.hashing import json_sha256

        return json_sha256(self.outputs)


def _phases(pairs) -> dict[str, float]:
    """A record's ``phases`` from its JSON ``[[name, seconds], ...]``; anything else is an unreadable record."""
    ok = isinstance(pairs, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
        and isinstance(p[1], (int, float)) and not isinstance(p[1], bool) and p[1] >= 0 for p in pairs)
    if not ok:
        raise ValueError("record field 'phases' is not a list of [name, seconds] pairs")
    return {name: float(seconds) for name, seconds in pairs}


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: Path, what: str = "output dir") -> None:
    """Refuse, before any work, a directory that cannot be created or written (UserInputError, exit 2)."""
    from pipeline.errors import UserInputError

    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UserInputError(f"{what} {path} is not writable ({exc.strerror or exc})") from None


def read_record(stage_dir: Path) -> StageRecord | None:
    path = Path(stage_dir) / "record.json"
    if not path.is_file():
        return None
    try:
        return StageRecord.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError):
        return None  # unreadable or older format: treated as not run


@dataclass
class StageResult:
    """What a stage's ``run`` returns.  ``gate_error`` set: the stage ran but its gate failed."""

    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # role -> path relative to out/, or absolute
    external_outputs: dict[str, str] = field(default_factory=dict)  # outputs that live outside out/ -> hash
    message: str = ""
    gate_error: str | None = None


@dataclass
class StageContext:
    cfg: "TaskConfig"
    stage: "Stage"
    out_dir: Path  # a fresh temp dir; renamed to <stage>/out only if the stage succeeds
    work_dir: Path  # survives interruptions (resumable state), keyed by the stage key
    upstream: dict[str, StageRecord]
    runs_dir: Path
    log: Callable[[str], None]
    clock: PhaseClock = field(default_factory=PhaseClock)  # the runner writes its phases into the record

    def phase(self, name: str, what: str = "", estimate_s: float | None = None) -> ContextManager[None]:
        """``with ctx.phase("parity", "parity on 10000 dev examples"):``: the time inside is charged to ``name`` in
        the stage's record; ``what``, when given, is logged first (with ``estimate_s``, when one is known)."""
        if what:
            self.log(f"[{self.stage.name}] {what}" + (f" (about {duration(estimate_s)})" if estimate_s is not None else ""))
        return self.clock.phase(name)

    def artifact(self, stage: str, role: str) -> Path:
        rec = self.upstream[stage]
        value = rec.artifacts[role]
        p = Path(value)
        return p if p.is_absolute() else self.runs_dir / stage / "out" / p

    def optional_artifact(self, stage: str, role: str) -> Path | None:
        """``artifact``, or None when ``stage`` did not hand that role on (fine-tune's kept dev outputs)."""
        return self.artifact(stage, role) if role in self.upstream[stage].artifacts else None

    def handoff(self, stage: str, record: type[T]) -> T:
        """What ``stage`` handed on, as its typed record (``pipeline.handoffs``): ``ctx.handoff("export", ExportManifest)``."""
        return record.read(self.artifact(stage, record.ROLE))
