"""``<task>_tokenizer`` of a reading-comprehension bundle: question + context -> model windows.

One request carries N (question, context) pairs; ``windows.make_windows`` (the ``windows.py``
copied next to this file, a verbatim copy of ``pipeline/reading/windows.py``) cuts each context
into overlapping ``[CLS] question [SEP] context_slice [SEP]`` windows, ``windows.pad_windows`` pads
them.  Outputs, all with the WINDOW count W as first dimension (W >= N, it depends on the text):
``input_ids``/``token_type_ids`` [W, T], ``offsets`` [W, T, 2] (char offsets into the context,
(-1, -1) outside it and on padding) and ``window_example`` [W] (the pair each window belongs to).
This is why the reading-comprehension chain runs with max_batch_size 0 (see serving/bundle/model_config.py).

Bad input is refused per request (``mrc_requests.questions_and_contexts``): question/context counts differ, more
than ``max_items`` pairs, non-UTF-8, empty question or context, an item over ``max_text_bytes``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("windows", "mrc_requests"), "windowing"

    def setup(self, params):
        self.mrc_requests.windowing_setup(self, params)

    def one(self, request):
        questions, contexts = self.mrc_requests.questions_and_contexts(self, self.items(request, "question"),
                                                                       self.items(request, "context"))
        wins = self.mrc_requests.make_windows(self, questions, contexts)
        ids, types, offsets, example = self.windows.window_arrays(wins, self.pad_id)
        return {"input_ids": ids, "token_type_ids": types, "offsets": offsets, "window_example": example}
