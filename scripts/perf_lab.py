"""Research instruments for served time, beside ``make perf`` and not part of the product: py-spy on the python
backend's stubs while perf_analyzer loads the served bundle and, at concurrency 1, where a lone request's time goes.

    .venv/bin/python scripts/perf_lab.py --task tnews [--repository model_repository] [--data-dir DIR]
                                         [--concurrency 16] [--seconds 10] [--rate 250] [--window 5]
                                         [--json-out runs/tnews/perf_lab.json]

Starts tritonserver on the bundle (``serving.tools.perf.serve``, as ``make perf`` does), loads it with perf_analyzer at
``--concurrency`` and records every stub of the bundle's models with py-spy for ``--seconds``: per stub the top frames
by own samples with their inclusive share, the share of samples inside the bundle's ``engine.py``, and the share of
the time its Python thread was busy (py-spy leaves out the samples where it waited).  MEASUREMENTS.md's "the engine is
the served cost; our Python is ~10% or less" comes from it.  Sampling costs the stubs a little CPU: no rate is
reported here; ``make perf`` measures rates.

At ``--concurrency 1`` one perf_analyzer level (``--window`` s windows) comes first: its mean latency, Triton's part of
it and its rate, with the stubs' busy shares, split a lone request's mean into outside Triton (client, gRPC, front
end), the python backend's hand-off, our Python and the engine (``lone_request_split``).

``make perf`` once also held a lone request against an echo model busy for the model's batch-1 time (the "held
echo"); it was dropped: its hold was the model's p50 taken before the rounds, and on a drifting VM "served over the
held echo" came out negative (MEASUREMENTS.md's history, fourteenth session).  Its finding, that the platform costs a
request held a few ms ~0.3-0.4 ms more than an instant one, is in MEASUREMENTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serving.tools import perf  # noqa: E402

ENGINE_FRAME = " (engine.py:"  # py-spy's name for a frame of the bundle's engine (every served engine is an engine.py)


def py_spy() -> str:
    path = Path(sys.executable).parent / "py-spy"
    found = str(path) if path.is_file() else shutil.which("py-spy")
    if not found:
        raise perf.PerfError("py-spy not found (requirements.lock installs it into .venv)")
    return found


def profile_stubs(pa: perf.PerfAnalyzer, spy: str, target: perf.Target, data: Path, concurrency: int, seconds: float,
                  workdir: Path, rate: int = 250, top: int = 12) -> dict:
    """py-spy on every stub of ``target.served_procs`` while perf_analyzer loads the server at ``concurrency``.  Top
    frames by own time and inclusive time, per stub."""
    from serving.process_group import die_with_parent_preexec

    stubs = {label: pid for label, pid in (target.served_procs or {}).items() if label.startswith("stub ")}
    cmd = perf.perf_analyzer_command(pa, target.url, target.model, data, concurrency, seconds + 4)
    load = subprocess.Popen(cmd + ["--max-trials", "3", "--stability-percentage", "100"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=pa.env, preexec_fn=die_with_parent_preexec())
    try:
        time.sleep(2)  # past perf_analyzer's warm-up
        outs = {label: workdir / f"spy-{pid}.txt" for label, pid in stubs.items()}
        spies = [subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
                                   "--format", "raw", "--nonblocking", "--output", str(outs[label])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent_preexec())
                 for label, pid in stubs.items()]
        for s in spies:
            _, err = s.communicate(timeout=seconds + 60)
            if s.returncode != 0:
                raise perf.PerfError(f"py-spy failed (exit {s.returncode}): "
                                     f"{err.decode(errors='replace').strip().splitlines()[-1:]}")
    finally:
        load.kill()
        load.wait()
    return {"concurrency": concurrency, "seconds": seconds, "rate": rate,
            "stubs": {label: top_frames(outs[label].read_text(errors="replace"), top, rate * seconds) for label in stubs}}


def top_frames(collapsed: str, top: int = 12, expected: float = 0.0) -> dict:
    """py-spy's raw (collapsed) stacks -> the frames with the most own samples, with their inclusive share.  py-spy
    leaves out the samples where the stub's thread was idle (waiting for the next batch), so ``samples`` /
    ``expected`` (rate x seconds) is the share of the time the stub's Python thread was busy."""
    own: dict[str, int] = {}
    inside: dict[str, int] = {}
    total = engine = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        engine += n if any(ENGINE_FRAME in f for f in frames) else 0
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            inside[f] = inside.get(f, 0) + n
    busy = max(total, 1)
    best = sorted(own, key=own.get, reverse=True)[:top]
    return {"samples": total, "busy_share": total / expected if expected else None, "engine_share": engine / busy,
            "frames": [{"frame": f, "own": own[f] / busy, "inside": inside[f] / busy} for f in best]}


def lone_request_split(mean_ms: float, server_ms: float, cycle_ms: float, profile: dict) -> dict | None:
    """Where a lone request's time goes (concurrency 1, so one request per ``cycle_ms``), in ms: outside Triton's
    queue and compute (the client, gRPC, Triton's front end: perf_analyzer's split of its mean latency), the python
    backend's hand-off (Triton's compute while no stub is busy: the request and its answer crossing to the stub and
    back), our Python (a stub busy outside the engine) and the engine (py-spy's samples inside ``engine.py``).  The
    stubs' shares come from py-spy at concurrency 1 (``profile``); None when a figure is missing."""
    stubs = (profile or {}).get("stubs") or {}
    if not (mean_ms > 0 and server_ms > 0 and cycle_ms > 0 and stubs):
        return None
    if any(top.get("busy_share") is None for top in stubs.values()):
        return None
    busy = sum(top["busy_share"] for top in stubs.values()) * cycle_ms
    engine = sum(top["busy_share"] * top.get("engine_share", 0.0) for top in stubs.values()) * cycle_ms
    return {"outside_triton": mean_ms - server_ms, "handoff": server_ms - busy, "python": busy - engine,
            "engine": engine, "mean_ms": mean_ms}


