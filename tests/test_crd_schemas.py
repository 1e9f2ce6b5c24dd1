"""The custom resources (ServingRuntime, InferenceService, ServiceMonitor, PrometheusRule) checked against their vendored CRD schemas, strictly
(issue 33): each schema catches a broken object, and every object a bundle emits passes."""

from __future__ import annotations

import copy
import hashlib
import re

import pytest


def _objects(**deploy) -> tuple[list[dict], list[dict]]:
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build

    builtin, custom, _ = build("tiny", {"package": {"instances": 2, "engine_threads": 1}}, 10 * 2**20,
                               DeployConfig(**deploy))
    return builtin, custom


def test_vendored_schemas_are_the_upstream_files_the_readme_names():
    from serving.bundle.crd_schemas import CRDS, SCHEMA_DIR

    readme = (SCHEMA_DIR / "README.md").read_text(encoding="utf-8")
    for _, filename, *_ in CRDS.values():
        row = next(line for line in readme.splitlines() if line.startswith(f"| {filename} |"))
        assert "Apache-2.0" in row and re.search(r"\| v\d+\.\d+\.\d+ \|", row), row
        sha = re.search(r"`([0-9a-f]{64})`", row).group(1)
        assert hashlib.sha256((SCHEMA_DIR / filename).read_bytes()).hexdigest() == sha, filename


@pytest.mark.parametrize("kind", ["ServingRuntime", "InferenceService", "ServiceMonitor", "PrometheusRule"])
def test_the_strict_schemas_are_valid_json_schemas(kind):
    from serving.bundle.crd_schemas import validator

    checker = validator(kind)
    checker.check_schema(checker.schema)  # tightening them left a schema the validator understands


