"""Bundle writing without a server: Triton configs for every runtime, atomic writes, integrity checks, the package stage."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from serving_fixtures import export_without, tiny_bundle, tiny_export  # noqa: F401  (fixtures)

from pipeline.errors import ConfigError
from serving.bundle.config import ACCELERATORS, FASTDEPLOY_ENGINES, PackageConfig
from serving.triton.integrity import BundleIntegrityError, verify_bundle
from serving.bundle.kinds import all_configs
from serving.bundle.model_config import BundleShape, parse_pbtxt, to_pbtxt
from serving.bundle.repository import BundleTooLarge, ExportArtifacts, PackageError, choose_model, write_repository
from tritonclient.grpc import model_config_pb2 as mc

PIPELINE_DIR = Path(__file__).resolve().parent.parent / "pipeline"
SERVING_DIR = PIPELINE_DIR.parent / "serving"
SHAPE = BundleShape(task="tnews", num_labels=15, max_seq_len=64, model_file="model.onnx", pad_id=0)


def _variants():  # the ensemble layout; the fused one below
    yield PackageConfig(runtime="python-onnxruntime", layout="ensemble")
    yield PackageConfig(runtime="python-paddle", layout="ensemble", device="GPU", instance_count=2, version_policy="all")
    yield PackageConfig(runtime="onnxruntime", threads=2)
    for acc in ACCELERATORS[1:]:
        yield PackageConfig(runtime="onnxruntime", device="GPU", accelerator=acc)
    for eng in FASTDEPLOY_ENGINES:
        yield PackageConfig(runtime="fastdeploy", fastdeploy_engine=eng, device="GPU" if eng == "tensorrt" else "CPU")
    yield PackageConfig(runtime="python-onnxruntime", layout="ensemble", max_batch_size=0)


@pytest.mark.parametrize("pc", list(_variants()), ids=lambda pc: f"{pc.runtime}-{pc.accelerator}-{pc.fastdeploy_engine}-{pc.device}-mbs{pc.max_batch_size}")
def test_every_config_round_trips_through_text_format(pc):
    configs = all_configs(SHAPE, pc)
    assert set(configs) == {"tnews", "tnews_tokenizer", "tnews_model", "tnews_postprocess"}
    for name, cfg in configs.items():
        text = to_pbtxt(cfg)
        back = parse_pbtxt(text)
        assert back == cfg, name
        assert back.name == name
        assert f"max_batch_size: {pc.max_batch_size}" in text  # written even when 0
        assert back.version_policy.WhichOneof("policy_choice") == pc.version_policy
        if name == "tnews":
            assert back.platform == "ensemble"
            assert [s.model_name for s in back.ensemble_scheduling.step] == ["tnews_tokenizer", "tnews_model", "tnews_postprocess"]
            assert [o.name for o in back.output][:4] == ["label", "label_desc", "confidence", "probs"]
            assert back.input[0].data_type == mc.TYPE_STRING
            continue
        assert back.instance_group[0].count == pc.instances
        if pc.max_batch_size:
            assert list(back.dynamic_batching.preferred_batch_size) == [pc.preferred_batch_size]
            assert back.dynamic_batching.max_queue_delay_microseconds == pc.max_queue_delay_microseconds
        else:
            assert not back.HasField("dynamic_batching")
            assert list(back.input[0].dims)[0] == -1  # the batch dimension is explicit


@pytest.mark.parametrize("runtime", ["python-onnxruntime", "python-paddle"])
def test_fused_config_is_the_ensemble_contract_on_one_python_model(runtime):
    ensemble = all_configs(SHAPE, PackageConfig(runtime=runtime, layout="ensemble"))["tnews"]
    configs = all_configs(SHAPE, PackageConfig(runtime=runtime))  # layout auto: fused for classification
    assert list(configs) == ["tnews"]
    fused = parse_pbtxt(to_pbtxt(configs["tnews"]))
    assert fused == configs["tnews"] and fused.backend == "python" and not fused.platform
    assert list(fused.input) == list(ensemble.input) and list(fused.output) == list(ensemble.output)
    assert list(fused.dynamic_batching.preferred_batch_size) == [16] and fused.instance_group[0].count >= 1
    params = {k: v.string_value for k, v in fused.parameters.items()}
    assert params["engine"] == runtime.split("-")[1] and params["max_seq_len"] == "64" and params["top_k"] == "3"


def test_instances_and_threads_default_to_the_cores(monkeypatch):
    """0 = auto: one CPU instance per core, one engine thread each (no oversubscription); explicit values win."""
    import serving.bundle.config as config

    monkeypatch.setattr(config, "_cores", lambda: 4)
    auto = PackageConfig()
    assert (auto.instances, auto.engine_threads) == (4, 1)
    assert (PackageConfig(instance_count=1).instances, PackageConfig(instance_count=1).engine_threads) == (1, 4)
    assert PackageConfig(instance_count=3, threads=2).engine_threads == 2
    assert PackageConfig(device="GPU").instances == 1
    model = all_configs(SHAPE, PackageConfig(layout="ensemble"))["tnews_model"]
    assert model.instance_group[0].count == 4 and model.parameters["threads"].string_value == "1"
    with pytest.raises(ConfigError, match="package.instance_count must be >= 0"):
        PackageConfig(instance_count=-1)


def test_backend_specific_fields():
    trt = all_configs(SHAPE, PackageConfig(runtime="onnxruntime", device="GPU", accelerator="tensorrt-int8"))["tnews_model"]
    assert trt.platform == "onnxruntime_onnx"
    acc = trt.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "INT8"
    assert trt.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    fd = all_configs(SHAPE, PackageConfig(runtime="fastdeploy", fastdeploy_engine="paddle"))["tnews_model"]
    assert fd.backend == "fastdeploy"
    assert fd.optimization.execution_accelerators.cpu_execution_accelerator[0].name == "paddle"
    py = all_configs(SHAPE, PackageConfig(runtime="python-onnxruntime", layout="ensemble"))["tnews_model"]
    assert py.backend == "python" and py.parameters["engine"].string_value == "onnxruntime"
    assert py.input[0].allow_ragged_batch  # the python runner re-pads merged requests itself
    assert not all_configs(SHAPE, PackageConfig(runtime="onnxruntime"))["tnews_model"].input[0].allow_ragged_batch


@pytest.mark.parametrize("field,value", [("runtime", "tensorflow"), ("device", "TPU"), ("max_batch_size", -1),
                                         ("preferred_batch_size", 100), ("accelerator", "tensorrt-int8"), ("top_k", 0)])
def test_bad_package_config_is_a_config_error(field, value):
    with pytest.raises(ConfigError, match=f"package.{field}"):
        PackageConfig(**{field: value})


def test_task_config_package_section_is_checked(tmp_path):
    from conftest import write_tiny_task_yaml
    from pipeline.config import load_task_config

    y = write_tiny_task_yaml(tmp_path / "t.yaml", tmp_path, package={"runtime": "onnxruntime", "max_batch_size": 32})
    assert load_task_config(str(y)).package.runtime == "onnxruntime"
    with pytest.raises(ConfigError, match="package.runtime"):
        load_task_config(str(y), {"package.runtime": "bogus"})


def test_bundle_layout_and_manifest(tiny_bundle):
    m = verify_bundle(tiny_bundle)
    for rel in ("tiny/config.pbtxt", "tiny_tokenizer/1/model.py", "tiny_tokenizer/1/vocab.txt", "tiny_model/1/model.onnx",
                "tiny_model/1/model.py", "tiny_postprocess/1/labels.json", "README.md", "meta.json"):
        assert rel in m["files"], rel
        assert (tiny_bundle / rel).is_file()
    assert (tiny_bundle / "tiny" / "1").is_dir()  # the ensemble's empty version folder
    for rel, original in (("tiny_tokenizer/1/wordpiece.py", PIPELINE_DIR / "wordpiece.py"),
                          ("tiny_tokenizer/1/text_input.py", SERVING_DIR / "triton" / "text_input.py")):
        assert rel in m["files"] and (tiny_bundle / rel).read_bytes() == original.read_bytes()  # served == offline code
    for cfg in tiny_bundle.glob("*/config.pbtxt"):
        parse_pbtxt(cfg.read_text())
    assert m["precision"] == "int8" and m["model_form"] == "onnx_int8"
    assert m["metrics"]["accuracy"] == 1.0 and m["versions"]["serving"]["onnxruntime"]
    card = (tiny_bundle / "README.md").read_text()
    assert "## Measured numbers" in card and "| accuracy | 1.0000 |" in card


def _copy(bundle: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "repo" / "tiny"
    shutil.copytree(bundle, dst)
    return dst


def test_tampered_file_is_refused(tiny_bundle, tmp_path):
    b = _copy(tiny_bundle, tmp_path)
    with open(b / "tiny_model/1/model.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(BundleIntegrityError, match="model.onnx: SHA-256 differs"):
        verify_bundle(b)


def test_tampered_manifest_is_refused(tiny_bundle, tmp_path):
    b = _copy(tiny_bundle, tmp_path)
    m = json.loads((b / "bundle.json").read_text())
    m["metrics"]["accuracy"] = 0.99
    (b / "bundle.json").write_text(json.dumps(m))
    with pytest.raises(BundleIntegrityError, match="manifest_sha256"):
        verify_bundle(b)


def test_unlisted_and_missing_files_are_refused(tiny_bundle, tmp_path):
    b = _copy(tiny_bundle, tmp_path)
    (b / "tiny_model" / "2").mkdir()
    (b / "tiny_model" / "2" / "model.onnx").write_bytes(b"x")
    with pytest.raises(BundleIntegrityError, match="not listed"):
        verify_bundle(b)
    shutil.rmtree(b / "tiny_model" / "2")
    (b / "tiny_postprocess/1/labels.json").unlink()
    with pytest.raises(BundleIntegrityError, match="missing"):
        verify_bundle(b)


def test_every_file_and_directory_is_covered(tiny_bundle, tmp_path):
    """A hidden model directory (Triton loads it), a forged .pyc (Python may run it instead of the source) and
    an empty stray directory are all refused; the served models' own check lets through only bytecode caches
    of listed sources, which a Triton without PYTHONDONTWRITEBYTECODE writes as it loads them."""
    b = _copy(tiny_bundle, tmp_path)
    (b / ".evil" / "1").mkdir(parents=True)
    (b / ".evil" / "config.pbtxt").write_text('name: ".evil"\nbackend: "python"\n')
    with pytest.raises(BundleIntegrityError, match=r"\.evil/config.pbtxt: not listed"):
        verify_bundle(b)
    with pytest.raises(BundleIntegrityError, match=r"\.evil/config.pbtxt: not listed"):
        verify_bundle(b, allow_bytecode=True)
    shutil.rmtree(b / ".evil")
    cache = b / "tiny_tokenizer" / "1" / "__pycache__"
    cache.mkdir()
    import py_compile

    # what a stub writes as it loads a listed model.py: timestamp-checked bytecode
    py_compile.compile(str(cache.parent / "model.py"), str(cache / "model.cpython-311.pyc"))
    with pytest.raises(BundleIntegrityError, match=r"model.cpython-311.pyc: not listed .*Python bytecode"):
        verify_bundle(b)
    verify_bundle(b, allow_bytecode=True)  # the bytecode of a listed model.py
    (cache / "evil.cpython-311.pyc").write_bytes(b"forged")  # no evil.py is listed
    with pytest.raises(BundleIntegrityError, match="evil.cpython-311.pyc: not listed"):
        verify_bundle(b, allow_bytecode=True)
    from serving.triton.integrity import clear_bytecode

    assert clear_bytecode(b) == 0  # a cache with an unlisted module stays, for the strict check to refuse
    (cache / "evil.cpython-311.pyc").unlink()
    assert clear_bytecode(b) == 1 and not cache.exists()  # only caches of listed sources: removed before serving
    verify_bundle(b)
    (b / "tiny_model" / "3").mkdir()
    with pytest.raises(BundleIntegrityError, match=r"tiny_model/3: directory not in bundle.json"):
        verify_bundle(b)


def test_a_served_bundle_is_still_the_packaged_one(tiny_bundle, tiny_finetuned, tmp_path):
    """The package stage's "outputs still in place" check: the bytecode Triton's stubs cache while serving does
    not make the stage STALE (it did: the whole tree was hashed); any other change does."""
    from pipeline.config import load_task_config
    from pipeline.hashing import file_sha256
    from pipeline.stages.package import external_intact

    b = _copy(tiny_bundle, tmp_path)
    cfg = load_task_config(str(tiny_finetuned["task_yaml"]), {"package.repository": str(b.parent)})
    recorded = {"bundle": file_sha256(b / "bundle.json")}
    assert external_intact(cfg, recorded)
    cache = b / "tiny_model" / "1" / "__pycache__"
    cache.mkdir()
    import py_compile

    py_compile.compile(str(cache.parent / "model.py"), str(cache / "model.cpython-311.pyc"))  # as a stub caches it
    assert external_intact(cfg, recorded)
    (cache / "model.cpython-311.pyc").write_bytes(b"not what a stub writes")  # no timestamp header: refused
    assert not external_intact(cfg, recorded)
    (cache / "model.cpython-311.pyc").unlink()
    (b / "tiny_model" / "1" / "notes.txt").write_text("edited by hand")
    assert not external_intact(cfg, recorded)


def test_sibling_modules_run_their_source_never_a_pyc(tmp_path):
    """The served models import their copied helpers from source: a forged .pyc beside one (valid header, same
    mtime and size as the source) is what Python's own import runs, and what ``model_support.sibling`` never reads."""
    import importlib.util
    import os
    import py_compile
    import sys

    from serving.triton import model_support

    helper, other = tmp_path / "helper.py", tmp_path / "other.py"
    helper.write_text("ANSWER = 'original'\n")
    other.write_text("ANSWER = 'bytecode'\n")  # same length
    for f in (helper, other):
        os.utime(f, (1_000_000_000, 1_000_000_000))
    py_compile.compile(str(other), cfile=importlib.util.cache_from_source(str(helper)))
    spec = importlib.util.spec_from_file_location("plain_helper", helper)
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    assert plain.ANSWER == "bytecode"  # the attack, with Python's own loader
    assert model_support.sibling(tmp_path, "helper").ANSWER == "original"
    assert sys.dont_write_bytecode  # importing model_support turns bytecode writing off in the stub


