"""What every served python model does before its own work: load its sibling files, check the bundle,
read its parameters.

Standard library only: this file is copied next to each python model of a bundle (as
``model_support.py``, beside ``bundle_integrity.py`` and the pure pipeline modules), where neither
``serving`` nor ``pipeline`` is installed.  One copy of this scaffolding instead of one per model file.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path


# A served bundle is checked file by file (bundle.json): nothing may write into it while it serves.
sys.dont_write_bytecode = True


def sibling(folder: Path, name: str):
    """Import ``folder/<name>.py`` (a file copied next to the model) under a name of its own.

    Compiled from the source file itself, never from a ``__pycache__`` entry, so the code that runs is the
    code the bundle's manifest covers."""
    path = Path(folder) / f"{name}.py"
    module = types.ModuleType(f"ernie_bundle_{name}")
    module.__file__ = str(path)
    # Registered before running it: dataclasses (bio.Entity, windows.Window, spans.Span) look their
    # module up in sys.modules while the class is being made.
    sys.modules[module.__name__] = module
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def params(args: dict) -> dict[str, str]:
    """The ``parameters`` of a python model's config, as Triton hands them to ``initialize``."""
    return {k: v.get("string_value", "") for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}


def start(folder: Path, args: dict) -> dict[str, str]:
    """``initialize``'s first step for every model: refuse a bundle whose files were changed since packaging
    (``bundle_integrity.py``; the bundle root is two levels up), then return the model's parameters."""
    folder = Path(folder)
    sibling(folder, "bundle_integrity").verify_bundle(folder.parent.parent, allow_bytecode=True)
    return params(args)


def _error(pb_utils, message: str, code: str):
    """``pb_utils.TritonError`` with status ``code`` where this python backend has error codes (Triton 23.x on);
    without one where it has not (FastDeploy's serving image, Triton 21.10: ``TritonError(message)`` only), so the
    request is still answered with the message, under the server's default status."""
    status = getattr(pb_utils.TritonError, code, None)
    return pb_utils.TritonError(message) if status is None else pb_utils.TritonError(message, status)


def _log_error(pb_utils, text: str) -> None:
    """The server log: ``pb_utils.Logger`` where it exists (not in Triton 21.10), else the stub's stderr (the
    server's own: the stub inherits it)."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_error(text)
    else:
        print(text, file=sys.stderr, flush=True)


def refused(pb_utils, message: str):
    """A response for a request that is wrong as sent: INVALID_ARGUMENT over gRPC, HTTP 400."""
    return pb_utils.InferenceResponse(error=_error(pb_utils, message, "INVALID_ARG"))


def failed(pb_utils, what: str, exc: BaseException):
    """A response for a failure on the server's side: the details (paths, library messages) go to the server
    log, the client gets what failed and where to look."""
    import traceback

    _log_error(pb_utils, f"{what} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return pb_utils.InferenceResponse(error=_error(pb_utils, f"{what} failed on the server (details in its log)", "INTERNAL"))
