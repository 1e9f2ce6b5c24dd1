"""Task kinds: features, targets, scoring from raw outputs, losses, and the config/model checks around them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.config import load_task_config
from pipeline.errors import ConfigError, DataError, ModelError
from pipeline.kinds import get_kind
from test_kinds_e2e import write_tiny_cluener, write_tiny_cmrc


def _vocab(tmp_path, texts):
    from pipeline.tokenizer import Tokenizer, build_char_vocab, write_vocab

    tmp_path.mkdir(parents=True, exist_ok=True)
    write_vocab(build_char_vocab(texts, 1), tmp_path)
    return Tokenizer.from_model_dir(tmp_path, 32)


def _ner(tmp_path, **over):
    data = write_tiny_cluener(tmp_path / "data", 40, 20)
    cfg = load_task_config("cluener", {"data.dir": str(data), "max_seq_len": 32, **over})
    cfg.labels[:] = ["name", "company"]
    return cfg


def _one_hot(targets: np.ndarray, width: int) -> np.ndarray:
    out = np.full((len(targets), width), -5.0, dtype=np.float32)
    out[np.arange(len(targets)), np.maximum(targets, 0)] = 5.0
    return out


def test_ner_features_and_oracle_score(tmp_path):
    cfg = _ner(tmp_path)
    kind = get_kind(cfg)
    assert kind.tags == ["O", "B-name", "I-name", "B-company", "I-company"]
    data = kind.load(cfg)
    assert data.labels == tuple(kind.tags) and len(data.dev.examples) == 20
    tok = _vocab(tmp_path / "vocab", [e.text for e in data.train.examples + data.dev.examples])
    fs = kind.featurize(tok, data.dev.examples, cfg)
    assert len(fs) == len(data.dev.examples)
    f = fs.features[0]
    assert f.target[0] == -100 and f.target[-1] == -100  # [CLS], [SEP] are not trained on
    # Outputs that put all mass on the gold tags score exactly 1.0; all "O" scores 0.
    perfect = [_one_hot(x.target, len(kind.tags)) for x in fs.features]
    score = fs.score(perfect)
    assert score.name == "f1" and score.value == 1.0 and score.metrics["gold_entities"] > 0
    nothing = [_one_hot(np.zeros_like(x.target), len(kind.tags)) for x in fs.features]
    assert fs.score(nothing).value == 0.0
    batch = fs.batch([0, 1, 2])
    assert batch.targets.shape == batch.input_ids.shape and (batch.targets[batch.input_ids == tok.pad_id] == -100).all()


def test_ner_unknown_entity_type_is_a_data_error(tmp_path):
    cfg = _ner(tmp_path)
    cfg.labels[:] = ["name"]  # the data also has "company"
    with pytest.raises(DataError, match="entity type 'company'"):
        get_kind(cfg).load(cfg)


def test_ner_needs_entity_types(tmp_path):
    with pytest.raises(ConfigError, match="labels: list the entity types"):
        get_kind(load_task_config("cluener", {"labels": []}))


def _mrc(tmp_path, **over):
    data = write_tiny_cmrc(tmp_path / "data")
    cfg = load_task_config("cmrc2018", {"data.dir": str(data), "max_seq_len": 40, "reading.doc_stride": 12,
                                        "reading.max_query_len": 12, "reading.max_answer_len": 8, **over})
    return cfg


def test_reading_split_windows_and_oracle_score(tmp_path):
    cfg = _mrc(tmp_path)
    kind = get_kind(cfg)
    data = kind.load(cfg)
    dev_ctx = {e.context for e in data.dev.examples}
    assert not dev_ctx & {e.context for e in data.train.examples}  # no passage on both sides
    assert "held-out" in data.dev.source
    texts = [e.question for e in data.train.examples + data.dev.examples] + [e.context for e in data.train.examples + data.dev.examples]
    tok = _vocab(tmp_path / "vocab", texts)
    fs = kind.featurize(tok, data.dev.examples, cfg)
    assert len(fs) > len(data.dev.examples)  # several windows per passage
    perfect = []
    for f in fs.features:
        out = np.full((len(f.input_ids), 2), -5.0, dtype=np.float32)
        if f.target[0] > 0:
            out[f.target[0], 0] = out[f.target[1], 1] = 5.0
        perfect.append(out)
    score = fs.score(perfect)
    assert score.metrics["em"] == 1.0 and score.value == 1.0
    # Training keeps every window holding its answer and a fraction of the others.
    train = kind.featurize(tok, data.train.examples, cfg)
    kept = kind.for_training(train, 0)
    positives = sum(1 for f in train.features if f.target[0] > 0)
    assert positives <= len(kept) < len(train)
    assert sum(1 for f in kept.features if f.target[0] > 0) == positives


def test_reading_eval_cap_and_config_checks(tmp_path):
    cfg = _mrc(tmp_path, **{"reading.max_eval_questions": 5})
    assert len(get_kind(cfg).load(cfg).dev.examples) == 5
    with pytest.raises(ConfigError, match="no room for the passage"):
        load_task_config("cmrc2018", {"max_seq_len": 64, "reading.max_query_len": 62})
    with pytest.raises(ConfigError, match=r"^reading.doc_stride must be >= 1, got 0"):  # the kind's own section
        load_task_config("cmrc2018", {"reading.doc_stride": 0})
    with pytest.raises(ConfigError, match=r"unknown key reading.doc_strid \(valid: reading.dev_for_training, "):
        load_task_config("cmrc2018", {"reading.doc_strid": 64})
    assert load_task_config("cluener").kind_settings is None  # a kind without a section of its own
    with pytest.raises(ConfigError, match="does not fit type"):
        load_task_config("cmrc2018", {"data.format": "cluener"})


def test_int8_agreement_compares_what_each_kind_decides(tmp_path):
    """A window's decision is its start and end position; comparing argmax over the (start, end) pair of each
    token instead made every CMRC recipe's agreement 0.0, so the search's tie-break had nothing to go on."""
    from pipeline.quantization.search import _agreement

    mrc = get_kind(_mrc(tmp_path))
    fp32 = np.zeros((6, 2), np.float32)
    fp32[0] = 9.0  # [CLS]: the no-answer score, largest in every window of a real model; never a span
    fp32[2, 0], fp32[4, 1] = 5.0, 5.0  # answer: tokens 2..4
    same_span = fp32 + np.array([[0.0, 1.0]] * 6, np.float32) * 0.1  # every token leans to "end": same span
    moved = fp32.copy()
    moved[3, 0] = 6.0  # start moves to token 3
    np.testing.assert_array_equal(mrc.decisions(fp32), [2, 4])
    assert _agreement([same_span, moved], [fp32, fp32], mrc.decisions) == 0.5
    assert _agreement([same_span], [fp32]) == 0.0  # the per-token argmax this replaced
    ner = get_kind(load_task_config("cluener"))
    np.testing.assert_array_equal(ner.decisions(np.eye(3, dtype=np.float32)), [0, 1, 2])


def test_reading_loss_ignores_padding(tmp_path):
    import paddle

    cfg = _mrc(tmp_path)
    kind = get_kind(cfg)
    data = kind.load(cfg)
    tok = _vocab(tmp_path / "vocab", [e.question + e.context for e in data.dev.examples])
    fs = kind.featurize(tok, data.dev.examples, cfg)
    lengths = fs.lengths()
    i, j = int(np.argmin(lengths)), int(np.argmax(lengths))
    batch = fs.batch([i, j])
    logits = paddle.zeros(list(batch.input_ids.shape) + [2])
    base = float(kind.loss(logits, batch, fs.pad_id))
    # Huge logits on the short row's padding must not change its loss: padding is masked out.
    big = np.zeros(list(batch.input_ids.shape) + [2], dtype=np.float32)
    big[0, lengths[i]:, :] = 50.0
    assert float(kind.loss(paddle.to_tensor(big), batch, fs.pad_id)) == pytest.approx(base, abs=1e-4)


def test_head_of_another_kind_is_refused(tiny_finetuned):
    from pipeline.modeling import check_head, inspect_model

    info = inspect_model(tiny_finetuned["model_dir"])
    assert info.architecture == "ErnieForSequenceClassification"
    with pytest.raises(ModelError, match="needs ErnieForTokenClassification"):
        check_head(info, ["O", "B-x", "I-x"], 32, "ErnieForTokenClassification")


def test_model_loads_with_the_head_it_was_saved_with(tmp_path):
    from paddlenlp.transformers import ErnieConfig

    from pipeline.ernie_models import ErnieForQuestionAnswering, ErnieForTokenClassification
    from pipeline.modeling import load_classifier

    config = ErnieConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         num_labels=5)
    for cls, width in ((ErnieForTokenClassification, 5), (ErnieForQuestionAnswering, 2)):
        d = tmp_path / cls.__name__
        cls(config).save_pretrained(str(d))
        assert json.loads((d / "config.json").read_text())["architectures"] == [cls.__name__]
        model = load_classifier(d, width)
        assert type(model) is cls
        import paddle

        assert model(paddle.ones([2, 7], "int64")).shape == [2, 7, width]


def test_each_kind_class_declares_what_the_task_config_checks_of_it():
    """The config has no kind table of its own: a kind's data formats, its own section and first segment come from its
    class (``kind_class``), and data.format accepts exactly the formats some kind reads."""
    from pipeline.config import DataConfig
    from pipeline.contract import TaskKind as Kind
    from pipeline.kinds import data_formats, kind_class

    classes = {k.value: kind_class(k.value) for k in Kind}
    assert all(c.data_formats and c.name == name for name, c in classes.items())
    assert set(data_formats()) == {f for c in classes.values() for f in c.data_formats}
    assert {n for n, c in classes.items() if c.first_segment} == {Kind.READING_COMPREHENSION.value, Kind.UIE.value}
    assert {n for n, c in classes.items() if c.settings} == {Kind.CLASSIFICATION.value, Kind.READING_COMPREHENSION.value,
                                                              Kind.UIE.value}
    assert {c.settings[0] for c in classes.values() if c.settings} == {"classification", "reading", "uie"}  # YAML keys
    for c in classes.values():  # a first segment names a key of the kind's own section
        if c.first_segment:
            key, _ = c.first_segment
            assert isinstance(getattr(c.settings[1](), key), int)
    with pytest.raises(ConfigError, match="data.format: 'xml' is not one of clue, csv, tsv, cluener, msra_bio, squad, uie"):
        DataConfig(format="xml")
    with pytest.raises(ConfigError, match="type: 'summarization' is not one of"):
        kind_class("summarization")
