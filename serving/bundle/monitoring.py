"""What Prometheus and Grafana watch of a bundle's Deployment, over one set of queries (``Queries``):

    ServiceMonitor     Prometheus scrapes Triton's /metrics (port 8002) on every pod
    PrometheusRule     alerts: no pod up; a server fault; refusals, cut texts and the answers' mix against the dev
                       set's numbers (``Alerts``: validate's ``dev_counts``, the model card's shares)
    Dashboard          a Grafana dashboard (JSON model) of the same series and the same references, shipped in a
                       ConfigMap that kube-prometheus-stack's Grafana sidecar loads (label ``grafana_dashboard: "1"``)
                       and as ``grafana-dashboard.json`` for an import by hand

The series are Triton's (``nv_inference_*``) and the served models' own (``serving/triton/served_metrics.py``), as the
ServiceMonitor's scrape stores them: labelled with the pod's namespace and service.  An alert and the panel that
shows the same thing are one expression (the drift alert's distance is the drift panel's line), so what a panel shows
is what an alert fires on.  Each expression is parsed as PromQL when the manifests are written (``promql_problem``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from serving.bundle.config import DeployConfig

# The alerts' thresholds (a share of requests, a share of texts served): refusals above REFUSED_SHARE for 15 minutes,
# once the window holds REFUSED_MIN_REQUESTS of them;
# texts cut to max_seq_len above twice dev's share, and at least TRUNCATED_FLOOR, for 30 minutes, once an hour holds
# enough texts that chance stays under it (``truncated_min_items``, at least TRUNCATED_MIN_ITEMS); the answers' mix
# (deploy.answer_drift) once an hour holds enough answers that sampling alone moves dev's mix by half the threshold
# (``drift_min_answers``; at least DRIFT_MIN_ANSWERS), on at most DRIFT_MAX_LABELS labels (the expression names each).
REFUSED_SHARE = 0.05
# a client that keeps sending what is refused, not one mistaken request on a trickle (one of 10 requests is 10%, and
# stays in the window its 15 minutes)
REFUSED_MIN_REQUESTS = 10
TRUNCATED_FLOOR = 0.01
TRUNCATED_MIN_ITEMS = 100
DRIFT_MIN_ANSWERS = 1000
DRIFT_MAX_LABELS = 200
# The label kube-prometheus-stack's Grafana sidecar loads dashboards from ConfigMaps by (its chart's default).
DASHBOARD_LABEL = ("grafana_dashboard", "1")
DASHBOARD_FILE = "grafana-dashboard.json"
# What ``ernie_bundle_truncated_items_total`` counts where validate's dev_counts do not say (``truncated_what``: a
# reading-comprehension bundle's questions cut to max_query_len)
TRUNCATED_WHAT = "texts cut to max_seq_len"
CONTAINER = "tritonserver"  # the Deployment's serving container (manifests.build), for the kubelet's CPU series


def _share_text(x: float) -> str:
    """A threshold as the rule's expression and the chart's values carry it (a string: the chart renders it as is)."""
    return f"{x:.4g}"


def _promql_string(text: str) -> str:
    """``text`` as a PromQL string literal, for ``label_replace``'s replacement (where ``$`` expands a group)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$") + '"'


def dev_mix(answers: dict) -> str:
    """The dev set's answer shares as a PromQL instant vector, one sample per ``label`` (the served counters' label):
    ``label_replace(vector(0.02), "label", "100", "", "") or ...``, labels in sorted order."""
    total = sum(answers.values())
    return " or ".join(f'label_replace(vector({_share_text(answers[label] / total)}), "label", {_promql_string(label)}, "", "")'
                       for label in sorted(answers))


def truncated_min_items(share: float, threshold: float) -> int:
    """The texts an hour must hold before the cut-texts alert may fire: enough that a share ``share`` (dev's) stays
    under ``threshold`` by chance, three standard deviations of the binomial (n >= 9 p(1-p) / (t-p)^2), rounded up
    to hundreds, at least TRUNCATED_MIN_ITEMS.  Dev's 1% against the 2% alert waits for 900 texts (at 100 an hour, 3
    cut of them, 3%, happens one hour in twelve); TNEWS's 0.01% for 100."""
    return max(TRUNCATED_MIN_ITEMS, 100 * math.ceil(9 * share * (1 - share) / (threshold - share) ** 2 / 100))


