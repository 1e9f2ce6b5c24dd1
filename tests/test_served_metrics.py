"""What a served bundle counts on Triton's /metrics (serving/triton/served_metrics.py), read from a real server on the
tiny classification bundle, both layouts: refusals apart from server faults, texts cut to max_seq_len, answers by
label, each equal to what the requests sent and got."""

from __future__ import annotations

from collections import Counter

import pytest
from serving_fixtures import (scrape_ours, served, settled_scrape, tiny_bundle, tiny_dev,  # noqa: F401  (fixtures)
                              tiny_export, tiny_fused_bundle)

from serving.tools.client import BundleClient, RequestRejected

server = served("tiny_bundle")
fused_server = served("tiny_fused_bundle")
dev = tiny_dev

@pytest.mark.parametrize("layout", ["server", "fused_server"])
def test_served_counts_what_was_refused_cut_and_answered(layout, request, dev):
    srv = request.getfixturevalue(layout)
    # The model that checks texts and the one that answers: the same model fused, two in the ensemble.
    checks, answers = ("tiny", "tiny") if layout == "fused_server" else ("tiny_tokenizer", "tiny_postprocess")
    before = scrape_ours(srv)
    labels = ["100", "101", "102"]  # labels.json's labels (their label_desc: news_sports, ...), as served
    # Every series is there from the start, at zero: a rate over it is right from the first scrape.
    for name in ("ernie_bundle_refused_requests_total", "ernie_bundle_failed_requests_total",
                 "ernie_bundle_truncated_items_total"):
        assert (name, frozenset({("model", checks)})) in before, (name, sorted(before))
    for label in labels:
        assert ("ernie_bundle_answers_total", frozenset({("model", answers), ("label", label)})) in before

    client = BundleClient(srv.grpc_url, "grpc", "tiny", retries=0)
    short = [t for t in dev[0] if len(t) <= 25][:7]  # at most 25 tokens: none cut at max_seq_len 32
    texts = short + ["股票银行" * 100]  # this one is cut
    got = Counter(p.label for p in client.classify_batch(texts))
    with pytest.raises(RequestRejected):
        client.classify_batch(["股票", ""])
    with pytest.raises(RequestRejected):
        client.classify_batch([b"\xff\xfe"])
    client.close()

    def moved(s, name, model, **kw):
        key = (name, frozenset({"model": model, **kw}.items()))
        return s.get(key, 0.0) - before.get(key, 0.0)

    after = settled_scrape(srv, lambda s: moved(s, "ernie_bundle_refused_requests_total", checks) >= 2
                    and sum(moved(s, "ernie_bundle_answers_total", answers, label=x) for x in labels) >= len(texts))
    assert moved(after, "ernie_bundle_refused_requests_total", checks) == 2
    assert moved(after, "ernie_bundle_failed_requests_total", checks) == 0
    assert moved(after, "ernie_bundle_truncated_items_total", checks) == 1
    assert {x: moved(after, "ernie_bundle_answers_total", answers, label=x) for x in labels} == \
        {x: got.get(x, 0) for x in labels}


def test_validate_counts_dev_as_the_served_models_count_traffic(tmp_path):
    """validate's ``dev_counts`` (the model card's shares): each kind counts its answers by the label the served model
    puts on ``ernie_bundle_answers_total`` (every label of the task, zeros included); the windowing kinds count none."""
    import yaml

    from pipeline.config import load_task_config
    from pipeline.kinds import get_kind

    labels = ("story", "culture", "sports")
    assert get_kind(load_task_config("tnews")).answer_counts([0, 2, 2], labels) == {"story": 1, "culture": 0, "sports": 2}
    task = tmp_path / "sets.yaml"
    task.write_text(yaml.safe_dump({"task": "sets", "type": "classification", "classification": {"multi_label": True},
                                    "data": {"dir": str(tmp_path), "labels_file": None}}), encoding="utf-8")
    sets = get_kind(load_task_config(str(task)))
    assert sets.answer_counts([(0, 2), (), (2,)], labels) == {"story": 1, "culture": 0, "sports": 2}
    ner = get_kind(load_task_config("cluener"))
    counts = ner.answer_counts([(("name", 0, 3), ("company", 4, 8)), (("name", 1, 2),)], ())
    assert counts["name"] == 2 and counts["company"] == 1 and set(counts) == set(ner.entity_types)
    assert sum(counts.values()) == 3
    for task_name in ("cmrc2018", "uie"):
        assert get_kind(load_task_config(task_name)).answer_counts([(0, 3)], ()) is None


def test_a_counter_that_cannot_be_counted_says_so_once_and_the_total_at_unload(capsys):
    """Where Triton's metrics API fails (every increment raises), each series says so once, not every second; the
    counts lost are said in all when the model unloads; requests are never touched (count() only adds to a tally)."""
    from serving.triton.served_metrics import ServedMetrics

    class Family:
        COUNTER = "counter"

        def __init__(self, name, description, kind):
            self.name = name

        def Metric(self, labels):  # noqa: N802  (the python backend's name)
            return Broken()

    class Broken:
        def increment(self, n):
            raise RuntimeError("metrics API gone")

    class PbUtils:
        MetricFamily = Family

    metrics = ServedMetrics(PbUtils(), "tiny", "tiny_0_0", answer_labels=("100", "101"), truncates=True)
    for _ in range(3):
        metrics.count("refused")
        metrics.answers({"100": 2, "101": 0})
        metrics.flush()
    metrics.close()
    err = capsys.readouterr().err.splitlines()
    once = [line for line in err if "not counted" in line]
    assert len(once) == 2 and all("metrics API gone" in line for line in once), err  # refused, answers 100
    assert err[-1].startswith("warning: ernie-bundle metrics: 9 counts lost in all"), err
