"""Start a real Triton Inference Server on a bundle's model repository.

The server (``triton_install.find_tritonserver``: the image's, or the ``nvidia-pytriton`` wheel's prepared once)
binds to 127.0.0.1 by default, on free ports, in a process group of its own (``process_group``), and
``start_server`` returns once every model is ready (or raises with the server log's tail).  Bundle hashes are
checked before the server starts, and again by each python model when it loads; the bundle's engine is checked
in the python its models will run.

    python -m serving.server --repository model_repository --task tnews
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import uuid
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline.contract import cpu_flags, has_vnni, missing_int8_flags
from serving.process_group import SHM_PREFIX, die_with_parent_preexec, process_start_time, reap_group
from serving.procfs import cmdline
from serving.triton.integrity import BundleIntegrityError, clear_bytecode, verify_bundle
from serving.triton_install import ServerError, check_engine, find_tritonserver, server_environment

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"


def _family(host: str) -> int:
    """The address family ``host`` binds with (127.0.0.1, ::1, 0.0.0.0, a local name); ServerError when unknown."""
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ServerError(f"--host {host!r}: not an address of this machine ({exc})") from None


def free_port(host: str = "127.0.0.1", avoid: tuple[int, ...] = ()) -> int:
    """A port nothing listens on at ``host`` now, other than those in ``avoid`` (each endpoint gets its own)."""
    for _ in range(100):
        with socket.socket(_family(host), socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise ServerError(f"no free port found on {host}")


PORT_FLAGS = ("http", "grpc", "metrics")


def check_port(value: int, flag: str) -> int:
    """A port flag's value: 1-65535, or 0 for a free port; ServerError naming the flag otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ServerError(f"--{flag}-port {value}: a port is 1-65535 (or 0: a free one)")
    return value


def check_ports_free(host: str, ports: dict[str, int]) -> None:
    """Every fixed port (0: chosen later) is distinct and free at ``host``: a server already listening there would
    answer the readiness checks for the one being started.  One line naming the port otherwise."""
    seen: dict[int, str] = {}
    for name, port in ports.items():
        check_port(port, name)
        if port and port in seen:
            raise ServerError(f"--{seen[port]}-port and --{name}-port are both {port}: each endpoint needs its own port")
        seen.setdefault(port, name)
    family = _family(host)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            raise ServerError(f"--host {host}: cannot bind there ({exc.strerror}); give an address of this machine "
                              "(127.0.0.1, 0.0.0.0)") from None
    for name, port in ports.items():
        if not port:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # as the server binds: a port left in TIME_WAIT is free; one with a listener (gRPC's SO_REUSEPORT
            # included: a second server would share it silently) is not
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ServerError(f"{name} port {port} on {host} is in use (another server?): stop it, or pass "
                                      f"--{name}-port with another port (0: a free one)") from None
                if exc.errno == errno.EACCES:
                    raise ServerError(f"{name} port {port} on {host}: permission denied (ports below 1024 need root); "
                                      f"pass --{name}-port with another port") from None
                raise ServerError(f"--host {host}: cannot bind {name} port {port} there ({exc.strerror}); "
                                  "give an address of this machine (127.0.0.1, 0.0.0.0)") from None


