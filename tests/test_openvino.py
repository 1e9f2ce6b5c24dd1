"""OpenVINO as a CPU engine (pipeline.backends.openvino): sessions, NNCF INT8 and its recipe search, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (before paddle)
from pipeline.errors import ConfigError, ModelError

from tests.test_int8 import tiny_onnx  # noqa: F401  (fixture: the tiny model as FP32 ONNX, calibration feeds)


def _logits(session, fs, batch_size: int) -> np.ndarray:
    from pipeline.evaluation import evaluate_session

    return evaluate_session(session, fs, batch_size).flat()


def test_fp32_session_matches_onnxruntime(tiny_onnx):
    """Same ONNX, same numbers: f32 inference precision is set, not inherited (bf16 on AVX512-BF16/AMX CPUs)."""
    from pipeline.backends.onnxruntime.session import session as ort_session
    from pipeline.backends.openvino.session import session

    ov = session(tiny_onnx["fp32"], threads=1)
    assert ov.name == "openvino-cpu-fp32" and ov.input_names[:2] == ["input_ids", "token_type_ids"]
    assert ov.properties.as_dict()["INFERENCE_PRECISION_HINT"] == "f32"
    np.testing.assert_allclose(_logits(ov, tiny_onnx["dev"], 16), _logits(ort_session(tiny_onnx["fp32"], threads=1),
                                                                           tiny_onnx["dev"], 16), atol=1e-4)


def test_calibration_items_are_single_unpadded_sentences(tiny_onnx):
    from pipeline.backends.openvino.quantize import calibration_items

    feeds, pad = tiny_onnx["feeds"], tiny_onnx["tok"].pad_id
    items = calibration_items(feeds, pad)
    assert len(items) == sum(len(f["input_ids"]) for f in feeds)
    for item in items:
        assert item["input_ids"].shape[0] == 1 and item["input_ids"].shape == item["token_type_ids"].shape
        assert item["input_ids"][0, -1] != pad  # no padding column left: statistics see real tokens only


@pytest.fixture(scope="module")
def ov_int8(tiny_onnx):
    from pipeline.backends.openvino.quantize import build, calibration_items
    from pipeline.quantization.recipe import Int8Recipe

    out = tiny_onnx["root"] / "ov" / "int8.xml"
    build(tiny_onnx["fp32"], out, calibration_items(tiny_onnx["feeds"], tiny_onnx["tok"].pad_id), Int8Recipe(0.5))
    return out


def test_nncf_int8_has_int8_weights_fixed_scales_and_keeps_the_answers(tiny_onnx, ov_int8):
    import openvino as ov

    from pipeline.backends.openvino.session import session

    assert ov_int8.is_file() and ov_int8.with_suffix(".bin").is_file()
    model = ov.Core().read_model(str(ov_int8))
    ops = [op.get_type_name() for op in model.get_ordered_ops()]
    assert "FakeQuantize" in ops  # static activation quantization: scales are constants in the graph
    assert "Pad" not in ops  # openvino.width_independent is off by default
    int8 = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
            and op.get_output_element_type(0).get_type_name() == "i8"]
    assert len(int8) >= 6  # every weight MatMul of the 1-layer model (Q, K, V, out, FFN x2) and the embeddings
    fs = tiny_onnx["dev"]
    q, f = _logits(session(ov_int8, precision="int8", threads=1), fs, 16), _logits(session(tiny_onnx["fp32"], threads=1), fs, 16)
    assert (q.argmax(-1) == f.argmax(-1)).mean() >= 0.9


def test_nncf_int8_is_batch_independent(tiny_onnx, ov_int8):
    """A text's answer does not depend on its batch mates: the same row alone, and inside two batches of other
    lengths and orders.  Fixed scales make the quantized values the same; what is left is the float rounding of
    kernels chosen per padded width (measured on TNEWS: up to 7e-3 in a logit), never a changed decision."""
    from pipeline.backends.openvino.session import session

    sess, fs = session(ov_int8, precision="int8", threads=1), tiny_onnx["dev"]
    n = 16
    together = [fs.batch(range(n)), fs.batch(range(n - 1, -1, -1))]
    results = [sess.run(b.input_ids, b.token_type_ids) for b in together]
    for i in range(n):
        alone = fs.batch([i])
        ref = sess.run(alone.input_ids, alone.token_type_ids)[0]
        for batch, got in zip(together, results):
            row = got[list(batch.indices).index(i)]
            np.testing.assert_allclose(row, ref, atol=2e-2)
            assert np.argmax(row) == np.argmax(ref)
    # Same padded width, other batch mates: identical to the bit.
    np.testing.assert_array_equal(results[0], results[1][::-1])


def test_width_independent_int8_gives_a_text_one_answer_at_every_width(tiny_onnx):
    """openvino.width_independent: the real export's attention (paddle2onnx's pattern, after NNCF) is rewritten, the
    layer's keys and values and the shared mask padded; a text's logits are then the same to the bit alone and in
    batches padded wider, up to twice the longest row."""
    import openvino as ov

    from pipeline.backends.openvino.quantize import build, calibration_items
    from pipeline.backends.openvino.session import session
    from pipeline.quantization.recipe import Int8Recipe

    out = build(tiny_onnx["fp32"], tiny_onnx["root"] / "ov-wi" / "int8.xml",
                calibration_items(tiny_onnx["feeds"], tiny_onnx["tok"].pad_id), Int8Recipe(0.5), width_independent=True)
    assert [op.get_type_name() for op in ov.Core().read_model(str(out)).get_ops()].count("Pad") == 3
    sess, fs, pad = session(out, precision="int8", threads=1), tiny_onnx["dev"], tiny_onnx["tok"].pad_id
    for i in range(8):
        row = fs.batch([i]).input_ids
        n = int((row[0] != pad).sum())
        alone = sess.run(row[:, :n], np.zeros((1, n), np.int64))[0]
        for width in range(n + 1, 2 * row.shape[1] + 1):
            wide = np.full((1, width), pad, np.int64)
            wide[0, :n] = row[0, :n]
            np.testing.assert_array_equal(sess.run(wide, np.zeros_like(wide))[0], alone)


def test_width_independent_on_a_model_without_attention_is_one_line(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from pipeline.backends.openvino.quantize import build
    from pipeline.quantization.recipe import Int8Recipe

    rng = np.random.default_rng(0)
    graph = helper.make_graph(  # embeddings, one MatMul, a mean over the tokens: no attention
        [helper.make_node("Gather", ["table", "input_ids"], ["emb"]), helper.make_node("MatMul", ["emb", "w"], ["h"]),
         helper.make_node("ReduceMean", ["h"], ["logits"], axes=[1], keepdims=0)], "no_attention",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "width"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("table", TensorProto.FLOAT, [50, 8], rng.standard_normal(400).astype(np.float32)),
         helper.make_tensor("w", TensorProto.FLOAT, [8, 3], rng.standard_normal(24).astype(np.float32))])
    source = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(source))
    calibration = [{"input_ids": rng.integers(0, 50, (1, 7)).astype(np.int64)} for _ in range(4)]
    with pytest.raises(ModelError, match="openvino.width_independent: no attention block") as err:
        build(source, tmp_path / "int8.xml", calibration, Int8Recipe(), width_independent=True)
    assert "\n" not in str(err.value) and not (tmp_path / "int8.xml").exists()
    assert build(source, tmp_path / "int8.xml", calibration, Int8Recipe()).is_file()  # off: built as it is


def test_the_task_setting_reaches_the_screened_and_searched_forms(tiny_onnx, tmp_path):
    """openvino.width_independent is what compress times (the speed-first screen's form), what the recipe search
    builds and caches under its own key, and what the candidate records (meta.json, bundle.json)."""
    import openvino as ov
    from types import SimpleNamespace

    from pipeline.backends.openvino.config import OpenVINOConfig
    from pipeline.backends.openvino.engine import ENGINE
    from pipeline.backends.openvino.quantize import nncf_form

    rows = SimpleNamespace(feeds=tiny_onnx["feeds"], pad_id=tiny_onnx["tok"].pad_id, held=tiny_onnx["held"])
    pads = {}
    for on in (False, True):
        cfg = SimpleNamespace(engine_settings={"openvino": OpenVINOConfig(width_independent=on)},
                              quantization=SimpleNamespace(openvino_smooth_alphas=[0.5]))
        screened = ENGINE.speed_form(tiny_onnx["fp32"], tmp_path / f"screen-{on}.xml", rows, cfg)
        pads[on] = [op.get_type_name() for op in ov.Core().read_model(str(screened)).get_ops()].count("Pad")
        assert ENGINE.form_params(cfg)["width_independent"] is on
    assert pads == {False: 0, True: 3}
    assert nncf_form(rows).record != nncf_form(rows, width_independent=True).record  # cached apart


def test_search_caches_every_candidate_and_picks_within_budget(tiny_onnx, tmp_path, monkeypatch):
    from pipeline.backends.openvino import quantize
    from pipeline.quantization.select import SearchRows
    from pipeline.quantization.config import QuantizationConfig

    rows = SearchRows(tiny_onnx["feeds"], tiny_onnx["held"], tiny_onnx["tok"].pad_id)
    qcfg = QuantizationConfig(openvino_smooth_alphas=[0.5], int8_max_fp32_matmuls=0)
    first = quantize.search_recipe(tiny_onnx["fp32"], tmp_path / "a" / "int8.xml", rows, qcfg, 1.0, tmp_path / "cache", log=lambda m: None)
    assert [c.recipe.name for c in first.candidates] == ["static-nosq", "static-sq0.5"]
    assert first.within_budget and (tmp_path / "a" / "int8.bin").is_file()
    assert all(Path(c.path).suffix == ".xml" and Path(c.path).with_suffix(".bin").is_file() for c in first.candidates)

    def no_build(*args, **kwargs):
        raise AssertionError("a cached candidate was rebuilt")

    monkeypatch.setattr(quantize, "build", no_build)
    again = quantize.search_recipe(tiny_onnx["fp32"], tmp_path / "b" / "int8.xml", rows, qcfg, 0.5, tmp_path / "cache",
                                   log=lambda m: None)  # another budget: judged again, rebuilt never
    assert (tmp_path / "b" / "int8.xml").read_bytes() == Path(again.chosen.path).read_bytes()
    assert json.loads(json.dumps(again.as_dict()))["chosen"]["name"] == again.chosen.recipe.name


def test_the_openvino_section_is_checked_before_any_work(tiny_task, tmp_path, capsys):
    """openvino.properties reach every session (compress, the search, validate, the bundle); one the CPU plugin refuses
    stops `run` in one line naming it, before the first stage; a bad precision is refused when the config loads."""
    from pipeline.cli import main

    from conftest import tiny_cli_args

    runs = tmp_path / "runs"
    assert main(["run", *tiny_cli_args(tiny_task, runs), "--set", "openvino.properties={NUM_STREAMS: lots}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "openvino.properties: OpenVINO refuses NUM_STREAMS='lots'" in err[0]
    assert not (runs / "tiny" / "finetune").exists()
    assert main(["run", *tiny_cli_args(tiny_task, runs), "--set", "openvino.inference_precision=fp8"]) == 2
    assert "openvino.inference_precision: 'fp8' is not one of f32, bf16" in capsys.readouterr().err


def test_a_property_openvino_refuses_is_named_in_one_line(tiny_onnx):
    from pipeline.backends.openvino.config import CpuProperties
    from pipeline.backends.openvino.session import Session

    with pytest.raises(ConfigError) as err:
        Session(tiny_onnx["fp32"], properties=CpuProperties(extra={"NUM_STREAMS": "lots"}))
    assert "NUM_STREAMS" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="inference_precision"):
        CpuProperties(inference_precision="fp8")


def test_a_model_openvino_cannot_read_is_one_line(tmp_path, ov_int8):
    from pipeline.backends.openvino.session import session

    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelError) as err:
        session(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    lonely = tmp_path / "int8.xml"
    lonely.write_bytes(ov_int8.read_bytes())  # the IR without its weights
    with pytest.raises(ModelError, match="int8.bin is missing"):
        session(lonely, precision="int8")


def _attention_block(hidden: int = 256, heads: int = 4):
    """One BERT self-attention block (Q, K, V projections, additive [PAD] mask, softmax, context) as an OpenVINO
    model with random weights: the pattern the CPU plugin fuses into one generated kernel ("snippets")."""
    import openvino as ov
    import openvino.opset13 as ops

    rng, dim = np.random.default_rng(0), hidden // heads
    x, mask = ops.parameter([-1, -1, hidden], ov.Type.f32, name="x"), ops.parameter([-1, -1], ov.Type.f32, name="mask")

    def heads_of(t):
        y = ops.matmul(t, ops.constant(rng.standard_normal((hidden, hidden)).astype(np.float32) / 16), False, False)
        y = ops.reshape(y, ops.constant(np.array([0, 0, heads, dim], np.int64)), True)
        return ops.transpose(y, ops.constant(np.array([0, 2, 1, 3], np.int64)))

    q, k, v = heads_of(x), heads_of(x), heads_of(x)
    bias = ops.multiply(ops.subtract(ops.constant(np.float32(1)), mask), ops.constant(np.float32(-1e4)))
    scores = ops.add(ops.multiply(ops.matmul(q, k, False, True), ops.constant(np.float32(dim ** -0.5))),
                     ops.unsqueeze(bias, ops.constant(np.array([1, 2], np.int64))))
    out = ops.transpose(ops.matmul(ops.softmax(scores, -1), v, False, False), ops.constant(np.array([0, 2, 1, 3], np.int64)))
    return ov.Model([ops.reshape(out, ops.constant(np.array([0, 0, hidden], np.int64)), True)], [x, mask])


def _width_changes(compiled, hidden: int = 256) -> int:
    """How many (text length, padded width) pairs give a text other outputs than it has unpadded."""
    rng, request, changed = np.random.default_rng(1), compiled.create_infer_request(), 0
    for n in range(2, 64, 3):
        x = rng.standard_normal((1, n, hidden)).astype(np.float32)
        alone = request.infer({"x": x, "mask": np.ones((1, n), np.float32)})[0].copy()
        for width in range(n + 1, 65):
            padded, mask = np.zeros((1, width, hidden), np.float32), np.zeros((1, width), np.float32)
            padded[:, :n], mask[:, :n] = x, 1
            changed += int(not np.array_equal(request.infer({"x": padded, "mask": mask})[0][:, :n], alone))
    return changed


def test_attention_over_whole_blocks_gives_every_width_the_same_outputs():
    """The build's rewrite (``attention.pad_attention``): keys, values and mask padded inside the model to the next
    multiple of 16 columns.  A text's outputs are then the same at every padded width, and they are the outputs the
    unchanged model gives it in a batch padded to a multiple of 16 (the extra keys are masked to exactly 0)."""
    from pipeline.backends.openvino.attention import pad_attention
    from pipeline.backends.openvino.config import CpuProperties
    from pipeline.backends.openvino.session import compile_model

    props = CpuProperties(threads=1).as_dict()
    padded = _attention_block()
    assert pad_attention(padded) == 1
    plain, padded = compile_model(_attention_block(), props, "attention block"), compile_model(padded, props, "padded")
    assert _width_changes(padded) == 0
    # and with the plugin's generated attention kernels, which such an IR is compiled with (SNIPPETS_MODE ENABLE)
    with_snippets = _attention_block()
    pad_attention(with_snippets)
    assert _width_changes(compile_model(with_snippets, CpuProperties(threads=1, snippets=True).as_dict(), "snippets")) == 0
    rng = np.random.default_rng(2)
    for n in (5, 16, 21, 40):
        x = rng.standard_normal((1, n, 256)).astype(np.float32)
        whole = -(-n // 16) * 16
        wide, mask = np.zeros((1, whole, 256), np.float32), np.zeros((1, whole), np.float32)
        wide[:, :n], mask[:, :n] = x, 1
        ours = padded.create_infer_request().infer({"x": x, "mask": np.ones((1, n), np.float32)})[0]
        np.testing.assert_array_equal(ours, plain.create_infer_request().infer({"x": wide, "mask": mask})[0][:, :n])


def test_a_model_without_the_attention_pattern_is_left_as_it_is():
    import openvino as ov
    import openvino.opset13 as ops

    from pipeline.backends.openvino.attention import pad_attention

    x = ops.parameter([-1, -1, 8], ov.Type.f32, name="x")  # a softmax that no MatMul reads: a classifier's head
    model = ov.Model([ops.softmax(ops.add(x, ops.constant(np.ones(8, np.float32))), -1)], [x])
    before = sorted(op.get_type_name() for op in model.get_ops())
    assert pad_attention(model) == 0
    assert sorted(op.get_type_name() for op in model.get_ops()) == before


def test_sessions_compile_attention_without_width_dependent_generated_kernels():
    """The served engine pads each batch to a width bucket and the offline reference runs a text at its own width,
    so served == offline needs [PAD] columns to change nothing.  The plugin's default fuses each attention block
    into one generated kernel blocked by the padded width (on the TNEWS INT8 forms: 239 and 271 of 10,000 titles'
    logits moved, 2 labels); the properties every session compiles with turn that off, and fewer pairs move."""
    from collections import Counter

    from pipeline.backends.openvino.config import CpuProperties
    from pipeline.backends.openvino.session import compile_model

    model, ours = _attention_block(), CpuProperties(threads=1).as_dict()
    default = {k: v for k, v in ours.items() if k != "SNIPPETS_MODE"}
    compiled = {name: compile_model(model, props, "attention block") for name, props in (("ours", ours), ("default", default))}
    layers = {name: Counter(op.get_rt_info()["layerType"].astype(str) for op in c.get_runtime_model().get_ops())
              for name, c in compiled.items()}
    assert layers["ours"]["Subgraph"] == 0 and layers["ours"]["Softmax"] == 1
    if layers["default"]["Subgraph"]:  # the plugin fuses attention on this CPU (AVX-512 and up): ours moves less
        assert _width_changes(compiled["ours"]) < _width_changes(compiled["default"])
