"""Probes of the serving commands as a hostile-but-realistic user runs them (README, `make help`): serve, stop,
smoke, loadtest, perf, replicas, manifests and `python -m serving.client`.  Each probe is the real command (its
``main([...])`` in-process, or a subprocess where processes are the point) with the exit code it must give and the
one line it must say on stderr, never a traceback.

One tritonserver (module scope) serves the probes that need a server; the kill -9 probes start their own.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

import pipeline  # noqa: F401  (before paddle)
from conftest import write_tiny_task_yaml
from serving_fixtures import servers_on, tiny_bundle, tiny_export, tool_or_skip  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent


def one_line(err: str, *says: str) -> str:
    """stderr is exactly one line, no traceback, saying each of ``says``."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    for s in says:
        assert s in lines[0], lines[0]
    return lines[0]


def error_lines(err: str) -> list[str]:
    """The ``error:`` lines (progress notes such as "dev data: ..." may precede them)."""
    return [line for line in err.strip().splitlines() if line.startswith("error:")]


# ------------------------------------------------------------------------------------------------
# fixtures: a bundle that records its data dir, a task config whose data dir is gone, one server


@pytest.fixture(scope="module")
def recorded_bundle(tiny_export, tiny_finetuned, tmp_path_factory) -> Path:
    """The tiny bundle as `make bundle DATA_DIR=...` writes it: bundle.json records the data dir."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    prov = Provenance(data_dir=str(tiny_finetuned["data_dir"]))
    return write_repository(tmp_path_factory.mktemp("recorded_repo"), "tiny", ExportArtifacts.from_dir(tiny_export), pc,
                            prov).path


@pytest.fixture(scope="module")
def task_without_data(tmp_path_factory) -> Path:
    """The task's config as `make smoke` reads it without DATA_DIR: its data.dir is not on this machine."""
    root = tmp_path_factory.mktemp("task_without_data")
    return write_tiny_task_yaml(root / "tiny.yaml", root / "no-such-data")


@pytest.fixture(scope="module")
def probe_bundle(tiny_bundle, tmp_path_factory) -> Path:
    """A copy of the tiny bundle (serving writes bytecode caches into what it serves)."""
    bundle = tmp_path_factory.mktemp("probe_repo") / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    return bundle


@pytest.fixture(scope="module")
def served(probe_bundle, tmp_path_factory):
    """tritonserver on the tiny model (the recorded bundle packages the same export: the same answers)."""
    from serving.server import start_server

    srv = start_server(probe_bundle, log_path=tmp_path_factory.mktemp("probe_server") / "server.log", timeout=120)
    yield srv
    srv.stop()


# ------------------------------------------------------------------------------------------------
# 7. make smoke / perf / loadtest / replicas without DATA_DIR on a bundle built with one


def test_the_bundle_records_the_data_dir_it_was_built_from(recorded_bundle, tiny_finetuned):
    manifest = json.loads((recorded_bundle / "bundle.json").read_text(encoding="utf-8"))
    assert manifest["source"]["data_dir"] == str(tiny_finetuned["data_dir"])
    assert str(tiny_finetuned["data_dir"]) in (recorded_bundle / "README.md").read_text(encoding="utf-8")


