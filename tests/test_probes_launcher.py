"""Second round of probes of the launcher (``make serve`` / ``make stop``, issue 37): interrupted while the models
load, a forged state file, a record it cannot remove.  Real tritonserver processes on the tiny bundle.

To interrupt a launch reliably "while the models load", the server binary is a wrapper that waits a few seconds
before it execs the real tritonserver (same pid, same command line): the launcher sees exactly what it sees during a
slow model load."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serving_fixtures import servers_on, tiny_bundle, tiny_export  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent


def _launcher(repo: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "serving.server", "--repository", str(repo), "--task", "tiny",
            "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--timeout", "120", *extra]


@pytest.fixture
def slow_tritonserver(tmp_path) -> dict:
    """$TRITONSERVER: a script that sleeps 4 s, then execs the real server with the install's own settings."""
    from serving.triton_install import find_tritonserver

    env = {k: v for k, v in os.environ.items() if k != "TRITONSERVER"}
    install = find_tritonserver()
    extra = [f"--backend-directory={install.backend_dir}"] if install.backend_dir else []
    extra += [f"--cache-directory={install.cache_dir}"] if install.cache_dir else []
    exports = "".join(f"export {k}='{v}'\n" for k, v in install.env.items())
    script = tmp_path / "slow-tritonserver"
    script.write_text(f"#!/bin/sh\nsleep 4\n{exports}exec '{install.binary}' \"$@\" {' '.join(extra)}\n")
    script.chmod(0o755)
    # the launcher checks the engine with the python3 first on PATH, as the stubs will find it
    return {**env, "PATH": install.env.get("PATH", env.get("PATH", "")), "TRITONSERVER": str(script)}


def _repo(tiny_bundle, tmp_path) -> tuple[Path, Path]:
    from serving.server import state_file

    repo = tmp_path / "repo"
    shutil.copytree(tiny_bundle, repo / "tiny")
    return repo, state_file((repo / "tiny").resolve())


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not path.is_file() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert path.is_file(), "the launcher did not record its server before readiness"


