"""The serving settings ``make tune`` measured for a bundle on this CPU, and how the package stage applies them.

``make tune`` (``serving.tools.tune``) serves the packaged bundle, tries engine instances x threads (x the dynamic
batcher's delay) in interleaved rounds with perf_analyzer, and writes ``<repository>/.<task>.tune.json`` (beside the
bundle, never in it: bundle.json covers every file there): every
candidate's served rates, the CPU, the model files measured, and the chosen settings.  The next ``make bundle``
packages with them (the record is one of the package stage's inputs) when they were measured for the same model
files on a CPU with the same instruction sets, and the config left them to be chosen (``package.instance_count``
and ``package.threads`` 0); ``bundle.json`` says which settings were used and why (``serving_settings``).  As the
engine itself, they are chosen by measurement, not by a rule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "ernie-bundle-serving-tune/1"


def tune_file(bundle: Path) -> Path:
    """Where make tune's record of ``<repository>/<task>`` lives: beside it."""
    bundle = Path(bundle)
    return bundle.parent / f".{bundle.name}.tune.json"


class TuneRecordError(ValueError):
    """tune.json is not a record this code wrote (one line naming the file and field)."""


@dataclass(frozen=True)
class ServingSettings:
    instances: int
    threads: int
    max_queue_delay_microseconds: int = 0

    def label(self) -> str:
        delay = f", delay {self.max_queue_delay_microseconds} µs" if self.max_queue_delay_microseconds else ""
        return f"{self.instances} instance(s) x {self.threads} thread(s){delay}"


@dataclass(frozen=True)
class ServingTune:
    task: str
    engine: str
    model_files: dict  # file name in the engine's model folder (model.xml, model.bin, model.onnx) -> sha256
    cpu: dict  # pipeline.contract.CpuInfo.as_dict() of the machine that measured
    chosen: ServingSettings
    candidates: list = field(default_factory=list)  # [{"settings": {...}, "rates": {shape: spread}, "score": float}]
    shapes: list = field(default_factory=list)  # [[items per request, concurrency]]
    rounds: int = 0

    def write(self, path: Path) -> None:
        data = {"format": FORMAT, **dataclasses.asdict(self)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> "ServingTune":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TuneRecordError(f"{path}: not a readable tune record ({exc}); run make tune again") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise TuneRecordError(f"{path}: format is not {FORMAT}; run make tune again")
        try:
            chosen = ServingSettings(**data["chosen"])
            for name in ("instances", "threads"):
                value = getattr(chosen, name)
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 256:
                    raise ValueError(f"chosen.{name} {value!r}")
            delay = chosen.max_queue_delay_microseconds
            if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= 10**6:
                raise ValueError(f"chosen.max_queue_delay_microseconds {delay!r}")
            files = data["model_files"]
            if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
                raise ValueError("model_files")
            return cls(str(data["task"]), str(data["engine"]), dict(files), dict(data["cpu"]), chosen,
                       list(data.get("candidates", [])), list(data.get("shapes", [])), int(data.get("rounds", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise TuneRecordError(f"{path}: field {exc}: not a tune record this version wrote; run make tune again") from None

    def mismatch(self, engine: str, model_files: dict, cpu_flags: list) -> str | None:
        """Why these settings do not apply to a bundle of ``engine`` with ``model_files`` (name -> sha256) packaged
        on a CPU with ``cpu_flags``; None when they do."""
        if engine != self.engine:
            return f"measured for the {self.engine} engine, the bundle runs {engine}"
        if any(model_files.get(name) != digest for name, digest in self.model_files.items()):
            return "measured for other model files (the model was rebuilt since make tune)"
        if sorted(self.cpu.get("flags") or []) != sorted(cpu_flags or []):
            return f"measured on a CPU with {', '.join(self.cpu.get('flags') or []) or 'no int8 flags'}"
        return None

    def summary(self) -> dict:
        """What bundle.json says of the measurement behind the settings."""
        return {"settings": dataclasses.asdict(self.chosen), "chosen_by": "make tune", "cpu": self.cpu.get("model"),
                "shapes": self.shapes, "rounds": self.rounds,
                "candidates": [{"settings": c.get("settings"), "score": c.get("score")} for c in self.candidates]}


def file_digests(files) -> dict:
    """(path, name) pairs -> {name: sha256}."""
    out = {}
    for path, name in files:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[name] = h.hexdigest()
    return out


def applied(pc, tune: "ServingTune | None", engine: str, model_files: dict, cpu_flags: list, defaults=None):
    """(package config to build with, bundle.json's ``serving_settings``): ``tune``'s settings where they apply and the
    config left instances and threads to be chosen; otherwise ``pc`` as it is, with the reason.  ``defaults``: the
    kind's (package config, why) for when no tune record applies (``BundleKind.serving_defaults``)."""
    base, why_default = defaults or (pc, None)
    default_note = {"kind_default": why_default} if why_default else {}
    explicit = pc.instance_count or pc.threads
    if tune is None:
        return base, {"chosen_by": "package defaults (no make tune record)", **default_note}
    if explicit:
        return pc, {"chosen_by": "the task config (package.instance_count / package.threads)", "tune_not_applied": True}
    why = tune.mismatch(engine, model_files, cpu_flags)
    if why:
        return base, {"chosen_by": "package defaults", "tune_not_applied": why, **default_note}
    s = tune.chosen
    return dataclasses.replace(pc, instance_count=s.instances, threads=s.threads,
                               max_queue_delay_microseconds=s.max_queue_delay_microseconds), tune.summary()
