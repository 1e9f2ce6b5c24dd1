"""The Helm chart (serving/bundle/chart/ernie-bundle), rendered and linted by helm itself (issue 33): with a bundle's
values (written by `python -m serving.bundle.manifests`) it renders exactly the objects serving.bundle.manifests builds, and they
pass the same schema checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import pipeline  # noqa: F401  (before paddle)
from serving_fixtures import tiny_export, tiny_fused_bundle, tool_or_skip  # noqa: F401  (fixtures)

BUNDLE = {"package": {"instances": 2, "engine_threads": 1}}
# A bundle whose models count cut texts and answers: validate counted 30 of 1,000 cut on dev (the alert at 2 x 3%), and
# its answers by label, one a hierarchy's path with what PromQL and label_replace must escape (the drift alert's mix).
COUNTING = {**BUNDLE, "models": {"ensemble": "my_task"},
            "metrics": {"summary": {"dev_counts": {"items": 1000, "truncated": 30,
                                                   "answers": {"a": 600, '组织关系##"裁员" $1 \\': 400}}}}}


@pytest.fixture(scope="module")
def helm() -> Path:
    from serving.bundle.helm_chart import HelmError, find_helm

    return tool_or_skip(find_helm, HelmError, "ERNIE_BUNDLE_REQUIRE_HELM")


def _by_kind(objs: list[dict]) -> dict[str, dict]:
    out = {o["kind"]: o for o in objs}
    assert len(out) == len(objs), [o["kind"] for o in objs]
    return out


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def test_a_bundles_values_render_the_bundles_manifests(helm, tiny_fused_bundle, tmp_path):
    """make manifests writes helm-values.yaml beside kubernetes.yaml and kserve.yaml; helm template of the chart with
    it gives the same objects (parsed, compared as dicts), with kserve.enabled the ServingRuntime and the
    InferenceService that names it alone."""
    from serving.bundle.helm_chart import VALUES_FILE, render
    from serving.bundle.manifests import MONITORING_KINDS, main, validate

    out = tmp_path / "deploy"
    assert main(["--bundle", str(tiny_fused_bundle), "--out", str(out), "--set", "deploy.queue_time_metric=true"]) == 0
    values = out / VALUES_FILE
    rendered = _by_kind(render(helm, values, "1.33"))
    assert rendered == _by_kind(_docs(out / "kubernetes.yaml"))
    isvc = _by_kind(render(helm, values, "1.33", sets=("kserve.enabled=true",)))
    assert isvc == _by_kind(_docs(out / "kserve.yaml"))
    builtin = [o for o in rendered.values() if o["kind"] not in MONITORING_KINDS]
    assert set(isvc) == {"ServingRuntime", "InferenceService"}
    custom = [rendered["ServiceMonitor"], rendered["PrometheusRule"], isvc["ServingRuntime"], isvc["InferenceService"]]
    assert all(c.ok for c in validate(builtin, custom, "1.33"))


@pytest.mark.parametrize("deploy, bundle", [
    ({}, BUNDLE),
    ({"namespace": "ml-serving", "min_replicas": 2, "max_replicas": 6, "cpu": "1500m", "memory": "3Gi",
      "image": "registry.example.com:5000/ernie/{task}:v1", "bundle_claim": "models.v1",
      "storage_uri": "s3://bundles/{task}", "target_cpu_utilization": 55, "queue_time_metric": True,
      "kubernetes_version": "1.30", "answer_drift": 0.2}, COUNTING),
], ids=["defaults", "every-value-set"])
def test_chart_renders_what_build_builds_and_lints_strict(helm, tmp_path, deploy, bundle):
    from serving.bundle.config import DeployConfig
    from serving.bundle.helm_chart import lint, render
    from serving.bundle.manifests import chart_values as values, chart_values_yaml as values_yaml
    from serving.bundle.manifests import build, validate

    cfg = DeployConfig(**deploy)
    builtin, custom, size = build("my_task", bundle, 300 * 2**20, cfg)
    path = tmp_path / "values.yaml"
    path.write_text(values_yaml(values("my_task", bundle, 300 * 2**20, cfg), size.why), encoding="utf-8")
    lint(helm, path, cfg.kubernetes_version)  # raises HelmError on any warning (--strict)
    rendered = render(helm, path, cfg.kubernetes_version) + render(helm, path, cfg.kubernetes_version,
                                                                   sets=("kserve.enabled=true",))
    assert _by_kind(rendered) == _by_kind(builtin + custom)
    rules = [r["alert"] for r in _by_kind(rendered)["PrometheusRule"]["spec"]["groups"][0]["rules"]]
    assert rules == ["ErnieBundleDown", "ErnieBundleServerFaults", "ErnieBundleRequestsRefused", "ErnieBundleAtCapacity",
                     *(["ErnieBundleTextsCut", "ErnieBundleAnswersDrift"] * (bundle is COUNTING))]
    custom_kinds = ("ServiceMonitor", "PrometheusRule", "ServingRuntime", "InferenceService")
    checks = validate([o for o in rendered if o["kind"] not in custom_kinds],
                      [o for o in rendered if o["kind"] in custom_kinds], cfg.kubernetes_version)
    assert len(checks) == 9 and all(c.ok for c in checks), [c.line() for c in checks if not c.ok]


def test_chart_defaults_lint_strict_and_switches_drop_objects(helm):
    from serving.bundle.helm_chart import lint, render

    lint(helm, None, "1.33")
    kinds = [o["kind"] for o in render(helm, None, "1.33", sets=("autoscaling.enabled=false", "monitoring.enabled=false"))]
    assert sorted(kinds) == ["Deployment", "PodDisruptionBudget", "Service"]


@pytest.mark.parametrize("sets, says", [
    (("replicas.mn=2",), "additional properties 'mn' not allowed"),
    (("resources.cpu=lots",), "/resources/cpu"),
    (("task=my.task",), "/task"),
    (("bundle.claim=Models_1",), "/bundle/claim"),
    (("replicas.min=5",), "replicas: min 5 is larger than max 4"),
])
def test_chart_refuses_bad_values_naming_the_key(helm, sets, says):
    from serving.bundle.helm_chart import HelmError, render

    with pytest.raises(HelmError, match=says.replace(".", r"\.")):
        render(helm, None, "1.33", sets=sets)


def test_chart_refuses_a_kubernetes_older_than_its_apis(helm):
    from serving.bundle.helm_chart import HelmError, render

    with pytest.raises(HelmError, match="kubeVersion"):
        render(helm, None, "1.22")
