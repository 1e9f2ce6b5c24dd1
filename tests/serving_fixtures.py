"""Exports and bundles for the serving tests.

``tiny_export`` is the export stage's own output for the tiny fine-tuned classifier (the pipeline run to export).
The NER, reading and UIE stand-ins below still write the export contract's layout themselves from tiny RANDOM
models (``export_layer``: paddle.jit.save, paddle2onnx, ``quantize_dynamic``), because those tests need models
of a given shape in seconds; the real export of each kind is served in ``tests/test_kinds_e2e.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pipeline  # noqa: F401  (numpy before paddle)
from pipeline.contract import ExportLayout, write_meta

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def export_layer(model, out: Path, tokenizer_src: Path, labels: list[str], label_names: list[str], max_seq_len: int, task: str,
                 task_type: str = "classification", extra_meta: dict | None = None) -> Path:
    """Export a paddle Layer ``(input_ids, token_type_ids) -> logits`` in the export contract's layout.

    logits: [B, C] (classification), [B, T, C] (token_classification: C = tags),
    [B, T, 2] (reading_comprehension: start, end).
    """
    import paddle
    import paddle2onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from pipeline.modeling import write_labels

    out = Path(out)
    (out / "paddle_fp32").mkdir(parents=True)
    (out / "onnx").mkdir()
    (out / "tokenizer").mkdir()
    model.eval()
    spec = [paddle.static.InputSpec([None, None], "int64", name="input_ids"),
            paddle.static.InputSpec([None, None], "int64", name="token_type_ids")]
    paddle.jit.save(paddle.jit.to_static(model, input_spec=spec), str(out / "paddle_fp32" / "model"))
    paddle2onnx.export(str(out / "paddle_fp32" / "model.pdmodel"), str(out / "paddle_fp32" / "model.pdiparams"),
                       save_file=str(out / "onnx" / "fp32.onnx"), opset_version=13, enable_onnx_checker=True)
    _name_output(out / "onnx" / "fp32.onnx", "logits")
    quantize_dynamic(str(out / "onnx" / "fp32.onnx"), str(out / "onnx" / "int8.onnx"), weight_type=QuantType.QInt8)
    for f in TOKENIZER_FILES:
        if (Path(tokenizer_src) / f).is_file():
            shutil.copyfile(Path(tokenizer_src) / f, out / "tokenizer" / f)
    write_labels(out / "labels.json", labels, label_names)
    meta = {
        "task": task,
        "max_seq_len": max_seq_len,
        "do_lower_case": True,
        "inputs": [{"name": "input_ids", "dtype": "int64", "shape": [-1, -1]},
                   {"name": "token_type_ids", "dtype": "int64", "shape": [-1, -1]}],
        "outputs": [{"name": "logits", "dtype": "float32",
                     "shape": [-1, len(labels)] if task_type == "classification" else [-1, -1, len(labels)]}],
        "num_labels": len(labels),
        "labels": list(labels),
        "label_names": list(label_names),
        "selected_candidate": {"name": "fp32-baseline", "note": "test stand-in"},
        **({} if task_type == "classification" else {"task_type": task_type}),
        **(extra_meta or {}),
    }
    write_meta(ExportLayout(out).meta, meta)  # the contract's writer: checked as the package stage reads it
    return out


def _name_output(path: Path, name: str) -> None:
    """paddle2onnx names the output after the last op (e.g. linear_3.tmp_1); the contract says ``logits``."""
    import onnx

    m = onnx.load(str(path))
    old = m.graph.output[0].name
    if old == name:
        return
    for node in m.graph.node:
        node.output[:] = [name if o == old else o for o in node.output]
        node.input[:] = [name if i == old else i for i in node.input]
    m.graph.output[0].name = name
    onnx.save(m, str(path))


import pytest  # noqa: E402


# compress kept quick on the tiny model: no pruning, one timing batch, one calibration setting
QUICK_EXPORT = {"compress.strategy": "ptq", "compress.throughput_batches": 1, "compress.timing_rounds": 2,
                "compress.algo_list": "[mse]", "compress.batch_size_list": "[4]", "gates.max_int8_size_ratio": 1,
                "gates.max_accuracy_drop": 100}


@pytest.fixture(scope="session")
def tiny_export(tiny_finetuned, tmp_path_factory) -> Path:
    """The export stage's own output for the tiny model (compress, then export, as ``make bundle`` runs them): the
    forms the serving tests package and serve are the ones a real bundle ships."""
    from conftest import tiny_cli_args
    from pipeline.cli import main

    runs = tmp_path_factory.mktemp("tiny_export") / "runs"
    shutil.copytree(tiny_finetuned["runs_dir"], runs)
    sets = [a for k, v in QUICK_EXPORT.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", *tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--until", "export", *sets]) == 0
    return runs / "tiny" / "export" / "out"


def upstream_of_export(tiny_export: Path) -> tuple[dict, Path]:
    """(the records of the real run that made ``tiny_export`` that the export stage reads: compress's selection and
    shipped forms, finetune-check's reference; the run's task folder, which their artifact paths are relative to):
    a test runs export (or validate) on them, not on stand-ins."""
    from pipeline.records import read_record

    task_dir = Path(tiny_export).parent.parent
    return {name: read_record(task_dir / name) for name in ("compress", "finetune-check")}, task_dir


@pytest.fixture(scope="session")
def tiny_bundle(tiny_export, tmp_path_factory) -> Path:
    """A packaged bundle (python-onnxruntime, int8) of the tiny model; copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("tiny_repo")
    prov = Provenance(metrics={"accuracy": 1.0, "chosen_backend": "onnxruntime-int8"}, gates={"accuracy_drop": "pass"})
    pc = PackageConfig(layout="ensemble", threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, prov).path


