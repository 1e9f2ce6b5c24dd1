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

import numpy as np
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class _Window:
    """What best_spans needs of a window."""

    __slots__ = ("example_index", "offsets")

    def __init__(self, example_index, offsets):
        self.example_index = example_index
        self.offsets = offsets


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.spans = model_support.sibling(HERE, "spans")
        self.max_answer_len = int(params["max_answer_len"])
        self.n_best = int(params.get("n_best", "20"))

    def _one(self, request):
        logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
        offsets = pb_utils.get_input_tensor_by_name(request, "offsets").as_numpy()
        example = pb_utils.get_input_tensor_by_name(request, "window_example").as_numpy().reshape(-1)
        raw = pb_utils.get_input_tensor_by_name(request, "context").as_numpy().reshape(-1)
        contexts = [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in raw]  # checked by the tokenizer
        if logits.ndim != 3 or logits.shape[-1] != 2:
            raise ValueError(f"logits of shape {logits.shape}, expected [windows, tokens, 2]")
        # Padding rows have offsets (-1, -1): best_spans never picks them, as offline.
        windows = [_Window(int(example[k]), offsets[k]) for k in range(len(example))]
        found = self.spans.best_spans(list(logits[:, : offsets.shape[1]]), windows, contexts,
                                      max_answer_len=self.max_answer_len, n_best=self.n_best)
        n = len(contexts)
        answer = np.array([(s.text if s else "").encode("utf-8") for s in found], dtype=np.object_).reshape(n)
        start = np.array([s.start if s else -1 for s in found], dtype=np.int64).reshape(n)
        end = np.array([s.end if s else -1 for s in found], dtype=np.int64).reshape(n)
        score = np.array([s.score if s else -np.inf for s in found], dtype=np.float32).reshape(n)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("answer", answer), pb_utils.Tensor("start", start),
            pb_utils.Tensor("end", end), pb_utils.Tensor("score", score)])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # one bad request must not fail the others
                responses.append(model_support.failed(pb_utils, "postprocessing", exc))
        return responses
