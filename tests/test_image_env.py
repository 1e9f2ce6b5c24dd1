"""Serves where users deploy it (issue 58): a bundle in the serving image's environment, rebuilt here without Docker.

The Dockerfile's Python (``ARG SERVING_PYTHON``, 3.12 for Triton 24.12) in a virtual environment holding only what
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


def test_every_pin_is_the_validated_version_with_no_fallback(request):
    """No marker, no other version: where a serving Python has no wheel of a validated version pip refuses, instead
    of a server that answers differently (ONNX Runtime 1.23.2 changed 12 of 10,000 TNEWS predictions)."""
    from importlib import metadata

    from serving.bundle.requirements import FILE, pinned

    for engine in ENGINES:
        pins = pinned((_bundle(request, engine) / FILE).read_text(encoding="utf-8"))
        extra = {"setuptools": ["setuptools==80.9.0"]} if engine == "paddlepaddle" else {}  # paddle imports it, undeclared
        assert pins == {**{d: [f"{d}=={metadata.version(d)}"] for d in ("numpy", "tokenizers", engine)}, **extra}


def test_a_package_dropped_from_the_dockerfile_is_dropped_from_the_image_environment(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    dockerfile.write_text(text.replace(" -r /tmp/requirements.txt", " numpy==1.26.4"), encoding="utf-8")
    assert recipe(dockerfile).installs == (("--no-cache-dir", "numpy==1.26.4"),)
    dockerfile.write_text(text.replace("ARG SERVING_PYTHON=3.12\n", ""), encoding="utf-8")
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
    from serving.server import TritonServer, _server_command, _wait_ready, free_port
    from serving.triton_install import find_tritonserver, server_environment

    install = find_tritonserver(python)
    ports = (free_port("127.0.0.1", ()),)
    ports += (free_port("127.0.0.1", ports),)
    ports += (free_port("127.0.0.1", ports),)
    server_id, shm = f"image-env-{uuid.uuid4().hex[:8]}", f"image_env_{os.getpid()}_{uuid.uuid4().hex[:6]}_"
    cmd = _server_command(install, bundle, "127.0.0.1", ports, server_id, shm, ())
    env = {**server_environment(install), "TRITONSERVER": cmd[0]}
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
    probabilities within float rounding; the engines are the validated versions, so the server's log has no version
    warning."""
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
    assert served_engine == metadata.version(engine) and not said


def test_a_server_with_another_engine_version_says_so_at_start_and_at_load(tiny_fused_bundle, tmp_path, capsys):
    """A bundle validated with another ONNX Runtime than the one serving it: the launcher warns in one line naming
    both, before the server starts, and so does the model that runs the engine when it loads (the server log: what a
    container started without the launcher shows); it serves, as the version is said."""
    from serving.server import start_server
    from serving.triton import integrity

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    integrity.clear_bytecode(bundle)
    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    manifest["engine_needs"]["validated_version"] = "1.0.0"
    manifest["manifest_sha256"] = integrity.manifest_sha256(manifest)
    (bundle / "bundle.json").write_text(json.dumps(manifest), encoding="utf-8")
    from importlib import metadata

    says = f"validated with onnxruntime 1.0.0 and is served with onnxruntime {metadata.version('onnxruntime')}"
    log = tmp_path / "server.log"
    with start_server(bundle, timeout=120, log_path=log) as srv:
        with BundleClient(srv.grpc_url, "grpc", "tiny") as client:
            assert client.classify(["一条新闻"], batch_size=1)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "validated with" in x]
    assert line.startswith("warning: ") and says in line
    assert [x for x in log.read_text(errors="replace").splitlines() if says in x]