def drift_min_answers(answers: dict, threshold: float) -> int:
    """The answers an hour must hold before the drift alert may fire: enough that sampling alone, traffic drawn from
    dev's own mix, moves it by at most half ``threshold`` in expectation.  A label of share p is off by
    sqrt(2p(1-p)/(pi n)) on average in n answers (the binomial's normal estimate), so the distance is ~C / sqrt(n),
    C = sum of sqrt(2p(1-p)/pi) / 2, and n = (2C / threshold)^2, rounded up to hundreds, at least DRIFT_MIN_ANSWERS.
    At 1,000 answers 15 equal labels are 0.047 apart by chance, 100 are 0.126 (an alert at 0.1 firing on dev's own
    mix): they wait for 1,000 and 6,400 (sampled: 0.09 and 0.07 the most in 20,000 hours)."""
    total = sum(answers.values())
    c = sum(math.sqrt(2 * (k / total) * (1 - k / total) / math.pi) for k in answers.values()) / 2
    return max(DRIFT_MIN_ANSWERS, 100 * math.ceil((2 * c / threshold) ** 2 / 100))


@dataclass(frozen=True)
class Alerts:
    """What the PrometheusRule (and the dashboard) hold the served counters to: ``model`` is the model the clients
    call (Triton's request counts of it are the denominators); ``truncated_share`` is empty where the bundle's models
    count nothing cut (UIE) or validate counted none on dev (``dev_truncated_share``: dev's own share;
    ``truncated_what``: what was cut, to which limit); ``answer_mix`` (dev's shares, ``dev_mix``) is empty where
    they count no answers, and ``answer_drift`` where no drift alert is wanted (deploy.answer_drift 0);
    ``drift_min_answers`` and ``truncated_min_items``: the answers and texts an hour must hold before those fire."""

    model: str
    refused_share: str = _share_text(REFUSED_SHARE)
    refused_min_requests: int = REFUSED_MIN_REQUESTS
    truncated_share: str = ""
    dev_truncated_share: str = ""
    truncated_what: str = TRUNCATED_WHAT
    answer_mix: str = ""
    answer_drift: str = ""
    drift_min_answers: int = DRIFT_MIN_ANSWERS
    truncated_min_items: int = TRUNCATED_MIN_ITEMS

    @classmethod
    def of(cls, task: str, bundle: dict, cfg: DeployConfig) -> "Alerts":
        counts = ((bundle.get("metrics") or {}).get("summary") or {}).get("dev_counts") or {}
        cut = dev_cut = ""
        cut_items = TRUNCATED_MIN_ITEMS
        if isinstance(counts.get("truncated"), int) and counts.get("items"):
            share = counts["truncated"] / counts["items"]
            threshold = max(TRUNCATED_FLOOR, 2 * share)
            dev_cut, cut = _share_text(share), _share_text(threshold)
            if threshold < 1:  # at 1 or more the alert can never fire: no texts to wait for
                cut_items = truncated_min_items(share, threshold)
        answers = counts.get("answers") or {}
        mix = dev_mix(answers) if 0 < len(answers) <= DRIFT_MAX_LABELS and sum(answers.values()) else ""
        drift = _share_text(cfg.answer_drift) if cfg.answer_drift and mix else ""
        least = drift_min_answers(answers, cfg.answer_drift) if drift else DRIFT_MIN_ANSWERS
        return cls((bundle.get("models") or {}).get("ensemble") or task, truncated_share=cut,
                   dev_truncated_share=dev_cut, truncated_what=str(counts.get("truncated_what") or TRUNCATED_WHAT),
                   answer_mix=mix, answer_drift=drift, drift_min_answers=least, truncated_min_items=cut_items)