@pytest.fixture(scope="session")
def tiny_fused_bundle(tiny_export, tmp_path_factory) -> Path:
    """The same bundle with the default package.layout (auto: fused for classification on a python runtime):
    one python model does tokenizer, model and post-processing.  Like `make bundle`'s, it carries its
    Kubernetes / KServe manifests (so every served test shows Triton takes a bundle with them)."""
    from serving.bundle.config import DeployConfig, PackageConfig
    from serving.bundle.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("tiny_fused_repo")
    prov = Provenance(metrics={"accuracy": 1.0, "chosen_backend": "onnxruntime-int8"}, gates={"accuracy_drop": "pass"})
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, prov, deploy=DeployConfig()).path


def export_without(export: Path, dst: Path, *forms: str) -> Path:
    """A copy of ``export`` without the models of ``forms`` (``pipeline.contract.FORMS`` names): an export that
    did not make them (no QDQ form, no OpenVINO IR)."""
    import pipeline.backends.registry  # noqa: F401  (registers the engines' own forms: OpenVINO's IR)

    shutil.copytree(export, dst)
    layout = ExportLayout(dst)
    for form in forms:
        for p in layout.files(form):
            p.unlink()
    return dst


# -- token classification (NER) and reading comprehension (MRC) stand-ins ------------------------
# Tiny RANDOM models (served == offline is what these tests check, not quality), a char vocabulary
# written here, and CLUENER / SQuAD-format dev files.  The lead swaps them for the export stage's output.

NER_TYPES = ("company", "name")  # sorted, as readers.entity_types gives them
NER_WORDS = {"name": ["叶老桂", "张三丰", "李小龙", "王大明", "赵子龙"], "company": ["浙商银行", "华为公司", "小米科技", "阿里巴巴"]}
SPAN_FILLER = "的了是在有和就人都一个上也很到说要去会着没看好自己这今天我们他说过年前后来大家"


def _rng(seed: int):
    import random

    return random.Random(seed)