def lab(repository: Path, task: str, data_dir: str | None, concurrency: int, seconds: float, rate: int, window: float,
        log=lambda msg: print(msg, file=sys.stderr)) -> dict:
    """The profile at ``concurrency`` (and, at 1, the lone request's split), as one JSON-ready dict."""
    import pipeline  # noqa: F401  (numpy before paddle)
    from serving.tools.offline import BundleModel

    pa, spy = perf.find_perf_analyzer(), py_spy()
    bundle = BundleModel.open(repository)
    items = perf.request_items(task, data_dir, bundle.task_type, bundle.manifest)
    if not items:
        raise perf.PerfError(f"no dev items to send (task {task}): perf_analyzer needs at least one")
    with tempfile.TemporaryDirectory() as tmp, perf.serve(repository, bundle.names, None, Path(tmp)) as target:
        data = perf.input_data(bundle.task_type, items, Path(tmp) / "input.json")
        level = None
        if concurrency == 1:
            log("perf_lab: one level at concurrency 1 (its mean latency and Triton's part of it)")
            level = perf.run_level(pa, target.url, target.model, data, 1, window, target.composing, Path(tmp), log)
        log(f"perf_lab: py-spy on {len(target.served_procs or {}) - 1} stub(s) at concurrency {concurrency}")
        profile = profile_stubs(pa, spy, target, data, concurrency, seconds, Path(tmp), rate)
    out = {"model": bundle.names.ensemble, "task_type": bundle.task_type, "profile": profile}
    if level is not None:
        out["lone_request_ms"] = lone_request_split(level.mean_ms, level.server_ms,
                                                    1000.0 / max(level.requests_per_s, 1e-9), profile)
    return out


def format_markdown(report: dict) -> str:
    p = report["profile"]
    lines = [f"# perf_lab: {report['model']} ({report['task_type']})", "",
             f"py-spy on the stubs at concurrency {p['concurrency']} ({p['seconds']:g} s, {p['rate']} samples/s): top "
             "frames by own time, and by time inside them", ""]
    for stub, top in p["stubs"].items():
        busy = f", its Python thread busy {top['busy_share']:.0%} of the time" if top.get("busy_share") is not None else ""
        lines += [f"{stub} ({top['samples']} samples{busy}; {top['engine_share']:.1%} inside engine.py):", "",
                  "| own % | inside % | frame |", "|---:|---:|---|"]
        lines += [f"| {f['own']:.1%} | {f['inside']:.1%} | `{f['frame']}` |" for f in top["frames"]]
        lines.append("")
    split = report.get("lone_request_ms")
    if split:
        lines += [f"Where a lone request's {split['mean_ms']:.2f} ms go (perf_analyzer's mean; the stubs' shares from "
                  f"py-spy): outside Triton (client, gRPC, front end) {split['outside_triton']:.2f} ms; the python "
                  f"backend's hand-off to the stub and back {split['handoff']:.2f} ms; our Python "
                  f"{split['python']:.2f} ms; the engine {split['engine']:.2f} ms.", ""]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/perf_lab.py", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or task YAML")
    p.add_argument("--repository", default="model_repository", help="folder holding <task>/ (or the bundle itself)")
    p.add_argument("--data-dir")
    p.add_argument("--concurrency", type=int, default=16, help="perf_analyzer's load while py-spy samples (1: also "
                   "split a lone request's time)")
    p.add_argument("--seconds", type=float, default=10.0, help="py-spy's sampling, seconds")
    p.add_argument("--rate", type=int, default=250, help="py-spy's samples per second")
    p.add_argument("--window", type=float, default=5.0, help="perf_analyzer window of the level at concurrency 1")
    p.add_argument("--json-out")
    return p


def check(args) -> None:
    if args.concurrency < 1:
        raise perf.PerfError(f"--concurrency {args.concurrency}: concurrent requests, must be >= 1")
    if not 1 <= args.seconds <= 600:
        raise perf.PerfError(f"--seconds {args.seconds}: seconds of sampling, 1 to 600")
    if not 1 <= args.rate <= 1000:
        raise perf.PerfError(f"--rate {args.rate}: samples per second, 1 to 1000")
    if not 0.001 <= args.window <= 3600:
        raise perf.PerfError(f"--window {args.window}: the measurement window, 0.001 to 3600 s")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from pipeline.config import task_name
    from pipeline.errors import UserInputError
    from serving.server import ServerError, resolve_repository
    from serving.tools.client import ClientError

    try:
        perf.find_perf_analyzer()
        py_spy()
        check(args)
        repo = resolve_repository(Path(args.repository), task_name(args.task))
        report = lab(repo, args.task, args.data_dir, args.concurrency, args.seconds, args.rate, args.window)
    except (perf.PerfError, ServerError, ClientError, UserInputError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(format_markdown(report))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