@dataclass
class TritonServer:
    process: subprocess.Popen
    repository: Path
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    shm_prefix: str = ""  # the python backend's shared-memory regions: /dev/shm/<shm_prefix>*
    server_id: str = ""  # tritonserver --id: GET /v2 answers it, so readiness is asked of this very server
    metrics: bool = True  # its metrics endpoint is on (not --allow-metrics=false): ready once that answers too

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def ready(self) -> bool:
        return _answers_ok(f"http://{self._http_base}/v2/health/ready")

    def metrics_answering(self) -> bool:
        return _answers_ok(f"http://{self._base(self.metrics_port)}/metrics")

    @property
    def _http_base(self) -> str:
        return self._base(self.http_port)

    def _base(self, port: int) -> str:
        host = self.host
        if host in ("0.0.0.0", "::", ""):  # bound everywhere: ask it on loopback
            host = "127.0.0.1" if host != "::" else "::1"
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def answering_id(self) -> str | None:
        """The ``--id`` of the server answering on this HTTP port (GET /v2 "name"); None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://{self._http_base}/v2", timeout=2) as r:
                return str(json.loads(r.read().decode("utf-8", "replace")).get("name", ""))
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGINT (Triton unloads models and exits cleanly), then SIGKILL after ``timeout``; then whatever of its
        process group is left (python backend stubs) and its shared-memory regions."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        reap_group(self.process.pid, self.shm_prefix)
        return self.process.returncode

    def __enter__(self) -> "TritonServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def resolve_repository(repository: Path | str, task: str | None) -> Path:
    """``model_repository`` + ``tnews`` -> ``model_repository/tnews`` (a task's bundle is its own repository).  The
    tools give a task YAML's ``task:`` name (``pipeline.config.task_name``)."""
    repo = Path(repository)
    if task and (repo / task / "bundle.json").is_file():
        return repo / task
    if (repo / "bundle.json").is_file():
        return repo
    where = repo / task if task else repo
    raise ServerError(f"no bundle at {where} (bundle.json missing): run `make bundle TASK={task or '<task>'}` first")


def cpu_warnings(manifest: dict, flags: set[str] | None = None) -> list[str]:
    """One line per int8 instruction set the bundle was validated with that this CPU lacks."""
    validated = (manifest.get("cpu") or {}).get("flags") or []
    flags = cpu_flags() if flags is None else flags
    if flags is None or manifest.get("precision") != "int8":
        return []
    missing = missing_int8_flags(validated, flags)
    if not missing:
        return []
    engine = f" ({manifest['engine']}, chosen by measurement there)" if manifest.get("engine") else ""
    return [f"this CPU lacks {', '.join(missing)}, which the bundle's INT8 model{engine} was validated with "
            f"({(manifest.get('cpu') or {}).get('model', '?')}): expect lower throughput than bundle.json's "
            "validated numbers" + (", and without VNNI int8 sums may saturate" if has_vnni(validated) and not has_vnni(flags)
                                   else "")]


def _spawn(cmd: list[str], env: dict, log_path: Path, die_with_parent: bool) -> subprocess.Popen:
    """tritonserver in a process group of its own, its output to ``log_path``."""
    try:
        log = open(log_path, "wb")
    except OSError as exc:
        raise ServerError(f"server log {log_path}: cannot write it ({exc.strerror})") from None
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=die_with_parent_preexec() if die_with_parent else None)
    finally:
        log.close()


def _server_command(install, repository: Path, host: str, ports: tuple[int, int, int], server_id: str,
                    shm_prefix: str, extra_args: tuple[str, ...]) -> list[str]:
    """tritonserver's command line: this bundle only, the given (http, grpc, metrics) ports, strict readiness."""
    http_port, grpc_port, metrics_port = ports
    cmd = [
        str(install.binary),
        f"--id={server_id}",
        f"--model-repository={repository}",
        f"--http-address={host}", f"--http-port={http_port}",
        f"--grpc-address={host}", f"--grpc-port={grpc_port}",
        f"--metrics-address={host}", f"--metrics-port={metrics_port}",
        "--allow-sagemaker=false", "--allow-vertex-ai=false",
        "--strict-readiness=true", "--exit-on-error=true",
        "--exit-timeout-secs=5",  # on Ctrl-C, wait at most this long for open client connections
        "--log-verbose=0",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
    ]
    if install.backend_dir:
        cmd.append(f"--backend-directory={install.backend_dir}")
    if install.cache_dir:
        cmd.append(f"--cache-directory={install.cache_dir}")
    return cmd + list(extra_args)


