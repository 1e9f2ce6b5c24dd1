"""The FP32 dev evaluation of finetune-check and fine-tune (``pipeline.fp32_evaluation``): OpenVINO on the model's
saved program in a real spawned child process gives dygraph's outputs and score; a child whose outputs differ, or that
fails, leaves the evaluation to dygraph with a line saying why; a set dygraph evaluates quickly never starts a child;
fine-tune trains on after the child's evaluation exactly as after dygraph's."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

from pipeline import fp32_evaluation
from pipeline.evaluation import evaluate_dygraph


@pytest.fixture(scope="module")
def tiny(tiny_finetuned):
    from pipeline.config import load_task_config
    from pipeline.kinds import get_kind, load_task_data
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer

    cfg = load_task_config(str(tiny_finetuned["task_yaml"]))
    kind, data = get_kind(cfg), load_task_data(cfg)
    model_dir = tiny_finetuned["model_dir"]
    model = load_classifier(model_dir, len(data.labels), kind.model_class())
    dev = kind.featurize(Tokenizer.from_model_dir(model_dir, cfg.max_seq_len), data.dev.examples, cfg)
    return model, dev, evaluate_dygraph(model, dev, 16)


def test_the_child_gives_dygraphs_outputs_and_score(tiny, monkeypatch):
    model, dev, dygraph = tiny
    monkeypatch.setattr(fp32_evaluation, "CHILD_ABOVE_S", 0.0)
    lines: list[str] = []
    ev, how = fp32_evaluation.evaluate(model, dev, 16, "fp32 test", lines.append)
    assert "child process" in how and "checked against dygraph on 16 features" in how, (how, lines)
    assert not lines
    np.testing.assert_allclose(ev.flat(), dygraph.flat(), atol=fp32_evaluation.ATOL, rtol=0)
    assert ev.metric == dygraph.metric
    model.train()
    fp32_evaluation.evaluate(model, dev, 16, "fp32 test", lines.append)
    assert model.training  # evaluated in eval mode (no dropout), then given back in the mode it came in
    model.eval()


def test_a_quick_set_stays_in_dygraph(tiny, monkeypatch):
    model, dev, dygraph = tiny

    def no_child(*args):
        raise AssertionError("a child was started for a set dygraph evaluates in well under CHILD_ABOVE_S")

    monkeypatch.setattr(fp32_evaluation, "_in_child", no_child)
    ev, how = fp32_evaluation.evaluate(model, dev, 16, "fp32 test", print)
    assert how == ""
    np.testing.assert_array_equal(ev.flat(), dygraph.flat())


@pytest.mark.parametrize("child, said", [
    (lambda outputs: [o + 0.01 for o in outputs], "the child's openvino outputs differ from dygraph's on the first batch (max 0.01 > 0.0001)"),
    (BrokenProcessPool("the child died"), "not evaluated in a child process (BrokenProcessPool"),
])
def test_a_child_that_differs_or_fails_leaves_it_to_dygraph(tiny, monkeypatch, child, said):
    model, dev, dygraph = tiny
    monkeypatch.setattr(fp32_evaluation, "CHILD_ABOVE_S", 0.0)

    def fake_child(model, fs, order, desc):
        if isinstance(child, Exception):
            raise child
        return child([np.asarray(model_outputs, np.float32) for model_outputs in _raw_batches(fs, order, dygraph)])

    monkeypatch.setattr(fp32_evaluation, "_in_child", fake_child)
    lines: list[str] = []
    ev, how = fp32_evaluation.evaluate(model, dev, 16, "fp32 test", lines.append)
    assert how == "" and len(lines) == 1 and said in lines[0], lines
    assert lines[0].endswith("evaluating in dygraph")
    np.testing.assert_array_equal(ev.flat(), dygraph.flat())


def _raw_batches(fs, order, ev):
    """Each batch's outputs as a session gives them (classification: one row per feature)."""
    return [np.stack([ev.outputs[int(i)] for i in idx]) for idx in order]


