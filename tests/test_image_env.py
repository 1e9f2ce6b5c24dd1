"""Serves where users deploy it (issue 58): a bundle in the serving image's environment, rebuilt here without Docker.

The Dockerfile's Python (``ARG SERVING_PYTHON``, 3.10 for Triton 24.10) in a virtual environment holding only what
the Dockerfile's install lines install (read from the Dockerfile: a package dropped there is dropped here), a real
tritonserver with the wheel's python-backend stub of that Python, started the way the image starts it (its
entrypoint, ``serving/triton/start.py``, checks the bundle and becomes tritonserver): served == offline, for every
engine that ships on CPU.  The offline reference runs in this venv, with the validated engine versions."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (before paddle)
from serving_fixtures import tiny_export, tiny_fused_bundle  # noqa: F401  (fixtures)
from test_serving_openvino import dev, openvino_bundle, openvino_export  # noqa: F401  (fixtures)

from serving.image_env import ImageEnvError, build, find_python, recipe
from serving.tools.client import BundleClient

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "serving" / "triton" / "start.py"


ENGINES = ["onnxruntime", "openvino", "paddlepaddle"]  # every engine a CPU bundle ships in, by its package


@pytest.fixture(scope="module")
def paddle_bundle(tiny_export, tmp_path_factory) -> Path:
    """The tiny export served by Paddle Inference (package.runtime python-paddle), on CPU."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(runtime="python-paddle", threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2)
    return write_repository(tmp_path_factory.mktemp("paddle_repo"), "tiny", ExportArtifacts.from_dir(tiny_export), pc).path


def _bundle(request, engine: str) -> Path:
    return request.getfixturevalue({"onnxruntime": "tiny_fused_bundle", "openvino": "openvino_bundle",
                                    "paddlepaddle": "paddle_bundle"}[engine])


def _imported_distributions(bundle: Path) -> set[str]:
    """The distributions the bundle's python files import (the standard library, the files beside them and Triton's
    own module left out), found by reading every import statement."""
    from importlib import metadata

    from serving.bundle.requirements import _canonical

    owners = metadata.packages_distributions()
    local = {p.stem for p in bundle.rglob("*.py")}
    found = set()
    for path in bundle.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in local or top == "triton_python_backend_utils":
                    continue
                assert top in owners, f"{path}: imports {top}, which no installed distribution provides"
                found |= {_canonical(d) for d in owners[top]}
    return found


@pytest.mark.parametrize("engine", ENGINES)
def test_what_the_bundle_imports_is_what_the_image_installs(engine, request):
    """Every package a bundle's python file imports is pinned in its requirements.txt at the version installed here
    (the validated one), and the Dockerfile's install line installs that file: a package the served python imports
    that the image would not install fails here."""
    from serving.bundle.requirements import FILE, pinned
    from serving.triton.integrity import verify_bundle

    bundle = _bundle(request, engine)
    manifest = verify_bundle(bundle, allow_bytecode=True)
    pins = pinned((bundle / FILE).read_text(encoding="utf-8"))
    imported = _imported_distributions(bundle)
    assert engine in imported and {"numpy", "tokenizers"} <= imported
    assert imported <= set(pins), f"imported but not in {FILE}: {imported - set(pins)}"
    from importlib import metadata

    for dist in imported:
        assert f"{dist}=={metadata.version(dist)}" in [line.split(";")[0].replace("_", "-").lower() for line in pins[dist]]
    needs = manifest["engine_needs"]
    assert (needs["distribution"], needs["validated_version"]) == (engine, metadata.version(engine))
    rec = recipe()
    assert rec.installs == (("--no-cache-dir", "-r", "/tmp/requirements.txt"),)  # the bundle's file, nothing by hand
    assert rec.copies["/tmp/requirements.txt"] == "model_repository/${TASK}/requirements.txt"


def test_the_onnxruntime_pin_falls_back_only_where_the_validated_version_has_no_wheel(tiny_fused_bundle):
    from importlib import metadata

    from serving.bundle.requirements import FILE, pinned

    lines = pinned((tiny_fused_bundle / FILE).read_text(encoding="utf-8"))["onnxruntime"]
    assert lines == [f'onnxruntime=={metadata.version("onnxruntime")}; python_version != "3.10"',
                     'onnxruntime==1.23.2; python_version == "3.10"']


def test_a_package_dropped_from_the_dockerfile_is_dropped_from_the_image_environment(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    dockerfile.write_text(text.replace(" -r /tmp/requirements.txt", " numpy==1.26.4"), encoding="utf-8")
    assert recipe(dockerfile).installs == (("--no-cache-dir", "numpy==1.26.4"),)
    dockerfile.write_text(text.replace("ARG SERVING_PYTHON=3.10\n", ""), encoding="utf-8")
    with pytest.raises(ImageEnvError, match="ARG SERVING_PYTHON"):
        recipe(dockerfile)


@pytest.fixture(scope="module")
def image_python() -> str:
    version = recipe().python
    if find_python(version) is None:
        pytest.skip(f"the Dockerfile's image runs Python {version}, which this machine does not have "
                    "(python{version} on PATH or under pyenv)")
    return version


def _serve_as_the_image_does(bundle: Path, python: Path, log: Path):
    """tritonserver started by the image's entrypoint, run by the image's python: (server, the start's output)."""
    from serving.server import TritonServer, _server_command, _wait_ready, find_tritonserver, free_port

    install = find_tritonserver(python)
    ports = (free_port("127.0.0.1", ()),)
    ports += (free_port("127.0.0.1", ports),)
    ports += (free_port("127.0.0.1", ports),)
    server_id, shm = f"image-env-{uuid.uuid4().hex[:8]}", f"image_env_{os.getpid()}_{uuid.uuid4().hex[:6]}_"
    cmd = _server_command(install, bundle, "127.0.0.1", ports, server_id, shm, ())
    env = {**os.environ, **install.env, "TRITONSERVER": cmd[0]}
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(python), str(START), *cmd[1:]], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = TritonServer(proc, bundle, "127.0.0.1", *ports, log, shm, server_id)
    try:
        _wait_ready(server, 180)
    except BaseException:
        server.stop(5)
        raise
    return server


