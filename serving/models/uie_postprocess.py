"""``<task>_postprocess`` of a UIE bundle: window logits -> the spans each prompt found in each text.

``spans.decode_spans`` from the ``spans.py`` copied next to this file (a verbatim copy of
``pipeline/extraction/spans.py``) thresholds the start/end sigmoids, pairs them as PaddleNLP's UIE does and
merges the windows of a (text, prompt) pair, exactly as the offline evaluation does.  Inputs: ``logits``
[W, T, 2], ``offsets`` [W, T, 2], ``window_example`` [W] from the pre-processing model, ``text`` [N] and
``schema`` [P] from the client.  Output ``results`` [N, P]: per text and prompt a JSON list of
``{"text", "start", "end", "probability"}`` (char offsets into the text, end exclusive).
"""

import json
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class _Window:
    """What decode_spans needs of a window."""

    __slots__ = ("example_index", "offsets")

    def __init__(self, example_index, offsets):
        self.example_index = example_index
        self.offsets = offsets


def _texts(tensor) -> list:
    return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in tensor.as_numpy().reshape(-1)]


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.spans = model_support.sibling(HERE, "spans")
        self.position_prob = float(params["position_prob"])
        self.max_span_len = int(params["max_span_len"])

    def _one(self, request):
        logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
        offsets = pb_utils.get_input_tensor_by_name(request, "offsets").as_numpy()
        example = pb_utils.get_input_tensor_by_name(request, "window_example").as_numpy().reshape(-1)
        texts = _texts(pb_utils.get_input_tensor_by_name(request, "text"))  # checked by the tokenizer
        schema = [p.strip() for p in _texts(pb_utils.get_input_tensor_by_name(request, "schema"))]
        if logits.ndim != 3 or logits.shape[-1] != 2:
            raise ValueError(f"logits of shape {logits.shape}, expected [windows, tokens, 2]")
        windows = [_Window(int(example[k]), offsets[k]) for k in range(len(example))]
        contents = [t for t in texts for _ in schema]
        found = self.spans.decode_spans(list(logits[:, : offsets.shape[1]]), windows, contents,
                                        position_prob=self.position_prob, max_span_len=self.max_span_len)
        rows = [json.dumps([s.as_dict() for s in spans], ensure_ascii=False).encode("utf-8") for spans in found]
        results = np.array(rows, dtype=np.object_).reshape(len(texts), len(schema))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("results", results)])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # one bad request must not fail the others
                responses.append(model_support.failed(pb_utils, "postprocessing", exc))
        return responses
