"""``make perf``: Triton's perf_analyzer against the served bundle, and where the time goes.

    python -m serving.tools.perf --task tnews [--repository model_repository] [--concurrency 1 4 16]
                           [--batched-concurrency 1 4] [--rounds 3] [--seconds 5]
                           [--json-out runs/tnews/perf.json]

Starts tritonserver on the bundle (or uses ``--url``) and, in the same server, the platform's floor: an echo model
with the bundle's interface that answers constant outputs (``serving.tools.floor``).  perf_analyzer sends requests
drawn from the task's dev set: one item per request (titles, NER texts, question + context pairs, UIE texts each
with the whole schema, as a client sends them) at each ``--concurrency``, and, for kinds whose requests batch, 32
items per request (FastDeploy's clients' shape) at each ``--batched-concurrency``.

Each of ``--rounds`` rounds measures, in turn: the model file alone (the offline yardstick, every padded width warmed,
the served engine's threads), then for every shape the served bundle and the floor.  Per shape the record gives the
median and spread over rounds of: served items/s, floor items/s, model-only items/s, the ceiling
1 / (1/model-only + 1/floor) (what the bundle could serve if our request code cost nothing), served / model-only and
served / ceiling (ratios within a round); p50/p99, and for a lone request (one item at concurrency 1) the model's own
batch-1 p50; CPU by process (tritonserver, each python stub, the client) in cores and in CPU microseconds per item
served, against the model-only CPU per item offline; and Triton's per-model statistics of the last round (executions,
mean batch, queue and compute time).  The record is ``pipeline.validation.release.PerfRecord``, written as JSON
(``make gate`` reads it back and holds its served figures against a previous release's) and Markdown.

Research instruments built on these pieces (py-spy on the stubs, a lone request's time split) are not part of the
product: ``scripts/perf_lab.py``.

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
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from pipeline.validation.release import Level, ModelShare, PerfRecord, ShapeFigures, Spread

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".venv" / "perf_analyzer"


class PerfError(RuntimeError):
    """perf_analyzer missing or failing: one line, exit 2."""


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    env: dict

    def version(self) -> str:
        from serving.process_group import die_with_parent_preexec

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


BATCHED_ITEMS = 32  # FastDeploy's clients send 32 texts per request


def request_items(task: str, data_dir: str | None, task_type: str, manifest: dict | None = None) -> list:
    """The dev items perf_analyzer sends (texts, (question, context) pairs, a UIE text with every prompt the dev set
    asks it); ``manifest``: the bundle's (its recorded data dir, without ``data_dir``)."""
    from serving.tools.smoke import _dev_items

    return _dev_items(task, data_dir, task_type, manifest=manifest)


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
    from serving.process_group import die_with_parent_preexec

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


def perf_analyzer_command(pa: PerfAnalyzer, url: str, model: str, data: Path, concurrency: int, window_s: float,
                          items_per_request: int = 1) -> list[str]:
    """One perf_analyzer run over gRPC at ``concurrency``, in time windows of ``window_s``."""
    cmd = [str(pa.binary), "-m", model, "-u", url, "-i", "grpc", "--input-data", str(data),
           "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
           "--measurement-interval", str(int(window_s * 1000))]
    return cmd + (["-b", str(items_per_request)] if items_per_request > 1 else [])


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
        cmd = perf_analyzer_command(pa, url, model, data, concurrency, window, items_per_request) + [
            "--stability-percentage", "25", "--max-trials", "6", "-f", str(out_csv)]
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
        _unstable_or_fail(rc, output, tail, concurrency, seconds, window, attempt)
        log(f"perf_analyzer: concurrency {concurrency} not stable over {window:g} s windows (another process "
            f"on these cores?): measuring again with {2 * window:g} s windows")
        attempt += 1
    cores = process_cpu.cores(cpu0, cpu1) if processes else {}
    if processes:
        cores["client"] = client_cpu / max(cpu1.at - cpu0.at, 1e-9)
    return _level(out_csv, concurrency, window, items_per_request, cores, model_shares(before, after, composing))


def _unstable_or_fail(rc: int, output: str, tail: list[str], concurrency: int, seconds: float, window: float,
                      attempt: int) -> None:
    """Returns when the level may be measured again with longer windows; PerfError when not."""
    if UNSTABLE not in output:
        raise PerfError(f"perf_analyzer failed at concurrency {concurrency} (exit {rc}): {' | '.join(tail)}")
    if attempt == WINDOW_RETRIES:
        raise PerfError(f"perf_analyzer found no stable measurement at concurrency {concurrency} with windows of "
                        f"{seconds:g} to {window:g} s: the machine is too busy to measure (stop other work, or "
                        "pass a longer --seconds)")


