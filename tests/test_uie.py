"""UIE (schema-prompted extraction): data, pointer targets, decoding, metric, checkpoint conversion, config.

Decoding is held to PaddleNLP's own ``get_span``; the checkpoint conversion to PaddleNLP's own ``UIE`` network.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import pipeline  # noqa: F401  (numpy before paddle)
from pipeline.errors import ConfigError, DataError
from pipeline.extraction.examples import ExtractionExample, read_uie_lines
from pipeline.extraction.metric import span_scores
from pipeline.extraction.spans import decode_spans, pair_pointers
from pipeline.kinds.uie import pointer_targets


def _write_lines(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_uie_lines_are_read_and_checked(tmp_path):
    good = {"content": "张三在华为公司工作", "prompt": "公司", "result_list": [{"text": "华为公司", "start": 3, "end": 7}]}
    neg = {"content": "今天天气很好", "prompt": "姓名", "result_list": []}
    ex = read_uie_lines(_write_lines(tmp_path / "ok.json", [good, neg]))
    assert [(e.prompt, e.spans) for e in ex] == [("公司", ((3, 7),)), ("姓名", ())]

    bad_cases = [
        ({**good, "result_list": [{"text": "华为公司", "start": 6, "end": 12}]}, "outside the content"),
        ({**good, "result_list": [{"text": "腾讯", "start": 3, "end": 7}]}, "differs from the content slice"),
        ({**good, "prompt": "  "}, "field 'prompt' missing, empty"),
        ({**good, "content": ""}, "field 'content'"),
        ({**good, "result_list": [{"text": "华为", "start": "3", "end": 5}]}, r"result_list\[0\] must be"),
    ]
    for row, message in bad_cases:
        path = _write_lines(tmp_path / "bad.json", [neg, row])
        with pytest.raises(DataError, match=f"bad.json:2: .*{message}"):
            read_uie_lines(path)


def test_pairing_is_paddlenlps_get_span():
    from paddlenlp.utils.tools import get_span

    rng = random.Random(0)
    for _ in range(300):
        starts = rng.sample(range(30), rng.randint(0, 6))
        ends = rng.sample(range(30), rng.randint(0, 6))
        assert pair_pointers(starts, ends) == sorted(get_span(starts, ends)), (starts, ends)


@pytest.fixture
def vocab_dir(tmp_path) -> Path:
    d = tmp_path / "vocab"
    d.mkdir()
    chars = "张三李四在华为公司工作说今天气很好组织机构姓名"
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(chars)]) + "\n",
                                 encoding="utf-8")
    return d


def _window(example, offsets):
    return SimpleNamespace(example_index=example, offsets=np.asarray(offsets, dtype=np.int64))


def test_decode_merges_windows_thresholds_and_limits_length():
    content = "张三在华为公司"
    # window 0: [CLS] p [SEP] 张 三 在 [SEP]; window 1: [CLS] p [SEP] 在 华 为 公 司 [SEP]
    off0 = [(-1, -1)] * 3 + [(0, 1), (1, 2), (2, 3)] + [(-1, -1)]
    off1 = [(-1, -1)] * 3 + [(2, 3), (3, 4), (4, 5), (5, 6), (6, 7)] + [(-1, -1)]
    hi, lo = 4.0, -4.0
    l0 = np.full((len(off0), 2), lo)
    l0[3, 0], l0[4, 1] = hi, hi  # 张三
    l0[0] = hi  # [CLS] is never a span
    l1 = np.full((len(off1) + 2, 2), lo)  # padded rows beyond the window are ignored
    l1[4, 0], l1[7, 1] = hi, 1.0  # 华为公司, lower probability
    l1[-1] = hi
    found = decode_spans([l0, l1], [_window(0, off0), _window(0, off1)], [content], position_prob=0.5, max_span_len=8)
    assert [(s.text, s.start, s.end) for s in found[0]] == [("张三", 0, 2), ("华为公司", 3, 7)]
    p = 1 / (1 + np.exp(-hi))
    assert found[0][1].probability == pytest.approx(p * 1 / (1 + np.exp(-1.0)))
    # a stricter threshold drops the weaker end; a shorter max span drops the 4-token span
    strict = decode_spans([l0, l1], [_window(0, off0), _window(0, off1)], [content], position_prob=0.8, max_span_len=8)
    assert [s.text for s in strict[0]] == ["张三"]
    short = decode_spans([l0, l1], [_window(0, off0), _window(0, off1)], [content], position_prob=0.5, max_span_len=3)
    assert [s.text for s in short[0]] == ["张三"]
    with pytest.raises(ValueError, match="belongs to example 1"):
        decode_spans([l0], [_window(1, off0)], [content], position_prob=0.5, max_span_len=8)


def test_pointer_targets_mark_only_spans_inside_the_window():
    off = np.array([(-1, -1), (-1, -1), (-1, -1), (2, 3), (3, 4), (4, 5), (-1, -1)])
    t = pointer_targets(off, [(3, 5), (0, 2), (4, 9)])  # inside; before the window; past its end
    assert t[:, 0].nonzero()[0].tolist() == [4] and t[:, 1].nonzero()[0].tolist() == [5]


def test_span_scores_micro_average():
    s = span_scores([[(0, 2), (3, 7)], [], [(1, 2)]], [[(0, 2)], [(4, 5)], [(1, 2)]])
    assert (s.correct, s.predicted, s.gold) == (2, 3, 3) and s.f1 == pytest.approx(2 / 3)
    assert span_scores([[]], [[]]).f1 == 0.0


def _uie_cfg(tmp_path, rows_train, rows_dev, **extra):
    from pipeline.config import load_task_config

    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    _write_lines(d / "train.json", rows_train)
    _write_lines(d / "dev.json", rows_dev)
    overrides = {"task": "t", "type": "uie", "data.dir": str(d), "data.format": "cluener", "data.labels_file": None,
                 "labels": ["name", "company"], "max_seq_len": 32, **extra}
    return load_task_config("uie", overrides)


def test_cluener_becomes_one_prompt_per_type_with_negatives(tmp_path):
    from pipeline.kinds import get_kind

    rows = [{"text": "张三在华为公司", "label": {"name": {"张三": [[0, 1]]}, "company": {"华为公司": [[3, 6]]}}},
            {"text": "李四说", "label": {"name": {"李四": [[0, 1]]}}}]
    cfg = _uie_cfg(tmp_path, rows, rows)
    data = get_kind(cfg).load(cfg)
    assert [(e.content, e.prompt, e.spans) for e in data.dev.examples] == [
        ("张三在华为公司", "姓名", ((0, 2),)), ("张三在华为公司", "公司", ((3, 7),)),
        ("李四说", "姓名", ((0, 2),)), ("李四说", "公司", ())]
    cfg = _uie_cfg(tmp_path, rows, rows, **{"uie.max_eval_texts": 1})
    data = get_kind(cfg).load(cfg)
    assert len(data.dev.examples) == 2 and data.dev.skip_reasons == {"beyond uie.max_eval_texts": 1}

    cfg = _uie_cfg(tmp_path, rows, rows, labels=["name"])
    with pytest.raises(DataError, match="entity type 'company' is not one of the task's labels"):
        get_kind(cfg).load(cfg)
    cfg = _uie_cfg(tmp_path, rows, rows, labels=["name", "company", "pet"])
    with pytest.raises(ConfigError, match="uie.prompts: no prompt for entity type 'pet'"):
        get_kind(cfg).load(cfg)


def test_prompt_longer_than_the_limit_is_refused_not_cut(tmp_path, vocab_dir):
    from pipeline.kinds import get_kind
    from pipeline.tokenizer import Tokenizer

    cfg = _uie_cfg(tmp_path, [{"text": "张三", "label": {}}], [{"text": "张三", "label": {}}], **{"uie.max_prompt_len": 2})
    tok = Tokenizer.from_model_dir(vocab_dir, 32)
    examples = [ExtractionExample("张三在华为公司", "组织机构", (), "dev.json:7")]
    with pytest.raises(DataError, match="dev.json:7: prompt '组织机构' is 4 tokens, over uie.max_prompt_len 2"):
        get_kind(cfg).featurize(tok, examples, cfg)


def test_uie_config_checks():
    from pipeline.config import load_task_config

    with pytest.raises(ConfigError, match="uie.max_prompt_len 30 leaves no room"):
        load_task_config("uie", {"uie.max_prompt_len": 30, "max_seq_len": 32})
    with pytest.raises(ConfigError, match="uie.position_prob must be below 1"):
        load_task_config("uie", {"uie.position_prob": 1.0})
    with pytest.raises(ConfigError, match="uie.prompts must be a mapping"):
        load_task_config("uie", {"uie.prompts": ["地址"]})
    cfg = load_task_config("uie", {"uie.prompts.name": "人名"})
    assert cfg.kind_settings.prompts["name"] == "人名" and cfg.kind_settings.prompts["company"] == "公司"
    with pytest.raises(ConfigError, match="data.format: 'squad' does not fit type 'uie'"):
        load_task_config("uie", {"data.format": "squad"})


def test_positive_weight_scales_only_the_span_edges_and_one_is_paddlenlps_loss():
    """uie.positive_weight: 1.0 is PaddleNLP's UIE loss (mean BCE over the real tokens' start/end columns); w > 1
    multiplies the terms of gold starts/ends only, on logits shifted by ln w; padding rows (-100) never count."""
    import paddle
    import paddle.nn.functional as F

    from pipeline.config import load_task_config
    from pipeline.kinds import get_kind
    from pipeline.kinds.base import Batch

    rng = np.random.RandomState(0)
    logits = rng.randn(2, 4, 2).astype("float32")
    targets = np.array([[[1, 0], [0, 0], [0, 1], [-100, -100]], [[0, 0], [1, 1], [0, 0], [0, 0]]], dtype=np.int64)
    batch = Batch(np.arange(2), np.zeros((2, 4), np.int64), np.zeros((2, 4), np.int64), targets)
    real = targets[..., 0] >= 0
    gold = targets[real] == 1
    for w in (1.0, 2.5):
        bce = F.binary_cross_entropy_with_logits(paddle.to_tensor(logits[real] + np.log(w)),
                                                 paddle.to_tensor(targets[real].astype("float32")), reduction="none").numpy()
        kind = get_kind(load_task_config("uie", {"uie.positive_weight": w}))
        got = float(kind.loss(paddle.to_tensor(logits), batch, pad_id=0))
        assert got == pytest.approx((bce * np.where(gold, w, 1.0)).sum() / bce.size, rel=1e-6)
    assert float(get_kind(load_task_config("uie")).loss(paddle.to_tensor(logits), batch, 0)) > \
        float(get_kind(load_task_config("uie", {"uie.positive_weight": 1.0})).loss(paddle.to_tensor(logits), batch, 0))
    paddlenlp_mean = F.binary_cross_entropy_with_logits(paddle.to_tensor(logits[real]),
                                                        paddle.to_tensor(targets[real].astype("float32"))).numpy()
    assert float(get_kind(load_task_config("uie", {"uie.positive_weight": 1.0})).loss(paddle.to_tensor(logits), batch, 0)) == \
        pytest.approx(float(paddlenlp_mean), rel=1e-6)
    with pytest.raises(ConfigError, match="uie.positive_weight"):
        load_task_config("uie", {"uie.positive_weight": 0})


@pytest.mark.parametrize("w", [1.0, 2.5, 6.0])
def test_positive_weight_keeps_the_pointer_probabilities_calibrated(w):
    """The loss is lowest where the model's own sigmoid equals the true positive rate, whatever uie.positive_weight:
    a plain weighted BCE would put that minimum at odds w times the true ones (then position_prob 0.5 decides at a
    true 1/(1+w); measured in tasks/uie.yaml)."""
    import paddle

    from pipeline.config import load_task_config
    from pipeline.kinds import get_kind
    from pipeline.kinds.base import Batch

    targets = np.zeros((1, 100, 2), dtype=np.int64)
    targets[0, :8] = 1  # 8% of the pointer targets are span edges
    batch = Batch(np.arange(1), np.zeros((1, 100), np.int64), np.zeros((1, 100), np.int64), targets)
    kind = get_kind(load_task_config("uie", {"uie.positive_weight": w}))
    zs = np.linspace(-4.0, 0.0, 401)
    losses = [float(kind.loss(paddle.to_tensor(np.full((1, 100, 2), z, np.float32)), batch, pad_id=0)) for z in zs]
    best = 1.0 / (1.0 + np.exp(-zs[int(np.argmin(losses))]))
    assert best == pytest.approx(0.08, abs=0.002)


def test_paddlenlp_uie_checkpoint_converts_to_the_same_network(tmp_path, vocab_dir):
    """A PaddleNLP ``UIE`` directory (linear_start/linear_end) becomes ErnieForUIE with identical numbers."""
    import paddle
    from paddlenlp.transformers import UIE, ErnieConfig

    from pipeline.extraction.checkpoint import convert_uie_checkpoint, is_paddlenlp_uie
    from pipeline.modeling import load_classifier

    paddle.seed(3)
    config = ErnieConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         max_position_embeddings=64, type_vocab_size=2)
    src = tmp_path / "uie-tiny"
    uie = UIE(config)
    uie.eval()
    uie.save_pretrained(str(src))
    (src / "vocab.txt").write_text((Path(vocab_dir) / "vocab.txt").read_text(encoding="utf-8"), encoding="utf-8")
    assert is_paddlenlp_uie(src) and not is_paddlenlp_uie(vocab_dir)

    dst = convert_uie_checkpoint(src, tmp_path / "converted")
    model = load_classifier(dst, 2)
    assert type(model).__name__ == "ErnieForUIE"
    ids = paddle.to_tensor(np.array([[1, 5, 7, 9, 2, 0]], dtype="int64"))
    types = paddle.zeros_like(ids)
    start_prob, end_prob = uie(ids, token_type_ids=types)
    logits = model(ids, token_type_ids=types).numpy()
    np.testing.assert_allclose(1 / (1 + np.exp(-logits[..., 0])), start_prob.numpy(), atol=1e-6)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits[..., 1])), end_prob.numpy(), atol=1e-6)

    (src / "model_state.pdparams").unlink()
    with pytest.raises(Exception, match="needs config.json and model_state.pdparams"):
        convert_uie_checkpoint(src, tmp_path / "again")