def write_char_vocab(root: Path, texts) -> Path:
    """vocab.txt (+ tokenizer_config.json, special_tokens_map.json) with every char of ``texts``."""
    from pipeline.tokenizer import build_char_vocab, write_vocab

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    write_vocab(build_char_vocab(texts, min_freq=1), root)
    return root


def write_cluener_dev(path: Path, n: int = 40, seed: int = 0) -> Path:
    """CLUENER2020 JSON lines (inclusive ends) with name/company entities in filler text."""
    rng = _rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text, label = "", {}
            for _ in range(rng.randint(1, 3)):
                text += "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(1, 8)))
                if i % 7 == 3:
                    text += rng.choice(["iPhone", "NBA", "2024年"])  # wordpieces wider than one char
                etype = rng.choice(NER_TYPES)
                word = rng.choice(NER_WORDS[etype])
                label.setdefault(etype, {}).setdefault(word, []).append([len(text), len(text) + len(word) - 1])
                text += word
            text += "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(0, 6)))
            if i == 5:
                text = text + "。" * 40  # longer than max_seq_len tokens: truncated like offline
            f.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    return path


def write_squad_dev(path: Path, n_contexts: int = 10, seed: int = 0) -> Path:
    """SQuAD v1 JSON: contexts of 20-120 chars (several windows at max_seq_len 48), 2 questions each."""
    rng = _rng(seed)
    paragraphs = []
    for c in range(n_contexts):
        context = "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(20, 120)))
        if c == 2:
            context = "NBA比赛iPhone发布" + context
        qas = []
        for q in range(2):
            start = rng.randint(0, len(context) - 4)
            answer = context[start : start + rng.randint(1, 4)]
            question = "".join(rng.choice(SPAN_FILLER) for _ in range(rng.randint(3, 20))) + "？"
            qas.append({"id": f"c{c}q{q}", "question": question, "answers": [{"text": answer, "answer_start": start}]})
        paragraphs.append({"context": context, "qas": qas})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "v1", "data": [{"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False),
                    encoding="utf-8")
    return path


def _tiny_ernie_config(vocab_size: int, **kw):
    from paddlenlp.transformers import ErnieConfig

    # initializer_range 0.2 (not 0.02): logits far enough apart that the random model's tags and
    # spans vary, and float rounding cannot decide a near tie.
    return ErnieConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                       max_position_embeddings=64, type_vocab_size=2, pad_token_id=0, initializer_range=0.2, **kw)


