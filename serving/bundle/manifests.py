"""Kubernetes and KServe objects for one bundle, built from typed models and validated offline.

    <bundle>/kubernetes.yaml    Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, the Grafana
                                dashboard's ConfigMap, ServiceMonitor, PrometheusRule (serving.bundle.monitoring)
    <bundle>/grafana-dashboard.json   the same dashboard, for an import by hand
    <bundle>/kserve.yaml        ServingRuntime (the bundle's image, started as the Deployment starts it) and the
                                InferenceService that names it (protocol v2)

Written by the package stage into the bundle before its manifest is hashed, so ``bundle.json`` covers
them (files at the bundle's top level: Triton takes every sub-folder of a repository for a model).
``python -m serving.bundle.manifests --bundle DIR --out DIR [--set deploy.key=value]`` renders them again for
other values, after checking the bundle's integrity.

The built-in objects are ``kubernetes.client`` models; ServiceMonitor and PrometheusRule (Prometheus operator,
``serving.bundle.monitoring``), ServingRuntime and InferenceService (KServe) are custom resources, written as
dataclasses (the ``kserve`` SDK pins versions of protobuf, pandas and httpx this project cannot take).  Every object
is checked: built-in kinds against the Kubernetes OpenAPI schemas ``kubernetes-validate`` ships (strict: unknown
fields are errors), the custom resources against their CRDs' schemas, vendored in ``serving/bundle/schemas/`` and
made as strict (``serving.bundle.crd_schemas``), and every alert's and dashboard panel's expression as PromQL.

The Helm chart ``serving/bundle/chart/ernie-bundle`` renders the same objects: the render command also writes
``helm-values.yaml``, the values that make it render this bundle's (``serving.bundle.helm_chart``).

Sizes come from the bundle: the CPU request is the cores its instances and engine threads were
validated with (``bundle.json`` ``package.instances`` x ``package.engine_threads``, at most the ``cpu.cores`` they
were measured on), memory what its python models held when the package stage loaded them
(``bundle.json`` ``served_memory``, ``serving.bundle.served_memory``; 1 GiB plus three times the bundle's size, an
estimate, where they could not be loaded here), unless ``deploy.cpu`` / ``deploy.memory`` say otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.bundle import crd_schemas
from serving.bundle.config import DeployConfig, object_name_refused
from serving.bundle.config import object_name as config_object_name
from serving.bundle.helm_chart import CHART_DIR, VALUES_FILE
from serving.bundle.monitoring import (DASHBOARD_FILE, DASHBOARD_LABEL, Alerts, Dashboard,
                                       PrometheusRule, ServiceMonitor, expressions, promql_problem)
from serving.bundle.served_memory import ServedMemory

KUBERNETES_FILE = "kubernetes.yaml"
KSERVE_FILE = "kserve.yaml"
KSERVE_KINDS = ("ServingRuntime", "InferenceService")
MONITORING_KINDS = ("ServiceMonitor", "PrometheusRule")  # the Prometheus operator's, beside the Deployment
HTTP, GRPC, METRICS = 8000, 8001, 8002
KSERVE_HTTP, KSERVE_GRPC = 8080, 9000  # the ports KServe's Triton runtimes serve on (Knative routes HTTP to 8080)
BUNDLE_MOUNT = "/models"
KSERVE_MOUNT = "/mnt/models"  # where KServe's storage initializer puts the storageUri's files
# The image's entrypoint (Dockerfile): the bundle checked as `make serve` checks it, then tritonserver (exec).
START = ["python3", "/opt/ernie-bundle/start.py"]
SERVER_ARGS = ["--model-control-mode=none", "--strict-readiness=true", "--exit-on-error=true"]
# Triton's gauge of the time requests waited in the queue (summed, microseconds); exported on /metrics.
QUEUE_METRIC = "nv_inference_queue_duration_us"


class ManifestError(ValueError):
    """The manifests cannot be written as asked (bad bundle, or an object the schemas refuse)."""


# ------------------------------------------------------------------------------------------------
# custom resources (no typed models in the kubernetes client; the Prometheus operator's in serving.bundle.monitoring)


@dataclass(frozen=True)
class ServingRuntime:
    """serving.kserve.io/v1alpha1 ServingRuntime: the bundle's image, which KServe's stock Triton runtime is not (its
    Python has neither tokenizers nor an engine, so no python model of a bundle loads there)."""

    name: str
    namespace: str
    labels: dict[str, str]
    container: dict[str, Any]  # the serving container: image, command, args, ports, probes, resources, security
    volumes: list[dict[str, Any]]
    model_format: str = "triton"

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
                "spec": {"supportedModelFormats": [{"name": self.model_format, "version": "2", "autoSelect": False}],
                         "protocolVersions": ["v2", "grpc-v2"],
                         "annotations": {"prometheus.kserve.io/port": str(METRICS), "prometheus.kserve.io/path": "/metrics"},
                         "containers": [self.container], "volumes": list(self.volumes)}}


@dataclass(frozen=True)
class InferenceService:
    """serving.kserve.io/v1beta1 InferenceService on the bundle's own ServingRuntime (``runtime``, protocol v2)."""

    name: str
    namespace: str
    labels: dict[str, str]
    storage_uri: str
    min_replicas: int
    max_replicas: int
    runtime: str
    model_format: str = "triton"
    protocol_version: str = "v2"

    def to_dict(self) -> dict[str, Any]:
        model = {"modelFormat": {"name": self.model_format}, "runtime": self.runtime,
                 "protocolVersion": self.protocol_version, "storageUri": self.storage_uri}
        return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
                "spec": {"predictor": {"minReplicas": self.min_replicas, "maxReplicas": self.max_replicas,
                                       "model": model}}}


