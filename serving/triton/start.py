"""The serving image's entrypoint: check the bundle as the launcher does, then become tritonserver.

    python3 /opt/ernie-bundle/start.py --model-repository=/models [more tritonserver arguments]

The Dockerfile's ENTRYPOINT and the command of the Kubernetes Deployment and the KServe ServingRuntime, so a
container starts the server the way ``python -m serving.server`` does (which runs ``engine_problems`` here, in the
serving python, with ``--engine-check``):

1. bytecode caches of the bundle's listed sources are removed: Triton's python stubs write them, and a planted
   ``.pyc`` would run instead of its source.  Where the bundle is read-only (a volume mounted read-only, the image's
   own copy owned by root) nothing can write or remove one, and step 2 refuses any that is there;
2. the bundle is verified strictly: every file bundle.json lists, with its SHA-256, and nothing else (no bytecode);
3. the engine the bundle's model runs in must import here, and one warning line says when its version is not the
   one that validated the bundle (``integrity.engine_version_note``);
4. tritonserver replaces this process (``exec``: signals and the exit code are the server's), with
   PYTHONDONTWRITEBYTECODE set, strict readiness, exit on error, and ``$BIND_ADDRESS`` (default 0.0.0.0, a
   container's every interface) as its addresses unless the arguments give them.

A failed check is one line on stderr and exit code 2: the pod's log says why, and nothing half-checked serves.
Standard library only, Python 3.8 or newer: it runs in the image's python beside ``integrity.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path



def _sibling(name: str):
    """``<name>.py`` beside this file (in the image: /opt/ernie-bundle/integrity.py), compiled from its source (never
    from a bytecode cache), under a name of its own, as the bundle's models load theirs (model_support.sibling)."""
    import types

    path = Path(__file__).resolve().parent / f"{name}.py"
    module = types.ModuleType(f"ernie_bundle_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


integrity = _sibling("integrity")

SERVER = "tritonserver"
REPOSITORY_FLAGS = ("--model-repository", "--model-store")
DEFAULT_ARGS = ("--strict-readiness=true", "--exit-on-error=true")
ADDRESS_FLAGS = ("--http-address", "--grpc-address", "--metrics-address")


class StartError(ValueError):
    """The bundle cannot be served in this python as it is."""


def engine_problems(manifest: dict) -> "tuple[str | None, list[str]]":
    """(why this python cannot run the bundle's engine, or None; warnings) for a bundle's manifest."""
    needs = manifest.get("engine_needs")  # {"module", "install", ...}: what the package stage's engine said it needs
    if manifest.get("backend") != "python" or not isinstance(needs, dict):
        return None, []
    module, pin = str(needs.get("module")), str(needs.get("install"))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module):  # a top-level name: looking it up imports nothing
        return f"bundle.json: field 'engine_needs.module' {module!r} is not a python module name", []
    if importlib.util.find_spec(module) is None:
        return (f"this bundle's model runs in {manifest.get('engine')}, which the serving python ({sys.executable}) "
                f"does not have: install {pin} there (the bundle's requirements.txt), or package the bundle for "
                "another engine"), []
    note = integrity.engine_version_note(manifest)
    return None, [note] if note else []


def repository_of(args: list) -> "Path | None":
    for i, arg in enumerate(args):
        for flag in REPOSITORY_FLAGS:
            if arg.startswith(flag + "="):
                return Path(arg.split("=", 1)[1])
            if arg == flag and i + 1 < len(args):
                return Path(args[i + 1])
    return None


def check(repository: Path) -> list:
    """Steps 1-3; the warnings to print.  Raises BundleIntegrityError or StartError."""
    try:
        integrity.clear_bytecode(repository)
    except OSError:
        pass  # read-only: nothing wrote a cache there either, and verify_bundle refuses one that is there
    manifest = integrity.verify_bundle(repository)
    problem, warnings = engine_problems(manifest)
    if problem:
        raise StartError(problem)
    return warnings


def server_args(args: list, bind: str) -> list:
    """tritonserver's arguments: the given ones, then the defaults they do not set."""
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    out = list(args)
    out += [a for a in DEFAULT_ARGS if a.split("=", 1)[0] not in given]
    out += [f"{flag}={bind}" for flag in ADDRESS_FLAGS if flag not in given]
    return out


def main(argv: "list | None" = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--engine-check"]:  # python -m serving.server: the manifest on stdin, this python's engine
        problem, warnings = engine_problems(json.load(sys.stdin))
        for line in warnings:
            print(f"warning: {line}", file=sys.stderr)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
        return 2 if problem else 0
    check_only = "--check" in args
    args = [a for a in args if a != "--check"]
    repository = repository_of(args)
    if repository is None:
        print("error: start.py: --model-repository=DIR (the bundle) is required", file=sys.stderr)
        return 2
    try:
        warnings = check(repository)
    except (integrity.BundleIntegrityError, StartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    if check_only:
        return 0
    server = os.environ.get("TRITONSERVER") or SERVER
    sys.stderr.flush()
    os.execvpe(server, [server, *server_args(args, os.environ.get("BIND_ADDRESS") or "0.0.0.0")],
               {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return 1  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
