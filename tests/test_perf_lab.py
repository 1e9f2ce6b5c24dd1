"""scripts/perf_lab.py: the research instruments make perf no longer carries (py-spy on the stubs, a lone request's
time split), built on serving.tools.perf's pieces.  It imports, its command line parses and is checked, and the
arithmetic it reports rests on: py-spy's collapsed stacks, the lone request's split."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "perf_lab.py"


@pytest.fixture(scope="module")
def lab():
    spec = importlib.util.spec_from_file_location("perf_lab", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_imports_and_its_command_line_parses(lab):
    args = lab.parser().parse_args(["--task", "tnews", "--concurrency", "1", "--seconds", "5", "--json-out", "x.json"])
    assert (args.task, args.concurrency, args.seconds, args.rate, args.window, args.repository) == (
        "tnews", 1, 5.0, 250, 5.0, "model_repository")
    lab.check(args)
    with pytest.raises(lab.perf.PerfError, match=r"--concurrency 0: concurrent requests, must be >= 1"):
        lab.check(lab.parser().parse_args(["--task", "t", "--concurrency", "0"]))
    with pytest.raises(lab.perf.PerfError, match=r"--seconds 0.5: seconds of sampling, 1 to 600"):
        lab.check(lab.parser().parse_args(["--task", "t", "--seconds", "0.5"]))
    with pytest.raises(SystemExit):
        lab.parser().parse_args([])  # --task is required


def test_without_perf_analyzer_it_says_how_to_install_it(lab, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PERF_ANALYZER", str(tmp_path / "absent"))
    assert lab.main(["--task", "tiny", "--repository", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "perf_analyzer not found" in err[0]


def test_top_frames_from_py_spys_collapsed_stacks(lab):
    raw = ("process 1;execute (model_support.py:220);run (model.py:40);__call__ (runner.py:60) 60\n"
           "process 1;execute (model_support.py:220);response (model_support.py:178) 30\n"
           "process 1;execute (model_support.py:220) 10\n")
    top = lab.top_frames(raw, expected=200)
    assert top["samples"] == 100 and top["busy_share"] == 0.5
    frames = {f["frame"]: f for f in top["frames"]}
    assert frames["__call__ (runner.py:60)"]["own"] == 0.6 and frames["execute (model_support.py:220)"]["inside"] == 1.0
    assert top["frames"][0]["frame"] == "__call__ (runner.py:60)"
    assert top["engine_share"] == 0.0  # no frame of the bundle's engine.py in these stacks
    raw += "process 1;execute (model_support.py:220);__call__ (runner.py:60);Engine.__call__ (engine.py:80);infer (openvino/_ov_api.py:202) 100\n"
    assert lab.top_frames(raw, expected=400)["engine_share"] == 0.5


def test_a_lone_requests_time_split_from_perf_analyzers_parts_and_py_spys_shares(lab):
    """Concurrency 1, one request per 10 ms: the client saw 10 ms on average, 9 of them inside Triton; two stubs (an
    ensemble) busy 40% and 30% of the time, the second one 80% inside the engine: 2 ms of hand-off."""
    profile = {"stubs": {"stub t_tokenizer_0_0": {"busy_share": 0.4, "engine_share": 0.0},
                         "stub t_model_0_0": {"busy_share": 0.3, "engine_share": 0.8}}}
    split = lab.lone_request_split(10.0, 9.0, 10.0, profile)
    assert split == pytest.approx({"outside_triton": 1.0, "handoff": 2.0, "python": 4.6, "engine": 2.4, "mean_ms": 10.0})
    assert sum(split[k] for k in ("outside_triton", "handoff", "python", "engine")) == pytest.approx(split["mean_ms"])
    assert lab.lone_request_split(10.0, 0.0, 10.0, profile) is None  # no server-side figure: no split
    assert lab.lone_request_split(10.0, 9.0, 10.0, {"stubs": {"s": {"busy_share": None}}}) is None
    md = lab.format_markdown({"model": "t", "task_type": "classification", "lone_request_ms": split,
                              "profile": {"concurrency": 1, "seconds": 2.0, "rate": 100, "stubs": {
                                  "stub t_model_0_0": lab.top_frames("process 1;run (engine.py:3) 50\n", expected=200)}}})
    assert "stub t_model_0_0 (50 samples, its Python thread busy 25% of the time; 100.0% inside engine.py)" in md
    assert "the python backend's hand-off to the stub and back 2.00 ms; our Python 4.60 ms; the engine 2.40 ms" in md