# ------------------------------------------------------------------------------------------------
# sizing and building


def bundle_bytes(root: Path) -> int:
    """The bundle's size as its manifest counts files (what the memory request is derived from)."""
    from serving.triton.integrity import bundle_files

    return sum((Path(root) / rel).stat().st_size for rel in bundle_files(root))


@dataclass(frozen=True)
class Sizing:
    cpu: str
    memory: str
    why: str


def sizing(bundle: dict, bundle_bytes: int, cfg: DeployConfig) -> Sizing:
    package = bundle.get("package", {})
    threads = int(package.get("instances") or 1) * int(package.get("engine_threads") or 1)
    # Two instances x every core's threads (make tune's choice, a windowed kind's default) were measured sharing
    # the cores of that machine: request those cores, not one per thread.
    measured = int((bundle.get("cpu") or {}).get("cores") or 0)
    cores = min(threads, measured) if measured else threads
    shared = f", sharing the {measured} cores they were measured on" if cores < threads else ""
    served = bundle.get("served_memory") or {}
    if served.get("engines"):  # measured at package time (serving.bundle.served_memory)
        measured_memory = ServedMemory.from_dict(served)
        mib, memory_why = measured_memory.mib(), measured_memory.why()
    else:
        mib = 1024 + 3 * math.ceil(bundle_bytes / 2**20)
        memory_why = (f"1 GiB + 3 x the bundle's {bundle_bytes / 2**20:.0f} MiB, an estimate: not measured"
                      + (f" ({served['not_measured']})" if served.get("not_measured") else ""))
    cpu, memory = cfg.cpu or str(cores), cfg.memory or f"{mib}Mi"
    why = (f"cpu {cpu}" + ("" if cfg.cpu else f" = {package.get('instances', 1)} instance(s) x "
                                             f"{package.get('engine_threads', 1)} engine thread(s){shared}, as validated")
           + f"; memory {memory}" + ("" if cfg.memory else f" = {memory_why}"))
    return Sizing(cpu, memory, why)


