"""A stand-in for the export stage's output, made from the tiny fine-tuned model (serving tests only).

Writes the export contract's layout (paddle_fp32/, onnx/fp32.onnx, onnx/int8.onnx, tokenizer/,
labels.json, meta.json) with the same libraries the export stage uses: paddle.jit.save,
paddle2onnx, onnxruntime.quantization.quantize_dynamic.  The lead replaces it with the export stage
itself once that lands.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pipeline  # noqa: F401  (numpy before paddle)

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def make_export_dir(model_dir: Path, out: Path, labels: list[str], label_names: list[str], max_seq_len: int, task: str = "tiny") -> Path:
    import paddle
    import paddle2onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from pipeline.modeling import load_classifier, write_labels

    out = Path(out)
    (out / "paddle_fp32").mkdir(parents=True)
    (out / "onnx").mkdir()
    (out / "tokenizer").mkdir()
    model = load_classifier(model_dir, len(labels))
    spec = [paddle.static.InputSpec([None, None], "int64", name="input_ids"),
            paddle.static.InputSpec([None, None], "int64", name="token_type_ids")]
    paddle.jit.save(paddle.jit.to_static(model, input_spec=spec), str(out / "paddle_fp32" / "model"))
    paddle2onnx.export(str(out / "paddle_fp32" / "model.pdmodel"), str(out / "paddle_fp32" / "model.pdiparams"),
                       save_file=str(out / "onnx" / "fp32.onnx"), opset_version=13, enable_onnx_checker=True)
    _name_output(out / "onnx" / "fp32.onnx", "logits")
    quantize_dynamic(str(out / "onnx" / "fp32.onnx"), str(out / "onnx" / "int8.onnx"), weight_type=QuantType.QInt8)
    for f in TOKENIZER_FILES:
        if (Path(model_dir) / f).is_file():
            shutil.copyfile(Path(model_dir) / f, out / "tokenizer" / f)
    write_labels(out / "labels.json", labels, label_names)
    meta = {
        "task": task,
        "max_seq_len": max_seq_len,
        "do_lower_case": True,
        "inputs": [{"name": "input_ids", "dtype": "int64", "shape": [-1, -1]},
                   {"name": "token_type_ids", "dtype": "int64", "shape": [-1, -1]}],
        "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, len(labels)]}],
        "num_labels": len(labels),
        "labels": list(labels),
        "label_names": list(label_names),
        "selected_candidate": {"name": "fp32-baseline", "note": "test stand-in"},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
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


@pytest.fixture(scope="session")
def tiny_export(tiny_finetuned, tmp_path_factory) -> Path:
    from conftest import LABEL_NAMES, LABELS

    out = tmp_path_factory.mktemp("tiny_export") / "out"
    return make_export_dir(tiny_finetuned["model_dir"], out, LABELS, LABEL_NAMES, max_seq_len=32)


@pytest.fixture(scope="session")
def tiny_bundle(tiny_export, tmp_path_factory) -> Path:
    """A packaged bundle (python-onnxruntime, int8) of the tiny model; copy it before changing it."""
    from serving.config import PackageConfig
    from serving.repository import ExportArtifacts, Provenance, write_repository

    repo = tmp_path_factory.mktemp("tiny_repo")
    prov = Provenance(metrics={"accuracy": 1.0, "chosen_backend": "onnxruntime-int8"}, gates={"accuracy_drop": "pass"})
    pc = PackageConfig(threads=1, max_batch_size=8, preferred_batch_size=4, top_k=2, max_text_bytes=4096)
    return write_repository(repo, "tiny", ExportArtifacts.from_dir(tiny_export), pc, prov).path