def _nothing_left(repository: Path, shm_prefix: str, seconds: float = 30) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not servers_on(repository) and not list(Path("/dev/shm").glob(shm_prefix + "*")):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_detached_launch_while_the_models_load_stops_the_server(tiny_bundle, tmp_path, slow_tritonserver, sig):
    """Ctrl-C or SIGTERM of `make serve` during start-up: the server it started is stopped, nothing is recorded,
    one line and no traceback; the next `make serve` starts."""
    from serving.process_group import reap_group
    from serving.server import ServerState

    repo, state_path = _repo(tiny_bundle, tmp_path)
    # As from a terminal: Ctrl-C delivered.  A shell's background job (pytest started with `&`, as a CI script may)
    # ignores SIGINT, and a child inherits that: the launcher would then rightly ignore it too.
    proc = subprocess.Popen(_launcher(repo, "--detach", "--log", str(tmp_path / "s.log")), cwd=ROOT,
                            env=slow_tritonserver, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(state_path, proc)
        state = ServerState.read(state_path)
        assert state.is_running()  # recorded while still starting
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, err
        assert err.strip().splitlines() == ["interrupted: the server being started was stopped"]
        assert _nothing_left((repo / "tiny").resolve(), state.shm_prefix) and not state_path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        if state_path.is_file():
            st = ServerState.read(state_path)
            reap_group(st.pid, st.shm_prefix)


def test_a_detached_launcher_killed_while_the_models_load_leaves_a_server_stop_finds(tiny_bundle, tmp_path, slow_tritonserver):
    """kill -9 of `make serve` during start-up: the server was recorded before the wait, so the next `make serve`
    says one is running and `make stop` stops it (it used to orphan it: "no server recorded", "port in use")."""
    from serving.process_group import reap_group
    from serving.server import ServerState

    repo, state_path = _repo(tiny_bundle, tmp_path)
    proc = subprocess.Popen(_launcher(repo, "--detach", "--log", str(tmp_path / "s.log")), cwd=ROOT,
                            env=slow_tritonserver, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(state_path, proc)
    state = ServerState.read(state_path)
    # recorded while the server is still starting: its process is still the wrapper's 4 s sleep, not tritonserver
    # (8d8969e wrote the record only after readiness, so a kill -9 here left an unrecorded server)
    assert b"slow-tritonserver" in Path(f"/proc/{state.pid}/cmdline").read_bytes()
    proc.kill()
    proc.wait()
    try:
        again = subprocess.run(_launcher(repo, "--detach"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and "a server is already running for this bundle" in again.stderr
        stopped = subprocess.run(_launcher(repo, "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert stopped.returncode == 0 and "stopped tritonserver" in stopped.stdout, stopped.stdout + stopped.stderr
        assert _nothing_left((repo / "tiny").resolve(), state.shm_prefix) and not state_path.exists()
    finally:
        if state.is_running():
            os.killpg(state.pid, signal.SIGKILL)
        reap_group(state.pid, state.shm_prefix)


@pytest.mark.parametrize("prefix", ["x_?", "*", "ernie_bundle_1_", "../etc/", ""])
def test_stop_with_a_forged_shm_prefix_deletes_nobody_elses_shared_memory(tiny_bundle, tmp_path, prefix):
    """A state file with a dead pid and a glob for a prefix made --stop delete other programs' /dev/shm regions
    (and `*` crashed it): refused in one line, every region left."""
    from serving.server import state_file

    bundle = tmp_path / "repo" / "tiny"
    shutil.copytree(tiny_bundle, bundle)
    others = [Path("/dev/shm") / f"x_{k}_someone_else_{os.getpid()}" for k in range(3)]
    for region in others:
        region.write_bytes(b"theirs")
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        path = state_file(bundle.resolve())
        path.write_text(f'{{"pid": {dead.pid}, "start_time": 1, "repository": "{bundle.resolve()}", "shm_prefix": "{prefix}"}}')
        out = subprocess.run(_launcher(tmp_path / "repo", "--stop"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "unreadable server state" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert all(region.read_bytes() == b"theirs" for region in others)
    finally:
        for region in others:
            region.unlink(missing_ok=True)


def test_reaping_takes_only_regions_of_the_exact_prefix_form(tmp_path):
    from serving.process_group import shm_regions

    prefix = f"ernie_bundle_{os.getpid()}_0123abcd_"
    mine, theirs = Path("/dev/shm") / f"{prefix}region", Path("/dev/shm") / f"ernie_bundle_{os.getpid()}_0123abce_x"
    try:
        mine.write_bytes(b"1")
        theirs.write_bytes(b"2")
        assert shm_regions(prefix) == [mine]
        assert shm_regions("ernie_bundle_") == [] and shm_regions("*") == []
    finally:
        mine.unlink(missing_ok=True)
        theirs.unlink(missing_ok=True)


def test_a_record_that_cannot_be_removed_ends_a_foreground_launcher_without_a_traceback(tiny_bundle, tmp_path):
    """A repository where the launcher's record cannot be removed (read-only; here the record's place is taken by a
    folder, which unlink refuses the same way) used to end Ctrl-C of the foreground launcher in a traceback."""
    from serving.process_group import reap_group
    from serving.server import ServerState

    repo, state_path = _repo(tiny_bundle, tmp_path)
    proc = subprocess.Popen(_launcher(repo, "--log", str(tmp_path / "s.log")), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(state_path, proc, 120)
        state = ServerState.read(state_path)
        deadline = time.time() + 120
        while "Ctrl-C stops it" not in (proc.stdout.readline() or "Ctrl-C stops it") and time.time() < deadline:
            pass
        state_path.unlink()
        state_path.mkdir()
        (state_path / "keep").write_text("x")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, err
        assert _nothing_left((repo / "tiny").resolve(), state.shm_prefix)
    finally:
        if proc.poll() is None:
            proc.kill()
        reap_group(state.pid, state.shm_prefix)
