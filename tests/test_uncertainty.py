"""How sure the dev set makes validate's figures (``pipeline.validation.uncertainty``): every kind's metric rebuilt from
numbers that add over examples equals its own scoring function's, and the resampled interval of a drop is the one the
paired-proportion formula gives.  Every kind's end-to-end test holds validate's interval to its measured metric."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pipeline.config import load_task_config
from pipeline.data import Example
from pipeline.extraction.examples import ExtractionExample
from pipeline.extraction.metric import span_scores
from pipeline.kinds import get_kind
from pipeline.kinds.classification import set_micro_f1
from pipeline.labeling.bio import Entity
from pipeline.labeling.metric import chunk_f1
from pipeline.labeling.readers import LabelingExample
from pipeline.reading.metric import cmrc_scores
from pipeline.reading.squad import Answer, QAExample
from pipeline.validation.uncertainty import dev_uncertainty, drops_below


def _whole(kind, examples, predictions) -> float:
    return float(kind.metric_of(np.array([kind.metric_parts(e, p) for e, p in zip(examples, predictions)]).sum(axis=0)))


def test_a_drop_of_35_answers_in_10000_is_as_unsure_as_the_paired_proportions_say():
    """TNEWS's shape (40th session): 227 answers now right, 262 now wrong of 10,000.  The paired normal interval is
    0.35 +- 1.96 * 100 * sqrt(b + c - (b - c)^2 / n) / n = [-0.08, +0.78] points; the shipped accuracy's is the
    binomial one."""
    kind = get_kind(load_task_config("tnews"))
    n, b, c = 10_000, 227, 262
    examples = [Example("t", None, 0) for _ in range(n)]
    fp32 = [0] * 5000 + [1] * 5000  # right on the first half
    shipped = [1] * c + [0] * (5000 - c) + [0] * b + [1] * (5000 - b)  # c of the right turn wrong, b of the wrong right
    rng = random.Random(1)
    order = list(range(n))
    rng.shuffle(order)  # the draws must not lean on where the changed ones sit
    fp32, shipped, examples = [fp32[i] for i in order], [shipped[i] for i in order], [examples[i] for i in order]
    got = dev_uncertainty(kind, examples, fp32, shipped)
    assert got.metric_value == pytest.approx(0.4965, abs=1e-12) and got.drop_value == pytest.approx(0.35, abs=1e-9)
    half = 1.96 * 100 * math.sqrt(b + c - (b - c) ** 2 / n) / n
    assert got.drop_points.low == pytest.approx(0.35 - half, abs=0.06), got
    assert got.drop_points.high == pytest.approx(0.35 + half, abs=0.06), got
    p_half = 1.96 * math.sqrt(0.4965 * 0.5035 / n)
    assert got.metric.low == pytest.approx(0.4965 - p_half, abs=0.002) and got.metric.high == pytest.approx(0.4965 + p_half, abs=0.002)
    assert (got.drop_points.resamples, got.drop_points.examples, got.drop_points.level) == (2000, n, 0.95)
    assert dev_uncertainty(kind, examples, fp32, shipped) == got  # a fixed seed: the same predictions, the same interval
    assert got.verdict(1.0) == "the whole interval is within 1 point"
    assert got.verdict(0.5).startswith("0.5 points lies inside the interval: this dev set cannot tell")
    assert got.verdict(-0.5) == "the whole interval is over -0.5 points"
    assert got.line("accuracy").startswith("95% interval over 2000 resamples of the 10000 dev examples: accuracy [0.4")
    same = dev_uncertainty(kind, examples, fp32, fp32)  # nothing changed: nothing to be unsure of
    assert (same.drop_points.low, same.drop_points.high, same.drop_value) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="3 examples, but predictions: 2 FP32, 3 shipped"):
        dev_uncertainty(kind, examples[:3], fp32[:2], shipped[:3])
    # make bench's rows: each form below FP32 on the same draws as validate's
    rows = drops_below(kind, examples, fp32, {"shipped": shipped, "FP32 again": fp32})
    assert rows["shipped"][0] == pytest.approx(0.35, abs=1e-9) and rows["shipped"][1] == got.drop_points
    assert rows["FP32 again"][0] == 0.0 and (rows["FP32 again"][1].low, rows["FP32 again"][1].high) == (0.0, 0.0)
    # the anchor on the same draws: FP32's answers as the anchor's put the shipped form as far below it as below FP32
    both = dev_uncertainty(kind, examples, fp32, shipped, anchor=fp32)
    assert (both.metric, both.drop_points) == (got.metric, got.drop_points)
    assert both.below_anchor_points == both.drop_points and both.below_anchor_value == pytest.approx(0.35, abs=1e-9)
    assert both.line("accuracy").endswith(", below the anchor [-0.09, +0.78] points")
    assert "the same for FP32, the anchor and the shipped form" in both.as_dict()["how"]


def test_every_kinds_metric_from_its_parts_is_its_own_scoring_functions(tmp_path):
    """Summed over examples, each kind's ``metric_parts`` give what its ``score`` computes (chunk_f1, span_scores,
    cmrc_scores, set_micro_f1, accuracy) on random predictions, edge cases included: nothing given, nothing to find."""
    import yaml

    rng = random.Random(7)
    text = "叶老桂在浙商银行工作"

    ner = get_kind(load_task_config("cluener"))
    types = ("name", "company")
    spans = [(t, s, s + w) for t in types for s in range(4) for w in (1, 2)]
    ner_examples = [LabelingExample(text, tuple(Entity(t, s, e, text[s:e]) for t, s, e in rng.sample(spans, rng.randint(0, 3))))
                    for _ in range(200)]
    ner_pred = [tuple(rng.sample(spans, rng.randint(0, 3))) for _ in ner_examples]
    given = [[Entity(t, s, e, text[s:e]) for t, s, e in p] for p in ner_pred]
    assert _whole(ner, ner_examples, ner_pred) == pytest.approx(chunk_f1([e.entities for e in ner_examples], given).f1, abs=1e-12)
    assert _whole(ner, ner_examples[:1], [()]) == chunk_f1([ner_examples[0].entities], [[]]).f1
    assert _whole(ner, [LabelingExample(text, ())], [()]) == chunk_f1([[]], [[]]).f1 == 0.0

    uie = get_kind(load_task_config("uie"))
    pairs = [(s, s + w) for s in range(6) for w in (1, 2, 3)]
    uie_examples = [ExtractionExample(text, "公司", tuple(rng.sample(pairs, rng.randint(0, 2)))) for _ in range(200)]
    uie_pred = [tuple(rng.sample(pairs, rng.randint(0, 2))) for _ in uie_examples]
    assert _whole(uie, uie_examples, uie_pred) == pytest.approx(
        span_scores(uie_pred, [e.spans for e in uie_examples]).f1, abs=1e-12)
    assert _whole(uie, uie_examples[:1], [()]) == span_scores([()], [uie_examples[0].spans]).f1

    mrc = get_kind(load_task_config("cmrc2018"))
    context = "叶老桂在浙商银行工作。浙商银行在杭州。"
    mrc_examples = [QAExample(f"q{i}", "谁？", context, (Answer("浙商银行", 4), Answer("杭州", 16))) for i in range(100)]
    mrc_pred = [rng.choice([None, (4, 8), (0, 3), (3, 9), (16, 18), (11, 15)]) for _ in mrc_examples]
    texts = [context[p[0]:p[1]] if p else "" for p in mrc_pred]  # as its score reads a span: no answer is ""
    assert _whole(mrc, mrc_examples, mrc_pred) == pytest.approx(
        cmrc_scores(texts, [[a.text for a in e.answers] for e in mrc_examples]).f1, abs=1e-12)

    tnews = get_kind(load_task_config("tnews"))
    gold = [rng.randrange(5) for _ in range(300)]
    pred = [rng.randrange(5) for _ in gold]
    assert _whole(tnews, [Example("t", None, g) for g in gold], pred) == pytest.approx(np.mean(np.array(gold) == pred), abs=1e-12)

    task = tmp_path / "sets.yaml"
    task.write_text(yaml.safe_dump({"task": "sets", "type": "classification", "classification": {"multi_label": True},
                                    "data": {"dir": str(tmp_path), "labels_file": None}}), encoding="utf-8")
    sets = get_kind(load_task_config(str(task)))
    targets = np.array([[rng.random() < 0.3 for _ in range(4)] for _ in range(200)])
    given = np.array([[rng.random() < 0.3 for _ in range(4)] for _ in range(200)])
    set_examples = [Example("t", None, tuple(int(v) for v in row)) for row in targets]
    set_pred = [tuple(int(i) for i in np.flatnonzero(row)) for row in given]
    assert _whole(sets, set_examples, set_pred) == pytest.approx(set_micro_f1(given, targets), abs=1e-12)
    nothing = [Example("t", None, (0, 0, 0, 0))]
    assert _whole(sets, nothing, [()]) == set_micro_f1(np.zeros((1, 4), bool), np.zeros((1, 4), bool)) == 1.0
