"""``<task>`` with package.layout fused: text in, label/confidence/probs/top-k out, in one python model.

The three steps of the ensemble layout in one process, with the same code: the copies of ``text_input.py``
(per-item checks) and ``wordpiece.py`` (PaddleNLP's tokenization), the engine of ``runner.py`` (the
ensemble's model runner) and ``class_outputs.py`` (the post-processing).  What it saves is the two
python-backend hops per request (serialization to the tokenizer and post-processing stubs and back).
All texts of all requests in a batch are tokenized in one call and run in one engine call, padded to the
longest; ERNIE masks [PAD], so a text's logits do not depend on its batch beyond float rounding.

Bad input is refused per request (that request gets an error, the others and the instance go on).
With the parameter ``api`` fastdeploy it is FastDeploy's ernie_seqcls: input ``INPUT`` (parameter ``text_input``),
outputs ``label`` (class index) and ``confidence`` (class_outputs.index_outputs).
"""

import sys
from pathlib import Path

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, siblings, what = HERE, ("class_outputs",), "inference"

    def setup(self, params):
        self.text_setup(params, truncate=True)  # truncated as offline
        self.top_k = int(params["top_k"])
        self.engine = self.runner_engine(params)
        self.labels = self.class_outputs.Labels(HERE / "labels.json")
        self.input_name = params.get("text_input", "text")

    def take(self, request):
        return self.texts(self.items(request, self.input_name), self.input_name)

    def run(self, parts):
        encodings = self.tok.encode_batch([text for texts in parts for text in texts])
        ids, types = self.text_input.pad_encodings(encodings, self.pad_id)
        logits = np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
        return self.class_outputs.index_outputs(logits) if self.fastdeploy else self.labels.outputs(logits, self.top_k)

    def split(self, out, parts):
        for rows in model_support.slices(parts):
            yield {k: np.ascontiguousarray(v[rows]) for k, v in out.items()}
