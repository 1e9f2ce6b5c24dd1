"""``<task>_postprocess`` of a UIE bundle: window logits -> the spans each prompt found in each text.

``spans.decode_spans`` from the ``spans.py`` copied next to this file (a verbatim copy of
``pipeline/extraction/spans.py``) thresholds the start/end sigmoids, pairs them as PaddleNLP's UIE does and
merges the windows of a (text, prompt) pair, exactly as the offline evaluation does.  Inputs: ``logits``
[W, T, 2], ``offsets`` [W, T, 2], ``window_example`` [W] from the pre-processing model, ``text`` [N] and
``schema`` [P] from the client.  Output ``results`` [N, P]: per text and prompt a JSON list of
``{"text", "start", "end", "probability"}`` (char offsets into the text, end exclusive).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("spans", "uie_requests"), "postprocessing"

    def setup(self, params):
        self.position_prob = float(params["position_prob"])
        self.max_span_len = int(params["max_span_len"])

    def one(self, request):
        logits, offsets = self.tensor(request, "logits"), self.tensor(request, "offsets")
        example = self.items(request, "window_example")
        texts = self.strings(request, "text")  # checked by the tokenizer
        schema = [p.strip() for p in self.strings(request, "schema")]
        if logits.ndim != 3 or logits.shape[-1] != 2:
            raise ValueError(f"logits of shape {logits.shape}, expected [windows, tokens, 2]")
        _, contents = self.uie_requests.pairs(texts, schema)
        found = self.spans.decode_spans(list(logits[:, : offsets.shape[1]]), model_support.windows(example, offsets),
                                        contents, position_prob=self.position_prob, max_span_len=self.max_span_len)
        return {"results": self.uie_requests.results(found, len(texts), len(schema))}