@pytest.mark.parametrize("engine", ENGINES)
def test_served_in_the_image_environment_equals_offline(engine, request, image_python, dev, tmp_path_factory):
    """The image's Python with only its install lines, a real tritonserver with that Python's stub, the image's
    entrypoint: every dev text's label equal to the offline reference's (this venv, the validated engine), its
    probabilities within float rounding; where the engine version differs from the validated one (ONNX Runtime 1.23.2
    on Python 3.10) the server's log says so in one line."""
    from importlib import metadata

    from serving.tools.offline import BundleModel, offline_logits
    from serving.triton.integrity import clear_bytecode

    work = tmp_path_factory.mktemp(f"image_{engine}")
    bundle = work / "tiny"
    shutil.copytree(_bundle(request, engine), bundle)
    clear_bytecode(bundle)
    python = build(bundle, work / "env")
    probe = [str(python), "-c", f"import sys; from importlib import metadata; print('%d.%d' % sys.version_info[:2], "
                                f"metadata.version('{engine}'))"]
    version, served_engine = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.split()
    assert version == image_python
    reference = BundleModel.open(bundle)
    logits = offline_logits(reference, dev)
    labels = reference.labels()
    log = work / "server.log"
    server = _serve_as_the_image_does(bundle, python, log)
    try:
        with BundleClient(server.grpc_url, "grpc", "tiny") as client:
            preds = client.classify(dev, batch_size=8)
    finally:
        server.stop(5)
    assert [p.label for p in preds] == [labels[i] for i in logits.argmax(-1)]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.array([p.probs for p in preds]), probs, atol=5e-3)
    said = [line for line in log.read_text(errors="replace").splitlines() if "was validated with" in line]
    validated = metadata.version(engine)
    if served_engine == validated:
        assert not said
    else:
        assert said and f"validated with {engine} {validated} and is served with {engine} {served_engine}" in said[0]


def test_the_entrypoint_refuses_planted_bytecode_it_cannot_remove_and_a_changed_file(tiny_fused_bundle, tmp_path,
                                                                                     capsys):
    """The image's entrypoint removes the bytecode caches of listed sources and verifies strictly: a .pyc planted
    where nothing can remove it (a read-only bundle, as the image and the pods mount it) stops the start in one line,
    exit 2, before any server runs; so does a changed file; a clean bundle passes the check."""
    import importlib.util
    import py_compile

    spec = importlib.util.spec_from_file_location("start_under_test", START)
    start = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(start)
    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    assert start.main(["--check", f"--model-repository={bundle}"]) == 0
    folder = bundle / "tiny" / "1"
    cache = folder / "__pycache__"
    cache.mkdir()
    py_compile.compile(str(folder / "model_support.py"), str(cache / "model_support.cpython-310.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert start.main(["--check", f"--model-repository={bundle}"]) == 0 and not cache.exists()  # removed
    cache.mkdir()
    py_compile.compile(str(folder / "model_support.py"), str(cache / "model_support.cpython-310.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    capsys.readouterr()
    start.clear = start.integrity.clear_bytecode
    start.integrity.clear_bytecode = lambda root: (_ for _ in ()).throw(PermissionError(13, "read-only"))
    try:
        assert start.main(["--check", f"--model-repository={bundle}"]) == 2
    finally:
        start.integrity.clear_bytecode = start.clear
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model_support.cpython-310.pyc: not listed in bundle.json" in err[0], err
    shutil.rmtree(cache)
    (folder / "labels.json").write_text("[]")
    assert start.main(["--check", f"--model-repository={bundle}"]) == 2
    assert "labels.json: SHA-256 differs" in capsys.readouterr().err


def test_an_unchecked_pyc_is_never_let_through_even_where_the_stubs_caches_are(tiny_fused_bundle, tmp_path):
    """The models' own check at load lets through the caches Triton's stubs write (timestamp-checked), never a
    hash-based .pyc, which Python runs without looking at its source."""
    import py_compile

    from serving.triton.integrity import BundleIntegrityError, verify_bundle

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    folder = bundle / "tiny" / "1"
    py_compile.compile(str(folder / "model_support.py"), str(folder / "__pycache__" / "model_support.cpython-311.pyc"))
    verify_bundle(bundle, allow_bytecode=True)  # what a stub writes
    py_compile.compile(str(folder / "model_support.py"), str(folder / "__pycache__" / "model_support.cpython-311.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    with pytest.raises(BundleIntegrityError, match="model_support.cpython-311.pyc: not listed"):
        verify_bundle(bundle, allow_bytecode=True)


def test_the_entrypoint_passes_the_servers_arguments_with_the_image_defaults():
    import importlib.util

    spec = importlib.util.spec_from_file_location("start_args", START)
    start = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(start)
    args = start.server_args(["--model-repository=/models", "--http-address=127.0.0.1"], "0.0.0.0")
    assert args == ["--model-repository=/models", "--http-address=127.0.0.1", "--strict-readiness=true",
                    "--exit-on-error=true", "--grpc-address=0.0.0.0", "--metrics-address=0.0.0.0"]
    assert start.repository_of(["--model-store", "/mnt/models"]) == Path("/mnt/models")