def test_failed_package_leaves_previous_bundle_untouched(tiny_export, tmp_path):
    exp = ExportArtifacts.from_dir(export_without(tiny_export, tmp_path / "export", "onnx_int8_qdq"))
    repo = tmp_path / "repo"
    first = write_repository(repo, "tiny", exp, PackageConfig())
    before = json.loads((first.path / "bundle.json").read_text())
    # int8 asked for explicitly, but this export has no QDQ model for TensorRT: must fail before the swap.
    with pytest.raises(PackageError, match="no int8_qdq"):
        write_repository(repo, "tiny", exp, PackageConfig(runtime="onnxruntime", device="GPU", accelerator="tensorrt-int8", precision="int8"))
    with pytest.raises(BundleTooLarge):
        write_repository(repo, "tiny", exp, PackageConfig(runtime="python-onnxruntime", top_k=1), max_mb=0.01)
    assert json.loads((first.path / "bundle.json").read_text()) == before
    verify_bundle(first.path)
    assert sorted(p.name for p in repo.iterdir()) == ["tiny"]  # no temp dirs left behind
    # A good re-package replaces it.
    second = write_repository(repo, "tiny", exp, PackageConfig(top_k=1))
    assert json.loads((second.path / "bundle.json").read_text())["package"]["top_k"] == 1