@dataclass(frozen=True)
class Queries:
    """PromQL over one Deployment's series: ``namespace`` and ``name`` (its service's, its HorizontalPodAutoscaler's)
    pick them (the labels the ServiceMonitor's scrape, and kube-state-metrics, give them), ``model`` is the model the
    clients call."""

    namespace: str
    name: str
    model: str

    @property
    def selector(self) -> str:
        return f'namespace="{self.namespace}",service="{self.name}"'

    @property
    def called(self) -> str:
        return f'{self.selector},model="{self.model}"'

    def total(self, metric: str, window: str, called: bool = False, fn: str = "rate") -> str:
        """``metric``'s rate (or increase) over ``window``, summed over the pods and stub processes."""
        return f"sum({fn}({metric}{{{self.called if called else self.selector}}}[{window}]))"

    def up(self) -> str:
        return f"up{{{self.selector}}}"

    def replicas(self, which: str) -> str:
        """The HorizontalPodAutoscaler's replicas (kube-state-metrics): ``which`` is ``status_current``,
        ``status_desired`` or ``spec_max``."""
        return (f'max(kube_horizontalpodautoscaler_{which}_replicas{{namespace="{self.namespace}",'
                f'horizontalpodautoscaler="{self.name}"}})')

    def scaling_limited(self) -> str:
        """1 while the HorizontalPodAutoscaler wants replicas its bounds refuse (kube-state-metrics' condition
        ScalingLimited): at its most replicas, that its pods' CPU is over the target."""
        return (f'max(kube_horizontalpodautoscaler_status_condition{{namespace="{self.namespace}",'
                f'horizontalpodautoscaler="{self.name}",condition="ScalingLimited",status="true"}})')

    def requests(self, window: str) -> str:
        """Requests to the model clients call a second: answered and failed (Triton counts a refusal as failed)."""
        return (f"({self.total('nv_inference_request_success', window, True)} + "
                f"{self.total('nv_inference_request_failure', window, True)})")

    def refused_share(self, window: str) -> str:
        return f"{self.total('ernie_bundle_refused_requests_total', window)} / {self.requests(window)}"

    def cut_share(self, window: str) -> str:
        """Texts (pairs) cut to max_seq_len, as a share of the texts the model clients call was sent."""
        texts = self.total("nv_inference_count", window, True)
        return f"{self.total('ernie_bundle_truncated_items_total', window)} / {texts}"

    def answer_shares(self, window: str) -> str:
        """Each label's share of the answers (one sample per ``label``)."""
        answers = f"ernie_bundle_answers_total{{{self.selector}}}"
        return f"sum by (label) (rate({answers}[{window}])) / scalar(sum(rate({answers}[{window}])))"

    def answer_shift(self, mix: str, window: str) -> str:
        """Each label's share of the answers less its share in ``mix`` (dev's, ``dev_mix``)."""
        return f"{self.answer_shares(window)} - on (label) ({mix})"

    def answer_distance(self, mix: str, window: str) -> str:
        """Total variation distance between the answers' shares and ``mix``: half the sum of the shifts' sizes.  Every
        label's series exists from the start (served_metrics creates them at zero), so a label never answered counts
        in full."""
        return f"0.5 * sum(abs({self.answer_shift(mix, window)}))"


@dataclass(frozen=True)
class ServiceMonitor:
    """monitoring.coreos.com/v1 ServiceMonitor: Prometheus scrapes Triton's /metrics."""

    name: str
    namespace: str
    labels: dict[str, str]
    port: str = "metrics"
    interval: str = "15s"

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
                "spec": {"selector": {"matchLabels": dict(self.labels)},
                         "endpoints": [{"port": self.port, "path": "/metrics", "interval": self.interval}]}}


