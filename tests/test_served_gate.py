"""The served release gate (issue 38): ``make gate ... BASELINE_PERF=previous/perf.json`` fails when the served
efficiency (served / ceiling, measured in one run by make perf) fell by more than ``gates.release_max_served_drop``
on any request shape both reports measured; bad perf reports are one line, exit 2.  make perf's record (PerfRecord,
perf.json) written and read back as the same record, earlier versions' included; the arithmetic it rests on: the
ceiling, the per-round spread, a shape's figures from its rounds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pipeline.validation.release import Level, ModelShare, PerfRecord, ShapeFigures, Spread, read_perf
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
    s = Spread.of([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max, s.rounds) == (2.0, 1.0, 3.0, [3.0, 1.0, 2.0])
    assert Spread.of([1.0, 3.0]).median == 2.0 and Spread.of([]) == Spread()


def _lv(rate: float, p50: float, cores: dict | None = None) -> Level:
    return Level(1, rate, p50, p50, p50, p50, models=[ModelShare("t_model", 10, 5, 2.0, 0.1, 0.4)], window_s=1.0,
                 cores=cores or {})


def _record(rounds: int = 2) -> PerfRecord:
    """A record as make perf makes it: two shapes measured in ``rounds`` rounds on its own server."""
    lone = perf.Shape(1, 1, served=[_lv(100.0 + r, 5.0 + r, {"tritonserver": 0.1, "stub t_0_0": 0.9, "client": 0.1})
                                    for r in range(rounds)],
                      floor=[_lv(1000.0, 1.0, {"tritonserver": 0.2, "stub t_floor_0_0": 0.3}) for _ in range(rounds)],
                      model_only=[(500.0 - r, 0.003) for r in range(rounds)], model_only_p50_ms=[3.0 + r for r in range(rounds)])
    batched = perf.Shape(8, 4, served=[_lv(400.0, 20.0) for _ in range(rounds)], floor=[_lv(4000.0, 2.0)] * rounds,
                         model_only=[(600.0, 0.002)] * rounds)
    return PerfRecord(model="tiny", task="tiny", summary=[lone.figures("batch 16"), batched.figures("batch 8")],
                      task_type="classification", repository="/r/tiny", seconds=1.0, rounds=rounds, perf_analyzer="2.51.0",
                      cpu={"model": "cpu", "flags": ["avx2"], "cores": 2, "vnni": False}, package={"instances": 1},
                      request_note="", levels=[lone.served[-1], batched.served[-1]])


def test_the_perf_record_written_is_the_record_read_back(tmp_path):
    """perf.json is PerfRecord: written as JSON (make perf) and read back by the gate as the same record."""
    record = _record()
    record.write(tmp_path / "perf.json")
    back = read_perf(tmp_path / "perf.json")
    assert back == record and isinstance(back.summary[0], ShapeFigures) and isinstance(back.levels[0].models[0], ModelShare)
    lone = back.summary[0]
    assert lone.served_over_ceiling.rounds == pytest.approx([100 / perf.ceiling(500, 1000), 101 / perf.ceiling(499, 1000)])
    assert lone.served_p50_minus_batch1_ms.rounds == [2.0, 2.0] and back.summary[1].model_only_batch1_p50_ms is None
    assert list(lone.served_cores) == ["tritonserver", "stub t_0_0", "client"]  # the server first, the client last
    assert lone.served_cpu_us_per_item.median == pytest.approx((1e6 / 100 + 1e6 / 101) / 2) and back.summary[1].served_cpu_us_per_item is None
    assert back.served_ratios() == ("served / ceiling", {(1, 1): lone.served_over_ceiling.median,
                                                         (8, 4): back.summary[1].served_over_ceiling.median})


def test_a_perf_record_of_an_earlier_version_still_loads(tmp_path):
    """Fields a record no longer has (the held echo's, the lone request's split, py-spy's profile) are left out; the
    ones it added default."""
    record = _record()
    raw = json.loads(json.dumps(dataclasses.asdict(record)))
    del raw["task"], raw["request_note"]
    raw["summary"][0].update(hold_ms=3.0, held_floor_p50_ms={"median": 3.8, "min": 3.8, "max": 3.9, "rounds": [3.8, 3.9]},
                             lone_request_ms={"engine": 2.0})
    raw.update(profile={"stubs": {}}, offline_model_only_items_per_s=500.0, schema_size=2)
    (tmp_path / "old.json").write_text(json.dumps(raw))
    assert read_perf(tmp_path / "old.json") == dataclasses.replace(record, task=None)


@pytest.mark.parametrize("change, says", [
    (lambda r: r["levels"][0].update(p50_ms="fast"), "levels[0].p50_ms must be a finite number, got 'fast'"),
    (lambda r: r["levels"][0]["models"][0].pop("requests"), "levels[0].models[0]: field 'requests' missing"),
    (lambda r: r["summary"][0]["served_cores"].update(client=None), "summary[0].served_cores['client'] must be a finite"),
    (lambda r: r.update(rounds=2.5), "rounds must be a whole number, got 2.5"),
    (lambda r: r.update(levels={}), "levels must be a list, got {}"),
])
def test_a_perf_record_with_a_field_of_the_wrong_type_is_one_line(tiny_task, tmp_path, capsys, change, says):
    raw = json.loads(json.dumps(dataclasses.asdict(_record())))
    change(raw)
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    rc, _, err = _gate(tiny_task, tmp_path, tmp_path / "bad.json", _perf(tmp_path / "base.json", {(1, 1): 0.9}), capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err, err


def test_the_gate_reads_the_record_make_perf_writes(tiny_task, tmp_path, capsys):
    """make perf's record against itself passes; a release whose lone request serves half as fast fails, shape by shape."""
    record = _record()
    record.write(tmp_path / "base.json")
    rc, out, _ = _gate(tiny_task, tmp_path, tmp_path / "base.json", tmp_path / "base.json", capsys)
    assert rc == 0 and out.count("PASS  release_served_drop") == 2
    lone = record.summary[0]
    half = Spread.of([v / 2 for v in lone.served_over_ceiling.rounds])
    slower = dataclasses.replace(record, summary=[dataclasses.replace(lone, served_over_ceiling=half),
                                                                record.summary[1]])
    slower.write(tmp_path / "cur.json")
    rc, out, _ = _gate(tiny_task, tmp_path, tmp_path / "cur.json", tmp_path / "base.json", capsys)
    assert rc == 3 and "FAIL  release_served_drop[1 item(s) x c1]: measured 0.5" in out
    assert "PASS  release_served_drop[8 item(s) x c4]" in out


def test_the_markdown_reads_the_record():
    md = perf.format_markdown(_record())
    assert "| 1 | 1 | 100 [100-101] | 1000 | 500 [499-500] |" in md and "| 8 | 4 | 400 |" in md
    assert "A lone request (concurrency 1): served p50 5.50 [5.00-6.00] ms against the model's own batch-1 p50" in md
    assert "| tritonserver | stub t_0_0 | client |" in md and "| 1 | 1 | t_model | 10 | 5 | 2.0 | 0.10 | 0.40 |" in md