CLIENT_PARTS = ("Client Send", "Network+Server Send/Recv", "Client Recv")  # perf_analyzer's csv columns, µs
SERVER_PARTS = ("Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output")


def _level(out_csv: Path, concurrency: int, window: float, items_per_request: int, cores: dict,
           shares: list[ModelShare]) -> Level:
    """perf_analyzer's csv row as a Level."""
    with out_csv.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    # perf_analyzer's own split of its mean latency (µs): the client's and the network's part, and Triton's
    parts = {k: float(row.get(k) or 0) for k in (*CLIENT_PARTS, *SERVER_PARTS)}
    return Level(concurrency, float(row["Inferences/Second"]),
                 *(float(row[f"p{p} latency"]) / 1000 for p in (50, 90, 95, 99)),
                 models=shares, window_s=window, items_per_request=items_per_request, cores=cores,
                 mean_ms=sum(parts.values()) / 1000, server_ms=sum(parts[k] for k in SERVER_PARTS) / 1000)


def ceiling(model_only: float, floor: float) -> float:
    """What the bundle could serve if its own request code cost nothing: the model's time and the platform's floor
    per item, added (both on the same cores, one after the other)."""
    return 1.0 / (1.0 / model_only + 1.0 / floor)


@dataclass
class Shape:
    """One request shape measured in every round: ``items`` per request at ``concurrency``."""
    items: int
    concurrency: int
    served: list[Level] = field(default_factory=list)
    floor: list[Level] = field(default_factory=list)
    model_only: list[tuple[float, float]] = field(default_factory=list)  # per round: (items/s, CPU seconds per item)
    model_only_p50_ms: list[float] = field(default_factory=list)  # a lone request's: the model's batch-1 p50 per round

    @property
    def lone(self) -> bool:
        """One item at concurrency 1: the shape also held to the model's batch-1 latency."""
        return self.items == 1 and self.concurrency == 1

    def figures(self, model_only_batch: str) -> ShapeFigures:
        """The rounds' figures; ratios are taken within each round."""
        served = [lv.requests_per_s for lv in self.served]
        floors = [lv.requests_per_s for lv in self.floor]
        mo = [r for r, _ in self.model_only]
        ceil = [ceiling(m, f) for m, f in zip(mo, floors)]
        b1 = self.model_only_p50_ms
        return ShapeFigures(
            self.items, self.concurrency, model_only_batch,
            served_items_per_s=Spread.of(served), model_only_items_per_s=Spread.of(mo),
            served_over_model_only=Spread.of([s / m for s, m in zip(served, mo)]),
            p50_ms=Spread.of([lv.p50_ms for lv in self.served]), p99_ms=Spread.of([lv.p99_ms for lv in self.served]),
            offline_cpu_us_per_item=Spread.of([c * 1e6 for _, c in self.model_only]),
            model_only_batch1_p50_ms=Spread.of(b1) if b1 else None,
            served_p50_minus_batch1_ms=Spread.of([lv.p50_ms - m for lv, m in zip(self.served, b1)]) if b1 else None,
            floor_items_per_s=Spread.of(floors) if floors else None,
            ceiling_items_per_s=Spread.of(ceil) if floors else None,
            served_over_ceiling=Spread.of([s / c for s, c in zip(served, ceil)]) if floors else None,
            served_cores=_median_cores(self.served), served_cpu_us_per_item=_cpu_per_item(self.served),
            floor_cores=_median_cores(self.floor), floor_cpu_us_per_item=_cpu_per_item(self.floor))


def _median_cores(levels: Sequence[Level]) -> dict[str, float]:
    """Process -> cores, the median over the rounds (tritonserver first, the client last)."""
    cores = [lv.cores for lv in levels if lv.cores]
    labels = sorted({k for c in cores for k in c}, key=lambda k: (k != "tritonserver", k == "client", k))
    return {k: Spread.of([c.get(k, 0.0) for c in cores]).median for k in labels}


