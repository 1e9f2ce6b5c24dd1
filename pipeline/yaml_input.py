"""Reading a YAML a user hands us (a task YAML, an ACT YAML, a ``--set`` value) so that a small file cannot exhaust
the machine, and showing a value in a message so that a message stays one short line.

Why: YAML aliases share one node at many places, so 2.3 KB of ``&a [*b, *b, ...]`` nine levels deep stands for
billions of values.  Loading it is cheap (the aliases stay shared); anything that then walks the value (an error
message's ``repr``, hashing a config, ``dataclasses.asdict``) does not end.  ``load`` composes the document,
counts the values it would expand to (each node once, with a memo) and refuses it when that is over
``MAX_VALUES``, before a single Python object is made.  A document that refers to itself is refused too.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ConfigError

# The largest task YAML here expands to a few hundred values; a hand-written config never comes near this.
MAX_VALUES = 100_000

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 2, 4, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 200, 80, 40


class ExpandsTooFar(ConfigError):
    """The YAML's aliases stand for more values than any config has, or for a value inside itself."""


def short(value: Any) -> str:
    """``repr(value)``, bounded: what an error message shows of a value (never the whole of a big one)."""
    return _SHORT.repr(value)


def _expanded_size(root: yaml.Node, where: str) -> int:
    """How many values ``root`` stands for once every alias is expanded; ConfigError over ``MAX_VALUES`` or
    for a node that contains itself.  Each node is sized once (memo by identity), so the count is cheap."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if not children_done:
            if key in in_progress:
                raise ExpandsTooFar(f"{where}: a YAML alias refers to a value that contains it (line {node.start_mark.line + 1})")
            in_progress.add(key)
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            continue
        missing = [k for k in kids if id(k) not in sizes]
        if missing:  # a child still in progress: the node contains itself
            raise ExpandsTooFar(f"{where}: a YAML alias refers to a value that contains it (line {node.start_mark.line + 1})")
        in_progress.discard(key)
        sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
        if sizes[key] > MAX_VALUES:
            raise ExpandsTooFar(f"{where}: its YAML aliases expand to more than {MAX_VALUES:,} values (line "
                              f"{node.start_mark.line + 1}): not a config; write the values out")
    return sizes[id(root)]


def load(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` with the alias bound above; ConfigError (one line, naming ``where``) for bad YAML."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: invalid YAML: {exc}".replace("\n", " ")) from None
    except RecursionError:  # thousands of nested brackets: the composer itself recurses
        raise ConfigError(f"{where}: invalid YAML: nested too deep") from None
    finally:
        loader.dispose()


def load_file(path: Path, where: str | None = None) -> Any:
    """A YAML file through ``load``; ConfigError for a file that cannot be read or is not UTF-8."""
    path = Path(path)
    where = where or str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    return load(text, where)