def _container(name: str, image: str, size: Sizing, args: list[str], ports: list[tuple[str, int]], probe_port,
               mounts: list):
    """The serving container of the Deployment and of the ServingRuntime: the image's entrypoint (the bundle
    checked, then tritonserver), its validated resources, probes on Triton's health endpoints, locked down."""
    from kubernetes import client

    def probe(path: str, period: int) -> client.V1Probe:
        return client.V1Probe(http_get=client.V1HTTPGetAction(path=path, port=probe_port), period_seconds=period,
                              initial_delay_seconds=5, failure_threshold=3, timeout_seconds=2)

    resources = client.V1ResourceRequirements(requests={"cpu": size.cpu, "memory": size.memory},
                                              limits={"cpu": size.cpu, "memory": size.memory})
    return client.V1Container(
        name=name, image=image, command=list(START), args=args,
        ports=[client.V1ContainerPort(name=n, container_port=p) for n, p in ports],
        # Ready only when every model loaded and verified its bundle's SHA-256s; live while the server answers.
        readiness_probe=probe("/v2/health/ready", 5), liveness_probe=probe("/v2/health/live", 15),
        startup_probe=client.V1Probe(http_get=client.V1HTTPGetAction(path="/v2/health/ready", port=probe_port),
                                     period_seconds=5, failure_threshold=60),
        resources=resources,
        env=[client.V1EnvVar(name="PYTHONDONTWRITEBYTECODE", value="1")],  # nothing written next to the bundle
        security_context=client.V1SecurityContext(
            run_as_non_root=True, run_as_user=1000, read_only_root_filesystem=True, allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"])),
        volume_mounts=[*mounts, client.V1VolumeMount(name="tmp", mount_path="/tmp"),
                       # the python backend passes tensors through shared memory
                       client.V1VolumeMount(name="shm", mount_path="/dev/shm")])


def _scratch_volumes():
    from kubernetes import client

    return [client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource()),
            client.V1Volume(name="shm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit="256Mi"))]


def object_name(task: str) -> str:
    """Every object's name (``serving.bundle.config.object_name``); ManifestError when Kubernetes would refuse it."""
    refused = object_name_refused(task)
    if refused:
        raise ManifestError(refused)
    return config_object_name(task)


def build(task: str, bundle: dict, bundle_bytes: int, cfg: DeployConfig) -> tuple[list[dict], list[dict], Sizing]:
    """(built-in objects, custom resources, sizing) for ``task``'s bundle, as plain dicts in apply order."""
    from kubernetes import client

    api = client.ApiClient()
    size = sizing(bundle, bundle_bytes, cfg)
    name = object_name(task)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "ernie-bundle"}
    meta = client.V1ObjectMeta(name=name, namespace=cfg.namespace, labels=labels)
    image = cfg.image.format(task=task)
    container = _container("tritonserver", image, size, [f"--model-repository={BUNDLE_MOUNT}", *SERVER_ARGS],
                           [("http", HTTP), ("grpc", GRPC), ("metrics", METRICS)], "http",
                           [client.V1VolumeMount(name="bundle", mount_path=BUNDLE_MOUNT, sub_path=task, read_only=True)])
    pod = client.V1PodSpec(
        containers=[container],
        security_context=client.V1PodSecurityContext(run_as_non_root=True, fs_group=1000,
                                                     seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")),
        volumes=[client.V1Volume(name="bundle", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                     claim_name=cfg.bundle_claim, read_only=True)), *_scratch_volumes()])
    deployment = client.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=meta,
        spec=client.V1DeploymentSpec(replicas=cfg.min_replicas,
                                     selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=pod)))
    service = client.V1Service(
        api_version="v1", kind="Service", metadata=meta,
        spec=client.V1ServiceSpec(selector=labels, ports=[
            client.V1ServicePort(name=n, port=p, target_port=n) for n, p in (("http", HTTP), ("grpc", GRPC), ("metrics", METRICS))]))
    metrics = [client.V2MetricSpec(type="Resource", resource=client.V2ResourceMetricSource(
        name="cpu", target=client.V2MetricTarget(type="Utilization", average_utilization=cfg.target_cpu_utilization)))]
    if cfg.queue_time_metric:  # through the custom-metrics API (e.g. prometheus-adapter serving Triton's gauge)
        metrics.append(client.V2MetricSpec(type="Pods", pods=client.V2PodsMetricSource(
            metric=client.V2MetricIdentifier(name=QUEUE_METRIC),
            target=client.V2MetricTarget(type="AverageValue", average_value="50000"))))
    hpa = client.V2HorizontalPodAutoscaler(
        api_version="autoscaling/v2", kind="HorizontalPodAutoscaler", metadata=meta,
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(api_version="apps/v1", kind="Deployment", name=name),
            min_replicas=cfg.min_replicas, max_replicas=cfg.max_replicas, metrics=metrics))
    # Voluntary disruptions (node drains) take one replica at a time; never 0, which would block every drain
    # of a single-replica deployment forever.
    pdb = client.V1PodDisruptionBudget(
        api_version="policy/v1", kind="PodDisruptionBudget", metadata=meta,
        spec=client.V1PodDisruptionBudgetSpec(selector=client.V1LabelSelector(match_labels=labels), max_unavailable=1))
    alerts = Alerts.of(task, bundle, cfg)
    # Grafana's sidecar (kube-prometheus-stack) loads a ConfigMap so labelled as a dashboard, from any namespace
    dashboard = client.V1ConfigMap(
        api_version="v1", kind="ConfigMap",
        metadata=client.V1ObjectMeta(name=f"{name}-dashboard", namespace=cfg.namespace,
                                     labels={**labels, DASHBOARD_LABEL[0]: DASHBOARD_LABEL[1]}),
        data={f"{name}.json": Dashboard(name, task, alerts).to_json()})
    builtin = [api.sanitize_for_serialization(o) for o in (deployment, service, hpa, pdb, dashboard)]
    # KServe: the same container on KServe's ports, serving what its storage initializer downloaded
    kserve = _container("kserve-container", image, size,
                        [f"--model-repository={KSERVE_MOUNT}", *SERVER_ARGS, f"--http-port={KSERVE_HTTP}",
                         f"--grpc-port={KSERVE_GRPC}"], [("http1", KSERVE_HTTP)], KSERVE_HTTP, [])
    custom = [ServiceMonitor(name, cfg.namespace, labels).to_dict(),
              PrometheusRule(name, cfg.namespace, labels, alerts).to_dict(),
              ServingRuntime(name, cfg.namespace, labels, api.sanitize_for_serialization(kserve),
                             api.sanitize_for_serialization(_scratch_volumes())).to_dict(),
              InferenceService(name, cfg.namespace, labels, cfg.storage_uri.format(task=task), cfg.min_replicas,
                               cfg.max_replicas, runtime=name).to_dict()]
    return builtin, custom, size


