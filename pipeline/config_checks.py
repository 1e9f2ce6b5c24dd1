"""The one way a config section checks its values: in the dataclass's ``__post_init__``, with these helpers, raising
``ConfigError`` that names the dotted key (``gates.max_accuracy_drop must be >= 0.0, got -1``).  The loader
(``pipeline.config``) has already checked each value's type against the field's annotation."""

from __future__ import annotations

import math
from typing import Any, Iterable

from pipeline.errors import ConfigError
from pipeline.yaml_input import short


def number(key: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
           integer: bool = False, above: float | None = None) -> Any:
    """``value`` is a real number (not a bool, not NaN) within the bounds given; returns it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        raise ConfigError(f"{key} must be a number, got {short(value)}")
    if integer and not float(value).is_integer():
        raise ConfigError(f"{key} must be an integer, got {short(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {short(value)}")
    if above is not None and value <= above:
        raise ConfigError(f"{key} must be > {above}, got {short(value)}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key} must be <= {maximum}, got {short(value)}")
    return value


def one_of(key: str, value: Any, options: Iterable[Any]) -> Any:
    options = tuple(options)
    if value not in options:
        raise ConfigError(f"{key}: {short(value)} is not one of {', '.join(map(str, options))}")
    return value
