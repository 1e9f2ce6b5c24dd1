"""``<task>_postprocess``: logits -> softmax -> label id, label description, confidence, probs and top-k.

Labels come from the bundle's labels.json (JSON lines ``{"label", "label_desc"}``) in model
output order; the outputs are computed by the copy of ``serving/class_outputs.py`` next to this file
(softmax in float64, label = argmax of the logits: exactly the offline prediction).
"""

import importlib.util
import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"ernie_bundle_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args):
        _sibling("bundle_integrity").verify_bundle(HERE.parent.parent)
        params = {k: v.get("string_value", "") for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.top_k = int(params["top_k"])
        self.labels = _sibling("class_outputs").Labels(HERE / "labels.json")

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            if logits.shape[-1] != len(self.labels):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"logits have {logits.shape[-1]} classes, labels.json has {len(self.labels)}")))
                continue
            out = self.labels.outputs(logits, self.top_k)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in out.items()]))
        return responses
