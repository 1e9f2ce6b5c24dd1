"""``<task>`` with package.layout fused: text in, label/confidence/probs/top-k out, in one python model.

The three steps of the ensemble layout in one process, with the same code: the copies of ``text_input.py``
(per-item checks) and ``wordpiece.py`` (PaddleNLP's tokenization), the engine of ``runner.py`` (the
ensemble's model runner) and ``class_outputs.py`` (the post-processing).  What it saves is the two
python-backend hops per request (serialization to the tokenizer and post-processing stubs and back).
All texts of all requests in a batch are tokenized in one call and run in one engine call, padded to the
longest; ERNIE masks [PAD], so a text's logits do not depend on its batch beyond float rounding.  A pair
classifier (OCNLI, AFQMC) takes ``text`` and ``text_pair``, one of each per item, encoded as offline
(``[CLS] a [SEP] b [SEP]``, PaddleNLP's longest_first cut).

With the parameter ``threshold`` (a multi-label classifier) it answers label sets (``class_outputs.LabelSets``).

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
        self.text_setup(params, truncate=True, pad=True)  # truncated as offline; a batch comes out padded
        self.top_k = int(params["top_k"])
        self.engine = self.runner_engine(params)
        self.labels = self.class_outputs.label_outputs(HERE / "labels.json", params)  # one label, or a set
        self.answer_labels = self.labels.names
        self.input_name = params.get("text_input", "text")

    def take(self, request):
        return self.take_texts(request, self.input_name)

    def run(self, parts):
        ids, types = self.encode(parts)
        logits = np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
        self.metrics.answers(self.labels.answer_counts(logits))
        if self.fastdeploy:
            return self.class_outputs.index_outputs(logits)
        return self.labels.outputs(logits, self.top_k, self.wanted)
