"""``<task>`` of a token-classification bundle with package.layout fused: text in, entities out, in one python model.

The three steps of the ensemble layout in one process, with the same code: the copies of ``text_input.py``
(per-item checks), ``bio.py`` (``encode_tokens``/``pad_batch``: WordPiece with char offsets, the pipeline's own),
the engine of ``runner.py`` (the ensemble's model runner) and ``entity_outputs.py`` (the post-processing).  What it
saves is the two python-backend hops per request, and the two stubs that would compete with the engine's threads
for the CPU.  All texts of all requests in a batch are tokenized in one call and run in one engine call, padded to
the longest; ERNIE masks [PAD], so a text's logits do not depend on its batch beyond float rounding, and padding
tokens carry no offsets, so they never become entities.

Bad input is refused per request (that request gets an error, the others and the instance go on): non-UTF-8, empty
text, text over ``max_text_bytes``.  Long texts are truncated to max_seq_len tokens, as offline.  With the parameter
``api`` fastdeploy it is FastDeploy's ernie_tokencls: input ``INPUT`` (parameter ``text_input``), output ``OUTPUT``
(parameter ``entities_output``), rows ``fastdeploy_payloads.token_entities``, [B].
"""

import sys
from pathlib import Path

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, siblings, what = HERE, ("bio", "entity_outputs"), "inference"

    def setup(self, params):
        self.text_setup(params)  # no truncation: encode_tokens cuts to max_seq_len itself and keeps the offsets straight
        self.engine = self.runner_engine(params)
        fastdeploy = model_support.sibling(HERE, "fastdeploy_payloads") if self.fastdeploy else None
        self.entities = self.entity_outputs.Entities(HERE / "labels.json", self.bio, fastdeploy)
        self.answer_labels, self.truncates = self.entities.types, True
        self.input_name = params.get("text_input", "text")
        self.output_name = params.get("entities_output", "entities")

    def take(self, request):
        return self.texts(self.items(request, self.input_name), self.input_name)

    def run(self, parts):
        texts = [text for part in parts for text in part]
        items = self.bio.encode_tokens(self.tok, texts, self.max_seq_len)
        self.metrics.count("truncated", sum(item.truncated for item in items))
        ids, types, offsets = self.bio.pad_batch(items, self.pad_id)
        logits = np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
        counts = {}
        rows = self.entities.rows(logits, offsets, texts, counts)
        self.metrics.answers(counts)
        return rows

    def split(self, rows, parts):
        for part in model_support.slices(parts):
            yield {self.output_name: rows[part]}  # views of the batch's rows
