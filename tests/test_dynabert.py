"""DynaBERT width pruning (pipeline.compress.dynabert) on the tiny fine-tuned ERNIE (1 layer, 4 heads, FFN 64)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pipeline.compress import dynabert
from pipeline.compress.architecture import Architecture
from pipeline.compress.dynabert import Schedule
from pipeline.ernie_models import HEAD_SIZE_KEY
from pipeline.modeling import load_classifier
from pipeline.errors import ConfigError, ModelError
from pipeline.evaluation import evaluate_dygraph
from pipeline import progress
from pipeline.tokenizer import Tokenizer

from conftest import features

MAX_SEQ_LEN = 32


@pytest.fixture(scope="module")
def splits(tiny_splits, tiny_finetuned):
    """(train, dev) FeatureSets; tiny_model_copy and pruned dirs share the fixture model's vocabulary."""
    tok = Tokenizer.from_model_dir(tiny_finetuned["model_dir"], MAX_SEQ_LEN)
    return tuple(features(tok, split) for split in tiny_splits)


def _logits(model, fs):
    return evaluate_dygraph(model, fs, 64).flat()


def _kl_to_teacher(teacher_logits, student_logits):
    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lt, ls = log_softmax(teacher_logits), log_softmax(student_logits)
    return float((np.exp(lt) * (lt - ls)).sum(-1).mean())


def test_pruned_sizes_round_heads_down_and_neurons_to_nearest():
    assert dynabert.pruned_sizes(12, 1536, 0.75) == (9, 1152)
    assert dynabert.pruned_sizes(12, 1536, 2 / 3) == (8, 1024)  # not 7: 12 * (2/3) is 7.999... in floats
    assert dynabert.pruned_sizes(4, 64, 0.75) == (3, 48)
    assert dynabert.pruned_sizes(4, 64, 0.1) == (1, 6)  # at least one head
    assert dynabert.pruned_sizes(4, 64, 1.0) == (4, 64)
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match="width_mult"):
            dynabert.pruned_sizes(4, 64, bad)


def test_kept_layers_are_dynaberts_depth_rule():
    assert dynabert.kept_layers(6, 2 / 3) == [0, 1, 3, 4]
    assert dynabert.kept_layers(6, 0.5) == [0, 2, 4]
    assert dynabert.kept_layers(12, 0.75) == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert dynabert.kept_layers(6, 1.0) == list(range(6)) and dynabert.kept_layers(1, 0.5) == [0]
    with pytest.raises(ConfigError, match="depth_mult"):
        dynabert.kept_layers(6, 0.0)


def test_a_shallower_student_is_the_teachers_kept_layers(tiny_deep_model, splits):
    """shrink at depth 1/2 keeps layers 0 and 2: its first layer's output is the teacher's, its second is the teacher's
    layer 2 applied to layer 0's output (what distillation starts from, and matches to the teacher's layer 2)."""
    import paddle

    _, dev = splits
    teacher = load_classifier(tiny_deep_model, 3)
    student, keep = dynabert.shrink(teacher, Architecture(0.5, 0.5))
    assert keep == [0, 2] and len(student.ernie.encoder.layers) == 2 and len(teacher.ernie.encoder.layers) == 4
    assert student.config.num_hidden_layers == 2 and teacher.config.num_hidden_layers == 4
    full_width, _ = dynabert.shrink(teacher, Architecture(1.0, 0.5))
    ids = paddle.to_tensor(dev.batch(range(8)).input_ids)
    teacher.eval(), full_width.eval()
    t = teacher(ids, output_hidden_states=True, return_dict=True).hidden_states
    s = full_width(ids, output_hidden_states=True, return_dict=True).hidden_states
    assert len(s) == 3 and len(t) == 5
    np.testing.assert_allclose(s[1].numpy(), t[1].numpy(), atol=1e-5)
    pad = paddle.unsqueeze((ids == dev.pad_id).astype("float32") * -1e4, axis=[1, 2])  # ERNIE's attention mask
    np.testing.assert_allclose(s[2].numpy(), teacher.ernie.encoder.layers[2](t[1], pad).numpy(), atol=1e-5)
    assert not np.allclose(s[2].numpy(), t[2].numpy(), atol=1e-3)