def start_server(
    repository: Path,
    host: str = "127.0.0.1",
    http_port: int = 0,
    grpc_port: int = 0,
    metrics_port: int = 0,
    timeout: float = 180.0,
    log_path: Path | None = None,
    verify: bool = True,
    extra_args: tuple[str, ...] = (),
    die_with_parent: bool = False,
    on_started=None,
    python: Path | str | None = None,
) -> TritonServer:
    """Start tritonserver on ``repository`` in a process group of its own and wait until it is ready.

    ``die_with_parent``: the server gets SIGTERM when the calling process dies (a foreground launcher killed
    with SIGKILL must not leave a server behind).  ``on_started(server)`` is called as soon as the process exists,
    before the wait (the launcher records it there, so that a launcher killed while the models load leaves a
    server ``--stop`` can find).  Whatever ends the wait early (not ready, Ctrl-C, an error in ``on_started``)
    stops the server before it propagates.  ``python``: the interpreter the python models run in (default this
    one's environment; ``triton_install.ServingPython``)."""
    repository = Path(repository).resolve()
    if verify:
        clear_bytecode(repository)  # what an earlier serve cached; anything else unlisted is refused below
        manifest = verify_bundle(repository)
        for line in cpu_warnings(manifest):
            print(f"warning: {line}", file=sys.stderr)
    check_ports_free(host, {"http": http_port, "grpc": grpc_port, "metrics": metrics_port})
    install = find_tritonserver(python)
    if verify:
        check_engine(manifest, install)
    http_port = http_port or free_port(host, (grpc_port, metrics_port))
    grpc_port = grpc_port or free_port(host, (http_port, metrics_port))
    metrics_port = metrics_port or free_port(host, (http_port, grpc_port))
    if log_path is None:
        log_path = Path(tempfile.mkstemp(prefix="tritonserver-", suffix=".log")[1])
    # GET /v2 answers this name: the readiness poll accepts only this server's answer (not one left on the port).
    server_id = f"ernie-bundle-{uuid.uuid4().hex[:12]}"
    # A prefix of its own for the python backend's /dev/shm regions, so that stopping this server removes
    # exactly its regions (a killed server leaves them behind).
    shm_prefix = f"ernie_bundle_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
    cmd = _server_command(install, repository, host, (http_port, grpc_port, metrics_port), server_id, shm_prefix,
                          extra_args)
    # No bytecode written into the bundle by anything that honours it (the stubs' isolated interpreters do not:
    # see integrity.clear_bytecode).
    env = server_environment(install)
    proc = _spawn(cmd, env, Path(log_path), die_with_parent)
    server = TritonServer(proc, repository, host, http_port, grpc_port, metrics_port, Path(log_path), shm_prefix,
                          server_id, metrics="--allow-metrics=false" not in extra_args)
    try:
        if on_started is not None:
            on_started(server)
        _wait_ready(server, timeout)
    except BaseException:
        server.stop(5)
        raise
    return server