@dataclass(frozen=True)
class PrometheusRule:
    """monitoring.coreos.com/v1 PrometheusRule: alerts on this Deployment's pods (the series the ServiceMonitor's
    scrape labels with its namespace and service, and kube-state-metrics' of its autoscaler): no pod answering the
    scrape at all; a server fault at all; refused requests above a share of requests; at its most replicas and
    wanting more; texts cut above dev's share (the model card's); the answers' mix away from dev's."""

    name: str
    namespace: str
    labels: dict[str, str]
    alerts: Alerts

    def to_dict(self) -> dict[str, Any]:
        q = Queries(self.namespace, self.name, self.alerts.model)
        # the expressions sum their series away: each alert says whose it is, for Alertmanager's routes and the reader
        where = {"namespace": self.namespace, "service": self.name}
        rules = [
            # every other alert reads the pods' series, and says nothing once there are none: no pod answering the
            # scrape (all down, none scheduled, or a ServiceMonitor that finds none) is this alert's
            {"alert": "ErnieBundleDown",
             "expr": f"absent({q.up()} == 1)", "for": "5m", "labels": {"severity": "critical", **where},
             "annotations": {"summary": f"{self.name}: no pod answers Prometheus's scrape",
                             "description": "No pod of the Deployment is up (or none is scraped): nothing serves, and "
                                            "the other alerts have no series to fire on. The pods' events and logs "
                                            "say why (the image's start names a bundle file that fails its check)."}},
            {"alert": "ErnieBundleServerFaults",
             "expr": f"{q.total('ernie_bundle_failed_requests_total', '5m', fn='increase')} > 0",
             "labels": {"severity": "critical", **where},
             "annotations": {"summary": f"{self.name}: requests failed on the server's side",
                             "description": "ernie_bundle_failed_requests_total rose: the server log (the pod's) "
                                            "says why."}},
            {"alert": "ErnieBundleRequestsRefused",
             "expr": (f"{q.refused_share('15m')} > {self.alerts.refused_share} and on () "
                      f"{q.total('ernie_bundle_refused_requests_total', '15m', fn='increase')} >= "
                      f"{self.alerts.refused_min_requests}"),
             "for": "15m", "labels": {"severity": "warning", **where},
             "annotations": {"summary": f"{self.name}: over {self.alerts.refused_share} of requests refused as sent "
                                        f"({self.alerts.refused_min_requests} or more in 15 minutes)",
                             "description": "Clients send what the bundle refuses (empty, not UTF-8, too long, too "
                                            "many texts): the refusal names the field."}},
            {"alert": "ErnieBundleAtCapacity",
             "expr": (f"{q.replicas('status_current')} >= {q.replicas('spec_max')} and on () "
                      f"{q.scaling_limited()} == 1"),
             "for": "15m", "labels": {"severity": "warning", **where},
             "annotations": {"summary": f"{self.name}: at its most replicas, and the autoscaler wants more",
                             "description": "More traffic than the Deployment's most replicas serve: their CPU is "
                                            "over the HorizontalPodAutoscaler's target and it may not add one "
                                            "(maxReplicas, deploy.max_replicas). Raise it; the dashboard's "
                                            "milliseconds a request show how long requests wait."}}]
        if self.alerts.truncated_share:
            rules.append(
                {"alert": "ErnieBundleTextsCut",
                 "expr": (f"{q.cut_share('1h')} > {self.alerts.truncated_share} and on () "
                          f"{q.total('nv_inference_count', '1h', True, fn='increase')} >= "
                          f"{self.alerts.truncated_min_items}"),
                 "for": "30m", "labels": {"severity": "warning", **where},
                 "annotations": {"summary": f"{self.name}: over {self.alerts.truncated_share} of "
                                            f"{self.alerts.truncated_what} (an hour of "
                                            f"{self.alerts.truncated_min_items} or more)",
                                 "description": "Served inputs are longer than the dev set's (the model card's share): "
                                                "the model does not read their end. A longer limit is a new bundle, "
                                                "validated again."}})
        if self.alerts.answer_mix and self.alerts.answer_drift:
            answers = q.total("ernie_bundle_answers_total", "1h", fn="increase")
            rules.append(
                {"alert": "ErnieBundleAnswersDrift",
                 "expr": (f"{q.answer_distance(self.alerts.answer_mix, '1h')} > {self.alerts.answer_drift} "
                          f"and on () {answers} >= {self.alerts.drift_min_answers}"),
                 "for": "1h", "labels": {"severity": "warning", **where},
                 "annotations": {"summary": f"{self.name}: the answers' mix is over {self.alerts.answer_drift} from "
                                            f"the dev set's (an hour of {self.alerts.drift_min_answers} answers or "
                                            "more)",
                                 "description": "Total variation distance between the last hour's answers by label "
                                                "and the dev set's (the model card's shares): the traffic is not "
                                                "what the bundle was validated on. The dashboard's answers by label "
                                                "show which moved; its dev numbers may not hold."}})
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
                "spec": {"groups": [{"name": self.name, "rules": rules}]}}


