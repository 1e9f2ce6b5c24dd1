"""Strict checks of the custom resources a bundle emits (KServe ServingRuntime and InferenceService, Prometheus
operator ServiceMonitor and PrometheusRule)
against their CustomResourceDefinitions' schemas.

``kubernetes-validate`` knows the built-in kinds only.  The CRDs' ``openAPIV3Schema`` are vendored, unchanged, in
``serving/bundle/schemas/`` (source, tag, license and checksums in the README there) and tightened here when loaded:

- ``additionalProperties: false`` on every object schema that lists ``properties`` (unless it says
  ``additionalProperties`` or ``x-kubernetes-preserve-unknown-fields`` itself).  The API server prunes unknown
  fields of a custom resource unless the client asks for strict field validation (kubectl does, helm does not), so
  a typo such as ``storageURI`` can be dropped silently on apply, leaving a predictor with no storage; here it fails.
- ``apiVersion`` and ``kind`` pinned to the CRD's, and ``metadata`` described (the CRDs leave it a bare object):
  ``name`` as the controller accepts it (KServe's webhook: a DNS-1035 label; a ServiceMonitor: a DNS-1123
  subdomain, any custom resource's rule), ``namespace`` a DNS-1123 label, ``labels`` / ``annotations`` string maps.
  The manifests set no other metadata; the rest of ObjectMeta is the server's.
- what a bundle's object cannot do without, where the CRD leaves it optional (``BUNDLE_REQUIRED``).
- patterns in Python's dialect where Go's differs (``python_pattern``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


# kind -> (apiVersion, vendored file, the name rule and its length limit, what a check reports it was checked with).
# Looked up by kind so that a wrong apiVersion is reported by the schema (pinned), not as an unknown kind.
CRDS: dict[str, tuple[str, str, str, int, str]] = {
    "InferenceService": ("serving.kserve.io/v1beta1", "inferenceservice-v1beta1.json", DNS1035_LABEL, 63,
                         "KServe v0.20.0 CRD schema, strict"),
    "ServiceMonitor": ("monitoring.coreos.com/v1", "servicemonitor-v1.json", DNS1123_SUBDOMAIN, 253,
                       "prometheus-operator v0.93.0 CRD schema, strict"),
    "PrometheusRule": ("monitoring.coreos.com/v1", "prometheusrule-v1.json", DNS1123_SUBDOMAIN, 253,
                       "prometheus-operator v0.93.0 CRD schema, strict"),
    "ServingRuntime": ("serving.kserve.io/v1alpha1", "servingruntime-v1alpha1.json", DNS1035_LABEL, 63,
                       "KServe v0.20.0 CRD schema, strict"),
}
# Fields the CRD leaves optional that a bundle's object cannot do without (object path -> required keys): the
# predictor serves the bundle from ``storageUri`` with the bundle's own ServingRuntime, named in ``runtime`` (the
# CRD also allows a framework key instead of ``model``, ``storage`` instead of ``storageUri``, no runtime: KServe's
# stock Triton image then serves it, which cannot run a bundle's python models); the runtime says which format it
# serves.
BUNDLE_REQUIRED: dict[str, dict[str, tuple[str, ...]]] = {
    "InferenceService": {"spec.predictor": ("model",), "spec.predictor.model": ("modelFormat", "runtime", "storageUri")},
    "ServingRuntime": {"spec": ("supportedModelFormats", "protocolVersions")},
}


def strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` added to every object schema that lists ``properties`` and
    says nothing about unknown fields (a copy; the vendored file stays as upstream wrote it)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = python_pattern(out["pattern"])
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def python_pattern(pattern: str) -> str:
    """A CRD's pattern (Go's RE2) as Python's ``re`` reads it: RE2 takes inline flags anywhere, Python only at the
    start, so the PrometheusRule CRD's ``^(?i)(abort|warn)?$`` becomes ``(?i)^(abort|warn)?$`` (the same language)."""
    import re

    m = re.match(r"\^(\(\?[aiLmsux]+\))", pattern)
    return f"{m.group(1)}^{pattern[m.end():]}" if m else pattern


def _metadata(name_pattern: str, name_max: int) -> dict:
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
        "name": {"type": "string", "pattern": name_pattern, "maxLength": name_max},
        "namespace": {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63},
        "labels": string_map, "annotations": string_map}}


@functools.cache
def validator(kind: str):
    """The strict validator of one custom resource kind; LookupError for a kind without a vendored schema."""
    import jsonschema

    try:
        api_version, filename, name_pattern, name_max, _ = CRDS[kind]
    except KeyError:
        raise LookupError(f"kind {kind!r}: no CRD schema in {SCHEMA_DIR} (known: {', '.join(CRDS)})") from None
    schema = strict(json.loads((SCHEMA_DIR / filename).read_text(encoding="utf-8")))
    props = schema["properties"]
    props["apiVersion"] = {"type": "string", "enum": [api_version]}  # draft-04: no "const"
    props["kind"] = {"type": "string", "enum": [kind]}
    props["metadata"] = _metadata(name_pattern, name_max)
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata", "spec"})
    for path, keys in BUNDLE_REQUIRED.get(kind, {}).items():
        node = schema
        for key in path.split("."):
            node = node["properties"][key]
        node["required"] = sorted({*node.get("required", ()), *keys})
    return jsonschema.validators.validator_for(schema)(schema)


def described(obj: dict) -> str:
    """What ``check`` validates ``obj`` with, for the report."""
    return CRDS[obj.get("kind")][4]


def check(obj: dict) -> str:
    """'' when ``obj`` validates strictly against its kind's CRD schema, else every reason with its path, in one line
    (a kind with no vendored schema is a reason too)."""
    from jsonschema.exceptions import best_match

    try:
        schema = validator(obj.get("kind"))
    except LookupError as exc:
        return str(exc)
    reasons = []
    for error in sorted(schema.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
        error = best_match([error])  # into anyOf/oneOf: the branch that came closest, not "no branch matched"
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        reasons.append(f"{path}: {error.message}")
    return "; ".join(dict.fromkeys(reasons))
