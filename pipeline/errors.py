"""Error types.  One root; the CLI maps each kind to a one-line message and an exit code."""

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
