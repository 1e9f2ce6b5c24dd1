"""The PrometheusRule and the Grafana dashboard a bundle ships (serving/bundle/monitoring.py), evaluated by
Prometheus's own engine (promtool test rules) on two pods' worth of series, shaped as the ServiceMonitor's scrape
stores what Triton and the served models export (and the kubelet's and kube-state-metrics' CPU series): which alert
fires when, what the drift alert measures, and what each panel shows."""

from __future__ import annotations

from dataclasses import dataclass, replace

from promtool_scenarios import ANY, Scenario, check, counter, dashboard_queries, rules_of, scraped, series

QUOTED = 'news "a" $1 \\ b'  # a label value PromQL and label_replace would each read otherwise, were it not escaped
DEV = {"items": 1000, "truncated": 10, "answers": {"体育": 200, QUOTED: 300, "其他": 500}}
PODS = ("ernie-bundle-tnews-5f7d9c-x2k4q", "ernie-bundle-tnews-5f7d9c-p8m3z")  # a Deployment's pods' names
ENSEMBLE = {"model": "tnews", "version": "1"}  # Triton's request counts of the model clients call
TOKENIZER = {"model": "tnews_tokenizer", "model_instance": "tnews_tokenizer_0_0", "pid": "31"}
POSTPROCESS = {"model": "tnews_postprocess", "model_instance": "tnews_postprocess_0_0", "pid": "32"}
ENGINE = {"model": "tnews_model", "version": "1"}  # the ensemble's engine step, where requests wait in its queue


@dataclass(frozen=True)
class Minute:
    """One pod's traffic in a minute: requests answered, refused and failed; texts (of the answered requests), those
    cut, and answers by label; CPU seconds the serving container used.  The default is the dev set's mix: 1% cut,
    answers 20/30/50%; 10 ms a request, 2 of them in a queue; 1.5 cores."""

    answered: float = 60
    refused: float = 0
    failed: float = 0
    texts: float = 600
    cut: float = 6
    answers: tuple = (("体育", 120), (QUOTED, 180), ("其他", 300))
    cpu_seconds: float = 90
    queued_us: float = 2_000  # of a request's 10,000 us


LIKE_DEV = Minute()


def pod(name: str, *phases: tuple[int, Minute], service: str = "ernie-bundle-tnews", namespace: str = "default",
        tokenizer: dict = TOKENIZER, postprocess: dict = POSTPROCESS) -> list[dict]:
    """A pod's series through ``phases`` ((minutes, traffic a minute) in turn), from minute 0."""
    def grows(per) -> str:
        return counter(*((minutes, per(m)) for minutes, m in phases))

    def at(metric, labels, per):
        return scraped(metric, labels, grows(per), namespace=namespace, service=service, pod=name)

    # every label's series, at zero until answered: the served models create them so up front (served_metrics)
    labels = sorted({*DEV["answers"], *(label for _, m in phases for label, _ in m.answers)})
    container = {"namespace": namespace, "pod": name, "container": "tritonserver"}
    minutes = sum(minutes for minutes, _ in phases)
    return [scraped("up", {}, f"1x{minutes}", namespace=namespace, service=service, pod=name),  # Prometheus's own
            # the kubelet's (cAdvisor) and kube-state-metrics' series of the pod's serving container
            series("container_cpu_usage_seconds_total", {**container, "job": "kubelet"}, grows(lambda m: m.cpu_seconds)),
            series("kube_pod_container_resource_requests", {**container, "resource": "cpu", "unit": "core",
                                                            "job": "kube-state-metrics"}, f"2x{minutes}"),
            at("nv_inference_request_duration_us", ENSEMBLE, lambda m: m.answered * 10_000),
            at("nv_inference_queue_duration_us", ENSEMBLE, lambda m: 0),
            at("nv_inference_queue_duration_us", ENGINE, lambda m: m.answered * m.queued_us),
            at("nv_inference_request_success", ENSEMBLE, lambda m: m.answered),
            at("nv_inference_request_failure", ENSEMBLE, lambda m: m.refused + m.failed),  # Triton: one failure count
            at("nv_inference_count", ENSEMBLE, lambda m: m.texts),
            at("ernie_bundle_refused_requests_total", tokenizer, lambda m: m.refused),
            at("ernie_bundle_failed_requests_total", tokenizer, lambda m: m.failed),
            at("ernie_bundle_truncated_items_total", tokenizer, lambda m: m.cut),
            *(at("ernie_bundle_answers_total", {**postprocess, "label": label}, lambda m, x=label: dict(m.answers).get(x, 0))
              for label in labels)]