# ------------------------------------------------------------------------------------------------
# validation


@dataclass
class Check:
    kind: str
    name: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        return f"{self.kind}/{self.name}: {'valid' if self.ok else 'INVALID'}{' (' + self.detail + ')' if self.detail else ''}"


def _schema_check(obj: dict, version: str) -> str:
    """'' when ``obj`` validates strictly against the Kubernetes ``version`` schemas, else the reason."""
    import kubernetes_validate
    from kubernetes_validate.utils import VersionNotSupportedError

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        return f"{path}: {exc.message}"
    except (kubernetes_validate.SchemaNotFoundError, VersionNotSupportedError, IndexError) as exc:
        # the version is checked by DeployConfig; a kind the version lacks (e.g. an older autoscaling) lands here
        raise ManifestError(f"Kubernetes {version}: no schema for {obj.get('kind')} "
                            f"({getattr(exc, 'message', exc)})") from None
    return ""


def validate(builtin: list[dict], custom: list[dict], version: str) -> list[Check]:
    checks = []
    for obj in builtin:
        problem = _schema_check(obj, version) or promql_problem(obj)
        detail = f"Kubernetes {version} schema, strict" + ("; every query parsed as PromQL" if expressions(obj) else "")
        checks.append(Check(obj["kind"], obj["metadata"]["name"], not problem, problem or detail))
    for obj in custom:
        problem = crd_schemas.check(obj) or promql_problem(obj)
        pred = obj.get("spec", {}).get("predictor", {}) if obj.get("kind") == "InferenceService" else {}
        if not problem and pred.get("minReplicas", 0) > pred.get("maxReplicas", math.inf):
            problem = "spec/predictor: minReplicas > maxReplicas"  # KServe's webhook rule; a schema cannot say it
        checks.append(Check(obj.get("kind", "?"), obj.get("metadata", {}).get("name", "?"), not problem,
                            problem or crd_schemas.described(obj)
                            + ("; every expr parsed as PromQL" if obj.get("kind") == "PrometheusRule" else "")))
    return checks