def test_model_choice_per_runtime(tiny_export, tmp_path):
    assert choose_model(ExportArtifacts.from_dir(tiny_export), PackageConfig(), preferred="int8_qdq").form == "onnx_int8_qdq"
    exp = ExportArtifacts.from_dir(export_without(tiny_export, tmp_path / "export", "onnx_int8_qdq"))
    assert choose_model(exp, PackageConfig()).form == "onnx_int8"
    assert choose_model(exp, PackageConfig(), preferred="fp32").form == "onnx_fp32"
    assert choose_model(exp, PackageConfig(), preferred="int8_qdq").form == "onnx_int8"  # no QDQ exported: INT8
    assert choose_model(exp, PackageConfig(runtime="onnxruntime", device="GPU")).form == "onnx_fp32"
    assert choose_model(exp, PackageConfig(runtime="python-paddle")).form == "paddle_fp32"
    assert choose_model(exp, PackageConfig(runtime="fastdeploy", fastdeploy_engine="paddle")).model_file == "model.pdmodel"
    # auto falls back to fp32 when the int8 form the runtime needs was not exported
    assert choose_model(exp, PackageConfig(runtime="onnxruntime", device="GPU", accelerator="tensorrt-int8")).form == "onnx_fp32"


@pytest.mark.parametrize("runtime", ["onnxruntime", "fastdeploy", "python-paddle"])
def test_other_runtime_bundles_are_complete(tiny_export, tmp_path, runtime):
    info = write_repository(tmp_path / "repo", "tiny", ExportArtifacts.from_dir(tiny_export), PackageConfig(runtime=runtime, layout="ensemble"))
    files = verify_bundle(info.path)["files"]
    model_files = sorted(f.split("/", 2)[2] for f in files if f.startswith("tiny_model/1/"))
    expected = {"onnxruntime": ["model.onnx"], "fastdeploy": ["model.onnx"],
                "python-paddle": ["bundle_integrity.py", "engine.py", "model.pdiparams", "model.pdmodel", "model.py",
                                  "model_support.py", "served_metrics.py"]}[runtime]
    assert model_files == expected
    if runtime == "python-paddle":  # the engine runner.py runs: Paddle's served module, from its folder
        from pipeline.backends.registry import served_engine

        engine = info.path / "tiny_model" / "1" / "engine.py"
        assert engine.read_bytes() == served_engine("paddle").source.read_bytes()
    cfg = parse_pbtxt((info.path / "tiny_model" / "config.pbtxt").read_text())
    assert cfg.backend == {"onnxruntime": "onnxruntime", "fastdeploy": "fastdeploy", "python-paddle": "python"}[runtime]


