"""`make tune` (issue 38): engine instances x threads chosen by measurement on this CPU, on the served bundle (each
candidate loaded through Triton's config override: the bundle's files never change), recorded beside the bundle;
the next package applies the record when it was measured for the same model files on this CPU and the config left
the settings open, and says in bundle.json which settings it used and why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from serving_fixtures import tiny_export, tool_or_skip  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def auto_bundle(tiny_export, tmp_path_factory) -> Path:
    """The tiny fused bundle with instances and threads left to be chosen (package.instance_count/threads 0)."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(tmp_path_factory.mktemp("auto_repo"), "tiny", ExportArtifacts.from_dir(tiny_export), pc).path


@pytest.fixture(scope="module")
def record(auto_bundle, tiny_finetuned, tmp_path_factory):
    import tempfile

    from serving.tools.perf import PerfError, find_perf_analyzer
    from serving.tools.tune import tune

    tool_or_skip(find_perf_analyzer, PerfError, "ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER")
    rows = [json.loads(line) for line in (tiny_finetuned["data_dir"] / "dev.json").read_text(encoding="utf-8").splitlines()]
    temp = tmp_path_factory.mktemp("tune_temp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(temp))
        got = tune(auto_bundle, "tiny", None, [(1, 2)], rounds=1, seconds=1.0, delays=[0], items=[r["sentence"] for r in rows])
    assert list(temp.iterdir()) == []  # the server's log went with tune's work folder: nothing piles up in the temp dir
    return got


def test_tune_measures_every_candidate_on_the_served_bundle_without_changing_it(auto_bundle, record):
    from serving.triton.integrity import verify_bundle

    tried = [(c["settings"]["instances"], c["settings"]["threads"]) for c in record.candidates]
    assert tried == [(1, 2), (2, 1), (2, 2)]  # the 2 cores here: 1 x all, one per core, one per core x all
    assert all(c["rates"]["1x2"]["median"] > 0 and c["score"] == pytest.approx(c["rates"]["1x2"]["median"]) for c in record.candidates)
    best = max(record.candidates, key=lambda c: c["score"])["settings"]
    assert (record.chosen.instances, record.chosen.threads) == (best["instances"], best["threads"])
    assert set(record.model_files) == {"model.onnx"} and record.engine == "onnxruntime"
    verify_bundle(auto_bundle, allow_bytecode=True)  # every candidate was an override: no file changed


def test_the_package_applies_the_record_only_where_it_was_measured(auto_bundle, record, tiny_export, tmp_path):
    import dataclasses

    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository
    from serving.bundle.serving_tune import ServingTune, ServingSettings, tune_file

    path = tune_file(auto_bundle)
    record.write(path)
    assert path.parent == auto_bundle.parent and ServingTune.read(path) == record
    chosen = ServingSettings(2, 1) if (record.chosen.instances, record.chosen.threads) != (2, 1) else ServingSettings(1, 2)
    forced = dataclasses.replace(record, chosen=chosen)  # a record that differs from the defaults, to see it applied

    def package(pc, tune):
        return write_repository(tmp_path / f"r{len(list(tmp_path.iterdir()))}", "tiny", ExportArtifacts.from_dir(tiny_export),
                                pc, Provenance(serving_tune=tune)).manifest

    auto = PackageConfig(max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    m = package(auto, forced)
    assert (m["package"]["instances"], m["package"]["engine_threads"]) == (chosen.instances, chosen.threads)
    assert m["serving_settings"]["chosen_by"] == "make tune" and len(m["serving_settings"]["candidates"]) == 3
    other = dataclasses.replace(forced, model_files={"model.onnx": "0" * 64})
    m = package(auto, other)
    assert "other model files" in m["serving_settings"]["tune_not_applied"] and m["serving_settings"]["chosen_by"] == "package defaults"
    m = package(dataclasses.replace(auto, threads=1), forced)  # the config chose: it wins
    assert m["package"]["engine_threads"] == 1 and m["serving_settings"]["tune_not_applied"] is True
    assert package(auto, None)["serving_settings"] == {"chosen_by": "package defaults (no make tune record)"}


def test_an_unreadable_record_is_one_line(tmp_path):
    from serving.bundle.serving_tune import ServingTune, TuneRecordError

    bad = tmp_path / ".tiny.tune.json"
    for text, says in [("{", "not a readable tune record"), ('{"format": "x"}', "format is not"),
                       ('{"format": "ernie-bundle-serving-tune/1", "task": "t", "engine": "openvino", "model_files": {"model.xml": "a"}, '
                        '"cpu": {}, "chosen": {"instances": 0, "threads": 2}}', "chosen.instances 0")]:
        bad.write_text(text)
        with pytest.raises(TuneRecordError, match=says):
            ServingTune.read(bad)


def test_a_windowed_kind_serves_two_instances_of_every_core_where_no_record_applies():
    """MRC and UIE models take whole requests (nothing batches them): without a tune record that applies, an OpenVINO
    bundle of theirs gets 2 instances x every core, and bundle.json says why; a batched kind, a config that chose,
    ONNX Runtime (already an instance per core) and GPU keep the package defaults."""
    import dataclasses

    from serving.bundle.config import PackageConfig, _cores
    from serving.bundle.kinds import bundle_kind
    from serving.bundle.serving_tune import ServingSettings, ServingTune, applied

    ov = PackageConfig(runtime="python-openvino")
    assert (ov.instances, ov.engine_threads) == (1, _cores())
    for name in ("uie", "reading_comprehension"):
        pc, why = bundle_kind(name).serving_defaults(ov)
        assert (pc.instances, pc.engine_threads) == (2, _cores()) and "whole requests" in why
        assert applied(ov, None, "openvino", {}, [], (pc, why)) == (pc, {"chosen_by": "package defaults (no make tune record)",
                                                                       "kind_default": why})
        stale = ServingTune("t", "openvino", {"model.xml": "a"}, {"flags": []}, ServingSettings(1, 1))
        built, settings = applied(ov, stale, "openvino", {"model.xml": "b"}, [], (pc, why))
        assert built == pc and settings["kind_default"] == why and "other model files" in settings["tune_not_applied"]
        built, settings = applied(ov, stale, "openvino", {"model.xml": "a"}, [], (pc, why))
        assert (built.instances, built.engine_threads) == (1, 1) and settings["chosen_by"] == "make tune"
    assert bundle_kind("classification").serving_defaults(ov) == (ov, None)  # batched: 1 x all cores
    for pc in (dataclasses.replace(ov, instance_count=1), dataclasses.replace(ov, threads=1),
               PackageConfig(runtime="python-onnxruntime"), dataclasses.replace(ov, device="GPU")):
        assert bundle_kind("uie").serving_defaults(pc) == (pc, None)
