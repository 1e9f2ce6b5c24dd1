"""finetune-check's FP32 evaluation (``pipeline.fp32_evaluation``): OpenVINO on the model's saved program in a real
spawned child process gives dygraph's outputs and score; a child whose outputs differ, or that fails, leaves the
evaluation to dygraph with a line saying why; a set dygraph evaluates quickly never starts a child."""

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
