import json


def test_tiny_model_learns(tiny_finetuned):
    baseline = json.loads(tiny_finetuned["baseline"].read_text())
    assert baseline["accuracy"] > 0.8, baseline
    for name in ("config.json", "model_state.pdparams", "vocab.txt", "labels.json"):
        assert (tiny_finetuned["model_dir"] / name).is_file()
