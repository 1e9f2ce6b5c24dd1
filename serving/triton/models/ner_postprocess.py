"""``<task>_postprocess`` of a token-classification bundle: logits + offsets + text -> entities (JSON).

The tag of each token is ``argmax(logits)`` over the tags of labels.json (model output order);
``bio.decode_tags`` from the ``bio.py`` copied next to this file (a verbatim copy of
``pipeline/labeling/bio.py``) turns tags into entities, exactly as the offline evaluation does.
Output per text: a JSON list of ``{"type", "text", "start", "end"}`` (char offsets, end exclusive), [B, 1].  With the
parameter ``api`` fastdeploy: FastDeploy's ernie_tokencls row instead (``fastdeploy_payloads.token_entities``:
``[{'pos': [start, end_inclusive], 'label': type}]``), [B], as FastDeploy's client reads it.
"""

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


def entities_json(entities) -> bytes:
    rows = [{"type": e.type, "text": e.text, "start": int(e.start), "end": int(e.end)} for e in entities]
    return json.dumps(rows, ensure_ascii=False).encode("utf-8")


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("bio",), "postprocessing"

    def setup(self, params):
        self.payload = model_support.sibling(HERE, "fastdeploy_payloads").token_entities if self.fastdeploy else entities_json
        self.rows = (-1,) if self.fastdeploy else (-1, 1)
        rows = [json.loads(line) for line in (HERE / "labels.json").read_text(encoding="utf-8").splitlines() if line.strip()]
        self.tags = [str(r["label"]) for r in rows]

    def one(self, request):
        logits, offsets = self.tensor(request, "logits"), self.tensor(request, "offsets")
        texts = self.strings(request, "text")  # the tokenizer already checked them
        if logits.shape[-1] != len(self.tags):
            raise ValueError(f"logits have {logits.shape[-1]} tags, labels.json has {len(self.tags)}")
        width = offsets.shape[1]
        if logits.shape[1] < width:
            raise ValueError(f"logits cover {logits.shape[1]} tokens, offsets {width}")
        tag_ids = logits[:, :width].argmax(axis=-1)
        out = np.empty(len(texts), dtype=np.object_)
        for i, text in enumerate(texts):
            out[i] = self.payload(self.bio.decode_tags(tag_ids[i], offsets[i], text, self.tags))
        return {"entities": out.reshape(self.rows)}