def test_prune_to_a_depth_saves_a_shallower_model_that_loads(tiny_deep_model, tmp_path, splits):
    import paddle

    train, dev = splits
    logs = []
    out = dynabert.prune(tiny_deep_model, Architecture(0.5, 0.5), train, dev, Schedule(1, 3e-3, 16, 4, 0),
                         out_dir=tmp_path / "w05d05", log=logs.append)
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["num_attention_heads"] == 2
    state = paddle.load(str(out / "model_state.pdparams"), return_numpy=True)
    assert any(".layers.1." in k for k in state) and not any(".layers.2." in k for k in state)
    assert "dynabert w0.5-d0.5: 4 -> 2 heads, intermediate 64 -> 32, 4 -> 2 layers (keeping 0, 2)" in logs
    model = load_classifier(out, 3)
    assert len(model.ernie.encoder.layers) == 2 and evaluate_dygraph(model, dev, 64).flat().shape[0] == len(dev)


def test_reordering_by_importance_keeps_the_function_and_sorts_importance(tiny_model_copy, splits):
    _, dev = splits
    model = load_classifier(tiny_model_copy, 3)
    before = _logits(model, dev)
    importance = dynabert.compute_importance(model, dev, batch_size=32)
    assert importance.heads.shape == (1, 4) and importance.neurons[0].shape == (64,)
    assert np.all(importance.heads > 0) and np.count_nonzero(importance.neurons[0]) > 32
    assert not np.all(np.diff(importance.heads[0]) <= 0), "fixture heads already sorted: the test would prove nothing"

    dynabert.reorder_by_importance(model, importance)
    after = _logits(model, dev)
    np.testing.assert_allclose(after, before, atol=2e-5)  # a permutation of heads/neurons: same function
    assert not np.allclose(model.ernie.encoder.layers[0].linear1.weight.numpy(),
                           load_classifier(tiny_model_copy, 3).ernie.encoder.layers[0].linear1.weight.numpy())

    # recomputed on the reordered model, importance comes out sorted (most important first)
    again = dynabert.compute_importance(model, dev, batch_size=32)
    np.testing.assert_allclose(again.heads[0], np.sort(importance.heads[0])[::-1], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(again.neurons[0], np.sort(importance.neurons[0])[::-1], rtol=1e-3, atol=1e-7)


def test_narrowed_model_equals_full_model_with_pruned_units_masked(tiny_model_copy, splits):
    """Physical slicing is exactly "mask the dropped heads and neurons" of the full model."""
    import paddle

    _, dev = splits
    full = load_classifier(tiny_model_copy, 3)
    small = dynabert.narrow_model(full, 2, 40)
    layer = small.ernie.encoder.layers[0]
    assert layer.self_attn.num_heads == 2 and layer.self_attn.head_dim == 8
    assert layer.self_attn.q_proj.weight.shape == [32, 16] and layer.self_attn.out_proj.weight.shape == [16, 32]
    assert layer.linear1.weight.shape == [32, 40] and layer.linear2.weight.shape == [40, 32]

    head_mask = paddle.to_tensor(np.repeat([1.0, 1.0, 0.0, 0.0], 8).astype("float32"))
    neuron_mask = paddle.to_tensor((np.arange(64) < 40).astype("float32"))
    full_layer = full.ernie.encoder.layers[0]
    full_layer.self_attn.out_proj.register_forward_pre_hook(lambda _l, x: (x[0] * head_mask,))
    full_layer.linear2.register_forward_pre_hook(lambda _l, x: (x[0] * neuron_mask,))
    np.testing.assert_allclose(_logits(small, dev), _logits(full, dev), atol=2e-5)


def test_importance_keeps_the_heads_that_matter(tiny_model_copy, splits):
    """Keeping the most important half of the heads/neurons stays closer to the model than keeping the least."""
    _, dev = splits
    model = load_classifier(tiny_model_copy, 3)
    teacher = _logits(model, dev)
    importance = dynabert.compute_importance(model, dev, batch_size=32)
    best = dynabert.Importance(importance.heads, importance.neurons)
    worst = dynabert.Importance(-importance.heads, [-n for n in importance.neurons])
    kl = {}
    for name, order in (("best", best), ("worst", worst)):
        m = load_classifier(tiny_model_copy, 3)
        dynabert.reorder_by_importance(m, order)
        kl[name] = _kl_to_teacher(teacher, _logits(dynabert.narrow_model(m, 2, 32), dev))
    assert kl["best"] < kl["worst"], kl


def test_distillation_moves_the_student_towards_the_teacher(tiny_model_copy, splits, monkeypatch):
    import paddle

    from pipeline import training
    from pipeline.kinds.base import FeatureSet

    train, dev = splits
    estimates, trained = [], []  # the work the estimate was told each step does; the batches the steps trained on
    monkeypatch.setattr(training, "StepEstimate",
                        lambda *a, **kw: estimates.append(kw["costs"]) or progress.StepEstimate(*a, **kw))
    batch = FeatureSet.batch
    monkeypatch.setattr(FeatureSet, "batch",
                        lambda fs, idx: (b := batch(fs, idx), trained.append(b.input_ids.size) if fs is train else None)[0])
    teacher = load_classifier(tiny_model_copy, 3)
    t_logits = _logits(teacher, dev)
    paddle.seed(0)
    student = dynabert.narrow_model(teacher, 1, 16)
    kl_before = _kl_to_teacher(t_logits, _logits(student, dev))
    lines = []
    acc = dynabert.distill(student, teacher, train, dev, Schedule(epochs=2, learning_rate=3e-3, batch_size=16,
                                                                  max_steps=40, seed=0), log=lines.append)
    kl_after = _kl_to_teacher(t_logits, _logits(student, dev))
    assert kl_after < 0.7 * kl_before, (kl_before, kl_after)
    assert acc >= 0.9
    epochs = [line for line in lines if "held-out accuracy" in line]
    assert len(epochs) == 2 and len(lines) == 3  # one line per epoch, and the estimate before the first
    estimate = re.fullmatch(r"dynabert: distillation: (\d+) steps x (\d+\.\d+) s/step \(measured over steps 2-6, scaled "
                            r"by each step's padded tokens\): about \S+ in all, \S+ left", lines[0])
    from pipeline.training import plan_steps

    assert estimate and int(estimate[1]) == plan_steps(len(train), 16, 2, 40).total_steps, lines[0]
    # the estimate's plan is the work of the very batches trained, across the epoch boundary (two epochs of 40 steps)
    assert estimates[0] == trained and len(trained) == 40 and len(set(trained)) > 1


def test_distillation_stops_when_held_out_stops_improving(tiny_model_copy, splits):
    """issue 60: distillation that stops when it stops paying.  A student that cannot learn (learning rate ~0) is
    checked every 4 steps; after 2 checks without a gain its budget ends 4 steps later (the learning rate decaying to
    0 over them), far short of its 400 steps, and it says so."""
    import paddle

    from pipeline.training import Plateau

    train, dev = splits
    teacher = load_classifier(tiny_model_copy, 3)
    paddle.seed(0)
    student = dynabert.narrow_model(teacher, 1, 16)
    lines = []
    dynabert.distill(student, teacher, train, dev, Schedule(1, 1e-12, 16, 400, 0, Plateau(eval_steps=4, patience=2)),
                     log=lines.append)
    checks = [line for line in lines if re.match(r"dynabert step \d+/400: step \d+, .*held-out accuracy", line)]
    assert [re.match(r"dynabert step (\d+)/400", line)[1] for line in checks] == ["4", "8", "12"], lines
    assert "(best so far, kept)" in checks[0] and "best so far" not in checks[1] + checks[2]
    stall = next(line for line in lines if "has not improved by more than 0.1 points in 2 checks of 4 steps" in line)
    assert stall.endswith("then training stops (step 16 of 400), keeping the best"), stall
    assert re.match(r"dynabert epoch 1/\d+: step 16, ", lines[-1]) and lines[-2] == stall, lines  # the one last check
    estimate = next(line for line in lines if line.startswith("dynabert: distillation: at most 400 steps x "))
    assert "it stops once 2 held-out checks every 4 steps gain no more than 0.1 points" in estimate


def test_an_interrupted_distillation_resumes_from_its_checkpoint(tiny_finetuned, tmp_path, splits):
    """Interrupted (Ctrl-C) at its second held-out check, a distillation with a ``Resume`` goes on from the checkpoint
    saved after its first (step 3 of 8) instead of from the start, with the best weights of before, and finishes.
    compress keys the checkpoint by the run cache's key and removes it once the model is made
    (test_compress_stage)."""
    from pipeline.training import Plateau

    train, dev = splits
    assert len(train) >= 8 * 16  # one epoch holds the 8 steps: the checks are at steps 3 and 6, the end at 8
    schedule = Schedule(1, 3e-3, 16, 8, 5, Plateau(eval_steps=3, patience=100))
    ckpt = tmp_path / "ckpt"

    def interrupt(line: str) -> None:
        if re.match(r"dynabert w0.75 step 6/8: ", line):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.75), train, dev, schedule, out_dir=tmp_path / "a",
                       log=interrupt, resume=dynabert.Resume(ckpt, 3))
    state = json.loads((ckpt / "checkpoint" / "state.json").read_text())
    assert state["step"] == 3 and len(state["history"]) == 1 and (ckpt / dynabert.Resume.BEST).is_file()
    assert not (tmp_path / "a").exists()

    lines = []
    out = dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.75), train, dev, schedule, out_dir=tmp_path / "b",
                         log=lines.append, resume=dynabert.Resume(ckpt, 3))
    assert any(line.startswith("dynabert w0.75: resuming distillation from step 3/8 (best held-out accuracy ")
               for line in lines), lines
    checks = [int(m[1]) for line in lines if (m := re.match(r"dynabert w0.75 (?:step \d+/8|epoch 1/1): step (\d+), ", line))]
    assert checks == [6, 8], lines  # no step trained twice, none skipped
    assert json.loads((ckpt / "checkpoint" / "state.json").read_text())["step"] == 8
    assert load_classifier(out, 3) is not None


