"""Accuracy-aware, batch-independent INT8 (pipeline.backends.onnxruntime.int8 with the engine-neutral search of
pipeline.quantization) and CPU awareness (pipeline.contract) on the tiny model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import pipeline  # noqa: F401  (before paddle)
from pipeline.errors import ConfigError

from conftest import features


@pytest.fixture(scope="module")
def tiny_onnx(tiny_finetuned, tiny_splits, tmp_path_factory) -> dict:
    from pipeline.backends.onnxruntime.convert import export_onnx
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges
    from pipeline.backends.paddle.convert import export_static
    from pipeline.quantization.select import calibration_feeds
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("int8")
    export_static(load_classifier(tiny_finetuned["model_dir"], 3), root / "static")
    fp32 = export_onnx(root / "static", root / "fp32.onnx")
    tok = Tokenizer.from_model_dir(tiny_finetuned["model_dir"], 32)
    train, dev = tiny_splits
    calib = features(tok, train[:64])
    feeds = calibration_feeds(calib, 16)
    ranges = activation_ranges(fp32, feeds, tok.pad_id)
    return {"root": root, "fp32": fp32, "tok": tok, "feeds": feeds, "ranges": ranges, "dev": features(tok, dev[:40]),
            "held": features(tok, train[-120:])}


def _logits(path: Path, fs, batch_size: int) -> np.ndarray:
    from pipeline.backends.onnxruntime.session import session
    from pipeline.evaluation import evaluate_session

    return evaluate_session(session(path, threads=1), fs, batch_size).flat()


def test_activation_ranges_ignore_padding(tiny_onnx):
    """A scale widened by padding rows would cost every real token precision: only real tokens count."""
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges

    feed = tiny_onnx["feeds"][0]
    pad = tiny_onnx["tok"].pad_id
    wide = {k: np.concatenate([v, np.full((v.shape[0], 12), pad if k == "input_ids" else 0, v.dtype)], axis=1)
            for k, v in feed.items()}
    a = activation_ranges(tiny_onnx["fp32"], [feed], pad)
    b = activation_ranges(tiny_onnx["fp32"], [wide], pad)
    assert a.keys() == b.keys() and len(a) >= 4
    for name in a:
        np.testing.assert_allclose(a[name].maximum, b[name].maximum, rtol=1e-4, atol=1e-5)


def test_smoothing_keeps_the_function_and_flattens_outliers(tiny_onnx, tmp_path):
    import onnx

    from pipeline.backends.onnxruntime.int8.smoothing import smooth, smoothing_factors
    from pipeline.backends.onnxruntime.int8.stats import ChannelRange

    model = onnx.load(str(tiny_onnx["fp32"]))
    ranges = dict(tiny_onnx["ranges"])
    applied = smooth(model, ranges, 0.7)
    assert applied and all(f"{x}_smoothed" in ranges for x in applied)
    onnx.save(model, str(tmp_path / "smoothed.onnx"))
    np.testing.assert_allclose(_logits(tmp_path / "smoothed.onnx", tiny_onnx["dev"], 16),
                               _logits(tiny_onnx["fp32"], tiny_onnx["dev"], 16), rtol=1e-3, atol=2e-4)
    # One outlier channel 40x the others: after migration the activation's spread shrinks, the weight takes it.
    act = np.ones(8, np.float32)
    act[3] = 40.0
    s = smoothing_factors(act, [np.ones((8, 4), np.float32)], 0.7)
    flat = ChannelRange(-act / s, act / s).absmax
    assert flat.max() / np.median(flat) < 40.0 / 4
    with pytest.raises(ConfigError, match="alpha"):
        smooth(onnx.load(str(tiny_onnx["fp32"])), dict(tiny_onnx["ranges"]), 1.0)


def test_recipe_is_batch_independent_and_keeps_fp32_matmuls_float(tiny_onnx, tmp_path):
    import onnx

    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.quantization.recipe import Int8Recipe, weight_matmuls

    names = [n.name for n in weight_matmuls(onnx.load(str(tiny_onnx["fp32"])))]
    recipe = Int8Recipe(smooth_alpha=0.5, reduce_range=True, fp32_matmuls=(names[0],))
    assert recipe.name == "static-sq0.5-rr-fp32x1"
    path = build(tiny_onnx["fp32"], tmp_path / "int8.onnx", tiny_onnx["ranges"], recipe)
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert "DynamicQuantizeLinear" not in ops and "MatMulIntegerToFloat" in ops and "QuantizeLinear" in ops
    kept = [n for n in model.graph.node if n.name == names[0]]
    assert kept and kept[0].op_type == "MatMul"  # left in float, not MatMulInteger
    fs = tiny_onnx["dev"]
    np.testing.assert_array_equal(_logits(path, fs, 1), _logits(path, fs, 32))
    agree = (_logits(path, fs, 16).argmax(-1) == _logits(tiny_onnx["fp32"], fs, 16).argmax(-1)).mean()
    assert agree >= 0.9


def _optimized_ops(path: Path, tmp: Path) -> dict[str, int]:
    """Op counts of the graph ONNX Runtime actually runs (after its session-time fusions)."""
    import collections

    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp / f"{path.stem}.optimized.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


def test_fixed_scale_matmuls_run_fused(tiny_onnx, tmp_path, monkeypatch):
    """Every int8 MatMul runs as one MatMulIntegerToFloat (rescale and bias inside the GEMM).

    Pinned upstream: with constant activation scales ORT folds the scale product first and then cannot
    fuse the MatMulInteger -> Cast -> Mul -> Add chain itself (four passes over the activations instead
    of one: 6% of CLUENER's INT8 time).  If ORT learns to, the unfused half of this test says so."""
    import onnx

    import pipeline.backends.onnxruntime.int8.fusion as fusion
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.quantization.recipe import Int8Recipe, weight_matmuls

    n = len(weight_matmuls(onnx.load(str(tiny_onnx["fp32"]))))
    fused = build(tiny_onnx["fp32"], tmp_path / "fused.onnx", tiny_onnx["ranges"], Int8Recipe(smooth_alpha=0.5))
    ops = _optimized_ops(fused, tmp_path)
    assert ops["MatMulIntegerToFloat"] == n and ops["MatMulInteger"] == 0

    monkeypatch.setattr(fusion, "fuse_integer_matmuls", lambda model: 0)
    plain = build(tiny_onnx["fp32"], tmp_path / "plain.onnx", tiny_onnx["ranges"], Int8Recipe(smooth_alpha=0.5))
    assert _optimized_ops(plain, tmp_path)["MatMulInteger"] == n  # ORT left them unfused
    fs = tiny_onnx["dev"]
    np.testing.assert_allclose(_logits(fused, fs, 16), _logits(plain, fs, 16), rtol=1e-3, atol=1e-3)


def test_cpu_sessions_leave_out_skip_layernorm_and_the_anchor_keeps_ort_defaults(tiny_onnx, tmp_path, monkeypatch):
    """The pipeline's ONNX Runtime sessions on CPU and the served engine run the INT8 form without
    SkipLayerNormalization (``served.CPU_DISABLED_OPTIMIZERS``: its CPU kernel is 4-12x slower than the Add and
    LayerNormalization it replaces, MEASUREMENTS.md) and with threads that do not spin (``served.SESSION_CONFIG``:
    what compress and validate time is what is served); the anchor runs with ORT's defaults, as its users run it.

    Pinned upstream: with its defaults ORT does fuse them in this form, and the name we disable is the fusion's (a
    renamed fusion would leave SkipLayerNormalization in the sessions, and this test would say so)."""
    import collections

    import onnx
    import onnxruntime as ort

    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.backends.onnxruntime.served import Engine
    from pipeline.backends.onnxruntime.session import session
    from pipeline.quantization.recipe import Int8Recipe

    int8 = build(tiny_onnx["fp32"], tmp_path / "int8.onnx", tiny_onnx["ranges"], Int8Recipe(smooth_alpha=0.5))
    real, ran = ort.InferenceSession, []

    spins = []

    def keeping_the_graph_it_runs(path, sess_options, *args, **kwargs):
        sess_options.optimized_model_filepath = str(tmp_path / f"ran{len(ran)}.onnx")
        ran.append(sess_options.optimized_model_filepath)
        try:
            spins.append(sess_options.get_session_config_entry("session.intra_op.allow_spinning"))
        except Exception:  # not set: ORT's default, spinning
            spins.append("default")
        return real(path, sess_options, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", keeping_the_graph_it_runs)

    def ops_of(make) -> collections.Counter:
        make()
        return collections.Counter(n.op_type for n in onnx.load(ran[-1]).graph.node)

    assert ops_of(lambda: session(int8, precision="int8", ort_defaults=True))["SkipLayerNormalization"] > 0
    for ops in (ops_of(lambda: session(int8, precision="int8")), ops_of(lambda: Engine(int8, 1, False, {}))):
        assert ops["SkipLayerNormalization"] == 0 and ops["LayerNormalization"] > 0 and ops["MatMulIntegerToFloat"] > 0
    assert spins == ["default", "0", "0"]
    b = tiny_onnx["dev"].batch(range(8))
    np.testing.assert_allclose(session(int8, precision="int8").run(b.input_ids, b.token_type_ids),
                               session(int8, precision="int8", ort_defaults=True).run(b.input_ids, b.token_type_ids),
                               rtol=1e-4, atol=1e-4)


def _transposes(path: Path, tmp: Path) -> list[list[int]]:
    """The perms of the Transposes ONNX Runtime actually runs (after its session-time rewrites)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp / f"{path.stem}.all.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return [next(list(a.ints) for a in n.attribute if a.name == "perm")
            for n in onnx.load(so.optimized_model_filepath).graph.node if n.op_type == "Transpose"]


def test_score_gemm_reads_keys_untransposed(tiny_onnx, tmp_path, monkeypatch):
    """No K^T scatter (perm [0,2,3,1]) is left in the INT8 form: the score GEMM takes K with transB.

    Pinned upstream: ORT keeps paddle2onnx's [0,2,3,1] Transpose as it is (7% of the real TNEWS model's INT8
    time on AVX512-VNNI); if it learns to fold it, the unrewritten half of this test says so."""
    import pipeline.backends.onnxruntime.int8.fusion as fusion
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.quantization.recipe import Int8Recipe

    layers = sum(1 for p in _transposes(tiny_onnx["fp32"], tmp_path) if p == [0, 2, 3, 1])
    assert layers >= 1  # one per attention layer in the exported FP32 graph
    folded = build(tiny_onnx["fp32"], tmp_path / "folded.onnx", tiny_onnx["ranges"], Int8Recipe(smooth_alpha=0.5))
    perms = _transposes(folded, tmp_path)
    assert [0, 2, 3, 1] not in perms and perms.count([0, 2, 1, 3]) >= 3 * layers  # Q, K, V and the context

    monkeypatch.setattr(fusion, "fold_key_transpose", lambda model: 0)
    plain = build(tiny_onnx["fp32"], tmp_path / "plain.onnx", tiny_onnx["ranges"], Int8Recipe(smooth_alpha=0.5))
    assert _transposes(plain, tmp_path).count([0, 2, 3, 1]) == layers  # ORT left them as they were
    fs = tiny_onnx["dev"]
    np.testing.assert_allclose(_logits(folded, fs, 16), _logits(plain, fs, 16), rtol=1e-5, atol=1e-5)


def test_qdq_form_carries_the_recipe(tiny_onnx, tmp_path):
    """The TensorRT (QDQ) form gets the searched recipe: the SmoothQuant Mul and the FP32 MatMuls."""
    import onnx

    from pipeline.backends.onnxruntime.int8.recipe import build_qdq
    from pipeline.quantization.recipe import Int8Recipe, weight_matmuls

    names = [n.name for n in weight_matmuls(onnx.load(str(tiny_onnx["fp32"])))]
    recipe = Int8Recipe(smooth_alpha=0.5, fp32_matmuls=(names[0],))
    path = build_qdq(tiny_onnx["fp32"], tmp_path / "qdq.onnx", tiny_onnx["ranges"], recipe, tiny_onnx["feeds"])
    model = onnx.load(str(path))
    graph_inputs = {n.output[0]: n for n in model.graph.node}
    kept = next(n for n in model.graph.node if n.name == names[0])
    assert kept.input[1] not in graph_inputs  # its weight stays a float initializer, no DequantizeLinear
    quantized = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in graph_inputs
                 and graph_inputs[n.input[1]].op_type == "DequantizeLinear"]
    assert len(quantized) == len(names) - 1
    assert any("_smoothed" in i.name for i in model.graph.initializer)  # the migration happened
    fs = tiny_onnx["dev"]
    agree = (_logits(path, fs, 16).argmax(-1) == _logits(tiny_onnx["fp32"], fs, 16).argmax(-1)).mean()
    assert agree >= 0.9


def test_qdq_scales_come_from_the_real_token_ranges(tiny_onnx, tmp_path):
    """The QDQ form's activation scales are the given real-token ranges' (``activation_ranges``), not those of ORT's
    calibrator, which counts padding positions (CMRC2018 held-out F1: -1.06 points with ORT's, -0.02 with these).
    Ranges from one batch and calibration on all batches tell the two apart."""
    import onnx
    from onnx import numpy_helper

    from pipeline.backends.onnxruntime.int8.recipe import build_qdq
    from pipeline.backends.onnxruntime.quantize import quantize_int8_qdq
    from pipeline.quantization.recipe import Int8Recipe
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges

    feeds = tiny_onnx["feeds"]
    ranges = activation_ranges(tiny_onnx["fp32"], feeds[:1], tiny_onnx["tok"].pad_id)

    def scales(path: Path) -> dict[str, float]:
        model = onnx.load(str(path))
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        return {n.input[0]: float(inits[n.input[1]]) for n in model.graph.node
                if n.op_type == "QuantizeLinear" and n.input[0] not in inits}

    ours = scales(build_qdq(tiny_onnx["fp32"], tmp_path / "ours.onnx", ranges, Int8Recipe(), feeds))
    measured = [name for name in ours if name in ranges]
    assert len(measured) >= 4
    for name in measured:
        assert ours[name] == pytest.approx(float(np.max(ranges[name].absmax)) / 127, rel=1e-6)
    upstream = scales(quantize_int8_qdq(tiny_onnx["fp32"], tmp_path / "ort.onnx", feeds))
    assert any(upstream[n] > ours[n] * 1.01 for n in measured)  # the calibrator's own scales differ


def test_recipe_refuses_to_leave_a_per_batch_scale(tiny_onnx, tmp_path):
    """A tensor without a calibrated range would keep ORT's per-batch scale: refused, never shipped."""
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.errors import ModelError
    from pipeline.quantization.recipe import Int8Recipe

    ranges = dict(tiny_onnx["ranges"])
    ranges.pop(sorted(ranges)[0])
    with pytest.raises(ModelError, match="no calibrated range"):
        build(tiny_onnx["fp32"], tmp_path / "x.onnx", ranges, Int8Recipe())


def _search(tiny_onnx, work: Path, builds: list):
    """ONNX Runtime's form in the engine-neutral search; every build is recorded in ``builds``."""
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.backends.onnxruntime.int8.search import fixed_scale_form
    from pipeline.quantization.search import Search

    def counting_build(*args, **kwargs):
        builds.append(args[3].name)
        return build(*args, **kwargs)

    form = fixed_scale_form(_rows(tiny_onnx), tiny_onnx["ranges"], True, build=counting_build)
    return Search(tiny_onnx["fp32"], form, work, log=lambda m: None, cache_key="t")


def _rows(tiny_onnx):
    """The held-out slice as ``SearchRows`` carries it (the form scores only ``held``)."""
    from types import SimpleNamespace

    return SimpleNamespace(held=tiny_onnx["held"])


def test_search_picks_within_budget_and_caches_candidates(tiny_onnx, tmp_path):
    from pipeline.quantization.recipe import Int8Recipe

    builds: list = []
    search = _search(tiny_onnx, tmp_path / "cache", builds)
    bases = [Int8Recipe(), Int8Recipe(0.5), Int8Recipe(0.7)]
    result = search.run(bases, budget_points=100.0, max_fp32=2)
    assert result.within_budget and result.chosen.recipe.fp32_matmuls == ()
    assert len(builds) == 3 and Path(result.chosen.path).is_file()
    # Each recipe has its own file (dotted names once collapsed sq0.5 and sq0.7 onto one cache entry).
    paths = {c.path for c in result.candidates}
    assert len(paths) == 3 and all(Path(p).is_file() for p in paths)
    assert result.chosen.agreement == max(c.agreement for c in result.candidates)
    json.dumps(result.as_dict())  # the record export writes
    # A stricter budget (a gate change) re-scores nothing already built; an impossible one walks the
    # mixed-precision ladder, and fails loudly instead of pretending.
    builds.clear()
    strict = _search(tiny_onnx, tmp_path / "cache", builds).run(bases, budget_points=-100.0, max_fp32=2)
    assert not strict.within_budget
    assert strict.sensitivity and max(len(c.recipe.fp32_matmuls) for c in strict.candidates) == 2
    assert not {"static-nosq", "static-sq0.5", "static-sq0.7"} & set(builds)
    builds.clear()
    _search(tiny_onnx, tmp_path / "cache", builds).run(bases, budget_points=-100.0, max_fp32=2)
    assert builds == []
    # The cache key is the form's record: anything in it that changes (a builder version, a library, a session
    # property) builds and scores every recipe again instead of reusing what another record scored.
    import dataclasses

    search = _search(tiny_onnx, tmp_path / "cache", builds)
    search = type(search)(tiny_onnx["fp32"], dataclasses.replace(search.form, record={**search.form.record, "builder": -1}),
                          tmp_path / "cache", log=lambda m: None, cache_key="t")
    search.run(bases[:1], budget_points=100.0, max_fp32=0)
    assert builds == ["static-nosq"]


def test_a_drop_of_exactly_the_budget_is_within_it_in_the_search_the_selection_and_the_gate(tiny_onnx, tmp_path):
    """10 of 2,000 held-out rows below the baseline is 0.5000000000000004 points in floats: TNEWS's search once left out
    the recipe closest to FP32 for it (static-sq0.7, agreement 0.9855) and shipped one 0.4 points worse on dev.  The
    limit is met at the limit itself, to float rounding, in every place that compares with it (``gates.meets``)."""
    from pipeline.compress.candidates import Candidate
    from pipeline.quantization.recipe import Int8Recipe
    from pipeline.validation.gates import check, meets

    drop = 100.0 * (1091 / 2000 - 1081 / 2000)
    assert drop > 0.5 and meets(drop, 0.5, "max") and not meets(0.5001, 0.5, "max")
    assert meets(1.9999999999999998, 2.0, "min") and not meets(1.999, 2.0, "min")
    assert check("max_accuracy_drop", 0.5, drop, kind="max").passed
    c = Candidate("x", 1.0, "none", False, tmp_path, None, {})
    c.accuracy_drop_points = drop
    assert c.within(0.5) and not Candidate.within(dataclasses.replace(c, accuracy_drop_points=0.51), 0.5)

    builds: list = []
    bases = [Int8Recipe(), Int8Recipe(0.5)]
    first = _search(tiny_onnx, tmp_path / "cache", builds).run(bases, budget_points=100.0, max_fp32=0)
    # a budget below the chosen recipe's drop by less than float rounding: it is still within it, and still chosen
    budget = first.chosen.drop_points - 5e-10
    again = _search(tiny_onnx, tmp_path / "cache", builds).run(bases, budget_points=budget, max_fp32=0)
    assert again.within_budget and again.chosen.recipe == first.chosen.recipe and again.chosen.drop_points > budget


def test_search_skips_mixed_precision_when_the_pruned_source_is_already_over_budget(tiny_onnx, tmp_path):
    """A pruned model 5 points below the unpruned baseline in FP32: no FP32 MatMul can win that back, so the
    sensitivity ladder (minutes on a real model) is not walked, and the result says it is outside the budget."""
    import shutil

    import dataclasses

    from pipeline.backends.onnxruntime.int8.search import fixed_scale_form
    from pipeline.quantization.recipe import Int8Recipe
    from pipeline.quantization.search import Search

    unpruned = shutil.copyfile(tiny_onnx["fp32"], tmp_path / "unpruned.onnx")
    form = fixed_scale_form(_rows(tiny_onnx), tiny_onnx["ranges"], True)

    def evaluate(path):
        score, outputs = form.evaluate(path)
        return score + (0.05 if Path(path) == unpruned else 0.0), outputs

    lines: list[str] = []
    search = Search(tiny_onnx["fp32"], dataclasses.replace(form, evaluate=evaluate), tmp_path / "cache",
                    log=lines.append, cache_key="t", baseline=unpruned)
    result = search.run([Int8Recipe()], budget_points=1.0, max_fp32=2)
    assert not result.within_budget and result.sensitivity == {} and len(result.candidates) == 1
    assert any("mixed precision skipped" in line for line in lines)


def test_export_config_refuses_bad_int8_settings(tiny_finetuned):
    from pipeline.config import load_task_config

    from tests.conftest import TINY_MODEL_OVERRIDES

    base = str(tiny_finetuned["task_yaml"])
    with pytest.raises(ConfigError, match=r"int8_smooth_alphas\[0\]"):
        load_task_config(base, {**TINY_MODEL_OVERRIDES, "quantization.int8_smooth_alphas": [1.5]})
    with pytest.raises(ConfigError, match="int8_reduce_range"):
        load_task_config(base, {**TINY_MODEL_OVERRIDES, "quantization.int8_reduce_range": "sometimes"})


CPUINFO_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx avx2 fma\n"
CPUINFO_VNNI = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: avx2 avx512f avx512bw avx512_vnni\n"
CPUINFO_ZEN5 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: avx2 avx512f avx512bw avx512_vnni avx_vnni avx512_bf16\n"
CPUINFO_SPR = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
               "flags\t\t: avx2 avx512f avx512bw avx512_vnni avx_vnni avx512_bf16 amx_tile amx_int8 amx_bf16\n")


def test_what_is_measured_here_is_keyed_on_the_cpu(tiny_onnx, tiny_finetuned, tmp_path, monkeypatch):
    """compress and validate time and score forms on this CPU, and the INT8 searches score them: taken to another
    kind of CPU (a runs dir, a CI cache), their keys differ and they measure again; finetune-check's does not."""
    from pipeline import contract
    from pipeline.config import load_task_config
    from pipeline.stages import compress, finetune_check, validate

    from tests.conftest import TINY_MODEL_OVERRIDES

    cfg = load_task_config(str(tiny_finetuned["task_yaml"]), TINY_MODEL_OVERRIDES)

    def keys_on(cpuinfo: str):
        monkeypatch.setattr(contract, "detect_cpu", lambda *a, **k: contract.parse_cpuinfo(cpuinfo, 2))
        return ([stage.params(cfg) for stage in (compress, validate, finetune_check)],
                _search(tiny_onnx, tmp_path / "cache", []).key)

    (avx2, avx2_search), (vnni, vnni_search), (again, again_search) = map(keys_on, (CPUINFO_AVX2, CPUINFO_VNNI, CPUINFO_AVX2))
    assert avx2[0] != vnni[0] and avx2[1] != vnni[1] and avx2[2] == vnni[2]
    assert avx2_search != vnni_search
    assert (again, again_search) == (avx2, avx2_search)  # the same CPU: the same keys


def test_cpu_flags_decide_reduce_range_and_serving_warns():
    from pipeline.contract import missing_int8_flags, parse_cpuinfo
    from pipeline.backends.onnxruntime.int8.search import reduce_range_options
    from serving.server import cpu_warnings

    avx2, vnni = parse_cpuinfo(CPUINFO_AVX2, 2), parse_cpuinfo(CPUINFO_VNNI, 2)
    assert avx2.flags == ("avx2",) and avx2.int8_saturates and avx2.model == "AMD EPYC 7B12"
    assert vnni.vnni and not vnni.int8_saturates
    assert reduce_range_options("auto", avx2) == [False, True]
    assert reduce_range_options("auto", vnni) == [False]
    assert reduce_range_options(True, vnni) == [True]
    assert missing_int8_flags(vnni.flags, avx2.flags) == ["avx512f", "avx512bw", "avx512_vnni"]
    manifest = {"precision": "int8", "cpu": vnni.as_dict()}
    (line,) = cpu_warnings(manifest, flags=set(avx2.flags))
    assert "avx512_vnni" in line and "saturate" in line
    assert cpu_warnings(manifest, flags=set(vnni.flags)) == []
    assert cpu_warnings({**manifest, "precision": "fp32"}, flags=set(avx2.flags)) == []
    # A CPU with AVX-VNNI beside AVX512-VNNI (Zen 5, Sapphire Rapids): on one with AVX512-VNNI alone (Zen 4) the engines
    # run the same AVX-512 VNNI kernels: nothing lacking, and no saturation where a VNNI dot product is there.
    zen5, spr = parse_cpuinfo(CPUINFO_ZEN5, 2), parse_cpuinfo(CPUINFO_SPR, 2)
    assert missing_int8_flags(zen5.flags, vnni.flags) == []
    assert cpu_warnings({"precision": "int8", "cpu": zen5.as_dict()}, flags=set(vnni.flags)) == []
    (line,) = cpu_warnings({"precision": "int8", "cpu": spr.as_dict()}, flags=set(vnni.flags))
    assert "lacks amx_tile, amx_int8," in line and "avx_vnni" not in line and "saturate" not in line
    (line,) = cpu_warnings({"precision": "int8", "cpu": zen5.as_dict()}, flags=set(avx2.flags))
    assert "avx512_vnni, avx_vnni" in line and "saturate" in line  # AVX2 alone: the VEX form is lacking too
    assert missing_int8_flags(avx2.flags, vnni.flags) == []  # validated without VNNI: nothing this CPU lacks


def test_bench_refuses_a_task_without_an_export(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", Path(__file__).resolve().parent.parent / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--task", "tnews", "--runs-dir", str(tmp_path)]) == 2
    assert "no finished export" in capsys.readouterr().err


