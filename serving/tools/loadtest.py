"""Load test of a running server on this machine: a concurrency sweep for a bounded time.

Each of ``c`` threads has its own client and sends requests of ``--batch-size`` texts back to back
for ``--seconds`` (and at most ``--max-requests`` in all per level).  Reports requests/s, texts/s,
p50/p95/p99 latency and errors per level, as a table and JSON.  Targets only loopback addresses.

    python -m serving.tools.loadtest --task tnews [--concurrency 1 4 16] [--seconds 10] [--json-out runs/tnews/loadtest.json]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.contract import TaskKind
from serving.tools.client import DEFAULT_URLS, BundleClient, ClientError
from serving.tools.kinds import kind_of_outputs, tool_kind


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    requests_per_s: float
    texts_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float


def check_loopback(url: str) -> None:
    if "://" in url or ":" not in url:
        raise ClientError(f"--url {url}: give host:port (e.g. 127.0.0.1:8001), no scheme")
    host = url.rsplit(":", 1)[0].strip("[]")
    try:
        addr = socket.gethostbyname(host) if host != "::1" else host
    except (socket.gaierror, UnicodeError) as exc:
        raise ClientError(f"--url {url}: cannot resolve {host!r} ({exc})") from None
    if not ipaddress.ip_address(addr).is_loopback:
        raise ClientError(f"load tests only target this machine (127.0.0.0/8, ::1); {url} is not loopback")


def send(client: BundleClient, batch: Sequence, task_type: str) -> None:
    """One request of ``batch`` items the way the bundle's kind takes them."""
    tool_kind(task_type).send(client, batch)


def run_level(url: str, protocol: str, model: str, texts: Sequence, concurrency: int, seconds: float,
              batch_size: int = 1, max_requests: int = 100_000, task_type: str = TaskKind.CLASSIFICATION.value) -> LevelResult:
    """``texts``: strings, or (question, context) pairs for a reading-comprehension bundle."""
    kind = tool_kind(task_type)
    latencies: list[float] = []
    errors = [0]
    sent = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(k: int) -> None:
        client = BundleClient(url, protocol, model, timeout=30, retries=0)
        i = k * batch_size
        try:
            while time.monotonic() < stop_at:
                with lock:
                    if sent[0] >= max_requests:
                        return
                    sent[0] += 1
                batch = [texts[(i + j) % len(texts)] for j in range(batch_size)]
                i += batch_size * concurrency
                t0 = time.perf_counter()
                try:
                    kind.send(client, batch)
                    ok = True
                except ClientError:
                    ok = False
                dt = time.perf_counter() - t0
                with lock:
                    if ok:
                        latencies.append(dt)
                    else:
                        errors[0] += 1
        finally:
            client.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    wall = time.monotonic() - t0
    lat = np.array(latencies) * 1000 if latencies else np.zeros(1)
    n = len(latencies)
    return LevelResult(concurrency, n, errors[0], round(wall, 2), n / wall, n * batch_size / wall,
                       float(np.percentile(lat, 50)), float(np.percentile(lat, 95)), float(np.percentile(lat, 99)))


def format_table(rows: Sequence[LevelResult]) -> str:
    lines = [f"{'conc':>5} {'requests':>9} {'errors':>7} {'req/s':>9} {'texts/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}"]
    for r in rows:
        lines.append(f"{r.concurrency:>5} {r.requests:>9} {r.errors:>7} {r.requests_per_s:>9.1f} {r.texts_per_s:>9.1f} "
                     f"{r.p50_ms:>8.2f} {r.p95_ms:>8.2f} {r.p99_ms:>8.2f}")
    return "\n".join(lines)


