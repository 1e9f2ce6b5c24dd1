"""NER, reading comprehension and UIE through every stage on tiny synthetic data, then served by the real Triton.

The same path as ``make bundle TASK=cluener`` / ``TASK=cmrc2018`` then ``make serve`` and ``make smoke``:
finetune (scratch model) -> finetune-check -> compress -> export -> validate -> package, a real
``tritonserver`` on the packaged bundle, and the smoke test, which must find the served metric equal to
the offline one and to the validated one, example by example.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import TINY_MODEL_OVERRIDES
from serving_fixtures import scrape_ours, scrape_series, settled_scrape

NAMES = ["张三丰", "李四光", "王小明", "赵大海", "钱学森"]
COMPANIES = ["华为公司", "腾讯集团", "阿里巴巴", "小米科技"]
FILLER = "今天在北上看到了一个很好的消息说要去开会没有问题"


def _planned(runs: Path) -> set[str]:
    """Every candidate compress planned: those it built and those its speed-first screen showed cannot win."""
    table = json.loads((runs / "compress" / "out" / "candidates.json").read_text())
    built = {c["name"] for c in table["candidates"]}
    skipped = {c["name"] for c in table["skipped"]}
    assert "fp32" in built and not built & skipped, table
    return built | skipped


def _ner_row(rng: random.Random) -> dict:
    parts, label = [], {}
    for _ in range(rng.randint(1, 3)):
        parts.append("".join(rng.choice(FILLER) for _ in range(rng.randint(1, 5))))
        kind = rng.choice(["name", "company"])
        ent = rng.choice(NAMES if kind == "name" else COMPANIES)
        start = sum(len(p) for p in parts)
        parts.append(ent)
        label.setdefault(kind, {}).setdefault(ent, []).append([start, start + len(ent) - 1])
    parts.append("".join(rng.choice(FILLER) for _ in range(rng.randint(0, 4))))
    return {"text": "".join(parts), "label": label}


def write_tiny_cluener(root: Path, n_train: int = 320, n_dev: int = 60) -> Path:
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.json", n_train), ("dev.json", n_dev)):
        rows = [json.dumps(_ner_row(rng), ensure_ascii=False) for _ in range(n)]
        (root / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


PEOPLE = ["小红", "小刚", "老李", "阿强", "大伟", "小芳"]
CITIES = ["北京", "上海", "广州", "成都", "杭州", "西安"]


def _squad(rng: random.Random, n_passages: int, prefix: str) -> dict:
    data = []
    for p in range(n_passages):
        people = rng.sample(PEOPLE, 4)
        homes = [rng.choice(CITIES) for _ in people]
        # long enough for several windows at max_seq_len 40
        context = "".join(f"{who}住在{city}，每天都很开心。" for who, city in zip(people, homes))
        qas = []
        for q, (who, city) in enumerate(zip(people, homes)):
            start = context.index(f"{who}住在") + len(who) + 2
            qas.append({"id": f"{prefix}_{p}_{q}", "question": f"{who}住在哪里？",
                        "answers": [{"text": city, "answer_start": start}]})
        data.append({"title": f"{prefix}{p}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v1.0", "data": data}


def write_tiny_cmrc(root: Path) -> Path:
    rng = random.Random(1)
    root.mkdir(parents=True, exist_ok=True)
    (root / "trial.json").write_text(json.dumps(_squad(rng, 60, "TRIAL"), ensure_ascii=False), encoding="utf-8")
    (root / "dev.json").write_text(json.dumps(_squad(rng, 30, "DEV"), ensure_ascii=False), encoding="utf-8")
    return root


FAST_STAGES = {
    "compress.max_steps": 20, "compress.per_device_train_batch_size": 16, "compress.batch_size_list": [4],
    "compress.batch_num_list": [4], "compress.algo_list": ["mse"], "compress.throughput_batches": 2,
    "validate.batch_sizes": [1], "validate.seq_lens": [16], "validate.repeats": 1, "validate.warmup": 1,
    "validate.dev_benchmark_limit": 32, "gates.min_throughput_ratio": 0.0, "gates.min_anchor_ratio": 0.0,
    "gates.max_accuracy_drop": 100.0,
    # one SmoothQuant strength per engine: the recipe grids have tests of their own (test_int8.py, test_openvino.py)
    "quantization.int8_smooth_alphas": [0.5], "quantization.openvino_smooth_alphas": [0.5],
    "package.threads": 1, "package.max_batch_size": 8, "package.preferred_batch_size": 4,
    # no size gate: a tiny model is mostly (unquantized) position embeddings, and its OpenVINO IR mostly XML
    "gates.max_int8_size_ratio": None,
}


def set_args(overrides: dict) -> list[str]:
    """``--set key=value`` for each override, the value as JSON (a list, null and a quoted string read back as YAML)."""
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def _run_bundle(tmp_path: Path, task: dict, extra: dict):
    """Runs every stage; returns (task yaml, runs/<task>, the loaded config)."""
    from pipeline.cli import main

    task_yaml = tmp_path / f"{task['task']}.yaml"
    task_yaml.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    runs = tmp_path / "runs"
    overrides = {**TINY_MODEL_OVERRIDES, **FAST_STAGES, "package.repository": str(tmp_path / "repo"), **extra}
    args = ["run", "--task", str(task_yaml), "--runs-dir", str(runs)]
    args += set_args(overrides)
    assert main(args) == 0
    # Right after a run every stage is current, the package stage included (its bundle is checked in place).
    from pipeline.config import load_task_config
    from pipeline.runner import Runner

    cfg = load_task_config(str(task_yaml), overrides)
    assert [row[1] for row in Runner(cfg, runs).status_rows()] == ["OK"] * 6
    return task_yaml, runs / task["task"], cfg


def _assert_one_selection(runs: Path, task_yaml: Path) -> None:
    """What compress selected is what validate verified and package shipped (issue 40: validate re-picked)."""
    from pipeline.backends.registry import by_name

    selected = json.loads((runs / "compress" / "out" / "selected.json").read_text())
    metrics = json.loads((runs / "validate" / "out" / "metrics.json").read_text())
    chosen = by_name(metrics["chosen_backend"])
    assert metrics["chosen_by"] == f"compress selected {selected['name']!r}", metrics["chosen_by"]
    assert chosen.runtime == selected["runtime"] and (chosen.precision == "fp32") == (selected["quantization"] == "none")
    bundle = json.loads((runs.parent.parent / "repo" / runs.name / "bundle.json").read_text())
    assert bundle["validated"]["backend"] == metrics["chosen_backend"]
    # the answers the shipped form changed: as many as parity counts, each with both answers and which is right
    row = next(r for r in metrics["backends"] if r["backend"] == metrics["chosen_backend"])
    changes = metrics["summary"]["answers_changed"]
    changed = [json.loads(line) for line in (runs / "validate" / "out" / "changed.jsonl").read_text(encoding="utf-8").splitlines()]
    assert changes["changed"] == len(changed) == round((1 - row["argmax_agreement"]) * changes["examples"]), changes
    assert changes["now_right"] == sum(r["shipped_right"] and not r["fp32_right"] for r in changed)
    assert all(r["fp32"] != r["shipped"] and "gold" in r for r in changed), changed[:3]
    # the kind's metric rebuilt from its examples' parts (what the interval resamples) is the one validate measured
    summary = metrics["summary"]
    sure = summary["accuracy_interval"]
    assert sure["metric_value"] == pytest.approx(summary["accuracy"], abs=1e-9), (sure, summary["accuracy"])
    assert sure["drop_value"] == pytest.approx(summary["accuracy_drop_points"], abs=1e-7)
    assert sure["drop_points"]["low"] <= sure["drop_points"]["high"] and sure["drop_points"]["examples"] == changes["examples"]
    # the bundle carries validate's scores per example: make gate against it as the previous release pairs the two
    # example by example (each kind's parts through the file: fractions of F1 too), and the same release moved nothing
    from pipeline.validation.release import main as gate

    kept = (runs.parent.parent / "repo" / runs.name / "example_scores.json").read_text()
    assert kept == (runs / "validate" / "out" / "example_scores.json").read_text()
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert gate(["--task", str(task_yaml), "--baseline", str(runs.parent.parent / "repo" / runs.name / "bundle.json"),
                     "--runs-dir", str(runs.parent)]) == 0
    assert (f"95% interval [+0.00, +0.00] over resamples of the {changes['examples']} dev examples both scored: the whole "
            "interval is within") in said.getvalue(), said.getvalue()


def _assert_batch_independent(runs: Path, cfg) -> None:
    """The shipped INT8 gives a text the same answer alone and inside any batch (issue: under Triton's
    dynamic batching a text's entities must not change with load).  Per-batch activation scales fail this."""
    import numpy as np

    from pipeline.backends.onnxruntime.session import session as ort_session
    from pipeline.kinds import load_task_data
    from pipeline.kinds import get_kind
    from pipeline.tokenizer import Tokenizer

    out = runs / "export" / "out"
    meta = json.loads((out / "meta.json").read_text())
    tok = Tokenizer.from_model_dir(out / "tokenizer", cfg.max_seq_len)
    fs = get_kind(cfg).featurize(tok, load_task_data(cfg).dev.examples[:12], cfg)
    from pipeline.backends.openvino.session import session as openvino_session

    # Which INT8 forms exist depends on what compress selected on this CPU's screen: ONNX Runtime's int8.onnx is
    # built only when it can ship, OpenVINO's IR when OpenVINO was selected.  Each one present carries a searched,
    # static recipe.  ONNX Runtime's kernels give the same floats whatever the padded width; OpenVINO's may move a
    # logit by float rounding (the width-independent IR removes the attention's share), never the decision.
    forms = []
    if (out / "onnx" / "int8.onnx").is_file():
        assert meta["int8"]["chosen"]["name"]
        forms.append((ort_session(out / "onnx" / "int8.onnx"), 1e-4))
    if (out / "openvino" / "int8.xml").is_file():
        assert meta["openvino"]["chosen"]["name"]
        forms.append((openvino_session(out / "openvino" / "int8.xml", precision="int8"), 2e-2))
    assert forms, sorted(p.name for p in out.rglob("*"))
    n = min(len(fs), 12)
    together = [fs.batch(range(n)), fs.batch(range(n - 1, -1, -1))]  # two batches, two orders
    for sess, atol in forms:
        results = [sess.run(b.input_ids, b.token_type_ids) for b in together]
        for i in range(n):
            alone = fs.batch([i])
            width = alone.input_ids.shape[1]
            ref = sess.run(alone.input_ids, alone.token_type_ids)[0]
            for batch, got in zip(together, results):
                row = got[list(batch.indices).index(i)]
                row = row[:width] if ref.ndim == 2 else row  # token-level outputs: compare the real positions
                np.testing.assert_allclose(row, ref, atol=atol)
                assert np.array_equal(np.argmax(row, -1), np.argmax(ref, -1))


def _serve_and_smoke(bundle: Path, task_yaml: Path, tmp_path: Path, capsys, while_served=None) -> str:
    """smoke + loadtest against a real tritonserver; ``while_served(server)`` runs last, before it stops."""
    from serving.tools import smoke
    from serving.server import start_server

    server = start_server(bundle, log_path=tmp_path / "server.log", timeout=120)
    try:
        capsys.readouterr()
        before, before_series = scrape_ours(server), scrape_series(server, SCRAPED)
        rc = smoke.main(["--task", str(task_yaml), "--repository", str(bundle), "--url", server.grpc_url,
                         "--protocol", "grpc", "--json-out", str(tmp_path / "smoke.json")])
        captured = capsys.readouterr()
        out = captured.out
        assert rc == 0, out + captured.err
        _smoke_moved_the_counters_as_validate_counted_dev(server, bundle, before)
        _the_alerts_and_dashboard_read_the_served_series(server, bundle, before_series, tmp_path / "alerts")
        from serving.tools import loadtest

        rc = loadtest.main(["--task", str(task_yaml), "--model", bundle.name, "--url", server.grpc_url, "--protocol", "grpc",
                            "--concurrency", "1", "2", "--seconds", "1", "--repository", str(bundle.parent),
                            "--json-out", str(tmp_path / "loadtest.json")])
        report = json.loads((tmp_path / "loadtest.json").read_text())
        assert rc == 0 and all(level["requests"] > 0 and level["errors"] == 0 for level in report["levels"]), report
        if while_served is not None:
            while_served(server)
    finally:
        assert server.stop() == 0, server.log_tail()
    return out


@pytest.mark.slow
def test_ner_bundle_end_to_end(tmp_path, capsys):
    data = write_tiny_cluener(tmp_path / "data")
    task = {"task": "tinyner", "type": "token_classification", "max_seq_len": 32,
            "data": {"dir": str(data), "format": "cluener", "labels_file": None}, "labels": ["name", "company"],
            "compress": {"strategy": "dynabert+ptq", "width_mult_list": ["1/2"]}}
    task_yaml, runs, cfg = _run_bundle(tmp_path, task, {"finetune.epochs": 8, "gates.min_accuracy": 0.5,
                                                        "validate.dev_batch_size": 8})

    baseline = json.loads((runs / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["metric"] == "f1" and baseline["accuracy"] > 0.5, baseline  # the tiny model learned the entities
    assert baseline["labels"][:3] == ["O", "B-name", "I-name"]
    # DynaBERT on a token classifier, judged in ORT and OpenVINO (built, or shown by the speed-first screen unable to win)
    assert _planned(runs) == {"fp32", "int8", "ov-int8", "w0.5", "w0.5-int8", "w0.5-ov-int8"}
    _assert_batch_independent(runs, cfg)
    _assert_one_selection(runs, task_yaml)
    meta = json.loads((runs / "export" / "out" / "meta.json").read_text())
    assert meta["task_type"] == "token_classification" and meta["outputs"][0]["shape"] == [-1, -1, 5]
    metrics = json.loads((runs / "validate" / "out" / "metrics.json").read_text())
    assert metrics["summary"]["metric"] == "f1"
    # validate checks what ships: the shipped form and its FP32 (the FP32 ONNX for every ONNX form), and the anchor
    assert {r["backend"] for r in metrics["backends"]} == {"onnxruntime-cpu-fp32", metrics["chosen_backend"]}
    assert metrics["summary"]["checked"]["setting"] == "shipped" and metrics["summary"]["anchor"]["accuracy"] > 0
    fp32 = next(r for r in metrics["backends"] if r["backend"] == "onnxruntime-cpu-fp32")
    assert fp32["argmax_agreement"] == 1.0 and abs(fp32["accuracy"] - baseline["accuracy"]) < 1e-9
    # per-token outputs too: compress scored in validate's batches (compress.eval_batch_size follows
    # validate.dev_batch_size), so validate read its outputs of both files (served == validated is checked below)
    assert all(r["dev_outputs"].startswith("compress's evaluation of the same file") for r in metrics["backends"])

    bundle = tmp_path / "repo" / "tinyner"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["validated"]["metric"] == "f1"
    card = (bundle / "README.md").read_text(encoding="utf-8")  # dev's shares, for the served counters to be held to
    assert "| dev texts cut to max_seq_len |" in card and "| dev answers by label | name " in card
    # ... and the alerts beside the Deployment hold served traffic to them: a tagger counts cut texts
    rule = next(d for d in yaml.safe_load_all((bundle / "kubernetes.yaml").read_text()) if d and d["kind"] == "PrometheusRule")
    cut = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}["ErnieBundleTextsCut"]
    dev = manifest["metrics"]["summary"]["dev_counts"]
    share = cut["expr"].split(" and on () ")[0]
    assert share.endswith(f'model="tinyner"}}[1h])) > {max(0.01, 2 * dev["truncated"] / dev["items"]):.4g}')
    out = _serve_and_smoke(bundle, task_yaml, tmp_path, capsys, while_served=_entities_are_counted_by_type)
    assert "texts whose entities differ: 0" in out
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["served_f1"] == result["offline_f1"] == pytest.approx(manifest["validated"]["value"], abs=1e-9)
    _assert_bench_rows(task_yaml, runs, tmp_path, metrics["chosen_backend"], manifest["validated"]["value"])


def _smoke_moved_the_counters_as_validate_counted_dev(server, bundle: Path, before: dict) -> None:
    """smoke sends the dev set validate scored: the served counters (every model of the bundle together) move by what
    validate counted on dev for what ships (the model card's shares): texts cut, answers by label; nothing refused
    or failed."""
    dev = json.loads((bundle / "bundle.json").read_text())["metrics"]["summary"]["dev_counts"]
    want = {("ernie_bundle_refused_requests_total", ""): 0, ("ernie_bundle_failed_requests_total", ""): 0,
            **({("ernie_bundle_truncated_items_total", ""): dev["truncated"]} if "truncated" in dev else {}),
            **{("ernie_bundle_answers_total", label): n for label, n in dev.get("answers", {}).items()}}

    def moved(samples) -> dict:
        got = dict.fromkeys(want, 0.0)
        for (name, labels), v in samples.items():
            key = (name, dict(labels).get("label", ""))
            if key in got:
                got[key] += v - before.get((name, labels), 0.0)
        return got

    after = settled_scrape(server, lambda s: moved(s) == want)
    assert moved(after) == want
    assert dev["items"] > 0 and (dev.get("answers") is None or sum(dev["answers"].values()) > 0)


SCRAPED = ("ernie_bundle_", "nv_inference_")  # the series the PrometheusRule's alerts read


def _the_alerts_and_dashboard_read_the_served_series(server, bundle: Path, before: dict, work: Path) -> None:
    """The bundle's PrometheusRule in Prometheus's rule engine (promtool), on the series smoke moved on the real server
    as if its dev traffic came every minute for three hours: nothing fires, and the share of texts cut is dev's; the
    same series with every text cut, as many refusals as texts, every answer on dev's rarest label, or one server
    fault fire each its alert: every alert's selectors find the series a served bundle exports.  Every panel of its
    dashboard shows them too (but the CPU and replica panels', which are the kubelet's and kube-state-metrics')."""
    from promtool_scenarios import ANY, Scenario, check, counter, dashboard_queries, every_minute, rules_of

    docs = yaml.safe_load_all((bundle / "kubernetes.yaml").read_text())
    rule = next(d for d in docs if d and d["kind"] == "PrometheusRule")
    alerts = rules_of(rule)
    after = scrape_series(server, SCRAPED)
    moved = {key: value - before.get(key, 0.0) for key, value in after.items()}
    dev = json.loads((bundle / "bundle.json").read_text())["metrics"]["summary"]["dev_counts"]

    def traffic(change=None):
        return every_minute({**moved, ("up", frozenset()): 0}, namespace=rule["metadata"]["namespace"],
                            service=rule["metadata"]["name"],  # Prometheus's own "up": the pod answers the scrape
                            change=lambda name, labels, d: "1x180" if name == "up"
                            else change(name, labels, d) if change else d)

    panels = dashboard_queries(json.loads((bundle / "grafana-dashboard.json").read_text(encoding="utf-8")))
    like_dev = Scenario("smoke's dev traffic every minute: nothing", traffic(), {"3h": set()},
                        values=[(expr, "3h", ANY) for expr in panels.values()
                                if "kube_" not in expr and "container_" not in expr])  # not the kubelet's, nor KSM's
    failed = min(k for k in moved if k[0] == "ernie_bundle_failed_requests_total")
    scenarios = [like_dev,
                 Scenario("as many refusals as texts", traffic(
                     lambda name, labels, d: dev["items"] if name == "ernie_bundle_refused_requests_total" else d),
                     {"3h": {"ErnieBundleRequestsRefused"}}),
                 Scenario("one server fault", traffic(
                     lambda name, labels, d: counter((90, d), (1, d + 1), (89, d))
                     if (name, frozenset(labels.items())) == failed else d),
                     {"1h32m": {"ErnieBundleServerFaults"}, "3h": set()})]
    if "ErnieBundleTextsCut" in alerts:
        cut = alerts["ErnieBundleTextsCut"]["expr"]
        like_dev.values.append((cut.split(" > ")[0], "3h", dev["truncated"] / dev["items"]))
        if float(cut.split(" > ")[1].split(" ")[0]) < 1:
            scenarios.append(Scenario("every text cut", traffic(
                lambda name, labels, d: dev["items"] if name == "ernie_bundle_truncated_items_total" else d),
                {"3h": {"ErnieBundleTextsCut"}}))
    if "ErnieBundleAnswersDrift" in alerts:
        like_dev.values.append((alerts["ErnieBundleAnswersDrift"]["expr"].split(" > ")[0], "3h", 0.0))
        rarest = min(dev["answers"], key=lambda label: (dev["answers"][label], label))
        counters = sum(1 for name, labels in moved if name == "ernie_bundle_answers_total" and dict(labels)["label"] == rarest)
        least = int(alerts["ErnieBundleAnswersDrift"]["expr"].rsplit(">= ", 1)[1])  # answers an hour it waits for
        total = max(sum(dev["answers"].values()), least / 60 + 1)
        scenarios.append(Scenario(f"every answer {rarest!r}", traffic(
            lambda name, labels, d: (total / counters if labels["label"] == rarest else 0)
            if name == "ernie_bundle_answers_total" else d), {"3h": {"ErnieBundleAnswersDrift"}}))
    check(rule, scenarios, work)


def _entities_are_counted_by_type(server) -> None:
    """The tagger's /metrics: entities served by type, and texts cut to max_seq_len, equal to what a request got."""
    from collections import Counter

    from serving.tools.client import BundleClient

    before = scrape_ours(server)
    texts = ["张三在腾讯公司工作", "李四去了阿里巴巴", "王五和赵六" * 20]  # the last is cut to max_seq_len 32
    with BundleClient(server.grpc_url, "grpc", "tinyner", retries=0) as client:
        got = Counter(e.type for entities in client.extract_entities_batch(texts) for e in entities)

    def moved(s, name, **labels):
        key = (name, frozenset({"model": "tinyner", **labels}.items()))
        return s.get(key, 0.0) - before.get(key, 0.0)

    after = settled_scrape(server, lambda s: moved(s, "ernie_bundle_truncated_items_total") >= 1)
    assert moved(after, "ernie_bundle_truncated_items_total") == 1
    assert {t: moved(after, "ernie_bundle_answers_total", label=t) for t in ("name", "company")} == \
        {t: got.get(t, 0) for t in ("name", "company")}
    assert sum(got.values()) > 0  # the tiny tagger finds entities in these texts


def _assert_bench_rows(task_yaml: Path, runs: Path, tmp_path: Path, chosen: str, validated: float) -> None:
    """make bench on a finished run: the anchor, both engines' FP32 and INT8 rows (pruned and unpruned), the shipped
    row marked and scoring what validate scored: the form opened as it is served (timings on a tiny model mean
    nothing: only which rows exist is checked)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", Path(__file__).resolve().parent.parent / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    scratch = tmp_path / "tmp"  # the temporary directory for this run alone: what bench built must be gone after it
    scratch.mkdir()
    before, tempfile.tempdir = tempfile.tempdir, str(scratch)
    try:
        assert bench.main(["--task", str(task_yaml), "--runs-dir", str(runs.parent), "--rounds", "1", "--max-batches", "2",
                           "--out", str(out)]) == 0
    finally:
        tempfile.tempdir = before
    assert not list(scratch.iterdir())
    rows = {r["form"]: r for r in json.loads(out.read_text())["rows"]}
    names = list(rows)
    assert {"ort-fp32", "anchor", bench.ANCHOR_OURS, "openvino-fp32"} <= set(names)
    assert any(n.startswith("openvino-int8 (w0.5") for n in names) and any(n.startswith("openvino-int8 (unpruned") for n in names)
    assert any(n.startswith("onnxruntime-int8 (") for n in names)
    shipped = [n for n, r in rows.items() if r["shipped"]]
    prefix = {"openvino-cpu-int8": "openvino-int8", "onnxruntime-cpu-int8": "onnxruntime-int8",
              "onnxruntime-cpu-int8-qdq": "int8-qdq", "onnxruntime-cpu-fp32": "ort-fp32"}[chosen]
    assert len(shipped) == 1 and shipped[0].startswith(prefix)
    if chosen == "onnxruntime-cpu-int8":  # the export's own form is its row, not also a pruned-* rebuild of it
        arch = shipped[0].split("(")[1].split(",")[0]
        assert not any(n.startswith(f"pruned-{arch}-int8") for n in names), names
    assert rows[shipped[0]]["metric"] == pytest.approx(validated, abs=1e-9)
    # each drop with its interval on the same draws: FP32 against itself is exactly nothing
    assert rows["ort-fp32"]["drop_interval"] == [0.0, 0.0]
    assert all(r["drop_interval"][0] <= r["drop_interval"][1] for r in rows.values())
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "| drop (pts) [95%] |" in table and "| ort-fp32 | " in table and " | +0.00 [+0.00, +0.00] | " in table


@pytest.mark.slow
def test_reading_bundle_end_to_end(tmp_path, capsys):
    data = write_tiny_cmrc(tmp_path / "data")
    task = {"task": "tinymrc", "type": "reading_comprehension", "max_seq_len": 40,
            "data": {"dir": str(data), "format": "squad", "train_file": "trial.json", "dev_file": "dev.json",
                     "labels_file": None},
            "reading": {"doc_stride": 12, "max_query_len": 12, "max_answer_len": 8, "dev_for_training": 0.5},
            "compress": {"strategy": "ptq"}}
    task_yaml, runs, cfg = _run_bundle(tmp_path, task, {"finetune.epochs": 6, "gates.min_accuracy": 0.0,
                                                         "max_seq_len": 40, "validate.dev_batch_size": 8})
    _assert_batch_independent(runs, cfg)
    _assert_one_selection(runs, task_yaml)

    baseline = json.loads((runs / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["metric"] == "f1" and {"em", "f1"} <= set(baseline["metrics"])
    assert baseline["dev_features"] > baseline["dev_examples"]  # long passages: several windows per question
    meta = json.loads((runs / "export" / "out" / "meta.json").read_text())
    assert meta["task_type"] == "reading_comprehension" and meta["reading"]["doc_stride"] == 12
    metrics = json.loads((runs / "validate" / "out" / "metrics.json").read_text())  # windows' span scores too
    assert all(r["dev_outputs"].startswith("compress's evaluation of the same file") for r in metrics["backends"])

    bundle = tmp_path / "repo" / "tinymrc"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["layout"] == "fused" and set(manifest["models"].values()) == {"tinymrc"}  # reader.py serves it
    # a question over max_query_len is cut (passages are windowed): counted on dev as the served model counts it
    dev = manifest["metrics"]["summary"]["dev_counts"]
    assert dev["truncated_what"] == "questions cut to max_query_len" and isinstance(dev["truncated"], int)
    assert "| dev questions cut to max_query_len |" in (bundle / "README.md").read_text(encoding="utf-8")
    rule = next(d for d in yaml.safe_load_all((bundle / "kubernetes.yaml").read_text()) if d and d["kind"] == "PrometheusRule")
    cut = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}["ErnieBundleTextsCut"]
    assert " of questions cut to max_query_len (an hour of " in cut["annotations"]["summary"]
    out = _serve_and_smoke(bundle, task_yaml, tmp_path, capsys)
    assert "answers differing: 0" in out
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["served_f1"] == result["offline_f1"] == pytest.approx(manifest["validated"]["value"], abs=1e-9)


@pytest.mark.slow
def test_uie_bundle_end_to_end(tmp_path, capsys):
    """UIE from CLUENER (one prompt per entity type) through every stage, DynaBERT included, then served: a
    text x schema request gives the spans the offline pipeline finds, alone or concurrently batched."""
    data = write_tiny_cluener(tmp_path / "data")
    task = {"task": "tinyuie", "type": "uie", "max_seq_len": 32, "labels": ["name", "company"],
            "data": {"dir": str(data), "format": "cluener", "labels_file": None},
            "uie": {"doc_stride": 8, "max_prompt_len": 6},
            "compress": {"strategy": "dynabert+ptq", "width_mult_list": ["1/2"]}}
    task_yaml, runs, cfg = _run_bundle(tmp_path, task, {"finetune.epochs": 8, "gates.min_accuracy": 0.5,
                                                        "validate.dev_batch_size": 8, "compress.eval_batch_size": 8})
    baseline = json.loads((runs / "finetune-check" / "out" / "baseline.json").read_text())
    assert baseline["metric"] == "f1" and {"precision", "recall"} <= set(baseline["metrics"]), baseline
    assert baseline["dev_examples"] == 2 * 60  # every dev text asked both prompts
    assert _planned(runs) == {"fp32", "int8", "ov-int8", "w0.5", "w0.5-int8", "w0.5-ov-int8"}
    _assert_batch_independent(runs, cfg)
    _assert_one_selection(runs, task_yaml)
    meta = json.loads((runs / "export" / "out" / "meta.json").read_text())
    assert meta["task_type"] == "uie" and meta["uie"]["schema"] == ["姓名", "公司"] and meta["uie"]["doc_stride"] == 8

    bundle = tmp_path / "repo" / "tinyuie"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["validated"]["metric"] == "f1" and manifest["uie"]["max_prompt_len"] == 6
    perf = {}

    def perf_analyzer_run(server):
        """`make perf` on UIE: each perf_analyzer request is one dev text with the whole schema."""
        from serving.tools.perf import PerfError, find_perf_analyzer, format_markdown, measure
        from serving_fixtures import tool_or_skip

        tool_or_skip(find_perf_analyzer, PerfError, "ERNIE_BUNDLE_REQUIRE_PERF_ANALYZER")
        texts = [json.loads(line)["text"] for line in (data / "dev.json").read_text(encoding="utf-8").splitlines()]
        items = [(t, ["姓名", "公司"]) for t in texts[:30]]
        perf["record"] = measure(bundle, str(task_yaml), None, [1, 2], seconds=1.0, url=server.grpc_url,
                                 offline_seconds=1.5, items=items)
        perf["md"] = format_markdown(perf["record"])

    out = _serve_and_smoke(bundle, task_yaml, tmp_path, capsys, while_served=perf_analyzer_run)
    assert "pairs whose spans differ: 0" in out
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["served_f1"] == result["offline_f1"] == pytest.approx(manifest["validated"]["value"], abs=1e-9)
    record = perf["record"]
    assert [lv.concurrency for lv in record.levels] == [1, 2] and "2 prompts" in record.request_note
    for lv in record.levels:
        shares = {m.model: m for m in lv.models}
        # layout auto: one python model windows, runs the engine and decodes (max_batch_size 0: a request per call)
        assert lv.requests_per_s > 0 and set(shares) == {"tinyuie"} and shares["tinyuie"].requests > 0
    assert record.summary[0].model_only_items_per_s.median > 0 and "2 prompts: req/s are texts/s" in perf["md"]


@pytest.mark.slow
def test_uie_with_a_paddleslim_act_config(tmp_path, capsys):
    """PaddleSlim auto-compression's YAML shape drives the run: Prune -> DynaBERT, Quantization -> the INT8
    search, TrainConfig -> distillation steps; a wrong TrainConfig.origin_metric stops finetune-check."""
    from pipeline.cli import main

    task = {"task": "tinyuie", "type": "uie", "max_seq_len": 32, "labels": ["name", "company"],
            "data": {"dir": str(write_tiny_cluener(tmp_path / "data", 160, 40)), "format": "cluener", "labels_file": None},
            "uie": {"doc_stride": 8, "max_prompt_len": 6}}
    task_yaml = tmp_path / "task.yaml"
    task_yaml.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    act = {"Global": {"batch_size": 16}, "Distillation": {"alpha": 1.0, "loss": "l2"},
           "Prune": {"prune_algo": "transformer_pruner", "pruned_ratio": 0.5},
           "Quantization": {"weight_bits": 8, "activation_bits": 8, "quantize_op_types": ["matmul", "matmul_v2"]},
           "TrainConfig": {"epochs": 1, "train_iter": 10, "learning_rate": 1e-4, "origin_metric": 0.999,
                           "optimizer_builder": {"optimizer": {"type": "AdamW"}}}}
    act_yaml = tmp_path / "act.yaml"
    act_yaml.write_text(yaml.safe_dump(act), encoding="utf-8")
    overrides = {**TINY_MODEL_OVERRIDES, **FAST_STAGES, "finetune.epochs": 2, "gates.min_accuracy": 0.0}
    overrides.pop("compress.max_steps")  # the ACT file's train_iter sets it
    args = ["run", "--task", str(task_yaml), "--runs-dir", str(tmp_path / "runs"), "--act-config", str(act_yaml),
            "--until", "compress"]
    args += set_args(overrides)
    capsys.readouterr()
    assert main(args) != 0
    captured = capsys.readouterr()
    assert "gates.origin_metric 0.9990" in captured.out + captured.err
    act["TrainConfig"].pop("origin_metric")
    act_yaml.write_text(yaml.safe_dump(act), encoding="utf-8")
    assert main(args) == 0
    runs = tmp_path / "runs" / "tinyuie"
    assert _planned(runs) == {"fp32", "int8", "ov-int8", "w0.5", "w0.5-int8", "w0.5-ov-int8"}
    record = json.loads((runs / "compress" / "record.json").read_text())
    c = record["params"]["compress"]
    assert (c["strategy"], c["width_mult_list"], c["max_steps"], c["per_device_train_batch_size"]) == ("dynabert+ptq", ["0.5"], 10, 16)


@pytest.mark.slow
@pytest.mark.parametrize("kind,strategy,expected", [
    ("ner", "qat+embeddings", {"fp32", "qat", "fp32+emb", "qat+emb"}),
    ("mrc", "dynabert+qat", {"fp32", "w0.5", "qat", "w0.5-qat"}),
])
def test_other_strategies_on_span_kinds(kind, strategy, expected, tmp_path):
    """QAT, int8 embeddings and DynaBERT (importance, distillation over positions) on both new kinds."""
    from pipeline.cli import main

    if kind == "ner":
        task = {"task": "tinyner", "type": "token_classification", "max_seq_len": 32,
                "data": {"dir": str(write_tiny_cluener(tmp_path / "data", 160, 40)), "format": "cluener", "labels_file": None},
                "labels": ["name", "company"]}
    else:
        task = {"task": "tinymrc", "type": "reading_comprehension", "max_seq_len": 40,
                "data": {"dir": str(write_tiny_cmrc(tmp_path / "data")), "format": "squad", "train_file": "trial.json",
                         "dev_file": "dev.json", "labels_file": None},
                "reading": {"doc_stride": 12, "max_query_len": 12, "max_answer_len": 8}}
    task["compress"] = {"strategy": strategy, "width_mult_list": ["1/2"], "num_train_epochs": 1, "candidate_format": "paddle"}
    task_yaml = tmp_path / "task.yaml"
    task_yaml.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    overrides = {**TINY_MODEL_OVERRIDES, **FAST_STAGES, "finetune.epochs": 2, "gates.min_accuracy": 0.0, "max_seq_len": task["max_seq_len"]}
    args = ["run", "--task", str(task_yaml), "--runs-dir", str(tmp_path / "runs"), "--until", "compress"]
    args += set_args(overrides)
    assert main(args) == 0
    table = json.loads((tmp_path / "runs" / task["task"] / "compress" / "out" / "candidates.json").read_text())
    cands = {c["name"]: c for c in table["candidates"]}
    assert expected <= set(cands), sorted(cands)
    for c in cands.values():
        assert 0.0 <= c["accuracy"] <= 1.0 and c["throughput"] > 0