def test_the_package_stage_records_the_task_data_dir(tiny_export, tiny_finetuned, tmp_path):
    """package.run() puts the task config's data dir (make bundle DATA_DIR=...) into bundle.json."""
    from pipeline.config import load_task_config
    from pipeline.graph import get_stage
    from pipeline.records import StageContext, StageRecord, StageStatus
    from pipeline.stages import package

    runs = tmp_path / "runs" / "tiny"
    roles = {"onnx_fp32": "onnx/fp32.onnx", "onnx_int8": "onnx/int8.onnx", "tokenizer_dir": "tokenizer",
             "labels": "labels.json", "meta": "meta.json"}
    shutil.copytree(tiny_export, runs / "export" / "out")
    (runs / "validate" / "out").mkdir(parents=True)
    (runs / "validate" / "out" / "metrics.json").write_text(json.dumps(
        {"chosen_backend": "onnxruntime-cpu-int8", "summary": {"accuracy": 0.97},
         "backends": [{"backend": "onnxruntime-cpu-int8", "accuracy": 0.97}]}))
    (runs / "validate" / "out" / "gates.json").write_text("{}")
    upstream = {"export": StageRecord("export", StageStatus.OK, "k", {}, {}, artifacts=roles),
                "validate": StageRecord("validate", StageStatus.OK, "k", {}, {},
                                        artifacts={"metrics": "metrics.json", "gates": "gates.json"})}
    data = tmp_path / "elsewhere"
    shutil.copytree(tiny_finetuned["data_dir"], data)
    cfg = load_task_config(str(tiny_finetuned["task_yaml"]),
                           {"package.repository": str(tmp_path / "model_repository"), "data.dir": str(data)})
    (tmp_path / "out").mkdir()
    result = package.run(StageContext(cfg, get_stage("package"), tmp_path / "out", tmp_path / "work", upstream, runs, print))
    manifest = json.loads((Path(result.artifacts["bundle_dir"]) / "bundle.json").read_text(encoding="utf-8"))
    assert manifest["source"]["data_dir"] == str(data)