def make_ner_export(out: Path, vocab_dir: Path, max_seq_len: int = 32, task: str = "cluener", seed: int = 0) -> Path:
    """A random tiny ErnieForTokenClassification exported like the export stage: logits [B, T, num_tags]."""
    import paddle
    from paddlenlp.transformers import ErnieForTokenClassification

    from pipeline.labeling.bio import tag_names

    tags = tag_names(list(NER_TYPES))
    vocab_size = len((Path(vocab_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines())
    paddle.seed(seed)
    inner = ErnieForTokenClassification(_tiny_ernie_config(vocab_size, num_labels=len(tags)))

    class TokenLogits(paddle.nn.Layer):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, token_type_ids):
            return self.model(input_ids, token_type_ids=token_type_ids)

    return export_layer(TokenLogits(inner), out, vocab_dir, tags, tags, max_seq_len, task, "token_classification")


def make_mrc_export(out: Path, vocab_dir: Path, max_seq_len: int = 48, task: str = "cmrc2018", seed: int = 0,
                    reading: dict | None = None) -> Path:
    """A random tiny reading-comprehension export (``make_pointer_export``)."""
    reading = reading or {"doc_stride": 10, "max_query_len": 12, "max_answer_len": 8}
    return make_pointer_export(out, vocab_dir, max_seq_len, task, seed, "reading_comprehension", {"reading": reading})


def make_pointer_export(out: Path, vocab_dir: Path, max_seq_len: int, task: str, seed: int, task_type: str,
                        sections: dict) -> Path:
    """A random tiny ErnieForQuestionAnswering whose forward returns stack([start, end], -1): logits [B, T, 2]
    (reading comprehension's and UIE's model; ``sections``: the kind's meta.json section)."""
    import paddle
    from paddlenlp.transformers import ErnieForQuestionAnswering

    vocab_size = len((Path(vocab_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines())
    paddle.seed(seed)
    inner = ErnieForQuestionAnswering(_tiny_ernie_config(vocab_size))

    class SpanLogits(paddle.nn.Layer):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, token_type_ids):
            start, end = self.model(input_ids, token_type_ids=token_type_ids)[:2]
            return paddle.stack([start, end], axis=-1)

    return export_layer(SpanLogits(inner), out, vocab_dir, ["start", "end"], ["start", "end"], max_seq_len, task,
                        task_type, sections)


@pytest.fixture(scope="session")
def ner_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cluener_data")
    write_cluener_dev(root / "dev.json")
    shutil.copyfile(root / "dev.json", root / "train.json")  # the task loader reads both splits
    return root


@pytest.fixture(scope="session")
def ner_export(ner_data, tmp_path_factory) -> Path:
    rows = [json.loads(line)["text"] for line in (ner_data / "dev.json").read_text(encoding="utf-8").splitlines()]
    vocab = write_char_vocab(tmp_path_factory.mktemp("ner_vocab"), rows + [SPAN_FILLER])
    return make_ner_export(tmp_path_factory.mktemp("ner_export") / "out", vocab)


@pytest.fixture(scope="session")
def ner_bundle(ner_export, tmp_path_factory) -> Path:
    """Packaged cluener bundle (python-onnxruntime, int8, layout ensemble: tokenizer, model and post-processing
    models); copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096, layout="ensemble")
    return write_repository(tmp_path_factory.mktemp("ner_repo"), "cluener", ExportArtifacts.from_dir(ner_export), pc).path


@pytest.fixture(scope="session")
def mrc_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cmrc_data")
    write_squad_dev(root / "dev.json")
    shutil.copyfile(root / "dev.json", root / "trial.json")  # the task loader reads both files
    return root


@pytest.fixture(scope="session")
def mrc_export(mrc_data, tmp_path_factory) -> Path:
    raw = json.loads((mrc_data / "dev.json").read_text(encoding="utf-8"))
    texts = [p["context"] for d in raw["data"] for p in d["paragraphs"]]
    texts += [q["question"] for d in raw["data"] for p in d["paragraphs"] for q in p["qas"]]
    vocab = write_char_vocab(tmp_path_factory.mktemp("mrc_vocab"), texts + [SPAN_FILLER])
    return make_mrc_export(tmp_path_factory.mktemp("mrc_export") / "out", vocab)


@pytest.fixture(scope="session")
def mrc_bundle(mrc_export, tmp_path_factory) -> Path:
    """Packaged cmrc2018 bundle (python-onnxruntime, int8); copy it before changing it."""
    from serving.bundle.config import PackageConfig
    from serving.bundle.repository import ExportArtifacts, write_repository

    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, max_text_bytes=4096)
    return write_repository(tmp_path_factory.mktemp("mrc_repo"), "cmrc2018", ExportArtifacts.from_dir(mrc_export), pc).path


def tool_or_skip(find, error: type, require_env: str):
    """``find()`` (an external tool the tests drive), or a skip naming what is missing; never a skip where
    ``require_env`` is set (`make test` and .ci/run set it: there a missing tool fails)."""
    import os

    try:
        return find()
    except error as exc:
        if os.environ.get(require_env):
            raise
        pytest.skip(str(exc))


def servers_on(repository: Path) -> list[int]:
    """The pids of processes serving ``repository`` (a tritonserver started with it), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"--model-repository={repository}".encode() in cmd:
                out.append(int(entry.name))
    return out
