"""``make perf``: Triton's perf_analyzer against the served ensemble, with where the time goes.

    python -m serving.tools.perf --task tnews [--repository model_repository] [--concurrency 1 4 16]
                           [--seconds 5] [--json-out runs/tnews/perf.json]

Starts tritonserver on the bundle (or uses ``--url``), feeds perf_analyzer requests drawn from the task's dev
set (titles, NER texts, question + context pairs, UIE texts each with the whole schema; one item per request, as a
client sends them), and for each
concurrency level reports throughput and p50/p90/p95/p99 latency as perf_analyzer measured them, plus the
per-model breakdown from Triton's own statistics over the same window (requests, executions, mean batch,
queue and compute time of the tokenizer, the model and the post-processing).  The offline model-only rate
of the same model file at the served preferred batch size, measured in the same run, gives the
served/offline ratio.  Writes JSON and Markdown.

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
import subprocess
import sys
import tempfile
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
    requests_per_s: float  # = items per second: one dev item per request
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    models: list[ModelShare] = field(default_factory=list)
    window_s: float = 0.0  # the perf_analyzer window these numbers came from (longer than asked when unstable)


def input_data(task_type: str, items: Sequence, path: Path, limit: int = 2000) -> Path:
    """perf_analyzer's ``--input-data`` JSON: one entry per request, each a single dev item."""
    from serving.tools.kinds import tool_kind

    kind = tool_kind(task_type)
    rows = [kind.perf_input(item) for item in list(items)[:limit]]
    path.write_text(json.dumps({"data": rows}, ensure_ascii=False), encoding="utf-8")
    return path


def _model_stats(url: str) -> dict[str, dict]:
    import tritonclient.grpc as tg

    from tritonclient.utils import InferenceServerException

    try:
        client = tg.InferenceServerClient(url)
    except (InferenceServerException, ValueError) as exc:
        raise PerfError(f"gRPC {url}: not a host:port ({exc})") from None
    try:
        stats = client.get_inference_statistics(as_json=True)["model_stats"]
    except InferenceServerException as exc:
        raise PerfError(f"no Triton answers gRPC at {url} ({exc.message() or exc})") from None
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


def run_level(pa: PerfAnalyzer, url: str, model: str, data: Path, concurrency: int, seconds: float,
              composing: Sequence[str], workdir: Path, log=lambda msg: print(msg, file=sys.stderr)) -> Level:
    """One concurrency level.  On a shared or loaded machine perf_analyzer may not see 6 windows within 25% of
    each other and exits without numbers; the level is then measured again with windows twice as long (up to
    ``WINDOW_RETRIES`` times), and the window that gave the numbers is reported with them."""
    from serving.server import die_with_parent_preexec

    out_csv = workdir / f"c{concurrency}.csv"
    for attempt in range(WINDOW_RETRIES + 1):
        window = seconds * 2 ** attempt
        cmd = [str(pa.binary), "-m", model, "-u", url, "-i", "grpc", "--input-data", str(data),
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
               "--measurement-interval", str(int(window * 1000)), "--stability-percentage", "25",
               "--max-trials", "6", "-f", str(out_csv)]
        out_csv.unlink(missing_ok=True)
        before = _model_stats(url)
        # perf_analyzer dies with this process (kill -9 of `make perf` leaves no load generator behind)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=pa.env, timeout=max(120, window * 12 + 60),
                              preexec_fn=die_with_parent_preexec())
        after = _model_stats(url)
        if proc.returncode == 0 and out_csv.is_file():
            break
        output = proc.stdout + proc.stderr
        tail = output.strip().splitlines()[-3:]
        if UNSTABLE not in output:
            raise PerfError(f"perf_analyzer failed at concurrency {concurrency} (exit {proc.returncode}): {' | '.join(tail)}")
        if attempt == WINDOW_RETRIES:
            raise PerfError(f"perf_analyzer found no stable measurement at concurrency {concurrency} with windows of "
                            f"{seconds:g} to {window:g} s: the machine is too busy to measure (stop other work, or "
                            "pass a longer --seconds)")
        log(f"perf_analyzer: concurrency {concurrency} not stable over {window:g} s windows (another process "
            f"on these cores?): measuring again with {2 * window:g} s windows")
    with out_csv.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    rps = float(row["Inferences/Second"])
    return Level(concurrency, rps, *(float(row[f"p{p} latency"]) / 1000 for p in (50, 90, 95, 99)),
                 models=model_shares(before, after, composing), window_s=window)


