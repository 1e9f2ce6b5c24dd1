"""The served release gate (issue 38): ``make gate ... BASELINE_PERF=previous/perf.json`` fails when the served
efficiency (served / ceiling, measured in one run by make perf) fell by more than ``gates.release_max_served_drop``
on any request shape both reports measured; bad perf reports are one line, exit 2.  And the arithmetic make perf's
report rests on: the ceiling, the per-round spread, py-spy's collapsed stacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.validation.release import main as gate_main
from serving.tools import perf


def _gates(path: Path, task: str = "tiny") -> Path:
    path.write_text(json.dumps({"task": task, "chosen_backend": "openvino-cpu-int8",
                                "summary": {"accuracy": 0.5, "sentences_per_s": 100.0, "throughput_ratio": 3.0}}))
    return path


def _perf(path: Path, ratios: dict, model: str = "tiny", key: str = "served_over_ceiling") -> Path:
    rows = [{"items_per_request": n, "concurrency": c, key: {"median": r, "min": r, "max": r}} for (n, c), r in ratios.items()]
    path.write_text(json.dumps({"model": model, "summary": rows}))
    return path


def _gate(tiny_task, tmp_path, current: Path, baseline: Path, capsys) -> tuple[int, str, str]:
    g = _gates(tmp_path / "gates.json")
    rc = gate_main(["--task", str(tiny_task), "--baseline", str(g), "--current", str(g), "--baseline-perf", str(baseline),
                    "--current-perf", str(current)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_served_regression_fails_the_release_like_an_accuracy_one(tiny_task, tmp_path, capsys):
    base = _perf(tmp_path / "base.json", {(1, 16): 0.92, (32, 1): 0.97})
    halved = _perf(tmp_path / "cur.json", {(1, 16): 0.46, (32, 1): 0.97})
    rc, out, err = _gate(tiny_task, tmp_path, halved, base, capsys)
    assert rc == 3 and "FAIL  release_served_drop[1 item(s) x c16]: measured 0.5" in out
    assert "PASS  release_served_drop[32 item(s) x c1]" in out and "release gate FAILED" in err
    same = _perf(tmp_path / "same.json", {(1, 16): 0.88, (32, 1): 0.99, (1, 4): 0.5})  # -4%: within 15%
    rc, out, _ = _gate(tiny_task, tmp_path, same, base, capsys)
    assert rc == 0 and out.count("PASS  release_served_drop") == 2  # (1, 4) has no baseline: not compared


@pytest.mark.parametrize("content, says", [
    ("{not json", "not a JSON perf report"),
    ('{"model": "tiny"}', "not an ernie-bundle make perf report"),
    ('{"model": "tiny", "summary": [{"items_per_request": 1, "concurrency": 16}]}', "served_over_model_only.median > 0"),
    ('{"model": "tiny", "summary": [{"items_per_request": 1, "concurrency": 16, "served_over_ceiling": {"median": NaN}}]}',
     "served_over_ceiling.median > 0"),
])
def test_a_bad_perf_report_is_one_line(tiny_task, tmp_path, capsys, content, says):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = _gate(tiny_task, tmp_path, bad, _perf(tmp_path / "base.json", {(1, 16): 0.9}), capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err


def test_reports_of_other_shapes_or_measures_are_refused(tiny_task, tmp_path, capsys):
    base = _perf(tmp_path / "base.json", {(1, 16): 0.9})
    rc, _, err = _gate(tiny_task, tmp_path, _perf(tmp_path / "c.json", {(1, 4): 0.9}), base, capsys)
    assert rc == 2 and "no request shape" in err
    rc, _, err = _gate(tiny_task, tmp_path, _perf(tmp_path / "m.json", {(1, 16): 0.9}, key="served_over_model_only"), base, capsys)
    assert rc == 2 and "served / ceiling" in err
    rc, _, err = _gate(tiny_task, tmp_path, _perf(tmp_path / "o.json", {(1, 16): 0.9}, model="other"), base, capsys)
    assert rc == 2 and "same task" in err


def test_ceiling_and_spread():
    assert perf.ceiling(2000.0, 12000.0) == pytest.approx(1714.2857, rel=1e-6)
    s = perf._spread([3.0, 1.0, 2.0])
    assert (s["median"], s["min"], s["max"], s["rounds"]) == (2.0, 1.0, 3.0, [3.0, 1.0, 2.0])
    assert perf._spread([1.0, 3.0])["median"] == 2.0


def test_top_frames_from_py_spys_collapsed_stacks():
    raw = ("process 1;execute (model_support.py:220);run (model.py:40);__call__ (runner.py:60) 60\n"
           "process 1;execute (model_support.py:220);response (model_support.py:178) 30\n"
           "process 1;execute (model_support.py:220) 10\n")
    top = perf.top_frames(raw, expected=200)
    assert top["samples"] == 100 and top["busy_share"] == 0.5
    frames = {f["frame"]: f for f in top["frames"]}
    assert frames["__call__ (runner.py:60)"]["own"] == 0.6 and frames["execute (model_support.py:220)"]["inside"] == 1.0
    assert top["frames"][0]["frame"] == "__call__ (runner.py:60)"
    assert top["engine_share"] == 0.0  # no frame of the bundle's engine.py in these stacks
    raw += "process 1;execute (model_support.py:220);__call__ (runner.py:60);Engine.__call__ (engine.py:80);infer (openvino/_ov_api.py:202) 100\n"
    assert perf.top_frames(raw, expected=400)["engine_share"] == 0.5


def test_a_lone_requests_time_split_from_perf_analyzers_parts_and_py_spys_shares():
    """Concurrency 1, one request per 10 ms: the client saw 10 ms on average, 9 of them inside Triton; two stubs (an
    ensemble) busy 40% and 30% of the time, the second one 80% inside the engine: 2 ms of hand-off."""
    profile = {"stubs": {"stub t_tokenizer_0_0": {"busy_share": 0.4, "engine_share": 0.0},
                         "stub t_model_0_0": {"busy_share": 0.3, "engine_share": 0.8}}}
    split = perf.lone_request_split(10.0, 9.0, 10.0, profile)
    assert split == pytest.approx({"outside_triton": 1.0, "handoff": 2.0, "python": 4.6, "engine": 2.4, "mean_ms": 10.0})
    assert sum(split[k] for k in ("outside_triton", "handoff", "python", "engine")) == pytest.approx(split["mean_ms"])
    assert perf.lone_request_split(10.0, 0.0, 10.0, profile) is None  # no server-side figure: no split
    assert perf.lone_request_split(10.0, 9.0, 10.0, {"stubs": {"s": {"busy_share": None}}}) is None


def test_a_lone_request_is_held_to_the_echo_held_as_long_as_the_model_round_by_round():
    """Round by round: the held echo's p50 over its hold (the platform's own around a request that long), and the
    served p50 over the held echo's (our request code, and the engine in the server over the hold)."""
    lv = lambda p50: perf.Level(1, 100.0, p50, p50, p50, p50)  # noqa: E731
    shape = perf.Shape(1, 1, served=[lv(5.0), lv(6.0)], floor=[lv(1.0), lv(1.0)], model_only=[(500.0, 0.003), (400.0, 0.003)],
                       model_only_p50_ms=[3.0, 4.0], held_floor=[lv(3.8), lv(3.9)], hold_ms=3.0)
    row = shape.summary("batch 16")
    assert row["hold_ms"] == 3.0 and row["held_floor_p50_minus_hold_ms"]["rounds"] == pytest.approx([0.8, 0.9])
    assert row["served_p50_minus_held_floor_ms"]["rounds"] == pytest.approx([1.2, 2.1])
    assert "held_floor_p50_ms" not in perf.Shape(1, 1, served=[lv(5.0)], model_only=[(500.0, 0.003)]).summary("batch 16")