# Grafana substitutes these in a panel's query: the dashboard's namespace variable, and a rate window of at least four
# scrape intervals (1m at the ServiceMonitor's 15s).  A query is parsed, and evaluated in the tests (series a minute
# apart), with them set as here.
GRAFANA_VARIABLES = {"$namespace": "default", "$__rate_interval": "5m"}


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str  # Grafana's unit id
    targets: tuple[tuple[str, str], ...]  # (legend, PromQL)


@dataclass(frozen=True)
class Dashboard:
    """A Grafana dashboard of one bundle's Deployment in any namespace (the ``namespace`` variable, from the pods
    Prometheus scrapes): its replicas, what the pods serve, how long a request takes and waits, the CPU they use
    against what they request, and the served counters against the dev set's numbers (the same references and
    expressions as the alerts)."""

    name: str  # the Deployment's (and its service's) name
    task: str
    alerts: Alerts

    def panels(self) -> list[Panel]:
        q = Queries("$namespace", self.name, self.alerts.model)
        w = "$__rate_interval"
        pods = f'namespace="$namespace",pod=~"{self.name}-[a-z0-9]+-[a-z0-9]+",container="{CONTAINER}"'
        panels = [
            Panel("Pods up", "Pods answering Prometheus's scrape (ErnieBundleDown: none for 5 minutes).", "short",
                  (("up", f"sum({q.up()})"),)),
            Panel("Replicas", "The HorizontalPodAutoscaler's (kube-state-metrics): ErnieBundleAtCapacity fires while "
                  "they are at the most and it wants more.", "short",
                  (("current", q.replicas("status_current")), ("desired", q.replicas("status_desired")),
                   ("most", q.replicas("spec_max")))),
            Panel("Requests a second", "To the model clients call: answered, refused as sent (HTTP 400), failed on "
                  "the server (ErnieBundleServerFaults).", "reqps",
                  (("answered", q.total("nv_inference_request_success", w, True)),
                   ("refused", q.total("ernie_bundle_refused_requests_total", w)),
                   ("failed on the server", q.total("ernie_bundle_failed_requests_total", w)))),
            Panel("Refused, share of requests", "ErnieBundleRequestsRefused fires above the line for 15 minutes, once "
                  f"{self.alerts.refused_min_requests} or more are refused in them.",
                  "percentunit", (("refused", q.refused_share(w)), ("alert", f"vector({self.alerts.refused_share})"))),
            Panel("Texts a second", "Texts (pairs) the model clients call was sent, batched or not.", "short",
                  (("texts", q.total("nv_inference_count", w, True)),)),
            Panel("Milliseconds a request", "Triton's time per request answered, in all and waiting in the models' "
                  "queues (every model of the bundle).", "ms",
                  (("in all", f"{q.total('nv_inference_request_duration_us', w, True)} / "
                              f"{q.total('nv_inference_request_success', w, True)} / 1000"),
                   ("in queues", f"{q.total('nv_inference_queue_duration_us', w)} / "
                                 f"{q.total('nv_inference_request_success', w, True)} / 1000"))),
            Panel("CPU cores by pod", "The serving container's CPU (the kubelet's) against its request "
                  "(kube-state-metrics): the HorizontalPodAutoscaler scales on their ratio.", "short",
                  (("{{pod}}", f"sum by (pod) (rate(container_cpu_usage_seconds_total{{{pods}}}[{w}]))"),
                   ("requested", f'max(kube_pod_container_resource_requests{{{pods},resource="cpu"}})')))]
        if self.alerts.truncated_share:
            what = self.alerts.truncated_what
            panels.append(Panel(f"{what[0].upper()}{what[1:]}, share of the last hour",
                                "Served against the dev set's share (the model card's); ErnieBundleTextsCut fires "
                                "above the alert line for 30 minutes.", "percentunit",
                                (("served", q.cut_share("1h")),
                                 ("dev set", f"vector({self.alerts.dev_truncated_share})"),
                                 ("alert", f"vector({self.alerts.truncated_share})"))))
        if self.alerts.answer_mix:
            panels.append(Panel("Answers by label, share of the last hour", "Each label's share of the answers "
                                "(the model card gives the dev set's).", "percentunit",
                                (("{{label}}", q.answer_shares("1h")),)))
            panels.append(Panel("Answers by label, share of the last hour less the dev set's", "Which labels the "
                                "served answers moved to and from (the drift alert's distance is half the sum of "
                                "these, without their signs).", "percentunit",
                                (("{{label}}", q.answer_shift(self.alerts.answer_mix, "1h")),)))
            drift = (("alert", f"vector({self.alerts.answer_drift})"),) if self.alerts.answer_drift else ()
            panels.append(Panel("Answers' distance from the dev set's mix", "Total variation distance of the last "
                                "hour's answers by label from the dev set's shares; ErnieBundleAnswersDrift fires "
                                f"above the alert line for an hour once the hour holds "
                                f"{self.alerts.drift_min_answers} answers.",
                                "short", (("distance", q.answer_distance(self.alerts.answer_mix, "1h")), *drift)))
        return panels

    def uid(self) -> str:
        """Grafana's id of the dashboard (at most 40 characters): the Deployment's name, or a longer one's start and
        a hash of the whole (two tasks that share 40 characters keep two dashboards)."""
        import hashlib

        if len(self.name) <= 40:
            return self.name
        return f"{self.name[:31]}-{hashlib.sha256(self.name.encode()).hexdigest()[:8]}"

    def to_json(self) -> str:
        """The dashboard's JSON model, built with Grafana's own builders (grafana-foundation-sdk: Grafana 11.6's
        schema), two panels a row."""
        from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos, VariableRefresh

        source = DataSourceRef(type_val="prometheus", uid="${datasource}")
        board = (dashboard.Dashboard(f"ernie-bundle {self.task}").uid(self.uid()).tags(["ernie-bundle"])
                 .refresh("30s").time("now-6h", "now").timezone("browser")
                 .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
                 .with_variable(dashboard.QueryVariable("namespace").label("Namespace").datasource(source)
                                .query(f'label_values(up{{service="{self.name}"}}, namespace)')
                                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)))
        for i, p in enumerate(self.panels()):
            panel = (timeseries.Panel().title(p.title).description(p.description).datasource(source).unit(p.unit)
                     .grid_pos(GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2))))
            for k, (legend, expr) in enumerate(p.targets):
                query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + k))
                panel = panel.with_target(query)
            board = board.with_panel(panel)
        return JSONEncoder(indent=2, ensure_ascii=False).encode(board.build()) + "\n"