def test_qdq_form_keeps_the_searched_recipe_within_its_target_and_searches_otherwise(tiny_onnx, tmp_path, monkeypatch):
    """The TensorRT form starts from the ONNX Runtime search's recipe; outside export.qdq_budget_points on the
    held-out rows each SmoothQuant strength is tried for it, from the same cache (a target change rebuilds nothing)."""
    import dataclasses
    import types

    import pipeline.backends.onnxruntime.int8.recipe as R
    from pipeline.backends.onnxruntime.int8.search import search_qdq, search_recipe
    from pipeline.contract import detect_cpu as detect
    from pipeline.quantization.select import SearchRows
    from pipeline.quantization.config import QuantizationConfig

    rows = SearchRows(tiny_onnx["feeds"], tiny_onnx["held"], tiny_onnx["tok"].pad_id)
    ecfg = QuantizationConfig(int8_smooth_alphas=[0.5, 0.7], int8_reduce_range=False)
    cache = tmp_path / "cache"
    int8 = search_recipe(tiny_onnx["fp32"], tmp_path / "int8.onnx", rows, ecfg, 100.0, detect(), cache,
                         ranges=tiny_onnx["ranges"], log=lambda m: None)
    built: list[str] = []
    real = R.build_qdq

    def counting(*args, **kwargs):
        built.append(args[3].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(R, "build_qdq", counting)
    easy = search_qdq(tiny_onnx["fp32"], tmp_path / "qdq.onnx", rows, ecfg, int8, cache, tiny_onnx["ranges"], log=lambda m: None)
    assert easy.within_budget and len(easy.candidates) == 1 and built == [easy.chosen.recipe.name]
    assert easy.chosen.recipe.smooth_alpha == int8.chosen.recipe.smooth_alpha and (tmp_path / "qdq.onnx").is_file()
    built.clear()
    unreachable = types.SimpleNamespace(**{**dataclasses.asdict(ecfg), "qdq_budget_points": -100.0})  # config refuses < 0
    hard = search_qdq(tiny_onnx["fp32"], tmp_path / "qdq.onnx", rows, unreachable,
                      int8, cache, tiny_onnx["ranges"], log=lambda m: None)
    names = {c.recipe.name for c in hard.candidates}
    assert not hard.within_budget and names == {"static-nosq", "static-sq0.5", "static-sq0.7"}
    assert hard.chosen.drop_points == min(c.drop_points for c in hard.candidates)
    assert easy.chosen.recipe.name not in built and len(built) == 2  # the first was cached
    assert all("qdq-" in Path(c.path).name for c in hard.candidates)  # never confused with the ORT form's files


def test_a_pruned_sources_verdict_says_what_the_pruning_itself_cost(tiny_onnx, tmp_path):
    """Drops of a pruned width's recipes count from the unpruned baseline, so the verdict line also gives the
    pruned FP32 source's own drop: CLUENER w3/4 read "+1.39, OUTSIDE the budget" while its FP32 alone was +1.44."""
    import shutil

    from pipeline.backends.onnxruntime.int8.search import search_recipe
    from pipeline.contract import detect_cpu as detect
    from pipeline.quantization.select import SearchRows
    from pipeline.quantization.config import QuantizationConfig

    rows = SearchRows(tiny_onnx["feeds"], tiny_onnx["held"], tiny_onnx["tok"].pad_id)
    ecfg = QuantizationConfig(int8_smooth_alphas=[], int8_reduce_range=False)
    unpruned = shutil.copyfile(tiny_onnx["fp32"], tmp_path / "unpruned.onnx")  # same model: the source loses 0.00
    verdicts = {}
    for name, baseline in (("plain", None), ("pruned", unpruned)):
        lines: list[str] = []
        search_recipe(tiny_onnx["fp32"], tmp_path / f"{name}.onnx", rows, ecfg, 100.0, detect(), tmp_path / "cache",
                      baseline=baseline, ranges=tiny_onnx["ranges"], log=lines.append)
        verdicts[name] = lines[-1]
    assert "pt budget; the pruned FP32 source alone +0.00)" in verdicts["pruned"]
    assert "pruned" not in verdicts["plain"] and verdicts["plain"].endswith("pt budget)")
