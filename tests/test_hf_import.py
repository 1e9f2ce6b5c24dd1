"""Hugging Face BERT/ERNIE checkpoints in (``pipeline.hf_import``), held against Hugging Face itself.

``tests/golden/hf/`` was made once by ``scripts/make_hf_golden.py`` with transformers + torch (``versions.json``):
tiny random models of each head (BERT and ERNIE 3.0's layout with task-type embeddings and LayerNorm epsilon
1e-5), the ids HF's own tokenizer gave for ``inputs.json``'s texts and pairs, and HF's logits on them.  Every
parameter is random, so a swapped, untransposed or dropped tensor, or the wrong epsilon, moves the logits far past
the tolerance here; the tests read only these files (CI cannot install torch).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (paddle after numpy)
from pipeline import hf_import
from pipeline.errors import ModelError

GOLDEN = Path(__file__).parent / "golden" / "hf"
INPUTS = json.loads((GOLDEN / "inputs.json").read_text(encoding="utf-8"))
MODELS = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
ATOL = 2e-5  # float32 sums in another order; the wrong LayerNorm epsilon alone moves these logits by ~4e-3


def golden(name: str) -> dict:
    return dict(np.load(GOLDEN / name / "golden.npz"))


def copy_of(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(GOLDEN / name, dst)
    return dst


def forward(model_dir: Path, g: dict, encoder: bool = False) -> np.ndarray:
    """The converted model's logits on HF's own inputs (no attention mask: PaddleNLP masks where ids are [PAD])."""
    import paddle

    from pipeline.ernie_models import ErnieForSequenceClassification
    from pipeline.modeling import load_classifier

    model = load_classifier(model_dir, g["logits"].shape[-1], ErnieForSequenceClassification if encoder else None)
    with paddle.no_grad():
        ids, types = paddle.to_tensor(g["input_ids"]), paddle.to_tensor(g["token_type_ids"])
        if encoder:
            return model.ernie(ids, token_type_ids=types)[0].numpy()
        return model(ids, token_type_ids=types).numpy()


def real_positions(g: dict, values: np.ndarray) -> np.ndarray:
    """Token-level outputs at real tokens only (what a padded position computes is never read)."""
    return values[g["attention_mask"].astype(bool)] if values.ndim == 3 else values


@pytest.mark.parametrize("name", MODELS)
def test_converted_logits_equal_hugging_faces(name, tmp_path):
    out = hf_import.convert(GOLDEN / name, tmp_path / "converted")
    g = golden(name)
    ours = forward(out, g, encoder=name.startswith("bert-encoder"))
    assert ours.shape == g["logits"].shape
    np.testing.assert_allclose(real_positions(g, ours), real_positions(g, g["logits"]), atol=ATOL, rtol=0)
    record = json.loads((out / hf_import.RECORD).read_text())
    assert record["source"] == str(GOLDEN / name) and not (tmp_path / "converted.partial").exists()


def test_ernie_layer_norm_epsilon_is_the_configs(tmp_path):
    """ERNIE 3.0's ports say layer_norm_eps 1e-5; PaddleNLP's ERNIE would use 1e-12 whatever the config says.  The
    golden logits tell the two apart (so the comparison above can fail on it)."""
    import paddle

    out = hf_import.convert(GOLDEN / "ernie-sequence", tmp_path / "converted")
    assert json.loads((out / "config.json").read_text())["layer_norm_eps"] == pytest.approx(1e-5)
    from pipeline.modeling import load_classifier

    model = load_classifier(out, 3)
    norms = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.LayerNorm)]
    assert norms and all(n._epsilon == pytest.approx(1e-5) for n in norms)
    g = golden("ernie-sequence")
    for n in norms:
        n._epsilon = 1e-12
    with paddle.no_grad():
        wrong = model(paddle.to_tensor(g["input_ids"]), token_type_ids=paddle.to_tensor(g["token_type_ids"])).numpy()
    assert np.abs(wrong - g["logits"]).max() > 50 * ATOL


@pytest.mark.parametrize("name", ["bert-sequence", "bert-encoder-cased", "ernie-token"])
def test_offline_tokenizer_gives_hugging_faces_ids(name, tmp_path):
    """Single texts (padded to the longest, as HF's tokenizer padded them), including PaddleNLP's symbol rule's
    case ``广州｜D2``, accents and upper case (the cased model keeps case)."""
    from pipeline.tokenizer import Tokenizer

    out = hf_import.convert(GOLDEN / name, tmp_path / "converted")
    g = golden(name)
    enc = Tokenizer.from_model_dir(out, max_seq_len=64).encode(INPUTS["texts"])
    np.testing.assert_array_equal(enc.input_ids, g["input_ids"])
    np.testing.assert_array_equal(enc.token_type_ids, g["token_type_ids"])
    # PaddleNLP's rules give other ids for these texts: the rules in tokenizer_config.json are what makes them equal
    paddle_rules = Tokenizer(out / "vocab.txt", lowercase=not name.endswith("cased"), max_seq_len=64)
    assert paddle_rules.encode(INPUTS["texts"]).input_ids.tolist() != g["input_ids"].tolist()


@pytest.mark.parametrize("name", ["bert-pairs", "ernie-qa"])
def test_pairs_are_cut_as_hugging_faces_longest_first(name, tmp_path):
    """Pairs cut to max_seq_len by HF's rule (half each when both are long, the shorter whole otherwise): offline
    and by the served tokenizer (the bundle's copy of wordpiece.py, reading the same tokenizer_config.json)."""
    from pipeline.tokenizer import Tokenizer
    from serving.triton import text_input

    out = hf_import.convert(GOLDEN / name, tmp_path / "converted")
    g = golden(name)
    firsts, seconds = [a for a, _ in INPUTS["pairs"]], [b for _, b in INPUTS["pairs"]]
    enc = Tokenizer.from_model_dir(out, max_seq_len=INPUTS["max_seq_len"]).encode(firsts, seconds)
    np.testing.assert_array_equal(enc.input_ids, g["input_ids"])
    np.testing.assert_array_equal(enc.token_type_ids, g["token_type_ids"])
    shutil.copyfile(Path(pipeline.__file__).parent / "wordpiece.py", out / "wordpiece.py")
    served, _ = text_input.wordpiece_module(out).encode_pairs(text_input.wordpiece(out), firsts, seconds,
                                                              INPUTS["max_seq_len"], text_input.wordpiece_options(out)["rules"])
    ids, types = text_input.pad_rows(served, 0)
    np.testing.assert_array_equal(ids, g["input_ids"])
    np.testing.assert_array_equal(types, g["token_type_ids"])


def test_balanced_cut_is_the_tokenizers_librarys_own():
    """``truncate_pair_balanced`` against ``tokenizers``' own longest_first truncation, every length pair to 14."""
    from pipeline import wordpiece

    tok = wordpiece.build(GOLDEN / "bert-sequence" / "vocab.txt", rules="huggingface")
    tok.enable_truncation(max_length=13, strategy="longest_first")
    a, b = tok.token_to_id("今"), tok.token_to_id("天")
    for len_a in range(15):
        for len_b in range(15):
            ids = tok.encode("今" * len_a, "天" * len_b).ids
            assert (ids.count(a), ids.count(b)) == wordpiece.truncate_pair_balanced(len_a, len_b, 10), (len_a, len_b)


def test_a_tokenizer_json_without_vocab_txt_gives_the_same_model(tmp_path):
    src = copy_of("ernie-token", tmp_path)
    (src / "vocab.txt").unlink()
    out = hf_import.convert(src, tmp_path / "converted")
    assert (out / "vocab.txt").read_text() == (GOLDEN / "ernie-token" / "vocab.txt").read_text()
    g = golden("ernie-token")
    np.testing.assert_allclose(real_positions(g, forward(out, g)), real_positions(g, g["logits"]), atol=ATOL, rtol=0)


def test_labels_and_heads_carry_over(tmp_path):
    from pipeline.modeling import inspect_model

    seq = inspect_model(hf_import.convert(GOLDEN / "bert-sequence", tmp_path / "seq"))
    assert seq.labels == ("体育", "财经", "科技") and seq.head_classes == 3
    assert seq.architecture == "ErnieForSequenceClassification"
    tags = inspect_model(hf_import.convert(GOLDEN / "bert-token", tmp_path / "tags"))
    assert tags.labels == ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG") and tags.architecture == "ErnieForTokenClassification"
    qa = inspect_model(hf_import.convert(GOLDEN / "bert-qa", tmp_path / "qa"))
    assert qa.architecture == "ErnieForQuestionAnswering" and qa.head_classes == 2
    encoder = inspect_model(hf_import.convert(GOLDEN / "bert-encoder-cased", tmp_path / "enc"))
    assert encoder.head_classes is None and encoder.architecture is None


def test_encoder_only_drops_a_head(tmp_path):
    from pipeline.modeling import inspect_model

    out = hf_import.convert(GOLDEN / "bert-sequence", tmp_path / "seq", keep_head=False)
    info = inspect_model(out)
    assert info.head_classes is None and info.labels is None and info.architecture is None


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


REFUSALS = [
    ("config.json", {"model_type": "roberta"}, "config.json: model_type 'roberta' is not supported"),
    ("config.json", {"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
    ("config.json", {"architectures": ["BertForMultipleChoice"]}, "architectures 'BertForMultipleChoice': a head"),
    ("config.json", {"hidden_act": "gelu_new"}, "hidden_act 'gelu_new' is not supported"),
    ("config.json", {"is_decoder": True}, "is_decoder is true"),
    ("config.json", {"intermediate_size": 64}, "intermediate_size 64 do not match the weights"),
    ("config.json", {"num_hidden_layers": 3}, "num_hidden_layers 3 but the weights have no"),
    ("config.json", {"num_hidden_layers": 1}, "num_hidden_layers 1 but the weights hold layer 1"),
    ("config.json", {"vocab_size": 30522}, "vocab_size 30522 but the weights' word_embeddings have 148 rows"),
    ("config.json", {"max_position_embeddings": 512}, "max_position_embeddings 512 but the weights' position_embeddings"),
    ("tokenizer_config.json", {"tokenizer_class": "XLMRobertaTokenizer"}, "tokenizer_class 'XLMRobertaTokenizer'"),
    ("tokenizer_config.json", {"never_split": ["[X]"]}, "never_split is not supported"),
    ("tokenizer_config.json", {"unk_token": "<unk>"}, "unk_token '<unk>' is not supported"),
    ("tokenizer_config.json", {"do_basic_tokenize": False}, "do_basic_tokenize False is not supported"),
]


@pytest.mark.parametrize("file,changes,message", REFUSALS, ids=[m.split(":")[-1][:40] for _, _, m in REFUSALS])
def test_what_cannot_be_taken_is_one_line_naming_the_file(file, changes, message, tmp_path):
    src = copy_of("bert-sequence", tmp_path)
    _edit_json(src / file, **changes)
    with pytest.raises(ModelError, match=r"^[^\n]*" + message.replace("(", r"\(").replace("[", r"\[")) as err:
        hf_import.convert(src, tmp_path / "converted")
    assert str(err.value).startswith(str(src)) and "\n" not in str(err.value)
    assert not (tmp_path / "converted").exists()


def test_a_vocabulary_without_pad_is_refused(tmp_path):
    src = copy_of("bert-sequence", tmp_path)
    (src / "vocab.txt").write_text((src / "vocab.txt").read_text().replace("[PAD]\n", "[XX]\n", 1))
    with pytest.raises(ModelError, match=r"vocab.txt: vocabulary has no \[PAD\] token"):
        hf_import.convert(src, tmp_path / "converted")


def test_a_pickled_checkpoint_is_refused_unless_allowed(tmp_path):
    src = copy_of("bert-sequence", tmp_path)
    (src / "model.safetensors").rename(src / "pytorch_model.bin")
    with pytest.raises(ModelError, match=r"pytorch_model.bin: a pickle .*safe_serialization=True.*allow_pickled_weights"):
        hf_import.inspect(src)
    try:
        import torch  # noqa: F401
    except ImportError:  # the opt-in names what it needs rather than failing in an import
        with pytest.raises(ModelError, match=r"pytorch_model.bin: reading a pickled checkpoint needs torch"):
            hf_import.convert(src, tmp_path / "converted", allow_pickle=True)


def test_a_broken_safetensors_file_is_one_line(tmp_path):
    src = copy_of("bert-sequence", tmp_path)
    (src / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ModelError, match=r"model.safetensors: cannot read safetensors"):
        hf_import.convert(src, tmp_path / "converted")


def test_a_paddlenlp_directory_is_not_taken_for_a_hugging_face_one(tmp_path):
    src = copy_of("bert-sequence", tmp_path)
    assert hf_import.is_hugging_face(src)
    (src / "model_state.pdparams").write_bytes(b"")
    assert not hf_import.is_hugging_face(src)


def _task(tmp_path: Path, texts: list[str]) -> Path:
    """A classification task over the golden model's three labels, its dev set the golden texts."""
    from tests.conftest import write_tiny_task_yaml

    data = tmp_path / "data"
    data.mkdir()
    labels = ["体育", "财经", "科技"]
    for split in ("train.json", "dev.json"):
        rows = [{"label": labels[i % 3], "sentence": t} for i, t in enumerate(texts)]
        (data / split).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return write_tiny_task_yaml(tmp_path / "hf.yaml", data, labels=labels, label_names=labels)


def test_the_pipeline_takes_a_hugging_face_directory(tmp_path, capsys):
    """``--model <HF dir>``: finetune converts it (no training: its head is the task's), finetune-check's FP32 dev
    logits are Hugging Face's own on the same texts, and a second run converts nothing (the stage is cached by the
    checkpoint's content)."""
    from pipeline.cli import main

    texts = [t for t in INPUTS["texts"] if t]
    task, runs = _task(tmp_path, texts), tmp_path / "runs"
    args = ["--task", str(task), "--runs-dir", str(runs), "--model", str(GOLDEN / "bert-sequence")]
    assert main(["run", *args, "--until", "finetune-check"]) == 0
    log = capsys.readouterr()
    assert "is a Hugging Face BertForSequenceClassification checkpoint: converted" in log.out + log.err
    record = json.loads((runs / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["converted"] == 1 and record["metrics"]["trained"] == 0
    model = runs / "tiny" / "finetune" / "out" / "model"
    assert json.loads((model / "tokenizer_config.json").read_text())["wordpiece_rules"] == "huggingface"
    dev_logits = np.load(runs / "tiny" / "finetune-check" / "out" / "dev_logits.npy")
    np.testing.assert_allclose(dev_logits, golden("bert-sequence")["logits"][: len(texts)], atol=ATOL, rtol=0)
    assert main(["run", *args, "--until", "finetune-check"]) == 0
    again = capsys.readouterr()
    assert re.search(r"finetune\s+CACHED", again.out) and "checkpoint: converted" not in again.out + again.err
    assert main(["status", "--task", str(task), "--runs-dir", str(runs), "--model", str(GOLDEN / "bert-sequence")]) == 0
    assert re.search(r"finetune\s+OK.*converted=1, trained=0", capsys.readouterr().out)


def test_a_head_of_another_kind_is_refused_and_replaced_only_when_asked(tmp_path, capsys):
    """The token-classification model given to a sentence-classification task: its trained head is not dropped by
    default (exit 2, one line naming the flag); with ``--set model.head=replace`` it is, and the task's head is
    trained on the converted encoder (with the HF tokenizer's rules)."""
    from pipeline.cli import main

    task, runs = _task(tmp_path, [t for t in INPUTS["texts"] if t] * 4), tmp_path / "runs"
    args = ["--task", str(task), "--runs-dir", str(runs), "--model", str(GOLDEN / "bert-token"),
            "--set", "finetune.epochs=1", "--set", "gates.min_accuracy=0"]
    assert main(["run", *args, "--until", "finetune"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "its BertForTokenClassification head is not the kind a classification task needs" in err[0]
    assert "--set model.head=replace" in err[0]
    assert main(["run", *args, "--set", "model.head=replace", "--until", "finetune"]) == 0
    out = capsys.readouterr()
    assert "(its head replaced: model.head is replace)" in out.out + out.err
    record = json.loads((runs / "tiny" / "finetune" / "record.json").read_text())
    assert record["metrics"]["trained"] == 1
    model = runs / "tiny" / "finetune" / "out" / "model"
    assert json.loads((model / "config.json").read_text())["architectures"] == ["ErnieForSequenceClassification"]
    assert json.loads((model / "tokenizer_config.json").read_text())["wordpiece_rules"] == "huggingface"


def test_a_bad_hugging_face_directory_is_exit_2_and_one_line(tmp_path, capsys):
    from pipeline.cli import main

    src = copy_of("bert-sequence", tmp_path)
    _edit_json(src / "config.json", model_type="roberta")
    task = _task(tmp_path, ["今天"])
    rc = main(["run", "--task", str(task), "--runs-dir", str(tmp_path / "runs"), "--model", str(src)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and any("model_type 'roberta' is not supported" in line for line in err)


def _run_kind(tmp_path: Path, task: dict, model: str, capsys) -> dict:
    """finetune + finetune-check of ``task`` with the golden ``model``; returns finetune's record."""
    import yaml

    from pipeline.cli import main

    task_yaml = tmp_path / f"{task['task']}.yaml"
    task_yaml.write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    runs = tmp_path / "runs"
    rc = main(["run", "--task", str(task_yaml), "--runs-dir", str(runs), "--model", str(GOLDEN / model),
               "--set", "gates.min_accuracy=0", "--until", "finetune-check"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    return json.loads((runs / task["task"] / "finetune" / "record.json").read_text())


def test_a_token_classifier_keeps_its_head_for_a_ner_task(tmp_path, capsys):
    """BertForTokenClassification over O, B-LOC, I-LOC, B-ORG, I-ORG is the tagger of a task whose entity types are
    LOC and ORG: converted, not trained."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"text": "今天北京天气很好", "label": {"LOC": {"北京": [[2, 3]]}}},
            {"text": "中国队赢了比赛", "label": {"ORG": {"中国队": [[0, 2]]}}},
            {"text": "上海的股票市场下跌", "label": {"LOC": {"上海": [[0, 1]]}}}]
    for split in ("train.json", "dev.json"):
        (data / split).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    task = {"task": "hfner", "type": "token_classification", "max_seq_len": 32,
            "data": {"dir": str(data), "format": "cluener", "labels_file": None}, "labels": ["LOC", "ORG"]}
    record = _run_kind(tmp_path, task, "bert-token", capsys)
    assert record["metrics"]["converted"] == 1 and record["metrics"]["trained"] == 0


def test_a_question_answering_model_keeps_its_head_for_a_reading_task(tmp_path, capsys):
    """ErnieForQuestionAnswering (ERNIE 3.0's layout) is the span extractor of a reading-comprehension task."""
    data = tmp_path / "data"
    data.mkdir()
    contexts = ["今天北京天气很好，我们去看体育比赛。", "上海的股票市场下跌，我们去看财经新闻。"]
    squad = {"version": "v1.0", "data": [{"title": f"t{i}", "paragraphs": [{"context": c, "qas": [
        {"id": f"q{i}", "question": "我们去看什么？", "answers": [{"text": c[c.index("看") + 1:-1],
                                                               "answer_start": c.index("看") + 1}]}]}]}
        for i, c in enumerate(contexts)]}
    for split in ("trial.json", "dev.json"):
        (data / split).write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    task = {"task": "hfmrc", "type": "reading_comprehension", "max_seq_len": 48,
            "data": {"dir": str(data), "format": "squad", "train_file": "trial.json", "dev_file": "dev.json",
                     "labels_file": None},
            "reading": {"doc_stride": 12, "max_query_len": 12, "max_answer_len": 8}}
    record = _run_kind(tmp_path, task, "ernie-qa", capsys)
    assert record["metrics"]["converted"] == 1 and record["metrics"]["trained"] == 0


def test_a_hugging_face_model_is_bundled_and_served_with_its_own_tokenizer(tmp_path, capsys):
    """The whole path, ``make bundle MODEL=<HF dir>`` then ``make smoke``: the golden classifier through every stage
    (validate's default widths include 128, past this model's 64 positions: not timed, said), then a real
    tritonserver whose answers must equal the offline ones on texts where HF's and PaddleNLP's rules tokenize
    differently (``广州｜D2 7×9 17.4℃``): the served tokenizer reads the bundle's rules."""
    from test_kinds_e2e import FAST_STAGES, _serve_and_smoke, set_args

    from pipeline.cli import main

    texts = [t for t in INPUTS["texts"] if t] * 5
    task = _task(tmp_path, texts)
    runs, repo = tmp_path / "runs", tmp_path / "repo"
    sets = {k: v for k, v in FAST_STAGES.items() if not k.startswith("validate.seq_lens")}
    args = ["run", "--task", str(task), "--runs-dir", str(runs), "--model", str(GOLDEN / "bert-sequence"),
            "--set", "compress.strategy=ptq", "--set", f"package.repository={repo}", "--set", "gates.min_accuracy=0"]
    args += set_args(sets)
    assert main(args) == 0, capsys.readouterr().err[-2000:]
    assert "widths [128] of validate.seq_lens not timed: the model embeds 64 positions" in capsys.readouterr().out
    bundle = repo / "tiny"
    configs = list(bundle.rglob("tokenizer_config.json"))
    assert configs and all(json.loads(c.read_text())["wordpiece_rules"] == "huggingface" for c in configs)
    out = _serve_and_smoke(bundle, task, tmp_path, capsys)
    assert "predictions differing: 0" in out
