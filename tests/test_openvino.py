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
