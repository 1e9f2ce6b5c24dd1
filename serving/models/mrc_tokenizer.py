"""``<task>_tokenizer`` of a reading-comprehension bundle: question + context -> model windows.

One request carries N (question, context) pairs; ``windows.make_windows`` (the ``windows.py``
copied next to this file, a verbatim copy of ``pipeline/reading/windows.py``) cuts each context
into overlapping ``[CLS] question [SEP] context_slice [SEP]`` windows, ``windows.pad_windows`` pads
them.  Outputs, all with the WINDOW count W as first dimension (W >= N, it depends on the text):
``input_ids``/``token_type_ids`` [W, T], ``offsets`` [W, T, 2] (char offsets into the context,
(-1, -1) outside it and on padding) and ``window_example`` [W] (the pair each window belongs to).
This is why the reading-comprehension chain runs with max_batch_size 0 (see serving/model_config.py).

Bad input is refused per request: question/context counts differ, more than ``max_items`` pairs,
non-UTF-8, empty question or context, an item over ``max_text_bytes``.
"""

import sys
from pathlib import Path

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.windows = model_support.sibling(HERE, "windows")
        self.text_input = model_support.sibling(HERE, "text_input")
        self.max_seq_len = int(params["max_seq_len"])
        self.doc_stride = int(params["doc_stride"])
        self.max_query_len = int(params["max_query_len"])
        self.max_text_bytes = int(params["max_text_bytes"])
        self.max_items = int(params.get("max_items", "0") or 0)  # 0: no limit
        # No truncation, no padding: make_windows slices and pads itself.
        self.tok = self.text_input.wordpiece(HERE)
        self.pad_id = self.tok.token_to_id("[PAD]")

    def _one(self, request):
        questions = pb_utils.get_input_tensor_by_name(request, "question").as_numpy().reshape(-1)
        contexts = pb_utils.get_input_tensor_by_name(request, "context").as_numpy().reshape(-1)
        bad = self.text_input.BadText
        if len(questions) != len(contexts):
            raise bad(f"{len(questions)} questions but {len(contexts)} contexts: send one context per question")
        if not len(questions):
            raise bad("no questions in the request")
        if self.max_items and len(questions) > self.max_items:
            raise bad(f"{len(questions)} questions in one request, over the limit of {self.max_items} (max_batch_size)")
        qs = [self.text_input.decode_item(x, "question", j, self.max_text_bytes) for j, x in enumerate(questions)]
        cs = [self.text_input.decode_item(x, "context", j, self.max_text_bytes) for j, x in enumerate(contexts)]
        wins = self.windows.make_windows(self.tok, qs, cs, max_seq_len=self.max_seq_len, doc_stride=self.doc_stride,
                                         max_query_len=self.max_query_len)
        ids, types, offsets, example = self.windows.window_arrays(wins, self.pad_id)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("token_type_ids", types),
            pb_utils.Tensor("offsets", offsets), pb_utils.Tensor("window_example", example)])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except self.text_input.BadText as exc:
                responses.append(model_support.refused(pb_utils, str(exc)))
            except Exception as exc:  # never let one request take the instance down
                responses.append(model_support.failed(pb_utils, "windowing", exc))
        return responses
