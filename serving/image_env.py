"""The serving image's Python environment, rebuilt here without Docker: the Dockerfile's Python version and only its
install lines.

The Dockerfile says which Python its base image runs (``ARG SERVING_PYTHON``; its build stops if the image runs
another) and installs the bundle's ``requirements.txt`` with ``RUN python3 -m pip install ...``.  ``recipe`` reads
those from the Dockerfile itself, so a package dropped from it is dropped here too; ``build`` makes a virtual
environment of that Python and runs each install line in it, with the files the Dockerfile copies in taken from the
bundle.  ``python -m serving.server --python <env>/bin/python`` then serves a bundle from it with the wheel's
python-backend stub of that version: the image's python models, numpy, tokenizers and engine, on this machine.

    python -m serving.image_env --bundle model_repository/tnews --out .venv-image/tnews
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = PROJECT_ROOT / "Dockerfile"
BUNDLE_SOURCE = "model_repository/${TASK}"  # what the Dockerfile copies the bundle from


class ImageEnvError(RuntimeError):
    """The image's environment cannot be rebuilt here (no such Python, an install line that fails)."""


@dataclass(frozen=True)
class Recipe:
    python: str  # "3.12": ARG SERVING_PYTHON
    installs: tuple[tuple[str, ...], ...]  # each `python3 -m pip install ...` of a RUN line, arguments after `install`
    copies: dict  # destination in the image -> source in the build context, ARGs not yet expanded


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per Dockerfile instruction, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def recipe(dockerfile: Path = DOCKERFILE) -> Recipe:
    """What the Dockerfile installs into its image's Python; ImageEnvError when it says no Python version."""
    args: dict[str, str] = {}
    installs, copies = [], {}
    for word, rest in _instructions(Path(dockerfile).read_text(encoding="utf-8")):
        if word == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name.strip()] = value.strip().strip('"')
        elif word == "COPY":
            *sources, dest = shlex.split(rest)
            for src in sources:
                copies[dest.rstrip("/") + ("/" + Path(src).name if dest.endswith("/") else "")] = src
        elif word == "RUN":
            command: list[str] = []
            for token in [*shlex.split(rest), "&&"]:  # the commands of a shell line, quoted arguments kept whole
                if token not in ("&&", ";"):
                    command.append(token)
                    continue
                if command[:4] == ["python3", "-m", "pip", "install"]:
                    installs.append(tuple(command[4:]))
                command = []
    if "SERVING_PYTHON" not in args:
        raise ImageEnvError(f"{dockerfile}: no ARG SERVING_PYTHON=<the base image's Python, e.g. 3.12>")
    if not installs:
        raise ImageEnvError(f"{dockerfile}: no RUN python3 -m pip install line")
    return Recipe(args["SERVING_PYTHON"], tuple(installs), copies)


def find_python(version: str) -> Path | None:
    """An interpreter of ``version`` that runs here: python<version> on PATH, else pyenv's (a pyenv shim on PATH
    that has no such version selected does not run, and is passed over)."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}"), *sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))]
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"]
        try:
            if subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout.strip() == version:
                return Path(candidate)
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def _local(arg: str, recipe: Recipe, bundle: Path) -> str:
    """An install argument naming a file in the image (``/tmp/requirements.txt``) -> that file here, in the bundle."""
    src = recipe.copies.get(arg)
    if src is None:
        return arg
    if not src.startswith(BUNDLE_SOURCE + "/"):
        return str(PROJECT_ROOT / src)
    return str(bundle / src[len(BUNDLE_SOURCE) + 1:])


def install_commands(recipe: Recipe, bundle: Path, python: Path) -> list[list[str]]:
    """The Dockerfile's install lines as they run here (``--no-cache-dir`` dropped: pip's cache changes no package)."""
    return [[str(python), "-m", "pip", "install", "--quiet",
             *(_local(a, recipe, bundle) for a in words if a != "--no-cache-dir")] for words in recipe.installs]


def build(bundle: Path, dest: Path, dockerfile: Path = DOCKERFILE, log=print) -> Path:
    """The image's environment for ``bundle`` at ``dest`` (made again only when what it installs changed); returns
    its python."""
    rec = recipe(dockerfile)
    base = find_python(rec.python)
    if base is None:
        raise ImageEnvError(f"the Dockerfile's image runs Python {rec.python} (ARG SERVING_PYTHON), which is not "
                            f"installed here (no python{rec.python} on PATH, none under pyenv)")
    dest = Path(dest)
    python = dest / "bin" / "python"
    commands = install_commands(rec, bundle, Path("python"))
    files = b"".join(Path(a).read_bytes() for words in commands for a in words if Path(a).is_file())
    digest = hashlib.sha256(repr((str(base), commands)).encode() + files).hexdigest()
    stamp = dest / ".image-env"
    if stamp.is_file() and stamp.read_text() == digest and python.is_file():
        return python
    shutil.rmtree(dest, ignore_errors=True)
    log(f"building the image's Python {rec.python} environment in {dest} from {dockerfile.name}'s install lines")
    steps = [[str(base), "-m", "venv", str(dest)], *install_commands(rec, bundle, python)]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ImageEnvError(f"{' '.join(cmd[:5])} ...: exit {done.returncode}: {tail[0]}")
    stamp.write_text(digest)
    return python


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Rebuild the serving image's Python environment here (no Docker).")
    p.add_argument("--bundle", required=True, help="the bundle (model_repository/<task>)")
    p.add_argument("--out", required=True, help="where to make the environment")
    p.add_argument("--dockerfile", default=str(DOCKERFILE))
    args = p.parse_args(argv)
    bundle = Path(args.bundle)
    if not (bundle / "bundle.json").is_file():
        print(f"error: {bundle}: not a bundle (no bundle.json); make bundle first", file=sys.stderr)
        return 2
    try:
        python = build(bundle, Path(args.out), Path(args.dockerfile))
    except ImageEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(python)
    print(f"serve the bundle in it: python -m serving.server --repository {bundle.parent} --task {bundle.name} "
          f"--python {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