def _answers_ok(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_ready(server: TritonServer, timeout: float) -> None:
    """Until ``server`` answers ready under its own ``--id``; ServerError when it exits, another server answers its
    port, or ``timeout`` passes (the caller stops it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(f"tritonserver exited with code {server.process.returncode} while loading "
                              f"{server.repository}:\n{server.log_tail()}")
        answering = server.answering_id()
        if answering is not None and answering != server.server_id:
            # Another server holds the HTTP port (taken after the check above): its answers are not ours.
            raise ServerError(f"http port {server.http_port} on {server.host} is answered by another server "
                              f"({answering!r}), not the one just started: stop it, or pass --http-port with another "
                              "port (0: a free one)")
        # tritonserver starts its metrics endpoint after the HTTP one: a scrape right after HTTP said ready was once
        # refused (CI, Zen 4, 2026-12-02); ready means both answer
        if answering == server.server_id and server.ready() and (not server.metrics or server.metrics_answering()) \
                and server.alive():
            return
        time.sleep(0.25)
    raise ServerError(f"tritonserver not ready after {timeout:.0f}s on {server.repository}:\n{server.log_tail()}")


def _bundle_dir(repository: Path | str, task: str | None) -> Path:
    return (Path(repository) / task if task else Path(repository)).resolve()


def state_file(bundle: Path) -> Path:
    """Beside the bundle, never in it (bundle.json covers every file in it)."""
    return bundle.parent / f".{bundle.name}.server.json"


@dataclass(frozen=True)
class ServerState:
    """What ``--detach`` (and a foreground launcher) records so that ``--stop`` finds exactly its server."""

    pid: int
    start_time: int  # /proc/<pid>/stat: with the pid, the process's identity
    repository: str
    shm_prefix: str
    http: str = ""
    grpc: str = ""
    log: str = ""

    @classmethod
    def read(cls, path: Path) -> "ServerState":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            state = cls(int(data["pid"]), int(data["start_time"]), str(data["repository"]), str(data["shm_prefix"]),
                        str(data.get("http", "")), str(data.get("grpc", "")), str(data.get("log", "")))
            if state.pid < 2:  # kill(0/-1) would mean "every process of mine"
                raise ValueError(f"pid {state.pid}")
            if not SHM_PREFIX.fullmatch(state.shm_prefix):
                raise ValueError(f"shm_prefix {state.shm_prefix[:40]!r} is not of the form this launcher writes")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ServerError(f"{path}: unreadable server state ({type(exc).__name__}: {str(exc)[:200]}); "
                              "if no server runs for this bundle, remove the file") from None
        return state

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.__dict__), encoding="utf-8")
        tmp.replace(path)

    def is_running(self) -> bool:
        """The recorded process is alive and is still the tritonserver serving this repository."""
        if process_start_time(self.pid) != self.start_time:
            return False  # gone, or the pid now belongs to another process
        return f"--model-repository={self.repository}".encode() in (cmdline(self.pid) or [])


def running_url(bundle: Path | str, protocol: str) -> str | None:
    """``host:port`` (``protocol`` "http" or "grpc") of the server this launcher started for ``bundle`` (``make serve``,
    detached or not) while it still runs it; None when none is recorded or it is gone.  The tools ask it when no
    ``--url`` is given, so a server on other ports than 8000/8001 (``--http-port 0``) is found."""
    path = state_file(Path(bundle).resolve())
    if not path.is_file():
        return None
    try:
        state = ServerState.read(path)
    except ServerError:
        return None
    url = state.http if protocol == "http" else state.grpc
    if url.startswith("0.0.0.0:"):  # bound everywhere: asked on loopback
        url = "127.0.0.1:" + url.split(":", 1)[1]
    return url if url and state.is_running() else None


def stop_detached(state_path: Path, timeout: float = 30.0) -> int:
    if not state_path.is_file():
        print(f"no server recorded at {state_path}")
        return 0
    state = ServerState.read(state_path)
    if not state.is_running():
        if process_start_time(state.pid) is None:
            # The server died (a pid cannot be reused while its group lives): stubs left in its group and its
            # shared memory are still ours to remove.
            reap_group(state.pid, state.shm_prefix)
        state_path.unlink(missing_ok=True)
        print(f"the recorded server (pid {state.pid}) is no longer running; removed {state_path}")
        return 0
    os.killpg(state.pid, signal.SIGINT)  # the server leads its own group: its stubs get it too
    deadline = time.monotonic() + timeout
    while state.is_running() and time.monotonic() < deadline:
        time.sleep(0.25)
    reap_group(state.pid, state.shm_prefix)
    state_path.unlink(missing_ok=True)
    print(f"stopped tritonserver (pid {state.pid})")
    return 0


def _check_args(args) -> None:
    """The flags a launch uses, before anything starts: ports, readiness timeout, log file."""
    check_ports_free(args.host, {name: getattr(args, f"{name}_port") for name in PORT_FLAGS})
    if not args.timeout > 0:  # NaN too
        raise ServerError(f"--timeout {args.timeout}: seconds to wait for readiness, must be > 0")
    if args.log:
        log = Path(args.log)
        if log.is_dir():
            raise ServerError(f"--log {log}: a directory; give a file path")
        if not log.parent.is_dir():
            raise ServerError(f"--log {log}: folder {log.parent} does not exist")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.server", description="Serve a task's bundle with Triton until Ctrl-C.")
    p.add_argument("--repository", default=str(DEFAULT_REPOSITORY), help="model repository root (default: model_repository)")
    p.add_argument("--task", help="task name: serves <repository>/<task>")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 exposes it)")
    p.add_argument("--http-port", type=int, default=8000, help="0: a free port")
    p.add_argument("--grpc-port", type=int, default=8001, help="0: a free port")
    p.add_argument("--metrics-port", type=int, default=8002, help="0: a free port")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness")
    p.add_argument("--log", help="server log file (default: a temp file)")
    p.add_argument("--python", help="the python the models run in, e.g. the image's environment rebuilt here "
                   "(python -m serving.image_env); default this one")
    p.add_argument("--detach", action="store_true", help="return once ready and leave the server running (stop it with --stop)")
    p.add_argument("--stop", action="store_true", help="stop a server started with --detach for this repository/task")
    args = p.parse_args(argv)
    if args.task and Path(args.task).suffix in (".yaml", ".yml"):  # the launcher reads no task config (test_imports)
        print(f"error: --task {args.task}: a task YAML; the launcher takes the task's name, its task: (`ernie-bundle "
              f"tasks --name {args.task}` prints it; `make serve TASK={args.task}` passes it)", file=sys.stderr)
        return 2
    state_path = state_file(_bundle_dir(args.repository, args.task))
    try:
        if args.stop:
            return stop_detached(state_path)
        if state_path.is_file() and ServerState.read(state_path).is_running():
            print(f"error: a server is already running for this bundle ({state_path}); stop it with --stop", file=sys.stderr)
            return 2
        _check_args(args)
        repo = resolve_repository(args.repository, args.task)
    except (ServerError, BundleIntegrityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # SIGTERM while the models load ends the launcher as Ctrl-C does: through start_server's clean-up, which stops
    # the server it started (Python's default would end the launcher there and leave the server running).
    handlers = {sig: signal.signal(sig, _interrupt if sig == signal.SIGTERM else signal.getsignal(sig))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _launch(args, repo, state_path)
    finally:  # main() is also called in-process (tests): leave the caller's handlers as they were
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _launch(args, repo: Path, state_path: Path) -> int:
    """Start the server (recorded at ``state_path`` from its first moment), then detach or serve until Ctrl-C."""

    def record(server: TritonServer) -> None:
        """Recorded as soon as the process exists, in both modes: a launcher killed (-9) while the models load
        leaves a server that --stop finds, and that the next launch reports instead of finding its ports taken.
        The repository as tritonserver was given it (absolute): --stop recognises its server by that command line,
        and `make serve` / `make stop` pass a relative --repository."""
        try:
            ServerState(server.process.pid, process_start_time(server.process.pid) or 0, str(server.repository),
                        server.shm_prefix, server.http_url, server.grpc_url, str(server.log_path)).write(state_path)
        except OSError as exc:
            if args.detach:  # --stop could never find it: not left running (start_server stops it)
                raise ServerError(f"cannot record the server at {state_path} ({exc.strerror}); a detached server needs "
                                  "it for --stop: serve the bundle from a folder that can be written, or run without "
                                  "--detach") from None
            print(f"warning: cannot record the server at {state_path} ({exc.strerror}): --stop from another shell "
                  "will not find it", file=sys.stderr)

    try:
        server = start_server(repo, args.host, args.http_port, args.grpc_port, args.metrics_port, args.timeout,
                              Path(args.log) if args.log else None, die_with_parent=not args.detach, on_started=record,
                              python=args.python)
    except (ServerError, BundleIntegrityError) as exc:
        _forget(state_path)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the models loaded: start_server stopped the server
        _forget(state_path)
        print("\ninterrupted: the server being started was stopped", file=sys.stderr)
        return 130
    stop = {"now": False}
    if not args.detach:  # from here Ctrl-C / SIGTERM end the serving loop (no KeyboardInterrupt mid-report)

        def _stop(*_):
            stop["now"] = True

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
    try:
        return _serve(args, repo, server, stop)
    except KeyboardInterrupt:  # --detach, interrupted while it reported: the server it started is not left behind
        server.stop(5)
        print("\ninterrupted: the server just started was stopped", file=sys.stderr)
        return 130
    finally:
        if not args.detach or process_start_time(server.process.pid) is None:
            server.stop(5)  # idempotent: also reaps the stubs and shared memory after a crash
            _forget(state_path)


def _serve(args, repo: Path, server: TritonServer, stop: dict) -> int:
    """Report the started server; with --detach return, else serve until ``stop["now"]`` (Ctrl-C, SIGTERM)."""
    if process_start_time(server.process.pid) is None or not server.ready():  # died right after answering
        server.stop(5)
        print(f"error: tritonserver exited with code {server.process.returncode} right after it became ready:\n"
              f"{server.log_tail()}", file=sys.stderr)
        return 1
    print(f"Triton is serving {repo}")
    print(f"  HTTP     http://{server.http_url}   (v2 API; e.g. curl http://{server.http_url}/v2/health/ready)")
    print(f"  gRPC     {server.grpc_url}")
    print(f"  metrics  http://{server.host}:{server.metrics_port}/metrics")
    print(f"  log      {server.log_path}")
    if args.detach:
        print(f"running in the background (pid {server.process.pid}); stop it with: python -m serving.server "
              f"--repository {args.repository}{' --task ' + args.task if args.task else ''} --stop", flush=True)
        return 0
    print("Ctrl-C stops it.", flush=True)
    while not stop["now"] and server.alive():
        time.sleep(0.5)
    if not server.alive():
        print(f"error: tritonserver exited with code {server.process.returncode}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    rc = server.stop()
    print(f"stopped (exit code {rc})")
    return 0


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _forget(state_path: Path) -> None:
    """Remove the server record; where it cannot be removed (a read-only repository) there was none to remove, or
    --stop will find its server gone."""
    try:
        state_path.unlink(missing_ok=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
