"""``make perf``: Triton's perf_analyzer against the served bundle, and where the time goes.

    python -m serving.tools.perf --task tnews [--repository model_repository] [--concurrency 1 4 16]
                           [--batched-concurrency 1 4] [--rounds 3] [--seconds 5] [--profile 10]
                           [--json-out runs/tnews/perf.json]

Starts tritonserver on the bundle (or uses ``--url``) and, in the same server, the platform's floor: an echo model
with the bundle's interface that answers constant outputs (``serving.tools.floor``).  perf_analyzer sends requests
drawn from the task's dev set: one item per request (titles, NER texts, question + context pairs, UIE texts each
with the whole schema, as a client sends them) at each ``--concurrency``, and, for kinds whose requests batch, 32
items per request (FastDeploy's clients' shape) at each ``--batched-concurrency``.

Each of ``--rounds`` rounds measures, in turn: the model file alone (the offline yardstick, every padded width warmed,
the served engine's threads), then for every shape the served bundle and the floor.  Per shape the report gives the
median and spread over rounds of: served items/s, floor items/s, model-only items/s, the ceiling
1 / (1/model-only + 1/floor) (what the bundle could serve if our request code cost nothing), served / model-only and
served / ceiling (ratios within a round); p50/p99; CPU by process (tritonserver, each python stub, the client) in
cores and in CPU microseconds per item served, against the model-only CPU per item offline; and Triton's per-model
statistics (executions, mean batch, queue and compute time).  ``--profile`` attaches py-spy to each stub under the
highest one-item concurrency and lists the top frames.  Writes JSON (``make gate`` holds its served figures against a
previous release's) and Markdown.

perf_analyzer comes from the ``tritonclient==2.51.0`` wheel (later wheels no longer ship it), with
``libcudart.so.12`` from the ``nvidia-cuda-runtime-cu12`` wheel and Debian's ``libb64-0d``; ``make perf``
installs the three into ``.venv/perf_analyzer`` (``find_perf_analyzer`` looks there, or at
``$PERF_ANALYZER``).  It runs on CPU-only machines.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".venv" / "perf_analyzer"


class PerfError(RuntimeError):
    """perf_analyzer missing or failing: one line, exit 2."""


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    env: dict

    def version(self) -> str:
        from serving.server import die_with_parent_preexec

        try:
            out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, env=self.env, timeout=30,
                                 preexec_fn=die_with_parent_preexec())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PerfError(f"{self.binary}: cannot run it ({exc})") from None
        lines = [line for line in (out.stdout + out.stderr).splitlines() if "Version" in line]
        return lines[0].split("Version", 1)[1].split()[0] if lines else "unknown"


def find_perf_analyzer(tools: Path = TOOLS) -> PerfAnalyzer:
    """perf_analyzer and the library path it needs, or PerfError saying how to install it."""
    binary = Path(os.environ.get("PERF_ANALYZER", tools / "py" / "bin" / "perf_analyzer"))
    if not binary.is_file():
        raise PerfError(f"perf_analyzer not found at {binary}: `make perf` installs it (tritonclient==2.51.0 wheel, "
                        "nvidia-cuda-runtime-cu12, Debian libb64-0d) into .venv/perf_analyzer")
    libs = [tools / "deb" / "usr" / "lib" / "x86_64-linux-gnu", tools / "py" / "nvidia" / "cuda_runtime" / "lib"]
    path = ":".join([str(p) for p in libs if p.is_dir()] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
    return PerfAnalyzer(binary, {**os.environ, "LD_LIBRARY_PATH": path})


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
    concurrency: int
    requests_per_s: float  # perf_analyzer's inferences/s: items per second (one item per request, or 32 per request)
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    models: list[ModelShare] = field(default_factory=list)
    window_s: float = 0.0  # the perf_analyzer window these numbers came from (longer than asked when unstable)
    items_per_request: int = 1
    cores: dict = field(default_factory=dict)  # process -> cores used over the run (tritonserver, stub <instance>, client)
    served_items: int = 0  # items the measured model answered over the run (Triton's statistics)
    mean_ms: float = 0.0  # the client's mean latency (perf_analyzer's parts, added)
    server_ms: float = 0.0  # of it, the mean time inside Triton (queue and compute, as perf_analyzer splits it)


BATCHED_ITEMS = 32  # FastDeploy's clients send 32 texts per request


def input_data(task_type: str, items: Sequence, path: Path, limit: int = 2000) -> Path:
    """perf_analyzer's ``--input-data`` JSON: one entry per item; perf_analyzer's ``-b N`` makes a request of N
    consecutive entries."""
    from serving.tools.kinds import tool_kind

    kind = tool_kind(task_type)
    rows = [kind.perf_input(item) for item in list(items)[:limit]]
    path.write_text(json.dumps({"data": rows}, ensure_ascii=False), encoding="utf-8")
    return path


STATS_TIMEOUT_S = 30  # Triton answers its statistics in milliseconds; a server that does not must not hang the tool


def _model_stats(url: str) -> dict[str, dict]:
    from tritonclient.utils import InferenceServerException

    from serving.tools.client import grpc_module

    tg = grpc_module()

    try:
        client = tg.InferenceServerClient(url)
    except (InferenceServerException, ValueError) as exc:
        raise PerfError(f"gRPC {url}: not a host:port ({exc})") from None
    try:
        stats = client.get_inference_statistics(as_json=True, client_timeout=STATS_TIMEOUT_S)["model_stats"]
    except InferenceServerException as exc:
        raise PerfError(f"no Triton answers gRPC at {url} ({exc.message() or exc}; its statistics waited for at "
                        f"most {STATS_TIMEOUT_S} s)") from None
    finally:
        client.close()
    return {s["name"]: s for s in stats}


def _ns(stat: dict, key: str) -> int:
    return int(stat.get("inference_stats", {}).get(key, {}).get("ns", 0))


def _count(stat: dict, key: str) -> int:
    return int(stat.get("inference_stats", {}).get(key, {}).get("count", 0))


def model_shares(before: dict[str, dict], after: dict[str, dict], names: Sequence[str]) -> list[ModelShare]:
    shares = []
    for name in names:
        a, b = after.get(name, {}), before.get(name, {})
        requests = _count(a, "success") - _count(b, "success")
        executions = int(a.get("execution_count", 0)) - int(b.get("execution_count", 0))
        inferences = int(a.get("inference_count", 0)) - int(b.get("inference_count", 0))
        if requests <= 0:
            continue
        queue = _ns(a, "queue") - _ns(b, "queue")
        compute = sum(_ns(a, k) - _ns(b, k) for k in ("compute_input", "compute_infer", "compute_output"))
        shares.append(ModelShare(name, requests, executions, inferences / executions if executions else 0.0,
                                 queue / requests / 1e6, compute / requests / 1e6))
    return shares


UNSTABLE = "Failed to obtain stable measurement"
WINDOW_RETRIES = 2  # 1 -> 2 -> 4 windows' length: what perf_analyzer's message and Model Analyzer both do


def _run_measured(cmd: list[str], env: dict, timeout: float, workdir: Path) -> tuple[int, str, float]:
    """Run ``cmd`` to its end: (exit code, output, its CPU seconds from the kernel's accounting of the child)."""
    from serving.server import die_with_parent_preexec

    out_path = workdir / "perf_analyzer.out"
    with open(out_path, "wb") as out:
        # perf_analyzer dies with this process (kill -9 of `make perf` leaves no load generator behind)
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent_preexec())
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    return proc.returncode, out_path.read_text(errors="replace"), usage.ru_utime + usage.ru_stime


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_level(pa: PerfAnalyzer, url: str, model: str, data: Path, concurrency: int, seconds: float,
              composing: Sequence[str], workdir: Path, log=lambda msg: print(msg, file=sys.stderr),
              items_per_request: int = 1, processes: dict[str, int] | None = None) -> Level:
    """One level: ``concurrency`` clients each sending requests of ``items_per_request`` items.  On a shared or
    loaded machine perf_analyzer may not see 6 windows within 25% of each other and exits without numbers; the level
    is then measured again with windows twice as long (up to ``WINDOW_RETRIES`` times), and the window that gave the
    numbers is reported with them.  A perf_analyzer killed by a signal (its gRPC client aborts now and then) is run
    once more.  ``processes`` (label -> pid): their CPU over the run, with the client's."""
    from serving.tools import process_cpu

    out_csv = workdir / f"c{concurrency}.csv"
    attempt, crashed = 0, False
    while True:
        window = seconds * 2 ** attempt
        cmd = [str(pa.binary), "-m", model, "-u", url, "-i", "grpc", "--input-data", str(data),
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
               "--measurement-interval", str(int(window * 1000)), "--stability-percentage", "25",
               "--max-trials", "6", "-f", str(out_csv)]
        if items_per_request > 1:
            cmd += ["-b", str(items_per_request)]
        out_csv.unlink(missing_ok=True)
        before, cpu0 = _model_stats(url), process_cpu.snapshot(processes or {})
        rc, output, client_cpu = _run_measured(cmd, pa.env, max(120, window * 12 + 60), workdir)
        cpu1, after = process_cpu.snapshot(processes or {}), _model_stats(url)
        if rc == 0 and out_csv.is_file():
            break
        tail = output.strip().splitlines()[-3:]
        if rc < 0 and rc != -signal.SIGKILL and not crashed:  # SIGKILL: our timeout (or the OOM killer): not again
            # Killed by a signal, not an error it reported: perf_analyzer 2.51's gRPC client aborts now and then
            # (SIGABRT after "epoll_wait error: Bad file descriptor", seen on this VM between two good levels).
            crashed = True
            log(f"perf_analyzer died at concurrency {concurrency} ({_signal_name(-rc)}): "
                f"{tail[-1] if tail else 'no output'}; measuring the level again")
            continue
        if UNSTABLE not in output:
            raise PerfError(f"perf_analyzer failed at concurrency {concurrency} (exit {rc}): {' | '.join(tail)}")
        if attempt == WINDOW_RETRIES:
            raise PerfError(f"perf_analyzer found no stable measurement at concurrency {concurrency} with windows of "
                            f"{seconds:g} to {window:g} s: the machine is too busy to measure (stop other work, or "
                            "pass a longer --seconds)")
        log(f"perf_analyzer: concurrency {concurrency} not stable over {window:g} s windows (another process "
            f"on these cores?): measuring again with {2 * window:g} s windows")
        attempt += 1
    with out_csv.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    rps = float(row["Inferences/Second"])
    cores = process_cpu.cores(cpu0, cpu1) if processes else {}
    if processes:
        cores["client"] = client_cpu / max(cpu1.at - cpu0.at, 1e-9)
    shares = model_shares(before, after, composing)
    served = int(sum(_count(after.get(m, {}), "success") - _count(before.get(m, {}), "success") for m in composing[:1]))
    # perf_analyzer's own split of its mean latency (µs): the client's and the network's part, and Triton's
    parts = {k: float(row.get(k) or 0) for k in (*CLIENT_PARTS, *SERVER_PARTS)}
    return Level(concurrency, rps, *(float(row[f"p{p} latency"]) / 1000 for p in (50, 90, 95, 99)),
                 models=shares, window_s=window, items_per_request=items_per_request, cores=cores,
                 served_items=served * items_per_request, mean_ms=sum(parts.values()) / 1000,
                 server_ms=sum(parts[k] for k in SERVER_PARTS) / 1000)