def format_markdown(report: dict) -> str:
    lines = [f"# perf: {report['model']} ({report['task_type']})", "",
             f"perf_analyzer {report['perf_analyzer']} over gRPC, one dev item per request"
             f"{_item_note(report)}, "
             f"{report['seconds']:.0f} s windows; CPU {report['cpu']['model']} ({', '.join(report['cpu']['flags']) or 'no int8 flags'}, "
             f"{report['cpu']['cores']} cores); {report['package'].get('instances', '?')} instance(s) per model, "
             f"{report['package'].get('engine_threads', '?')} engine thread(s) each, layout "
             f"{report['layout']}.", "",
             "| concurrency | req/s | p50 ms | p90 ms | p95 ms | p99 ms | served / offline |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    offline = report.get("offline_model_only_items_per_s")
    for lv in report["levels"]:
        ratio = f"{lv['requests_per_s'] / offline:.2f}x" if offline else "n/a"
        lines.append(f"| {lv['concurrency']} | {lv['requests_per_s']:.1f} | {lv['p50_ms']:.1f} | {lv['p90_ms']:.1f} | "
                     f"{lv['p95_ms']:.1f} | {lv['p99_ms']:.1f} | {ratio} |")
    longer = [lv for lv in report["levels"] if lv.get("window_s", 0) > report["seconds"]]
    if longer:
        lines += ["", "Not stable over the asked windows, measured with longer ones: " + ", ".join(
            f"concurrency {lv['concurrency']} ({lv['window_s']:g} s)" for lv in longer) + "."]
    if offline:
        lo, hi = report["offline_rounds"][0], report["offline_rounds"][-1]
        lines += ["", f"Offline model-only (the bundle's model file, batch {report['offline_batch_size']}, same run, "
                      f"median of 3 rounds before the server started): {offline:.1f} items/s [{lo:.1f}-{hi:.1f}]."]
    else:
        lines += ["", f"Offline model-only: {report.get('offline_note', 'not measured')}."]
    lines += ["", "Where the time goes (Triton statistics over each level; per request):", "",
              "| concurrency | model | requests | executions | mean batch | queue ms | compute ms |",
              "|---:|---|---:|---:|---:|---:|---:|"]
    for lv in report["levels"]:
        for m in lv["models"]:
            lines.append(f"| {lv['concurrency']} | {m['model']} | {m['requests']} | {m['executions']} | {m['mean_batch']:.1f} | "
                         f"{m['queue_ms']:.2f} | {m['compute_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def _item_note(report: dict) -> str:
    from serving.tools.kinds import tool_kind

    return tool_kind(report["task_type"]).perf_note(report)


def _items(task: str, data_dir: str | None, task_type: str, manifest: dict | None = None) -> list:
    """The dev items perf_analyzer sends (texts, (question, context) pairs, a UIE text with every prompt the dev set
    asks it); ``manifest``: the bundle's (its recorded data dir, without ``data_dir``)."""
    from serving.tools.smoke import _dev_items

    return _dev_items(task, data_dir, task_type, manifest=manifest)


def measure(repository: Path, task: str, data_dir: str | None, concurrency: Sequence[int], seconds: float,
            url: str | None = None, offline_seconds: float = 10.0, items: Sequence | None = None) -> dict:
    """The report ``main`` writes; ``items`` (texts, (question, context) pairs, or (text, schema) pairs) replace the dev set."""
    import pipeline  # noqa: F401  (numpy before paddle, for the offline measurement)
    from pipeline.contract import detect_cpu as detect
    from serving.tools.kinds import tool_kind
    from serving.tools.offline import BundleModel
    from serving.server import start_server

    pa = find_perf_analyzer()
    bundle = BundleModel.open(repository)
    if url:
        _model_stats(url)  # a server answers there, before the offline measurement takes its seconds
    task_type = bundle.task_type
    kind = tool_kind(task_type)
    items = list(items) if items is not None else _items(task, data_dir, task_type, bundle.manifest)
    if not items:
        raise PerfError(f"no dev items to send (task {task}): perf_analyzer needs at least one")
    names = bundle.names
    report = {"model": names.ensemble, "task_type": task_type, "repository": str(repository), "seconds": seconds,
              "perf_analyzer": pa.version(), "cpu": detect().as_dict(), "package": bundle.manifest.get("package", {}),
              "layout": bundle.manifest.get("layout", "ensemble")}
    # the kind's offline yardstick: three rounds before the server starts, the median
    report.update(kind.offline_rate(bundle, items, offline_seconds / 3))
    # The server dies with this process: a kill -9 of `make perf` leaves no tritonserver, stubs or shared memory.
    server = None if url else start_server(repository, die_with_parent=True)
    try:
        grpc_url = url or f"127.0.0.1:{server.grpc_port}"
        with tempfile.TemporaryDirectory() as tmp:
            data = input_data(task_type, items, Path(tmp) / "input.json")
            levels = [run_level(pa, grpc_url, names.ensemble, data, c, seconds,
                                tuple(dict.fromkeys((names.tokenizer, names.model, names.postprocess))), Path(tmp))
                      for c in concurrency]
    finally:
        if server is not None:
            server.stop()
    report["levels"] = [asdict(lv) for lv in levels]
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.perf", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--repository", default="model_repository", help="folder holding <task>/ (or the bundle itself)")
    p.add_argument("--data-dir")
    p.add_argument("--url", help="gRPC host:port of a running server (default: start one on the bundle)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--seconds", type=float, help="perf_analyzer measurement window (default 5 s; 10 s for reading "
                   "comprehension, whose requests take 0.2-2 s: 5 s windows did not give perf_analyzer a stable "
                   "measurement at concurrency 4 on CMRC2018)")
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
        bad = [c for c in args.concurrency if c < 1]
        if bad:
            raise PerfError(f"--concurrency {bad[0]}: concurrent requests, must be >= 1")
        if args.seconds is not None and not 0.001 <= args.seconds <= 3600:  # perf_analyzer takes whole ms
            raise PerfError(f"--seconds {args.seconds}: the measurement window, 0.001 to 3600 s")
        check_out_file(str(out))
        repo = resolve_repository(Path(args.repository), args.task)
        task_type = json.loads((repo / "bundle.json").read_text()).get("task_type", TaskKind.CLASSIFICATION.value)
        seconds = args.seconds or tool_kind(task_type).perf_seconds
        report = measure(repo, args.task, args.data_dir, args.concurrency, seconds, args.url)
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