def test_smoke_without_data_dir_scores_the_data_the_bundle_was_built_from(served, recorded_bundle, task_without_data,
                                                                            tmp_path, capsys):
    """It used to stop with a DataError traceback (the task config's data.dir is not here)."""
    from serving.tools import smoke

    rc = smoke.main(["--task", str(task_without_data), "--repository", str(recorded_bundle), "--url", served.http_url,
                     "--json-out", str(tmp_path / "fresh" / "runs" / "smoke.json")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "PASS" in out and "dev data: " in err
    assert json.loads((tmp_path / "fresh" / "runs" / "smoke.json").read_text())["examples"] == 90


def test_smoke_asks_the_server_make_serve_started_for_the_bundle(recorded_bundle, task_without_data, tmp_path, capsys):
    """`make serve ARGS='--http-port 0'` then `make smoke`: smoke asked 127.0.0.1:8000 and gave up after 30 s (the
    UIE bundle's check, twenty-fifth session).  Without --url it now asks the server the launcher recorded beside
    the bundle, and says which; once that server is stopped, nothing is recorded and it asks the default port."""
    from serving import server
    from serving.tools import smoke

    repo = tmp_path / "repo"
    shutil.copytree(recorded_bundle, repo / "tiny")
    free = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    assert server.main(["--repository", str(repo), "--task", "tiny", "--detach", *free]) == 0
    try:
        state = server.ServerState.read(server.state_file((repo / "tiny").resolve()))
        assert state.http.rsplit(":", 1)[1] != "8000"
        assert server.running_url(repo / "tiny", "grpc") == state.grpc
        capsys.readouterr()
        rc = smoke.main(["--task", str(task_without_data), "--repository", str(repo / "tiny"), "--concurrency", "4"])
        out, err = capsys.readouterr()
        assert rc == 0, out + err
        assert "PASS" in out and f"server: {state.http} (http), the one `make serve` started for" in err
    finally:
        assert server.main(["--repository", str(repo), "--task", "tiny", "--stop"]) == 0
    assert server.running_url(repo / "tiny", "http") is None


def test_perf_replicas_and_loadtest_read_the_bundles_data_too(recorded_bundle, task_without_data, tiny_finetuned):
    from serving.tools import loadtest
    from serving.tools.offline import BundleModel
    from serving.tools.perf import request_items
    from serving.tools.smoke import dev_items

    dev = [json.loads(line)["sentence"] for line in
           (tiny_finetuned["data_dir"] / "dev.json").read_text(encoding="utf-8").splitlines()]
    manifest = BundleModel.open(recorded_bundle).manifest
    assert request_items(str(task_without_data), None, "classification", manifest) == dev  # make perf
    assert dev_items(str(task_without_data), recorded_bundle, None) == dev  # make replicas

    class Args:
        file = None
        task = str(task_without_data)
        data_dir = None

    assert loadtest._texts(Args, "classification", manifest) == dev  # make loadtest: not the built-in samples


@pytest.fixture()
def unrecorded(tiny_bundle, tmp_path) -> Path:
    """A bundle packaged before bundle.json recorded its data (or from paddlenlp's download)."""
    bundle = tmp_path / "repo" / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    assert "data_dir" not in json.loads((bundle / "bundle.json").read_text())["source"]
    return bundle


def test_without_any_data_each_tool_says_so_in_one_line(unrecorded, task_without_data, tmp_path, capsys, monkeypatch):
    from serving.tools import perf, replicas, smoke

    says = ("data dir not found", "the bundle does not record the data it was built from")
    assert smoke.main(["--task", str(task_without_data), "--repository", str(unrecorded), "--url", "127.0.0.1:1"]) == 2
    one_line(capsys.readouterr().err, *says)
    assert replicas.main(["--task", str(task_without_data), "--repository", str(unrecorded)]) == 2
    one_line(capsys.readouterr().err, *says)
    fake = tmp_path / "perf_analyzer"  # perf looks for its tool first; the data is what this probe is about
    fake.write_text("#!/bin/sh\necho 'perf_analyzer Version 2.51.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PERF_ANALYZER", str(fake))
    assert perf.main(["--task", str(task_without_data), "--repository", str(unrecorded),
                      "--json-out", str(tmp_path / "perf.json")]) == 2
    one_line(capsys.readouterr().err, *says)
    # a --data-dir that is not there is named as given
    assert smoke.main(["--task", str(task_without_data), "--repository", str(unrecorded), "--data-dir",
                       str(tmp_path / "typo")]) == 2
    one_line(capsys.readouterr().err, f"data dir not found: {tmp_path / 'typo'}")


# ------------------------------------------------------------------------------------------------
# 8. the launcher never reports a server that is not the one it started


def _launch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.server", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("held", ["http", "grpc", "metrics"])
def test_a_second_server_on_held_ports_is_refused(served, tiny_bundle, tmp_path, held):
    """A second bundle started on a port the running server holds used to print "Triton is serving" and record a
    dead pid: the readiness poll was answered by the old server."""
    from serving.server import free_port, state_file

    repo = tmp_path / "repo"
    shutil.copytree(tiny_bundle, repo / "tiny")
    ports: dict[str, int] = {}
    for name in ("http", "grpc", "metrics"):  # distinct, as the launcher picks them (two free_port() can agree)
        ports[name] = free_port(avoid=(*ports.values(), served.http_port, served.grpc_port, served.metrics_port))
    ports[held] = getattr(served, f"{held}_port")
    run = _launch("--repository", str(repo), "--task", "tiny", "--detach", *(
        x for name, port in ports.items() for x in (f"--{name}-port", str(port))))
    assert run.returncode == 2, run.stdout + run.stderr
    one_line(run.stderr, f"{held} port {ports[held]}", "in use")
    assert "Triton is serving" not in run.stdout and not state_file((repo / "tiny").resolve()).exists()
    assert served.ready()


class _Impostor(BaseHTTPRequestHandler):
    """Another HTTP server on the port: ready, and named something else (GET /v2 "name")."""

    def do_GET(self):  # noqa: N802
        body = json.dumps({"name": "someone-else", "version": "2.51.0"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_readiness_is_asked_of_the_server_just_started(tiny_bundle, tmp_path, monkeypatch):
    """A port taken between the check and the bind (or a server the check could not see): the answer of a server
    with another --id is not taken for this one's; the new server is stopped."""
    from serving import server as srv

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    impostor = HTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    monkeypatch.setattr(srv, "check_ports_free", lambda host, ports: None)  # as if the port was free when checked
    try:
        with pytest.raises(srv.ServerError, match=f"http port {impostor.server_port} .*answered by another server"):
            srv.start_server(bundle, http_port=impostor.server_port, timeout=60, log_path=tmp_path / "s.log")
    finally:
        impostor.shutdown()
    deadline = time.time() + 15
    while servers_on(bundle.resolve()) and time.time() < deadline:
        time.sleep(0.2)
    assert servers_on(bundle.resolve()) == []


# ------------------------------------------------------------------------------------------------
# 10 (server). port flags


@pytest.mark.parametrize("args, says", [
    (["--http-port", "99999"], "--http-port 99999: a port is 1-65535 (or 0: a free one)"),
    (["--grpc-port", "-1"], "--grpc-port -1: a port is 1-65535"),
    (["--metrics-port", "70000"], "--metrics-port 70000"),
    (["--http-port", "18123", "--grpc-port", "18123"], "--http-port and --grpc-port are both 18123"),
    (["--http-port", "0", "--grpc-port", "18124", "--metrics-port", "18124"], "--grpc-port and --metrics-port are both 18124"),
    (["--timeout", "0"], "--timeout 0.0"),
    (["--timeout", "nan"], "--timeout nan"),
    (["--log", "/"], "--log /: a directory"),
    (["--log", "/no/such/folder/s.log"], "folder /no/such/folder does not exist"),
    (["--host", "no-such-host.invalid"], "--host 'no-such-host.invalid'"),
    (["--host", "192.0.2.1"], "--host 192.0.2.1: cannot bind"),
])
def test_serve_flags_are_checked_before_anything_starts(tiny_bundle, tmp_path, capsys, args, says):
    from serving import server

    repo = tmp_path / "repo"
    shutil.copytree(tiny_bundle, repo / "tiny")
    free = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]  # whatever else runs here
    assert server.main(["--repository", str(repo), "--task", "tiny", "--detach", *free, *args]) == 2
    captured = capsys.readouterr()
    one_line(captured.err, says)
    assert "Triton is serving" not in captured.out and servers_on((repo / "tiny").resolve()) == []


# ------------------------------------------------------------------------------------------------
# 9. kill -9 of make perf / make replicas leaves nothing running


def _children(pid: int) -> dict[int, str]:
    """pid -> executable name of every child of ``pid``."""
    from serving.procfs import processes

    return {p.pid: p.name for p in processes() if p.ppid == pid}


def _group(pgid: int) -> list[int]:
    from serving.process_group import group_members

    return group_members(pgid)  # zombies (exited, not yet reaped) are not counted


def _shm_prefix(pid: int) -> str:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return next(a.split("shm-region-prefix-name=", 1)[1] for a in cmd if "shm-region-prefix-name=" in a)


def _kill_and_check(proc: subprocess.Popen, wanted: dict[str, int], timeout: float = 180) -> None:
    """Wait until ``proc`` has its children (name -> how many), kill -9 it, and assert every child, the servers'
    process groups (python stubs) and their /dev/shm regions are gone within a few seconds."""
    deadline = time.time() + timeout
    kids: dict[int, str] = {}
    while time.time() < deadline and proc.poll() is None:
        kids = _children(proc.pid)
        names = list(kids.values())
        if all(names.count(name) >= n for name, n in wanted.items()):
            break
        time.sleep(0.3)
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    servers = [pid for pid, name in kids.items() if name == "tritonserver"]
    groups = {pid: _group(pid) for pid in servers}
    prefixes = [_shm_prefix(pid) for pid in servers]
    assert all(len(g) > 1 for g in groups.values())  # the servers and their python stubs
    assert all(list(Path("/dev/shm").glob(p + "*")) for p in prefixes)
    try:
        proc.kill()
        proc.wait()
        def left() -> list:
            return ([p for p in kids if _state(p) not in ("gone", "Z")] + [p for g in groups for p in _group(g)]
                    + [str(r) for p in prefixes for r in Path("/dev/shm").glob(p + "*")])

        deadline = time.time() + 30
        while left() and time.time() < deadline:
            time.sleep(0.2)
        assert left() == [], f"left running after kill -9 of its parent: {[kids.get(p, p) for p in left()]}"
    finally:
        from serving.process_group import reap_group

        for pid, name in kids.items():
            if name != "tritonserver":
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid, prefix in zip(servers, prefixes):
            reap_group(pid, prefix)


def _state(pid: int) -> str:
    from serving.procfs import read_stat

    proc = read_stat(pid)
    return "gone" if proc is None else proc.state


def test_kill_9_of_make_perf_leaves_no_server_stubs_shm_or_perf_analyzer(tiny_bundle, tiny_finetuned, tmp_path):
    from serving.tools.perf import PerfError, find_perf_analyzer

    tool_or_skip(find_perf_analyzer, PerfError, "ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER")
    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    proc = subprocess.Popen([sys.executable, "-m", "serving.tools.perf", "--task", str(tiny_finetuned["task_yaml"]),
                             "--repository", str(bundle), "--concurrency", "2", "--seconds", "60",
                             "--json-out", str(tmp_path / "perf.json")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_and_check(proc, {"tritonserver": 1, "perf_analyzer": 1})


@pytest.mark.slow
def test_kill_9_of_make_replicas_leaves_no_replica_or_haproxy(tiny_bundle, tiny_finetuned, tmp_path):
    from serving.tools.replicas import ReplicaError, find_haproxy

    tool_or_skip(find_haproxy, ReplicaError, "ERNIE_BUNDLE_REQUIRE_HAPROXY")
    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    proc = subprocess.Popen([sys.executable, "-m", "serving.tools.replicas", "--task", str(tiny_finetuned["task_yaml"]),
                             "--repository", str(bundle), "--seconds", "120", "--kill-at", "100", "--concurrency", "2"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_and_check(proc, {"tritonserver": 2, "haproxy": 1})


# ------------------------------------------------------------------------------------------------
# beyond the list: numbers, paths and URLs each command takes


@pytest.mark.parametrize("tool, args, says", [
    ("loadtest", ["--concurrency", "0"], "--concurrency 0: must be >= 1"),
    ("loadtest", ["--seconds", "-1"], "--seconds -1.0"),
    ("loadtest", ["--batch-size", "0"], "--batch-size 0"),
    ("loadtest", ["--max-requests", "0"], "--max-requests 0"),
    ("loadtest", ["--url", "http://127.0.0.1:8001"], "no scheme"),
    ("loadtest", ["--url", "no-such-host.invalid:8001"], "cannot resolve 'no-such-host.invalid'"),
    ("loadtest", ["--url", "192.0.2.1:8001"], "not loopback"),
    ("loadtest", ["--json-out", "/"], "--json-out /: a directory"),
    ("smoke", ["--batch-size", "0"], "--batch-size 0: items per request, must be >= 1"),
    ("smoke", ["--concurrency", "-4"], "--concurrency -4"),
    ("smoke", ["--json-out", "/"], "--json-out /: a directory"),
    ("smoke", ["--json-out", "/proc/1/nope/smoke.json"], "--json-out /proc/1/nope/smoke.json"),
    ("perf", ["--concurrency", "0"], "--concurrency 0: concurrent requests, must be >= 1"),
    ("perf", ["--seconds", "0"], "--seconds 0.0"),
    ("perf", ["--json-out", "/"], "--json-out /: a directory"),
    ("perf", ["--url", "127.0.0.1:1"], "no Triton answers gRPC at 127.0.0.1:1"),
    ("replicas", ["--items", "0"], "--items 0: must be >= 1"),
    ("replicas", ["--concurrency", "0"], "--concurrency 0"),
    ("replicas", ["--seconds", "0"], "--seconds 0.0"),
    ("replicas", ["--seconds", "5", "--kill-at", "9"], "--kill-at 9.0 must be inside the run"),
    ("replicas", ["--json-out", "/"], "--json-out /: a directory"),
])
def test_tool_probes(probe_bundle, task_without_data, capsys, tool, args, says, tmp_path, monkeypatch):
    """A bad number, path or URL given to a serving tool is one line and exit 2.  loadtest is pointed at a model
    name; smoke, perf and replicas at a task's bundle."""
    monkeypatch.chdir(tmp_path)  # perf makes its default report's folder (runs/<task>/) before it fails: not in the checkout
    module = importlib.import_module(f"serving.tools.{tool}")
    if tool == "perf":  # perf refuses to start without perf_analyzer before it reads its other flags
        tool_or_skip(module.find_perf_analyzer, module.PerfError, "ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER")
    target = ["--model", "tiny", "--seconds", "1"] if tool == "loadtest" else \
        ["--task", str(task_without_data), "--repository", str(probe_bundle)]
    assert module.main([*target, *args]) == 2
    one_line(capsys.readouterr().err, says)


def test_smoke_data_dir_is_relative_to_where_it_is_run(served, probe_bundle, task_without_data, tiny_finetuned,
                                                       tmp_path, monkeypatch, capsys):
    """As the pipeline's --data-dir: a relative path is from the current directory, not the project root."""
    from serving.tools import smoke

    shutil.copytree(tiny_finetuned["data_dir"], tmp_path / "mydata")
    monkeypatch.chdir(tmp_path)
    assert smoke.main(["--task", str(task_without_data), "--repository", str(probe_bundle), "--url", served.http_url,
                       "--data-dir", "mydata"]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("content, says", [(b"", "no texts in it"), (b"\xff\xfe\x00bad\n", "not UTF-8"),
                                           (None, "cannot read it")])
def test_loadtest_file_probes(served, tmp_path, capsys, content, says):
    from serving.tools import loadtest

    f = tmp_path / "texts.txt"
    if content is not None:
        f.write_bytes(content)
    assert loadtest.main(["--model", "tiny", "--url", served.grpc_url, "--seconds", "1", "--file", str(f),
                          "--no-offline"]) == 2
    one_line(capsys.readouterr().err, f"--file {f}", says)


@pytest.mark.parametrize("args, says", [
    (["classify", "--url", "http://127.0.0.1:8000", "x"], "give host:port without the scheme"),
    (["classify", "--url", "127.0.0.1:99999", "x"], "a port 1-65535"),
    (["classify", "--url", "127.0.0.1", "x"], "expected host:port"),
    (["classify", "--timeout", "0", "x"], "timeout 0.0"),
    (["classify", "--retries", "-1", "x"], "retries -1"),
    (["health", "--url", "localhost"], "expected host:port"),
])
def test_client_probes_without_a_server(capsys, args, says):
    from serving.tools import client_cli as client

    assert client.main([*args[:1], "--model", "tiny", *args[1:]]) == 2
    one_line(capsys.readouterr().err, says)


def test_client_probes_against_a_server(served, tmp_path, capsys):
    from serving.tools import client_cli as client

    url = ["--model", "tiny", "--url", served.http_url]
    assert client.main(["classify", *url, "--batch-size", "0", "x"]) == 2
    one_line(capsys.readouterr().err, "--batch-size 0")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café\n".encode("latin-1"))
    assert client.main(["classify", *url, "--file", str(bad)]) == 2
    one_line(capsys.readouterr().err, f"--file {bad}: not UTF-8")
    assert client.main(["classify", *url, "--file", str(tmp_path)]) == 2
    one_line(capsys.readouterr().err, "not a file")
    for command, extra in (("extract", ["x"]), ("answer", ["--question", "q", "--context", "c"]),
                           ("ie", ["--schema", "p", "x"])):
        assert client.main([command, *url, *extra]) == 2
        one_line(capsys.readouterr().err, "model 'tiny' is a classification bundle: use `classify`", f"not `{command}`")
    assert client.main(["classify", *url, "股票银行"]) == 0 and client.main(["predict", *url, "股票银行"]) == 0