# ------------------------------------------------------------------------------------------------
# writing


@dataclass
class Written:
    files: list[Path]
    checks: list[Check]
    sizing: Sizing

    def summary(self) -> dict[str, Any]:
        return {"files": [p.name for p in self.files], "objects": [dataclasses.asdict(c) for c in self.checks],
                "sizing": dataclasses.asdict(self.sizing)}


def chart_values(task: str, bundle: dict, bundle_bytes: int, cfg: DeployConfig) -> dict:
    """The chart values for ``task``'s bundle: every value ``serving.bundle.manifests.build`` reads, filled in the same way,
    so the chart (``serving.bundle.helm_chart``) renders the same objects."""
    object_name(task)  # ManifestError for a task whose objects' name Kubernetes would refuse
    size = sizing(bundle, bundle_bytes, cfg)
    alerts = Alerts.of(task, bundle, cfg)
    return {"task": task, "namespace": cfg.namespace, "image": cfg.image.format(task=task),
            "replicas": {"min": cfg.min_replicas, "max": cfg.max_replicas},
            "resources": {"cpu": size.cpu, "memory": size.memory},
            "bundle": {"claim": cfg.bundle_claim, "storageUri": cfg.storage_uri.format(task=task)},
            "autoscaling": {"enabled": True, "targetCPUUtilization": cfg.target_cpu_utilization,
                            "queueTimeMetric": cfg.queue_time_metric},
            "monitoring": {"enabled": True, "interval": ServiceMonitor.interval,
                           "alerts": {"model": alerts.model, "refusedShare": alerts.refused_share,
                                      "refusedMinRequests": alerts.refused_min_requests,
                                      "truncatedShare": alerts.truncated_share, "truncatedWhat": alerts.truncated_what,
                                      "truncatedMinItems": alerts.truncated_min_items,
                                      "answerMix": alerts.answer_mix,
                                      "answerDrift": alerts.answer_drift, "driftMinAnswers": alerts.drift_min_answers},
                           "dashboard": Dashboard(object_name(task), task, alerts).to_json()},
            "kserve": {"enabled": False}}


def chart_values_yaml(vals: dict, why: str) -> str:
    """The values file's text: a header saying where it came from and how to render it, then the values."""
    import yaml

    return (f"# ernie-bundle {vals['task']}: chart values written by serving.bundle.manifests from the bundle's bundle.json\n"
            f"#   helm template {object_name(vals['task'])} serving/bundle/chart/ernie-bundle -f {VALUES_FILE}"
            " [--set kserve.enabled=true]\n"
            f"# {why}\n" + yaml.safe_dump(vals, sort_keys=False, allow_unicode=True))


