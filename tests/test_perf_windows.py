"""`make perf` on a busy machine: perf_analyzer exits without numbers when 6 windows are not within 25% of
each other (seen in CI when another job shared the 2 cores).  The level is measured again with longer windows,
as perf_analyzer's own message and Model Analyzer do; other failures still stop at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.validation.release import PerfRecord
from serving.tools import perf

FAKE = '''#!{python}
import json, sys
from pathlib import Path
args = sys.argv[1:]
calls = Path({calls!r})
seen = json.loads(calls.read_text()) if calls.exists() else []
window = int(args[args.index("--measurement-interval") + 1])
seen.append(window)
calls.write_text(json.dumps(seen))
if {mode!r} == "crash":
    print("error: failed to get model metadata"); sys.exit(99)
if {mode!r} in ("abort", "abort_once") and (len(seen) == 1 or {mode!r} == "abort"):
    import os, signal
    print("E1127 ev_epoll1_linux.cc:373] (event_engine) encountered epoll_wait error: Bad file descriptor", flush=True)
    os.kill(os.getpid(), signal.SIGABRT)
if {mode!r} == "unstable" or len(seen) < {stable_at}:
    print("Failed to obtain stable measurement within 6 measurement windows for concurrency 2. "
          "Please try to increase the --measurement-interval."); sys.exit(2)
out = args[args.index("-f") + 1]
Path(out).write_text("Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency\\n"
                     "2,120.5,4000,5000,6000,9000\\n")
'''


def _fake(tmp_path, mode: str, stable_at: int = 1) -> tuple[perf.PerfAnalyzer, Path]:
    calls = tmp_path / "calls.json"
    binary = tmp_path / "perf_analyzer"
    binary.write_text(FAKE.format(python=sys.executable, calls=str(calls), mode=mode, stable_at=stable_at))
    binary.chmod(0o755)
    return perf.PerfAnalyzer(binary, {}), calls


def _level(tmp_path, pa, logs):
    return perf.run_level(pa, "127.0.0.1:1", "m", tmp_path / "input.json", 2, 1.0, (), tmp_path, log=logs.append)


@pytest.fixture(autouse=True)
def _no_server(monkeypatch):
    monkeypatch.setattr(perf, "_model_stats", lambda url: {})


def test_an_unstable_level_is_measured_again_with_longer_windows(tmp_path):
    pa, calls = _fake(tmp_path, "flaky", stable_at=2)
    logs = []
    level = _level(tmp_path, pa, logs)
    assert json.loads(calls.read_text()) == [1000, 2000]
    assert level.window_s == 2.0 and level.requests_per_s == 120.5 and level.p99_ms == 9.0
    assert len(logs) == 1 and "not stable over 1 s windows" in logs[0] and "2 s windows" in logs[0]
    record = PerfRecord(model="m", summary=[perf.Shape(1, 2, served=[level], model_only=[(100.0, 0.01)]).figures("batch 16")],
                        task_type="classification", seconds=1.0, perf_analyzer="2.51",
                        cpu={"model": "cpu", "flags": ["avx2"], "cores": 2}, levels=[level])
    assert "measured with longer ones: concurrency 2 (2 s)" in perf.format_markdown(record)


def test_a_stable_level_runs_once_with_the_asked_window(tmp_path):
    pa, calls = _fake(tmp_path, "flaky", stable_at=1)
    logs = []
    assert _level(tmp_path, pa, logs).window_s == 1.0
    assert json.loads(calls.read_text()) == [1000] and logs == []


def test_never_stable_names_the_windows_tried(tmp_path):
    pa, calls = _fake(tmp_path, "unstable")
    with pytest.raises(perf.PerfError, match=r"no stable measurement at concurrency 2 with windows of 1 to 4 s"):
        _level(tmp_path, pa, [])
    assert json.loads(calls.read_text()) == [1000, 2000, 4000]


def test_other_failures_are_not_retried(tmp_path):
    pa, calls = _fake(tmp_path, "crash")
    with pytest.raises(perf.PerfError, match=r"exit 99\): error: failed to get model metadata"):
        _level(tmp_path, pa, [])
    assert json.loads(calls.read_text()) == [1000]


def test_a_perf_analyzer_killed_by_a_signal_is_run_once_more(tmp_path):
    """perf_analyzer 2.51's gRPC client sometimes aborts (SIGABRT) mid-run; that level is measured once more with the
    same window, and a second death is an error naming the signal."""
    pa, calls = _fake(tmp_path, "abort_once")
    logs = []
    assert _level(tmp_path, pa, logs).requests_per_s == 120.5
    assert json.loads(calls.read_text()) == [1000, 1000]
    assert len(logs) == 1 and "died at concurrency 2 (SIGABRT)" in logs[0] and "epoll_wait error" in logs[0]
    again = tmp_path / "again"
    again.mkdir()
    pa, calls = _fake(again, "abort")
    with pytest.raises(perf.PerfError, match=r"exit -6\): .*epoll_wait error"):
        _level(again, pa, [])
    assert json.loads(calls.read_text()) == [1000, 1000]


def test_a_server_that_never_answers_its_statistics_is_one_line_not_a_hang(monkeypatch):
    """Triton's statistics are read before and after every level, with a deadline: a server that accepts the
    connection and never answers (the eleventh session's `make tune` sat silent for 15 minutes somewhere between two
    levels) stops the tool with one line naming the call."""
    import socket
    import time

    from serving.tools.perf import PerfError

    monkeypatch.undo()  # this test wants the real statistics call
    monkeypatch.setattr(perf, "STATS_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        t0 = time.monotonic()
        with pytest.raises(PerfError, match=r"no Triton answers gRPC at 127\.0\.0\.1:\d+ \(Deadline Exceeded; its statistics waited for at most 1 s\)"):
            perf._model_stats(f"127.0.0.1:{silent.getsockname()[1]}")
        assert time.monotonic() - t0 < 30


def test_a_model_load_that_never_answers_is_one_line_not_a_hang():
    import socket

    from serving.tools.tune import TuneError, _http

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v2/repository/models/m/load"
        with pytest.raises(TuneError, match=r"/v2/repository/models/m/load: no answer within 1 s$"):
            _http(url, {"parameters": {}}, timeout=1)
        port = silent.getsockname()[1]
    with pytest.raises(TuneError, match=r"no answer \(\[Errno 111\] Connection refused\)$"):  # nothing listens now
        _http(f"http://127.0.0.1:{port}/v2/repository/models/m/load", {"parameters": {}}, timeout=1)
