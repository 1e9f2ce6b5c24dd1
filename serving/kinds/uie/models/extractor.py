"""``<task>`` of a UIE bundle with package.layout fused: texts x schema prompts in, spans out, in one python model.

The ensemble's three steps in one process, with the same code: ``uie_requests.texts_and_schema`` (the
pre-processing model's checks and refusals), ``uie_requests.extract`` (``windows.make_windows``, a verbatim copy of
``pipeline/reading/windows.py``: every text asked every prompt, pair ``n * P + p``, windowed ``[CLS] prompt [SEP]
text_slice [SEP]``; the engine of ``runner.py``, the ensemble's model runner, on all of a request's windows in one
call; ``spans.decode_spans``, a verbatim copy of ``pipeline/extraction/spans.py``; as FastDeploy's uie runs them)
and ``uie_requests.results`` (the post-processing model's answer).  What it saves is the two python-backend hops per
request and the two stubs that would compete with the engine's threads for the cores.

Inputs ``text`` [N] and ``schema`` [P], output ``results`` [N, P] (per text and prompt a JSON list of ``{"text",
"start", "end", "probability"}``), max_batch_size 0 as the ensemble's: the windows per request vary.
"""

import sys
from pathlib import Path

import numpy  # noqa: F401  (before paddle, always)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("windows", "spans", "uie_requests"), "extraction"

    def setup(self, params):
        self.uie_requests.setup(self, params)

    def one(self, request):
        texts, schema = self.uie_requests.texts_and_schema(self, self.items(request, "text"), self.items(request, "schema"))
        found = self.uie_requests.extract(self, *self.uie_requests.pairs(texts, schema))
        return {"results": self.uie_requests.results(found, len(texts), len(schema))}
