"""``<task>_postprocess`` of a reading-comprehension bundle: window logits -> the best answer per question.

``spans.best_spans`` from the ``spans.py`` copied next to this file (a verbatim copy of
``pipeline/reading/spans.py``) picks, per question, the best valid (start, end) over all of its
windows, exactly as the offline evaluation does.  Inputs: ``logits`` [W, T, 2], ``offsets``
[W, T, 2], ``window_example`` [W] from the pre-processing model, ``context`` [N] from the client.
Outputs per question: ``answer`` (text), ``start``/``end`` (char offsets into the context, end
exclusive) and ``score`` (start + end logit).  No valid span (possible only for a context that
tokenizes to nothing): answer "", start = end = -1, score -inf.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("spans", "mrc_requests"), "postprocessing"

    def setup(self, params):
        self.mrc_requests.decoding_setup(self, params)

    def one(self, request):
        logits, offsets = self.tensor(request, "logits"), self.tensor(request, "offsets")
        example = self.items(request, "window_example")
        contexts = self.strings(request, "context")  # checked by the tokenizer
        if logits.ndim != 3 or logits.shape[-1] != 2:
            raise ValueError(f"logits of shape {logits.shape}, expected [windows, tokens, 2]")
        # Padding rows have offsets (-1, -1): best_spans never picks them, as offline.
        found = self.spans.best_spans(list(logits[:, : offsets.shape[1]]), model_support.windows(example, offsets), contexts,
                                      max_answer_len=self.max_answer_len, n_best=self.n_best)
        return self.mrc_requests.answers(found)