def test_package_stage_runs_on_export_and_validate_records(tiny_export, tiny_finetuned, tmp_path):
    """The stage's run() with real upstream records (export/validate written as those stages will write them)."""
    from pipeline.config import load_task_config
    from pipeline.graph import get_stage
    from pipeline.records import StageRecord, StageStatus
    from pipeline.records import StageContext
    from pipeline.stages import package

    runs = tmp_path / "runs" / "tiny"
    roles = {"onnx_fp32": "onnx/fp32.onnx", "onnx_int8": "onnx/int8.onnx", "paddle_fp32": "paddle_fp32",
             "tokenizer_dir": "tokenizer", "labels": "labels.json", "meta": "meta.json"}
    shutil.copytree(tiny_export, runs / "export" / "out")
    export_rec = StageRecord("export", StageStatus.OK, "k", {}, {}, artifacts=roles)
    (runs / "validate" / "out").mkdir(parents=True)
    (runs / "validate" / "out" / "metrics.json").write_text(json.dumps({"chosen_backend": "onnxruntime-cpu-fp32", "summary": {"accuracy": 0.97},
        "backends": [{"backend": "onnxruntime-cpu-fp32", "accuracy": 0.97}, {"backend": "onnxruntime-cpu-int8", "accuracy": 0.96}]}))
    (runs / "validate" / "out" / "gates.json").write_text(json.dumps({"max_accuracy_drop": {"passed": True}}))
    validate_rec = StageRecord("validate", StageStatus.OK, "k", {}, {}, artifacts={"metrics": "metrics.json", "gates": "gates.json"})
    cfg = load_task_config(str(tiny_finetuned["task_yaml"]), {"package.repository": str(tmp_path / "model_repository")})
    assert not package.external_intact(cfg, {})  # nothing packaged yet
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(cfg, get_stage("package"), out, tmp_path / "work", {"export": export_rec, "validate": validate_rec}, runs, print)
    result = package.run(ctx)
    bundle = Path(result.artifacts["bundle_dir"])
    assert bundle == tmp_path / "model_repository" / "tiny"
    m = verify_bundle(bundle)
    assert m["precision"] == "fp32"  # validate chose fp32
    # the packaged file's own number
    assert m["validated"] == {"backend": "onnxruntime-cpu-fp32", "metric": "accuracy", "value": 0.97, "accuracy": 0.97}
    assert m["metrics"]["summary"]["accuracy"] == 0.97 and m["gates"]["max_accuracy_drop"]["passed"]
    assert (out / "bundle.json").is_file() and result.metrics["files"] == len(m["files"])
    assert package.external_intact(cfg, {"bundle": result.external_outputs["bundle"]})
    (bundle / "README.md").write_text("changed")  # a tampered or replaced bundle: the stage must run again
    assert not package.external_intact(cfg, {"bundle": result.external_outputs["bundle"]})
    pc = cfg.package.resolved("onnxruntime")  # runtime auto: the engine of the form validate chose
    assert m["runtime"] == "python-onnxruntime"
    assert {**dataclasses.asdict(pc), "instances": pc.instances, "engine_threads": pc.engine_threads} == m["package"]


