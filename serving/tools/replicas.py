"""Two replicas of a bundle behind a real load balancer, and one killed mid-run (``make replicas TASK=..``).

    python -m serving.tools.replicas --task tnews [--seconds 20] [--kill-at 8] [--concurrency 8] [--json-out F]

Starts two tritonserver processes on the same bundle (127.0.0.1, ports of their own) and HAProxy in front
(Debian's package, installed by ``make lb-tools`` into ``.venv/haproxy``; active health checks on
``/v2/health/ready`` every 500 ms, down after 2 failures; requests that hit a dead connection are retried
on the other replica).  ``--concurrency`` clients send one dev item per request through HAProxy, with no
client-side retries, so every failure the load balancer lets through is counted.  At ``--kill-at``
seconds the first replica's process group is SIGKILLed (server and python-backend stubs, as a crashed
pod would be).  Reported: requests and failures before the kill, in the failover window (until HAProxy
marked the replica down) and after it; p50/p99 before and after; and every served answer compared with
the offline answer of the same item alone.  Bounded in time; everything it started is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from serving.tools.kinds import ToolKind

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".venv" / "haproxy"
CHECK_INTER_MS, CHECK_FALL = 500, 2


class ReplicaError(RuntimeError):
    """The replica run cannot start (no HAProxy, no bundle, a replica that never became ready)."""


@dataclass(frozen=True)
class HAProxy:
    binary: Path
    env: dict


def find_haproxy(tools: Path = TOOLS) -> HAProxy:
    binary = Path(os.environ.get("HAPROXY", tools / "deb" / "usr" / "sbin" / "haproxy"))
    if not binary.is_file():
        raise ReplicaError(f"haproxy not found at {binary}: `make lb-tools` installs Debian's haproxy into .venv/haproxy")
    libs = tools / "deb" / "usr" / "lib" / "x86_64-linux-gnu"
    path = ":".join([str(libs)] * libs.is_dir() + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
    return HAProxy(binary, {**os.environ, "LD_LIBRARY_PATH": path})


def haproxy_config(port: int, backends: Sequence[int], stats_socket: str | None = None) -> str:
    """``stats_socket``: a name in the abstract socket namespace (no file: a socket path is capped at ~100 bytes,
    which a long TMPDIR passes), read-only statistics."""
    servers = "\n".join(f"  server replica{i + 1} 127.0.0.1:{p} check" for i, p in enumerate(backends))
    stats = f"\n  stats socket abns@{stats_socket} level user" if stats_socket else ""
    return f"""global
  maxconn 512{stats}
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  # A request whose connection died with its replica is sent again, to the other one.
  retries 2
  option redispatch 1
  retry-on conn-failure empty-response response-timeout
  option http-buffer-request