def autoscaler(current: int, most: int, limited: bool = False, minutes: int = 180,
               desired: int | None = None) -> list[dict]:
    """kube-state-metrics' series of the Deployment's HorizontalPodAutoscaler: its replicas now, wanted and at most,
    and its condition ScalingLimited (``limited``: it wants replicas its bounds refuse)."""
    labels = {"namespace": "default", "horizontalpodautoscaler": "ernie-bundle-tnews", "job": "kube-state-metrics"}
    return [*(series(f"kube_horizontalpodautoscaler_{which}_replicas", labels, f"{n}x{minutes}")
              for which, n in (("status_current", current),
                               ("status_desired", current if desired is None else desired), ("spec_max", most))),
            *(series("kube_horizontalpodautoscaler_status_condition",
                     {**labels, "condition": "ScalingLimited", "status": status}, f"{int(on)}x{minutes}")
              for status, on in (("true", limited), ("false", not limited), ("unknown", False)))]


def reloaded(name: str, at: int, minutes: int = 180) -> list[dict]:
    """A pod like dev whose models are loaded again at minute ``at``: Triton's own series go on; the stub processes'
    end and new processes' (new pids) start from zero."""
    triton = [s for s in pod(name, (minutes, LIKE_DEV)) if not s["series"].startswith("ernie_bundle")]
    ended = [s for s in pod(name, (at, LIKE_DEV)) if s["series"].startswith("ernie_bundle")]
    started = [{**s, "values": f"_x{at} " + s["values"]}
               for s in pod(name, (minutes - at, LIKE_DEV), tokenizer={**TOKENIZER, "pid": "77"},
                            postprocess={**POSTPROCESS, "pid": "78"})
               if s["series"].startswith("ernie_bundle")]
    return [*triton, *ended, *started]


def replaced(old: str, new: str, at: int, minutes: int = 180) -> list[dict]:
    """Pod ``old`` like dev until minute ``at`` (then its series go stale: the scrape target is gone), pod ``new``
    from then on, every series from zero."""
    gone = [{**s, "values": s["values"] + " stale"} for s in pod(old, (at, LIKE_DEV))]
    came = [{**s, "values": f"_x{at + 1} " + s["values"]} for s in pod(new, (minutes - at - 1, LIKE_DEV))]
    return [*gone, *came]


def tnews_rule(**deploy) -> dict:
    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build

    bundle = {"package": {"instances": 1, "engine_threads": 2}, "models": {"ensemble": "tnews"},
              "metrics": {"summary": {"dev_counts": DEV}}}
    _, custom, _ = build("tnews", bundle, 10 * 2**20, DeployConfig(**deploy))
    return next(o for o in custom if o["kind"] == "PrometheusRule")