def write(out_dir: Path, task: str, bundle: dict, bundle_bytes: int, cfg: DeployConfig,
          helm_values: bool = False) -> Written:
    """Build, validate and write the manifests into ``out_dir``; nothing is written unless every object is valid.
    ``helm_values``: also the chart values that render the same objects (``serving.bundle.helm_chart``); the bundle
    itself does not carry them, as it does not carry the chart."""
    import yaml

    builtin, custom, size = build(task, bundle, bundle_bytes, cfg)
    checks = validate(builtin, custom, cfg.kubernetes_version)
    bad = [c for c in checks if not c.ok]
    if bad:
        raise ManifestError("; ".join(c.line() for c in bad))
    out_dir = Path(out_dir)
    header = (f"# ernie-bundle {task}: generated by serving.bundle.manifests from the bundle's bundle.json; validated against "
              f"the Kubernetes {cfg.kubernetes_version} schemas and the KServe / Prometheus operator CRD schemas.\n"
              f"# {size.why}\n")
    k8s = builtin + [o for o in custom if o["kind"] in MONITORING_KINDS]
    texts = {name: header + yaml.safe_dump_all(objs, sort_keys=False, allow_unicode=True)
             for name, objs in ((KUBERNETES_FILE, k8s), (KSERVE_FILE, [o for o in custom if o["kind"] in KSERVE_KINDS]))}
    dashboard = next(o for o in builtin if (o["metadata"].get("labels") or {}).get(DASHBOARD_LABEL[0]))
    texts[DASHBOARD_FILE] = next(iter(dashboard["data"].values()))  # the same, for an import by hand
    if helm_values:
        texts[VALUES_FILE] = chart_values_yaml(chart_values(task, bundle, bundle_bytes, cfg), size.why)
    files = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            path = out_dir / name
            if path.is_dir():
                raise ManifestError(f"{path}: a directory is in the way of the manifest file")
            tmp = path.with_name(path.name + ".partial")
            try:
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
            files.append(path)
    except OSError as exc:
        where = exc.filename or out_dir
        raise ManifestError(f"cannot write the manifests into {out_dir} ({where}: {exc.strerror or exc})") from None
    return Written(files, checks, size)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render a bundle's Kubernetes / KServe manifests again, for other values.")
    p.add_argument("--bundle", required=True, help="the bundle directory (model_repository/<task>)")
    p.add_argument("--out", required=True,
                   help="where to write kubernetes.yaml, kserve.yaml, grafana-dashboard.json and helm-values.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="deploy.<key>=<value>, repeatable")
    args = p.parse_args(argv)
    from pipeline.config import section_from_overrides
    from pipeline.errors import ConfigError
    from serving.triton.integrity import BundleIntegrityError, verify_bundle

    bundle_dir = Path(args.bundle)
    try:
        out = Path(args.out).resolve()
        if out.exists() and not out.is_dir():
            raise ManifestError(f"--out {args.out}: a file, not a directory; give the folder to write them into")
        if out == bundle_dir.resolve() or bundle_dir.resolve() in out.parents:
            raise ManifestError(f"--out {args.out} is inside the bundle, whose every file bundle.json lists: the server "
                                "would refuse the bundle after this; write them elsewhere (make manifests: runs/<task>/deploy)")
        manifest = verify_bundle(bundle_dir, allow_bytecode=True)  # a bundle that is not the one packaged gets no manifests
        cfg = section_from_overrides(DeployConfig, "deploy", args.set)
        written = write(Path(args.out), manifest["task"], manifest, bundle_bytes(bundle_dir), cfg, helm_values=True)
    except (BundleIntegrityError, ManifestError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for c in written.checks:
        print(c.line())
    print(f"wrote {', '.join(str(f) for f in written.files)}")
    chart = CHART_DIR.relative_to(Path.cwd()) if CHART_DIR.is_relative_to(Path.cwd()) else CHART_DIR
    print(f"the same objects from the Helm chart: helm template {object_name(manifest['task'])} {chart} "
          f"-f {Path(args.out) / VALUES_FILE} (--set kserve.enabled=true: the InferenceService)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
