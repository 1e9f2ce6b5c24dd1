"""``<task>_postprocess`` of a token-classification bundle: logits + offsets + text -> entities (JSON).

``entity_outputs.Entities`` (copied next to this file, shared with the fused tagger) takes the argmax tag of each
token and decodes the entities with ``bio.decode_tags`` from the ``bio.py`` copied beside (a verbatim copy of
``pipeline/labeling/bio.py``), exactly as the offline evaluation does.
Output per text: a JSON list of ``{"type", "text", "start", "end"}`` (char offsets, end exclusive), [B, 1].  With the
parameter ``api`` fastdeploy: FastDeploy's ernie_tokencls row instead (``fastdeploy_payloads.token_entities``:
``[{'pos': [start, end_inclusive], 'label': type}]``), [B], as FastDeploy's client reads it.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("bio", "entity_outputs"), "postprocessing"

    def setup(self, params):
        fastdeploy = model_support.sibling(HERE, "fastdeploy_payloads") if self.fastdeploy else None
        self.entities = self.entity_outputs.Entities(HERE / "labels.json", self.bio, fastdeploy)
        self.answer_labels = self.entities.types

    def one(self, request):
        logits, offsets = self.tensor(request, "logits"), self.tensor(request, "offsets")
        texts = self.strings(request, "text")  # the tokenizer already checked them
        counts = {}
        rows = self.entities.rows(logits, offsets, texts, counts)
        self.metrics.answers(counts)
        return {"entities": rows}
