"""Which tritonserver serves a bundle, and the Python its python models run in.

Where the binary comes from, in order: ``$TRITONSERVER`` (a path), ``tritonserver`` on PATH (the
Triton image), then the one shipped in the ``nvidia-pytriton`` wheel.  The wheel's copy needs
preparing once: its ``bin/``, ``backends/`` and ``caches/`` are copied to a cache directory and the
python backend stub built for the serving interpreter's version is put at
``backends/python/triton_python_backend_stub`` (the wheel ships one stub per Python version); it
runs with the wheel's bundled libraries on ``LD_LIBRARY_PATH`` and that interpreter's ``bin/``
first on PATH, so the python models import its environment's numpy/onnxruntime/tokenizers.
``check_engine`` asks that interpreter, before anything starts, whether it has the bundle's engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# The image's entrypoint (the Dockerfile's, the Kubernetes and KServe commands): its engine check is this launcher's.
START = Path(__file__).resolve().parent / "triton" / "start.py"
# What the pipeline sets for its own process (pipeline.env) and the server must not inherit: with "stdlib", Python
# 3.12's python models cannot import setuptools (no distutils there), which Paddle Inference imports when it loads.
PIPELINE_ONLY_ENV = ("SETUPTOOLS_USE_DISTUTILS",)


def server_environment(install: "TritonInstall") -> dict[str, str]:
    """The server's environment: this one less PIPELINE_ONLY_ENV, with the install's, writing no bytecode."""
    env = {k: v for k, v in os.environ.items() if k not in PIPELINE_ONLY_ENV}
    return {**env, **install.env, "PYTHONDONTWRITEBYTECODE": "1"}


class ServerError(RuntimeError):
    """The server could not be found, started or made ready."""


@dataclass(frozen=True)
class TritonInstall:
    binary: Path
    backend_dir: Path | None  # None: the binary's own default (/opt/tritonserver/backends in the image)
    cache_dir: Path | None
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the server process


def _pytriton_dist() -> Path | None:
    try:
        import pytriton
    except ImportError:
        return None
    dist = Path(pytriton.__file__).resolve().parent / "tritonserver"
    return dist if (dist / "bin" / "tritonserver").is_file() else None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ernie-bundle"


def _pytriton_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvidia-pytriton")
    except metadata.PackageNotFoundError:
        return "unknown"


def prepare_pytriton_server(dist: Path, cache_root: Path | None = None, wheel_version: str | None = None,
                            version: str | None = None) -> Path:
    """A runnable copy of the wheel's server with the backend stub of Python ``version`` ("3.12"; default this
    interpreter's); made once, atomically.

    The copy is named by what it holds (wheel version, server and stub sizes, Python version), not by when the
    wheel was unpacked: every fresh virtual environment (each CI clone) would otherwise leave another ~22 MB copy."""
    version = version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(f"nvidia-pytriton ships no python backend stub for Python {version} ({stub})")
    server = dist / "bin" / "tritonserver"
    stamp = f"{wheel_version or _pytriton_version()}-{server.stat().st_size}-{stub.stat().st_size}-py{version}"
    home = (cache_root or _cache_root()) / f"tritonserver-{stamp}"
    if (home / ".complete").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tritonserver-", dir=home.parent))
    try:
        for part in ("bin", "backends", "caches"):
            shutil.copytree(dist / part, tmp / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(stub, tmp / "backends" / "python" / "triton_python_backend_stub")
        (tmp / ".complete").write_text(stamp)
        try:
            tmp.rename(home)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return home


@dataclass(frozen=True)
class ServingPython:
    """The interpreter the python models run in: its ``bin/`` goes first on the server's PATH (the stub's embedded
    Python finds its prefix, a venv's site-packages included, from the python3 there), its libpython's folder on
    LD_LIBRARY_PATH, and the wheel's stub for its version serves."""

    bin_dir: Path
    version: str  # "3.12"
    libdir: str

    @classmethod
    def of(cls, python: Path | str | None) -> "ServingPython":
        """This interpreter (None), or the one at ``python``: a venv's python, e.g. the image's environment
        rebuilt by ``python -m serving.image_env``."""
        if python is None:
            import sysconfig

            return cls(Path(sys.executable).parent, f"{sys.version_info[0]}.{sys.version_info[1]}",
                       sysconfig.get_config_var("LIBDIR") or "")
        probe = "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); print(sysconfig.get_config_var('LIBDIR') or '')"
        try:
            out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"--python {python}: not a python that runs ({exc})") from None
        version, libdir = (out.stdout.splitlines() + ["", ""])[:2]
        # not resolved: a venv's python is a link to its base interpreter, and the venv is what must be found
        return cls(Path(python).absolute().parent, version, libdir)


def find_tritonserver(python: Path | str | None = None) -> TritonInstall:
    """The server, and the environment its python models run in: this interpreter's, or ``python``'s."""
    serving = ServingPython.of(python)
    path = {"PATH": os.pathsep.join((str(serving.bin_dir), os.environ.get("PATH", "")))}
    explicit = os.environ.get("TRITONSERVER")
    if explicit:
        if not Path(explicit).is_file():
            raise ServerError(f"$TRITONSERVER={explicit} is not a file")
        return TritonInstall(Path(explicit), None, None, path if python else {})
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonInstall(Path(on_path), None, None, path if python else {})
    dist = _pytriton_dist()
    if dist is None:
        raise ServerError(
            "no tritonserver found: install nvidia-pytriton (requirements.lock), put tritonserver on PATH, "
            "set $TRITONSERVER, or use the Docker image (see Dockerfile)"
        )
    home = prepare_pytriton_server(dist, version=serving.version)
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(libs), serving.libdir if python else "",
                                                        os.environ.get("LD_LIBRARY_PATH", "")) if p),
        # The python backend stub starts an interpreter that must see this environment's packages.
        **path,
    }
    return TritonInstall(home / "bin" / "tritonserver", home / "backends", home / "caches", env)


def engine_python(install: TritonInstall) -> str:
    """The interpreter the python backend's stubs will run: the first python3 on the server's PATH."""
    return shutil.which("python3", path=install.env.get("PATH") or os.environ.get("PATH")) or sys.executable


def check_engine(manifest: dict, install: TritonInstall) -> None:
    """A python-backend bundle's engine must be importable where its models will run; otherwise one line, before
    anything starts (the model would fail to load and the server would not come up, or come up without it).  The
    check is the image's (``serving/triton/start.py``), run in the serving python: a version other than the
    validated one is a warning line."""
    if manifest.get("backend") != "python" or not isinstance(manifest.get("engine_needs"), dict):
        return
    python = engine_python(install)
    try:
        done = subprocess.run([python, str(START), "--engine-check"], input=json.dumps(manifest), text=True,
                              env=server_environment(install), capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise ServerError(f"the serving python ({python}) did not answer the engine check within 120 s") from None
    except OSError as exc:
        raise ServerError(f"the serving python ({python}) cannot run: {exc.strerror or exc}") from None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("warning: "):
            print(line, file=sys.stderr)
    if done.returncode != 0:
        errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
        raise ServerError(errors[-1] if errors else f"the serving python ({python}) failed the engine check "
                          f"(exit {done.returncode}): {lines[-1] if lines else 'no output'}")