CLIENT_PARTS = ("Client Send", "Network+Server Send/Recv", "Client Recv")  # perf_analyzer's csv columns, µs
SERVER_PARTS = ("Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output")


def _spread(values: Sequence[float]) -> dict:
    """Median and range of per-round values (the median of an even count is the mean of the middle two)."""
    v = sorted(float(x) for x in values)
    if not v:
        return {"median": None, "min": None, "max": None, "rounds": []}
    mid = len(v) // 2
    median = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
    return {"median": median, "min": v[0], "max": v[-1], "rounds": [float(x) for x in values]}


def ceiling(model_only: float, floor: float) -> float:
    """What the bundle could serve if its own request code cost nothing: the model's time and the platform's floor
    per item, added (both on the same cores, one after the other)."""
    return 1.0 / (1.0 / model_only + 1.0 / floor)


@dataclass
class Shape:
    """One request shape measured in every round: ``items`` per request at ``concurrency``."""

    items: int
    concurrency: int
    served: list = field(default_factory=list)  # [Level] per round
    floor: list = field(default_factory=list)  # [Level] per round
    model_only: list = field(default_factory=list)  # [(items/s, CPU s per item)] per round
    model_only_p50_ms: list = field(default_factory=list)  # one item per call (concurrency 1 only), per round
    held_floor: list = field(default_factory=list)  # [Level] of the echo held as long as the model (lone only)
    hold_ms: float = 0.0

    @property
    def lone(self) -> bool:
        """One item at concurrency 1: the shape held to the model's batch-1 latency and to the held echo."""
        return self.items == 1 and self.concurrency == 1

    def summary(self, model_only_batch: str) -> dict:
        served = [lv.requests_per_s for lv in self.served]
        floors = [lv.requests_per_s for lv in self.floor]
        mo = [r for r, _ in self.model_only]
        out = {"items_per_request": self.items, "concurrency": self.concurrency, "model_only_batch": model_only_batch,
               "served_items_per_s": _spread(served), "model_only_items_per_s": _spread(mo),
               "served_over_model_only": _spread([s / m for s, m in zip(served, mo)]),
               "p50_ms": _spread([lv.p50_ms for lv in self.served]), "p99_ms": _spread([lv.p99_ms for lv in self.served]),
               "offline_cpu_us_per_item": _spread([c * 1e6 for _, c in self.model_only])}
        if self.model_only_p50_ms:
            out["model_only_batch1_p50_ms"] = _spread(self.model_only_p50_ms)
            out["served_p50_minus_batch1_ms"] = _spread([lv.p50_ms - m for lv, m in zip(self.served, self.model_only_p50_ms)])
        if self.held_floor:
            out["hold_ms"] = self.hold_ms
            out["held_floor_p50_ms"] = _spread([lv.p50_ms for lv in self.held_floor])
            out["held_floor_p50_minus_hold_ms"] = _spread([lv.p50_ms - self.hold_ms for lv in self.held_floor])
            # both p50s from the same server, one level after the other: steadier on a drifting VM than anything
            # held against the offline batch-1 p50 (measured apart from the served levels)
            out["served_p50_minus_held_floor_ms"] = _spread([s.p50_ms - h.p50_ms for s, h in zip(self.served, self.held_floor)])
        if floors:
            ceil = [ceiling(m, f) for m, f in zip(mo, floors)]
            out.update({"floor_items_per_s": _spread(floors), "ceiling_items_per_s": _spread(ceil),
                        "served_over_ceiling": _spread([s / c for s, c in zip(served, ceil)])})
        cores = [lv.cores for lv in self.served if lv.cores]
        if cores:
            labels = sorted({k for c in cores for k in c}, key=lambda k: (k != "tritonserver", k == "client", k))
            out["served_cores"] = {k: _spread([c.get(k, 0.0) for c in cores])["median"] for k in labels}
            server_cpu = [sum(v for k, v in lv.cores.items() if k != "client") / lv.requests_per_s * 1e6
                          for lv in self.served if lv.cores and lv.requests_per_s]
            out["served_cpu_us_per_item"] = _spread(server_cpu)
            fcores = [lv.cores for lv in self.floor if lv.cores]
            if fcores:
                out["floor_cores"] = {k: _spread([c.get(k, 0.0) for c in fcores])["median"]
                                      for k in sorted({k for c in fcores for k in c})}
                out["floor_cpu_us_per_item"] = _spread([sum(v for k, v in lv.cores.items() if k != "client")
                                                        / lv.requests_per_s * 1e6 for lv in self.floor if lv.cores])
        return out


