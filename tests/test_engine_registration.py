"""issue 61: an engine defined in this module and registered once (added to ``registry.CPU_ENGINES``) goes the whole
way, with no name of it anywhere in pipeline/ or serving/: compress builds its own INT8 form, measures and selects it;
export ships that form and probes it; validate verifies it as the shipped form; package serves it on Triton's python
backend (``package.runtime`` auto: the selected engine); the served labels are its offline labels.

The engine is ONNX Runtime's fixed-scale INT8 (its recipe search) answering *negated* logits (its served module is
``tests/registered_engine.py``), so a label that matches can only have come from its code.  ONNX Runtime's FP32
sessions are made slow here, so that the registered engine's candidate is the fastest on every CPU: what is tested is
the selection and everything after it, not this CPU's speed."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from serving_fixtures import tiny_dev  # noqa: F401  (fixture)

from conftest import tiny_cli_args

NAME = "negated"


class _Negated:
    """The engine's session as compress and validate open it: ONNX Runtime over its form, logits negated."""

    def __init__(self, path, precision: str, threads: int | None = None):
        from pipeline.backends.onnxruntime.session import session

        self.inner, self.name = session(path, precision=precision, threads=threads), f"{NAME}-cpu-int8"

    def run(self, input_ids, token_type_ids):
        return -np.asarray(self.inner.run(input_ids, token_type_ids))


def _engine():
    """The engine, in one object: its form, search, sessions, validate runtime and served module."""
    from pipeline.backends.engine import CpuEngine, Runtime, ServedEngine
    from pipeline.backends.registry import cpu_engine
    from pipeline.contract import Form, Precision

    form = Form(f"{NAME}_int8", f"{NAME}/int8.onnx", Precision.INT8)

    def search(source, out_path, rows, cfg, cache_dir, baseline, log):
        log(f"[{NAME}] INT8 of {Path(source).name}: ONNX Runtime's recipe search")
        # fixed scales: a request's answer does not depend on its batch mates, so served equals offline
        return cpu_engine("onnxruntime").search(source, out_path, rows, cfg, cache_dir, baseline, log)

    return form, CpuEngine(
        name=NAME, int8_suffix="neg-int8", quantization=NAME, candidate_file="model.onnx",
        where="a test's engine: ONNX Runtime answering negated logits", search=search,
        open=lambda path, precision, settings: _Negated(path, precision), form=form.name,
        form_params=lambda cfg: {"what": "negated logits"},
        served=ServedEngine(name=NAME, served="registered_engine", model_file="model.onnx", distribution="onnxruntime",
                            import_name="onnxruntime", form=form.name),
        runtimes=(Runtime(f"{NAME}-cpu-int8", NAME, "cpu", "int8", form.name,
                          lambda path, opts: _Negated(path, "int8", opts.threads), ratio_base="onnxruntime-cpu-fp32"),))


def _slow_fp32(engine, delay_s: float = 0.05):
    """ONNX Runtime as compress opens it, its FP32 sessions ``delay_s`` slower per batch."""
    def open_(path, precision, settings):
        session = engine.open(path, precision, settings)
        if precision != "fp32":
            return session
        run = session.run
        session.run = lambda ids, types: (time.sleep(delay_s), run(ids, types))[1]
        return session
    return dataclasses.replace(engine, open=open_)


def test_an_engine_registered_once_is_built_selected_validated_packaged_and_served(tiny_finetuned, tiny_dev, tmp_path,
                                                                                   monkeypatch):
    from pipeline import contract
    from pipeline.backends import registry
    from pipeline.cli import main
    from serving.server import start_server
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel, offline_logits

    form, engine = _engine()
    monkeypatch.setitem(contract.FORMS, form.name, form)
    ort, *others = registry.CPU_ENGINES
    monkeypatch.setattr(registry, "CPU_ENGINES", (_slow_fp32(ort), *others, engine))  # the registration

    runs, repo = tmp_path / "runs", tmp_path / "repo"
    shutil.copytree(tiny_finetuned["runs_dir"], runs)
    sets = {"compress.strategy": "ptq", "compress.engines": f"[{NAME}]", "compress.throughput_batches": 1,
            "compress.timing_rounds": 2, "gates.max_accuracy_drop": 100, "gates.min_throughput_ratio": 0,
            "gates.min_anchor_ratio": 0, "gates.max_int8_size_ratio": "null", "validate.batch_sizes": "[1]",
            "validate.seq_lens": "[16]", "validate.repeats": 1, "validate.warmup": 0, "validate.dev_benchmark_limit": 32,
            "package.threads": 1, "package.max_batch_size": 8, "package.preferred_batch_size": 4,
            "package.repository": str(repo), "quantization.int8_smooth_alphas": "[0.5]"}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--from", "compress", *args]) == 0

    task = runs / "tiny"
    selected = json.loads((task / "compress" / "out" / "selected.json").read_text())
    assert (selected["name"], selected["runtime"], selected["quantization"]) == ("neg-int8", NAME, NAME)
    export = task / "export" / "out"
    assert (export / form.path).is_file() and not (export / "onnx" / "int8.onnx").exists()  # its form, no other INT8
    meta = json.loads((export / "meta.json").read_text())
    assert meta[NAME]["file"] == form.path and meta[NAME]["what"] == "negated logits"
    validation = json.loads((task / "validate" / "out" / "metrics.json").read_text())
    assert validation["chosen_backend"] == f"{NAME}-cpu-int8"
    manifest = json.loads((repo / "tiny" / "bundle.json").read_text())
    assert (manifest["runtime"], manifest["engine"], manifest["model_form"]) == (f"python-{NAME}", NAME, form.name)

    bundle = BundleModel.open(repo / "tiny")
    texts, _ = tiny_dev
    labels = bundle.labels()
    expected = [labels[i] for i in offline_logits(bundle, texts).argmax(-1)]
    with start_server(repo / "tiny", timeout=120, log_path=tmp_path / "server.log") as srv:
        with BundleClient(srv.grpc_url, "grpc", "tiny") as client:
            assert [p.label for p in client.classify(texts, batch_size=8)] == expected
    # negated: the labels it serves are not what the same file's plain logits would give
    plain = [labels[i] for i in (-offline_logits(bundle, texts)).argmax(-1)]
    assert expected != plain
