"""``<task>_postprocess``: logits -> softmax -> label id, label description, confidence, probs and top-k.

Labels come from the bundle's labels.json (JSON lines ``{"label", "label_desc"}``) in model
output order.  Softmax is computed in float64 and the argmax is taken on the logits, so the served
label is exactly ``argmax(logits)``, the offline prediction.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
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
        rows = [json.loads(line) for line in (HERE / "labels.json").read_text(encoding="utf-8").splitlines() if line.strip()]
        self.labels = np.array([str(r["label"]).encode("utf-8") for r in rows], dtype=np.object_)
        self.descs = np.array([str(r.get("label_desc", r["label"])).encode("utf-8") for r in rows], dtype=np.object_)

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            if logits.shape[-1] != len(self.labels):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"logits have {logits.shape[-1]} classes, labels.json has {len(self.labels)}")))
                continue
            z = logits.astype(np.float64)
            z = np.exp(z - z.max(axis=-1, keepdims=True))
            probs = z / z.sum(axis=-1, keepdims=True)
            best = logits.argmax(axis=-1)
            top = np.argsort(-logits, axis=-1, kind="stable")[:, : self.top_k]
            rows = np.arange(len(best))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("label", self.labels[best].reshape(-1, 1)),
                pb_utils.Tensor("label_desc", self.descs[best].reshape(-1, 1)),
                pb_utils.Tensor("confidence", probs[rows, best].astype(np.float32).reshape(-1, 1)),
                pb_utils.Tensor("probs", probs.astype(np.float32)),
                pb_utils.Tensor("topk_label", self.labels[top]),
                pb_utils.Tensor("topk_prob", np.take_along_axis(probs, top, axis=-1).astype(np.float32)),
            ]))
        return responses