def test_finetune_check_runs_its_pass_in_the_child(tmp_path, monkeypatch, capsys):
    """The stage's own path: a Hugging Face checkpoint with the task's head (converted, nothing trained, so no kept
    outputs) is evaluated in the child, and its dev logits are still the ones transformers gave on the same texts
    (tests/golden/hf)."""
    from pipeline.cli import main
    from tests.test_hf_import import ATOL, GOLDEN, INPUTS, _task, golden

    monkeypatch.setattr(fp32_evaluation, "CHILD_ABOVE_S", 0.0)
    texts = [t for t in INPUTS["texts"] if t]
    task, runs = _task(tmp_path, texts), tmp_path / "runs"
    args = ["--task", str(task), "--runs-dir", str(runs), "--model", str(GOLDEN / "bert-sequence")]
    assert main(["run", *args, "--until", "finetune-check"]) == 0
    assert "(openvino FP32 of the saved program in a child process, checked against dygraph" in capsys.readouterr().out
    dev_logits = np.load(runs / "tiny" / "finetune-check" / "out" / "dev_logits.npy")
    np.testing.assert_allclose(dev_logits, golden("bert-sequence")["logits"][: len(texts)], atol=ATOL, rtol=0)


def test_fine_tune_evaluates_in_the_child_and_trains_on_exactly_as_after_dygraph(tiny_finetuned, tmp_path, monkeypatch):
    """Fine-tune's evaluation after an epoch saves the program and runs a child; the training after it is the same,
    step for step, as after dygraph's evaluation (the save leaves the model's weights, mode and random state alone),
    and the kept dev outputs of the child's evaluation pass ``dev_outputs``' check of the same weights in dygraph."""
    import dataclasses

    from pipeline import dev_outputs
    from pipeline.config import load_task_config
    from pipeline.evaluation import dygraph_forward
    from pipeline.kinds import get_kind, load_task_data
    from pipeline.modeling import load_classifier
    from pipeline.tokenizer import Tokenizer
    from pipeline.training import finetune

    cfg = load_task_config(str(tiny_finetuned["task_yaml"]))
    kind, data = get_kind(cfg), load_task_data(cfg)
    model_dir = tiny_finetuned["model_dir"]
    tokenizer = Tokenizer.from_model_dir(model_dir, cfg.max_seq_len)
    train, dev = (kind.featurize(tokenizer, split.examples, cfg) for split in (data.train, data.dev))
    ft = dataclasses.replace(cfg.finetune, epochs=2, batch_size=16, learning_rate=1e-4, max_train_samples=64)

    def fine_tune(name: str, child: bool):
        import paddle

        monkeypatch.setattr(fp32_evaluation, "CHILD_ABOVE_S", 0.0 if child else float("inf"))
        paddle.seed(ft.seed)
        model, kept, lines = load_classifier(model_dir, len(data.labels), kind.model_class()), [], []
        keep = lambda m, ev: kept.append((ev, {k: v.numpy().copy() for k, v in m.state_dict().items()}))  # noqa: E731
        result = finetune(model, train, dev, ft, tmp_path / name, keep, lines.append)
        return result, kept, lines, {k: v.numpy() for k, v in model.state_dict().items()}

    in_child, by_dygraph = fine_tune("child", True), fine_tune("dygraph", False)
    lines = [line for line in in_child[2] if line.startswith("fine-tune epoch")]
    assert len(lines) == 2 and all("openvino FP32 of the saved program in a child process" in line for line in lines), in_child[2]
    assert not any("child process" in line for line in by_dygraph[2])
    assert [h["train_loss"] for h in in_child[0].history] == [h["train_loss"] for h in by_dygraph[0].history]
    for name, weights in by_dygraph[3].items():
        np.testing.assert_array_equal(in_child[3][name], weights, err_msg=name)

    ev, best = in_child[1][-1]
    assert ev.atol == fp32_evaluation.ATOL
    model = load_classifier(model_dir, len(data.labels), kind.model_class())
    model.set_state_dict(best)
    model.eval()
    path = tmp_path / dev_outputs.FILE
    dev_outputs.save(path, ev, dev, ft.eval_batch_size)
    assert dev_outputs.reuse(path, dev, dygraph_forward(model), ft.eval_batch_size)[0] is not None
    # The kept file carries the child's tolerance: half of it passes, though it is 5x dygraph's own (dev_outputs.ATOL)
    for shift, atol, reused in ((fp32_evaluation.ATOL / 2, ev.atol, True), (fp32_evaluation.ATOL / 2, 0.0, False),
                                (2 * fp32_evaluation.ATOL, ev.atol, False)):
        shifted = dataclasses.replace(ev, outputs=[o + shift for o in ev.outputs], atol=atol)
        dev_outputs.save(path, shifted, dev, ft.eval_batch_size)
        got = dev_outputs.reuse(path, dev, dygraph_forward(model), ft.eval_batch_size)[0]
        assert (got is not None) == reused, (shift, atol)