def test_the_alerts_fire_on_what_they_name_and_only_then(tmp_path):
    rule = tnews_rule()
    assert set(rules_of(rule)) == {"ErnieBundleDown", "ErnieBundleServerFaults", "ErnieBundleAtCapacity", "ErnieBundleRequestsRefused", "ErnieBundleTextsCut",
                                   "ErnieBundleAnswersDrift"}
    tvd = rules_of(rule)["ErnieBundleAnswersDrift"]["expr"].split(" > ")[0]  # what the drift alert measures
    quiet = {"30m": set(), "1h30m": set(), "3h": set()}
    skewed = Minute(answers=(("体育", 120), (QUOTED, 480)))  # answers leave 其他 for QUOTED: 0.2 / 0.8 / 0
    scenarios = [
        Scenario("like dev on two pods for three hours: nothing", [*pod(PODS[0], (180, LIKE_DEV)),
                                                                   *pod(PODS[1], (180, LIKE_DEV))], quiet,
                 values=[(tvd, "3h", 0.0)]),
        # after an hour, one pod's answers move from 其他 to QUOTED: the two pods' hour is 0.2 / 0.55 / 0.25 against
        # 0.2 / 0.3 / 0.5, a distance of 0.25, once the hour is all after the move; the alert waits its hour
        Scenario("the answers' mix drifts on one pod", [*pod(PODS[0], (60, LIKE_DEV), (120, skewed)),
                                                        *pod(PODS[1], (180, LIKE_DEV))],
                 {"1h30m": set(), "2h": set(), "3h": {"ErnieBundleAnswersDrift"}}, values=[(tvd, "3h", 0.25)]),
        # the same drift on a trickle: under 1,000 answers an hour (960) says nothing, just over (1,020) does
        Scenario("a drift on 960 answers an hour: nothing",
                 pod(PODS[0], (180, Minute(answered=2, texts=16, cut=0, answers=(("体育", 16),)))), quiet),
        Scenario("a drift on 1,020 answers an hour",
                 pod(PODS[0], (180, Minute(answered=2, texts=17, cut=0, answers=(("体育", 17),)))),
                 {"30m": set(), "3h": {"ErnieBundleAnswersDrift"}}, values=[(tvd, "3h", 0.8)]),
        # one pod refuses 12 requests a minute: 10% of the Deployment's 120, over 5% for its 15 minutes
        Scenario("refusals over 5% of requests", [*pod(PODS[0], (180, replace(LIKE_DEV, answered=48, refused=12))),
                                                  *pod(PODS[1], (180, LIKE_DEV))],
                 {"10m": set(), "40m": {"ErnieBundleRequestsRefused"}, "3h": {"ErnieBundleRequestsRefused"}}),
        Scenario("refusals at 3% of requests: nothing", [*pod(PODS[0], (180, replace(LIKE_DEV, answered=56.4, refused=3.6))),
                                                         *pod(PODS[1], (180, LIKE_DEV))], quiet),
        # on a trickle of 4 requests a minute, 10% refused is 6 in 15 minutes: a client's slip, not yet a warning;
        # 12% of 6 a minute is 10.8, over the 10 the alert waits for
        Scenario("refusals at 10% of a trickle, 6 in 15 minutes: nothing",
                 pod(PODS[0], (180, replace(LIKE_DEV, answered=3.6, refused=0.4, texts=36, cut=0.36,
                                            answers=(("体育", 7.2), (QUOTED, 10.8), ("其他", 18))))), quiet),
        Scenario("refusals at 12% of a trickle, 10.8 in 15 minutes",
                 pod(PODS[0], (180, replace(LIKE_DEV, answered=5.28, refused=0.72, texts=52.8, cut=0.528,
                                            answers=(("体育", 10.56), (QUOTED, 15.84), ("其他", 26.4))))),
                 {"10m": set(), "40m": {"ErnieBundleRequestsRefused"}, "3h": {"ErnieBundleRequestsRefused"}}),
        # one request fails on the server at minute 90: critical at once, for the 5 minutes it is in the window
        Scenario("a server fault", [*pod(PODS[0], (180, LIKE_DEV)),
                                    *pod(PODS[1], (90, LIKE_DEV), (1, replace(LIKE_DEV, failed=1)), (89, LIKE_DEV))],
                 {"1h29m": set(), "1h32m": {"ErnieBundleServerFaults"}, "1h40m": set()}),
        # dev cut 1% of its texts: the alert is at twice that, for 30 minutes
        Scenario("texts cut at 3%", [s for p in PODS for s in pod(p, (180, replace(LIKE_DEV, cut=18)))],
                 {"20m": set(), "3h": {"ErnieBundleTextsCut"}}),
        Scenario("texts cut at 1.5%: nothing", [s for p in PODS for s in pod(p, (180, replace(LIKE_DEV, cut=9)))], quiet),
        # at its most replicas (2 of 2), the autoscaler wanting more (its pods' CPU over the target): at capacity,
        # after 15 minutes; at the most without wanting more, or wanting more with room (scaling), is not
        Scenario("at capacity", [*pod(PODS[0], (180, LIKE_DEV)), *pod(PODS[1], (180, LIKE_DEV)),
                                 *autoscaler(2, 2, limited=True)], {"10m": set(), "30m": {"ErnieBundleAtCapacity"}}),
        Scenario("at the most replicas, wanting no more: nothing", [*pod(PODS[0], (180, LIKE_DEV)), *autoscaler(1, 1)],
                 quiet),
        Scenario("room to scale: nothing", [*pod(PODS[0], (180, LIKE_DEV)), *autoscaler(2, 4, desired=4)], quiet),
        # dev's 1% cut against the 2% alert: chance alone reaches 2% on a few hundred texts, so it waits for 900 an hour
        Scenario("texts cut at 5% of 600 an hour: nothing",
                 pod(PODS[0], (180, replace(LIKE_DEV, answered=1, texts=10, cut=0.5, answers=(("体育", 10),)))), quiet),
        # the same service name in another namespace, and another service here: theirs are not this Deployment's
        Scenario("another Deployment's faults, refusals, cuts and drift: nothing",
                 [*pod(PODS[0], (180, LIKE_DEV)),
                  *pod("other-a", (180, Minute(answered=30, refused=30, failed=5, cut=600, answers=(("体育", 600),))),
                       namespace="staging"),
                  *pod("other-b", (180, Minute(answered=30, refused=30, failed=5, cut=600, answers=(("体育", 600),))),
                       service="ernie-bundle-other")], quiet),
        # one pod fails at minute 60 (its target down, then gone: stale), the other serves on; it goes at minute 120
        Scenario("pods gone", [*[{**s, "values": "1x59 0x4 stale"} if s["series"].startswith("up{") else s
                                 for s in pod(PODS[0], (180, LIKE_DEV))],
                               *[{**s, "values": "1x119 stale"} if s["series"].startswith("up{") else s
                                 for s in pod(PODS[1], (180, LIKE_DEV))]],
                 {"1h30m": set(), "2h4m": set(), "2h6m": {"ErnieBundleDown"}}),
        # no series of this Deployment at all (a ServiceMonitor that selects no pod, say): down, once it has lasted
        Scenario("nothing scraped", pod("other-a", (180, LIKE_DEV), namespace="staging"),
                 {"4m": set(), "6m": {"ErnieBundleDown"}}),
        # a reload halfway (new stub processes): the old stub series end, new pids' start from zero; the sums go on
        Scenario("a reload halfway: nothing", [*reloaded(PODS[0], 90), *pod(PODS[1], (180, LIKE_DEV))], quiet),
        # a rolling update at minute 90: each old pod gives way to a new one (new name, every series from zero), the
        # old one's series go stale; the sums over pods go on and nothing fires
        Scenario("a rolling update: nothing", [*replaced(PODS[0], "ernie-bundle-tnews-7c8d9e-q1w2e", 90),
                                               *replaced(PODS[1], "ernie-bundle-tnews-7c8d9e-r3t4y", 95)],
                 dict.fromkeys(("1h32m", "1h40m", "2h", "2h30m", "3h"), set())),
    ]
    check(rule, scenarios, tmp_path)