frontend triton
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /v2/health/ready
  http-check expect status 200
  default-server inter {CHECK_INTER_MS}ms fall {CHECK_FALL} rise 2
{servers}
"""


@dataclass
class Sample:
    start: float  # seconds since the load began
    latency_ms: float
    ok: bool
    item: int
    answer: tuple = ()
    error: str = ""


@dataclass
class Window:
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float


def _window(samples: list[Sample]) -> Window:
    lat = [s.latency_ms for s in samples if s.ok]
    pct = (lambda q: float(np.percentile(lat, q))) if lat else (lambda q: float("nan"))
    return Window(len(samples), sum(not s.ok for s in samples), pct(50), pct(99))


@dataclass
class ReplicaReport:
    task: str
    concurrency: int
    seconds: float
    kill_at: float
    marked_down_at: float | None  # seconds since the load began: HAProxy (stats socket) reports replica1 DOWN
    before: Window
    failover: Window  # from the kill until HAProxy marked the replica down
    after: Window
    answers_checked: int
    answers_differing: int
    errors: list = field(default_factory=list)  # up to 5 failure messages

    @property
    def ok(self) -> bool:
        return self.after.failures == 0 and self.answers_differing == 0 and self.after.requests > 0


def _wait_http(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def server_status(stats_socket: str, server: str) -> str:
    """HAProxy's own view of one backend server ("UP", "DOWN", "UP 1/2", ...), from its stats socket (``haproxy_config``'s
    abstract name)."""
    import csv
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        # HAProxy's abns@ name fills the whole sun_path (108 bytes), padded with NULs: the same address to connect
        sock.connect(("\0" + stats_socket).ljust(108, "\0"))
        sock.sendall(b"show stat\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
    return next((r["status"] for r in rows if r.get("svname") == server), "")


def run(bundle_dir: Path, items: Sequence, concurrency: int = 8, seconds: float = 20.0, kill_at: float = 8.0,
        log=print) -> ReplicaReport:
    """Two replicas + HAProxy on ``bundle_dir``; ``items`` are texts (or (question, context) pairs)."""
    from serving.tools.kinds import tool_kind
    from serving.tools.offline import BundleModel
    from serving.process_group import die_with_parent_preexec
    from serving.server import free_port, start_server

    if not 0 < kill_at < seconds:
        raise ReplicaError(f"--kill-at {kill_at} must be inside the run (0, {seconds})")
    haproxy = find_haproxy()
    bundle = BundleModel.open(bundle_dir)
    kind, model = tool_kind(bundle.task_type), bundle.manifest["task"]
    started: list = []
    lb = None
    work = Path(tempfile.mkdtemp(prefix="replicas-"))
    try:
        for i in range(2):
            # die_with_parent: a kill -9 of this run leaves no replica (stubs, shared memory) or load balancer
            started.append(start_server(bundle_dir, log_path=work / f"replica{i + 1}.log", die_with_parent=True))
            log(f"[replicas] replica{i + 1} ready on 127.0.0.1:{started[-1].http_port}")
        port = free_port()
        stats = f"ernie-bundle-haproxy-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (work / "haproxy.cfg").write_text(haproxy_config(port, [s.http_port for s in started], stats))
        with open(work / "haproxy.log", "wb") as lb_log:  # the child keeps its own descriptor
            lb = subprocess.Popen([str(haproxy.binary), "-f", str(work / "haproxy.cfg"), "-db"], env=haproxy.env,
                                  stdout=lb_log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=die_with_parent_preexec())
        if not _wait_http(f"http://127.0.0.1:{port}/v2/health/ready", 15):
            raise ReplicaError(f"haproxy on 127.0.0.1:{port} never answered: {(work / 'haproxy.log').read_text()[-500:]}")
        log(f"[replicas] haproxy on 127.0.0.1:{port}: {concurrency} clients for {seconds:g}s, replica1 killed at {kill_at:g}s")
        samples, down_at = _load(f"127.0.0.1:{port}", model, kind, items, concurrency, seconds, kill_at,
                                 started[0], stats)
    finally:
        if lb is not None and lb.poll() is None:
            lb.terminate()
            lb.wait(10)
        for s in started:
            s.stop(10)
        shutil.rmtree(work, ignore_errors=True)  # the logs and haproxy's files: what a failure needs is in its error
    done = [s for s in samples if s.ok]
    asked = sorted({s.item for s in done})
    by_item = dict(zip(asked, kind.offline_keys(bundle, [items[i] for i in asked])))
    differing = [s for s in done if tuple(s.answer) != tuple(by_item[s.item])]
    edge = down_at if down_at is not None else seconds
    report = ReplicaReport(
        model, concurrency, seconds, kill_at, down_at,
        before=_window([s for s in samples if s.start < kill_at]),
        failover=_window([s for s in samples if kill_at <= s.start < edge]),
        after=_window([s for s in samples if s.start >= edge]),
        answers_checked=len(done), answers_differing=len(differing),
        errors=sorted({s.error for s in samples if not s.ok})[:5])
    return report


def _load(url: str, model: str, kind: "ToolKind", items: Sequence, concurrency: int, seconds: float, kill_at: float,
          victim, stats_socket: str) -> tuple[list[Sample], float | None]:
    from serving.tools.client import BundleClient

    samples: list[Sample] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    counter = iter(range(10**9))

    def worker() -> None:
        client = BundleClient(url, "http", model, timeout=30.0, retries=0)  # every failure counts
        while time.monotonic() - t0 < seconds:
            with lock:
                i = next(counter) % len(items)
            item = items[i]
            start = time.monotonic()
            try:
                answer = kind.ask(client, item)
                sample = Sample(start - t0, 1000 * (time.monotonic() - start), True, i, kind.answer_key(answer))
            except Exception as exc:  # noqa: BLE001 - a failure is data here
                sample = Sample(start - t0, 1000 * (time.monotonic() - start), False, i, error=str(exc)[:200])
            with lock:
                samples.append(sample)
        client.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(kill_at)
    os.killpg(victim.process.pid, signal.SIGKILL)  # the server and its python-backend stubs, like a crashed pod
    down_at = None
    while time.monotonic() - t0 < seconds:  # until HAProxy's health checks take it out of rotation
        if down_at is None and server_status(stats_socket, "replica1").startswith("DOWN"):
            down_at = time.monotonic() - t0
        time.sleep(0.1)
    for t in threads:
        t.join(60)
    return sorted(samples, key=lambda s: s.start), down_at


def format_report(r: ReplicaReport) -> str:
    rows = [("before the kill", r.before), ("failover window", r.failover), ("after failover", r.after)]
    lines = ["| window | requests | failures | p50 ms | p99 ms |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {w.requests} | {w.failures} | {w.p50_ms:.1f} | {w.p99_ms:.1f} |" for name, w in rows]
    down = f"{r.marked_down_at - r.kill_at:.1f}s after the kill" if r.marked_down_at is not None else "never"
    lines.append(f"\nreplica1 killed at {r.kill_at:g}s, out of rotation {down}; served answers checked against offline: "
                 f"{r.answers_checked}, differing: {r.answers_differing}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name or task YAML")
    p.add_argument("--repository", default="model_repository")
    p.add_argument("--data-dir")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--kill-at", type=float, default=8.0)
    p.add_argument("--items", type=int, default=500, help="dev items cycled through")
    p.add_argument("--json-out")
    args = p.parse_args(argv)
    from serving.tools.client import ClientError
    from serving.triton.integrity import BundleIntegrityError
    from serving.server import ServerError, resolve_repository
    from serving.tools.smoke import check_out_file, dev_items

    import pipeline  # noqa: F401  (process setup before anything imports paddle)
    from pipeline.config import task_name
    from pipeline.errors import UserInputError

    try:
        for flag, value in (("--concurrency", args.concurrency), ("--items", args.items)):
            if value < 1:
                raise ReplicaError(f"{flag} {value}: must be >= 1")
        if not 0 < args.seconds <= 3600:
            raise ReplicaError(f"--seconds {args.seconds}: the run's length, 0 to 3600 s")
        if not 0 < args.kill_at < args.seconds:
            raise ReplicaError(f"--kill-at {args.kill_at} must be inside the run (0, {args.seconds:g})")
        check_out_file(args.json_out)
        bundle_dir = resolve_repository(args.repository, task_name(args.task))
        items = dev_items(args.task, bundle_dir, args.data_dir)[: args.items]
        if not items:
            raise ReplicaError(f"no dev items for task {args.task}: nothing to send")
        report = run(bundle_dir, items, args.concurrency, args.seconds, args.kill_at)
    except (ReplicaError, ServerError, ClientError, BundleIntegrityError, UserInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=2, ensure_ascii=False))
        print(f"wrote {out}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
