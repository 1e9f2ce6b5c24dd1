"""Export stage and ONNX backend on the tiny fine-tuned model: contract, real int8, parity, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (before paddle)
from pipeline.errors import ConfigError, ModelError

from conftest import features
from serving_fixtures import tiny_export, upstream_of_export  # noqa: F401  (fixture: the real compress and export)


def make_ctx(stage_name: str, cfg, out_dir: Path, work_dir: Path, upstream: dict, runs_dir: Path):
    from pipeline.graph import get_stage
    from pipeline.records import StageContext

    out_dir.mkdir(parents=True, exist_ok=True)
    return StageContext(cfg, get_stage(stage_name), out_dir, work_dir, upstream, runs_dir, lambda m: None)


def tiny_cfg(tiny: dict, **overrides):
    from pipeline.config import load_task_config

    from tests.conftest import TINY_MODEL_OVERRIDES

    return load_task_config(str(tiny["task_yaml"]), {**TINY_MODEL_OVERRIDES, **overrides})


@pytest.fixture(scope="module")
def exported(tiny_finetuned, tiny_export, tmp_path_factory) -> dict:
    """The export stage run again, on the records of the real compress run that made ``tiny_export``."""
    from pipeline.stages import export

    root = tmp_path_factory.mktemp("export")
    # No size gate: the tiny model is mostly LayerNorm/bias/scale overhead, and its OpenVINO IR (shipped when this CPU
    # selects it) is mostly XML, 110% of its FP32 ONNX; 35% is a target for real models (make bench).
    cfg = tiny_cfg(tiny_finetuned, **{"gates.max_int8_size_ratio": None})
    upstream, task_dir = upstream_of_export(tiny_export)
    ctx = make_ctx("export", cfg, root / "out", root / "work", upstream, task_dir)
    result = export.run(ctx)
    return {"cfg": cfg, "out": ctx.out_dir, "result": result, "upstream": upstream, "root": root, "task_dir": task_dir}


def test_export_writes_the_contract(exported):
    out, result = exported["out"], exported["result"]
    assert result.gate_error is None
    # compress.candidate_format onnx (the default): no PaddleSlim INT8 program (that is compress.candidate_format paddle's)
    for rel in ("paddle_fp32/model.pdmodel", "paddle_fp32/model.pdiparams", "onnx/fp32.onnx", "onnx/int8.onnx", "onnx/int8_qdq.onnx", "tokenizer/vocab.txt",
                "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json", "labels.json", "meta.json"):
        assert (out / rel).is_file(), rel
    # OpenVINO's own form too: tiny_export's package.runtime names it (else it ships only when selected)
    assert set(result.artifacts) == {"onnx_fp32", "onnx_int8", "onnx_int8_qdq", "paddle_fp32", "openvino_int8",
                                     "tokenizer_dir", "labels", "meta"}
    assert not (out / "paddle_int8").exists()
    assert (out / "openvino" / "int8.xml").is_file() and (out / "openvino" / "int8.bin").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["task"] == "tiny" and meta["max_seq_len"] == 32 and meta["num_labels"] == 3
    assert [i["name"] for i in meta["inputs"]] == ["input_ids", "token_type_ids"]
    assert meta["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 3]}]
    selected = json.loads((exported["task_dir"] / "compress" / "out" / "selected.json").read_text())
    assert meta["labels"] == ["100", "101", "102"] and meta["selected_candidate"]["name"] == selected["name"]
    labels = [json.loads(line) for line in (out / "labels.json").read_text().splitlines()]
    assert labels[0] == {"label": "100", "label_desc": "news_sports"}


def test_the_size_gate_reads_the_int8_form_that_ships(exported, tiny_finetuned, tmp_path):
    from pipeline.stages import export

    cfg = tiny_cfg(tiny_finetuned, **{"gates.max_int8_size_ratio": 0.01})
    result = export.run(make_ctx("export", cfg, tmp_path / "out", tmp_path / "work", exported["upstream"],
                                 exported["task_dir"]))
    selected = json.loads((exported["task_dir"] / "compress" / "out" / "selected.json").read_text())
    # OpenVINO's IR when the selection runs in OpenVINO, else ONNX Runtime's int8.onnx
    shipped = "openvino/int8.xml" if selected["runtime"] == "openvino" else "onnx/int8.onnx"
    assert result.metrics["int8_size_form"] == ("openvino_int8" if selected["runtime"] == "openvino" else "onnx_int8")
    assert result.gate_error.startswith(f"{shipped} is ")
    assert "% of onnx/fp32.onnx, above gates.max_int8_size_ratio 1% by " in result.gate_error
    assert exported["result"].gate_error is None  # no gate (null): the same forms pass


def test_onnx_inputs_outputs_and_dynamic_dims(exported):
    from pipeline.backends.onnxruntime.convert import check_onnx
    from pipeline.backends.onnxruntime.session import session

    for name in ("fp32", "int8", "int8_qdq"):
        model = check_onnx(exported["out"] / "onnx" / f"{name}.onnx")
        assert [i.name for i in model.graph.input] == ["input_ids", "token_type_ids"]
        assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["batch", "seq"]
        assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 13
    s = session(exported["out"] / "onnx" / "int8.onnx", threads=1)
    for shape in ((1, 5), (7, 19)):  # dynamic batch and sequence
        ids = np.full(shape, 7, dtype=np.int64)
        assert s.run(ids, np.zeros_like(ids)).shape == (shape[0], 3)


def test_int8_onnx_really_stores_int8_weights_and_is_small(exported):
    import onnx
    from onnx import TensorProto

    from pipeline.backends.onnxruntime.quantize import weight_stats

    onnx_dir = exported["out"] / "onnx"
    fp32, int8, qdq = (weight_stats(onnx_dir / f"{n}.onnx") for n in ("fp32", "int8", "int8_qdq"))
    assert fp32.int8_initializers == 0
    assert int8.int8_initializers >= 6 and qdq.int8_initializers >= 6  # every Linear of the 1-layer model + embeddings
    assert int8.int8_bytes > 2 * int8.float_bytes  # the weights are int8, not float with int8 on the side
    assert int8.file_bytes < 0.5 * fp32.file_bytes  # tiny model: LayerNorm/bias overhead is relatively larger
    model = onnx.load(str(onnx_dir / "int8.onnx"))
    word = [i for i in model.graph.initializer if i.name.endswith("_int8")]
    assert len(word) == 2 and all(w.data_type == TensorProto.INT8 for w in word)  # word + position embedding tables
    # per-channel: weight scales are vectors, one per output column
    scales = [i for i in model.graph.initializer if i.name.endswith("_scale") and len(i.dims) == 1 and i.dims[0] > 1]
    assert scales
    qdq_model = onnx.load(str(onnx_dir / "int8_qdq.onnx"))
    ops = {n.op_type for n in qdq_model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # Q/DQ on MatMul inputs only (QDQBERT's placement): quantize_static's default also quantizes every
    # MatMul output, and on a real encoder the FFN output's outlier channels then cost 33 F1 points (CLUENER).
    producer = {o: n for n in qdq_model.graph.node for o in n.output}
    quantized = [n.input[0] for n in qdq_model.graph.node if n.op_type == "QuantizeLinear"]
    matmul_outputs = [x for x in quantized if x in producer and producer[x].op_type == "MatMul"]
    attention_inputs = [x for x in quantized if x in producer and producer[x].op_type in ("Softmax", "Transpose")]
    assert not matmul_outputs and attention_inputs  # attention MatMuls' inputs still quantized


def test_ort_int8_predictions_agree_with_fp32_on_dev(exported, tiny_finetuned):
    from pipeline.backends.onnxruntime.session import session
    from pipeline.kinds import load_task_data
    from pipeline.evaluation import evaluate_session
    from pipeline.tokenizer import Tokenizer

    cfg = exported["cfg"]
    dev = load_task_data(cfg).dev.examples
    tok = Tokenizer.from_model_dir(exported["out"] / "tokenizer", cfg.max_seq_len)
    ref = np.load(tiny_finetuned["runs_dir"] / "tiny" / "finetune-check" / "out" / "dev_logits.npy")
    fs = features(tok, dev)
    evs = {n: evaluate_session(session(exported["out"] / "onnx" / f"{n}.onnx", threads=1), fs, 32)
           for n in ("fp32", "int8", "int8_qdq")}
    np.testing.assert_allclose(evs["fp32"].flat(), ref, atol=1e-3)  # ONNX FP32 == dygraph FP32
    pred = {n: ev.flat().argmax(-1) for n, ev in evs.items()}
    assert (pred["int8"] == pred["fp32"]).mean() >= 0.95
    assert (pred["int8_qdq"] == pred["fp32"]).mean() >= 0.9
    assert evs["int8"].accuracy >= evs["fp32"].accuracy - 0.05


def test_corrupt_and_truncated_models_are_clear_errors(exported, tmp_path):
    from pipeline.backends.onnxruntime.convert import check_onnx, export_onnx
    from pipeline.backends.onnxruntime.session import session

    data = (exported["out"] / "onnx" / "fp32.onnx").read_bytes()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelError, match="trunc.onnx"):
        check_onnx(trunc)
    with pytest.raises(ModelError, match="trunc.onnx"):
        session(trunc)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not an onnx model" * 10)
    with pytest.raises(ModelError, match="garbage.onnx"):
        check_onnx(garbage)
    static = tmp_path / "static"
    shutil.copytree(exported["out"] / "paddle_fp32", static)
    pd = static / "model.pdmodel"
    pd.write_bytes(pd.read_bytes()[:100])
    with pytest.raises(ModelError, match="static"):
        export_onnx(static, tmp_path / "x.onnx")
    (static / "model.pdiparams").unlink()
    with pytest.raises(ModelError, match="missing model.pdiparams"):
        export_onnx(static, tmp_path / "x.onnx")
    with pytest.raises(ConfigError, match="opset"):
        export_onnx(exported["out"] / "paddle_fp32", tmp_path / "x.onnx", opset=11)


def test_onnx_with_unexpected_input_names_is_rejected(exported, tmp_path):
    import onnx

    from pipeline.backends.onnxruntime.convert import check_onnx
    from pipeline.backends.onnxruntime.session import session

    model = onnx.load(str(exported["out"] / "onnx" / "fp32.onnx"))
    old = model.graph.input[0].name
    model.graph.input[0].name = "ids"
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = "ids"
    bad = tmp_path / "renamed.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(ModelError, match="unexpected ONNX input names"):
        check_onnx(bad)
    with pytest.raises(ModelError, match="unexpected ONNX input names"):
        session(bad)


def test_upstream_paddle2onnx_still_writes_weights_as_constants(exported):
    """Pins the paddle2onnx 1.3.1 behaviour export_onnx works around: no initializers, so
    onnxruntime.quantization would quantize nothing.  When this fails, the workaround can go."""
    import onnx
    import paddle2onnx

    d = exported["out"] / "paddle_fp32"
    raw = paddle2onnx.export(str(d / "model.pdmodel"), str(d / "model.pdiparams"), None, opset_version=13, verbose=False)
    model = onnx.load_from_string(raw)
    assert len(model.graph.initializer) == 0
    assert sum(n.op_type == "Constant" for n in model.graph.node) > 10


def _batch_vs_single(path, fs):
    from pipeline.backends.onnxruntime.session import session
    from pipeline.evaluation import evaluate_session

    s = session(path, precision="int8", threads=1)
    return evaluate_session(s, fs, 1).flat(), evaluate_session(s, fs, 32).flat()


def test_int8_answers_do_not_depend_on_batch_mates(exported, tiny_finetuned, tmp_path):
    """Served batches are formed by Triton's dynamic batcher: int8.onnx must give every sentence the
    same logits alone or in any batch (calibrated activation scales), while ORT's own per-batch
    DynamicQuantizeLinear does not (pinned: if ORT changes, the rewrite may no longer be needed)."""
    import onnx

    from pipeline.backends.onnxruntime.quantize import quantize_int8_dynamic
    from pipeline.kinds import load_task_data
    from pipeline.tokenizer import Tokenizer

    cfg = exported["cfg"]
    dev = load_task_data(cfg).dev.examples[:40]
    fs = features(Tokenizer.from_model_dir(exported["out"] / "tokenizer", cfg.max_seq_len), dev)
    model = onnx.load(str(exported["out"] / "onnx" / "int8.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert "DynamicQuantizeLinear" not in ops and "MatMulIntegerToFloat" in ops
    alone, batched = _batch_vs_single(exported["out"] / "onnx" / "int8.onnx", fs)
    np.testing.assert_array_equal(alone, batched)

    per_batch = quantize_int8_dynamic(exported["out"] / "onnx" / "fp32.onnx", tmp_path / "dyn.onnx")
    alone, batched = _batch_vs_single(per_batch, fs)
    assert np.abs(alone - batched).max() > 0


def _ffn_rows(onnx_path: Path, batch, tmp_path: Path, inner: int) -> tuple[np.ndarray, list[int]]:
    """The logits of ``batch``, and the rows (the shape's second axis) of every MatMul output ``inner`` wide: the
    feed-forward layers' first projections, as ONNX Runtime's profiler saw them run."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / onnx_path.parent.name)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # one node per op, unfused
    s = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    logits = s.run(None, {"input_ids": batch.input_ids, "token_type_ids": batch.token_type_ids})[0]
    events = json.loads(Path(s.end_profiling()).read_text())
    rows = [next(iter(shape.values()))[1] for e in events if e.get("cat") == "Node" and e["args"].get("op_name") == "MatMul"
            and e["name"].endswith("_kernel_time") for shape in e["args"].get("output_type_shape", [])
            if len(next(iter(shape.values()))) == 3 and next(iter(shape.values()))[2] == inner]
    return logits, rows


def test_a_classifiers_last_layer_computes_the_first_token_only_and_keeps_its_logits(tiny_deep_model, tiny_splits, tmp_path):
    """ernie_models.first_token_only: the head reads the pooled first token alone, so the last layer's feed-forward runs
    on one row of each text, the others on every token; the logits are the stock network's.  A token classifier's last
    layer feeds every row to its head: it is left as it is."""
    from pipeline.backends.onnxruntime.convert import export_onnx
    from pipeline.backends.paddle.convert import export_static
    from pipeline.ernie_models import ErnieForTokenClassification, first_token_only
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    tok = Tokenizer.from_model_dir(tiny_deep_model, 64)
    fs = features(tok, tiny_splits[1][:12])
    batch = fs.batch(range(len(fs)))
    width = batch.input_ids.shape[1]
    onnx = {}
    for name in ("stock", "first_token"):
        model = load_classifier(tiny_deep_model, 3)
        inner = model.ernie.encoder.layers[0].linear1.weight.shape[1]
        if name == "first_token":
            assert first_token_only(model)
        onnx[name] = export_onnx(export_static(model, tmp_path / name / "infer"), tmp_path / name / "model.onnx")
    stock, stock_rows = _ffn_rows(onnx["stock"], batch, tmp_path, inner)
    cut, cut_rows = _ffn_rows(onnx["first_token"], batch, tmp_path, inner)
    assert stock_rows == [width] * 4 and cut_rows == [width] * 3 + [1]
    np.testing.assert_allclose(cut, stock, rtol=0, atol=1e-5)
    assert np.array_equal(cut.argmax(-1), stock.argmax(-1))
    assert not first_token_only(load_classifier(tiny_deep_model, 3, model_class=ErnieForTokenClassification))
