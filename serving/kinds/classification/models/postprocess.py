"""``<task>_postprocess``: logits -> softmax -> label id, label description, confidence, probs and top-k.

Labels come from the bundle's labels.json (JSON lines ``{"label", "label_desc"}``) in model
output order; the outputs are computed by the copy of ``class_outputs.py`` (in this folder) next to this file
(softmax in float64, label = argmax of the logits: exactly the offline prediction).  With the parameter
``threshold`` (a multi-label classifier) it answers every label ranked and how many are above it
(``class_outputs.LabelSets``: the logits compared with the threshold's log-odds, as offline).  With the parameter
``api`` fastdeploy it answers FastDeploy's ernie_seqcls outputs instead: ``label`` (class index) and ``confidence``.
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, siblings, what = HERE, ("class_outputs",), "postprocessing"

    def setup(self, params):
        self.top_k = int(params["top_k"])
        self.labels = self.class_outputs.label_outputs(HERE / "labels.json", params)  # one label, or a set
        self.answer_labels = self.labels.names

    def take(self, request):
        logits = self.tensor(request, "logits")
        if logits.ndim != 2 or logits.shape[-1] != len(self.labels):
            raise model_support.Refused(f"logits {list(logits.shape)}: expected [texts, {len(self.labels)}] "
                                        f"(labels.json has {len(self.labels)} classes)")
        return logits

    def run(self, parts):
        logits = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self.metrics.answers(self.labels.answer_counts(logits))
        if self.fastdeploy:
            return self.class_outputs.index_outputs(logits)
        return self.labels.outputs(logits, self.top_k, self.wanted)
