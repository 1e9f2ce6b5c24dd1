"""``<task>`` of a reading-comprehension bundle with package.layout fused: questions + contexts in, answers out, in
one python model.

The ensemble's three steps in one process, with the same code: ``mrc_requests.questions_and_contexts`` (the
pre-processing model's checks and refusals), ``mrc_requests.read`` (``windows.make_windows``, a verbatim copy of
``pipeline/reading/windows.py``: ``[CLS] question [SEP] context_slice [SEP]`` windows; the engine of ``runner.py``,
the ensemble's model runner, on all of a request's windows in one call; ``spans.best_spans``, a verbatim copy of
``pipeline/reading/spans.py``, over each question's windows) and ``mrc_requests.answers`` (the post-processing
model's answer).  What it saves is the two python-backend hops per request and the two stubs beside the engine.

Inputs ``question`` [N] and ``context`` [N]; outputs ``answer`` (TYPE_STRING), ``start``, ``end`` (INT64 char
offsets into the context, end exclusive) and ``score`` (FP32), [N] each; max_batch_size 0 as the ensemble's: the
windows per question vary.
"""

import sys
from pathlib import Path

import numpy  # noqa: F401  (before paddle, always)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("windows", "spans", "mrc_requests"), "reading"

    def setup(self, params):
        self.mrc_requests.setup(self, params)

    def one(self, request):
        questions, contexts = self.mrc_requests.questions_and_contexts(self, self.items(request, "question"),
                                                                       self.items(request, "context"))
        return self.mrc_requests.answers(self.mrc_requests.read(self, questions, contexts))