def test_a_bundle_written_by_other_code_is_packaged_again(tiny_finetuned, tiny_export, tmp_path, monkeypatch, capsys):
    """The package stage keys on the code that writes a bundle (serving/ and pipeline/): after an upgrade or a fix to a
    served model, the bundle in place is packaged again, and status says why; bytecode does not count."""
    from conftest import tiny_cli_args
    from serving_fixtures import QUICK_EXPORT
    from pipeline.cli import main
    from serving.bundle import repository

    runs, repo = tmp_path / "runs", tmp_path / "repo"
    shutil.copytree(Path(tiny_export).parents[2], runs)
    task_yaml = tiny_finetuned["task_yaml"]
    sets = {**QUICK_EXPORT, "package.runtime": "python-openvino", "gates.min_throughput_ratio": 0, "gates.min_anchor_ratio": 0,
            "validate.batch_sizes": "[1]", "validate.seq_lens": "[16]", "validate.repeats": 1, "validate.warmup": 0,
            "validate.dev_benchmark_limit": 32, "package.threads": 1, "package.repository": str(repo)}
    args = [*tiny_cli_args(task_yaml, runs), *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]
    assert main(["run", *args, "--from", "validate"]) == 0
    assert main(["run", *args, "--from", "validate"]) == 0
    assert "[package] cached" in capsys.readouterr().out

    code = tmp_path / "serving"
    shutil.copytree(repository.SERVING_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(repository, "SERVING_DIR", code)
    (code / "triton" / "__pycache__").mkdir()
    (code / "triton" / "__pycache__" / "model_support.cpython-311.pyc").write_bytes(b"bytecode")
    assert main(["run", *args, "--from", "validate"]) == 0
    assert "[package] cached" in capsys.readouterr().out  # the same sources: bytecode beside them changes nothing

    with open(code / "triton" / "model_support.py", "a", encoding="utf-8") as f:
        f.write("\n# a fix\n")
    assert main(["status", *args]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:] if line.split()}
    assert "OK" in rows["validate"] and "STALE" in rows["package"]
    assert "inputs changed: ernie-bundle's serving and pipeline code" in rows["package"]
    assert main(["run", *args, "--from", "validate"]) == 0
    out = capsys.readouterr().out
    assert "[validate] cached" in out and "[package] running" in out