def _cpu_per_item(levels: Sequence[Level]) -> Spread | None:
    """The server's CPU (tritonserver and its stubs, not the client) in µs per item, per round; None: not measured."""
    per_item = [sum(v for k, v in lv.cores.items() if k != "client") / lv.requests_per_s * 1e6
                for lv in levels if lv.cores and lv.requests_per_s]
    return Spread.of(per_item) if per_item else None


def format_markdown(record: PerfRecord) -> str:
    lines = [f"# perf: {record.model} ({record.task_type})", "",
             f"perf_analyzer {record.perf_analyzer} over gRPC{record.request_note}, {record.seconds:.0f} s windows, "
             f"{record.rounds} interleaved round(s); CPU {record.cpu.get('model', '?')} "
             f"({', '.join(record.cpu.get('flags') or []) or 'no int8 flags'}, {record.cpu.get('cores', '?')} cores); "
             f"{record.package.get('instances', '?')} instance(s) per model, "
             f"{record.package.get('engine_threads', '?')} engine thread(s) each, layout {record.layout}.", ""]
    if record.summary:
        lines += _shape_lines(record.summary) + _cpu_lines([r for r in record.summary if r.served_cores])
    longer = [lv for lv in record.levels if lv.window_s > record.seconds]
    if longer:
        lines += ["Not stable over the asked windows, measured with longer ones: " + ", ".join(
            f"concurrency {lv.concurrency} ({lv.window_s:g} s)" for lv in longer) + ".", ""]
    lines += ["Where the time goes (Triton statistics, last round; per request):", "",
              "| items/request | concurrency | model | requests | executions | mean batch | queue ms | compute ms |",
              "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for lv in record.levels:
        for m in lv.models:
            lines.append(f"| {lv.items_per_request} | {lv.concurrency} | {m.model} | {m.requests} | {m.executions} | "
                         f"{m.mean_batch:.1f} | {m.queue_ms:.2f} | {m.compute_ms:.2f} |")
    return "\n".join(lines) + "\n"


def _shape_lines(summary: Sequence[ShapeFigures]) -> list[str]:
    """The table of rates and ratios per shape, what model-only ran, and a lone request's latency."""
    lines = ["Items/s, median [min-max] over rounds; ratios within each round.  ceiling = 1 / (1/model-only + "
             "1/floor): the rate if our request code cost nothing.", "",
             "| items/request | concurrency | served | floor (echo) | model-only | ceiling | served / model-only | "
             "served / ceiling | p50 ms | p99 ms |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary:
        lines.append(f"| {r.items_per_request} | {r.concurrency} | {fmt(r.served_items_per_s)} | "
                     f"{fmt(r.floor_items_per_s)} | {fmt(r.model_only_items_per_s)} | {fmt(r.ceiling_items_per_s)} | "
                     f"{fmt(r.served_over_model_only, 2, 'x')} | {fmt(r.served_over_ceiling, 2, 'x')} | "
                     f"{fmt(r.p50_ms, 1)} | {fmt(r.p99_ms, 1)} |")
    lines += ["", "model-only: the bundle's model file alone in this process (" + ", ".join(
        sorted({f"{r.items_per_request} item(s)/request: {r.model_only_batch}" for r in summary})) + ").", ""]
    for r in summary:
        if r.model_only_batch1_p50_ms is not None:
            lines += [f"A lone request (concurrency 1): served p50 {fmt(r.p50_ms, 2)} ms against the model's own "
                      f"batch-1 p50 {fmt(r.model_only_batch1_p50_ms, 2)} ms: "
                      f"+{fmt(r.served_p50_minus_batch1_ms, 2)} ms per request.", ""]
    return lines


def _cpu_lines(cpu_rows: list[ShapeFigures]) -> list[str]:
    """The CPU-by-process table (empty when no row measured it: a server that is not ours)."""
    if not cpu_rows:
        return []
    labels = list(dict.fromkeys(k for r in cpu_rows for k in r.served_cores))
    lines = ["CPU by process while served (cores, median over rounds), and CPU per item: served (server and "
             "stubs), the floor's, the model alone offline:", "",
             "| items/request | concurrency | " + " | ".join(labels) + " | served µs/item | floor µs/item | "
             "model-only µs/item |", "|---:|---:|" + "---:|" * (len(labels) + 3)]
    for r in cpu_rows:
        lines.append(f"| {r.items_per_request} | {r.concurrency} | "
                     + " | ".join(f"{r.served_cores.get(k, 0.0):.2f}" for k in labels)
                     + f" | {fmt(r.served_cpu_us_per_item, 0)} | {fmt(r.floor_cpu_us_per_item, 0)} | "
                     f"{fmt(r.offline_cpu_us_per_item, 0)} |")
    return lines + [""]


def fmt(spread: Spread | None, digits: int = 0, unit: str = "") -> str:
    """A spread as "median [min-max]" (the median alone where every round agreed); n/a when not measured."""
    if spread is None or spread.median is None:
        return "n/a"
    m, lo, hi = spread.median, spread.min, spread.max
    if lo == hi or lo is None or hi is None:
        return f"{m:.{digits}f}{unit}"
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


@dataclass(frozen=True)
class Target:
    """What perf_analyzer measures: the served model and its composing models at ``url``; on make perf's own server
    also the floor's echo model beside it, and the pids whose CPU counts (label -> pid) for each."""
    url: str
    model: str
    composing: tuple[str, ...]
    floor: str | None = None
    served_procs: dict[str, int] | None = None
    floor_procs: dict[str, int] | None = None


@contextmanager
def serve(repository: Path, names, url: str | None, workdir: Path) -> Iterator[Target]:
    """The served bundle to measure: the server at ``url`` (no floor, no CPU by process: its processes are not ours
    to find), or tritonserver started on the bundle with the floor's repository beside it (the bundle is untouched)."""
    from serving.server import start_server
    from serving.tools import floor, process_cpu

    composing = tuple(dict.fromkeys((names.tokenizer, names.model, names.postprocess)))
    if url:
        yield Target(url, names.ensemble, composing)
        return
    echo = floor.write_floor_repository(repository, names.ensemble, names.tokenizer, workdir / "floor")
    # The server dies with this process: a kill -9 of `make perf` leaves no tritonserver, stubs or shared memory.
    # Its log goes with the work folder (a failed start puts its tail in the error): none piles up in the temp dir.
    server = start_server(repository, log_path=workdir / "tritonserver.log", die_with_parent=True,
                          extra_args=(f"--model-repository={workdir / 'floor'}",))
    try:
        pid = server.process.pid
        yield Target(f"127.0.0.1:{server.grpc_port}", names.ensemble, composing, echo,
                     process_cpu.server_processes(pid, composing), process_cpu.server_processes(pid, (echo,)))
    finally:
        server.stop()


def measure(repository: Path, task: str, data_dir: str | None, concurrency: Sequence[int], seconds: float,
            url: str | None = None, offline_seconds: float = 3.0, items: Sequence | None = None, rounds: int = 1,
            batched_concurrency: Sequence[int] = (), log=lambda msg: print(msg, file=sys.stderr)) -> PerfRecord:
    """The record ``main`` writes; ``items`` (texts, (question, context) pairs, or (text, schema) pairs) replace the
    dev set.  With ``url`` a running server is measured: no floor and no CPU by process."""
    import pipeline  # noqa: F401  (numpy before paddle, for the offline measurement)
    from serving.tools.kinds import tool_kind
    from serving.tools.offline import BundleModel

    pa = find_perf_analyzer()
    bundle = BundleModel.open(repository)
    if url:
        _model_stats(url)  # a server answers there, before the offline measurement takes its seconds
    kind = tool_kind(bundle.task_type)
    items = list(items) if items is not None else request_items(task, data_dir, bundle.task_type, bundle.manifest)
    if not items:
        raise PerfError(f"no dev items to send (task {task}): perf_analyzer needs at least one")
    shapes = _shapes(bundle, kind, concurrency, batched_concurrency)
    version = pa.version()
    yardsticks, alone = _yardsticks(bundle, kind, items, shapes)
    with tempfile.TemporaryDirectory() as tmp, serve(repository, bundle.names, url, Path(tmp)) as target:
        data = input_data(bundle.task_type, items, Path(tmp) / "input.json")
        for r in range(rounds):
            _offline_round(shapes, yardsticks, alone, offline_seconds)
            _served_round(pa, target, data, shapes, seconds, Path(tmp), log, f"round {r + 1}/{rounds}")
    return _record(bundle, kind, items, shapes, repository, seconds, rounds, version)


def _shapes(bundle, kind, concurrency: Sequence[int], batched_concurrency: Sequence[int]) -> list[Shape]:
    """One item per request at each of ``concurrency``; FastDeploy's 32 per request at each of ``batched_concurrency``
    (never more than the bundle's max_batch_size: Triton refuses a larger request; none for windowed kinds)."""
    shapes = [Shape(1, c) for c in concurrency]
    most = int(bundle.manifest.get("package", {}).get("max_batch_size", 0) or 0)
    if not kind.windowed and most > 1:
        shapes += [Shape(min(BATCHED_ITEMS, most), c) for c in batched_concurrency]
    return shapes


def _yardsticks(bundle, kind, items: Sequence, shapes: Sequence[Shape]):
    """({items per request: the model alone on requests of that many}, the batch-1 latency yardstick a lone request
    (one item at concurrency 1) is held to, or None when no shape is one)."""
    yardsticks = {n: kind.model_only(bundle, items, n) for n in sorted({s.items for s in shapes})}
    lone = any(s.lone for s in shapes)
    return yardsticks, kind.model_only(bundle, items[:300], 1, alone=True) if lone else None


def _offline_round(shapes: Sequence[Shape], yardsticks: dict, alone, seconds: float) -> None:
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


def _served_round(pa: PerfAnalyzer, target: Target, data: Path, shapes: Sequence[Shape], seconds: float, workdir: Path,
                  log, label: str) -> None:
    """A round's served half: every shape on the served bundle, then on the floor (when there is one)."""
    for shape in shapes:
        log(f"perf: {label}, {shape.items} item(s) per request at concurrency {shape.concurrency}")
        shape.served.append(run_level(pa, target.url, target.model, data, shape.concurrency, seconds, target.composing,
                                      workdir, log, shape.items, target.served_procs))
        if target.floor:
            shape.floor.append(run_level(pa, target.url, target.floor, data, shape.concurrency, seconds,
                                         (target.floor,), workdir, log, shape.items, target.floor_procs))


def _record(bundle, kind, items: Sequence, shapes: Sequence[Shape], repository: Path, seconds: float, rounds: int,
            version: str) -> PerfRecord:
    from pipeline.contract import detect_cpu

    task = bundle.manifest.get("task")
    return PerfRecord(model=bundle.names.ensemble, task=task if isinstance(task, str) else None,
                      summary=[s.figures(kind.model_only_batch(bundle, s.items)) for s in shapes],
                      task_type=bundle.task_type, repository=str(repository), seconds=seconds, rounds=rounds,
                      perf_analyzer=version, cpu=detect_cpu().as_dict(), package=bundle.manifest.get("package", {}),
                      layout=bundle.manifest.get("layout", "ensemble"), request_note=kind.perf_note(items),
                      levels=[s.served[-1] for s in shapes])


def _check_args(args) -> None:
    """PerfError for a command line perf cannot run (after perf_analyzer itself: its install hint comes first)."""
    bad = [c for c in [*args.concurrency, *args.batched_concurrency] if c < 1]
    if bad:
        raise PerfError(f"--concurrency {bad[0]}: concurrent requests, must be >= 1")
    if not 1 <= args.rounds <= 20:
        raise PerfError(f"--rounds {args.rounds}: 1 to 20")
    if args.seconds is not None and not 0.001 <= args.seconds <= 3600:  # perf_analyzer takes whole ms
        raise PerfError(f"--seconds {args.seconds}: the measurement window, 0.001 to 3600 s")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m serving.tools.perf", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or task YAML")
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
    p.add_argument("--json-out")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import pipeline  # noqa: F401  (process setup before anything imports paddle)
    from pipeline.contract import TaskKind
    from pipeline.errors import UserInputError
    from serving.server import ServerError, resolve_repository
    from serving.tools.client import ClientError
    from serving.tools.kinds import tool_kind
    from pipeline.config import task_name
    from serving.tools.smoke import check_out_file

    try:
        find_perf_analyzer()  # first: the install hint is the useful message on a new machine
        _check_args(args)
        name = task_name(args.task)
        out = Path(args.json_out or f"runs/{name}/perf.json")
        check_out_file(str(out))
        repo = resolve_repository(Path(args.repository), name)
        task_type = json.loads((repo / "bundle.json").read_text()).get("task_type", TaskKind.CLASSIFICATION.value)
        seconds = args.seconds or tool_kind(task_type).perf_seconds
        record = measure(repo, args.task, args.data_dir, args.concurrency, seconds, args.url, rounds=args.rounds,
                         batched_concurrency=args.batched_concurrency)
    except (PerfError, ServerError, ClientError, UserInputError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    md = format_markdown(record)
    print(md)
    out.parent.mkdir(parents=True, exist_ok=True)
    record.write(out)
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