def test_prune_exports_a_physically_smaller_ernie(tiny_finetuned, tmp_path, splits):
    import paddle

    train, dev = splits
    out = dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.5), train, dev, Schedule(1, 3e-3, 16, 15, 3),
                         out_dir=tmp_path / "w050", log=lambda _m: None)
    assert out == tmp_path / "w050"
    for name in ("config.json", "model_state.pdparams", "vocab.txt", "tokenizer_config.json", "labels.json"):
        assert (out / name).is_file(), name
    assert (out / "labels.json").read_text() == (tiny_finetuned["model_dir"] / "labels.json").read_text()
    config = json.loads((out / "config.json").read_text())
    assert config["num_attention_heads"] == 2 and config["intermediate_size"] == 32
    assert config["hidden_size"] == 32 and config[HEAD_SIZE_KEY] == 8

    state = paddle.load(str(out / "model_state.pdparams"), return_numpy=True)
    assert state["ernie.encoder.layers.0.self_attn.q_proj.weight"].shape == (32, 16)
    assert state["ernie.encoder.layers.0.self_attn.v_proj.bias"].shape == (16,)
    assert state["ernie.encoder.layers.0.self_attn.out_proj.weight"].shape == (16, 32)
    assert state["ernie.encoder.layers.0.linear1.weight"].shape == (32, 32)
    assert state["ernie.encoder.layers.0.linear2.weight"].shape == (32, 32)
    full = paddle.load(str(tiny_finetuned["model_dir"] / "model_state.pdparams"), return_numpy=True)
    assert sum(v.size for v in state.values()) < sum(v.size for v in full.values())

    model = load_classifier(out, 3)
    tok = Tokenizer.from_model_dir(out, MAX_SEQ_LEN)
    acc = evaluate_dygraph(model, features(tok, dev.examples), 64).accuracy
    assert acc >= 0.9, acc

    # runs as a normal ERNIE: a static inference model exported from it gives the same logits
    import paddle.inference as pi

    static = paddle.jit.to_static(model, input_spec=[paddle.static.InputSpec([-1, -1], "int64", "input_ids"),
                                                      paddle.static.InputSpec([-1, -1], "int64", "token_type_ids")])
    paddle.jit.save(static, str(tmp_path / "static" / "model"))
    cfg = pi.Config(str(tmp_path / "static" / "model.pdmodel"), str(tmp_path / "static" / "model.pdiparams"))
    cfg.disable_glog_info()
    predictor = pi.create_predictor(cfg)
    enc = tok.encode([e.text_a for e in dev.examples[:16]])
    for name, arr in zip(predictor.get_input_names(), (enc.input_ids, enc.token_type_ids)):
        handle = predictor.get_input_handle(name)
        handle.reshape(arr.shape)
        handle.copy_from_cpu(arr)
    predictor.run()
    got = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    want = model(paddle.to_tensor(enc.input_ids), token_type_ids=paddle.to_tensor(enc.token_type_ids)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_prune_is_deterministic_for_a_seed(tiny_finetuned, tmp_path, splits):
    import paddle

    train, dev = splits
    schedule = Schedule(epochs=1, learning_rate=3e-3, batch_size=16, max_steps=6, seed=5)
    a = dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.75), train, dev, schedule, out_dir=tmp_path / "a",
                       log=lambda _m: None)
    b = dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.75), train, dev, schedule, out_dir=tmp_path / "b",
                       log=lambda _m: None)
    sa = paddle.load(str(a / "model_state.pdparams"), return_numpy=True)
    sb = paddle.load(str(b / "model_state.pdparams"), return_numpy=True)
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_allclose(sa[k], sb[k], atol=1e-6, err_msg=k)