def dashboard_expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL as Grafana sends it with ``GRAFANA_VARIABLES`` set) of every panel's query."""
    out = []
    for i, panel in enumerate(dashboard.get("panels", [])):
        for k, target in enumerate(panel.get("targets", [])):
            expr = str(target.get("expr", ""))
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            out.append((f"panels/{i}/targets/{k}/expr", expr))
    return out


def expressions(obj: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every expression ``obj`` carries: a PrometheusRule's rules, a dashboard ConfigMap's
    queries."""
    if obj.get("kind") == "PrometheusRule":
        return [(f"spec/groups/{g}/rules/{r}/expr", str(rule["expr"]))
                for g, group in enumerate(obj["spec"]["groups"]) for r, rule in enumerate(group["rules"])]
    if obj.get("kind") == "ConfigMap" and (obj.get("metadata", {}).get("labels") or {}).get(DASHBOARD_LABEL[0]):
        return [(f"data/{key}/{where}", expr) for key, text in (obj.get("data") or {}).items()
                for where, expr in dashboard_expressions(json.loads(text))]
    return []


def promql_problem(obj: dict) -> str:
    """'' unless ``obj`` carries an expression Prometheus would not run (the schemas take any string): each parsed by
    ``promql-parser`` (the Rust promql-parser crate, Prometheus' grammar)."""
    import promql_parser

    for where, expr in expressions(obj):
        try:
            promql_parser.parse(expr)
        except ValueError as exc:
            return f"{where}: not PromQL ({' '.join(str(exc).split())})"
    return ""