def format_markdown(report: dict) -> str:
    rounds = report.get("rounds", 1)
    lines = [f"# perf: {report['model']} ({report['task_type']})", "",
             f"perf_analyzer {report['perf_analyzer']} over gRPC{_item_note(report)}, "
             f"{report['seconds']:.0f} s windows, {rounds} interleaved round(s); CPU {report['cpu']['model']} "
             f"({', '.join(report['cpu']['flags']) or 'no int8 flags'}, {report['cpu']['cores']} cores); "
             f"{report['package'].get('instances', '?')} instance(s) per model, "
             f"{report['package'].get('engine_threads', '?')} engine thread(s) each, layout {report['layout']}.", ""]
    summary = report.get("summary") or []
    if summary:
        lines += ["Items/s, median [min-max] over rounds; ratios within each round.  ceiling = 1 / (1/model-only + "
                  "1/floor): the rate if our request code cost nothing.", "",
                  "| items/request | concurrency | served | floor (echo) | model-only | ceiling | served / model-only | "
                  "served / ceiling | p50 ms | p99 ms |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in summary:
            lines.append(f"| {row['items_per_request']} | {row['concurrency']} | {_fmt(row['served_items_per_s'])} | "
                         f"{_fmt(row.get('floor_items_per_s'))} | {_fmt(row['model_only_items_per_s'])} | "
                         f"{_fmt(row.get('ceiling_items_per_s'))} | {_fmt(row['served_over_model_only'], 2, 'x')} | "
                         f"{_fmt(row.get('served_over_ceiling'), 2, 'x')} | {_fmt(row['p50_ms'], 1)} | {_fmt(row['p99_ms'], 1)} |")
        lines += ["", "model-only: the bundle's model file alone in this process (" + ", ".join(
            sorted({f"{r['items_per_request']} item(s)/request: {r['model_only_batch']}" for r in summary})) + ").", ""]
        for r in summary:
            if "model_only_batch1_p50_ms" in r:
                lines += [f"A lone request (concurrency 1): served p50 {_fmt(r['p50_ms'], 2)} ms against the model's own "
                          f"batch-1 p50 {_fmt(r['model_only_batch1_p50_ms'], 2)} ms: "
                          f"+{_fmt(r['served_p50_minus_batch1_ms'], 2)} ms per request.", ""]
            if "held_floor_p50_ms" in r:
                lines += [f"The platform's part of it: the echo model holding each request {r['hold_ms']:.2f} ms (the "
                          f"model's batch-1 p50 before the rounds, its Python thread busy) answers at p50 "
                          f"{_fmt(r['held_floor_p50_ms'], 2)} ms, +{_fmt(r['held_floor_p50_minus_hold_ms'], 2)} ms for "
                          f"Triton, its python backend and the client alone; the served p50 is "
                          f"{_fmt(r['served_p50_minus_held_floor_ms'], 2)} ms over the held echo's: our request code, "
                          "and the engine's time in the server over the hold.", ""]
            if "lone_request_ms" in r:
                lines += _lone_lines(r["lone_request_ms"], r.get("model_only_batch1_p50_ms"))
        lines += _cpu_lines([r for r in summary if r.get("served_cores")])
    else:
        lines += ["| concurrency | req/s | p50 ms | p90 ms | p95 ms | p99 ms |", "|---:|---:|---:|---:|---:|---:|"]
        for lv in report["levels"]:
            lines.append(f"| {lv['concurrency']} | {lv['requests_per_s']:.1f} | {lv['p50_ms']:.1f} | {lv['p90_ms']:.1f} | "
                         f"{lv['p95_ms']:.1f} | {lv['p99_ms']:.1f} |")
        lines.append("")
    longer = [lv for lv in report["levels"] if lv.get("window_s", 0) > report["seconds"]]
    if longer:
        lines += ["Not stable over the asked windows, measured with longer ones: " + ", ".join(
            f"concurrency {lv['concurrency']} ({lv['window_s']:g} s)" for lv in longer) + ".", ""]
    lines += ["Where the time goes (Triton statistics, last round; per request):", "",
              "| items/request | concurrency | model | requests | executions | mean batch | queue ms | compute ms |",
              "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for lv in report["levels"]:
        for m in lv["models"]:
            lines.append(f"| {lv.get('items_per_request', 1)} | {lv['concurrency']} | {m['model']} | {m['requests']} | "
                         f"{m['executions']} | {m['mean_batch']:.1f} | {m['queue_ms']:.2f} | {m['compute_ms']:.2f} |")
    lines += _profile_lines(report.get("profile"))
    if report.get("profile_lone") and report["profile_lone"] is not report.get("profile"):
        lines += _profile_lines(report["profile_lone"])
    return "\n".join(lines) + "\n"


def _lone_lines(split: dict, alone: dict | None) -> list[str]:
    """The lone request's mean time, split (``lone_request_split``)."""
    engine = f"{split['engine']:.2f} ms"
    if alone and alone.get("median") is not None:
        engine += f" (the model alone, back to back: batch-1 p50 {alone['median']:.2f} ms)"
    return [f"Where a lone request's {split['mean_ms']:.2f} ms go (means over the rounds; the stubs' shares from py-spy "
            f"at concurrency 1): outside Triton (client, gRPC, front end) {split['outside_triton']:.2f} ms; the python "
            f"backend's hand-off to the stub and back {split['handoff']:.2f} ms; our Python {split['python']:.2f} ms; "
            f"the engine {engine}.", ""]


def _cpu_lines(cpu_rows: list[dict]) -> list[str]:
    """The CPU-by-process table (empty when no row measured it: a server that is not ours)."""
    if not cpu_rows:
        return []
    labels = list(dict.fromkeys(k for r in cpu_rows for k in r["served_cores"]))
    lines = ["CPU by process while served (cores, median over rounds), and CPU per item: served (server and "
             "stubs), the floor's, the model alone offline:", "",
             "| items/request | concurrency | " + " | ".join(labels) + " | served µs/item | floor µs/item | "
             "model-only µs/item |", "|---:|---:|" + "---:|" * (len(labels) + 3)]
    for r in cpu_rows:
        lines.append(f"| {r['items_per_request']} | {r['concurrency']} | "
                     + " | ".join(f"{r['served_cores'].get(k, 0.0):.2f}" for k in labels)
                     + f" | {_fmt(r.get('served_cpu_us_per_item'), 0)} | {_fmt(r.get('floor_cpu_us_per_item'), 0)} | "
                     f"{_fmt(r['offline_cpu_us_per_item'], 0)} |")
    return lines + [""]


def _profile_lines(profile: dict | None) -> list[str]:
    """py-spy's top frames per stub (``--profile``), when it ran."""
    if not profile:
        return []
    lines = ["", f"py-spy on the stubs at concurrency {profile['concurrency']} ({profile['seconds']:g} s, "
                 f"{profile['rate']} samples/s): top frames by own time, and by time inside them", ""]
    for stub, top in profile["stubs"].items():
        busy = f", its Python thread busy {top['busy_share']:.0%} of the time" if top.get("busy_share") is not None else ""
        lines += [f"{stub} ({top['samples']} samples{busy}):", "", "| own % | inside % | frame |", "|---:|---:|---|"]
        lines += [f"| {f['own']:.1%} | {f['inside']:.1%} | `{f['frame']}` |" for f in top["frames"]]
        lines.append("")
    return lines


def _fmt(spread: dict | None, digits: int = 0, unit: str = "") -> str:
    if not spread or spread.get("median") is None:
        return "n/a"
    m, lo, hi = spread["median"], spread["min"], spread["max"]
    if lo == hi:
        return f"{m:.{digits}f}{unit}"
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


def _item_note(report: dict) -> str:
    from serving.tools.kinds import tool_kind

    return tool_kind(report["task_type"]).perf_note(report)


def _items(task: str, data_dir: str | None, task_type: str, manifest: dict | None = None) -> list:
    """The dev items perf_analyzer sends (texts, (question, context) pairs, a UIE text with every prompt the dev set
    asks it); ``manifest``: the bundle's (its recorded data dir, without ``data_dir``)."""
    from serving.tools.smoke import _dev_items

    return _dev_items(task, data_dir, task_type, manifest=manifest)


def measure(repository: Path, task: str, data_dir: str | None, concurrency: Sequence[int], seconds: float,
            url: str | None = None, offline_seconds: float = 3.0, items: Sequence | None = None, rounds: int = 1,
            batched_concurrency: Sequence[int] = (), profile_seconds: float = 0.0,
            log=lambda msg: print(msg, file=sys.stderr)) -> dict:
    """The report ``main`` writes; ``items`` (texts, (question, context) pairs, or (text, schema) pairs) replace the
    dev set.  With ``url`` a running server is measured: no floor and no CPU by process (its processes are not
    ours to find)."""
    import pipeline  # noqa: F401  (numpy before paddle, for the offline measurement)
    from pipeline.contract import detect_cpu as detect
    from serving.server import start_server
    from serving.tools import floor, process_cpu
    from serving.tools.kinds import tool_kind
    from serving.tools.offline import BundleModel

    pa = find_perf_analyzer()
    bundle = BundleModel.open(repository)
    if url:
        _model_stats(url)  # a server answers there, before the offline measurement takes its seconds
    kind = tool_kind(bundle.task_type)
    items = list(items) if items is not None else _items(task, data_dir, bundle.task_type, bundle.manifest)
    if not items:
        raise PerfError(f"no dev items to send (task {task}): perf_analyzer needs at least one")
    names = bundle.names
    shapes = _shapes(bundle, kind, concurrency, batched_concurrency)
    report = {"model": names.ensemble, "task_type": bundle.task_type, "repository": str(repository), "seconds": seconds,
              "rounds": rounds, "perf_analyzer": pa.version(), "cpu": detect().as_dict(),
              "package": bundle.manifest.get("package", {}), "layout": bundle.manifest.get("layout", "ensemble"),
              **kind.perf_fields(items)}
    yardsticks, alone = _yardsticks(bundle, kind, items, shapes)
    lone = next((s for s in shapes if s.lone), None)
    if lone is not None and alone is not None and not url:
        lone.hold_ms = alone.p50_ms(min(offline_seconds, 2.0))  # how long the held echo holds a request
    composing = tuple(dict.fromkeys((names.tokenizer, names.model, names.postprocess)))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        echo = None if url else floor.write_floor_repository(repository, names.ensemble, names.tokenizer, tmp / "floor",
                                                             hold_ms=lone.hold_ms if lone is not None else None)
        # The server dies with this process: a kill -9 of `make perf` leaves no tritonserver, stubs or shared memory.
        server = None if url else start_server(repository, die_with_parent=True,
                                               extra_args=(f"--model-repository={tmp / 'floor'}",))
        try:
            grpc_url = url or f"127.0.0.1:{server.grpc_port}"
            served_procs = None if url else process_cpu.server_processes(server.process.pid, composing)
            floor_procs = None if url else process_cpu.server_processes(server.process.pid, (echo,))
            data = input_data(bundle.task_type, items, tmp / "input.json")
            for r in range(rounds):
                _offline_round(shapes, yardsticks, alone, offline_seconds)
                for shape in shapes:
                    log(f"perf: round {r + 1}/{rounds}, {shape.items} item(s) per request at concurrency "
                        f"{shape.concurrency}")
                    shape.served.append(run_level(pa, grpc_url, names.ensemble, data, shape.concurrency, seconds, composing,
                                                  tmp, log, shape.items, served_procs))
                    if echo:
                        shape.floor.append(run_level(pa, grpc_url, echo, data, shape.concurrency, seconds, (echo,), tmp,
                                                     log, shape.items, floor_procs))
                    if echo and shape is lone and shape.hold_ms:
                        held = floor.held_floor_name(names.ensemble)
                        shape.held_floor.append(run_level(pa, grpc_url, held, data, 1, seconds, (held,), tmp, log))
            if profile_seconds and served_procs:
                busiest = max((s for s in shapes if s.items == 1), key=lambda s: s.concurrency, default=None)
                if busiest is not None:
                    report["profile"] = profile_stubs(pa, grpc_url, names.ensemble, data, busiest.concurrency,
                                                      profile_seconds, served_procs, tmp)
                if lone is not None:  # where a lone request's time goes
                    report["profile_lone"] = report["profile"] if lone is busiest else profile_stubs(
                        pa, grpc_url, names.ensemble, data, 1, profile_seconds, served_procs, tmp)
        finally:
            if server is not None:
                server.stop()
    return _summarized(report, shapes, bundle, kind)


def _shapes(bundle, kind, concurrency: Sequence[int], batched_concurrency: Sequence[int]) -> list["Shape"]:
    """One item per request at each of ``concurrency``; FastDeploy's 32 per request at each of ``batched_concurrency``
    (never more than the bundle's max_batch_size: Triton refuses a larger request; none for windowed kinds)."""
    shapes = [Shape(1, c) for c in concurrency]
    most = int(bundle.manifest.get("package", {}).get("max_batch_size", 0) or 0)
    if not kind.windowed and most > 1:
        shapes += [Shape(min(BATCHED_ITEMS, most), c) for c in batched_concurrency]
    return shapes


def _yardsticks(bundle, kind, items: Sequence, shapes: Sequence["Shape"]):
    """({items per request: the model alone on requests of that many}, the batch-1 latency yardstick a lone request
    (one item at concurrency 1) is held to, or None when no shape is one)."""
    yardsticks = {n: kind.model_only(bundle, items, n) for n in sorted({s.items for s in shapes})}
    lone = any(s.lone for s in shapes)
    return yardsticks, kind.model_only(bundle, items[:300], 1, alone=True) if lone else None


def _offline_round(shapes: Sequence["Shape"], yardsticks: dict, alone, seconds: float) -> None:
    """A round's offline half: each yardstick's rate (and the batch-1 latency a lone request is held to), given to
    the shapes it is the yardstick of."""
    for n, stick in yardsticks.items():
        measured = stick.round(seconds)
        for shape in shapes:
            if shape.items == n:
                shape.model_only.append(measured)
    if alone is not None:
        b1 = alone.p50_ms(seconds)
        for shape in shapes:
            if shape.lone:
                shape.model_only_p50_ms.append(b1)


def _summarized(report: dict, shapes: Sequence["Shape"], bundle, kind) -> dict:
    report["levels"] = [asdict(s.served[-1]) for s in shapes]
    report["summary"] = [s.summary(kind.model_only_batch(bundle, s.items)) for s in shapes]
    def median(levels, key: str) -> float:
        return _spread([getattr(lv, key) for lv in levels])["median"] or 0.0

    for shape, row in zip(shapes, report["summary"]):
        if shape.lone and report.get("profile_lone"):
            split = lone_request_split(median(shape.served, "mean_ms"), median(shape.served, "server_ms"),
                                       1000.0 / max(median(shape.served, "requests_per_s"), 1e-9), report["profile_lone"])
            if split:
                row["lone_request_ms"] = split
    one = [row for row in report["summary"] if row["items_per_request"] == 1]
    if one:  # the one-item yardstick (earlier reports' field)
        report["offline_model_only_items_per_s"] = one[0]["model_only_items_per_s"]["median"]
    return report


def profile_stubs(pa: PerfAnalyzer, url: str, model: str, data: Path, concurrency: int, seconds: float,
                  processes: dict[str, int], workdir: Path, rate: int = 250, top: int = 12) -> dict:
    """py-spy on every stub of ``processes`` while perf_analyzer loads the server at ``concurrency`` (a separate
    run: sampling costs a little CPU, so its rate is not reported).  Top frames by own time and inclusive time."""
    from serving.server import die_with_parent_preexec

    spy = _py_spy()
    stubs = {label: pid for label, pid in processes.items() if label.startswith("stub ")}
    load = subprocess.Popen([str(pa.binary), "-m", model, "-u", url, "-i", "grpc", "--input-data", str(data),
                             "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
                             "--measurement-interval", str(int((seconds + 4) * 1000)), "--max-trials", "3",
                             "--stability-percentage", "100"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=pa.env, preexec_fn=die_with_parent_preexec())
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
                raise PerfError(f"py-spy failed (exit {s.returncode}): {err.decode(errors='replace').strip().splitlines()[-1:]}")
    finally:
        load.kill()
        load.wait()
    return {"concurrency": concurrency, "seconds": seconds, "rate": rate,
            "stubs": {label: top_frames(outs[label].read_text(errors="replace"), top, rate * seconds) for label in stubs}}


ENGINE_FRAME = " (engine.py:"  # py-spy's name for a frame of the bundle's engine (every served engine is an engine.py)


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


def _py_spy() -> str:
    path = Path(sys.executable).parent / "py-spy"
    found = str(path) if path.is_file() else shutil.which("py-spy")
    if not found:
        raise PerfError("--profile needs py-spy (requirements.lock installs it into .venv)")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.perf", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--repository", default="model_repository", help="folder holding <task>/ (or the bundle itself)")
    p.add_argument("--data-dir")
    p.add_argument("--url", help="gRPC host:port of a running server (default: start one on the bundle, with the floor)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="one item per request")
    p.add_argument("--batched-concurrency", type=int, nargs="*", default=[1, 4],
                   help=f"{BATCHED_ITEMS} items per request (FastDeploy's clients), where requests batch; none: skip")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (model-only, served, floor); ratios are per round")
    p.add_argument("--seconds", type=float, help="perf_analyzer measurement window (default 5 s; 10 s for reading "
                   "comprehension, whose requests take 0.2-2 s: 5 s windows did not give perf_analyzer a stable "
                   "measurement at concurrency 4 on CMRC2018)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help="py-spy on each stub at the highest one-item concurrency for SECONDS (after the rounds), and at "
                   "concurrency 1 where it was measured (where a lone request's time goes)")
    p.add_argument("--json-out")
    args = p.parse_args(argv)
    import pipeline  # noqa: F401  (process setup before anything imports paddle)
    from pipeline.errors import UserInputError
    from serving.tools.client import ClientError
    from pipeline.contract import TaskKind
    from serving.server import ServerError, resolve_repository
    from serving.tools.kinds import tool_kind
    from serving.tools.smoke import check_out_file

    out = Path(args.json_out or f"runs/{args.task}/perf.json")
    try:
        find_perf_analyzer()  # first: the install hint is the useful message on a new machine
        bad = [c for c in [*args.concurrency, *args.batched_concurrency] if c < 1]
        if bad:
            raise PerfError(f"--concurrency {bad[0]}: concurrent requests, must be >= 1")
        if not 1 <= args.rounds <= 20:
            raise PerfError(f"--rounds {args.rounds}: 1 to 20")
        if args.seconds is not None and not 0.001 <= args.seconds <= 3600:  # perf_analyzer takes whole ms
            raise PerfError(f"--seconds {args.seconds}: the measurement window, 0.001 to 3600 s")
        if not 0 <= args.profile <= 600:
            raise PerfError(f"--profile {args.profile}: seconds of sampling, 0 to 600")
        if args.profile:
            _py_spy()
        check_out_file(str(out))
        repo = resolve_repository(Path(args.repository), args.task)
        task_type = json.loads((repo / "bundle.json").read_text()).get("task_type", TaskKind.CLASSIFICATION.value)
        seconds = args.seconds or tool_kind(task_type).perf_seconds
        report = measure(repo, args.task, args.data_dir, args.concurrency, seconds, args.url, rounds=args.rounds,
                         batched_concurrency=args.batched_concurrency, profile_seconds=args.profile)
    except (PerfError, ServerError, ClientError, UserInputError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    md = format_markdown(report)
    print(md)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