def test_the_drift_threshold_is_the_deployments_setting(tmp_path):
    """deploy.answer_drift 0.3: the 0.25 drift above says nothing, 0.8 does."""
    rule = tnews_rule(answer_drift=0.3)
    skewed = Minute(answers=(("体育", 120), (QUOTED, 480)))
    check(rule, [Scenario("0.25 under 0.3", [*pod(PODS[0], (60, LIKE_DEV), (120, skewed)), *pod(PODS[1], (180, LIKE_DEV))],
                          {"3h": set()}),
                 Scenario("0.8 over 0.3", pod(PODS[0], (180, Minute(answers=(("体育", 600),)))),
                          {"3h": {"ErnieBundleAnswersDrift"}})], tmp_path)


def test_the_dashboard_shows_each_series_beside_the_references_the_alerts_hold_it_to(tmp_path):
    """Every panel's query on two pods like dev (and a Deployment beside them whose name starts with this one's):
    what it shows; the cut share and the drift distance are the alerts' own expressions."""
    import json

    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build

    bundle = {"package": {"instances": 1, "engine_threads": 2}, "models": {"ensemble": "tnews"},
              "metrics": {"summary": {"dev_counts": DEV}}}
    builtin, custom, _ = build("tnews", bundle, 10 * 2**20, DeployConfig())
    config_map = next(o for o in builtin if o["kind"] == "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # what Grafana's sidecar loads
    (text,) = config_map["data"].values()
    assert json.loads(text)["uid"] == "ernie-bundle-tnews"
    # Grafana's ids take 40 characters: two long task names that share them keep two dashboards
    from serving.bundle.monitoring import Alerts, Dashboard

    long = [Dashboard(f"ernie-bundle-{'x' * 30}-{end}", "t", Alerts("t")).uid() for end in ("a", "b")]
    assert all(len(uid) == 40 for uid in long) and long[0] != long[1]
    queries = dashboard_queries(json.loads(text))
    rule = next(o for o in custom if o["kind"] == "PrometheusRule")
    alerts = rules_of(rule)
    cut, drift = "Texts cut to max_seq_len, share of the last hour", "Answers' distance from the dev set's mix"
    assert alerts["ErnieBundleTextsCut"]["expr"].startswith(f"{queries[cut, 'served']} > 0.02 and on () ")
    assert alerts["ErnieBundleAnswersDrift"]["expr"].startswith(f"{queries[drift, 'distance']} > 0.1 and on () ")
    cpu, by_label = ("CPU cores by pod", "{{pod}}"), ("Answers by label, share of the last hour", "{{label}}")
    shift = ("Answers by label, share of the last hour less the dev set's", "{{label}}")
    want = {("Pods up", "up"): 2, ("Replicas", "current"): 2, ("Replicas", "desired"): 3, ("Replicas", "most"): 4,
            ("Requests a second", "answered"): 2, ("Requests a second", "refused"): 0,
            ("Requests a second", "failed on the server"): 0,
            ("Refused, share of requests", "refused"): 0, ("Refused, share of requests", "alert"): 0.05,
            ("Texts a second", "texts"): 20,
            ("Milliseconds a request", "in all"): 10, ("Milliseconds a request", "in queues"): 2,
            cpu: ANY, ("CPU cores by pod", "requested"): 2,
            (cut, "served"): 0.01, (cut, "dev set"): 0.01, (cut, "alert"): 0.02,
            by_label: ANY, shift: ANY, (drift, "distance"): 0, (drift, "alert"): 0.1}
    assert set(want) == set(queries), sorted(set(queries) ^ set(want))  # every panel's query is held to a value
    values = [(queries[key], "3h", v) for key, v in want.items()]
    values += [(f"count({queries[cpu]})", "3h", 2), (f"sum({queries[cpu]})", "3h", 3.0),  # 1.5 cores each
               (f"count({queries[by_label]})", "3h", 3), (f"sum({queries[by_label]})", "3h", 1.0),
               (f"count({queries[shift]})", "3h", 3), (f"sum(abs({queries[shift]}))", "3h", 0.0)]
    beside = "ernie-bundle-tnews-v2"  # its pods, ernie-bundle-tnews-v2-<hash>-<id>, are not this Deployment's
    check(rule, [Scenario("two pods like dev, and another Deployment beside them",
                          [*pod(PODS[0], (180, LIKE_DEV)), *pod(PODS[1], (180, LIKE_DEV)),
                           *pod(f"{beside}-5f7d9c-abcde", (180, replace(LIKE_DEV, answered=600, cpu_seconds=120)),
                                service=beside), *autoscaler(2, 4, desired=3)],
                          {"3h": set()}, values=values)], tmp_path)


def test_the_drift_alert_waits_for_enough_answers_that_chance_alone_stays_under_half_its_threshold(tmp_path):
    """100 equal labels: an hour of 1,000 answers drawn from dev's own mix is ~0.13 from it by chance, over the 0.1
    threshold; the alert waits for 6,400 answers an hour, where chance is ~0.05.  Traffic sampled from dev's mix at
    that rate fires nothing in three hours; a mix truly moved by 0.15 does; 15 labels (TNEWS) keep 1,000."""
    import numpy as np

    from serving.bundle.config import DeployConfig
    from serving.bundle.manifests import build
    from serving.bundle.monitoring import DRIFT_MIN_ANSWERS, drift_min_answers

    labels = [f"L{i:03d}" for i in range(100)]
    dev = {"items": 10_000, "answers": dict.fromkeys(labels, 100)}
    assert drift_min_answers(dev["answers"], 0.1) == 6400 and drift_min_answers(DEV["answers"], 0.1) == DRIFT_MIN_ANSWERS
    assert drift_min_answers(dev["answers"], 0.05) == 25300  # half the threshold: four times 6,303, in hundreds
    bundle = {"package": {"instances": 1, "engine_threads": 2}, "models": {"ensemble": "tnews"},
              "metrics": {"summary": {"dev_counts": dev}}}
    _, custom, _ = build("tnews", bundle, 10 * 2**20, DeployConfig())
    rule = next(o for o in custom if o["kind"] == "PrometheusRule")
    drift = rules_of(rule)["ErnieBundleAnswersDrift"]
    assert drift["expr"].endswith(">= 6400") and "an hour of 6400 answers or more" in drift["annotations"]["summary"]
    distance = drift["expr"].split(" > ")[0]
    rng = np.random.default_rng(0)

    def sampled(per_minute: int, shares) -> list[dict]:
        counts = rng.multinomial(per_minute, shares, size=180).cumsum(axis=0)  # 3 hours of answers, minute by minute
        return [scraped("up", {}, "1x180"), scraped("nv_inference_count", ENSEMBLE, counter((180, per_minute))),
                *(scraped("ernie_bundle_answers_total", {**POSTPROCESS, "label": label},
                          "0 " + " ".join(str(int(v)) for v in counts[:, i])) for i, label in enumerate(labels))]

    even = np.full(100, 0.01)
    moved = np.r_[0.16, np.full(99, 0.84 / 99)]  # one label up by 0.15, the rest down alike: 0.15 apart
    check(rule, [
        Scenario("dev's mix at 1,000 an hour: chance alone is over 0.1, and the alert waits",
                 sampled(17, even), {"3h": set()}, values=[(distance, "3h", "> 0.1")]),
        Scenario("dev's mix at 6,400 an hour: nothing", sampled(107, even), {"2h": set(), "3h": set()},
                 values=[(distance, "3h", "< 0.075")]),
        Scenario("a mix moved by 0.15 at 6,400 an hour", sampled(107, moved), {"3h": {"ErnieBundleAnswersDrift"}})],
        tmp_path)
