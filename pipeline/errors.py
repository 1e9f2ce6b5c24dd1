"""Error types.  One root; the CLI maps each kind to a one-line message and an exit code.  ``shown_json``: how such
a message shows a value read from a JSON file."""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every error the pipeline raises on purpose."""

    exit_code = 1


class UserInputError(PipelineError):
    """Bad input from the user: a file, a field, a flag or a model that cannot be used as given."""

    exit_code = 2


class DataError(UserInputError):
    """A data file is missing or malformed.  The message names the file and line or field."""


class ModelError(UserInputError):
    """A model directory or name cannot be used for the task."""


class ConfigError(UserInputError):
    """A task config or an override is invalid."""


class GateFailed(PipelineError):
    """A stage ran but its result is not good enough to continue (e.g. accuracy below the gate)."""

    exit_code = 3


class StageNotReady(PipelineError):
    """A selected stage needs an upstream stage that has not completed."""

    exit_code = 2


class StageCrashed(PipelineError):
    """A stage raised something no check anticipated (a bug, or an upstream library's failure).  Its FAIL record
    and the traceback in the stage's ``stage.log`` are written before this is raised."""

    exit_code = 1


class NoSpace(PipelineError):
    """The disk (or quota) under the runs directory is full: said as such, not as the error some library made of a
    short write (paddle2onnx's "InvalidProtobuf", a truncated pickle)."""

    exit_code = 1


# Below this, an unexpected failure is most likely a write that did not fit (libraries rarely say ENOSPC).
LOW_SPACE_BYTES = 64 * 2**20


def no_space(exc: BaseException | None, path) -> str | None:
    """The one-line reason when ``exc`` (or what caused it) is a full disk or quota at ``path``, else None: an
    ``OSError`` ENOSPC/EDQUOT anywhere in its chain, or any failure while less than ``LOW_SPACE_BYTES`` are free."""
    import errno
    import shutil

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"no space left on {path} (errno {errno.errorcode[exc.errno]}): free some space and run again"
        exc = exc.__cause__ or exc.__context__
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    if free < LOW_SPACE_BYTES:
        return f"no space left on {path} ({free / 2**20:.1f} MiB free): free some space and run again"
    return None


def shown_json(value, limit: int = 60) -> str:
    """What a one-line message shows of a value read from a JSON file (config.json, id2label): as the file writes it
    (``null``, ``true``, Chinese as is; a string quoted), cut at ``limit`` characters."""
    import json

    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