def test_strict_closes_every_object_schema_that_lists_properties():
    from serving.bundle.crd_schemas import strict

    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "open": {"type": "object", "properties": {"c": {}}, "x-kubernetes-preserve-unknown-fields": True},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"d": {}}}}}}
    out = strict(schema)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["list"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["open"]
    assert out["properties"]["map"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in schema  # the vendored schema is not changed
    # Go's RE2 takes inline flags anywhere (the PrometheusRule CRD's partial_response_strategy), Python only first
    assert strict({"type": "string", "pattern": "^(?i)(abort|warn)?$"})["pattern"] == "(?i)^(abort|warn)?$"


def test_every_emitted_object_passes_its_schema():
    from serving.bundle.manifests import validate

    for deploy in ({}, {"queue_time_metric": True, "namespace": "ml-serving", "min_replicas": 2, "cpu": "500m"}):
        builtin, custom = _objects(**deploy)
        checks = validate(builtin, custom, "1.33")
        assert [c.kind for c in checks] == ["Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                                            "ConfigMap", "ServiceMonitor", "PrometheusRule", "ServingRuntime",
                                            "InferenceService"]
        assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
        details = {c.kind: c.detail for c in checks}
        assert details["InferenceService"] == details["ServingRuntime"] == "KServe v0.20.0 CRD schema, strict"
        assert details["ServiceMonitor"] == "prometheus-operator v0.93.0 CRD schema, strict"
        assert details["ConfigMap"] == "Kubernetes 1.33 schema, strict; every query parsed as PromQL"  # the dashboard
        assert details["PrometheusRule"] == details["ServiceMonitor"] + "; every expr parsed as PromQL"


def _break(obj: dict, path: str, value=None, *, delete: bool = False, rename: str = "") -> dict:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = obj
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if rename:
        node[rename] = node.pop(last)
    elif delete:
        del node[last]
    else:
        node[last] = value
    return obj


ISVC_BREAKS = [  # (what, how, what the reason names)
    ("a typo'd field", dict(path="spec.predictor.model.storageUri", rename="storageURI"), "'storageURI' was unexpected"),
    ("a wrong type", dict(path="spec.predictor.minReplicas", value="one"), "spec/predictor/minReplicas"),
    ("no runtime (optional in the CRD; not for a bundle: KServe's stock Triton image cannot run its python models)",
     dict(path="spec.predictor.model.runtime", delete=True), "'runtime' is a required"),
    ("a missing required field", dict(path="spec.predictor.model.modelFormat.name", delete=True), "'name' is a required"),
    ("a missing spec", dict(path="spec", delete=True), "'spec' is a required"),
    ("no storageUri (optional in the CRD, not for a bundle)", dict(path="spec.predictor.model.storageUri", delete=True),
     "'storageUri' is a required"),
    ("a bad name", dict(path="metadata.name", value="Ernie_Bundle"), "metadata/name"),
    ("a name KServe refuses", dict(path="metadata.name", value="1-ernie"), "metadata/name"),
    ("a bad namespace", dict(path="metadata.namespace", value="ML"), "metadata/namespace"),
    ("another apiVersion", dict(path="apiVersion", value="serving.kserve.io/v1alpha1"), "apiVersion"),
    ("min > max replicas", dict(path="spec.predictor.minReplicas", value=9), "minReplicas > maxReplicas"),
]
RUNTIME_BREAKS = [
    ("a typo'd container field", dict(path="spec.containers.0.readinessProbe", rename="readynessProbe"),
     "'readynessProbe' was unexpected"),
    ("a quantity that is none", dict(path="spec.containers.0.resources.limits.cpu", value="two cores"), "limits/cpu"),
    ("a wrong type", dict(path="spec.containers.0.args", value="--model-repository=/mnt/models"), "containers/0/args"),
    ("no model format (optional in the CRD, not for a bundle's runtime)", dict(path="spec.supportedModelFormats",
                                                                               delete=True),
     "'supportedModelFormats' is a required"),
    ("a bad name", dict(path="metadata.name", value="Ernie_Runtime"), "metadata/name"),
]
MONITOR_BREAKS = [
    ("a typo'd field", dict(path="spec.endpoints.0.interval", rename="intervall"), "'intervall' was unexpected"),
    ("a wrong type", dict(path="spec.endpoints", value={"port": "metrics"}), "spec/endpoints"),
    ("a bad interval", dict(path="spec.endpoints.0.interval", value="15 seconds"), "spec/endpoints/0/interval"),
    ("a missing required field", dict(path="spec.selector", delete=True), "'selector' is a required"),
    ("a bad name", dict(path="metadata.name", value="ernie bundle"), "metadata/name"),
    ("a typo'd metadata field", dict(path="metadata.labels", rename="lables"), "'lables' was unexpected"),
    ("another kind", dict(path="kind", value="PodMonitor"), "no CRD schema"),
]

RULE_BREAKS = [
    ("a typo'd rule field", dict(path="spec.groups.0.rules.0.expr", rename="expression"), "'expression' was unexpected"),
    ("a bad duration", dict(path="spec.groups.0.rules.1.for", value="15 minutes"), "spec/groups/0/rules/1/for"),
    ("a group without a name", dict(path="spec.groups.0.name", delete=True), "'name' is a required"),
    ("an expr Prometheus would not load (the CRD takes any string)",
     dict(path="spec.groups.0.rules.1.expr", value="sum(rate(ernie_bundle_refused_requests_total[15m]) > 0.05"),
     "spec/groups/0/rules/1/expr: not PromQL"),
]


@pytest.mark.parametrize("kind, how, says", [pytest.param(k, how, says, id=f"{k}: {what}")
                                             for k, breaks in (("InferenceService", ISVC_BREAKS), ("ServingRuntime", RUNTIME_BREAKS),
                                                              ("ServiceMonitor", MONITOR_BREAKS), ("PrometheusRule", RULE_BREAKS))
                                             for what, how, says in breaks])
def test_each_schema_catches_a_broken_object(kind, how, says):
    from serving.bundle.manifests import validate

    _, custom = _objects()
    good = next(o for o in custom if o["kind"] == kind)
    (check,) = validate([], [_break(good, **how)], "1.33")
    assert not check.ok and says in check.detail, check.detail
    assert "\n" not in check.line()  # one line per object in the report
