"""The payloads of FastDeploy's ERNIE 3.0 token-classification and UIE serving examples, from our decoded spans.

Standard library only: copied next to the python models of a ``package.api: fastdeploy`` bundle (as
``fastdeploy_payloads.py``) and used by the tests as the reference, so both sides format with this code.
The formats and the schema walk are FastDeploy's (serving/bundle/fastdeploy_api.py lists the files read); the code is ours.

Both payloads are Python literals, not JSON: FastDeploy's python models hand lists and dicts to ``pb_utils.Tensor``,
which stores ``str(obj)``, and its clients read each row back with ``ast.literal_eval``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

RELATION_JOINER = "的"  # FastDeploy's ZH schema language: a child prompt is "<parent span text>的<child name>"


class BadPayload(ValueError):
    """A request's JSON input cannot be served; the message names the input."""


def token_entities(entities) -> bytes:
    """ernie_tokencls ``OUTPUT`` row: ``[{'pos': [start, end], 'label': type}, ...]`` with character offsets and an
    inclusive end (the client slices ``text[pos[0]:pos[1] + 1]``), from entities with an exclusive ``end``."""
    return repr([{"pos": [int(e.start), int(e.end) - 1], "label": str(e.type)} for e in entities]).encode("utf-8")


@dataclass(frozen=True)
class SchemaNode:
    """One prompt of a UIE schema and the prompts asked of each span it finds (relations, event arguments)."""

    name: str
    children: tuple["SchemaNode", ...] = field(default=())


def _nodes(value, where: str) -> tuple[SchemaNode, ...]:
    """FastDeploy's ``SchemaNode`` rules: a string is one prompt; a list holds prompts and {prompt: children} dicts;
    a dict maps each prompt to its children (a string, a list or a dict)."""
    if isinstance(value, str):
        value = [value]
    items = []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                items.append((item, ()))
            elif isinstance(item, dict):
                items.extend(item.items())
            else:
                raise BadPayload(f"{where}: a schema item must be a prompt or a {{prompt: children}} object, got {item!r}")
    else:
        raise BadPayload(f"{where}: a schema must be a list or an object of prompts, got {type(value).__name__}")
    nodes = []
    for name, children in items:
        if not isinstance(name, str) or not name.strip():
            raise BadPayload(f"{where}: empty prompt in the schema")
        nodes.append(SchemaNode(name.strip(), _nodes(children, where) if children else ()))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise BadPayload(f"{where}: a prompt is repeated at one level of the schema")
    return tuple(nodes)


def parse_texts(raw: bytes, where: str) -> list[str]:
    """``INPUT_0``: a JSON list of texts (a lone JSON string is one text)."""
    value = _json(raw, where)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise BadPayload(f"{where}: expected a JSON list of texts, e.g. [\"2月8日上午北京冬奥会...\"]")
    return value


def parse_schema(raw: bytes, where: str) -> tuple[SchemaNode, ...]:
    """``INPUT_1``: the schema's root prompts; empty (``[]``, ``{}``, ``""``, ``null``) means "the schema sent last"."""
    value = _json(raw, where)
    return _nodes(value, where) if value else ()


def _json(raw: bytes, where: str):
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else str(raw))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadPayload(f"{where}: not UTF-8 JSON ({exc})") from None


def _span_dict(span) -> dict:
    d = span.as_dict()  # our rounding of the probability: the same numbers the ernie-bundle API serves
    return {"start": d["start"], "end": d["end"], "probability": d["probability"], "text": d["text"]}


def extract(nodes: Sequence[SchemaNode], texts: Sequence[str],
            run: Callable[[list[str], list[str]], list[list]]) -> list[dict]:
    """Per text, FastDeploy's UIE result for the schema ``nodes``.

    Level by level down the schema, as FastDeploy's ``UIEModel::Predict``: a root prompt is asked of every text; a
    child prompt is asked, for each span its parent found in a text, as "<span text>的<child>", and what it finds goes
    under that span's ``relation``.  Prompts that find nothing are left out, as FastDeploy leaves them out.
    ``run(prompts, contents)`` gives the spans of each (prompt, content) pair; it gets a whole level at once, text by
    text (FastDeploy runs one prompt at a time), so a flat schema is one call over the pairs in the order the
    ernie-bundle UIE makes them (text n, prompt p -> n * P + p): the same windows, padded alike, the same numbers.
    """
    results: list[dict] = [{} for _ in texts]
    # (schema node, per text the span dicts its parent found, or None at the root)
    level: list = [(node, None) for node in nodes]
    while level:
        prompts, contents, owners = [], [], []
        for i, text in enumerate(texts):
            for k, (node, parents) in enumerate(level):
                for parent in ([None] if parents is None else parents[i]):
                    prefix = "" if parent is None else parent["text"] + RELATION_JOINER
                    prompts.append(prefix + node.name)
                    contents.append(text)
                    owners.append((i, k, parent))
        found = run(prompts, contents) if prompts else []
        found_by_node: list[list[list[dict]]] = [[[] for _ in texts] for _ in level]
        for (i, k, parent), spans in zip(owners, found):
            if not spans:
                continue
            dicts = [_span_dict(s) for s in spans]
            target = results[i] if parent is None else parent.setdefault("relation", {})
            target.setdefault(level[k][0].name, []).extend(dicts)
            found_by_node[k][i].extend(dicts)
        level = [(child, found_by_node[k]) for k, (node, _) in enumerate(level) for child in node.children]
    return results


def uie_row(result: dict) -> bytes:
    """uie ``OUTPUT_0`` row for one text."""
    return repr(result).encode("utf-8")