def test_prune_rejects_bad_input(tiny_finetuned, tmp_path, splits):
    train, dev = splits
    s = Schedule(epochs=1, learning_rate=1e-3, batch_size=16, max_steps=1, seed=0)
    with pytest.raises(ConfigError, match="width_mult"):
        dynabert.prune(tiny_finetuned["model_dir"], Architecture(1.5), train, dev, s, out_dir=tmp_path / "x")
    with pytest.raises(ConfigError, match="no held-out training rows"):
        dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.5), train, dev.subset([]), s, out_dir=tmp_path / "x")
    with pytest.raises(ModelError, match="not found"):
        dynabert.prune(tmp_path / "nope", Architecture(0.5), train, dev, s, out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def pruned_dir(tiny_finetuned, splits, tmp_path_factory):
    train, dev = splits
    return dynabert.prune(tiny_finetuned["model_dir"], Architecture(0.75), train, dev, Schedule(1, 3e-3, 16, 4, 0),
                          out_dir=tmp_path_factory.mktemp("p") / "w075", log=lambda _m: None)


def test_stock_paddlenlp_ernie_cannot_load_a_head_pruned_dir(pruned_dir):
    """Why pipeline.ernie_models exists: paddle's MultiHeadAttention needs hidden % heads == 0.

    If this starts passing, stock PaddleNLP learned to load head-pruned ERNIE and our subclass can go.
    """
    from paddlenlp.transformers import ErnieForSequenceClassification

    with pytest.raises(AssertionError, match="divisible by num_heads"):  # 32 hidden, 3 heads
        ErnieForSequenceClassification.from_pretrained(str(pruned_dir), num_labels=3)


def test_pipeline_load_classifier_loads_a_pruned_dir(pruned_dir):
    from pipeline.modeling import load_classifier as pipeline_load_classifier

    model = pipeline_load_classifier(pruned_dir, 3)
    assert model.ernie.encoder.layers[0].self_attn.num_heads == 3


def test_upstream_ofa_superlayernorm_still_broken(tiny_model_copy):
    """Pins the paddleslim failure this module replaces (OFA super-layers, used by upstream DynaBERT).

    On Paddle 2.6 ``_C_ops.layer_norm`` returns one tensor and SuperLayerNorm unpacks three.  When this
    test fails, paddleslim's OFA works again and could be used instead of our own slicing.
    """
    import paddle
    from paddleslim.nas.ofa.convert_super import Convert, supernet

    model = load_classifier(tiny_model_copy, 3)
    super_model = Convert(supernet(expand_ratio=[1.0])).convert(model)
    with pytest.raises(ValueError, match="values to unpack"):
        super_model.ernie.embeddings.layer_norm(paddle.randn([2, 5, 32]))


def test_distillation_checks_held_out_in_the_child_and_trains_on_exactly_as_after_dygraph(tiny_model_copy, splits,
                                                                                         monkeypatch):
    """A held-out check that fp32_evaluation sends to a child (forced here: the tiny set is quick in dygraph) exports
    the narrowed student's program mid-distillation; the steps after it are the same as after dygraph's check."""
    import paddle

    from pipeline import fp32_evaluation
    from pipeline.training import Plateau

    train, dev = splits

    def distilled(child: bool):
        monkeypatch.setattr(fp32_evaluation, "CHILD_ABOVE_S", 0.0 if child else float("inf"))
        teacher = load_classifier(tiny_model_copy, 3)
        paddle.seed(0)
        student, lines = dynabert.narrow_model(teacher, 1, 16), []
        dynabert.distill(student, teacher, train, dev, Schedule(1, 3e-3, 16, 8, 0, Plateau(eval_steps=4, patience=100)),
                         log=lines.append)
        return lines, {k: v.numpy() for k, v in student.state_dict().items()}

    (in_child, weights), (by_dygraph, expected) = distilled(True), distilled(False)
    checks = [line for line in in_child if "held-out accuracy" in line]
    assert len(checks) == 2 and all("in a child process, checked against dygraph" in line for line in checks), in_child
    assert not any("child process" in line for line in by_dygraph)
    loss = re.compile(r"distill loss (\S+)")
    assert [loss.search(line)[1] for line in checks] == [loss.search(line)[1] for line in by_dygraph if "held-out accuracy" in line]
    for name, value in expected.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)
