"""``<task>_postprocess``: logits -> softmax -> label id, label description, confidence, probs and top-k.

Labels come from the bundle's labels.json (JSON lines ``{"label", "label_desc"}``) in model
output order; the outputs are computed by the copy of ``serving/class_outputs.py`` next to this file
(softmax in float64, label = argmax of the logits: exactly the offline prediction).  With the parameter
``api`` fastdeploy it answers FastDeploy's ernie_seqcls outputs instead: ``label`` (class index) and ``confidence``.
"""

import sys
from pathlib import Path

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.top_k = int(params["top_k"])
        self.class_outputs = model_support.sibling(HERE, "class_outputs")
        self.labels = self.class_outputs.Labels(HERE / "labels.json")
        self.fastdeploy = params.get("api") == "fastdeploy"

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            if logits.shape[-1] != len(self.labels):
                responses.append(model_support.refused(
                    pb_utils, f"logits have {logits.shape[-1]} classes, labels.json has {len(self.labels)}"))
                continue
            out = self.class_outputs.index_outputs(logits) if self.fastdeploy else self.labels.outputs(logits, self.top_k)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in out.items()]))
        return responses
