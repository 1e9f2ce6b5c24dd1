"""A bundle's PrometheusRule and dashboard queries run in Prometheus's own engine: ``promtool test rules`` (Debian's
prometheus 2.42 package, `make prom-tools` unpacks its promtool into .venv/prometheus) on series shaped as the
ServiceMonitor's scrape stores them, each alert expected to fire, or not, at given times of a scenario, and each
query to give what a scenario expects.

The expressions parse (promql-parser, when the manifests are written); this is what they do: the windows, the
``for`` durations, the sums over pods and stub processes, the dev shares' label values matched to served ones.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROMTOOL = ROOT / ".venv" / "prometheus" / "usr" / "bin" / "promtool"
TOLERANCE = 1e-3  # how near a value must come to the one a scenario expects
ANY = "any"  # a scenario's expected value: at least one sample, whatever its value


class PromtoolMissing(RuntimeError):
    """promtool is not where `make prom-tools` puts it."""


def find_promtool() -> Path:
    binary = Path(os.environ.get("PROMTOOL", PROMTOOL))
    if not binary.is_file():
        raise PromtoolMissing(f"promtool not found at {binary}: `make prom-tools` unpacks Debian's into .venv/prometheus")
    return binary


def promtool() -> Path:
    """promtool, or a skip (never where `make test` requires it)."""
    from serving_fixtures import tool_or_skip

    return tool_or_skip(find_promtool, PromtoolMissing, "ERNIE_BUNDLE_REQUIRE_PROMTOOL")


def _value(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def series(name: str, labels: dict, values: str) -> dict:
    """One input series, ``name{labels}``, with ``values`` in promtool's notation (``0+12x180``: from 0, 12 more each
    minute; ``_`` none; ``stale`` gone)."""
    return {"series": name + "{" + ",".join(f"{k}={_value(str(v))}" for k, v in sorted(labels.items())) + "}",
            "values": values}


def scraped(name: str, labels: dict, values: str, *, namespace: str = "default", service: str = "ernie-bundle-tnews",
            pod: str = "ernie-bundle-tnews-5f7d9c-x2k4q") -> dict:
    """One input series: ``name{labels}`` as the server exports it, with the labels the ServiceMonitor's scrape adds
    for ``pod`` of ``service`` (the alerts select on namespace and service)."""
    scrape = {"namespace": namespace, "service": service, "pod": pod, "container": "tritonserver", "endpoint": "metrics",
              "job": service, "instance": f"{pod}:8002"}
    return series(name, {**labels, **scrape}, values)


def dashboard_queries(dashboard: dict) -> dict[tuple[str, str], str]:
    """(panel title, legend) -> the panel's query as Grafana sends it (serving.bundle.monitoring's variables set)."""
    from serving.bundle.monitoring import dashboard_expressions

    out = {}
    for where, expr in dashboard_expressions(dashboard):
        _, i, _, k, _ = where.split("/")
        panel = dashboard["panels"][int(i)]
        out[panel["title"], panel["targets"][int(k)]["legendFormat"]] = expr
    return out


@dataclass
class Scenario:
    """Series over time, and which alerts fire when: ``firing`` maps an evaluation time ("2h30m") to the alert names
    firing then (every other alert of the rule is expected silent at that time); ``values`` maps a PromQL expression
    and a time to the one value it gives then, within ``TOLERANCE`` (``None``: it gives nothing; ``ANY``: something;
    "< 0.1" or "> 0.1": a value below or above)."""

    name: str
    series: list[dict]
    firing: dict[str, set[str]]
    values: list[tuple[str, str, float | None]] = field(default_factory=list)


def rules_of(rule: dict) -> dict[str, dict]:
    """A PrometheusRule object's alerts by name."""
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def check(rule: dict, scenarios: list[Scenario], work: Path) -> str:
    """Run ``scenarios`` against ``rule`` (a PrometheusRule object) in promtool; fails naming what differed (each
    expression a scenario's ``values`` check, as evaluated)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, allow_unicode=True))
    alerts = rules_of(rule)
    tests = []
    for sc in scenarios:
        unknown = {a for names in sc.firing.values() for a in names} - set(alerts)
        assert not unknown, f"{sc.name}: the rule has no alert {sorted(unknown)} (it has {sorted(alerts)})"
        tests.append({
            "name": sc.name, "interval": "1m", "input_series": sc.series,
            "alert_rule_test": [
                {"eval_time": at, "alertname": name,
                 "exp_alerts": ([{"exp_labels": alerts[name].get("labels", {}),
                                  "exp_annotations": alerts[name].get("annotations", {})}] if name in names else [])}
                for at, names in sc.firing.items() for name in alerts],
            # promtool compares values exactly: a rate's floating point (0.39999999999999997) and dev's shares as
            # the rule carries them (4 significant digits) are held to within TOLERANCE instead
            "promql_expr_test": [
                {"expr": (expr if v is None else f"count({expr}) >= bool 1" if v == ANY
                          else f"({expr}) {v[0]} bool {v[1:].strip()}" if isinstance(v, str)
                          else f"abs(({expr}) - {v!r}) <= bool {TOLERANCE}"), "eval_time": at,
                 "exp_samples": [] if v is None else [{"labels": "{}", "value": 1}]}
                for expr, at, v in sc.values]})
    path = work / "alerts_test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests},
                                   allow_unicode=True, sort_keys=False))
    run = subprocess.run([str(promtool()), "test", "rules", str(path)], capture_output=True, text=True, timeout=120,
                         cwd=work)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "SUCCESS" in out, out[-6000:]
    return out


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def counter(*phases: tuple[int, float]) -> str:
    """promtool's notation for a counter sampled each minute from 0: for each ``(minutes, per_minute)`` phase in turn,
    ``per_minute`` more each minute (``counter((60, 12), (120, 0))``: 12 a minute for an hour, then still)."""
    parts, value = ["0"], 0.0
    for minutes, per in phases:
        parts.append(f"{_number(value + per)}+{_number(per)}x{minutes - 1}")
        value += per * minutes
    return " ".join(parts)


def every_minute(moved: dict[tuple[str, frozenset], float], *, namespace: str, service: str, minutes: int = 180,
                 change=None) -> list[dict]:
    """Input series as if the traffic that moved the server's series by ``moved`` ((name, labels) -> how much, as
    scraped) came once a minute for ``minutes`` minutes to a pod of ``service``; ``change(name, labels, delta)`` gives
    a series its own moves instead: a number a minute, or promtool's notation for the whole series."""
    out = []
    for (name, labels), delta in sorted(moved.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))):
        got = change(name, dict(labels), delta) if change else delta
        values = got if isinstance(got, str) else counter((minutes, got))
        out.append(scraped(name, dict(labels), values, namespace=namespace, service=service))
    return out
