"""The typed hand-offs between stages (pipeline.handoffs): what each stage writes for the next, read back."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import ModelError
from pipeline.handoffs import Baseline, ExportManifest, SelectedCandidate, Validation


def _baseline(**extra) -> Baseline:
    return Baseline(task="t", type="token_classification", metric="f1", metric_label="entity F1", value=0.5065,
                    metrics={"f1": 0.5065, "precision": 0.5}, dev_examples=10, dev_features=10, skipped={},
                    labels=["PER", "LOC"], model_dir="/m", max_seq_len=64, **extra)


def test_baseline_round_trip_keeps_the_file_older_readers_know(tmp_path):
    """The task metric is ``value`` (named by ``metric``) in code and stays ``accuracy`` in the file."""
    b = _baseline(classification={"macro_f1": 0.4, "majority_class_accuracy": 0.2})
    path = tmp_path / Baseline.FILE
    path.write_text(b.to_json())
    data = json.loads(path.read_text())
    assert data["accuracy"] == 0.5065 and data["metric"] == "f1" and data["macro_f1"] == 0.4
    assert Baseline.read(path) == b


@pytest.mark.parametrize("text, says", [
    ("{not json", "cannot read the finetune-check baseline"),
    ("[1, 2]", "not a finetune-check baseline"),
    ('{"task": "t", "metric": "f1"}', "field 'accuracy' missing"),
    ('{"accuracy": 0.5, "format_version": 2}', "format_version 2, this code reads 1"),
])
def test_a_damaged_hand_off_is_one_line_naming_the_file(tmp_path, text, says):
    path = tmp_path / Baseline.FILE
    path.write_text(text)
    with pytest.raises(ModelError, match=says) as info:
        Baseline.read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_selected_candidate_and_export_manifest(tmp_path):
    s = SelectedCandidate("w0.667+int8", 2 / 3, "ort", True, 0.52, 0.03, 900.0, 123, {"recipe": "x"}, "onnxruntime")
    (tmp_path / "selected.json").write_text(s.to_json())
    back = SelectedCandidate.read(tmp_path / "selected.json")
    assert back == s and back.pruned and not back.paddle_int8
    (tmp_path / "bad.json").write_text('{"width_mult": 1.0}')
    with pytest.raises(ModelError, match="field 'name' missing"):
        SelectedCandidate.read(tmp_path / "bad.json")
    meta = {"task": "t", "task_type": "classification", "metric": "accuracy", "max_seq_len": 64, "labels": ["a", "b"],
            "selected_candidate": s.as_dict(), "int8": {"chosen": {"name": "static-sq0.85-rr"}}, "extra": [1]}
    m = ExportManifest.from_dict(meta)
    assert m.int8_recipe == {"name": "static-sq0.85-rr"} and m.selected_candidate["name"] == "w0.667+int8"
    assert json.loads(m.to_json()) == meta  # written back whole
    # gates.json's int8_recipe is the shipped engine's: an engine's own section (OpenVINO's NNCF search) when it has one
    both = ExportManifest.from_dict({**meta, "openvino": {"chosen": {"name": "static-nosq"}, "file": "openvino/int8.xml"}})
    assert both.recipe_for("openvino") == {"name": "static-nosq"} and both.recipe_for("onnxruntime") == {"name": "static-sq0.85-rr"}
    assert m.recipe_for("openvino") == {"name": "static-sq0.85-rr"}  # no section of its own: ONNX Runtime's, as before
    with pytest.raises(ModelError, match="field 'max_seq_len' missing"):
        ExportManifest.from_dict({**meta, "max_seq_len": None})


def test_validation_names_forms_and_precision_in_one_place():
    data = {"task": "t", "chosen_backend": "onnxruntime-cpu-int8", "summary": {"accuracy": 0.5},
            "backends": [{"backend": "onnxruntime-cpu-fp32", "accuracy": 0.52, "metric": "accuracy", "metrics": {"macro_f1": 0.4}},
                         {"backend": "onnxruntime-cpu-int8", "accuracy": 0.51, "throughput_ratio": 2.1},
                         {"backend": "onnxruntime-cpu-int8-qdq", "accuracy": None},  # could not run
                         {"backend": "someone-elses", "accuracy": 0.9}]}
    v = Validation.from_dict(data)
    assert v.chosen_form == "onnx_int8" and v.chosen_precision == "int8"
    assert set(v.forms) == {"onnx_fp32", "onnx_int8"} and v.forms["onnx_int8"].throughput_ratio == 2.1
    assert v.by_form()["onnx_fp32"] == {"macro_f1": 0.4, "backend": "onnxruntime-cpu-fp32", "metric": "accuracy",
                                        "value": 0.52, "accuracy": 0.52}
    labelled = Validation.from_dict({**data, "summary": {"accuracy": 0.5, "metric_label": "micro-F1"}}).by_form()
    assert labelled["onnx_int8"]["metric_label"] == "micro-F1"  # how smoke and the card name it
    assert Validation.from_dict({**data, "chosen_backend": "onnxruntime-cpu-int8-qdq"}).chosen_precision == "int8_qdq"
    assert Validation.from_dict({**data, "chosen_backend": "?"}).chosen_precision is None