def _bundle_manifest(args, model: str) -> dict | None:
    """bundle.json of ``<repository>/<model>`` when there (its recorded dev data dir), else None."""
    try:
        return json.loads((Path(args.repository) / model / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _texts(args, task_type: str = TaskKind.CLASSIFICATION.value, manifest: dict | None = None) -> list:
    """--file's texts; else the dev set as the bundle's requests carry it; for a kind with built-in sample texts
    (classification) those when there is no dev set to read."""
    if args.file:
        path = Path(args.file)
        try:
            texts = [l for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
        except UnicodeDecodeError:
            raise ClientError(f"--file {path}: not UTF-8 text") from None
        except OSError as exc:
            raise ClientError(f"--file {path}: cannot read it ({exc.strerror})") from None
        if not texts:
            raise ClientError(f"--file {path}: no texts in it (one per line)")
        return texts
    from serving.tools.smoke import _dev_items

    kind = tool_kind(task_type)
    if not kind.sample_texts:
        return _dev_items(args.task, args.data_dir, task_type, manifest=manifest)
    if args.task:
        try:
            texts = _dev_items(args.task, args.data_dir, task_type, manifest=manifest)
            if texts:
                return texts
        except Exception as exc:  # no data here: the built-in sentences still exercise the server
            print(f"note: using built-in sample texts ({exc})", file=sys.stderr)
    return list(kind.sample_texts)


def _check_args(args) -> None:
    """The numbers and the report path a load test takes, before it starts (ClientError, one line each)."""
    from serving.tools.smoke import check_out_file

    for flag, value in (("--concurrency", min(args.concurrency)), ("--batch-size", args.batch_size),
                        ("--max-requests", args.max_requests)):
        if value < 1:
            raise ClientError(f"{flag} {value}: must be >= 1")
    if not 0 < args.seconds <= 86400:
        raise ClientError(f"--seconds {args.seconds}: per concurrency level, must be > 0")
    check_out_file(args.json_out)


def _offline_comparison(repo: Path, texts: list, rows: list, seconds: float) -> dict:
    """The best served rate against the bundle's model file alone (``repo``: the packaged bundle, when it is here),
    printed and returned as report fields."""
    if not (repo / "bundle.json").is_file():
        return {}
    from serving.triton.integrity import BundleIntegrityError
    from serving.tools.offline import BundleModel, model_only_throughput

    try:
        bundle = BundleModel.open(repo)
    except BundleIntegrityError as exc:
        print(f"offline model-only comparison: skipped ({exc})")
        return {}
    bs = int(bundle.manifest.get("package", {}).get("preferred_batch_size", 16))
    offline = model_only_throughput(bundle, texts, bs, seconds=min(seconds, 10.0))
    best = max(r.texts_per_s for r in rows)
    print(f"offline model-only (batch {bs}): {offline:.1f} texts/s; best served {best:.1f} texts/s = {best / offline:.2f}x")
    return {"offline_model_only_texts_per_s": offline, "offline_batch_size": bs, "served_best_texts_per_s": best,
            "served_vs_offline": best / offline if offline else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.loadtest", description=__doc__.split("\n")[0])
    p.add_argument("--task", help="task name or task YAML: the ensemble's name, and the dev set to draw texts from")
    p.add_argument("--model", help="ensemble name (default: --task)")
    p.add_argument("--data-dir")
    p.add_argument("--file", help="texts, one per line (instead of the dev set)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="grpc")
    p.add_argument("--url", help="host:port (default: the server `make serve` started for the bundle, else 127.0.0.1:8000 / :8001)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--seconds", type=float, default=10.0, help="per concurrency level")
    p.add_argument("--batch-size", type=int, default=1, help="texts per request")
    p.add_argument("--max-requests", type=int, default=100_000, help="per level, a hard bound")
    p.add_argument("--repository", default="model_repository", help="for the offline model-only comparison")
    p.add_argument("--no-offline", action="store_true", help="skip the offline model-only throughput measurement")
    p.add_argument("--json-out")
    args = p.parse_args(argv)
    if not (args.model or args.task):
        p.error("--task or --model is required")
    try:
        import pipeline  # noqa: F401  (process setup before anything imports paddle)
        from pipeline.config import task_name
        from pipeline.errors import UserInputError
    except ImportError:  # serving installed on its own: only its own errors, and task names alone
        UserInputError, task_name = ClientError, str
    from serving.server import running_url

    try:
        model = args.model or task_name(args.task)  # a task YAML: the name make bundle gave its bundle
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    url = args.url or running_url(Path(args.repository) / model, args.protocol) or DEFAULT_URLS[args.protocol]
    try:
        _check_args(args)
        check_loopback(url)
        probe = BundleClient(url, args.protocol, model)
        probe.wait_ready(30)
        task_type = kind_of_outputs(probe.output_names()).name
        probe.close()
        kind = tool_kind(task_type)
        if kind.windowed and args.file:
            p.error(f"--file holds single texts; a {task_type} bundle is load-tested with its dev set (--task)")
        texts = _texts(args, task_type, _bundle_manifest(args, model))
        rows = [run_level(url, args.protocol, model, texts, c, args.seconds, args.batch_size, args.max_requests, task_type)
                for c in args.concurrency]
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"load test {model} via {args.protocol} at {url}: {args.seconds:.0f}s per level, {args.batch_size} text(s) per request")
    print(format_table(rows))
    report = {"model": model, "protocol": args.protocol, "batch_size": args.batch_size, "levels": [asdict(r) for r in rows]}
    if kind.windowed and not args.no_offline:
        print(f"offline model-only comparison: not available for {task_type} (windows per request vary)")
    elif not args.no_offline:
        report.update(_offline_comparison(Path(args.repository) / model, texts, rows, args.seconds))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 1 if any(r.errors for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
